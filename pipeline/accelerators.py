"""Compile targets: what the training step runs on in Vertex AI, and in which image.

One function, ``machine_spec(name)``, maps each target to a Vertex AI machine spec and the image that reaches its
hardware. TPUs are TPU VMs driven by Keras on JAX (``jax[tpu]`` in the ``train-tpu`` image): v5e is a
``ct5lp-hightpu-*`` machine and v6e a ``ct6e-standard-*`` machine, each with its chip topology; a topology larger
than one machine is a multi-host slice, one worker pool of ``replicaCount`` 1 that Vertex AI spreads over its hosts
(Google's v5e-16 sample runs ``ct5lp-hightpu-4t`` with ``4x4``), and training connects them with
``jax.distributed``. GPU presets attach one GPU; ``cpu`` trains on a plain machine.

The legacy ``cloud-tpu`` machines (TPU v2-8, v3-8) are refused: TensorFlow 2.21 reaches no TPU, and nothing shows
JAX 0.10 (libtpu 0.0.42) driving v2 or v3 on Vertex AI, whose current TPU pages document JAX for v5e and v6e.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.cli import UsageError
from pipeline.images import GPU_TRAINER_IMAGE, PIPELINE_IMAGE, TPU_TRAINER_IMAGE

DEFAULT_ACCELERATOR = "v5e-4"


@dataclass(frozen=True)
class MachineSpec:
    """A Vertex AI ``MachineSpec`` for the training step's custom job, the image it runs, and its hosts."""

    machine_type: str
    image: str
    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""
    hosts: int = 1  # TPU VMs in the slice; more than 1: jax.distributed connects them
    # the boot disk the machine takes: TPU v6e VMs take Hyperdisk only (Cloud TPU's "Set up persistent disks"),
    # the others a persistent SSD, GCPC's default
    boot_disk_type: str = "pd-ssd"
    boot_disk_size_gb: int = 100

    def boot_disk(self) -> dict:
        """The worker pool's ``disk_spec``, as the CustomJob API takes it."""
        return {"boot_disk_type": self.boot_disk_type, "boot_disk_size_gb": self.boot_disk_size_gb}

    def as_vertex(self) -> dict:
        """The ``machineSpec`` object of a worker pool, as the CustomJob API takes it."""
        spec: dict = {"machine_type": self.machine_type}
        if self.accelerator_type:
            spec.update(accelerator_type=self.accelerator_type, accelerator_count=self.accelerator_count)
        if self.tpu_topology:
            spec["tpu_topology"] = self.tpu_topology
        return spec


def _tpu(machine_type: str, topology: str, hosts: int = 1) -> MachineSpec:
    disk = "hyperdisk-balanced" if machine_type.startswith("ct6e-") else "pd-ssd"
    return MachineSpec(machine_type, TPU_TRAINER_IMAGE, tpu_topology=topology, hosts=hosts, boot_disk_type=disk)


ACCELERATORS: dict[str, MachineSpec] = {
    "cpu": MachineSpec("n1-standard-8", PIPELINE_IMAGE),
    # GPUs: the TensorFlow wheel finds CUDA in the image (containers/train-gpu installs the lock's gpu extra)
    "t4": MachineSpec("n1-standard-8", GPU_TRAINER_IMAGE, "NVIDIA_TESLA_T4", 1),
    "l4": MachineSpec("g2-standard-8", GPU_TRAINER_IMAGE, "NVIDIA_L4", 1),
    "a100": MachineSpec("a2-highgpu-1g", GPU_TRAINER_IMAGE, "NVIDIA_TESLA_A100", 1),
    # TPU v5e and v6e VMs: the machine type names the chips per host, the topology the slice
    "v5e-1": _tpu("ct5lp-hightpu-1t", "1x1"),
    "v5e-4": _tpu("ct5lp-hightpu-4t", "2x2"),
    "v5e-8": _tpu("ct5lp-hightpu-8t", "2x4"),
    "v5e-16": _tpu("ct5lp-hightpu-4t", "4x4", hosts=4),  # 4 hosts of 4 chips
    "v6e-1": _tpu("ct6e-standard-1t", "1x1"),
    "v6e-4": _tpu("ct6e-standard-4t", "2x2"),
    "v6e-8": _tpu("ct6e-standard-8t", "2x4"),
    "v6e-16": _tpu("ct6e-standard-4t", "4x4", hosts=4),  # 4 hosts of 4 chips
}
# targets users ask for that Vertex AI cannot run with this pipeline, and what to use instead
REFUSED: dict[str, str] = {
    name: (
        f"--accelerator {name} is the legacy cloud-tpu machine, which this pipeline cannot drive: TensorFlow 2.21 "
        f"reaches no TPU and nothing shows JAX 0.10 driving TPU {name[:2]} on Vertex AI; use v5e-8 (8 chips) or "
        "v6e-8 instead"
    )
    for name in ("v2-8", "v3-8")
}


