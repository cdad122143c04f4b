"""The training job's launcher on Vertex AI (``components/train/job_launcher.py``): Google Cloud Pipeline Components'
custom-job launcher with a bound on the job's wait for its machines. Run here with the payload the compiled IR
renders, against the fake server: a job that gets its machines runs to its end; one that Vertex AI keeps queued (no
quota, no capacity) is cancelled after the bound and the step fails in one line."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from tests.conftest import REPO_ROOT

COMMITTED = os.path.join(REPO_ROOT, "pipeline.yaml")


def train_job_component(spec: dict) -> tuple[dict, dict]:
    """(the training job's executor, its component): the GCPC custom job the compiled IR launches."""
    executors = spec["deploymentSpec"]["executors"]
    name = next(
        n for n, e in executors.items() if "components.train.job_launcher" in e.get("container", {}).get("command", [])
    )
    return executors[name], spec["components"][name.replace("exec-", "comp-")]


def rendered_args(spec: dict) -> list[str]:
    """The launcher's arguments as Vertex AI renders them: each input placeholder replaced by its value (the
    component's defaults; the worker pools as the DAG's training task gives them), a string as it is, anything else
    as JSON."""
    executor, component = train_job_component(spec)
    values = {name: p.get("defaultValue") for name, p in component["inputDefinitions"]["parameters"].items()}
    stack = [spec["root"], spec["components"]]
    while stack:  # the task's own worker pools (with the TPU topology) override the component's default
        node = stack.pop()
        if isinstance(node, dict):
            pools = node.get("worker_pool_specs", {})
            if isinstance(pools, dict) and "runtimeValue" in pools:
                values["worker_pool_specs"] = pools["runtimeValue"]["constant"]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    values.update(project="proj", location="europe-west4", display_name="train-v5e-4")

    def whole(value):  # a number the IR keeps as a double, written as Vertex AI's protojson writes it: 100, not 100.0
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, dict):
            return {key: whole(item) for key, item in value.items()}
        return [whole(item) for item in value] if isinstance(value, list) else value

    def render(text: str) -> str:
        def one(match: re.Match) -> str:
            value = values[match.group(1)]
            return value if isinstance(value, str) else json.dumps(whole(value))

        return re.sub(r"\{\{\$\.inputs\.parameters\['(\w+)'\]\}\}", one, text)

    return [render(arg) for arg in executor["container"]["args"]]


@pytest.fixture
def launcher(in_pipeline, monkeypatch, tmp_path):
    """The launcher's arguments for the committed IR, GCPC's client pointed at the fake (the one edge: it reaches
    {location}-aiplatform over gRPC), polling every 50 ms."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner

    real_client = aiplatform.gapic.JobServiceClient

    def to_the_fake(client_options, client_info):
        assert client_options.api_endpoint == "europe-west4-aiplatform.googleapis.com"
        return real_client(
            credentials=AnonymousCredentials(),
            transport="rest",
            client_options=ClientOptions(api_endpoint=in_pipeline.url),
        )

    monkeypatch.setattr(aiplatform.gapic, "JobServiceClient", to_the_fake)
    monkeypatch.setattr(job_remote_runner, "_POLLING_INTERVAL_IN_SECONDS", 0.05)
    with open(COMMITTED) as handle:
        args = rendered_args(yaml.safe_load(handle))
    resources = str(tmp_path / "gcp_resources")
    args[args.index("--gcp_resources") + 1] = resources
    return in_pipeline, args, resources


def test_the_compiled_training_step_runs_our_launcher_with_its_bound():
    with open(COMMITTED) as handle:
        spec = yaml.safe_load(handle)
    executor, _ = train_job_component(spec)
    container = executor["container"]
    assert container["image"] == "us-docker.pkg.dev/my-project/tpu-image-pipeline/light:0.1.0"
    assert container["command"] == ["python3", "-u", "-m", "components.train.job_launcher"]
    assert container["args"][-2:] == ["--max_queued_seconds", "3600"]  # an hour by default


@pytest.mark.parametrize(
    ("flags", "seconds"),
    [
        (["--max-queue", "30m"], "1800"),
        (["--max-queue", "0"], "0"),
        (["--accelerator", "l4", "--scheduling", "flex-start", "--max-wait", "2h"], "0"),
    ],
)
def test_the_bound_is_a_compile_option(tmp_path, flags, seconds):
    from pipeline.__main__ import main

    output = tmp_path / "p.yaml"
    assert main(["compile", "--output", str(output), *flags]) == 0
    with open(output) as handle:
        assert train_job_component(yaml.safe_load(handle))[0]["container"]["args"][-1] == seconds


def test_a_job_that_gets_its_machines_runs_to_its_end(launcher):
    from components.train.job_launcher import main

    fake, args, resources = launcher
    assert main([*args, "--max_queued_seconds", "3600"]) == 0
    (name,) = fake.custom_jobs
    assert fake.custom_jobs[name]["state"] == "JOB_STATE_SUCCEEDED"
    (body,) = fake.bodies("POST", "/customJobs")
    (pool,) = body["jobSpec"]["workerPoolSpecs"]
    assert pool["machineSpec"] == {"machineType": "ct5lp-hightpu-4t", "tpuTopology": "2x2"}
    assert pool["containerSpec"]["imageUri"].endswith("/train-tpu:0.1.0")
    assert json.load(open(resources))["resources"][0]["resourceUri"].endswith(name)  # noqa: SIM115


def test_a_job_kept_queued_past_its_bound_is_cancelled_and_the_step_fails_in_one_line(launcher, capsys):
    from components.train.job_launcher import main

    fake, args, _ = launcher
    fake.capacity = False  # Vertex AI keeps it queued: the project has no TPU v5e quota in the region
    assert main([*args[:-1], "0.5"]) == 1
    (name,) = fake.custom_jobs
    assert fake.custom_jobs[name]["state"] == "JOB_STATE_CANCELLED"
    assert fake.bodies("POST", ":cancel") == [{}]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(
        rf"error: training job {name} waited \d+ min for 4 TPU chips \(ct5lp-hightpu-4t, 2x2\) in europe-west4 "
        r"without starting, and was cancelled: the project's Vertex AI custom training quota for that machine in the "
        r"region \(python -m pipeline check reads it; .*\), or the region's capacity \(submit to another --region, "
        r"compile for another --accelerator, or raise --max-queue\)",
        line,
    )


def test_the_launcher_runs_without_what_the_light_image_leaves_out(launcher, tmp_path):
    """It runs in the light image: here in a process where every package the light image lacks cannot be imported
    (``tests/pipeline/test_light_steps.py``), against the fake server."""
    import subprocess
    import sys

    from tests.pipeline.test_light_steps import GUARD, missing_modules

    fake, args, _ = launcher
    script = (
        GUARD.format(missing=sorted(missing_modules()))
        + f"""
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform
from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner

real = aiplatform.gapic.JobServiceClient
aiplatform.gapic.JobServiceClient = lambda client_options, client_info: real(
    credentials=AnonymousCredentials(), transport="rest", client_options=ClientOptions(api_endpoint={fake.url!r}))
job_remote_runner._POLLING_INTERVAL_IN_SECONDS = 0.05
from components.train.job_launcher import main
code = main(sys.argv[1:])
print(sorted(name for name in set(sys.modules) - AT_START
             if any(name == package or name.startswith(package + ".") for package in MISSING)))
sys.exit(code)
"""
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert [job["state"] for job in fake.custom_jobs.values()] == ["JOB_STATE_SUCCEEDED"]
