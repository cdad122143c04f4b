"""Iterating on a model of one's own with run-local: the file is pinned under its digest in the work dir, so an
edited file trains again while the conversion and the data checks come from the cache, and an unchanged file is a
cache hit throughout (kfp.local's cache, ``--cache``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from tests.conftest import REPO_ROOT, run_cli


def test_an_edited_model_file_trains_again_and_an_unchanged_one_is_a_cache_hit(tmp_path, image_folder):
    model, work = tmp_path / "convnet.py", tmp_path / "work"
    shutil.copyfile(os.path.join(REPO_ROOT, "examples", "models", "codelab_convnet.py"), model)
    # a model that learns nothing in one epoch is not blessed: nothing to export, the run is quicker
    command = [
        "pipeline",
        "run-local",
        "--work-dir",
        str(work),
        "--source",
        image_folder,
        "--image-size",
        "16",
        "--epochs",
        "1",
        "--learning-rate",
        "0.000001",
        "--cache",
        "--model",
        f"{model}:build",
        "--hparam",
        "width=0.5",
    ]

    said = []

    def run() -> dict:
        result = run_cli(*command, timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        said.append(result.stdout + result.stderr)
        with open(work / "summary.json") as handle:
            return json.load(handle)

    first, again = run(), run()
    model.write_text(model.read_text() + "# next: a wider stack\n")
    edited = run()
    # the model check (a process building the model) is made again only for a file that changed
    unchanged = f"model {model}:build: unchanged since it passed its check for this input; not checked again"
    assert [unchanged in output for output in said] == [False, True, False]
    everything = ("convert", "check data", "train", "evaluate")
    assert first["steps"] == dict.fromkeys(everything, "ran")
    assert again["steps"] == dict.fromkeys(everything, "cached")
    assert edited["steps"] == {"convert": "cached", "check data": "cached", "train": "ran", "evaluate": "ran"}
    for summary, content in ((first, None), (edited, model.read_bytes())):
        digest = hashlib.sha256(content or model.read_bytes()[: -len("# next: a wider stack\n")]).hexdigest()
        assert summary["training"]["model"]["sha256"] == digest
        assert summary["parameters"]["model_name"] == f"{work}/models/{digest[:16]}/convnet.py:build"
        assert summary["training"]["hparams"] == {"batch_norm": True, "width": 0.5}
