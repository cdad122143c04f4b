"""Submit, schedule and registry contract tests: the real google-cloud-aiplatform client (REST transport, anonymous
credentials) against the fake Vertex AI server (``tests/pipeline/conftest.py``), and the pipeline root's bucket in
gcp-storage-emulator. The tests check the request bodies the client sends, and what users see when the server
refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from components.cli import UsageError
from components.vertex_client import load_settings
from pipeline.__main__ import main
from tests.conftest import BUCKET, REPO_ROOT, VERTEX_LOGGERS, made_up_evaluation, made_up_export, run_cli
from tests.pipeline.conftest import SOURCE

PARENT = "projects/demo-project/locations/europe-west4"


def compiled(path: str = os.path.join(REPO_ROOT, "pipeline.yaml")) -> dict:
    from pipeline.images import read_template

    return read_template(path)


def test_submit_sends_the_compiled_pipeline_with_its_settings(vertex, capsys, caplog):
    caplog.set_level("INFO", logger="components.vertex_client")  # as the command line logs
    code = main(
        [
            "submit",
            *vertex.job_args,
            "--param",
            "epochs=3",
            "--param",
            "learning_rate=0.01",
            "--service-account",
            "trainer@demo-project.iam.gserviceaccount.com",
            "--label",
            "team=vision",
            "--label",
            "trigger=manual",
            "--job-id",
            "flowers-1",
            "--network",
            "projects/42/global/networks/ml-vpc",
        ]
    )
    assert code == 0
    (body,) = vertex.bodies("POST", "/pipelineJobs")
    assert body["pipelineSpec"] == compiled(vertex.template)
    assert body["runtimeConfig"]["gcsOutputDirectory"] == f"gs://{BUCKET}/root"
    assert body["runtimeConfig"]["parameterValues"] == {"source": SOURCE, "epochs": 3, "learning_rate": 0.01}
    assert body["serviceAccount"] == "trainer@demo-project.iam.gserviceaccount.com"
    assert body["network"] == "projects/42/global/networks/ml-vpc"
    assert {"team": "vision", "trigger": "manual"}.items() <= body["labels"].items()
    request = next(r for r in vertex.requests if r.method == "POST" and r.path.endswith("/pipelineJobs"))
    assert request.query["pipelineJobId"] == ["flowers-1"]
    out = capsys.readouterr().out
    assert f"submitted {PARENT}/pipelineJobs/flowers-1" in out
    link = "console.cloud.google.com/vertex-ai/locations/europe-west4/pipelines/runs/flowers-1?project=demo-project"
    assert link in out
    assert "its steps and its training job run as trainer@demo-project.iam.gserviceaccount.com" in out
    said = [r.getMessage() for r in caplog.records if r.name == "components.vertex_client"]
    assert "project demo-project (from --project), region europe-west4 (from --region)" in said


def test_a_model_file_of_ones_own_is_uploaded_once_under_its_digest_and_the_run_trains_that_copy(
    vertex, gcs, tmp_path, capsys, monkeypatch
):
    """submit --model FILE.py:FUNCTION: the file checked here, uploaded under the pipeline root by its content's
    sha256 (once: a second run of the same file finds it), the DAG's model_name naming the upload and hparams the
    values given; an edited file is another upload, so another run of the train step (its cache key changes)."""
    import hashlib
    import shutil

    from components import storage

    model = tmp_path / "convnet.py"
    shutil.copyfile(os.path.join(REPO_ROOT, "examples", "models", "codelab_convnet.py"), model)
    uploads, write = [], storage.write_atomically
    monkeypatch.setattr(storage, "write_atomically", lambda path, payload: uploads.append(path) or write(path, payload))

    def submitted(job_id: str) -> dict:
        assert (
            main(["submit", *vertex.job_args, "--job-id", job_id, "--model", f"{model}:build", "--hparam", "width=1.5"])
            == 0
        )
        return vertex.bodies("POST", "/pipelineJobs")[-1]["runtimeConfig"]["parameterValues"]

    digest = hashlib.sha256(model.read_bytes()).hexdigest()[:16]
    first = submitted("own-1")
    uploaded = f"gs://{BUCKET}/root/models/{digest}/convnet.py"
    assert first == {"source": SOURCE, "model_name": f"{uploaded}:build", "hparams": ["width=1.5"]}
    assert gcs.get_blob(f"root/models/{digest}/convnet.py").download_as_bytes() == model.read_bytes()
    assert f"model file {model} is at {uploaded}:build" in capsys.readouterr().out
    assert submitted("own-2") == first
    assert uploads == [uploaded]  # once: the second run found it
    model.write_text(model.read_text() + "# one more line\n")
    edited = submitted("own-3")
    assert edited["model_name"] != first["model_name"] and edited["model_name"].endswith("/convnet.py:build")
    assert [blob.name for blob in gcs.list_blobs(prefix="root/models/")] == sorted(
        f"root/models/{hashlib.sha256(content).hexdigest()[:16]}/convnet.py"
        for content in (model.read_bytes(), model.read_bytes()[: -len("# one more line\n")])
    )
    with pytest.raises(UsageError, match=r"^--hparam depth=2: convnet.py:build has no hyperparameter depth"):
        main(["submit", *vertex.job_args, "--model", str(model), "--hparam", "depth=2"])
    assert len(vertex.bodies("POST", "/pipelineJobs")) == 3  # (the mistake was found before any call)


def test_submit_says_whom_the_run_acts_as_and_what_a_missing_act_as_grant_needs(vertex, capsys):
    assert main(["submit", *vertex.job_args]) == 0
    out = capsys.readouterr().out
    assert "its steps and its training job run as the project's Compute Engine default service account" in out
    account = "123456789-compute@developer.gserviceaccount.com"
    refusal = f"Permission 'iam.serviceAccounts.actAs' denied on service account {account} (or it may not exist)."
    vertex.fail("POST", "/pipelineJobs", [(403, "PERMISSION_DENIED", refusal)])
    assert main(["submit", *vertex.job_args]) == 1
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert (
        f"the caller lacks iam.serviceAccounts.actAs (Permission 'iam.serviceAccounts.actAs' denied on service "
        f"account {account}" in line
    )
    assert line.endswith(
        "grant it the Service Account User role (roles/iam.serviceAccountUser) on the account the "
        "run acts as: --service-account, else the project's Compute Engine default service account "
        "(PROJECT_NUMBER-compute@developer.gserviceaccount.com)"
    )


def test_a_pipeline_compiled_with_addresses_mails_each_runs_outcome_to_them(vertex, tmp_path, capsys):
    """The addresses are the compile's (an exit handler cannot take a run's parameter): the compiled run's exit task
    mails them; more than three, or a word that is not an address, is refused when compiling."""
    from tests.pipeline.conftest import REGISTRY, TAG

    team = ["ml-team@example.com", "oncall@example.com"]
    template = str(tmp_path / "mailing.yaml")
    compile_args = ["compile", "--registry", REGISTRY, "--tag", TAG, "--output", template]
    assert main([*compile_args, *(f"--notify-email={address}" for address in team)]) == 0
    args = [arg if arg != vertex.template else template for arg in vertex.job_args]
    assert main(["submit", *args]) == 0
    (body,) = vertex.bodies("POST", "/pipelineJobs")
    exit_task = body["pipelineSpec"]["root"]["dag"]["tasks"]["vertex-pipelines-notification-email"]
    assert exit_task["inputs"]["parameters"]["recipients"] == {"runtimeValue": {"constant": team}}
    assert "notify_emails" not in body["runtimeConfig"]["parameterValues"]
    four = [*team, "a@example.com", "b@example.com"]
    with pytest.raises(UsageError, match=r"^--notify-email given 4 times: Vertex AI mails at most 3 addresses"):
        main([*compile_args, *(f"--notify-email={address}" for address in four)])
    with pytest.raises(UsageError, match=r"^--notify-email 'ml-team' is not an email address"):
        main([*compile_args, "--notify-email", "ml-team"])


def test_tuning_with_a_spot_template_is_refused_before_submitting(vertex, tmp_path):
    """Google Cloud Pipeline Components' tuning job takes no scheduling strategy: its trials would run on demand, so
    tune_trials with a Spot (or flex-start) template is one line, before anything is created; training once is
    not."""
    from tests.pipeline.conftest import REGISTRY, TAG

    spot = str(tmp_path / "spot.yaml")
    assert main(["compile", "--registry", REGISTRY, "--tag", TAG, "--scheduling", "spot", "--output", spot]) == 0
    args = [arg if arg != vertex.template else spot for arg in vertex.job_args]
    with pytest.raises(UsageError, match=r"^--param tune_trials=3: the tuning job's trials cannot run as SPOT"):
        main(["submit", *args, "--param", "tune_trials=3", "--no-preflight"])
    assert not vertex.bodies("POST", "/pipelineJobs")
    assert main(["submit", *args, "--no-preflight"]) == 0


def test_experiment_is_created_once_and_each_run_joins_it(vertex, capsys):
    """submit --experiment: the experiment (a system.Experiment context in the default metadata store) is made on
    the first run and found on the next; each run's own context becomes one of its children."""
    for job_id in ("flowers-1", "flowers-2"):
        assert main(["submit", *vertex.job_args, "--experiment", "flowers-tuning", "--job-id", job_id]) == 0
    experiment = f"{PARENT}/metadataStores/default/contexts/flowers-tuning"
    (created,) = [r.body for r in vertex.requests if r.method == "POST" and r.path.endswith("/contexts")]
    assert created["schemaTitle"] == "system.Experiment" and created["displayName"] == "flowers-tuning"
    runs = [f"{PARENT}/metadataStores/default/contexts/{job_id}" for job_id in ("flowers-1", "flowers-2")]
    assert vertex.contexts[experiment]["childContexts"] == runs
    out = capsys.readouterr().out
    assert "in experiment flowers-tuning: https://console.cloud.google.com/vertex-ai/experiments/" in out


