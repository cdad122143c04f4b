"""The evaluate step: the metrics arithmetic without I/O, then a real evaluation of the trained model."""

from __future__ import annotations

import json
import os

import pytest

from components.cli import UsageError
from components.evaluate.core import EvaluateConfig, bless, classification_metrics, run, top_k_accuracy
from tests.conftest import CLASSES


def test_metrics_from_known_predictions():
    metrics = classification_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0], ["a", "b", "c"])
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    assert metrics["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    assert metrics["per_class"]["a"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert metrics["per_class"]["b"]["precision"] == pytest.approx(2 / 3)
    assert metrics["per_class"]["b"]["f1"] == pytest.approx(0.8)  # 2PR / (P + R) with P 2/3, R 1
    assert metrics["per_class"]["c"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}


def test_class_never_predicted_or_absent_has_zero_not_nan():
    metrics = classification_metrics([0, 0], [0, 0], ["a", "b"])
    assert metrics["per_class"]["b"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


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


def test_top_k_accuracy_counts_the_true_class_among_the_k_most_probable():
    probabilities = [[0.5, 0.3, 0.2], [0.1, 0.2, 0.7], [0.6, 0.3, 0.1]]
    assert top_k_accuracy([0, 0, 2], probabilities, 1) == pytest.approx(1 / 3)
    assert top_k_accuracy([0, 0, 2], probabilities, 2) == pytest.approx(1 / 3)
    assert top_k_accuracy([0, 0, 2], probabilities, 3) == 1.0


@pytest.mark.parametrize(
    "accuracy, baseline, blessed, reason",
    [
        (0.90, None, True, "no baseline model: judged on the value threshold alone"),
        (0.70, None, False, "accuracy 0.7000 is below the minimum 0.7500"),
        (0.90, 0.92, False, "below the baseline's 0.9200 by more than the allowed 0.0000"),
        (0.92, 0.92, True, "is not worse than the baseline's 0.9200"),
        (0.70, 0.60, False, "accuracy 0.7000 is below the minimum 0.7500"),
    ],
)
def test_blessing_applies_value_and_change_thresholds(accuracy, baseline, blessed, reason):
    outcome = bless(accuracy, 0.75, baseline, 0.0)
    assert outcome["blessed"] is blessed
    assert any(reason in line for line in outcome["reasons"]), outcome["reasons"]


def test_a_tolerated_drop_against_the_baseline_still_blesses():
    assert bless(0.90, 0.75, 0.92, 0.05)["blessed"] is True
    assert bless(0.90, 0.75, 0.92, 0.01)["blessed"] is False


def test_blessing_against_a_baseline_is_recorded_in_metrics_json(converted, trained, tmp_path):
    examples_dir, _ = converted
    model_dir, _ = trained
    # the model against itself: not worse, so blessed
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path), baseline=model_dir))
    assert metrics["blessing"]["blessed"] is True
    assert metrics["blessing"]["baseline_accuracy"] == metrics["accuracy"]
    assert metrics["top_k_accuracy"]["k"] == 3 and metrics["top_k_accuracy"]["accuracy"] == 1.0
    # a minimum above what the model reaches: not blessed, and the reason says so
    above = min(1.0, metrics["accuracy"] + 0.01)
    strict = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "strict"), min_accuracy=above))
    assert strict["blessing"]["blessed"] is (metrics["accuracy"] >= above)
    assert strict["blessing"]["reasons"][0].startswith(f"accuracy {metrics['accuracy']:.4f}")
    with open(os.path.join(tmp_path, "metrics.json")) as handle:
        assert json.load(handle)["blessing"]["reasons"] == metrics["blessing"]["reasons"]


