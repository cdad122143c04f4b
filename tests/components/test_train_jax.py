"""Training on JAX, the TPU path, proven on the CPU with the mechanisms TPUs use: the backend choice, virtual CPU
devices under ``keras.distribution.DataParallel``, several local processes under ``jax.distributed`` (JAX's CPU
collectives), the schedule inside a compiled step, preemption, and the hand-off to export's TensorFlow CPU model.

Keras fixes its backend at import and this test process runs TensorFlow's, so every JAX run is a subprocess, as a
user or a Vertex AI worker starts it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from components.artifacts.checkpoints import epochs_kept
from components.artifacts.records import STATS
from components.cli import UsageError
from components.train.placement import choose_backend, detect_hardware
from tests.conftest import REPO_ROOT, run_cli

TWO_DEVICES = "--xla_force_host_platform_device_count=2"
CODELAB_EXAMPLE = os.path.join(REPO_ROOT, "examples", "models", "codelab_convnet.py")


def jax_env(**extra: str) -> dict:
    """This environment without JAX's launch variables and device count; ``XLA_FLAGS`` in ``extra`` go after the
    profile's own (make test PROFILE=...: the instruction set cap)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "KERAS_BACKEND") and not k.startswith("JAX_")}
    flags = " ".join([*profile_xla_flags(), extra.pop("XLA_FLAGS", "")]).strip()
    return {**env, **({"XLA_FLAGS": flags} if flags else {}), **extra}


def profile_xla_flags() -> list[str]:
    """The XLA flags of this environment other than a device count (a host profile's ISA cap)."""
    return [flag for flag in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in flag]