def test_experiment_faults_are_retried_and_a_refusal_is_one_line(vertex, capsys):
    vertex.fail("POST", ":addContextChildren", [503], after=True)  # done, then 503: retried, one child
    assert main(["submit", *vertex.job_args, "--experiment", "flowers-tuning", "--job-id", "flowers-1"]) == 0
    assert len(vertex.contexts[f"{PARENT}/metadataStores/default/contexts/flowers-tuning"]["childContexts"]) == 1
    vertex.fail("POST", "/metadataStores/default/contexts", [403])
    assert main(["submit", *vertex.job_args, "--experiment", "other-experiment", "--job-id", "flowers-2"]) == 1
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "find or create experiment other-experiment" in error[0], error
    assert len(vertex.bodies("POST", "/pipelineJobs")) == 1  # refused before the job was submitted
    with pytest.raises(UsageError, match=r"--experiment Flowers_1: an experiment name is lowercase letters"):
        main(["submit", *vertex.job_args, "--experiment", "Flowers_1"])


def test_tensorboard_sends_the_training_jobs_logs_there_from_a_directory_of_its_own(vertex):
    board = f"{PARENT}/tensorboards/1234"
    account = ["--service-account", "trainer@demo-project.iam.gserviceaccount.com"]
    assert main(["submit", *vertex.job_args, *account, "--tensorboard", board, "--job-id", "flowers-7"]) == 0
    (body,) = vertex.bodies("POST", "/pipelineJobs")
    values = body["runtimeConfig"]["parameterValues"]
    assert values["tensorboard"] == board
    assert values["base_output_directory"] == f"gs://{BUCKET}/root/flowers-7/train"  # one per run
    # the custom job takes them as GCPC's tensorboard and base_output_directory fields
    components = body["pipelineSpec"]["components"]
    (branch,) = (c["dag"]["tasks"] for c in components.values() if "train" in c.get("dag", {}).get("tasks", {}))
    train = branch["train"]["inputs"]  # the training job, in the branch taken without tuning
    assert train["parameters"]["tensorboard"] == {"componentInputParameter": "pipelinechannel--tensorboard"}
    payload = body["pipelineSpec"]["deploymentSpec"]["executors"]["exec-train"]["container"]["args"][3]
    assert '"tensorboard": "{{$.inputs.parameters[\'tensorboard\']}}"' in payload
    assert '"output_uri_prefix": "{{$.inputs.parameters[\'base_output_directory\']}}"' in payload
    # without --job-id, the id is fixed before submitting, so that the directory names this run
    assert main(["submit", *vertex.job_args, *account, "--tensorboard", board]) == 0
    second = vertex.bodies("POST", "/pipelineJobs")[1]["runtimeConfig"]["parameterValues"]["base_output_directory"]
    (job_name,) = [name for name in vertex.jobs if not name.endswith("/flowers-7")]
    assert second == f"gs://{BUCKET}/root/{job_name.rsplit('/', 1)[1]}/train"


@pytest.mark.parametrize(
    "board, message",
    [
        ("tensorboards/1234", "pass a Vertex AI TensorBoard's resource name"),
        ("projects/demo-project/locations/us-central1/tensorboards/1", "is in us-central1, the pipeline runs in"),
        (f"{PARENT}/tensorboards/1", "--tensorboard needs --service-account"),
    ],
)
def test_a_wrong_tensorboard_is_one_line_before_submitting(vertex, board, message):
    with pytest.raises(UsageError, match=message):
        main(["submit", *vertex.job_args, "--tensorboard", board])
    assert not vertex.requests