def test_an_exported_model_is_a_baseline_as_the_model_registry_holds_it(converted, trained, exported, tmp_path):
    """The last blessed model comes back from the registry as the export's saved_model/ folder: it is evaluated
    through its serving_images signature, with the class names from the export.json beside it."""
    examples_dir, _ = converted
    model_dir, _ = trained
    export_dir, report = exported
    for index, baseline in enumerate((export_dir, os.path.join(export_dir, "saved_model"))):
        metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / str(index)), baseline=baseline))
        blessing = metrics["blessing"]
        assert blessing["baseline"] == baseline
        # the same weights: the export agrees with the trained model on every test image
        assert report["parity"]["argmax_agreement"] == 1.0
        assert blessing["baseline_accuracy"] == pytest.approx(metrics["accuracy"]) and blessing["blessed"] is True


def test_a_baseline_with_other_classes_is_refused(converted, trained, exported, tmp_path):
    import shutil

    examples_dir, _ = converted
    model_dir, _ = trained
    export_dir, report = exported
    other = tmp_path / "other"
    shutil.copytree(export_dir, other)
    (other / "export.json").write_text(json.dumps({**report, "class_names": ["cat", "dog"]}))
    with pytest.raises(UsageError, match=f"baseline {other} predicts other classes \\(cat, dog\\)"):
        run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "out"), baseline=str(other)))


def test_a_baseline_that_does_not_exist_is_a_one_line_error(converted, trained, tmp_path):
    examples_dir, _ = converted
    model_dir, _ = trained
    with pytest.raises(UsageError, match=f"baseline {tmp_path}/nope does not exist: pass the last blessed model"):
        run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "out"), baseline=str(tmp_path / "nope")))
    with pytest.raises(UsageError, match=f"baseline {tmp_path} is not a trained or exported model"):
        run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "out"), baseline=str(tmp_path)))


def test_the_html_report_is_valid_and_its_pictures_decode(converted, trained, tmp_path):
    """What a person looks at: the verdict and reasons, curves, the confusion matrix picture, the per-class table
    and the misclassified images, all embedded (checked by parsing the HTML and decoding every picture)."""
    import base64
    import html
    import io
    from html.parser import HTMLParser

    from PIL import Image

    examples_dir, _ = converted
    model_dir, _ = trained
    # against a baseline, so that the report lists both reasons
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path), min_accuracy=1.0, baseline=model_dir))
    assert metrics["report_html"] == os.path.join(tmp_path, "report.html")

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.images, self.rows, self.svgs, self.open = [], 0, 0, []

        def handle_starttag(self, tag, attrs):
            if tag not in ("img", "br", "meta", "rect", "polyline"):
                self.open.append(tag)
            attrs = dict(attrs)
            if tag == "img":
                self.images.append(attrs["src"])
            self.rows += tag == "tr"
            self.svgs += tag == "svg"

        def handle_endtag(self, tag):
            if tag in ("rect", "polyline"):
                return
            assert self.open and self.open[-1] == tag, (tag, self.open[-3:])
            self.open.pop()

    with open(metrics["report_html"], encoding="utf-8") as handle:
        text = handle.read()
    parser = Collect()
    parser.feed(text)
    assert not parser.open  # every element closed, in order
    assert parser.rows == 1 + len(CLASSES)  # header + one per class
    assert parser.svgs == 2  # loss and accuracy curves
    assert ("Not blessed" in text) is (not metrics["blessing"]["blessed"])
    for reason in metrics["blessing"]["reasons"]:
        assert html.escape(reason) in text
    wrong = sum(sum(row) - row[i] for i, row in enumerate(metrics["confusion_matrix"]))
    assert len(parser.images) == 1 + min(wrong, 24)  # the confusion matrix + the misclassified grid
    for source in parser.images:
        header, payload = source.split(",", 1)
        assert header in ("data:image/png;base64", "data:image/jpeg;base64")
        picture = Image.open(io.BytesIO(base64.b64decode(payload)))
        picture.load()
        assert picture.size[0] > 0
    offline = text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://" not in offline and "https://" not in offline  # self-contained: nothing fetched
