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
# the steps (their functions' names) that run in LIGHT_IMAGE (on Vertex AI, the training job's launcher too, whose job
# runs in the trainer's image); every other step runs in PIPELINE_IMAGE
LIGHT_STEPS = (
    "fingerprint",
    "find_baseline",
    "register",
    "find_baseline_in_folder",
    "register_in_folder",
    "deploy",
    "not_blessed",
)


@dataclass(frozen=True)
class Images:
    """Where the images live; ``uri(name)`` gives the full reference of ``containers/<name>``."""

    registry: str = DEFAULT_REGISTRY
    tag: str = DEFAULT_TAG

    def uri(self, name: str) -> str:
        return f"{self.registry.rstrip('/')}/{name}:{self.tag}"


DEFAULT_IMAGES = Images()


def template_images(spec: dict) -> dict[str, str]:
    """Every image a compiled pipeline (its IR, as a dict) runs, with what runs it: each step's container (by
    step), and the images of the jobs its steps launch (the training job's worker pool, the tuning trials'), in
    order."""
    found = {
        f"step {name.removeprefix('exec-')}": executor["container"]["image"]
        for name, executor in sorted(spec["deploymentSpec"]["executors"].items())
    }
    launched = []
    for node in mappings(spec["root"], spec["components"]):  # the jobs' pools and the trials' image: constant inputs
        launched += [str(value) for key, value in node.items() if key == "image_uri"]
        image = node.get("image", {})
        if isinstance(image, dict) and isinstance(image.get("runtimeValue", {}).get("constant"), str):
            launched.append(image["runtimeValue"]["constant"])
    for image in sorted(set(launched)):
        found[f"a job of the train step ({image.rsplit('/', 1)[-1].split(':')[0]})"] = image
    return found


def mappings(*roots):
    """Every mapping in ``roots`` and in the dicts and lists they nest, depth first: a compiled pipeline's (its
    tasks' constant inputs among them), a kfp.local cache entry's."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def load_yaml(handle):
    """The first document of a YAML stream (None for none), read safely by libyaml's parser where PyYAML was built
    with it, which reads a compiled pipeline several times faster than PyYAML's own Python parser."""
    import yaml

    return next(yaml.load_all(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), None)


def read_template(path: str) -> dict:
    """A compiled pipeline's IR; a one-line error when it is missing or is not one."""
    import os

    import yaml

    from components.cli import UsageError, one_line

    if not os.path.isfile(path):
        raise UsageError(f"pipeline template {path} does not exist: run python -m pipeline compile first")
    try:
        with open(path, encoding="utf-8") as handle:
            spec = load_yaml(handle)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or one_line(err)
        raise UsageError(
            f"pipeline template {path} is not YAML ({where}{problem}): run python -m pipeline compile"
        ) from None
    if not isinstance(spec, dict) or "deploymentSpec" not in spec:
        raise UsageError(f"pipeline template {path} is not a compiled pipeline: run python -m pipeline compile")
    return spec


def check_not_placeholder(path: str, spec: dict) -> None:
    """A template whose step images are in the placeholder registry would fail every step on pulling its image,
    minutes into the run: one line saying how to build, push and compile for real ones."""
    from components.cli import UsageError

    placeholder = [image for image in template_images(spec).values() if image.startswith(DEFAULT_REGISTRY + "/")]
    if placeholder:
        raise UsageError(
            f"pipeline template {path} names its step images in the placeholder registry {DEFAULT_REGISTRY} "
            f"({placeholder[0]}, ...): push yours (make images REGISTRY=LOCATION-docker.pkg.dev/PROJECT/REPO "
            "TAG=v1 PUSH=1), compile for them (python -m pipeline compile --registry LOCATION-docker.pkg.dev/PROJECT/"
            "REPO --tag v1 --output my-pipeline.yaml) and submit that (--template my-pipeline.yaml)"
        )