def machine_spec(name: str) -> MachineSpec:
    """The machine spec and image for a target name; a one-line error listing the names otherwise."""
    if name in REFUSED:
        raise UsageError(REFUSED[name])
    try:
        return ACCELERATORS[name]
    except KeyError:
        raise UsageError(f"--accelerator {name!r} is not a target: use one of {', '.join(ACCELERATORS)}") from None


def is_experimental(name: str) -> bool:
    """Multi-host slices (several TPU VMs connected by ``jax.distributed``) are proven here on local processes and
    virtual devices only, not yet on a real slice (docs/limits.md)."""
    return name in ACCELERATORS and ACCELERATORS[name].hosts > 1


# how Vertex AI obtains the training job's machines (CustomJobSpec's Scheduling.strategy)
SCHEDULING_STRATEGIES = {"standard": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START"}
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"
RESERVATION_NAME = re.compile(r"projects/[^/]+/zones/[^/]+/reservations/[^/]+")
DURATION = re.compile(r"(\d+)([smhd]?)")
SECONDS_PER = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_MAX_QUEUE_SECONDS = 3600  # the training job's wait for its machines, by default
DEFAULT_MAX_STEP_SECONDS = 12 * 3600  # the other steps' time, by default
# the GPUs whose training jobs Vertex AI's Dynamic Workload Scheduler queues (its "Schedule training jobs based on
# resource availability" page names L4, A100, H100, H200 and B200; no TPU)
FLEX_START_ACCELERATORS = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)


