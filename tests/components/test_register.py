"""The folder registry under the registry steps: numbered versions, the default pointer, unfinished copies, and the
one-line errors for a folder that is not a registry. Local folders, and gs:// against gcp-storage-emulator (the
registry steps on gs:// run in tests/pipeline/test_vertex.py)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from components.artifacts.records import DATA_STATS, METRICS
from components.artifacts.registry import FolderRegistry
from components.cli import UsageError
from components.register.core import same_as_baseline
from tests.conftest import VERTEX_LOGGERS, at_once, made_up_evaluation, record_export


def fake_export(folder, digest: str) -> str:
    (folder / "saved_model" / "variables").mkdir(parents=True)
    (folder / "saved_model" / "saved_model.pb").write_bytes(b"graph")
    (folder / "saved_model" / "variables" / "variables.index").write_bytes(b"index")
    record_export(folder, digest)
    return str(folder)


def test_pushes_are_numbered_copies_and_the_last_is_the_default(tmp_path):
    registry = FolderRegistry(str(tmp_path / "registry"))
    assert registry.default() is None and registry.versions() == []
    first = registry.push(fake_export(tmp_path / "a", "1" * 64), {"pipeline_run": "run-1"})
    second = registry.push(fake_export(tmp_path / "b", "2" * 64), {"pipeline_run": "run-2"})
    assert (first.number, second.number) == (1, 2) and registry.default().number == 2
    assert [v.record["pipeline_run"] for v in registry.versions()] == ["run-1", "run-2"]
    assert registry.version(1).uri == first.uri == f"{tmp_path}/registry/1"
    assert (tmp_path / "registry" / "1" / "saved_model" / "variables" / "variables.index").read_bytes() == b"index"
    assert first.record["files"] == 3  # version.json comes after the copy


def test_an_unfinished_copy_keeps_its_number_and_is_not_a_version(tmp_path):
    (tmp_path / "registry" / "3" / "saved_model").mkdir(parents=True)  # a push interrupted after claiming 3
    registry = FolderRegistry(str(tmp_path / "registry"))
    assert registry.push(fake_export(tmp_path / "a", "1" * 64), {}).number == 4
    assert [v.number for v in registry.versions()] == [4]


def test_a_registry_on_cloud_storage_numbers_on_past_its_versions_and_unfinished_copies(gcs):
    """On gs:// (gcp-storage-emulator) as in a folder: each push takes the next number, past a copy that a push
    left unfinished (files, no version.json), and only complete versions count."""
    from tests.conftest import BUCKET

    def export(name: str) -> str:  # an export step's output on gs://, as the DAG's are
        for path in ("saved_model/saved_model.pb", "export.json"):
            gcs.blob(f"exports/{name}/{path}").upload_from_string(b"{}")
        return f"gs://{BUCKET}/exports/{name}"

    root = f"gs://{BUCKET}/registry-numbers"
    registry = FolderRegistry(root)
    assert registry.push(export("a"), {}).number == 1
    assert registry.push(export("b"), {}).number == 2
    gcs.blob("registry-numbers/3/saved_model/saved_model.pb").upload_from_string(b"half a copy")
    gcs.blob("registry-numbers/10/saved_model/saved_model.pb").upload_from_string(b"half a copy")
    assert registry.push(export("c"), {}).number == 11  # (10 is more than 9)
    assert [v.number for v in registry.versions()] == [1, 2, 11]
    assert registry.default().uri == f"{root}/11"


def test_pushes_that_overlap_never_share_a_number(tmp_path):
    registry = FolderRegistry(str(tmp_path / "registry"))
    exports = [fake_export(tmp_path / str(n), str(n) * 64) for n in range(4)]
    numbers = []
    threads = [threading.Thread(target=lambda e=e: numbers.append(registry.push(e, {}).number)) for e in exports]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(numbers) == [1, 2, 3, 4]


def test_a_folder_that_is_not_a_registry_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"model registry .*/file is a file: pass a folder"):
        FolderRegistry(str(tmp_path / "file")).default()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "default").write_text('{"version": 7}')
    with pytest.raises(UsageError, match=r"its default does not name a complete version <N>/version.json"):
        FolderRegistry(str(tmp_path / "other")).default()


def test_the_candidate_is_the_baseline_when_its_trained_weights_are(tmp_path):
    registry = FolderRegistry(str(tmp_path / "registry"))
    candidate = fake_export(tmp_path / "candidate", "a" * 64)
    in_service = registry.push(candidate, {})
    for baseline in (in_service.uri, in_service.uri + "/saved_model"):  # as the folder or the Model Registry has it
        assert same_as_baseline(candidate, baseline).startswith("the candidate is the baseline itself")
    assert same_as_baseline(fake_export(tmp_path / "retrained", "b" * 64), in_service.uri) == ""
    assert same_as_baseline(candidate, "") == ""


def said(caplog) -> list[str]:
    """What the registry steps logged since the last call (on the terminal under run-local, in Cloud Logging on
    Vertex AI)."""
    lines = [record.getMessage() for record in caplog.records if record.name in VERTEX_LOGGERS]
    caplog.clear()
    return lines


def test_the_baseline_is_the_folder_registrys_default_version_unless_one_is_given(tmp_path, caplog):
    from components.register.vertex import find_baseline

    caplog.set_level("INFO", logger="components")
    root = str(tmp_path / "registry")
    assert find_baseline("digits", "", root, None) == ""  # the first run: nothing in service yet
    assert said(caplog) == [f"no model in {root} yet: the first run is judged on its value thresholds alone"]
    registry = FolderRegistry(root)
    registry.push(fake_export(tmp_path / "a", "1" * 64), {})
    registry.push(fake_export(tmp_path / "b", "2" * 64), {})
    registry.set_default(1)
    assert find_baseline("digits", "", root, None) == f"{root}/1"
    assert said(caplog) == [f"baseline: version 1 of {root} ({root}/1)"]
    assert find_baseline("digits", "/given/model", root, None) == "/given/model"
    assert said(caplog) == ["baseline: /given/model (as given)"]
    assert find_baseline("", "", root, None) == ""  # registration off: no baseline looked up
    assert said(caplog) == ["baseline: none (as given)"]


def test_registering_in_a_folder_decides_in_one_json_line_and_says_what_it_did(tmp_path, caplog):
    """The register step of a local run: the decision's every field, the line it prints, what the version records
    and which version is in service afterwards, for each of its three outcomes."""
    from components.register.vertex import register_version

    caplog.set_level("INFO", logger="components")
    root = str(tmp_path / "registry")
    first = fake_export(tmp_path / "a", "1" * 64)
    line = register_version(first, "digits", "", root, "run-1", None)
    assert line.startswith('{"action": "registered", ') and "\n" not in line  # what it did, first, on one line
    decided = json.loads(line)
    assert decided == {"action": "registered", "version": 1, "uri": f"{root}/1"}
    assert said(caplog) == [f"registered {first} as version 1 of {root}"]
    record = json.loads((tmp_path / "registry" / "1" / "version.json").read_text())
    assert (record["display_name"], record["pipeline_run"], record["source"]) == ("digits", "run-1", first)
    assert FolderRegistry(root).default().number == 1
    # the same trained weights again (a cached train step): skipped, nothing copied, the default unchanged
    again = json.loads(
        register_version(fake_export(tmp_path / "b", "1" * 64), "digits", f"{root}/1", root, "run-2", None)
    )
    reason = "the candidate is the baseline itself (the same trained weights, sha256 111111111111)"
    assert again == {"action": "skipped", "reason": reason, "baseline": f"{root}/1"}
    assert said(caplog) == [f"{reason}: not registered again"]
    assert [v.number for v in FolderRegistry(root).versions()] == [1]
    # registration off: no copy
    off = json.loads(register_version(first, "", "", root, "run-3", None))
    assert off == {"action": "skipped", "reason": "registration is off (model_display_name is empty)"}
    assert said(caplog) == ["model_display_name is empty: the blessed export is not registered"]
    assert [v.number for v in FolderRegistry(root).versions()] == [1]


def test_an_export_record_is_read_through_its_saved_model_folder_and_none_when_missing(tmp_path):
    from components.register.core import default_model_root, export_record

    export = fake_export(tmp_path / "exportX", "3" * 64)  # a name's last letters are not stripped with the slash
    assert export_record(export).model_digest == "3" * 64
    assert export_record(export + "/saved_model/").model_digest == "3" * 64
    assert export_record(str(tmp_path)) is None
    assert default_model_root("gs://bucket/root/run/export", "digits") == "gs://bucket/models/digits"
    with pytest.raises(UsageError) as raised:
        default_model_root(export, "digits")
    assert str(raised.value) == (
        f"export {export} is not on Cloud Storage: pass model_root, a gs:// folder for the models"
    )


def test_a_version_keeps_the_statistics_of_the_data_it_learned_from(tmp_path):
    """The data checks' baseline travels with the version: the check-data output's two statistics files are copied
    beside the export, before version.json marks the version complete."""
    export, checks = tmp_path / "export", tmp_path / "checks"
    export.mkdir()
    checks.mkdir()
    record_export(export)
    DATA_STATS.write(str(checks), {})
    (checks / "near_duplicates.npz").write_bytes(b"keys")
    (checks / "data_checks.json").write_text("{}")  # this run's verdicts: not the data's statistics
    version = FolderRegistry(str(tmp_path / "registry")).push(str(export), {}, data_statistics=str(checks))
    assert sorted(p.name for p in (tmp_path / "registry" / "1").iterdir()) == [
        "data_stats.json",
        "export.json",
        "near_duplicates.npz",
        "version.json",
    ]
    assert (tmp_path / "registry" / "1" / "near_duplicates.npz").read_bytes() == b"keys"
    assert version.record["files"] == 3
    (checks / "near_duplicates.npz").unlink()
    other = FolderRegistry(str(tmp_path / "other"))
    with pytest.raises(
        UsageError, match=f"^--data-statistics {checks} has no near_duplicates.npz: pass the check-data"
    ):
        other.push(str(export), {}, data_statistics=str(checks))
    assert other.versions() == [] and other.default() is None  # the copy never became a version


def test_a_version_keeps_its_evaluation_and_the_command_line_passes_it(tmp_path, capsys):
    """How the model answered on its own evaluation split travels with the version (later runs' prediction mix):
    evaluate's metrics.json is copied beside the export; its report is not."""
    from components.register.__main__ import main

    export, evaluation = tmp_path / "export", tmp_path / "evaluation"
    export.mkdir()
    evaluation.mkdir()
    record_export(export)
    METRICS.write(str(evaluation), made_up_evaluation(accuracy=0.5))
    (evaluation / "report.html").write_text("<html></html>")
    assert (
        main(
            ["add", "--registry", str(tmp_path / "registry"), "--export", str(export), "--evaluation", str(evaluation)]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["action"] == "registered"
    kept = tmp_path / "registry" / "1"
    assert sorted(p.name for p in kept.iterdir()) == ["export.json", "metrics.json", "version.json"]
    assert METRICS.read(str(kept)) == METRICS.read(str(evaluation))
    assert json.loads((kept / "version.json").read_text())["files"] == 2
    # an export evaluate did not bless is refused in one line, and the registry stays as it was
    unblessed = {"blessed": False, "reasons": ["accuracy 0.50 < 0.75"]}
    METRICS.write(str(evaluation), made_up_evaluation(accuracy=0.5, blessing=unblessed))
    registry = str(tmp_path / "registry")
    with pytest.raises(UsageError) as raised:
        main(["add", "--registry", registry, "--export", str(export), "--evaluation", str(evaluation)])
    assert str(raised.value) == (
        f"--evaluation {evaluation}: evaluate did not bless this model (accuracy 0.50 < 0.75): only a blessed "
        "export is registered"
    )
    assert [v.number for v in FolderRegistry(str(tmp_path / "registry")).versions()] == [1]
    # so is one exported anyway, without --evaluation: its export.json keeps the evaluation's decision
    anyway = tmp_path / "exported-anyway"
    anyway.mkdir()
    record_export(anyway, blessing=unblessed)
    with pytest.raises(UsageError) as raised:
        main(["add", "--registry", registry, "--export", str(anyway)])
    assert str(raised.value) == (
        f"export {anyway} was exported anyway: evaluate did not bless this model (accuracy 0.50 < 0.75): only a "
        "blessed export is registered"
    )
    assert [v.number for v in FolderRegistry(str(tmp_path / "registry")).versions()] == [1]
    (evaluation / "metrics.json").unlink()
    other = FolderRegistry(str(tmp_path / "other"))
    with pytest.raises(UsageError, match=f"^evaluation {evaluation} has no metrics.json: pass the evaluate step"):
        other.push(str(export), {}, evaluation=str(evaluation))
    assert other.versions() == [] and other.default() is None


def test_an_unfinished_or_damaged_export_is_never_registered(tmp_path):
    """A disk-full export (no export.json, written last) or one whose files changed since export.json listed them:
    one line naming it, no version claimed, the default unchanged."""
    from components.register.vertex import register_version

    root = str(tmp_path / "registry")
    export = fake_export(tmp_path / "a", "1" * 64)
    os.remove(tmp_path / "a" / "export.json")
    with pytest.raises(
        UsageError,
        match=rf"^export {export} is unfinished: it has no export.json, which the export "
        "step writes last; export it again",
    ):
        register_version(export, "digits", "", root, "run-1", None)
    record_export(export, "1" * 64)
    (tmp_path / "a" / "saved_model" / "saved_model.pb").write_bytes(b"grap")
    with pytest.raises(
        UsageError,
        match=rf"^export {export} is damaged: saved_model/saved_model.pb is not the file "
        r"exported \(4 bytes; exported: 5 bytes, sha256 \w{12}\)",
    ):
        register_version(export, "digits", "", root, "run-1", None)
    assert not os.path.exists(root)
    (tmp_path / "a" / "saved_model" / "saved_model.pb").write_bytes(b"graph")  # as exported: registered
    assert json.loads(register_version(export, "digits", "", root, "run-1", None))["version"] == 1


@pytest.mark.parametrize("where", ["folder", "gs"])
def test_runs_that_register_at_once_never_move_the_default_to_a_model_not_compared_with_it(tmp_path, where, request):
    """Two runs judged against the same default (none, then version 1) register at once, five times: one becomes
    the default, the other is refused in one line that says why, and nothing it copied is left as a version. In a
    local folder, and on Cloud Storage (the emulator, checking preconditions as the service does)."""
    from components.register.vertex import register_version
    from components.storage import read_json

    if where == "gs":
        from tests.conftest import BUCKET

        request.getfixturevalue("gcs")
        root = f"gs://{BUCKET}/registry-race-{tmp_path.name}"
    else:
        root = str(tmp_path / "registry")
    baseline = ""
    for attempt in range(5):
        exports = [fake_export(tmp_path / f"{attempt}-{n}", f"{attempt}{n}" * 32) for n in range(2)]
        outcomes = at_once(
            lambda export, judged_against=baseline: json.loads(
                register_version(export, "digits", judged_against, root, "r", None)
            ),
            exports,
        )
        (won,) = [e for e in exports if isinstance(outcomes[e], dict)]
        (lost,) = [outcomes[e] for e in exports if e != won]
        version = outcomes[won]["version"]
        was = f"version {baseline.rsplit('/', 1)[-1]}" if baseline else "no model"
        assert lost == (
            f"model registry {root}: its default is now version {version}, not the {was} this model "
            "was judged against (another run registered meanwhile), so it is not registered: run again "
            "to be judged against it"
        )
        registry = FolderRegistry(root)
        assert registry.default().number == version == attempt + 1 and len(registry.versions()) == attempt + 1
        assert read_json(f"{root}/{version}/version.json")["source"] == won
        baseline = registry.default().uri
    # a registration by hand with no baseline is not judged; one against a baseline given outside the registry is
    # the user's comparison, not the registry's
    assert (
        json.loads(
            register_version(fake_export(tmp_path / "x", "x" * 64), "digits", "", root, "r", None, judged=False)
        )["version"]
        == 6
    )
    assert (
        json.loads(
            register_version(fake_export(tmp_path / "y", "y" * 64), "digits", str(tmp_path / "x"), root, "r", None)
        )["version"]
        == 7
    )


def test_a_cloud_storage_registrys_lock_waits_for_its_holder_and_takes_over_a_dead_ones(gcs, monkeypatch, caplog):
    """The lock object is created only where there is none; a registration waits while another holds it, takes it
    over once its holder's lease is over (a holder that died), and ends in one line if it waited too long."""
    import time

    import components.artifacts.registry as core
    from components.cli import StepFailedError
    from components.storage import create_only, delete_generation, read_generation
    from tests.conftest import BUCKET

    lock = f"gs://{BUCKET}/registry-lock/.lock"
    mine = create_only(lock, b"{}")
    assert mine and create_only(lock, b"{}") is None  # the service's precondition: one creation wins
    delete_generation(lock, mine + 1)  # (another generation: not deleted)
    assert read_generation(lock) == (b"{}", mine)
    delete_generation(lock, mine)
    assert read_generation(lock) is None

    held = json.dumps({"holder": "host-a process 7", "token": "t", "until": time.time() + 600}).encode()
    create_only(lock, held)
    monkeypatch.setattr(core, "LOCK_WAIT_SECONDS", 1.0)
    with pytest.raises(StepFailedError) as waited, core.cloud_turn(lock):
        pass
    assert str(waited.value).startswith(f"model registry lock {lock}: host-a process 7 has held it for the ")
    assert read_generation(lock)[0] == held  # still its holder's
    gcs.blob("registry-lock/.lock").delete()
    create_only(lock, json.dumps({"holder": "host-b process 8", "token": "t", "until": time.time() - 1}).encode())
    with core.cloud_turn(lock):
        assert json.loads(read_generation(lock)[0])["holder"].endswith(f"process {os.getpid()}")
    assert read_generation(lock) is None  # released
    assert "host-b process 8 held it past its lease; taking it over" in caplog.text


def test_a_step_stuck_on_its_storage_ends_in_one_line_past_its_deadline(tmp_path):
    """The find-baseline step reads a registry whose ``default`` never answers (a FIFO without a writer: the read
    blocks in the kernel, as on a stalled /gcs/ mount); with the deadline the DAG sets, it ends in one line, exit 1."""
    import subprocess
    import sys
    import time

    from components.cli import STEP_DEADLINE_ENV
    from tests.conftest import REPO_ROOT

    root = tmp_path / "registry"
    root.mkdir()
    os.mkfifo(root / "default")
    code = (
        "import sys; sys.argv += ['--function_to_execute', 'find_baseline_in_folder']; "
        "from components.register.component import find_baseline_in_folder; "
        f"find_baseline_in_folder('digits', {str(root)!r}, '', 'run-1')"
    )
    started = time.monotonic()
    environment = {**os.environ, STEP_DEADLINE_ENV: "2"}
    ended = subprocess.run(
        [sys.executable, "-c", code], env=environment, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert ended.returncode == 1 and time.monotonic() - started < 60, ended.stderr[-2000:]
    assert ended.stderr.strip().splitlines()[-1] == (
        f"error: the find_baseline_in_folder step ran past its deadline of 2 s ({STEP_DEADLINE_ENV}, set by compile "
        "--max-step-time): it was stuck (on Cloud Storage, or a service that did not answer) or had more work than "
        "that; see its log above, then run again, with a longer --max-step-time if it was working"
    )


def test_a_damaged_version_record_is_named_as_such_not_taken_for_another_folder(tmp_path):
    registry = FolderRegistry(str(tmp_path / "registry"))
    registry.push(fake_export(tmp_path / "a", "1" * 64), {})
    (tmp_path / "registry" / "1" / "version.json").write_text('{"version": 1, "sour')
    with pytest.raises(UsageError) as raised:
        registry.default()
    assert str(raised.value).startswith(f"model registry {tmp_path}/registry: version 1's version.json is damaged (")
    assert str(raised.value).endswith(
        f'restore it, or make another version the default ({{"version": N}} in {tmp_path}/registry/default)'
    )


def test_the_copies_killed_registrations_left_are_listed_and_removed_by_a_command(tmp_path, capsys):
    """A killed push leaves a numbered copy without version.json: `unfinished` lists them; `--remove` deletes those
    not written to for an hour (a recent one may be a registration in progress), never a version."""
    import time

    from components.register.__main__ import main

    root = tmp_path / "registry"
    registry = FolderRegistry(str(root))
    registry.push(fake_export(tmp_path / "a", "1" * 64), {})
    for number in (2, 3):  # killed while copying
        (root / str(number) / "saved_model").mkdir(parents=True)
        (root / str(number) / "saved_model" / "saved_model.pb").write_bytes(b"half")
    old = time.time() - 7200
    for path in (root / "2" / "saved_model" / "saved_model.pb",):
        os.utime(path, (old, old))
    assert main(["unfinished", "--registry", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{root}/2: unfinished (no version.json)",
        f"{root}/3: unfinished (written to in the last hour: may be in progress)",
    ]
    assert main(["unfinished", "--registry", str(root), "--remove"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{root}/2: removed (1 files of an unfinished copy)",
        f"{root}/3: unfinished (written to in the last hour: may be in progress)",
    ]
    assert sorted(os.listdir(root)) == [".lock", "1", "3", "default"]
    assert [v.number for v in registry.versions()] == [1] and registry.default().number == 1
    os.utime(root / "3" / "saved_model" / "saved_model.pb", (old, old))
    assert main(["unfinished", "--registry", str(root), "--remove"]) == 0
    assert main(["unfinished", "--registry", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{root}/3: removed (1 files of an unfinished copy)",
        f"{root}: no unfinished copies",
    ]
