"""components.storage: local paths and ``gs://`` (the Cloud Storage emulator) through one set of calls. Listings find
the files Beam's filesystems find, with the same sizes and times (so a source keeps its fingerprint), and the light
steps' file work imports neither Beam nor TensorFlow."""

import json
import os
import subprocess
import sys

import pytest

from components import storage
from tests.conftest import BUCKET, REPO_ROOT

# (path, bytes): a hidden file and folder, a folder two levels down, a name with a bracket
FILES = {
    "a/1.jpg": b"one",
    "a/22.jpg": b"twenty-two",
    "a/.x.jpg": b"hidden",
    "b/1.png": b"png",
    "b/deep/2.jpg": b"deeper",
    ".hidden/3.jpg": b"three",
    "top.txt": b"top",
    "c]d/e.txt": b"bracket",
}
# each with the files it finds, by hand (Beam's rules: * and ? within a folder, ** across, [...] a class)
PATTERNS = {
    "*/*": ["a/1.jpg", "a/22.jpg", "a/.x.jpg", "b/1.png", ".hidden/3.jpg", "c]d/e.txt"],
    "**": list(FILES),
    "a/?.jpg": ["a/1.jpg"],
    "[ab]/*": ["a/1.jpg", "a/22.jpg", "a/.x.jpg", "b/1.png"],
    "[!a]/*": ["b/1.png"],
    "a/": ["a/1.jpg", "a/22.jpg", "a/.x.jpg"],
    "a/1.jpg": ["a/1.jpg"],
    "missing*": [],
    "a/missing.jpg": [],
    "**.jpg": ["a/1.jpg", "a/22.jpg", "a/.x.jpg", "b/deep/2.jpg", ".hidden/3.jpg"],
    "b/**": ["b/1.png", "b/deep/2.jpg"],
    "c]d/*": ["c]d/e.txt"],
}


def write_tree(root) -> str:
    for name, content in FILES.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "wb") as handle:
            handle.write(content)
    return str(root)


