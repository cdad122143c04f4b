"""Compile targets: what the training step runs on in Vertex AI, and in which image.

One function, ``machine_spec(name)``, maps each target to a Vertex AI machine spec and the image that has the right
TensorFlow build. TPU v2 and v3 are the legacy ``cloud-tpu`` machine with 8 cores; v5e is a ``ct5lp-hightpu-*``
machine with its chip topology; GPU presets attach one GPU; ``cpu`` trains on a plain machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.cli import UsageError
from pipeline.images import PIPELINE_IMAGE, TPU_TRAINER_IMAGE

DEFAULT_ACCELERATOR = "v5e-4"


@dataclass(frozen=True)
class MachineSpec:
    """A Vertex AI ``MachineSpec`` for the training step's custom job, plus the image it runs."""

    machine_type: str
    image: str
    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""

    def as_vertex(self) -> dict:
        """The ``machineSpec`` object of a worker pool, as the CustomJob API takes it."""
        spec: dict = {"machine_type": self.machine_type}
        if self.accelerator_type:
            spec.update(accelerator_type=self.accelerator_type, accelerator_count=self.accelerator_count)
        if self.tpu_topology:
            spec["tpu_topology"] = self.tpu_topology
        return spec


ACCELERATORS: dict[str, MachineSpec] = {
    "cpu": MachineSpec("n1-standard-8", PIPELINE_IMAGE),
    # GPUs: the TensorFlow wheel finds CUDA in the image (containers/pipeline installs the lock's gpu extra)
    "t4": MachineSpec("n1-standard-8", PIPELINE_IMAGE, "NVIDIA_TESLA_T4", 1),
    "l4": MachineSpec("g2-standard-8", PIPELINE_IMAGE, "NVIDIA_L4", 1),
    "a100": MachineSpec("a2-highgpu-1g", PIPELINE_IMAGE, "NVIDIA_TESLA_A100", 1),
    # legacy Cloud TPU (TPU node) machines: 8 cores
    "v2-8": MachineSpec("cloud-tpu", TPU_TRAINER_IMAGE, "TPU_V2", 8),
    "v3-8": MachineSpec("cloud-tpu", TPU_TRAINER_IMAGE, "TPU_V3", 8),
    # TPU v5e (TPU VMs): the machine type names the chip count, the topology their layout
    "v5e-1": MachineSpec("ct5lp-hightpu-1t", TPU_TRAINER_IMAGE, tpu_topology="1x1"),
    "v5e-4": MachineSpec("ct5lp-hightpu-4t", TPU_TRAINER_IMAGE, tpu_topology="2x2"),
    "v5e-8": MachineSpec("ct5lp-hightpu-8t", TPU_TRAINER_IMAGE, tpu_topology="2x4"),
}


def machine_spec(name: str) -> MachineSpec:
    """The machine spec and image for a target name; a one-line error listing the names otherwise."""
    try:
        return ACCELERATORS[name]
    except KeyError:
        raise UsageError(f"--accelerator {name!r} is not a target: use one of {', '.join(ACCELERATORS)}") from None
