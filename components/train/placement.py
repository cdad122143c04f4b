"""Where training runs: the hardware, the Keras backend, the devices and processes, and the precision.

TPUs train with Keras 3 on JAX: TensorFlow 2.21 has no TPU support (``tensorflow-tpu`` stops at 2.20, and the plain
wheel has no TPU loader), so a TPU is always reached through ``jax[tpu]``. There, ``keras.distribution.DataParallel``
spreads each global batch over every device on the batch axis and replicates the variables; on a slice of several
hosts, ``jax.distributed`` connects one process per host first (``components.train.hosts``). On GPUs and the CPU
either backend runs: ``MirroredStrategy`` over the GPUs or logical CPU devices for TensorFlow, ``DataParallel`` for
JAX.

The deciding functions (``detect_hardware``, ``choose_backend``, ``choose_precision``) do no I/O of their own and are
tested as they are; ``place`` acts on the process.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from components.cli import UsageError, one_line
from components.train.hosts import PROCESS_VARIABLES, connect_processes, log_cluster_environment, process_launch

log = logging.getLogger(__name__)


BACKENDS = ("auto", "jax", "tensorflow")


PRECISIONS = ("auto", "float32", "mixed_bfloat16")


# Cloud TPU VMs expose their chips as /dev/accel* (v4, v5p) or /dev/vfio/<n> (v5e, v6e), and on the PCI bus under
# Google's vendor id (what JAX's own Cloud TPU detection looks for)
TPU_DEVICE_FILES = ("/dev/accel0", "/dev/vfio/0")


TPU_PCI_VENDOR = "0x1ae0"


GPU_DEVICE_FILES = ("/dev/nvidia0",)


# Off TPUs, `--backend auto` takes the backend bench/train.py measured faster on that kind of hardware.
FASTER_BACKEND = {
    "cpu": (
        "tensorflow",
        "bench/train.py measured TensorFlow faster than JAX for image models on CPUs, in the precision auto takes "
        "there (bench/RESULTS.md)",
    ),
    "gpu": (
        "tensorflow",
        "the GPU image carries TensorFlow's CUDA build and no JAX CUDA plugin (bench/train.py has measured JAX "
        "alone on a GPU; bench/RESULTS.md)",
    ),
}


# text models measured apart (bench/train.py --model lstm): in float32 the recurrent loop turns the CPU's choice
# around; in bfloat16 TensorFlow stays faster
FASTER_TEXT_BACKEND = {
    "cpu": (
        "jax",
        "bench/train.py --model lstm measured JAX faster than TensorFlow for text models on CPUs in float32 "
        "(in bfloat16 TensorFlow was faster, and trains text models in it; bench/RESULTS.md)",
    ),
}


FASTER_TEXT_BACKEND_BFLOAT16 = {
    "cpu": (
        "tensorflow",
        "bench/train.py --model lstm measured TensorFlow faster than JAX for text models on CPUs in bfloat16, the "
        "precision auto takes there (bench/RESULTS.md)",
    ),
}


# the CPU flags `auto` follows, in place of /proc/cpuinfo's: a host profile (tests, benches)
CPU_FLAGS_VARIABLE = "TPU_PIPELINE_CPU_FLAGS"


def detect_hardware(
    exists: Callable[[str], bool] = os.path.exists, pci_vendors: Callable[[], list[str]] | None = None
) -> str:
    """``tpu`` on a Cloud TPU VM, ``gpu`` where an NVIDIA device is present, else ``cpu``. Found without importing
    either framework, since the backend has to be chosen before Keras is imported."""
    if any(exists(p) for p in TPU_DEVICE_FILES) or TPU_PCI_VENDOR in (pci_vendors or _pci_vendors)():
        return "tpu"
    if any(exists(p) for p in GPU_DEVICE_FILES):
        return "gpu"
    return "cpu"


def _pci_vendors() -> list[str]:
    vendors = []
    for path in glob.glob("/sys/bus/pci/devices/*/vendor"):
        with contextlib.suppress(OSError), open(path) as handle:
            vendors.append(handle.read().strip())
    return vendors


def choose_backend(
    requested: str,
    hardware: str,
    env: Mapping[str, str],
    hosts: int = 1,
    modality: str = "image",
    bfloat16: bool = False,
) -> tuple[str, str]:
    """(backend, why). TPUs and several processes (``hosts`` > 1, or the launch variables set) always get JAX;
    ``auto`` elsewhere honours ``KERAS_BACKEND`` when it is set, else takes the backend the bench measured faster on
    that hardware for that modality's models (text models in float32 only: ``bfloat16``, training will run in it).
    ``tensorflow`` where only JAX can train is a one-line error."""
    source = "--backend"
    if requested == "auto" and env.get("KERAS_BACKEND") in ("jax", "tensorflow"):
        requested, source = env["KERAS_BACKEND"], "KERAS_BACKEND"
    process_launch(hosts, env)  # a malformed launch fails here, before the slow imports
    launched = [name for name in PROCESS_VARIABLES if env.get(name)]
    if hosts > 1 or launched:
        several = f"--hosts {hosts}" if hosts > 1 else ", ".join(launched)
        if requested == "tensorflow":
            raise UsageError(
                f"{source} tensorflow cannot train over several processes ({several}): TensorFlow here trains on one "
                "host; use --backend jax (or auto)"
            )
        return "jax", f"several processes ({several}): jax.distributed"
    if hardware == "tpu":
        if requested == "tensorflow":
            raise UsageError(
                f"{source} tensorflow cannot train on this TPU: TensorFlow 2.21 has no TPU support (tensorflow-tpu "
                "stops at 2.20); use --backend jax (or auto), which reaches the TPU through jax[tpu]"
            )
        return "jax", "TPUs train with Keras on JAX"
    if requested != "auto":
        return requested, f"{source} {requested}"
    text = FASTER_TEXT_BACKEND_BFLOAT16 if bfloat16 else FASTER_TEXT_BACKEND
    measured = text if modality == "text" and hardware in text else FASTER_BACKEND
    backend, why = measured[hardware]
    return backend, f"auto on {hardware}: {why}"


def backend_here(
    requested: str, precision: str, hosts: int, modality: str, env: Mapping[str, str]
) -> tuple[str, str, str]:
    """The backend a training of these parameters takes on this machine: (backend, why, hardware)."""
    hardware = detect_hardware()
    bfloat16 = hardware == "cpu" and choose_precision(precision, "cpu", cpu_flags=read_cpu_flags()) != "float32"
    return (*choose_backend(requested, hardware, env, hosts, modality, bfloat16), hardware)


def trains_on_tensorflow(requested: str, precision: str, hosts: int, examples_dir: str) -> bool:
    """Whether the train step of these parameters will run on TensorFlow, read before it logs a line (False where it
    cannot tell: a mistake, which the step reports once it has started): run-local's step server, whose Keras is
    loaded on TensorFlow, runs those trainings warm (``components.step_server``)."""
    from components.modalities import modality_of
    from components.schema import read_stats

    try:
        modality = modality_of(read_stats(examples_dir)).name
        return backend_here(requested, precision, hosts, modality, os.environ)[0] == "tensorflow"
    except Exception:
        return False


def choose_precision(requested: str, accelerator: str, gpu_compute_capability=None, cpu_flags=frozenset()) -> str:
    """``auto`` -> ``mixed_bfloat16`` on TPUs, on GPUs from Ampere (compute capability 8.0) on, and on CPUs with AMX
    or AVX512-BF16; ``float32`` otherwise. An explicit choice is kept."""
    if requested != "auto":
        return requested
    if accelerator == "tpu":
        return "mixed_bfloat16"
    if accelerator == "gpu":
        return "mixed_bfloat16" if gpu_compute_capability and tuple(gpu_compute_capability) >= (8, 0) else "float32"
    return "mixed_bfloat16" if {"amx_bf16", "avx512_bf16"} & set(cpu_flags) else "float32"


def read_cpu_flags(cpuinfo: str = "/proc/cpuinfo", env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The CPU's feature flags (``avx512_bf16``, ``amx_bf16``, ...), which ``--precision auto`` follows.
    ``TPU_PIPELINE_CPU_FLAGS`` (flags separated by spaces or commas), when set, stands in for the CPU's own: a host
    profile, so that a test or a bench chooses as another CPU would (``make test PROFILE=amx``)."""
    override = (os.environ if env is None else env).get(CPU_FLAGS_VARIABLE)
    if override is not None:
        return frozenset(override.replace(",", " ").split())
    try:
        with open(cpuinfo) as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def activate_jax_cpu_devices(cpu_devices: int, env: dict | None = None) -> None:
    """Gives JAX ``cpu_devices`` virtual CPU devices (XLA host devices), which has to happen before JAX starts."""
    env = os.environ if env is None else env
    if cpu_devices <= 1:
        return
    if "jax" in sys.modules:
        import jax

        if jax.device_count("cpu") != cpu_devices:
            raise UsageError(f"--cpu-replicas {cpu_devices}: JAX was already initialised in this process")
        return
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={cpu_devices}"])


