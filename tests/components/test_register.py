"""The folder registry under the registry steps: numbered versions, the default pointer, unfinished copies, and the
one-line errors for a folder that is not a registry. Local folders here; gs:// runs in tests/pipeline/test_vertex.py."""

from __future__ import annotations

import json
import threading

import pytest

from components.cli import UsageError
from components.register.core import FolderRegistry, same_as_baseline


def fake_export(folder, digest: str) -> str:
    (folder / "saved_model" / "variables").mkdir(parents=True)
    (folder / "saved_model" / "saved_model.pb").write_bytes(b"graph")
    (folder / "saved_model" / "variables" / "variables.index").write_bytes(b"index")
    (folder / "export.json").write_text(json.dumps({"model_digest": digest}))
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


def test_the_baseline_is_the_folder_registrys_default_version_unless_one_is_given(tmp_path):
    from components.register.vertex import find_baseline

    root = str(tmp_path / "registry")
    assert find_baseline("digits", "", root, None) == ""  # the first run: nothing in service yet
    registry = FolderRegistry(root)
    registry.push(fake_export(tmp_path / "a", "1" * 64), {})
    registry.push(fake_export(tmp_path / "b", "2" * 64), {})
    registry.set_default(1)
    assert find_baseline("digits", "", root, None) == f"{root}/1"
    assert find_baseline("digits", "/given/model", root, None) == "/given/model"
    assert find_baseline("", "", root, None) == ""  # registration off: no baseline looked up


def test_an_export_record_is_read_through_its_saved_model_folder_and_empty_when_missing(tmp_path):
    from components.register.core import default_model_root, export_record

    export = fake_export(tmp_path / "a", "3" * 64)
    assert export_record(export)["model_digest"] == "3" * 64
    assert export_record(export + "/saved_model/")["model_digest"] == "3" * 64
    assert export_record(str(tmp_path)) == {}
    assert default_model_root("gs://bucket/root/run/export", "digits") == "gs://bucket/models/digits"
    with pytest.raises(UsageError) as raised:
        default_model_root(export, "digits")
    assert str(raised.value) == (f"export {export} is not on Cloud Storage: pass model_root, a gs:// folder for the "
                                 "models")  # fmt: skip
