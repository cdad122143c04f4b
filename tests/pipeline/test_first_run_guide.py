"""docs/vertex-ai.md's first run on a new project, command after command: its ``gcloud`` and ``make`` steps stood in
for by the fake project's state (the account made and granted, the images pushed), every ``python -m pipeline``
command run as written against the fake Vertex AI server and the storage emulator, and its sample output read back."""

from __future__ import annotations

import os
import re
import shlex

from pipeline.__main__ import main
from tests.conftest import BUCKET, REPO_ROOT
from tests.fake_google import quota_info

GUIDE = os.path.join(REPO_ROOT, "docs", "vertex-ai.md")
RUNNER = "pipeline-runner@demo-project.iam.gserviceaccount.com"


def guide_section() -> str:
    with open(GUIDE, encoding="utf-8") as handle:
        text = handle.read()
    return text.split("## First run on a new project", 1)[1].split("\n## ", 1)[0]


def commands(section: str) -> list[str]:
    """Each command of the section's shell blocks, its continuation lines joined."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S):
        for command in re.sub(r"\\\n\s*", " ", block).splitlines():
            if command.strip():
                found.append(command.strip())
    return found


def test_each_command_of_the_first_run_guide_works_in_order(vertex, gcs, tmp_path, capsys, monkeypatch):
    from pipeline.images import read_template, template_images

    monkeypatch.chdir(tmp_path)  # (the guide compiles my-pipeline.yaml where you are)
    section = guide_section()
    listed = commands(section)
    assert [c.split()[0] for c in listed] == ["gcloud"] * 3 + ["make", ".venv/bin/python"] + ["gcloud"] * 5 + [
        ".venv/bin/python"
    ] * 3
    local = ["--api-endpoint", vertex.url, "--anonymous", "--config", vertex.args[vertex.args.index("--config") + 1]]
    google = vertex.google
    for command in listed:
        words = shlex.split(command.replace("PROJECT", "demo-project").replace("BUCKET", BUCKET))
        if words[0] == "gcloud" and words[1:3] == ["iam", "service-accounts"] and words[3] == "create":
            google.accounts[RUNNER] = {}  # as gcloud makes it
            continue
        if words[0] == "gcloud" and "--member=serviceAccount:" + RUNNER in words:
            role = next(w.split("=", 1)[1] for w in words if w.startswith("--role="))
            if words[1] == "projects":
                google.project_bindings.append({"role": role, "members": [f"serviceAccount:{RUNNER}"]})
            elif words[1] == "iam":
                google.account_policies[RUNNER] = [{"role": role, "members": [f"serviceAccount:{RUNNER}"]}]
            else:  # the bucket's own policy, in the storage emulator
                policy = gcs.get_iam_policy(requested_policy_version=3)
                policy.bindings.append({"role": role, "members": {f"serviceAccount:{RUNNER}"}})
                gcs.set_iam_policy(policy)
            continue
        if words[0] == "gcloud" and "--member=user:YOUR_EMAIL" in words:
            google.caller_acts_as.add(RUNNER)
            continue
        if words[0] in ("gcloud", "make"):
            continue  # the APIs, the bucket and the repository are the fake project's already
        arguments = words[3:]
        if arguments[0] != "compile":
            arguments += local
        if "--wait" in arguments:  # (the fake's job ends after a few reads: no need to wait 30 s between them)
            arguments += ["--poll-interval", "0.05"]
        assert main(arguments) == 0, command
        if arguments[0] == "compile":  # what make images PUSH=1 pushed before it
            google.images |= set(template_images(read_template(str(tmp_path / "my-pipeline.yaml"))).values())
        if arguments[0] == "check":
            # the bucket's grant, as the guide's gcloud storage command gives it
            assert f"{RUNNER}'s access to bucket gs://{BUCKET}: roles/storage.objectUser" in capsys.readouterr().out
    (job,) = vertex.bodies("POST", "/pipelineJobs")
    assert job["serviceAccount"] == RUNNER
    assert job["runtimeConfig"]["parameterValues"] == {"source": f"gs://{BUCKET}/flower_photos"}
    (schedule,) = vertex.bodies("POST", "/schedules")
    assert schedule["displayName"] == "weekly-retrain" and schedule["cron"] == "TZ=Europe/Paris 0 3 * * 1"


def test_the_guides_sample_of_a_missing_quota_is_what_check_prints(vertex, tmp_path, capsys):
    """The sample output: the head line's counts and the missing quota's line, as check prints them for that run."""
    from pipeline.images import read_template, template_images

    section = guide_section()
    sample = re.search(r"```\n(preflight: .*?)```", section, flags=re.S).group(1).strip().splitlines()
    template = str(tmp_path / "my-pipeline.yaml")
    registry = "europe-docker.pkg.dev/demo-project/tpu-image-pipeline"
    assert main(["compile", "--registry", registry, "--tag", "v1", "--output", template]) == 0
    vertex.google.images |= set(template_images(read_template(template)).values())
    vertex.google.quotas[0] = quota_info("custom_model_training_tpu_v5e", {}, 0)
    args = [arg if arg != vertex.template else template for arg in vertex.job_args]
    capsys.readouterr()
    import pytest

    from components.cli import UsageError

    with pytest.raises(UsageError):
        main(["check", *args, "--service-account", "trainer@demo-project.iam.gserviceaccount.com"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == sample[0]
    pattern = re.escape(sample[1]).replace(r"\.\.\.", ".+").replace("PROJECT", "demo-project")
    (missing,) = [line for line in printed if line.startswith("  MISSING")]
    assert re.fullmatch(pattern, missing), missing