@dataclass
class Placement:
    """Where the model trains. ``scope()`` wraps building, compiling and fitting the model."""

    backend: str
    accelerator: str  # tpu, gpu or cpu
    devices: int  # devices over all processes: the number of model replicas
    strategy: str  # DataParallel, MirroredStrategy or OneDevice
    processes: int = 1
    process_index: int = 0
    why: str = ""
    _scope: Callable = field(default=contextlib.nullcontext, repr=False)
    distribution: object = field(default=None, repr=False)  # keras.distribution.DataParallel on JAX

    @property
    def is_chief(self) -> bool:
        """Only process 0 writes the model, the logs and the checkpoints."""
        return self.process_index == 0

    def scope(self):
        return self._scope()

    def check_agreement(self, value: int, what: str, fix: str) -> None:
        """A one-line error unless every process holds the same ``value`` (a no-op with one process)."""
        if self.processes > 1:
            import numpy as np
            from jax.experimental import multihost_utils

            values = np.asarray(multihost_utils.process_allgather(np.int32(value))).ravel().tolist()
            if len(set(values)) > 1:
                raise UsageError(f"the hosts disagree on {what} ({values} by process): {fix}")

    def from_chief(self, value: int) -> int:
        """Process 0's ``value`` on every process (``value`` itself with one): a decision all must share."""
        if self.processes > 1:
            import numpy as np
            from jax.experimental import multihost_utils

            return int(multihost_utils.broadcast_one_to_all(np.int32(value)))
        return value

    def from_chief_arrays(self, arrays: list) -> list:
        """Process 0's list of arrays on every process (``arrays`` itself with one); each process passes a list of
        the same shapes."""
        if self.processes > 1:
            import numpy as np
            from jax.experimental import multihost_utils

            return [np.asarray(array) for array in multihost_utils.broadcast_one_to_all(list(arrays))]
        return arrays

    def barrier(self, name: str) -> None:
        """Waits for every process (a no-op with one)."""
        if self.processes > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(name)


