"""The container images the steps run in: one place that names them. Registry and tag are compile-time choices
(``python -m pipeline compile --registry ... --tag ...``), never read from the environment."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_REGISTRY = "us-docker.pkg.dev/my-project/tpu-image-pipeline"
DEFAULT_TAG = "0.1.0"
# containers/<name>/Dockerfile builds the image <registry>/<name>:<tag>
PIPELINE_IMAGE = "pipeline"  # every step but GPU and TPU training: no CUDA, no TPU runtime
GPU_TRAINER_IMAGE = "train-gpu"  # the training step on GPUs (TensorFlow with the CUDA libraries)
TPU_TRAINER_IMAGE = "train-tpu"  # the training step on Cloud TPUs (Keras on JAX with jax[tpu])
BEAM_WORKER_IMAGE = "beam-worker"  # Dataflow workers of the convert step (--sdk_container_image)
LIGHT_IMAGE = "light"  # the steps that only list files and call APIs: no TensorFlow, Beam, JAX nor NumPy
# the steps (their functions' names) that run in LIGHT_IMAGE; every other step but training runs in PIPELINE_IMAGE
LIGHT_STEPS = ("fingerprint", "find_baseline", "register", "find_baseline_in_folder", "register_in_folder", "deploy",
               "not_blessed")  # fmt: skip


@dataclass(frozen=True)
class Images:
    """Where the images live; ``uri(name)`` gives the full reference of ``containers/<name>``."""

    registry: str = DEFAULT_REGISTRY
    tag: str = DEFAULT_TAG

    def uri(self, name: str) -> str:
        return f"{self.registry.rstrip('/')}/{name}:{self.tag}"


DEFAULT_IMAGES = Images()
