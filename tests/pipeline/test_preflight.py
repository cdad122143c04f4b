"""The preflight a first run on a new Google Cloud project gets: ``python -m pipeline check``, and ``submit`` before
it creates anything. Against the fake server's project (``tests/fake_google.py``: everything in place), one thing
taken away at a time; each missing item is one line naming the command that fixes it, and nothing is created."""

from __future__ import annotations

import pytest

from components.cli import UsageError
from pipeline.__main__ import main
from tests.conftest import BUCKET
from tests.fake_google import COMPUTE_ACCOUNT, NUMBER, PROJECT, TRAINER, quota_info
from tests.pipeline.conftest import REGISTRY, TAG


def check(vertex, capsys, *extra: str) -> str:
    """``pipeline check``'s report: every item, a line each."""
    assert main(["check", *vertex.job_args, *extra]) == 0
    return capsys.readouterr().out


def refused(vertex, capsys, *extra: str) -> str:
    """``submit`` refused by its preflight: the error's one line; no run created."""
    with pytest.raises(UsageError) as raised:
        main(["submit", *vertex.job_args, *extra])
    assert not vertex.bodies("POST", "/pipelineJobs")
    capsys.readouterr()
    return str(raised.value)


def test_a_project_ready_for_a_first_run_passes_and_the_report_lists_what_was_checked(vertex, capsys):
    out = check(vertex, capsys)
    assert out.startswith("preflight: ") and " 0 missing" in out
    for line in (
        "ok      API aiplatform.googleapis.com: enabled",
        "ok      API artifactregistry.googleapis.com: enabled",
        "ok      your permission aiplatform.pipelineJobs.create on project demo-project: granted",
        f"ok      the run-as account {COMPUTE_ACCOUNT}: exists",
        f"ok      your permission to act as {COMPUTE_ACCOUNT} (iam.serviceAccounts.actAs): granted",
        f"ok      {COMPUTE_ACCOUNT} acting as itself (it launches the training job): roles/editor",
        f"ok      Vertex AI's role for {COMPUTE_ACCOUNT} on project demo-project: roles/editor",
        f"ok      the location of bucket gs://{BUCKET}: ",
        f"ok      image {REGISTRY}/pipeline:{TAG}: pushed",
        f"ok      image {REGISTRY}/train-tpu:{TAG}: pushed",
        "ok      ct5lp-hightpu-4t in europe-west4: offered in europe-west4-b",
        "ok      quota of TPU v5e chips for training in europe-west4: aiplatform.googleapis.com/"
        "custom_model_training_tpu_v5e: 8, the job takes 4",
    ):
        assert f"\n  {line}" in out, line
    # the run-as account's number comes from Resource Manager: the default compute account of this project
    assert vertex.bodies("GET", "/cloudresourcemanager/v3/projects/demo-project") == [None]
    (names,) = [r.query["names"] for r in vertex.requests if r.path.endswith("/services:batchGet")]
    assert f"projects/{PROJECT}/services/aiplatform.googleapis.com" in names and not any("dataflow" in n for n in names)
    assert vertex.bodies("POST", f"/serviceAccounts/{COMPUTE_ACCOUNT}:testIamPermissions") == [
        {"permissions": ["iam.serviceAccounts.actAs"]}
    ]
    assert vertex.bodies("POST", f"/projects/{PROJECT}:getIamPolicy") == [{"options": {"requestedPolicyVersion": 3}}]