def beams(pattern: str) -> set:
    from apache_beam.io.filesystems import FileSystems

    (result,) = FileSystems.match([pattern])
    return {(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in result.metadata_list}


def test_match_finds_locally_what_beams_filesystems_find_with_the_same_sizes_and_times(tmp_path):
    root = write_tree(tmp_path / "root")
    for pattern, expected in PATTERNS.items():
        found = storage.match(f"{root}/{pattern}")
        assert sorted(info.path for info in found) == sorted(f"{root}/{name}" for name in expected), pattern
        assert {tuple(info) for info in found} == beams(f"{root}/{pattern}"), pattern
        assert all(info.size_in_bytes == len(FILES[info.path[len(root) + 1 :]]) for info in found)
    assert [info.path for info in storage.match(f"{root}/**", limit=2)] == [
        info.path for info in storage.match(f"{root}/**")
    ][:2]
    assert storage.glob(f"{root}/a/*") == [f"{root}/a/.x.jpg", f"{root}/a/1.jpg", f"{root}/a/22.jpg"]


def test_match_finds_on_cloud_storage_what_beams_filesystems_find(gcs):
    for name, content in FILES.items():
        gcs.blob(f"tree/{name}").upload_from_string(content)
    root = f"gs://{BUCKET}/tree"
    for pattern, expected in PATTERNS.items():
        found = storage.match(f"{root}/{pattern}")
        assert sorted(info.path for info in found) == sorted(f"{root}/{name}" for name in expected), pattern
        beam = {path: (size, seconds) for path, size, seconds in beams(f"{root}/{pattern}")}
        assert {info.path: info.size_in_bytes for info in found} == {path: size for path, (size, _) in beam.items()}
        for info in found:  # Beam's time, read in local time then shifted by the zone: the same instant in UTC
            assert info.last_updated_in_seconds == pytest.approx(beam[info.path][1], abs=1e-3)


@pytest.mark.parametrize(
    "pattern",
    ["a*b?c", "**/x", "[abc]", "[!abc]", "[]a]", "[!]a]", "[^a]", "x[", "a[b", "a.b+", "[a-z]*.jpg", "back\\slash[\\]"],
)
def test_patterns_translate_as_beams_do(pattern):
    from apache_beam.io.filesystem import FileSystem

    assert storage.translate_pattern(pattern) == FileSystem.translate_pattern(pattern)


def test_cloud_storage_files_are_written_read_listed_and_copied_without_beam(gcs, tmp_path):
    """The light steps' file work on gs:// (a registry's JSON, an export copied into it), in a process of its own:
    Beam and TensorFlow are never imported."""
    local = tmp_path / "weights.bin"
    local.write_bytes(b"\x00" * 1000 + b"end")
    script = f"""
import json, sys
from components import storage
from components.artifacts.registry import copy_tree
root = "gs://{BUCKET}/light"
storage.write_json(root + "/export/export.json", {{"accuracy": 0.5}})
storage.copy({str(local)!r}, root + "/export/saved_model/variables/v.data")
assert storage.read_json(root + "/export/export.json") == {{"accuracy": 0.5}}
assert storage.exists(root + "/export/export.json") and not storage.exists(root + "/export/nothing.json")
with storage.open_read(root + "/export/saved_model/variables/v.data", chunk_bytes=256) as handle:
    handle.seek(1000)
    assert handle.read() == b"end"
print(copy_tree(root + "/export", root + "/registry/1"))
storage.copy(root + "/registry/1/saved_model/variables/v.data", {str(tmp_path / "back.bin")!r})
storage.write_atomically(root + "/export/export.json", b"{{}}")
print(json.dumps([storage.read_json(root + "/export/export.json"), storage.glob(root + "/registry/1/**")]))
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}} & {{"apache_beam", "tensorflow"}})))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    copied, listed, heavy = result.stdout.strip().splitlines()
    registry = f"gs://{BUCKET}/light/registry/1"
    assert int(copied) == 2 and json.loads(heavy) == []
    assert json.loads(listed) == [{}, [f"{registry}/export.json", f"{registry}/saved_model/variables/v.data"]]
    assert (tmp_path / "back.bin").read_bytes() == local.read_bytes()
    assert gcs.blob("light/registry/1/saved_model/variables/v.data").download_as_bytes() == local.read_bytes()


def test_a_storage_outage_in_the_register_step_ends_in_one_line_within_its_deadline(monkeypatch, capsys, caplog):
    """Nothing answers at the Cloud Storage endpoint: the register step's first call is retried for
    TPU_PIPELINE_STORAGE_DEADLINE seconds, then the command ends in one line naming the object."""
    import re
    import socket
    import time

    from google.cloud.storage import retry

    from components import cli
    from components.cli import run_main
    from components.register.__main__ import main as register

    monkeypatch.setattr(retry.DEFAULT_RETRY, "_timeout", retry.DEFAULT_RETRY._timeout)  # (restored afterwards)
    monkeypatch.setattr(retry.DEFAULT_RETRY, "_on_error", retry.DEFAULT_RETRY._on_error)
    monkeypatch.setattr(cli, "STORAGE_RETRIES_SAID", [])  # (said once a process: as in this test's own)
    caplog.set_level("WARNING", logger="components.cli")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # (nothing listens there once it is closed)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("TPU_PIPELINE_STORAGE_DEADLINE", "2")
    started = time.monotonic()
    with pytest.raises(SystemExit) as exited:
        run_main(register, ["add", "--export", "gs://b/run/export", "--registry", "gs://b/models/x", "--baseline", ""])
    took = time.monotonic() - started
    assert exited.value.code == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(
        r"error: gs://b/run/export/export.json could not be reached: Cloud Storage did not answer "
        r"within 2 s of retries; .*",
        said[-1],
    ), said
    # while it retries, the wait is said once, not left silent for the deadline (120 s by default)
    waiting = [r.getMessage() for r in caplog.records if r.name == "components.cli"]
    assert len(waiting) == 1 and waiting[0].startswith("Cloud Storage did not answer ("), waiting
    assert waiting[0].endswith("): retrying for up to 2 s (TPU_PIPELINE_STORAGE_DEADLINE sets how long)")
    assert took < 30  # (no hang: 2 s of retries, not google-cloud-storage's 120)
    # a Vertex AI call that gave up is not Cloud Storage's outage
    from google.api_core.exceptions import RetryError

    from components.cli import storage_unreachable

    vertex = RetryError("Timeout of 2.0s exceeded", ConnectionError("europe-west4-aiplatform.googleapis.com"))
    assert storage_unreachable(vertex) is None