def place(backend: str, why: str, hardware: str, cpu_replicas: int, hosts: int, env: Mapping[str, str]) -> Placement:
    """Sets up the devices for ``backend`` (already active, see ``components.keras_backend``) on ``hardware`` and
    logs the result."""
    placement = _place_jax(hardware, hosts, env) if backend == "jax" else _place_tensorflow(cpu_replicas)
    placement.why = why
    log.info(
        "backend %s (%s): %s over %d %s device(s) in %d process(es)",
        placement.backend,
        why,
        placement.strategy,
        placement.devices,
        placement.accelerator,
        placement.processes,
    )
    return placement


def _place_tensorflow(cpu_replicas: int) -> Placement:
    import tensorflow as tf

    split_cpu(cpu_replicas)
    if tf.config.list_logical_devices("GPU"):
        strategy, accelerator = tf.distribute.MirroredStrategy(), "gpu"
    elif len(cpus := tf.config.list_logical_devices("CPU")) > 1:
        strategy, accelerator = tf.distribute.MirroredStrategy([d.name for d in cpus]), "cpu"
    else:
        strategy, accelerator = tf.distribute.get_strategy(), "cpu"
    name = "MirroredStrategy" if isinstance(strategy, tf.distribute.MirroredStrategy) else "OneDevice"
    return Placement("tensorflow", accelerator, strategy.num_replicas_in_sync, name, _scope=strategy.scope)


def split_cpu(replicas: int) -> None:
    """Splits the CPU into ``replicas`` logical devices; must run before TensorFlow initialises its devices."""
    import tensorflow as tf

    if replicas <= 1:
        return
    (cpu,) = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError as err:
        raise UsageError(f"--cpu-replicas {replicas}: TensorFlow was already initialised in this process") from err


def _place_jax(hardware: str, hosts: int, env: Mapping[str, str]) -> Placement:
    import jax
    import keras

    if hardware == "tpu" or hosts > 1:
        log_cluster_environment(env)
    processes, index = connect_processes(hosts, env)
    try:
        devices = jax.devices()
    except RuntimeError as err:  # a TPU that fails to start
        raise UsageError(f"JAX could not start the {hardware} devices of this machine ({one_line(err)})") from err
    if hardware == "tpu" and devices[0].platform != "tpu":
        # without libtpu JAX only warns and falls back to the CPU: a paid TPU would sit idle
        raise UsageError(
            f"this machine has a TPU but JAX sees only {devices[0].platform} devices: install jax[tpu] (the lock's "
            "tpu extra, in the train-tpu image)"
        )
    if len(devices) == 1:
        return Placement("jax", devices[0].platform, 1, "OneDevice")
    # the batch is split on the batch axis over every device of every host; the variables are replicated. Each host
    # reads its own share of the input files itself (make_dataset's shard), so Keras must not shard again.
    distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    return Placement(
        "jax",
        devices[0].platform,
        len(devices),
        "DataParallel",
        processes,
        index,
        _scope=distribution.scope,
        distribution=distribution,
    )


def gpu_compute_capability():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("compute_capability") if gpus else None
