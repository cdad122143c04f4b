"""The compiled IR: the committed pipeline.yaml is what the code compiles to, and it names our images."""

from __future__ import annotations

import os

import yaml

from pipeline.compile import compile_pipeline
from pipeline.images import Images
from tests.conftest import REPO_ROOT, run_cli

COMMITTED = os.path.join(REPO_ROOT, "pipeline.yaml")


def without_sdk_version(path: str) -> dict:
    with open(path) as handle:
        spec = yaml.safe_load(handle)
    spec.pop("sdkVersion", None)
    return spec


def test_committed_pipeline_yaml_is_fresh(tmp_path):
    fresh = compile_pipeline(str(tmp_path / "pipeline.yaml"))
    assert without_sdk_version(COMMITTED) == without_sdk_version(fresh), (
        "pipeline.yaml is stale: run `make compile` and commit it"
    )


def test_dag_is_fingerprint_convert_train_evaluate_export():
    spec = without_sdk_version(COMMITTED)
    tasks = spec["root"]["dag"]["tasks"]
    assert sorted(tasks) == ["convert", "evaluate", "export", "fingerprint", "train"]
    assert tasks["convert"]["dependentTasks"] == ["fingerprint"]
    fingerprint_input = tasks["convert"]["inputs"]["parameters"]["source_fingerprint"]
    assert fingerprint_input["taskOutputParameter"]["producerTask"] == "fingerprint"
    assert tasks["fingerprint"]["cachingOptions"] == {}  # never cached: it must see new files
    assert tasks["convert"]["cachingOptions"] == {"enableCache": True}
    assert tasks["train"]["dependentTasks"] == ["convert"]
    assert sorted(tasks["evaluate"]["dependentTasks"]) == ["convert", "train"]
    assert sorted(tasks["export"]["dependentTasks"]) == ["convert", "evaluate", "train"]
    assert spec["root"]["inputDefinitions"]["parameters"]["image_size"]["defaultValue"] == 192


def test_registry_and_tag_are_compile_time_choices(tmp_path):
    path = compile_pipeline(str(tmp_path / "p.yaml"), Images(registry="europe-docker.pkg.dev/acme/ml", tag="v7"))
    executors = without_sdk_version(path)["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {"europe-docker.pkg.dev/acme/ml/pipeline:v7"}


def test_every_image_in_pipeline_yaml_has_a_dockerfile():
    executors = without_sdk_version(COMMITTED)["deploymentSpec"]["executors"]
    for executor in executors.values():
        name = executor["container"]["image"].rsplit("/", 1)[-1].split(":")[0]
        assert os.path.exists(os.path.join(REPO_ROOT, "containers", name, "Dockerfile")), name


def test_compile_cli_writes_the_file(tmp_path):
    result = run_cli("pipeline", "compile", "--output", str(tmp_path / "out.yaml"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.yaml").exists()
