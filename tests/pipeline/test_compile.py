"""The compiled IR: the committed pipeline.yaml is what the code compiles to, and it names our images."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from pipeline.accelerators import ACCELERATORS, DEFAULT_ACCELERATOR
from pipeline.compile import compile_pipeline
from pipeline.images import DEFAULT_REGISTRY, DEFAULT_TAG, LIGHT_STEPS, Images
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


TOP_TASKS = ["check-data", "condition-branches", "convert", "evaluate", "find-baseline", "fingerprint", "train"]
# on Vertex AI, training is a branch: a tuning job when tune_trials > 0, else the training job
VERTEX_TOP_TASKS = sorted([*TOP_TASKS[:-1], "training-branches"])


def steps_of(spec: dict) -> dict:
    """The tasks of the DAG's steps, the blessing gate named ``condition-branches`` whatever KFP numbered it, and on
    Vertex AI the training's branches ``training-branches``: at the root locally; on Vertex AI, inside the exit
    handler that mails the run's outcome."""
    tasks = spec["root"]["dag"]["tasks"]
    if "exit-handler-1" in tasks:
        tasks = spec["components"][tasks["exit-handler-1"]["componentRef"]["name"]]["dag"]["tasks"]
    named = {}
    for name, task in tasks.items():
        if re.fullmatch(r"condition-branches-\d+", name):
            inner = branch_tasks(spec, task)
            name = "training-branches" if any("train" in tasks for tasks in inner.values()) else "condition-branches"
        named[name] = task
    return named


def branch_tasks(spec: dict, gate: dict) -> dict[str, dict]:
    """The tasks of each branch under a ``condition-branches`` task: {branch task: its tasks}."""
    branches = spec["components"][gate["componentRef"]["name"]]["dag"]["tasks"]
    return {name: spec["components"][task["componentRef"]["name"]]["dag"]["tasks"] for name, task in branches.items()}


def branches(spec: dict) -> dict[str, tuple[str, dict]]:
    """The If / Else branches under the blessing gate: {branch task: (condition, its tasks)}."""
    gate = spec["components"][steps_of(spec)["condition-branches"]["componentRef"]["name"]]
    return {
        name: (task["triggerPolicy"]["condition"], spec["components"][task["componentRef"]["name"]]["dag"]["tasks"])
        for name, task in gate["dag"]["tasks"].items()
    }


# the step inputs fed from a pipeline parameter of another name, each written out by hand: every other step input
# fed from a pipeline parameter takes the one of its own name
RENAMED_INPUTS = {
    ("find-baseline", "baseline"): "baseline_model",
    ("find-baseline", "display_name"): "model_display_name",
    ("register", "display_name"): "model_display_name",
    ("hyperparameter-tuning-job", "max_trial_count"): "tune_trials",
    ("hyperparameter-tuning-job", "parallel_trial_count"): "tune_parallel_trials",
}


def parameter_feeds(spec: dict) -> list[tuple[str, str, str]]:
    """(task, its input, the pipeline parameter it reads) for every task input fed from a pipeline parameter, at any
    depth of the DAG (KFP passes them down through the exit handler and the conditions as
    ``pipelinechannel--<parameter>``)."""
    root_inputs = set(spec["root"]["inputDefinitions"]["parameters"])
    feeds = []
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    for dag in dags:
        for task, body in dag["tasks"].items():
            for name, source in body.get("inputs", {}).get("parameters", {}).items():
                parameter = source.get("componentInputParameter", "").removeprefix("pipelinechannel--")
                if parameter in root_inputs:
                    feeds.append((task, name.removeprefix("pipelinechannel--"), parameter))
    return feeds


def test_each_pipeline_parameter_reaches_the_step_input_of_its_name():
    """Read from the committed IR: a parameter wired to another step input (the DAG passing ``max_accuracy_drop`` as
    evaluate's ``min_accuracy``, say) judges every run by the wrong number, and only a whole run would show it."""
    feeds = parameter_feeds(without_sdk_version(COMMITTED))
    wrong = [
        f"{task}.{name} <- {parameter}"
        for task, name, parameter in feeds
        if parameter != RENAMED_INPUTS.get((task, name), name)
    ]
    assert not wrong, wrong
    fed = {(task, name) for task, name, _ in feeds}
    assert {
        ("evaluate", "min_accuracy"),
        ("evaluate", "max_accuracy_drop"),
        ("train", "learning_rate"),
        ("convert", "validation_fraction"),
        *RENAMED_INPUTS,
    } <= fed


