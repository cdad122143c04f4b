"""The built images: a smoke test inside each, their sizes against budgets, and the whole DAG under kfp.local's
DockerRunner set against SubprocessRunner. ``make test-images`` builds the images first (REGISTRY and TAG name them),
then runs these; ``make test`` leaves them out."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from pipeline.images import DEFAULT_REGISTRY, DEFAULT_TAG, Images
from tests.conftest import CLASSES, DEMO_ACCURACY_BAR, REPO_ROOT, demo_export_agreement_floor, write_image_folder

pytestmark = pytest.mark.images

IMAGES = Images(os.environ.get("REGISTRY", DEFAULT_REGISTRY), os.environ.get("TAG", DEFAULT_TAG))
# what each image may weigh, uncompressed (docker image inspect's Size): each step pays its image's pull on every cold
# Vertex AI node, and only the GPU trainer carries CUDA
SIZE_BUDGETS_GB = {"pipeline": 3.0, "light": 0.5, "train-tpu": 4.2, "train-gpu": 8.8, "beam-worker-layer": 3.1}
AS_ME = ("--user", f"{os.getuid()}:{os.getgid()}")


def docker(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def run_in(name: str, *command: str, folders=(), env: dict | None = None, user=AS_ME) -> subprocess.CompletedProcess:
    """``command`` in the image, with no network, ``folders`` bound at their own paths."""
    args = ["run", "--rm", "--network", "none", *user]
    for folder in folders:
        args += ["-v", f"{folder}:{folder}"]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    return docker(*args, IMAGES.uri(name), *command)


def python_in(name: str, code: str, **kwargs) -> subprocess.CompletedProcess:
    return run_in(name, "python", "-c", code, **kwargs)


def distributions(name: str) -> list[str]:
    code = (
        "import importlib.metadata as m, json; print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"
    )
    result = python_in(name, code)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def tensorflows(installed: list[str]) -> list[str]:
    """The TensorFlow builds among distribution names (normalised: tensorflow_cpu is tensorflow-cpu)."""
    names = [name.lower().replace("_", "-") for name in installed]
    return [name for name in names if name in ("tensorflow", "tensorflow-cpu", "tensorflow-intel")]


@pytest.fixture(scope="module", autouse=True)
def built():
    for name in SIZE_BUDGETS_GB:
        found = docker("image", "inspect", IMAGES.uri(name))
        assert found.returncode == 0, f"{IMAGES.uri(name)} is not built: run `make test-images`"


def test_the_cpu_image_converts_images_and_carries_no_cuda_or_tpu_runtime(tmp_path):
    source = write_image_folder(tmp_path / "images", per_class=4)
    output = tmp_path / "examples"
    result = run_in(
        "pipeline",
        "python",
        "-m",
        "components.convert",
        "--source",
        source,
        "--output",
        str(output),
        "--image-size",
        "16",
        folders=[str(tmp_path)],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(output / "stats.json") as handle:
        stats = json.load(handle)
    assert sum(stats["counts"].values()) == 4 * len(CLASSES) and stats["class_names"] == list(CLASSES)
    assert os.stat(output / "stats.json").st_uid == os.getuid()  # written as the invoking user
    installed = distributions("pipeline")
    heavy = [name for name in installed if name.lower().startswith(("nvidia-", "libtpu"))]
    assert heavy == []
    assert "docker" not in {name.lower() for name in installed}  # run-local's extra: no step talks to Docker
    # TensorFlow's CPU wheel: no CUDA kernels either (the full wheel carries them, about 0.5 GB more)
    assert tensorflows(installed) == ["tensorflow-cpu"]
    built = python_in("pipeline", "import tensorflow as tf; print(tf.sysconfig.get_build_info()['is_cuda_build'])")
    assert built.stdout.strip().splitlines()[-1] == "False", built.stderr[-2000:]


def test_the_light_image_fingerprints_a_source_as_here_and_holds_neither_tensorflow_beam_jax_nor_numpy(tmp_path):
    from components.convert.listing import source_fingerprint

    source = write_image_folder(tmp_path / "images", per_class=2)
    result = run_in(
        "light", "python", "-m", "components.convert.fingerprint", "--source", source, folders=[str(tmp_path)]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == {"source": source, "fingerprint": source_fingerprint(source)}
    installed = {name.lower().replace("_", "-") for name in distributions("light")}
    assert {"kfp", "google-cloud-aiplatform", "google-cloud-storage"} <= installed
    assert installed.isdisjoint({"tensorflow", "tensorflow-cpu", "apache-beam", "jax", "jaxlib", "numpy", "pillow"})


def test_the_tpu_trainer_finds_libtpu_and_trains_a_step_on_jax_without_a_tpu(converted, tmp_path):
    examples_dir, _ = converted
    found = python_in(
        "train-tpu",
        "import jax, libtpu, os; path = libtpu.get_library_path(); print(jax.__version__, os.path.isfile(path), path)",
    )
    assert found.returncode == 0, found.stderr[-3000:]
    version, exists, path = found.stdout.split()
    assert (version, exists) == ("0.10.2", "True") and path.endswith(".so")
    trained = run_in(
        "train-tpu",
        "python",
        "-m",
        "components.train",
        "--examples",
        examples_dir,
        "--model-dir",
        str(tmp_path / "model"),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--backend",
        "jax",
        folders=[examples_dir, str(tmp_path)],
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    with open(tmp_path / "model" / "model_config.json") as handle:
        config = json.load(handle)
    assert (config["backend"], config["accelerator"]) == ("jax", "cpu")


def test_the_gpu_trainer_has_tensorflows_cuda_build_and_trains_on_the_cpu_without_a_gpu(converted, tmp_path):
    examples_dir, _ = converted
    code = (
        "import json, tensorflow as tf; info = tf.sysconfig.get_build_info(); "
        "gpus = tf.config.list_physical_devices('GPU'); "
        "print(json.dumps([info['is_cuda_build'], info['cuda_version'], len(gpus)]))"
    )
    found = python_in("train-gpu", code)
    assert found.returncode == 0, found.stderr[-3000:]
    is_cuda_build, cuda_version, gpus = json.loads(found.stdout.strip().splitlines()[-1])
    assert is_cuda_build is True and cuda_version.startswith("12") and gpus == 0
    installed = distributions("train-gpu")
    assert any(name.startswith("nvidia-cudnn") for name in installed)
    assert tensorflows(installed) == ["tensorflow"]  # one build
    trained = run_in(
        "train-gpu",
        "python",
        "-m",
        "components.train",
        "--examples",
        examples_dir,
        "--model-dir",
        str(tmp_path / "model"),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        folders=[examples_dir, str(tmp_path)],
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    with open(tmp_path / "model" / "model_config.json") as handle:
        assert json.load(handle)["accelerator"] == "cpu"


def test_the_beam_worker_layer_installs_the_lock_into_plain_python_and_keeps_the_boot_entrypoint():
    """Beam's SDK image cannot be pulled here: the layer this project adds is built on a plain Python 3.11 image
    (``beam-worker-layer``), where the lock's Beam and this project must import; the Dockerfile must leave the base
    image's entrypoint (/opt/apache/beam/boot, which Dataflow requires) alone."""
    found = python_in(
        "beam-worker-layer", "import apache_beam, components.convert.core, pipeline; print(apache_beam.__version__)"
    )
    assert found.returncode == 0, found.stderr[-3000:]
    assert found.stdout.strip() == "2.77.0"
    with open(os.path.join(REPO_ROOT, "containers", "beam-worker", "Dockerfile")) as handle:
        instructions = [line.split()[0] for line in handle if line.strip() and not line.startswith("#")]
    assert "ENTRYPOINT" not in instructions and "CMD" not in instructions and "USER" not in instructions