# each thing a new project may lack, taken away from the fake's project, and the line that names it with its fix
MISSING = {
    "API disabled": (
        lambda google: google.enabled.discard("aiplatform.googleapis.com"),
        [],
        "MISSING API aiplatform.googleapis.com: disabled; fix: gcloud services enable aiplatform.googleapis.com "
        "--project demo-project",
    ),
    "image absent": (
        lambda google: google.images.discard(f"{REGISTRY}/train-tpu:{TAG}"),
        [],
        f"MISSING images train-tpu of {REGISTRY} at tag {TAG}: not in Artifact Registry; fix: make images "
        f"REGISTRY={REGISTRY} TAG={TAG} PUSH=1",
    ),
    "no act-as permission": (
        lambda google: google.caller_acts_as.discard(TRAINER),
        ["--service-account", TRAINER],
        f"MISSING your permission to act as {TRAINER} (iam.serviceAccounts.actAs): not granted; fix: gcloud iam "
        f"service-accounts add-iam-policy-binding {TRAINER} --member=user:YOUR_EMAIL "
        "--role=roles/iam.serviceAccountUser --project demo-project",
    ),
    "missing bucket permission": (
        lambda google: google.project_bindings.pop(2),  # the trainer's roles/storage.objectUser on the project
        ["--service-account", TRAINER],
        f"MISSING {TRAINER}'s access to bucket gs://{BUCKET}: no object role on it nor on the project (roles "
        "granted through a group, a folder or the organization are not seen; --no-preflight skips the check); fix: "
        f"gcloud storage buckets add-iam-policy-binding gs://{BUCKET} --member=serviceAccount:{TRAINER} "
        "--role=roles/storage.objectUser",
    ),
    "machine type not offered in the region": (
        lambda google: google.machine_types.update({"ct5lp-hightpu-4t": ["us-central1-a", "us-west4-a"]}),
        [],
        "MISSING ct5lp-hightpu-4t in europe-west4: not offered there (offered in us-central1, us-west4); fix: "
        "--region us-central1",
    ),
    "no quota": (
        lambda google: google.quotas.__setitem__(0, quota_info("custom_model_training_tpu_v5e", {}, 0)),
        [],
        "MISSING quota of TPU v5e chips for training in europe-west4: aiplatform.googleapis.com/"
        "custom_model_training_tpu_v5e allows 0, the job takes 4; fix: gcloud beta quotas preferences create "
        "--service=aiplatform.googleapis.com --quota-id=CustomModelTrainingTpuV5EPerProjectPerRegion "
        "--preferred-value=4 --dimensions=region=europe-west4 --project=demo-project",
    ),
    "no run-as account": (
        lambda google: google.accounts.pop(TRAINER),
        ["--service-account", TRAINER],
        f"MISSING the run-as account {TRAINER}: does not exist; fix: gcloud iam service-accounts create trainer "
        "--project demo-project",
    ),
    "no Vertex AI role": (
        lambda google: google.project_bindings.pop(1),  # the trainer's roles/aiplatform.user
        ["--service-account", TRAINER],
        f"MISSING Vertex AI's role for {TRAINER} on project demo-project: none of roles/aiplatform.user, "
        "roles/aiplatform.admin, roles/editor, roles/owner (roles granted through a group, a folder or the "
        "organization are not seen; --no-preflight skips the check); fix: gcloud projects add-iam-policy-binding "
        f"demo-project --member=serviceAccount:{TRAINER} --role=roles/aiplatform.user",
    ),
    "not acting as itself": (
        lambda google: google.account_policies.update({TRAINER: []}),
        ["--service-account", TRAINER],
        f"MISSING {TRAINER} acting as itself (it launches the training job): no roles/iam.serviceAccountUser on "
        "itself (roles granted through a group, a folder or the organization are not seen; --no-preflight skips the "
        f"check); fix: gcloud iam service-accounts add-iam-policy-binding {TRAINER} --member=serviceAccount:{TRAINER}"
        " --role=roles/iam.serviceAccountUser --project demo-project",
    ),
    "no pipelineJobs.create": (
        lambda google: google.caller_permissions.clear(),
        [],
        "MISSING your permission aiplatform.pipelineJobs.create on project demo-project: not granted; fix: gcloud "
        "projects add-iam-policy-binding demo-project --member=user:YOUR_EMAIL --role=roles/aiplatform.user",
    ),
}


@pytest.mark.parametrize("item", sorted(MISSING))
def test_each_missing_item_is_one_line_with_its_fix_and_nothing_is_created(vertex, capsys, item):
    take_away, extra, line = MISSING[item]
    take_away(vertex.google)
    assert refused(vertex, capsys, *extra) == f"preflight: {line} (--no-preflight goes on without it)"


def test_a_bucket_in_another_region_is_missing_and_an_unreadable_quota_is_unknown_not_guessed(vertex, capsys, gcs):
    """The bucket's location against the run's region; a quota the Cloud Quotas API does not list (v6e's name is
    unknown here) is said to be unknown, as is an item of a disabled API, with the command that enables it."""
    vertex.google.quotas.clear()
    vertex.google.enabled.discard("compute.googleapis.com")
    gcs.location = "US"
    gcs.patch()
    try:
        line = refused(vertex, capsys)
        assert line.startswith(
            f"preflight: MISSING the location of bucket gs://{BUCKET}: multi-region US, not "
            "europe-west4: Vertex AI in europe-west4 writes the models and job outputs only to a "
            "bucket there; fix: gcloud storage buckets create gs://NEW_BUCKET "
            "--location=europe-west4"
        )
    finally:
        gcs.location = "EUROPE-WEST4"
        gcs.patch()
    out = check(vertex, capsys)
    assert (
        "unknown quota of TPU v5e chips for training in europe-west4: Cloud Quotas lists no Vertex AI quota named "
        "for tpu_v5e: not guessed"
    ) in out
    assert (
        "unknown ct5lp-hightpu-4t in europe-west4: compute.googleapis.com is disabled, so this could not be read; "
        "gcloud services enable compute.googleapis.com"
    ) in out