@dataclass(frozen=True)
class Scheduling:
    """How the training job gets its machines, a compile-time choice written into the job's spec.

    ``strategy``: ``standard`` (on demand), ``spot`` (Spot VMs: cheaper, preemptible; training resumes from its
    last backup) or ``flex-start`` (Dynamic Workload Scheduler: queued until the machines are free, at most
    ``max_wait``). ``max_wait``: a duration (``90m``, ``2h``, ``1800s``; ``0``: no limit), flex-start only.
    ``reservation``: ``any`` (any matching reservation of the project), ``none``, or a reservation's resource name
    ``projects/P/zones/Z/reservations/NAME``; empty: Vertex AI's default. ``max_queue``: how long the job may wait
    for its machines before the train step cancels it and fails in one line naming quota and capacity (empty: an
    hour; ``0``: no limit); flex-start's own is ``max_wait``. ``max_train_time``: how long the training job may run
    once started before Vertex AI cancels it (empty: 7 days, Google Cloud Pipeline Components' default).
    ``max_step_time``: how long each other step may run before it ends itself in one line (empty: 12 hours; ``0``:
    no limit), since KFP gives Vertex AI's tasks no timeout."""

    strategy: str = "standard"
    max_wait: str = ""
    reservation: str = ""
    max_queue: str = ""
    max_train_time: str = ""
    max_step_time: str = ""

    def __post_init__(self) -> None:
        if self.strategy not in SCHEDULING_STRATEGIES:
            raise UsageError(
                f"--scheduling {self.strategy!r} is not a strategy: use one of {', '.join(SCHEDULING_STRATEGIES)}"
            )
        if self.max_wait and self.strategy != "flex-start":
            raise UsageError(
                f"--max-wait {self.max_wait} applies to --scheduling flex-start only (how long the job "
                "may queue for its machines)"
            )
        durations = (
            ("--max-wait", self.max_wait, "90m, 2h, 1800s, or 0 for no limit"),
            ("--max-queue", self.max_queue, "30m, 2h, 1800s, or 0 for no limit"),
            ("--max-train-time", self.max_train_time, "6h, 90m, 3600s (the job is cancelled past it)"),
            ("--max-step-time", self.max_step_time, "2h, 90m, 3600s, or 0 for no limit"),
        )
        for flag, value, examples in durations:  # (a training time of 0 would cancel the job at once)
            if value and (not DURATION.fullmatch(value) or (flag == "--max-train-time" and not self.seconds(value))):
                raise UsageError(f"{flag} {value!r} is not a duration: use e.g. {examples}")
        if self.max_queue and self.strategy == "flex-start":
            raise UsageError(
                "--max-queue applies to standard and spot machines: with flex-start, --max-wait bounds the queueing"
            )
        if self.reservation not in ("", "any", "none") and not RESERVATION_NAME.fullmatch(self.reservation):
            raise UsageError(
                f"--reservation {self.reservation!r}: use any, none, or a reservation's resource name "
                "projects/P/zones/Z/reservations/NAME"
            )
        if self.reservation and self.reservation != "none" and self.strategy != "standard":
            raise UsageError(
                f"--reservation {self.reservation} takes --scheduling standard: Vertex AI consumes "
                f"reservations with on-demand machines, not {self.strategy} ones"
            )

    def check_target(self, accelerator: str) -> None:
        """A one-line error where Vertex AI does not offer this choice on ``accelerator``'s machines: Spot VMs on a
        TPU slice of several hosts ("Using Spot VMs with TPU Pods isn't supported"), flex-start on anything but the
        GPUs its Dynamic Workload Scheduler queues."""
        spec = machine_spec(accelerator)
        if self.strategy == "spot" and spec.hosts > 1:
            single = accelerator.split("-")[0] + "-8"
            raise UsageError(
                f"--scheduling spot cannot obtain --accelerator {accelerator}: Vertex AI takes no Spot "
                f"VMs for a TPU slice of several hosts; use a single-host target ({single}) or "
                "--scheduling standard"
            )
        if self.strategy == "flex-start" and spec.accelerator_type not in FLEX_START_ACCELERATORS:
            offered = [name for name, s in ACCELERATORS.items() if s.accelerator_type in FLEX_START_ACCELERATORS]
            raise UsageError(
                f"--scheduling flex-start cannot obtain --accelerator {accelerator}: Vertex AI's "
                "Dynamic Workload Scheduler queues training jobs for L4, A100, H100, H200 and B200 GPUs "
                f"only; use --accelerator {' or '.join(offered)}, or --scheduling spot or "
                "standard"
            )

    def queued_seconds(self) -> int:
        """The train step's bound on the job's wait for its machines: ``max_queue``, an hour by default, none (0) for
        flex-start, whose queueing Vertex AI bounds itself."""
        if self.strategy == "flex-start":
            return 0
        if not self.max_queue:
            return DEFAULT_MAX_QUEUE_SECONDS
        return self.seconds(self.max_queue)

    def reservation_affinity(self) -> dict:
        """The ``reservation_affinity`` a worker pool's ``machine_spec`` carries for this choice (the tuning trials'
        pool, which Google Cloud Pipeline Components' tuning job takes whole); {} for Vertex AI's default."""
        if not self.reservation:
            return {}
        if self.reservation in ("any", "none"):
            kind = "ANY_RESERVATION" if self.reservation == "any" else "NO_RESERVATION"
            return {"reservation_affinity": {"reservation_affinity_type": kind}}
        return {
            "reservation_affinity": {
                "reservation_affinity_type": "SPECIFIC_RESERVATION",
                "key": RESERVATION_NAME_KEY,
                "values": [self.reservation],
            }
        }

    @staticmethod
    def seconds(duration: str) -> int:
        number, unit = DURATION.fullmatch(duration).groups()
        return int(number) * SECONDS_PER[unit]

    def step_seconds(self) -> int:
        """How long each step but training may run (``max_step_time``; 0: no limit)."""
        return self.seconds(self.max_step_time) if self.max_step_time else DEFAULT_MAX_STEP_SECONDS

    def job_arguments(self) -> dict:
        """The arguments of Google Cloud Pipeline Components' ``create_custom_training_job_from_component`` that
        carry this choice (none for the defaults, whose spec stays as it was)."""
        arguments: dict = {}
        if self.strategy != "standard":
            arguments["strategy"] = SCHEDULING_STRATEGIES[self.strategy]
        if self.max_wait:
            arguments["max_wait_duration"] = f"{self.seconds(self.max_wait)}s"
        if self.max_train_time:  # (else Google Cloud Pipeline Components' own: 7 days)
            arguments["timeout"] = f"{self.seconds(self.max_train_time)}s"
        if self.reservation == "any":
            arguments["reservation_affinity_type"] = "ANY_RESERVATION"
        elif self.reservation == "none":
            arguments["reservation_affinity_type"] = "NO_RESERVATION"
        elif self.reservation:
            arguments.update(
                reservation_affinity_type="SPECIFIC_RESERVATION",
                reservation_affinity_key=RESERVATION_NAME_KEY,
                reservation_affinity_values=[self.reservation],
            )
        return arguments