def test_an_output_the_images_user_cannot_write_is_one_line_naming_it_and_the_user(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)  # the invoking user's (root here); uid 65534 cannot write it
    result = run_in(
        "pipeline",
        "python",
        "-m",
        "components.convert",
        "--source",
        str(tmp_path),
        "--output",
        str(locked / "examples"),
        folders=[str(tmp_path)],
        user=("--user", "65534:65534"),
    )
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --output {locked}/examples cannot be written by user nobody (uid 65534)"), last
    assert "Traceback" not in result.stderr


def test_image_sizes_stay_within_their_budgets():
    sizes = {}
    for name in SIZE_BUDGETS_GB:
        found = docker("image", "inspect", "--format", "{{.Size}}", IMAGES.uri(name))
        sizes[name] = round(int(found.stdout) / 1e9, 2)
    print(json.dumps({"image_sizes_gb": sizes, "budgets_gb": SIZE_BUDGETS_GB}))
    assert all(sizes[name] <= budget for name, budget in SIZE_BUDGETS_GB.items()), sizes


@pytest.fixture(scope="module")
def both_runners(tmp_path_factory):
    """The demo run under each runner, side by side: {runner: (work dir, summary, result)}. In Docker, the train step
    runs in pipeline.yaml's training image (run-local's --accelerator default is pipeline.yaml's, v5e-4)."""
    root = tmp_path_factory.mktemp("runners")
    started = {
        runner: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline",
                "run-local",
                "--work-dir",
                str(root / runner),
                "--runner",
                runner,
                *(["--image-registry", IMAGES.registry, "--image-tag", IMAGES.tag] if runner == "docker" else []),
                "--registry",
                str(root / f"{runner}-reg"),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for runner in ("docker", "subprocess")
    }
    runs = {}
    for runner, process in started.items():
        stdout, stderr = process.communicate(timeout=1800)
        assert process.returncode == 0, runner + ": " + stdout[-3000:] + stderr[-5000:]
        with open(root / runner / "summary.json") as handle:
            runs[runner] = (root / runner, json.load(handle), stdout + stderr)
    return runs


