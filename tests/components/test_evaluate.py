"""The evaluate step: the metrics arithmetic without I/O, then a real evaluation of the trained model."""

from __future__ import annotations

import json
import os

import pytest

from components.evaluate.core import EvaluateConfig, classification_metrics, run
from tests.conftest import CLASSES


def test_metrics_from_known_predictions():
    metrics = classification_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0], ["a", "b", "c"])
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    assert metrics["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    assert metrics["per_class"]["a"] == {"precision": 0.5, "recall": 0.5, "support": 2}
    assert metrics["per_class"]["b"]["precision"] == pytest.approx(2 / 3)
    assert metrics["per_class"]["c"] == {"precision": 1.0, "recall": 0.5, "support": 2}


def test_class_never_predicted_or_absent_has_zero_not_nan():
    metrics = classification_metrics([0, 0], [0, 0], ["a", "b"])
    assert metrics["per_class"]["b"] == {"precision": 0.0, "recall": 0.0, "support": 0}


def test_evaluates_the_test_split_and_writes_metrics_json(converted, trained, tmp_path):
    examples_dir, stats = converted
    model_dir, _ = trained
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path)))
    assert metrics["num_examples"] == stats["counts"]["test"]
    assert sum(map(sum, metrics["confusion_matrix"])) == stats["counts"]["test"]
    assert metrics["class_names"] == list(CLASSES)
    assert metrics["accuracy"] >= 0.8
    with open(os.path.join(tmp_path, "metrics.json")) as handle:
        assert json.load(handle) == metrics