def test_several_missing_items_are_a_line_each_and_no_preflight_skips_them(vertex, capsys):
    vertex.google.enabled.discard("artifactregistry.googleapis.com")
    vertex.google.caller_permissions.clear()
    message = refused(vertex, capsys)
    head, *lines = message.splitlines()
    assert head == "the preflight found 2 missing: fix each, or pass --no-preflight to go on without it"
    assert [line.split(":")[0].strip() for line in lines] == [
        "MISSING API artifactregistry.googleapis.com",
        "MISSING your permission aiplatform.pipelineJobs.create on project demo-project",
    ]
    assert main(["submit", *vertex.job_args, "--no-preflight"]) == 0
    assert len(vertex.bodies("POST", "/pipelineJobs")) == 1
    assert not vertex.bodies("GET", "/services:batchGet")[1:]  # (the skipped run asked nothing)


def test_the_placeholder_template_and_absent_images_are_one_line_exit_2_before_anything_is_created(vertex, tmp_path):
    """The README's order: make images pushes, compile names them, submit checks them. The committed pipeline.yaml
    names the placeholder registry; a template compiled for a tag never pushed names absent images."""
    from tests.conftest import REPO_ROOT, run_cli

    args = [arg for arg in vertex.job_args if arg != vertex.template]
    args.remove("--template")
    placeholder = run_cli("pipeline", "submit", *args, "--template", f"{REPO_ROOT}/pipeline.yaml")
    unpushed = str(tmp_path / "unpushed.yaml")
    assert main(["compile", "--registry", REGISTRY, "--tag", "t2", "--output", unpushed]) == 0
    absent = run_cli("pipeline", "submit", *args, "--template", unpushed)
    for result in (placeholder, absent):
        assert result.returncode == 2, result.stderr[-2000:]
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert placeholder.stderr.startswith(
        f"error: pipeline template {REPO_ROOT}/pipeline.yaml names its step images "
        "in the placeholder registry us-docker.pkg.dev/my-project/tpu-image-pipeline"
    )
    assert absent.stderr.strip() == (
        f"error: preflight: MISSING images pipeline, light, train-tpu of {REGISTRY} at tag t2: not in Artifact "
        f"Registry; fix: make images REGISTRY={REGISTRY} TAG=t2 PUSH=1 (--no-preflight goes on without it)"
    )
    assert not vertex.bodies("POST", "/pipelineJobs") and not vertex.bodies("POST", "/schedules")


def test_a_dataflow_conversion_adds_its_apis_its_roles_and_its_workers_image(vertex, capsys):
    """beam_args that name Dataflow: its API and Compute Engine's, Dataflow's role for the run-as account, and the
    beam-worker image the DAG gives its workers."""
    beam = '--param=beam_args=["--runner=DataflowRunner", "--project=demo-project", "--region=europe-west4"]'
    line = refused(vertex, capsys, beam)
    assert line == (
        f"preflight: MISSING images beam-worker of {REGISTRY} at tag {TAG}: not in Artifact Registry; fix: "
        f"make images REGISTRY={REGISTRY} TAG={TAG} PUSH=1 (--no-preflight goes on without it)"
    )
    vertex.google.images.add(f"{REGISTRY}/beam-worker:{TAG}")
    vertex.google.enabled.discard("dataflow.googleapis.com")
    assert refused(vertex, capsys, beam).startswith(
        "preflight: MISSING API dataflow.googleapis.com: disabled; fix: gcloud services enable dataflow.googleapis.com"
    )
    vertex.google.enabled.add("dataflow.googleapis.com")
    out = check(vertex, capsys, beam)
    assert f"ok      Dataflow's role for {COMPUTE_ACCOUNT} on project demo-project: roles/editor" in out
    assert f"ok      image {REGISTRY}/beam-worker:{TAG}: pushed" in out
    assert f"{NUMBER}-compute@" in COMPUTE_ACCOUNT