def test_no_cache_and_wait_follow_the_job_to_the_end(vertex, capsys):
    assert main(["submit", *vertex.job_args, "--no-cache", "--wait", "--poll-interval", "0"]) == 0
    (body,) = vertex.bodies("POST", "/pipelineJobs")
    tasks = body["pipelineSpec"]["root"]["dag"]["tasks"]
    assert tasks and all(task["cachingOptions"].get("enableCache", False) is False for task in tasks.values())
    out = capsys.readouterr().out
    assert "PIPELINE_STATE_RUNNING" in out and "PIPELINE_STATE_SUCCEEDED" in out


def test_a_failed_run_is_one_line_and_exit_1(vertex, capsys):
    vertex.final_state = "PIPELINE_STATE_FAILED"
    assert main(["submit", *vertex.job_args, "--wait", "--poll-interval", "0"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: pipeline job projects/") and "ended PIPELINE_STATE_FAILED" in error
    assert "some tasks failed: train" in error


@pytest.mark.parametrize(
    "codes, expected",
    [
        ([403], "permission denied: the caller lacks aiplatform.pipelineJobs.create"),
        ([429] * 50, "still answered 429 TooManyRequests after retrying for 2s"),
        ([503] * 50, "still answered 503 ServiceUnavailable after retrying for 2s"),
    ],
)
def test_refusals_are_one_line_errors(vertex, capsys, codes, expected):
    vertex.fail("POST", "/pipelineJobs", codes)
    assert main(["submit", *vertex.job_args]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], lines
    assert "roles/aiplatform.user" in lines[0] or codes[0] != 403


def test_429_and_503_are_retried_then_succeed(vertex, capsys):
    vertex.fail("POST", "/pipelineJobs", [503, 429])
    assert main(["submit", *vertex.job_args]) == 0
    assert len(vertex.bodies("POST", "/pipelineJobs")) == 3
    assert len(vertex.jobs) == 1


def test_a_duplicate_job_id_is_a_clear_error(vertex, capsys):
    assert main(["submit", *vertex.job_args, "--job-id", "nightly"]) == 0
    assert main(["submit", *vertex.job_args, "--job-id", "nightly"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: submit the pipeline: the name is taken") and "another name or job id" in error


def test_schedule_create_list_pause_resume_delete(vertex, capsys):
    cron = "TZ=Europe/Paris 0 3 * * 1"
    assert (
        main(
            [
                "schedule",
                "create",
                *vertex.job_args,
                "--cron",
                cron,
                "--name",
                "weekly-retrain",
                "--max-concurrent-runs",
                "2",
                "--max-runs",
                "10",
                "--service-account",
                "sa@demo-project.iam.gserviceaccount.com",
            ]
        )
        == 0
    )
    (body,) = vertex.bodies("POST", "/schedules")
    assert body["cron"] == cron and body["displayName"] == "weekly-retrain"
    assert int(body["maxConcurrentRunCount"]) == 2 and int(body["maxRunCount"]) == 10
    job = body["createPipelineJobRequest"]["pipelineJob"]
    assert job["pipelineSpec"] == compiled(vertex.template)
    assert job["runtimeConfig"]["gcsOutputDirectory"] == f"gs://{BUCKET}/root"
    assert job["runtimeConfig"]["parameterValues"] == {"source": SOURCE}
    assert job["serviceAccount"] == "sa@demo-project.iam.gserviceaccount.com"
    (name,) = vertex.schedules
    assert "its runs, steps and training jobs run as sa@demo-project.iam.gserviceaccount.com" in capsys.readouterr().out
    assert main(["schedule", "list", *vertex.args]) == 0
    assert f"{name}  weekly-retrain  ACTIVE  {cron}" in capsys.readouterr().out
    assert main(["schedule", "pause", *vertex.args, "weekly-retrain"]) == 0  # by display name
    assert vertex.schedules[name]["state"] == "PAUSED"
    assert main(["schedule", "resume", *vertex.args, name.rsplit("/", 1)[-1]]) == 0  # by id
    assert vertex.schedules[name]["state"] == "ACTIVE"
    assert main(["schedule", "delete", *vertex.args, name]) == 0  # by resource name
    assert not vertex.schedules
    with pytest.raises(UsageError, match="no schedule named 'weekly-retrain'"):
        main(["schedule", "pause", *vertex.args, "weekly-retrain"])


def test_schedule_create_without_a_name_takes_the_pipelines_name(vertex, capsys):
    """The display name comes from the settings or the template: the job was never submitted, so it has none."""
    assert main(["schedule", "create", *vertex.job_args, "--cron", "0 3 * * 1"]) == 0
    (body,) = vertex.bodies("POST", "/schedules")
    assert body["displayName"] == f"{compiled()['pipelineInfo']['name']}-retrain"
    assert main(["schedule", "create", *vertex.job_args, "--cron", "0 4 * * 1", "--display-name", "flowers"]) == 0
    assert vertex.bodies("POST", "/schedules")[1]["displayName"] == "flowers-retrain"


@pytest.mark.parametrize("command", [["submit"], ["schedule", "list"], ["schedule", "create", "--cron", "0 3 * * 1"]])
def test_an_unreachable_endpoint_is_one_line_within_the_retry_timeout(vertex, capsys, command):
    import socket
    import time

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    args = [*vertex.job_args] if command[0] != "schedule" or command[1] != "list" else [*vertex.args]
    args[args.index("--api-endpoint") + 1] = closed
    started = time.monotonic()
    assert main([*command, *args, "--retry-timeout", "1"]) == 1
    assert time.monotonic() - started < 10
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: cannot reach Vertex AI at {closed[len('http://') :]} (Connection refused)")
    assert "after trying for 1s: check --api-endpoint" in error


def test_schedule_create_refuses_a_name_that_exists(vertex):
    assert main(["schedule", "create", *vertex.job_args, "--cron", "0 3 * * 1", "--name", "weekly"]) == 0
    with pytest.raises(
        UsageError,
        match=r"a schedule named 'weekly' exists .*: change it with python -m pipeline "
        r"schedule update 'weekly', or pass another --name",
    ):
        main(["schedule", "create", *vertex.job_args, "--cron", "0 4 * * 1", "--name", "weekly"])
    assert len(vertex.schedules) == 1


def test_wait_stops_on_a_paused_run_with_one_line(vertex, capsys):
    vertex.final_state = "PIPELINE_STATE_PAUSED"
    assert main(["submit", *vertex.job_args, "--wait", "--poll-interval", "0"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "is PIPELINE_STATE_PAUSED: it waits for someone to resume it in the console" in error
    assert error.endswith("--wait stops here")


def test_an_aborted_call_is_not_reported_as_a_taken_name(vertex, capsys):
    vertex.fail("POST", "/pipelineJobs", [(409, "ABORTED")])
    assert main(["submit", *vertex.job_args]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Vertex AI aborted the call" in error and "run the command again" in error
    assert "name is taken" not in error


def test_a_503_after_the_job_was_created_does_not_submit_it_twice(vertex, capsys):
    """The server made the job, then answered 503: the retry finds it by its id instead of creating a second."""
    vertex.fail("POST", "/pipelineJobs", [503], after=True)
    assert main(["submit", *vertex.job_args, "--job-id", "nightly-7"]) == 0
    assert len(vertex.bodies("POST", "/pipelineJobs")) == 1 and list(vertex.jobs) == [
        f"{PARENT}/pipelineJobs/nightly-7"
    ]
    assert f"submitted {PARENT}/pipelineJobs/nightly-7" in capsys.readouterr().out
    vertex.fail("POST", "/pipelineJobs", [503], after=True)  # no --job-id: the client's id is fixed before the call
    assert main(["submit", *vertex.job_args]) == 0
    assert len(vertex.jobs) == 2 and len(vertex.bodies("POST", "/pipelineJobs")) == 2


def test_a_503_after_the_schedule_was_created_does_not_create_it_twice(vertex):
    vertex.fail("POST", "/schedules", [503], after=True)
    assert main(["schedule", "create", *vertex.job_args, "--cron", "0 3 * * 1", "--name", "weekly"]) == 0
    assert len(vertex.schedules) == 1 and len(vertex.bodies("POST", "/schedules")) == 1


def test_schedule_update_brings_a_recompiled_pipeline_to_an_existing_schedule(vertex, tmp_path, capsys):
    """A schedule holds the spec it was created with; update sends the template as it is now (here a copy with a
    changed default), with new parameters, and a new cron when given."""
    account = "sa@demo-project.iam.gserviceaccount.com"
    create = ["schedule", "create", *vertex.job_args, "--cron", "0 3 * * 1", "--name", "weekly"]
    assert main([*create, "--service-account", account]) == 0
    (name,) = vertex.schedules
    recompiled = compiled(vertex.template)
    recompiled["root"]["inputDefinitions"]["parameters"]["epochs"]["defaultValue"] = 7.0
    template = tmp_path / "pipeline.yaml"
    template.write_text(yaml.safe_dump(recompiled))
    args = [*vertex.job_args, "--template", str(template), "--param", "image_size=224"]
    assert main(["schedule", "update", *args, "weekly", "--cron", "0 5 * * *"]) == 0
    (request,) = [r for r in vertex.requests if r.method == "PATCH"]
    assert request.query["updateMask"] == ["createPipelineJobRequest,cron"]
    schedule = vertex.schedules[name]
    job = schedule["createPipelineJobRequest"]["pipelineJob"]
    assert job["pipelineSpec"] == recompiled and job["pipelineSpec"] != compiled(vertex.template)
    assert job["runtimeConfig"]["parameterValues"] == {"source": SOURCE, "image_size": 224}
    assert schedule["cron"] == "0 5 * * *" and schedule["displayName"] == "weekly" and schedule["state"] == "ACTIVE"
    assert job["serviceAccount"] == account  # kept: not given again
    assert f"updated {name} (weekly): create_pipeline_job_request, cron" in capsys.readouterr().out
    with pytest.raises(UsageError, match="no schedule named 'daily'"):
        main(["schedule", "update", *args, "daily"])


def test_resume_with_catch_up_asks_for_the_missed_runs(vertex):
    assert main(["schedule", "create", *vertex.job_args, "--cron", "0 3 * * 1", "--name", "weekly"]) == 0
    assert main(["schedule", "pause", *vertex.args, "weekly"]) == 0
    assert main(["schedule", "resume", *vertex.args, "weekly", "--catch-up"]) == 0
    assert main(["schedule", "resume", *vertex.args, "weekly"]) == 0
    with_catch_up, without = vertex.bodies("POST", ":resume")
    assert with_catch_up == {"catchUp": True} and not (without or {}).get("catchUp")


@pytest.mark.parametrize("cron", ["0 3 * *", "TZ=Mars/Olympus 0 3 * * 1", "every monday"])
def test_a_wrong_cron_is_a_one_line_error(vertex, cron):
    with pytest.raises(UsageError, match="--cron"):
        main(["schedule", "create", *vertex.job_args, "--cron", cron])
    assert not vertex.requests


def test_settings_precedence_flags_over_environment_over_config_over_defaults(tmp_path):
    config = tmp_path / "vertex.yaml"
    config.write_text(
        "project: from-config\nregion: us-central1\npipeline_root: gs://c/root\nlabels: {team: vision, env: dev}\n"
    )
    environ = {"TPU_PIPELINE_PROJECT": "from-env", "TPU_PIPELINE_PIPELINE_ROOT": "gs://e/root"}
    settings = load_settings({"project": "from-flag", "labels": {"env": "prod"}}, environ, str(config))
    assert settings.project == "from-flag"  # flag over environment over config
    assert settings.pipeline_root == "gs://e/root"  # environment over config
    assert settings.region == "us-central1"  # config over default
    assert settings.labels == {"team": "vision", "env": "prod"}  # merged key by key
    assert settings.template == "pipeline.yaml" and settings.enable_caching is None  # defaults
    assert load_settings({}, {"GOOGLE_CLOUD_PROJECT": "adc-project"}).project == "adc-project"
    # the region also from GOOGLE_CLOUD_LOCATION, the newer name, after GOOGLE_CLOUD_REGION
    assert load_settings({}, {"GOOGLE_CLOUD_LOCATION": "asia-east1"}).region == "asia-east1"
    both = load_settings({}, {"GOOGLE_CLOUD_LOCATION": "asia-east1", "GOOGLE_CLOUD_REGION": "us-east1"})
    assert both.region == "us-east1" and both.sources["region"] == "GOOGLE_CLOUD_REGION"
    assert settings.sources == {
        "project": "--project",
        "region": f"config file {config}",
        "pipeline_root": "TPU_PIPELINE_PIPELINE_ROOT",
        "labels": "--labels",
    }


def test_gcloud_s_project_is_the_last_fallback_and_each_command_says_where_its_settings_came_from(
    tmp_path, monkeypatch
):
    """A user who ran `gcloud auth application-default login` and `gcloud config set project` names no project:
    the credentials' project is taken (google.auth asks gcloud; a stand-in gcloud answers here), and one line says
    so. Anything that names a project wins over it."""
    from components.vertex_client import CREDENTIALS_SOURCE, check_settings, where_from

    for name in list(os.environ):
        if name.startswith(("TPU_PIPELINE_", "GOOGLE_")):
            monkeypatch.delenv(name)
    gcloud_config = tmp_path / "gcloud"
    gcloud_config.mkdir()
    user = {"type": "authorized_user", "client_id": "id", "client_secret": "secret", "refresh_token": "token"}
    (gcloud_config / "application_default_credentials.json").write_text(json.dumps(user))
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "gcloud").write_text('#!/bin/sh\n[ "$*" = "config get project" ] && echo gcloud-project\n')
    (tools / "gcloud").chmod(0o755)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(gcloud_config))
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    settings = load_settings({"region": "europe-west4"}, {"GOOGLE_CLOUD_LOCATION": "asia-east1"})
    check_settings(settings, need_root=False)
    assert settings.project == "gcloud-project"
    assert (
        where_from(settings)
        == f"project gcloud-project (from {CREDENTIALS_SOURCE}), region europe-west4 (from --region)"
    )
    named = load_settings({"region": "europe-west4"}, {"GOOGLE_CLOUD_PROJECT": "env-project"})
    check_settings(named, need_root=False)
    assert named.project == "env-project" and where_from(named).startswith(
        "project env-project (from GOOGLE_CLOUD_PROJECT)"
    )
    # local endpoints (anonymous) never look for credentials
    with pytest.raises(
        UsageError, match=r"no Google Cloud project: .*, or run `gcloud config set project my-project`$"
    ):
        check_settings(load_settings({"region": "europe-west4", "anonymous": True}, {}), need_root=False)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--region", "europe-west4"], "no Google Cloud project: pass --project my-project, set TPU_PIPELINE_PROJECT"),
        (["--project", "p"], "no region: pass --region europe-west4, set TPU_PIPELINE_REGION"),
        (["--project", "p", "--region", "Europe West"], "region 'Europe West' is not a Google Cloud region"),
        (["--project", "p", "--region", "europe-west4"], "no pipeline root: pass --pipeline-root gs://BUCKET/"),
        (
            ["--project", "p", "--region", "europe-west4", "--pipeline-root", "gs://b/r", "--label", "Team=x"],
            "label Team=x is not a valid Google Cloud label",
        ),
        (
            [
                "--project",
                "p",
                "--region",
                "europe-west4",
                "--pipeline-root",
                "gs://b/r",
                "--anonymous",
                "--param",
                "source=x",
                "--param",
                "epoch=3",
            ],
            "pipeline has no parameter 'epoch'",
        ),
        (
            ["--project", "p", "--region", "europe-west4", "--pipeline-root", "gs://b/r", "--anonymous"],
            "pipeline parameter source is required: pass --param source=VALUE",
        ),
        (
            [
                "--project",
                "p",
                "--region",
                "europe-west4",
                "--pipeline-root",
                "gs://b/r",
                "--anonymous",
                "--param",
                "source=x",
                "--param",
                "epochs=many",
            ],
            "--param epochs=many is not an integer, e.g. 20",
        ),
        # what a step would refuse minutes into the run, refused before it is submitted
        (
            [
                "--project",
                "p",
                "--region",
                "europe-west4",
                "--pipeline-root",
                "gs://b/r",
                "--anonymous",
                "--param",
                "source=x",
                "--param",
                "image_size=100000",
            ],
            "--param image_size=100000 is too large: use 1024 or less, or auto",
        ),
        (
            [
                "--project",
                "p",
                "--region",
                "europe-west4",
                "--pipeline-root",
                "gs://b/r",
                "--anonymous",
                "--param",
                "source=x",
                "--param",
                "epochs=-1",
            ],
            "--param epochs=-1 must be at least 0",
        ),
        (
            [
                "--project",
                "p",
                "--region",
                "europe-west4",
                "--pipeline-root",
                "gs://b/r",
                "--anonymous",
                "--param",
                "source=x",
                "--param",
                "test_fraction=1.5",
            ],
            "--param test_fraction=1.5 is out of range: use a fraction in [0, 1)",
        ),
        (
            [
                "--project",
                "p",
                "--region",
                "europe-west4",
                "--pipeline-root",
                "gs://b/r",
                "--anonymous",
                "--param",
                "source=x",
                "--param",
                "vocabulary_size=2",
            ],
            "--param vocabulary_size=2 is too small",
        ),
        (
            [
                *("--project", "p", "--region", "europe-west4", "--pipeline-root", "gs://b/r", "--anonymous"),
                *("--param", "source=x", "--param", 'export_formats=["tflite_int8"]'),
            ],
            "--param export_formats=tflite_int8: add saved_model: it is always exported",
        ),
    ],
)
def test_missing_or_wrong_settings_are_one_line_errors(monkeypatch, tmp_path, args, message):
    for name in list(os.environ):
        if name.startswith(("TPU_PIPELINE_", "GOOGLE_")):
            monkeypatch.delenv(name)
    # no credentials either: none of the user's, no gcloud project, no metadata server
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    with pytest.raises(UsageError) as raised:
        main(["submit", *args])
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_example_config_file_loads_and_its_parameters_fit_the_pipeline():
    from components.vertex_client import check_settings
    from pipeline.vertex import pipeline_parameters

    settings = load_settings({}, {}, os.path.join(REPO_ROOT, "pipeline", "vertex.example.yaml"))
    check_settings(settings)
    assert settings.enable_caching is True and settings.labels == {"team": "vision", "env": "dev"}
    assert settings.template == "my-pipeline.yaml"  # compiled for the user's images, as its comment says
    assert pipeline_parameters(os.path.join(REPO_ROOT, "pipeline.yaml"), settings.parameters)["epochs"] == 20


def test_a_config_file_with_an_unknown_setting_names_it(tmp_path):
    config = tmp_path / "vertex.yaml"
    config.write_text("project: p\nregoin: europe-west4\n")
    with pytest.raises(UsageError, match=f"config file {config}: unknown setting 'regoin'"):
        load_settings({}, {}, str(config))


def test_no_credentials_is_one_line_exit_2_saying_how(tmp_path, template):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_PIPELINE_", "GOOGLE_"))}
    env.update(NO_GCE_CHECK="true", HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"))
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "submit",
            "--project",
            "p",
            "--region",
            "europe-west4",
            "--pipeline-root",
            "gs://b/root",
            "--param",
            "source=gs://b/photos",
            "--template",
            template,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: no Google Cloud credentials: run `gcloud auth application-default login`, or set "
        "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run where a service account is attached"
    ]


def test_the_cli_reports_a_missing_project_as_exit_2():
    result = run_cli("pipeline", "schedule", "list", "--region", "europe-west4")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: no Google Cloud project: pass --project")


def test_a_schedule_command_without_a_project_says_so_before_importing_the_vertex_ai_client():
    """The client takes seconds to import: a missing setting is told without waiting for it."""
    script = """
import json, sys
from components.cli import UsageError
from pipeline.__main__ import main
said = {}
for command in (["list"], ["create", "--cron", "0 3 * * *"], ["update", "nightly"], ["pause", "nightly"]):
    try:
        main(["schedule", *command, "--region", "europe-west4"])
    except UsageError as err:
        said[command[0]] = str(err).split(":")[0]
print(json.dumps([said, "google.cloud.aiplatform" in sys.modules]))
"""
    environment = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_CLOUD_PROJECT", "TPU_PIPELINE_PROJECT")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=environment
    )
    assert result.returncode == 0, result.stderr[-3000:]
    said, imported = json.loads(result.stdout.strip().splitlines()[-1])
    assert said == dict.fromkeys(("list", "create", "update", "pause"), "no Google Cloud project")
    assert imported is False


def test_no_credentials_or_tokens_in_the_compiled_pipeline():
    text = open(os.path.join(REPO_ROOT, "pipeline.yaml")).read().lower()  # noqa: SIM115
    for secret in ("private_key", "begin private key", "access_token", "refresh_token", "ya29.", "authorization:"):
        assert secret not in text


def test_register_uploads_a_new_version_of_the_parent_model(vertex, caplog):
    caplog.set_level("INFO", logger="components")
    uri = f"gs://{BUCKET}/root/run-1/export/exported_model/saved_model"
    args = ["register", *vertex.args, "--model", uri, "--display-name", "flowers", "--label", "team=vision"]
    assert main([*args, "--pipeline-run", f"{PARENT}/pipelineJobs/flowers-1"]) == 0
    (name,) = vertex.models
    assert main([*args, "--parent-model", name, "--pipeline-run", "flowers-2"]) == 0
    first, second = vertex.bodies("POST", "/models:upload")
    for body, run in ((first, "flowers-1"), (second, "flowers-2")):
        model = body["model"]
        assert model["artifactUri"] == uri and model["displayName"] == "flowers"
        assert model["containerSpec"]["imageUri"] == "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
        assert model["labels"] == {"team": "vision", "pipeline-run": run}
        # what the serving graph does to a client's file, where the registry's users read about the version
        assert "EXIF orientation applied, alpha composited on white" in model["description"]
    assert "parentModel" not in first and second["parentModel"] == name
    assert len(vertex.models[name]["versions"]) == 2
    out = " | ".join(r.getMessage() for r in caplog.records if r.name in VERTEX_LOGGERS)
    assert f"registered {name} version 1" in out and f"registered {name} version 2" in out


def test_register_refuses_an_export_made_anyway(vertex, gcs):
    """(The raw upload took a SavedModel whose model evaluate did not bless, and made it the default version.)"""
    export = upload_export(gcs, "root/run-1/exported-anyway", "b" * 64)
    record = json.loads(gcs.blob("root/run-1/exported-anyway/export.json").download_as_bytes())
    unblessed = {"blessed": False, "reasons": ["test accuracy 0.5 is below the minimum 0.9"]}
    gcs.blob("root/run-1/exported-anyway/export.json").upload_from_string(json.dumps({**record, "blessing": unblessed}))
    model = f"{export}/saved_model"
    with pytest.raises(UsageError) as raised:
        main(["register", *vertex.args, "--model", model, "--display-name", "flowers"])
    assert str(raised.value) == (
        f"--model {model} was exported anyway: evaluate did not bless this model (test accuracy 0.5 is below the "
        "minimum 0.9): only a blessed export is registered"
    )
    assert vertex.models == {} and not vertex.bodies("POST", "/models:upload")


def test_register_needs_a_cloud_storage_model(vertex):
    with pytest.raises(UsageError, match="model /tmp/x must be a gs:// folder"):
        main(["register", *vertex.args, "--model", "/tmp/x"])


def upload_export(bucket, prefix: str, digest: str) -> str:
    """A stand-in export folder in the emulator's bucket: what the register step copies and reads."""
    report = made_up_export(f"gs://{BUCKET}/{prefix}", digest, class_names=["daisy", "rose"], image_size=192)
    bucket.blob(f"{prefix}/export.json").upload_from_string(json.dumps(report))
    bucket.blob(f"{prefix}/saved_model/saved_model.pb").upload_from_string(b"graph")
    bucket.blob(f"{prefix}/saved_model/variables/variables.index").upload_from_string(b"index")
    return f"gs://{BUCKET}/{prefix}"


def upload_evaluation(bucket, prefix: str) -> str:
    """An evaluate step output in the emulator's bucket: its metrics.json, from known predictions on 4 images."""
    from components.evaluate.metrics import classification_metrics, ranking_metrics

    truth, probabilities = [0, 0, 1, 1], [[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.3, 0.7]]
    metrics = classification_metrics(truth, [0, 1, 1, 1], ["daisy", "rose"])
    metrics["ranking"] = ranking_metrics(truth, probabilities, ["daisy", "rose"])
    bucket.blob(f"{prefix}/metrics.json").upload_from_string(json.dumps(made_up_evaluation(**metrics)))
    return f"gs://{BUCKET}/{prefix}"


def register_step(bucket, export: str, display_name: str, **options) -> tuple[dict, object]:
    """The DAG's register step as Vertex AI runs it: (its decision, its google.VertexModel output)."""
    from google_cloud_pipeline_components.types.artifact_types import VertexModel
    from kfp.dsl import Artifact, Model

    from components.register.component import register

    prefix = export.split(f"gs://{BUCKET}/", 1)[1]
    evaluation = Artifact(uri=upload_evaluation(bucket, prefix + "-evaluation"))
    for name in ("data_stats.json", "near_duplicates.npz"):  # the check-data step's statistics of the data
        bucket.blob(f"{prefix}-statistics/{name}").upload_from_string(f"{name} of {display_name}")
    statistics = Artifact(uri=f"gs://{BUCKET}/{prefix}-statistics")
    output = VertexModel(name="vertex_model", uri="gs://x/vertex_model", metadata={})
    where = {"project": "demo-project", "location": "europe-west4"}
    options = {"model_root": "", "pipeline_run": "", **options}  # the DAG passes each (none: "")
    if "baseline" not in options:  # what the DAG's find-baseline step gave evaluate to judge against
        from components.register.component import find_baseline

        options["baseline"] = find_baseline(display_name, "", options["model_root"], "", **where)
    decided = register(Model(uri=export), evaluation, statistics, output, display_name, **where, **options)
    return json.loads(decided), output


def test_the_dag_steps_find_the_baseline_and_register_new_versions_of_the_model(in_pipeline, gcs, caplog):
    """find-baseline and register, as the cloud DAG runs them (Vertex AI fills in project and location): each
    blessed export is copied whole to a numbered folder outside the pipeline root, and that copy is registered."""
    caplog.set_level("INFO", logger="components")
    from components.artifacts.registry import FolderRegistry
    from components.register import component

    where = {"project": "demo-project", "location": "europe-west4"}

    def find_baseline(display_name: str, baseline: str = "", **where) -> str:  # as the DAG passes the rest
        return component.find_baseline(display_name, baseline, model_root="", run_id="", **where)

    # the first run: no model of that name yet, so no baseline, and the upload makes the model
    assert find_baseline("flowers", **where) == ""
    export_1 = upload_export(gcs, "root/flowers-1/export/exported_model", "a" * 64)
    first, vertex_model = register_step(gcs, export_1, "flowers", pipeline_run="flowers-1")
    stored = f"gs://{BUCKET}/models/flowers/1"  # the pipeline root's bucket, outside its prefix
    assert (first["action"], first["version"], first["uri"], first["stored_as"]) == ("registered", "1", stored, 1)
    copied = sorted(blob.name[len("models/flowers/1/") :] for blob in gcs.list_blobs(prefix="models/flowers/1/"))
    saved_model = ["saved_model/saved_model.pb", "saved_model/variables/variables.index"]
    assert copied == [
        "data_stats.json",
        "export.json",
        "metrics.json",
        "near_duplicates.npz",
        *saved_model,
        "version.json",
    ]
    # the statistics of the data it learned from are kept with the version (the next run's data baseline)
    kept = gcs.blob("models/flowers/1/data_stats.json").download_as_bytes()
    assert kept == b"data_stats.json of flowers"
    # and so is its evaluation (the next run's prediction mix): the answers it gave, 1 daisy and 3 roses
    from components.artifacts.evaluation import answered_counts, kept_evaluation

    kept = kept_evaluation(f"{stored}/saved_model")
    assert answered_counts(kept.confusion_matrix, kept.class_names) == {"daisy": 1, "rose": 3}
    name = first["model"]
    assert name.startswith("projects/demo-project/locations/europe-west4/models/")
    (upload,) = in_pipeline.bodies("POST", "/models:upload")
    assert upload["model"]["artifactUri"] == f"{stored}/saved_model" and "parentModel" not in upload
    # the step's google.VertexModel names the new version, as GCPC's upload step writes it
    assert vertex_model.metadata == {"resourceName": f"{name}@1"}
    assert vertex_model.uri == f"https://europe-west4-aiplatform.googleapis.com/v1/{name}@1"
    # the evaluation went with that version (the console's Evaluate tab), in Vertex AI's classification schema
    (imported,) = in_pipeline.bodies("POST", f"{name}@1/evaluations:import")
    evaluation = imported["modelEvaluation"]
    assert evaluation["metricsSchemaUri"].endswith("/classification_metrics_1.0.0.yaml")
    assert evaluation["displayName"] == "flowers-1"
    matrix = evaluation["metrics"]["confusionMatrix"]
    assert matrix["rows"] == [[1, 1], [0, 2]]  # the known predictions: one daisy taken for a rose
    assert matrix["annotationSpecs"] == [{"id": "0", "displayName": "daisy"}, {"id": "1", "displayName": "rose"}]
    assert evaluation["metrics"]["logLoss"] > 0.0 and 0.5 < evaluation["metrics"]["auRoc"] <= 1.0
    at_half = next(row for row in evaluation["metrics"]["confidenceMetrics"] if row["confidenceThreshold"] == 0.5)
    assert (at_half["truePositiveCount"], at_half["falsePositiveCount"]) == ("3", "1")  # 0.9, 0.6, 0.8, 0.7
    (sliced,) = in_pipeline.bodies("POST", "/slices:batchImport")
    per_class = {one["slice"]["value"]: one for one in sliced["modelEvaluationSlices"]}
    assert sorted(per_class) == ["daisy", "rose"]
    assert {one["slice"]["dimension"] for one in per_class.values()} == {"annotationSpec"}
    assert per_class["rose"]["metrics"]["auRoc"] == 1.0  # every rose scores above every daisy as a rose
    # the next run compares against it
    baseline = find_baseline("flowers", **where)
    assert baseline == f"{stored}/saved_model"
    # unchanged data (cached train and export): the candidate is the baseline itself, so nothing is uploaded
    # (the baseline as a user may type it, with a trailing slash)
    skipped, in_service = register_step(gcs, export_1, "flowers", baseline=baseline + "/", pipeline_run="flowers-2")
    same = "the candidate is the baseline itself (the same trained weights, sha256 aaaaaaaaaaaa)"
    assert skipped == {"action": "skipped", "reason": same, "baseline": baseline + "/", "model": name, "version": "1"}
    assert len(in_pipeline.bodies("POST", "/models:upload")) == 1
    assert FolderRegistry(f"gs://{BUCKET}/models/flowers").default().number == 1
    assert in_service.metadata == vertex_model.metadata  # the version in service is still the first
    # a retrained model becomes version 2 of the same model, stored under the model_root given
    export_3 = upload_export(gcs, "root/flowers-3/export/exported_model", "b" * 64)
    root = f"gs://{BUCKET}/serving/flowers"
    third, vertex_model = register_step(
        gcs, export_3, "flowers", baseline=baseline, model_root=root, pipeline_run="flowers-3"
    )
    assert (third["model"], third["version"], third["uri"]) == (name, "2", f"{root}/1")
    assert vertex_model.metadata == {"resourceName": f"{name}@2"}
    assert [e["displayName"] for e in in_pipeline.evaluations[f"{name}@2"]] == ["flowers-3"]
    second_upload = in_pipeline.bodies("POST", "/models:upload")[1]
    assert second_upload["parentModel"] == name and second_upload["model"]["labels"] == {"pipeline-run": "flowers-3"}
    assert find_baseline("flowers", **where) == f"{root}/1/saved_model"
    assert FolderRegistry(root).default().number == 1  # the folder's default follows the Model Registry's
    # the first export again, with its own folder given as the baseline while version 2 serves: skipped, and no
    # version named as the one in service, since the version in service is another model
    again, untouched = register_step(gcs, export_1, "flowers", baseline=baseline)
    assert again == {"action": "skipped", "reason": same, "baseline": baseline} and untouched.metadata == {}
    # a baseline given as a parameter wins over the registry, which is then not asked
    requests = len(in_pipeline.requests)
    assert find_baseline("flowers", baseline="gs://b/last-good", **where) == "gs://b/last-good"
    assert len(in_pipeline.requests) == requests
    out = " | ".join(r.getMessage() for r in caplog.records if r.name in VERTEX_LOGGERS)
    assert "no model named flowers in the registry" in out and f"baseline: {name} version 1" in out
    # an empty model_display_name turns the registry off: no lookup, no upload
    assert find_baseline("", **where) == ""
    assert register_step(gcs, export_3, "")[0]["action"] == "skipped"
    assert len(in_pipeline.requests) == requests


def test_gcpc_evaluation_import_reads_the_evaluate_output_as_the_register_step_imports_it(
    in_pipeline, gcs, tmp_path, monkeypatch
):
    """evaluate's ``vertex_evaluation`` (a google.ClassificationMetrics) is what Google Cloud Pipeline Components'
    own evaluation import reads: its container code, run here against the fake server, imports the same figures
    and per-class slices as the register step does."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google_cloud_pipeline_components.container._implementation.model_evaluation import (
        import_model_evaluation as gcpc_import,
    )

    from components.artifacts.evaluation import Evaluation, sliced_metrics

    export = upload_export(gcs, "root/flowers-1/export/exported_model", "a" * 64)
    registered, vertex_model = register_step(gcs, export, "flowers", pipeline_run="flowers-1")
    (ours,) = in_pipeline.bodies("POST", "/evaluations:import")
    (our_slices,) = in_pipeline.bodies("POST", "/slices:batchImport")
    metrics = Evaluation.read(f"gs://{BUCKET}/root/flowers-1/export/exported_model-evaluation")
    artifact = tmp_path / "vertex_evaluation"  # the artifact's file, as evaluate writes it
    artifact.write_text(json.dumps(sliced_metrics(metrics)))

    # the one edge: GCPC's step reaches {location}-aiplatform.googleapis.com over gRPC; here the fake over REST
    real_client = aiplatform.gapic.ModelServiceClient

    def to_the_fake(client_info, client_options):
        assert client_options == {"api_endpoint": "europe-west4-aiplatform.googleapis.com"}
        options = ClientOptions(api_endpoint=in_pipeline.url)
        return real_client(credentials=AnonymousCredentials(), transport="rest", client_options=options)

    monkeypatch.setattr(aiplatform.gapic, "ModelServiceClient", to_the_fake)
    outputs = {name: tmp_path / name for name in ("gcp_resources", "evaluation_resource_name")}
    gcpc_import.main(
        [
            "--classification_metrics",
            str(artifact),
            "--model_name",
            vertex_model.metadata["resourceName"],
            "--display_name",
            "flowers-1",
            "--pipeline_job_id",
            "flowers-1",
            *[arg for name, path in outputs.items() for arg in (f"--{name}", str(path))],
        ]
    )
    ours_again, theirs = in_pipeline.bodies("POST", "/evaluations:import")
    assert ours_again == ours
    assert theirs["modelEvaluation"]["metricsSchemaUri"] == ours["modelEvaluation"]["metricsSchemaUri"]
    assert theirs["modelEvaluation"]["metrics"] == ours["modelEvaluation"]["metrics"]
    assert theirs["modelEvaluation"]["metrics"]["confusionMatrix"]["rows"] == [[1, 1], [0, 2]]  # the known answers
    _, their_slices = in_pipeline.bodies("POST", "/slices:batchImport")
    assert their_slices == our_slices
    assert [one["slice"]["value"] for one in their_slices["modelEvaluationSlices"]] == ["daisy", "rose"]
    assert outputs["evaluation_resource_name"].read_text().startswith(f"{registered['model']}@1/evaluations/")


def test_a_503_after_the_upload_does_not_register_the_version_twice(in_pipeline, gcs):
    export = upload_export(gcs, "root/flowers-9/export/exported_model", "c" * 64)
    in_pipeline.fail("POST", "/models:upload", [503], after=True)
    in_pipeline.fail("POST", "/evaluations:import", [503], after=True)
    in_pipeline.fail("POST", "/slices:batchImport", [503], after=True)
    decided, _ = register_step(gcs, export, "tulips", pipeline_run="flowers-9")
    assert decided["action"] == "registered" and decided["version"] == "1"
    (model,) = (m for m in in_pipeline.models.values() if m["versions"][0]["displayName"] == "tulips")
    assert len(model["versions"]) == 1 and len(in_pipeline.bodies("POST", "/models:upload")) == 1
    # neither the evaluation nor its per-class slices imported twice
    (evaluation,) = in_pipeline.evaluations[f"{decided['model']}@1"]
    assert len(in_pipeline.slices[evaluation["name"]]) == 2


def test_the_dag_registration_step_reports_a_missing_permission(in_pipeline, gcs):
    from components.vertex_client import VertexError

    in_pipeline.fail("POST", "/models:upload", [403])
    with pytest.raises(VertexError, match=r"aiplatform\.models\.upload"):
        register_step(gcs, upload_export(gcs, "root/x", "d" * 64), "flowers")
    in_pipeline.fail("POST", "/evaluations:import", [403])
    with pytest.raises(VertexError, match=r"import the evaluation: .*aiplatform\.modelEvaluations\.import"):
        register_step(gcs, upload_export(gcs, "root/y", "e" * 64), "flowers")


def test_runs_registering_at_once_leave_one_model_registry_default_compared_with_the_last(in_pipeline, gcs):
    """Two runs judged against the same default (none, then the first round's) register at once, three times: their
    turns on the model root's lock object cover the check and the upload, so one becomes the default and the other
    is refused, every time."""
    from tests.conftest import at_once

    baseline = ""
    for round_ in range(3):
        exports = [upload_export(gcs, f"root/race-{round_}-{n}/export", f"{round_}{n}" * 32) for n in range(2)]

        def register(export, judged=baseline):
            return register_step(gcs, export, "races", baseline=judged)[0]

        outcomes = at_once(register, exports)
        (won,) = [outcome for outcome in outcomes.values() if isinstance(outcome, dict)]
        (lost,) = [outcome for outcome in outcomes.values() if isinstance(outcome, str)]
        assert won["action"] == "registered" and won["version"] == str(round_ + 1)
        assert f"its default is now {won['model']} version {won['version']}, not the " in lost
        baseline = won["uri"]


def test_a_model_judged_against_a_default_that_moved_since_is_not_registered(in_pipeline, gcs):
    """Two runs judged against no model in service (find-baseline gave both ""): the first becomes the Model
    Registry's default; the second, checked against it before its upload, is refused in one line."""
    from components.cli import UsageError

    first, _ = register_step(gcs, upload_export(gcs, "root/iris-1/export", "f" * 64), "irises", baseline="")
    with pytest.raises(UsageError) as raised:
        register_step(gcs, upload_export(gcs, "root/iris-2/export", "9" * 64), "irises", baseline="")
    assert str(raised.value) == (
        f"model registry gs://{BUCKET}/models/irises: its default is now {first['model']} version {first['version']}, "
        "not the no model this model was judged against (another run registered meanwhile), so it is not registered: "
        "run again to be judged against it"
    )


def test_an_endpoint_with_a_wrong_port_is_one_line(vertex):
    args = [*vertex.args]
    args[args.index("--api-endpoint") + 1] = "http://127.0.0.1:99999"
    with pytest.raises(UsageError, match=r"--api-endpoint http://127.0.0.1:99999: its port is not a number"):
        main(["schedule", "list", *args])
