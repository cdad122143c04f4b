"""The example model of one's own on the whole demo, as docs/your-model.md runs it: ``run-local --model
examples/models/codelab_convnet.py:build`` on the 1,797 digits. A whole demo run (1 to 2 minutes on 2 cores): run by
``make test-heavy``; ``make test`` trains the same file on JAX over two devices through the whole DAG."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import REPO_ROOT, run_cli

pytestmark = pytest.mark.heavy


def test_the_example_convnet_is_blessed_on_the_demo_and_its_saved_model_answers_the_raw_files_as_well(tmp_path):
    work = tmp_path / "work"
    model = os.path.join(REPO_ROOT, "examples", "models", "codelab_convnet.py:build")
    result = run_cli("pipeline", "run-local", "--work-dir", str(work), "--model", model, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(work / "summary.json") as handle:
        summary = json.load(handle)
    assert summary["blessed"] is True and summary["test_accuracy"] >= 0.98
    raw = summary["raw_files"]
    assert raw["num_files"] == summary["counts"]["test"] and raw["test_accuracy"] >= 0.98
    assert summary["training"]["model_name"] == "codelab_convnet.py:build"
