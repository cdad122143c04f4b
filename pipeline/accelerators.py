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

    def as_vertex(self) -> dict:
        """The ``machineSpec`` object of a worker pool, as the CustomJob API takes it."""
        spec: dict = {"machine_type": self.machine_type}
        if self.accelerator_type:
            spec.update(accelerator_type=self.accelerator_type, accelerator_count=self.accelerator_count)
        if self.tpu_topology:
            spec["tpu_topology"] = self.tpu_topology
        return spec


def _tpu(machine_type: str, topology: str, hosts: int = 1) -> MachineSpec:
    return MachineSpec(machine_type, TPU_TRAINER_IMAGE, tpu_topology=topology, hosts=hosts)


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