def run_train(*args: str, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "components.train", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_all(*runs: tuple[list[str], dict]) -> list[subprocess.CompletedProcess]:
    """Runs several ``components.train`` processes at once (start-up dominates these tiny runs); each must pass."""
    command = [sys.executable, "-m", "components.train"]
    started = [
        (
            args,
            subprocess.Popen(
                [*command, *args], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ),
        )
        for args, env in runs
    ]
    results = []
    try:
        for args, process in started:
            stdout, stderr = process.communicate(timeout=600)
            assert process.returncode == 0, stderr[-3000:]
            results.append(subprocess.CompletedProcess([*command, *args], process.returncode, stdout, stderr))
    finally:  # hosts that wait on one that failed would wait on forever
        for _, process in started:
            process.kill()
            process.wait()
    return results


def read(path) -> dict:
    with open(path) as handle:
        return json.load(handle)


def weights(path) -> dict[str, np.ndarray]:
    found = {}

    def keep(name, item):  # returns None: h5py stops visiting at any other value
        if isinstance(item, h5py.Dataset):
            found[name] = item[()]

    with h5py.File(path) as handle:
        handle.visititems(keep)
    return found


# --- the choice: which backend, on which hardware -------------------------------------------------------------------


def test_tpus_always_train_on_jax_and_tensorflow_there_is_one_line():
    assert choose_backend("auto", "tpu", {})[0] == "jax"
    assert choose_backend("jax", "tpu", {})[0] == "jax"
    with pytest.raises(UsageError, match=r"^--backend tensorflow cannot train on this TPU: TensorFlow 2.21 has no"):
        choose_backend("tensorflow", "tpu", {})
    with pytest.raises(UsageError, match=r"^KERAS_BACKEND tensorflow cannot train on this TPU"):
        choose_backend("auto", "tpu", {"KERAS_BACKEND": "tensorflow"})


def test_auto_off_tpus_takes_the_measured_faster_backend_and_says_why():
    # bench/train.py on CPUs: TensorFlow faster than JAX for images in auto's precision (bench/RESULTS.md); GPUs keep
    # TensorFlow's CUDA build
    for hardware in ("cpu", "gpu"):
        backend, why = choose_backend("auto", hardware, {})
        assert backend == "tensorflow"
        assert why.startswith(f"auto on {hardware}: ") and "bench/RESULTS.md" in why  # cites what measured it
    assert choose_backend("auto", "cpu", {"KERAS_BACKEND": "jax"}) == ("jax", "KERAS_BACKEND jax")
    # the LSTM: JAX faster than TensorFlow on CPUs in float32 (bench/train.py --model lstm); GPUs keep TensorFlow
    backend, why = choose_backend("auto", "cpu", {}, modality="text")
    assert backend == "jax" and "JAX faster than TensorFlow for text models" in why
    assert choose_backend("auto", "gpu", {}, modality="text")[0] == "tensorflow"
    # ... in float32: in bfloat16 (emulated on this CPU) TensorFlow's LSTM was 9x JAX's
    backend, why = choose_backend("auto", "cpu", {}, modality="text", bfloat16=True)
    assert backend == "tensorflow" and "TensorFlow faster than JAX for text models on CPUs in bfloat16" in why
    assert "image" not in why  # (it gave the image models' measurement)
    assert choose_backend("tensorflow", "cpu", {}, modality="text") == ("tensorflow", "--backend tensorflow")
    assert choose_backend("jax", "gpu", {"KERAS_BACKEND": "tensorflow"}) == ("jax", "--backend jax")


def test_hardware_is_found_from_device_files_and_the_pci_bus():
    def files(*present):
        return lambda path: path in present

    assert detect_hardware(files("/dev/vfio/0"), lambda: []) == "tpu"  # v5e, v6e
    assert detect_hardware(files("/dev/accel0"), lambda: []) == "tpu"  # v4, v5p
    assert detect_hardware(files(), lambda: ["0x8086", "0x1ae0"]) == "tpu"  # Google's PCI vendor id
    assert detect_hardware(files("/dev/nvidia0"), lambda: ["0x10de"]) == "gpu"
    assert detect_hardware(files(), lambda: ["0x8086"]) == "cpu"


def test_several_processes_train_on_jax_and_tensorflow_there_is_one_line():
    launch = {"JAX_COORDINATOR_ADDRESS": "10.0.0.2:8476", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "1"}
    assert choose_backend("auto", "cpu", launch)[0] == "jax"
    assert choose_backend("auto", "tpu", {}, hosts=4) == ("jax", "several processes (--hosts 4): jax.distributed")
    with pytest.raises(UsageError, match=r"^--backend tensorflow cannot train over several processes \(JAX_COORD"):
        choose_backend("tensorflow", "cpu", launch)


def test_learning_rate_schedule_runs_inside_a_compiled_jax_step():
    script = (
        "import jax, json\n"
        "from components.train.schedules import RampUpExponentialDecay\n"
        "s = RampUpExponentialDecay(peak=0.01, rampup_steps=30, decay_steps=10, decay_rate=0.5)\n"
        "step = jax.jit(lambda i: s(i))\n"
        "print(json.dumps([float(step(i)) for i in (0, 15, 30, 45, 50, 500)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=jax_env(KERAS_BACKEND="jax"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # ramp 0.001 -> 0.01 over 30 steps, then halved every 10 steps, floored at 0.0001
    expected = [0.001, 0.001 + 0.009 * 15 / 30, 0.01, 0.005, 0.0025, 0.0001]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == pytest.approx(expected)


# --- two virtual devices: the data-parallel mechanism TPUs use -------------------------------------------------------


@pytest.fixture(scope="module")
def jax_runs(converted, tmp_path_factory):
    """The same model trained on JAX on 1 device and on 2 virtual CPU devices; (examples dir, {devices: model dir})."""
    examples_dir, _ = converted
    root = tmp_path_factory.mktemp("jax")
    # 30 epochs: on two devices the global batch of 16 makes one step per epoch of the 29 training images
    # (--patience 0: every epoch runs, whatever a host's float sums do to a small validation split's loss)
    common = [
        "--examples",
        examples_dir,
        "--epochs",
        "30",
        "--batch-size",
        "4",
        "--lr-schedule",
        "rampup_exponential",
        "--rampup-epochs",
        "1",
        "--patience",
        "0",
    ]
    _, two = start_all(
        ([*common, "--backend", "jax"], jax_env(AIP_MODEL_DIR=str(root / "one"))),
        # the recipe: XLA_FLAGS and KERAS_BACKEND in the environment, --backend auto honours the latter; the
        # default model's network as a user writes it (examples/models), in the precision auto picks (bfloat16 where
        # the CPU has it, as on TPUs)
        (
            [*common, "--model-dir", str(root / "two"), "--model", CODELAB_EXAMPLE],
            jax_env(XLA_FLAGS=TWO_DEVICES, KERAS_BACKEND="jax"),
        ),
    )
    return examples_dir, {1: root / "one", 2: root / "two"}, two


def test_two_devices_shard_the_batch_replicate_the_variables_and_learn(jax_runs):
    _, dirs, result = jax_runs
    config = read(dirs[2] / "model_config.json")
    assert (config["backend"], config["strategy"], config["replicas"], config["processes"]) == (
        "jax",
        "DataParallel",
        2,
        1,
    )
    assert config["backend_reason"] == "KERAS_BACKEND jax"
    assert config["model_name"] == "codelab_convnet.py:build" and config["model"]["kind"] == "file"
    assert config["jit_compile"] is True  # JAX steps are XLA programs
    assert config["global_batch_size"] == 2 * config["per_replica_batch_size"] == 16
    layout = config["distribution"]
    assert layout["mesh_devices"] == 2
    assert layout["batch_axes"] == ["batch", None, None, None]  # split on the batch axis only
    assert layout["per_device_batch_shape"] == [8, 16, 16, 3]  # each device holds half of the global batch
    assert layout["variables_replicated"] is True  # every variable whole on both devices
    assert "DataParallel over 2 cpu device(s) in 1 process(es)" in result.stderr
    losses = read(dirs[2] / "history.json")["history"]["loss"]
    assert len(losses) == 30 and losses[-1] < losses[0]


def test_two_devices_reach_the_held_out_accuracy_of_one(jax_runs, tmp_path):
    from components.evaluate.core import EvaluateConfig
    from components.evaluate.core import run as evaluate

    examples_dir, dirs, _ = jax_runs
    assert read(dirs[1] / "model_config.json")["replicas"] == 1  # written under AIP_MODEL_DIR
    accuracy = {
        n: evaluate(EvaluateConfig(examples_dir, str(d), str(tmp_path / str(n))))["accuracy"] for n, d in dirs.items()
    }
    assert accuracy[1] >= 0.9 and accuracy[2] >= 0.9 and abs(accuracy[1] - accuracy[2]) <= 0.1


def test_weights_trained_on_jax_load_into_the_tensorflow_cpu_model_with_parity(jax_runs):
    """Export's hand-off across backends (the whole export of a JAX-trained model runs in the DAG's jax side-run,
    tests/pipeline/test_local_run.py): the CPU model that export builds on TensorFlow, the JAX-trained weights loaded,
    answers as JAX did on the validation images."""
    from components.artifacts.model import load_model_config
    from components.export.common import backend_parity, build_cpu_model

    examples_dir, dirs, _ = jax_runs
    trained = read(dirs[2] / "model_config.json")
    model, model_config = build_cpu_model(str(dirs[2]))
    crossed = backend_parity(model, str(dirs[2]), load_model_config(str(dirs[2])), examples_dir)
    assert (crossed["trained_backend"], crossed["export_backend"]) == ("jax", "tensorflow")
    validation = read(os.path.join(examples_dir, "stats.json"))["counts"]["validation"]
    assert crossed["num_examples"] == validation // 2 * 2  # the validation images, in static batches of 2 devices
    assert crossed["argmax_agreement"] == 1.0
    tolerance = 5e-2 if trained["precision"] == "mixed_bfloat16" else 1e-4  # the training precision's rounding
    assert crossed["max_probability_difference"] < tolerance
    assert model_config["backend"] == "jax"


# --- several hosts: local processes with JAX's CPU collectives -------------------------------------------------------


def write_two_file_examples(root) -> str:
    """32 training examples in 2 files of 16, so that a global batch of 32 is the whole split: one process or two
    processes of one file each see the same examples at every step."""
    import io

    import tensorflow as tf
    from PIL import Image

    from components.schema import serialize_example

    rng = np.random.default_rng(0)
    names, counts = ["cat", "dog"], {}
    for split, files in (("train", 2), ("validation", 1), ("test", 1)):
        os.makedirs(root / split)
        for f in range(files):
            with tf.io.TFRecordWriter(str(root / split / f"{split}-{f:05d}-of-{files:05d}.tfrec")) as writer:
                for i in range(16):
                    base = np.array((200, 40, 40) if i % 2 == 0 else (40, 40, 200))
                    pixels = np.clip(base + rng.integers(-40, 40, (16, 16, 3)), 0, 255).astype(np.uint8)
                    buffer = io.BytesIO()
                    Image.fromarray(pixels).save(buffer, format="JPEG")
                    writer.write(serialize_example(buffer.getvalue(), i % 2, names[i % 2], (16, 16), 2))
        counts[split] = 16 * files
    stats = {"modality": "image", "image_size": 16, "num_classes": 2, "class_names": names, "counts": counts}
    stats["num_examples"] = sum(counts.values())
    STATS.write(str(root), stats)
    return str(root)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def hosts_of_two(args: list[str], **extra: str) -> list[tuple[list[str], dict]]:
    """The two processes of a 2-host slice on this machine: the same arguments, JAX's coordinator on a free port."""
    port = free_port()
    return [
        (
            args,
            jax_env(
                JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(index), **extra
            ),
        )
        for index in range(2)
    ]


def preempt(runs: list[tuple[list[str], dict]], checkpoints, epochs: int, logs) -> None:
    """Starts ``runs`` and SIGKILLs them all at once, as a preempted slice, once the backup holds ``epochs``."""
    command = [sys.executable, "-m", "components.train"]
    paths = [logs / f"preempted-{index}.log" for index in range(len(runs))]
    started = []
    for (args, env), path in zip(runs, paths, strict=True):
        with open(path, "w") as log:
            started.append(subprocess.Popen([*command, *args], cwd=REPO_ROOT, env=env, stdout=log, stderr=log))
    deadline, reached = time.monotonic() + 300, False
    try:
        while not reached and time.monotonic() < deadline and all(p.poll() is None for p in started):
            reached = epochs_kept(str(checkpoints)) >= epochs
            time.sleep(0 if reached else 0.02)
        for process in started:
            process.send_signal(signal.SIGKILL)
    finally:
        for process in started:
            process.kill()
            process.wait()
    codes = [process.returncode for process in started]
    tails = "\n".join(path.read_text()[-1500:] for path in paths)
    assert reached, f"no backup of {epochs} epochs before the hosts ended or 300 s passed: {codes}\n{tails}"
    assert codes == [-signal.SIGKILL] * len(started), f"a host ended before the preemption: {codes}\n{tails}"


def test_two_processes_resume_together_and_train_to_the_weights_of_one(tmp_path):
    """A 2-host slice is preempted, every host killed at once, and restarted from the backup that process 0 kept;
    from the same backup one process with the same global batch trains to the same weights, so both hosts restored
    it (a host left on its first weights would give a different sum of gradients). Before the fix this test came
    with, the two hosts loaded the backup on either side of a barrier: loading assigns every variable, and each
    assignment of a value spread over both hosts is a collective that every process must make in the same order."""
    examples = write_two_file_examples(tmp_path / "examples")
    common = ["--examples", examples, "--backend", "jax", "--precision", "float32", "--backup-interval", "0"]
    two = [*common, "--model-dir", str(tmp_path / "two"), "--batch-size", "16", "--hosts", "2"]
    checkpoints = tmp_path / "two" / "checkpoints"
    preempt(hosts_of_two([*two, "--epochs", "60"], TMPDIR=str(tmp_path)), checkpoints, epochs=2, logs=tmp_path)
    kept = epochs_kept(str(checkpoints))
    assert 2 <= kept < 60 and not (tmp_path / "two" / "model.weights.h5").exists()
    shutil.copytree(checkpoints, tmp_path / "one" / "checkpoints")  # the same backup, for one process
    epochs = ["--epochs", str(kept + 3)]
    single = ([*common, *epochs, "--model-dir", str(tmp_path / "one"), "--batch-size", "32"], jax_env())
    *outputs, alone = start_all(*hosts_of_two([*two, *epochs], TMPDIR=str(tmp_path)), single)
    for index, result in enumerate(outputs):
        stderr = result.stderr
        assert f"process {index} of 2 (jax.distributed)" in stderr
        assert f"process {index} of 2 reads 1 of the 2 train files" in stderr  # each host its own share
    summaries = [json.loads(result.stdout.strip().splitlines()[-1]) for result in (*outputs, alone)]
    # every process restored the backup's epoch count: Keras ran the 3 epochs after it
    assert [(s["resumed_after_epoch"], s["epochs_trained"]) for s in summaries] == [(kept, 3)] * 3
    assert summaries[0]["final"] == summaries[1]["final"] and "loss" in summaries[0]["final"]  # as process 0 wrote
    config = read(tmp_path / "two" / "model_config.json")
    assert (config["processes"], config["replicas"], config["global_batch_size"]) == (2, 2, 32)
    # the same global batch on one process and on two: the same training, up to the order of float sums, and the
    # same batch-norm statistics re-estimated with the final weights (each process reading its half of the batch)
    for result in outputs:
        assert "re-estimated with the final weights on 1 training batches" in result.stderr
    one, two = weights(tmp_path / "one" / "model.weights.h5"), weights(tmp_path / "two" / "model.weights.h5")
    assert sorted(one) == sorted(two) and len(one) >= 14
    moving = [key for key in one if "batch_normalization" in key and key.endswith(("/vars/2", "/vars/3"))]
    scale = max(float(np.abs(v).max()) for v in one.values())
    # (the statistics of 7 layers deep in training mode carry the float differences of every layer above: 1e-4 of
    # their scale here, where statistics left as training left them differ by a third of it)
    assert moving and max(float(np.abs(one[k] - two[k]).max()) for k in moving) < 1e-3 * max(scale, 1.0)
    one, two = ({key: value for key, value in found.items() if key not in moving} for found in (one, two))
    assert max(float(np.abs(one[k] - two[k]).max()) for k in one) < 1e-5 * max(scale, 1.0)
    histories = [read(tmp_path / d / "history.json") for d in ("one", "two")]
    losses = [h["history"]["loss"] for h in histories]
    assert histories[1]["resumed_after_epoch"] == kept and len(losses[1]) == kept + 3  # the log kept the first epochs
    assert losses[1] == pytest.approx(losses[0], abs=1e-5) and losses[1][-1] < losses[1][0]
    # only process 0 wrote: one TensorBoard writer a run, no follower's leftovers, no backup once the run is done
    events = [f for _, _, files in os.walk(tmp_path / "two" / "logs") for f in files if "tfevents" in f]
    writers = {name.split(".")[-3] for name in events}  # events.out.tfevents.<time>.<host>.<pid>.<n>.v2
    assert events and len(writers) == 2  # the preempted process 0 and the resumed one
    assert not checkpoints.exists()
    scratch = [p.name for p in tmp_path.iterdir() if p.name.startswith("backup-follower-")]
    assert len(scratch) == 1, scratch  # the killed follower's: the resumed one removed its own


def test_a_launch_whose_process_count_is_not_the_slices_is_one_line(tmp_path):
    examples = write_two_file_examples(tmp_path / "examples")
    env = jax_env(JAX_COORDINATOR_ADDRESS="127.0.0.1:1", JAX_NUM_PROCESSES="4", JAX_PROCESS_ID="0")
    result = run_train(
        "--examples",
        examples,
        "--model-dir",
        str(tmp_path / "m"),
        "--backend",
        "jax",
        "--hosts",
        "2",
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: JAX_NUM_PROCESSES 4 does not match --hosts 2: start one process per host"
    )
    assert not (tmp_path / "m").exists()


def test_tensorflow_cannot_train_on_several_hosts(tmp_path):
    examples = write_two_file_examples(tmp_path / "examples")
    result = run_cli(
        "components.train",
        "--examples",
        examples,
        "--model-dir",
        str(tmp_path / "m"),
        "--backend",
        "tensorflow",
        "--hosts",
        "2",
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --backend tensorflow cannot train over several processes (--hosts 2): TensorFlow here trains on one "
        "host; use --backend jax (or auto)"
    )


def test_the_train_steps_callbacks_let_keras_dispatch_the_next_step_before_the_last_finishes(tmp_path):
    """A callback with batch hooks that does not declare them ``async_safe`` makes Keras read every step's results
    on the training thread, which waits for the step to finish before the next is dispatched. The train step's
    callbacks (backup, epoch log, TensorBoard) must leave that reading to Keras's worker thread."""
    script = (
        "import json, sys, threading, keras\n"
        "from components.train.callbacks import training_callbacks\n"
        "from components.train.placement import Placement\n"
        "seen = []\n"
        "class StepResult:\n"
        "    def __float__(self):\n"
        "        seen.append(threading.current_thread() is threading.main_thread())\n"
        "        return 1.0\n"
        "model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
        "model.compile(optimizer='adam', loss='mse')\n"
        "model.optimizer.build(model.trainable_variables)\n"
        "callbacks = training_callbacks(sys.argv[1], sys.argv[2], Placement('jax', 'cpu', 1, 'OneDevice'))\n"
        "hooks = keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=True, model=model,\n"
        "                                     verbose=2, epochs=1, steps=3)\n"
        "hooks.on_train_begin()\n"
        "hooks.on_epoch_begin(0)\n"
        "for step in range(3):\n"
        "    hooks.on_train_batch_begin(step)\n"
        "    hooks.on_train_batch_end(step, {'loss': StepResult()})\n"
        "hooks.on_epoch_end(0, {'loss': 1.0})\n"
        "hooks.on_train_end()\n"
        "print(json.dumps({'callbacks': [type(c).__name__ for c in callbacks], 'on_training_thread': seen}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "checkpoints"), str(tmp_path / "logs")],
        cwd=REPO_ROOT,
        env=jax_env(KERAS_BACKEND="jax"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report["callbacks"]) == 3, report
    assert report["on_training_thread"] and not any(report["on_training_thread"]), report