def test_the_whole_dag_runs_in_its_images_with_the_results_of_the_subprocess_runner(both_runners):
    work_dir, docker_run, _ = both_runners["docker"]
    _, subprocess_run, _ = both_runners["subprocess"]
    for key in ("counts", "class_names", "quarantined", "blessed"):  # (the fingerprint names each work dir)
        assert docker_run[key] == subprocess_run[key], key
    assert docker_run["test_accuracy"] >= DEMO_ACCURACY_BAR and subprocess_run["test_accuracy"] >= DEMO_ACCURACY_BAR
    assert (
        sorted(docker_run["formats"])
        == sorted(subprocess_run["formats"])
        == ["saved_model", "tflite_float", "tflite_int8"]
    )
    assert docker_run["export_agreement"] >= demo_export_agreement_floor(docker_run["training"]["precision"])
    # each step in the image pipeline.yaml gives it: the TPU trainer for train (v5e-4, which trains on the CPU here),
    # the light image for fingerprint, find the baseline and register, the pipeline image for convert, check data,
    # evaluate and export
    used = re.findall(r"Found image '([^']+)'", (work_dir / "run.log").read_text())
    assert (
        used.count(IMAGES.uri("train-tpu")),
        used.count(IMAGES.uri("light")),
        used.count(IMAGES.uri("pipeline")),
        len(used),
    ) == (1, 3, 4, 8)
    assert docker_run["registry"]["action"] == subprocess_run["registry"]["action"] == "registered"
    assert docker_run["registry"]["version"] == subprocess_run["registry"]["version"] == 1
    assert os.stat(docker_run["export_json"]).st_uid == os.getuid()


def test_run_local_in_docker_with_an_image_that_is_not_built_is_one_line(tmp_path):
    from tests.conftest import run_cli

    result = run_cli(
        "pipeline", "run-local", "--work-dir", str(tmp_path / "work"), "--runner", "docker", "--image-tag", "not-built"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --runner docker: image {IMAGES.registry}/pipeline:not-built is not here: build it with `make images` "
        "(REGISTRY=... TAG=... to match --image-registry and --image-tag)"
    )
    assert not (tmp_path / "work").exists()