def test_dag_is_fingerprint_convert_check_train_evaluate_then_gated_export_and_registration():
    spec = without_sdk_version(COMMITTED)
    tasks = steps_of(spec)
    assert sorted(tasks) == VERTEX_TOP_TASKS
    assert tasks["convert"]["dependentTasks"] == ["fingerprint"]
    fingerprint_input = tasks["convert"]["inputs"]["parameters"]["source_fingerprint"]
    assert fingerprint_input["taskOutputParameter"]["producerTask"] == "fingerprint"
    assert tasks["fingerprint"]["cachingOptions"] == {}  # never cached: it must see new files
    assert tasks["convert"]["cachingOptions"] == {"enableCache": True}
    # and uncacheable whatever the job's setting: an input that the orchestrator sets to the run's own id
    for task in ("fingerprint", "find-baseline"):
        assert tasks[task]["inputs"]["parameters"]["run_id"] == {
            "runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}
        }
    # the data checks stand between convert and train: a blocked version fails there, and nothing trains
    assert sorted(tasks["check-data"]["dependentTasks"]) == ["convert", "find-baseline"]
    check = tasks["check-data"]["inputs"]
    assert check["artifacts"]["examples"]["taskOutputArtifact"] == {
        "outputArtifactKey": "examples",
        "producerTask": "convert",
    }
    assert check["parameters"]["baseline"]["taskOutputParameter"]["producerTask"] == "find-baseline"
    # training: with tune_trials > 0 the tuning job between its specification and its best trial, else the
    # training job once; either after the data checks
    training = tasks["training-branches"]
    assert sorted(training["dependentTasks"]) == ["check-data", "convert"]
    tuned, once = branch_tasks(spec, training).values()
    trigger = [
        body["triggerPolicy"]["condition"]
        for body in spec["components"][training["componentRef"]["name"]]["dag"]["tasks"].values()
    ]
    channel = "int(inputs.parameter_values['pipelinechannel--tune_trials'])"
    assert trigger == [f"{channel} > 0", f"!({channel} > 0)"]
    assert sorted(tuned) == ["best-trial", "hyperparameter-tuning-job", "tuning-spec"] and sorted(once) == ["train"]
    assert tuned["hyperparameter-tuning-job"]["dependentTasks"] == ["tuning-spec"]
    assert tuned["best-trial"]["inputs"]["parameters"]["gcp_resources"]["taskOutputParameter"] == {
        "outputParameterKey": "gcp_resources",
        "producerTask": "hyperparameter-tuning-job",
    }
    assert tuned["tuning-spec"]["inputs"]["artifacts"]["examples"] == {
        "componentInputArtifact": "pipelinechannel--convert-examples"
    }
    # evaluate and export take whichever model the branch made (dsl.OneOf): the best trial's, or the training's
    model = tasks["evaluate"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"]
    assert model["producerTask"].startswith("condition-branches-")
    picked = spec["components"][training["componentRef"]["name"]]["dag"]["outputs"]["artifacts"]
    assert [s["producerSubtask"] for s in picked[model["outputArtifactKey"]]["artifactSelectors"]] == [
        name for name in branch_tasks(spec, training)
    ]
    assert [s["outputArtifactKey"] for s in picked[model["outputArtifactKey"]]["artifactSelectors"]] == [
        "pipelinechannel--best-trial-model",
        "pipelinechannel--train-model",
    ]
    shown = tasks["evaluate"]["inputs"]["artifacts"]["data_checks"]["taskOutputArtifact"]  # in the report
    assert shown == {"outputArtifactKey": "statistics", "producerTask": "check-data"}
    # the baseline comes from the registry (never cached: the registry changes between runs)
    assert sorted(tasks["evaluate"]["dependentTasks"]) == sorted(
        ["check-data", "convert", "find-baseline", model["producerTask"]]
    )
    assert tasks["evaluate"]["inputs"]["parameters"]["baseline"]["taskOutputParameter"]["producerTask"] == (
        "find-baseline"
    )
    assert tasks["find-baseline"]["cachingOptions"] == {}
    # export and registration only when blessed; otherwise the not-blessed step, and the run succeeds
    (blessed_condition, blessed), (else_condition, not_blessed) = branches(spec).values()
    channel = "inputs.parameter_values['pipelinechannel--evaluate-Output']"
    assert blessed_condition == f"{channel} == true" and else_condition == f"!({channel} == true)"
    deploy_gate = next(name for name in blessed if name.startswith("condition-"))
    assert sorted(blessed) == sorted([deploy_gate, "export", "register"]) and sorted(not_blessed) == ["not-blessed"]
    assert blessed["register"]["dependentTasks"] == ["export"] and blessed["register"]["cachingOptions"] == {}
    # the statistics of the data the model learned from go into the registry with it (not through export, which
    # stays a cache hit when only the data checks ran again)
    statistics = blessed["register"]["inputs"]["artifacts"]["data_statistics"]
    assert statistics == {"componentInputArtifact": "pipelinechannel--check-data-statistics"}
    assert "data_statistics" not in blessed["export"]["inputs"]["artifacts"]
    # with an endpoint given, the registered version (register's google.VertexModel) is deployed to it
    gate = blessed[deploy_gate]
    assert gate["triggerPolicy"]["condition"] == "inputs.parameter_values['pipelinechannel--endpoint'] != ''"
    deploy = spec["components"][gate["componentRef"]["name"]]["dag"]["tasks"]["deploy"]
    assert deploy["inputs"]["artifacts"]["vertex_model"] == {
        "componentInputArtifact": "pipelinechannel--register-vertex_model"
    }
    assert gate["inputs"]["artifacts"]["pipelinechannel--register-vertex_model"]["taskOutputArtifact"] == {
        "outputArtifactKey": "vertex_model",
        "producerTask": "register",
    }
    assert deploy["cachingOptions"] == {}  # the endpoint changes between runs, not the step's inputs
    endpoint_output = spec["components"]["comp-deploy"]["outputDefinitions"]["artifacts"]["vertex_endpoint"]
    assert endpoint_output["artifactType"]["schemaTitle"] == "google.VertexEndpoint"
    register = blessed["register"]["inputs"]["parameters"]
    assert register["pipeline_run"]["runtimeValue"]["constant"] == "{{$.pipeline_job_name}}"
    assert register["model_root"] == {"componentInputParameter": "pipelinechannel--model_root"}
    assert register["baseline"] == {"componentInputParameter": "pipelinechannel--find-baseline-Output"}
    # the evaluation goes with the registered version, and the step outputs GCPC's google.VertexModel
    evaluation = blessed["register"]["inputs"]["artifacts"]["evaluation"]
    assert evaluation == {"componentInputArtifact": "pipelinechannel--evaluate-evaluation"}
    vertex_model = spec["components"]["comp-register"]["outputDefinitions"]["artifacts"]["vertex_model"]
    assert vertex_model["artifactType"]["schemaTitle"] == "google.VertexModel"
    # compiled without addresses: no mail step, no exit handler (tests/pipeline/test_vertex.py compiles with them)
    root = spec["root"]["dag"]["tasks"]
    assert "vertex-pipelines-notification-email" not in root and "exit-handler-1" not in root
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert "notify_emails" not in parameters
    assert parameters["image_size"]["defaultValue"] == 0  # auto: the source images' typical size, at most 192
    assert parameters["min_accuracy"]["defaultValue"] == 0.0 and parameters["baseline_model"]["defaultValue"] == ""
    assert parameters["model_display_name"]["defaultValue"] == "tpu-image-classifier"
    assert parameters["model_root"]["defaultValue"] == ""


def test_with_caching_forced_on_the_fingerprint_and_baseline_keep_their_per_run_input():
    """Vertex AI's enable_caching=True rewrites every task's caching option (aiplatform's own function, run here),
    and run-local's --cache rewrites it the same: the fingerprint and baseline lookups then rely on their run_id
    input alone, which the rewrite leaves."""
    from google.cloud.aiplatform.pipeline_jobs import _set_enable_caching_value

    from pipeline.local.run import cache_every_task

    spec, ours = without_sdk_version(COMMITTED), without_sdk_version(COMMITTED)
    _set_enable_caching_value(spec, True)
    cache_every_task(ours)
    assert ours == spec
    tasks = steps_of(spec)
    assert all(task["cachingOptions"] == {"enableCache": True} for task in tasks.values())
    for task in ("fingerprint", "find-baseline"):
        assert tasks[task]["inputs"]["parameters"]["run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"


def test_a_cached_local_run_prepares_its_spec_without_importing_aiplatform():
    """aiplatform's import takes seconds that run-local --cache has no use for: its spec is prepared without it."""
    script = """
import json, sys
from pipeline.local.run import local_pipeline_spec
spec = local_pipeline_spec(registry=False, cache=True, run_name="r", run_id="1")
fingerprint = spec["root"]["dag"]["tasks"]["fingerprint"]
print(json.dumps(["google.cloud.aiplatform" in sys.modules, fingerprint["cachingOptions"]]))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [False, {"enableCache": True}]


def test_registry_steps_take_project_and_location_from_vertex_ai():
    from components.register.component import LOCATION_PLACEHOLDER, PROJECT_ID_PLACEHOLDER

    spec = without_sdk_version(COMMITTED)
    for component in ("comp-find-baseline", "comp-register"):
        parameters = spec["components"][component]["inputDefinitions"]["parameters"]
        assert parameters["project"]["defaultValue"] == PROJECT_ID_PLACEHOLDER
        assert parameters["location"]["defaultValue"] == LOCATION_PLACEHOLDER


def test_the_local_dag_has_the_gate_but_no_registry_steps(tmp_path):
    from kfp import compiler

    from pipeline.dag import build_pipeline

    path = str(tmp_path / "local.yaml")
    compiler.Compiler().compile(build_pipeline(registry=None), path)
    spec = without_sdk_version(path)
    assert sorted(steps_of(spec)) == sorted(set(TOP_TASKS) - {"find-baseline"})
    assert [sorted(tasks) for _, tasks in branches(spec).values()] == [["export"], ["not-blessed"]]
    baseline = steps_of(spec)["evaluate"]["inputs"]["parameters"]["baseline"]
    assert baseline == {"componentInputParameter": "baseline_model"}
    outputs = spec["root"]["dag"]["outputs"]["parameters"]  # what run-local reports
    assert outputs["blessed"]["valueFromParameter"] == {"outputParameterKey": "Output", "producerSubtask": "evaluate"}
    assert outputs["exported_model_uri"]["valueFromParameter"]["producerSubtask"] == "condition-branches-1"
    with open(path) as handle:
        text = handle.read()
    assert "{{$.pipeline_google_cloud" not in text  # kfp.local cannot resolve these
    assert "notification" not in text  # no Vertex AI to send mail


def test_the_folder_registry_dag_has_the_registry_steps_without_vertex_ai(tmp_path):
    """run-local --registry DIR: the same gate and registry steps, on a folder, with nothing kfp.local cannot
    resolve (the Vertex AI steps carry the project and location placeholders even in their source)."""
    from kfp import compiler

    from pipeline.dag import build_pipeline

    path = str(tmp_path / "folder.yaml")
    compiler.Compiler().compile(build_pipeline(registry="folder"), path)
    spec = without_sdk_version(path)
    assert sorted(steps_of(spec)) == sorted({*TOP_TASKS, "find-baseline-in-folder"} - {"find-baseline"})
    assert [sorted(tasks) for _, tasks in branches(spec).values()] == [
        ["export", "register-in-folder"],
        ["not-blessed"],
    ]
    with open(path) as handle:
        assert "{{$.pipeline_google_cloud" not in handle.read()


GCPC_LAUNCHER = "gcr.io/ml-pipeline/google-cloud-pipeline-components:"


def train_task(spec: dict) -> dict:
    """The train task: a step of its own locally; on Vertex AI, the training branch taken without tuning."""
    steps = steps_of(spec)
    if "train" in steps:
        return steps["train"]
    return next(tasks["train"] for tasks in branch_tasks(spec, steps["training-branches"]).values() if "train" in tasks)


def tuning_spec_task(spec: dict) -> dict:
    """On Vertex AI, the tuning job's specification step, in the training branch taken with tune_trials > 0."""
    branches = branch_tasks(spec, steps_of(spec)["training-branches"]).values()
    return next(tasks["tuning-spec"] for tasks in branches if "tuning-spec" in tasks)


def train_pools(spec: dict) -> list[dict]:
    """The training custom job's worker pools."""
    task = train_task(spec)
    given = task["inputs"]["parameters"].get("worker_pool_specs")
    if given:
        return given["runtimeValue"]["constant"]
    component = spec["components"][task["componentRef"]["name"]]
    return component["inputDefinitions"]["parameters"]["worker_pool_specs"]["defaultValue"]


def train_machine(spec: dict) -> tuple[dict, str]:
    """The training custom job's first worker pool: (machine spec, image)."""
    pools = train_pools(spec)
    return pools[0]["machine_spec"], pools[0]["container_spec"]["image_uri"]


def our_images(spec: dict) -> set[str]:
    """Every image the pipeline runs our code in: the steps' containers and the training job's worker pool."""
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    images = {image for image in images if not image.startswith(GCPC_LAUNCHER)}
    return images | {train_machine(spec)[1]}


def test_registry_and_tag_are_compile_time_choices(tmp_path):
    path = compile_pipeline(str(tmp_path / "p.yaml"), Images(registry="europe-docker.pkg.dev/acme/ml", tag="v7"))
    spec = without_sdk_version(path)
    assert our_images(spec) == {
        "europe-docker.pkg.dev/acme/ml/pipeline:v7",
        "europe-docker.pkg.dev/acme/ml/light:v7",
        "europe-docker.pkg.dev/acme/ml/train-tpu:v7",
    }
    # Dataflow's workers, where beam_args name it without an image of their own: the beam-worker image of the same
    # registry and tag (components/convert/staging.py adds it)
    convert = steps_of(spec)["convert"]["inputs"]["parameters"]
    assert convert["worker_image"] == {"runtimeValue": {"constant": "europe-docker.pkg.dev/acme/ml/beam-worker:v7"}}


def test_the_steps_that_list_files_and_call_apis_run_in_the_light_image_and_the_others_in_the_pipeline_image():
    spec = without_sdk_version(COMMITTED)
    by_image: dict[str, set[str]] = {}
    for name, executor in spec["deploymentSpec"]["executors"].items():
        if "container" in executor and not executor["container"]["image"].startswith(GCPC_LAUNCHER):
            image = executor["container"]["image"].rsplit("/", 1)[-1].split(":")[0]
            by_image.setdefault(image, set()).add(name.removeprefix("exec-"))
    assert by_image == {
        # (train: the launcher of the training job, which runs in the TPU trainer's image, train_machine)
        "light": {"fingerprint", "find-baseline", "register", "deploy", "not-blessed", "train"},
        "pipeline": {"convert", "check-data", "evaluate", "export", "tuning-spec", "best-trial"},
    }
    assert {name.replace("-", "_") for name in by_image["light"]} - {"train"} <= set(LIGHT_STEPS)


def test_every_image_in_pipeline_yaml_has_a_dockerfile():
    spec = without_sdk_version(COMMITTED)
    for image in our_images(spec):
        name = image.rsplit("/", 1)[-1].split(":")[0]
        assert os.path.exists(os.path.join(REPO_ROOT, "containers", name, "Dockerfile")), name
    launchers = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} - our_images(spec)
    assert launchers == {GCPC_LAUNCHER + "2.22.0"}  # Google's, pinned with google-cloud-pipeline-components


EXPECTED_MACHINES = {
    "cpu": ({"machine_type": "n1-standard-8"}, "pipeline"),
    "t4": (
        {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1},
        "train-gpu",
    ),
    "l4": ({"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4", "accelerator_count": 1}, "train-gpu"),
    "a100": (
        {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100", "accelerator_count": 1},
        "train-gpu",
    ),
    "v5e-1": ({"machine_type": "ct5lp-hightpu-1t", "tpu_topology": "1x1"}, "train-tpu"),
    "v5e-4": ({"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "2x2"}, "train-tpu"),
    "v5e-8": ({"machine_type": "ct5lp-hightpu-8t", "tpu_topology": "2x4"}, "train-tpu"),
    "v5e-16": ({"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "4x4"}, "train-tpu"),
    "v6e-1": ({"machine_type": "ct6e-standard-1t", "tpu_topology": "1x1"}, "train-tpu"),
    "v6e-4": ({"machine_type": "ct6e-standard-4t", "tpu_topology": "2x2"}, "train-tpu"),
    "v6e-8": ({"machine_type": "ct6e-standard-8t", "tpu_topology": "2x4"}, "train-tpu"),
    "v6e-16": ({"machine_type": "ct6e-standard-4t", "tpu_topology": "4x4"}, "train-tpu"),
}
EXPECTED_HOSTS = {"v5e-16": 4, "v6e-16": 4}  # the multi-host slices: 4 TPU VMs of 4 chips each


@pytest.mark.parametrize("target", sorted(ACCELERATORS))
def test_each_target_compiles_to_its_machine_spec(tmp_path, target):
    spec = without_sdk_version(compile_pipeline(str(tmp_path / "p.yaml"), accelerator=target))
    machine, image = train_machine(spec)
    expected_machine, expected_image = EXPECTED_MACHINES[target]
    assert machine == expected_machine
    assert image == f"{DEFAULT_REGISTRY}/{expected_image}:{DEFAULT_TAG}"
    # the other steps stay where they were
    assert sorted(steps_of(spec)) == VERTEX_TOP_TASKS
    train_inputs = train_task(spec)["inputs"]["parameters"]
    assert train_inputs["hosts"]["runtimeValue"]["constant"] == EXPECTED_HOSTS.get(target, 1)
    # a tuning job's trials run on the same machine, in the same image, on as many hosts
    tuning = {
        name: value["runtimeValue"]["constant"]
        for name, value in tuning_spec_task(spec)["inputs"]["parameters"].items()
        if "runtimeValue" in value
    }
    assert tuning["machine"] == expected_machine and tuning["image"] == image
    assert tuning["hosts"] == EXPECTED_HOSTS.get(target, 1)
    # one worker pool: Vertex AI spreads a multi-host topology over its hosts itself
    assert [pool["replica_count"] for pool in train_pools(spec)] == [1]
    job_inputs = spec["components"]["comp-train"]["inputDefinitions"]["parameters"]
    # the job runs as the pipeline does: its service account, network and encryption key (GCPC's placeholders)
    assert job_inputs["service_account"]["defaultValue"] == "{{$.pipeline_service_account}}"
    assert job_inputs["network"]["defaultValue"] == "{{$.pipeline_network}}"
    assert job_inputs["encryption_spec_key_name"]["defaultValue"] == "{{$.pipeline_encryption_key_name}}"
    # a slice's hosts train in lockstep: Vertex AI restarts them all when one restarts (one alone could not rejoin)
    assert job_inputs["restart_job_on_worker_restart"]["defaultValue"] is (target in EXPECTED_HOSTS)
    assert job_inputs["strategy"]["defaultValue"] == "STANDARD"  # on demand unless compiled otherwise
    # a boot disk the machine takes: TPU v6e VMs take Hyperdisk only (Cloud TPU's persistent disk page), the others
    # a persistent SSD; the tuning trials' too
    disk = {"boot_disk_type": "hyperdisk-balanced" if target.startswith("v6e") else "pd-ssd", "boot_disk_size_gb": 100}
    assert train_pools(spec)[0]["disk_spec"] == disk and tuning["boot_disk"] == disk
    # a failed training job is launched again (it resumes from its backup): twice, waiting 2 then 4 minutes
    retry = train_task(spec)["retryPolicy"]
    assert (retry["maxRetryCount"], retry["backoffDuration"], retry["backoffFactor"]) == (2, "120s", 2.0)


@pytest.mark.parametrize("target", ["v2-8", "v3-8"])
def test_legacy_tpu_nodes_are_refused_naming_a_replacement(tmp_path, target):
    result = run_cli("pipeline", "compile", "--accelerator", target, "--output", str(tmp_path / "p.yaml"))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --accelerator {target} is the legacy cloud-tpu machine")
    assert line.endswith("use v5e-8 (8 chips) or v6e-8 instead")
    assert not (tmp_path / "p.yaml").exists()


def test_the_committed_pipeline_is_the_default_target():
    assert train_machine(without_sdk_version(COMMITTED))[0] == EXPECTED_MACHINES[DEFAULT_ACCELERATOR][0]


def test_an_unknown_target_is_one_line_exit_2(tmp_path):
    result = run_cli("pipeline", "compile", "--accelerator", "v9-1024", "--output", str(tmp_path / "p.yaml"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: --accelerator 'v9-1024' is not a target: use")
    assert not (tmp_path / "p.yaml").exists()


def test_compile_cli_writes_the_file(tmp_path):
    result = run_cli("pipeline", "compile", "--output", str(tmp_path / "out.yaml"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.yaml").exists()


def test_compiling_the_tuning_job_imports_no_vertex_ai_client(tmp_path):
    """The DAG's tuning job is GCPC's, whose package imports the Vertex AI client (seconds) for serialisers that
    compiling does not use: a compile (the accelerator's too) goes without it, and gives the same tuning job."""
    script = f"""
import sys
from pipeline.compile import compile_pipeline
compile_pipeline({str(tmp_path / "tpu.yaml")!r}, accelerator="v5e-1")
print("google.cloud.aiplatform" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "False"
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import HyperparameterTuningJobRunOp

    from components.train.tuning_component import hyperparameter_tuning_job_op

    assert hyperparameter_tuning_job_op().component_spec == HyperparameterTuningJobRunOp.component_spec


def test_every_dockerfile_passes_hadolint():
    import glob
    import subprocess
    import sys

    hadolint = os.path.join(os.path.dirname(sys.executable), "hadolint")
    dockerfiles = sorted(glob.glob(os.path.join(REPO_ROOT, "containers", "*", "Dockerfile")))
    assert len(dockerfiles) >= 3  # the step image, the TPU trainer, the Beam worker
    for dockerfile in dockerfiles:
        result = subprocess.run([hadolint, dockerfile], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        with open(dockerfile) as handle:
            text = handle.read()
        assert "uv.lock" in text and "--locked" in text  # installs from the one lock file
        assert ":latest" not in text and "FROM " in text


def job_inputs(spec: dict) -> dict:
    return {
        name: p.get("defaultValue")
        for name, p in spec["components"]["comp-train"]["inputDefinitions"]["parameters"].items()
    }


@pytest.mark.parametrize(
    ("accelerator", "flags", "strategy", "max_wait", "affinity"),
    [
        ("v6e-8", ["--scheduling", "spot"], "SPOT", "86400s", None),
        ("a100", ["--scheduling", "flex-start", "--max-wait", "90m"], "FLEX_START", "5400s", None),
        ("l4", ["--scheduling", "flex-start", "--max-wait", "0"], "FLEX_START", "0s", None),
        ("v6e-16", ["--reservation", "any"], "STANDARD", "86400s", {"reservation_affinity_type": "ANY_RESERVATION"}),
        (
            "v6e-16",
            ["--reservation", "projects/p/zones/us-east5-b/reservations/tpus"],
            "STANDARD",
            "86400s",
            {
                "reservation_affinity_type": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": ["projects/p/zones/us-east5-b/reservations/tpus"],
            },
        ),
    ],
)
def test_how_the_training_job_gets_its_machines_is_compiled_into_the_ir(
    tmp_path, accelerator, flags, strategy, max_wait, affinity
):
    from pipeline.__main__ import main

    output = tmp_path / "p.yaml"
    assert main(["compile", "--accelerator", accelerator, "--output", str(output), *flags]) == 0
    spec = without_sdk_version(str(output))
    inputs = job_inputs(spec)
    assert (inputs["strategy"], inputs["max_wait_duration"]) == (strategy, max_wait)
    assert inputs["timeout"] == "604800s"  # (the job's own bound, unless --max-train-time sets one)
    machine, _ = train_machine(spec)
    assert machine.get("reservation_affinity") == affinity
    machines = {
        "v6e-8": "ct6e-standard-8t",
        "a100": "a2-highgpu-1g",
        "l4": "g2-standard-8",
        "v6e-16": "ct6e-standard-4t",
    }
    assert machine["machine_type"] == machines[accelerator]  # the machine kept beside the scheduling
    assert inputs["restart_job_on_worker_restart"] is (accelerator == "v6e-16")
    # the tuning trials' machine is in the same reservation (their strategy: pipeline/vertex/jobs.py check_run)
    tuning = tuning_spec_task(spec)["inputs"]["parameters"]["machine"]["runtimeValue"]["constant"]
    assert tuning.get("reservation_affinity") == affinity


def test_the_training_job_is_cancelled_past_its_max_train_time(tmp_path):
    from pipeline.__main__ import main

    output = tmp_path / "p.yaml"
    assert main(["compile", "--output", str(output), "--max-train-time", "6h"]) == 0
    assert job_inputs(without_sdk_version(str(output)))["timeout"] == "21600s"


def step_deadlines(path: str) -> dict:
    """{executor: the seconds its step may run, or None} of a compiled pipeline."""
    from components.cli import STEP_DEADLINE_ENV

    executors = without_sdk_version(path)["deploymentSpec"]["executors"]
    return {
        label: {e["name"]: e["value"] for e in executor["container"].get("env", [])}.get(STEP_DEADLINE_ENV)
        for label, executor in executors.items()
    }


def test_every_step_but_the_training_job_ends_itself_past_its_max_step_time(tmp_path):
    """KFP gives Vertex AI's tasks no timeout: each step gets its own (12 hours by default, --max-step-time), read by
    the step itself; the training and tuning jobs have Vertex AI's (--max-train-time)."""
    from pipeline.__main__ import main

    jobs = {"exec-train", "exec-hyperparameter-tuning-job"}
    committed = step_deadlines(COMMITTED)
    assert {label for label, seconds in committed.items() if seconds is None} == jobs
    assert set(committed.values()) == {None, str(12 * 3600)}
    output = tmp_path / "p.yaml"
    assert main(["compile", "--output", str(output), "--max-step-time", "90m"]) == 0
    assert set(step_deadlines(str(output)).values()) == {None, "5400"}
    assert main(["compile", "--output", str(output), "--max-step-time", "0"]) == 0
    assert set(step_deadlines(str(output)).values()) == {None}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-train-time", "0"], "--max-train-time '0' is not a duration: use e.g. 6h, 90m, 3600s"),
        (["--max-step-time", "soon"], "--max-step-time 'soon' is not a duration: use e.g. 2h, 90m, 3600s, or 0"),
        (["--max-queue", "a while"], "--max-queue 'a while' is not a duration: use e.g. 30m, 2h, 1800s, or 0 for no"),
        (["--scheduling", "spot", "--max-wait", "2h"], "--max-wait 2h applies to --scheduling flex-start only"),
        (
            ["--scheduling", "flex-start", "--max-wait", "two hours"],
            "--max-wait 'two hours' is not a duration: use e.g. 90m, 2h, 1800s, or 0 for no limit",
        ),
        (
            ["--reservation", "my-tpus"],
            "--reservation 'my-tpus': use any, none, or a reservation's resource name "
            "projects/P/zones/Z/reservations/NAME",
        ),
        (["--scheduling", "spot", "--reservation", "any"], "--reservation any takes --scheduling standard"),
        (["--scheduling", "preemptible"], "argument --scheduling: invalid choice: 'preemptible'"),
        (
            ["--accelerator", "v5e-16", "--scheduling", "spot"],
            "--scheduling spot cannot obtain --accelerator v5e-16: "
            "Vertex AI takes no Spot VMs for a TPU slice of several hosts; use a single-host target (v5e-8)",
        ),
        (
            ["--accelerator", "v6e-8", "--scheduling", "flex-start"],
            "--scheduling flex-start cannot obtain "
            "--accelerator v6e-8: Vertex AI's Dynamic Workload Scheduler queues training jobs for L4, A100, H100, H200 "
            "and B200 GPUs only; use --accelerator l4 or a100",
        ),
        (["--accelerator", "t4", "--scheduling", "flex-start"], "cannot obtain --accelerator t4"),
    ],
)
def test_a_scheduling_mistake_is_one_line_exit_2(tmp_path, flags, message, capsys):
    from components.cli import UsageError
    from pipeline.__main__ import main

    output = tmp_path / "p.yaml"
    try:
        code = main(["compile", "--output", str(output), *flags])
        line = capsys.readouterr().err.strip().splitlines()[-1]
    except UsageError as err:
        code, line = 2, f"error: {err}"
    except SystemExit as exit_:  # argparse's own
        code, line = exit_.code, capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and message in line and not output.exists()


def test_multi_host_targets_are_marked_experimental_in_the_help():
    result = run_cli("pipeline", "compile", "--help")
    text = " ".join(result.stdout.split())
    assert "v5e-16 and v6e-16 are multi-host slices, experimental" in text
