"""The evaluate step: the metrics arithmetic without I/O, then a real evaluation of the trained model."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os

import pytest

from components.artifacts.evaluation import Evaluation
from components.artifacts.records import METRICS
from components.cli import UsageError
from components.evaluate.baseline import Baseline, comparability
from components.evaluate.blessing import bless
from components.evaluate.core import EvaluateConfig, run
from components.evaluate.metrics import classification_metrics, ranking_metrics, top_k_accuracy
from tests.conftest import CLASSES, TINY_SIZE, made_up_evaluation, made_up_export


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
        assert json.load(handle) == {"format_version": METRICS.version, **metrics}
    # every figure is scikit-learn's on the model's answers, gathered here from the test split's records
    import keras
    import numpy as np
    import tensorflow as tf
    from sklearn import metrics as sk

    from components.artifacts.examples import decode_image
    from components.schema import parse_example, split_files

    model = keras.models.load_model(os.path.join(model_dir, "model.keras"), compile=False)
    truth, probabilities = [], []

    def pixels_and_truth(serialized):
        example = parse_example(serialized, len(CLASSES))
        return decode_image(example["image"], TINY_SIZE), example["one_hot_class"]

    for images, one_hot in tf.data.TFRecordDataset(split_files(examples_dir, "test")).map(pixels_and_truth).batch(64):
        probabilities.append(model(images, training=False).numpy())
        truth.append(one_hot.numpy().argmax(axis=-1))
    truth, probabilities = np.concatenate(truth), np.concatenate(probabilities).astype(np.float64)
    predicted, labels = probabilities.argmax(axis=-1), list(range(len(CLASSES)))
    assert metrics["accuracy"] == pytest.approx(sk.accuracy_score(truth, predicted))
    assert metrics["confusion_matrix"] == sk.confusion_matrix(truth, predicted, labels=labels).tolist()
    precision, recall, f1, support = sk.precision_recall_fscore_support(
        truth, predicted, labels=labels, zero_division=0
    )
    for i, name in enumerate(CLASSES):
        assert metrics["per_class"][name] == pytest.approx(
            {"precision": precision[i], "recall": recall[i], "f1": f1[i], "support": support[i]}
        )
        one_vs_rest = metrics["ranking"]["per_class"][name]
        assert one_vs_rest["au_roc"] == pytest.approx(sk.roc_auc_score(truth == i, probabilities[:, i]))
        assert one_vs_rest["au_prc"] == pytest.approx(sk.average_precision_score(truth == i, probabilities[:, i]))
    rows = probabilities / probabilities.sum(axis=-1, keepdims=True)
    assert metrics["ranking"]["log_loss"] == pytest.approx(sk.log_loss(truth, y_proba=rows, labels=labels))
    micro = np.eye(len(CLASSES), dtype=bool)[truth].ravel(), probabilities.ravel()
    assert metrics["ranking"]["au_prc"] == pytest.approx(sk.average_precision_score(*micro))
    assert metrics["ranking"]["au_roc"] == pytest.approx(sk.roc_auc_score(*micro))
    assert metrics["top_k_accuracy"] == {"k": 3, "accuracy": 1.0}  # three classes: every one is among the top 3


def test_the_kfp_step_logs_the_confusion_matrix_and_the_roc_curve(converted, trained, tmp_path):
    """The evaluate step as the DAG runs it: KFP's ClassificationMetrics gets the confusion matrix and the ROC curve
    (every class one-vs-rest, at Vertex AI's confidence thresholds), which the Vertex AI console draws."""
    from kfp.dsl import HTML, Artifact, ClassificationMetrics, Metrics

    from components.evaluate.component import evaluate

    examples_dir, stats = converted
    model_dir, _ = trained
    from google_cloud_pipeline_components.types.artifact_types import ClassificationMetrics as VertexMetrics

    kinds = {
        "metrics": Metrics,
        "confusion": ClassificationMetrics,
        "evaluation": Artifact,
        "report": HTML,
        "vertex_evaluation": VertexMetrics,
    }
    outputs = {name: kind(name=name, uri=str(tmp_path / name)) for name, kind in kinds.items()}
    examples, model = Artifact(uri=examples_dir), Artifact(uri=model_dir)
    from components.check_data.core import CheckDataConfig
    from components.check_data.core import run as check_data

    check_data(CheckDataConfig(examples_dir=examples_dir, output_dir=str(tmp_path / "checks")))  # (no baseline)
    checks = Artifact(uri=str(tmp_path / "checks"))
    blessed = evaluate(
        examples,
        model,
        **outputs,
        test_accuracy=str(tmp_path / "accuracy"),
        min_accuracy=0.5,
        max_accuracy_drop=0.0,
        baseline="",
        data_checks=checks,
    )
    assert blessed is True
    assert "<h2>Data checks</h2>" in (tmp_path / "report").read_text()  # the report the console shows
    logged = outputs["confusion"].metadata
    assert [spec["displayName"] for spec in logged["confusionMatrix"]["annotationSpecs"]] == list(CLASSES)
    rows = [row["row"] for row in logged["confusionMatrix"]["rows"]]
    assert sum(map(sum, rows)) == stats["counts"]["test"]
    curve = logged["confidenceMetrics"]
    assert [point["confidenceThreshold"] for point in curve] == [round(0.05 * step, 2) for step in range(21)]
    # at threshold 0 every (example, class) answer is a yes; raising the threshold only takes yeses away
    assert (curve[0]["recall"], curve[0]["falsePositiveRate"]) == (1.0, 1.0)
    for lower, higher in itertools.pairwise(curve):
        assert higher["recall"] <= lower["recall"] and higher["falsePositiveRate"] <= lower["falsePositiveRate"]
    assert outputs["metrics"].metadata["accuracy"] == float((tmp_path / "accuracy").read_text())
    # the figures as GCPC's evaluation import reads them: the whole split, then a slice per class, in class order
    sliced = json.loads((tmp_path / "vertex_evaluation").read_text())["slicedMetrics"]
    assert [one["singleOutputSlicingSpec"].get("value") for one in sliced] == [None, *CLASSES]
    whole = sliced[0]["metrics"]["classification"]
    assert whole["confusionMatrix"]["rows"] == rows
    assert outputs["vertex_evaluation"].metadata["auRoc"] == whole["auRoc"]
    assert outputs["vertex_evaluation"].metadata["accuracy"] == outputs["metrics"].metadata["accuracy"]


def test_ranking_metrics_from_known_probabilities():
    """Worked by hand: all six (example, class) answers ranked by score are 0.8 yes, 0.7 no, 0.6 yes, 0.4 no,
    0.3 yes, 0.2 no."""
    figures = ranking_metrics([0, 1, 1], [[0.8, 0.2], [0.4, 0.6], [0.7, 0.3]], ["a", "b"])
    assert figures["au_prc"] == pytest.approx((1 / 1 + 2 / 3 + 3 / 5) / 3)  # precision at each yes, averaged
    assert figures["au_roc"] == pytest.approx(6 / 9)  # yes above no in 6 of the 9 pairs
    assert figures["log_loss"] == pytest.approx(-(math.log(0.8) + math.log(0.6) + math.log(0.3)) / 3)
    at = {row["threshold"]: row for row in figures["thresholds"]}
    assert (at[0.5]["tp"], at[0.5]["fp"], at[0.5]["fn"], at[0.5]["tn"]) == (2, 1, 1, 2)
    assert at[0.0]["precision"] == 0.5 and at[0.0]["recall"] == 1.0  # every answer a yes
    assert at[0.0]["precision_at_1"] == pytest.approx(2 / 3) and at[0.0]["recall_at_1"] == pytest.approx(2 / 3)
    assert at[0.5]["fpr"] == pytest.approx(1 / 3)
    # F1 at 0.5: precision 2/3, recall 2/3; at 0: 2 x 0.5 x 1 / 1.5
    assert at[0.5]["f1"] == pytest.approx(2 / 3) and at[0.0]["f1"] == pytest.approx(2 / 3)
    assert at[0.7]["f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))  # 0.8 yes, 0.7 no: 1 of 2, 1 of 3
    # a score exactly at a threshold counts: at 0.8 the top answer 0.8 is a yes, 1 of the 3
    assert at[0.8]["recall_at_1"] == pytest.approx(1 / 3) and at[0.8]["precision_at_1"] == 1.0
    # each class on its own ranks its own examples perfectly here
    assert figures["per_class"]["a"]["au_roc"] == 1.0 and figures["per_class"]["b"]["au_prc"] == 1.0


def test_ranking_metrics_count_ties_half_and_never_divide_by_zero():
    figures = ranking_metrics([0, 1, 0, 1], [[0.5, 0.5]] * 4, ["a", "b"])
    assert figures["au_roc"] == 0.5 and figures["au_prc"] == 0.5
    absent = ranking_metrics([0, 0], [[0.9, 0.1], [0.6, 0.4]], ["a", "b"])["per_class"]["b"]
    assert absent["au_prc"] == 0.0 and absent["au_roc"] == 0.0 and absent["thresholds"][0]["recall"] == 0.0


def test_no_examples_give_zero_figures_not_errors():
    """Written out by hand: every figure of an empty split is 0, every class has no support."""
    import numpy as np

    zero = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert classification_metrics([], [], ["a", "b"]) == {
        "accuracy": 0.0,
        "num_examples": 0,
        "class_names": ["a", "b"],
        "per_class": {"a": zero, "b": zero},
        "confusion_matrix": [[0, 0], [0, 0]],
    }
    figures = ranking_metrics([], np.zeros((0, 2)), ["a", "b"])
    assert (figures["log_loss"], figures["au_prc"], figures["au_roc"]) == (0.0, 0.0, 0.0)


def test_top_k_accuracy_counts_the_true_class_among_the_k_most_probable():
    probabilities = [[0.5, 0.3, 0.2], [0.1, 0.2, 0.7], [0.6, 0.3, 0.1]]
    assert top_k_accuracy([0, 0, 2], probabilities, 1) == pytest.approx(1 / 3)
    assert top_k_accuracy([0, 0, 2], probabilities, 2) == pytest.approx(1 / 3)
    assert top_k_accuracy([0, 0, 2], probabilities, 3) == 1.0


def test_top_k_accuracy_of_two_classes_and_of_no_examples():
    # by hand: the first two examples' true class is the more probable one, the third's is not
    assert top_k_accuracy([0, 1, 1], [[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], 1) == pytest.approx(2 / 3)
    assert top_k_accuracy([], [], 1) == 0.0  # nothing predicted right, as the accuracy of no examples is


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_top_k_accuracy_agrees_with_scikit_learn(k):
    import numpy as np
    from sklearn.metrics import top_k_accuracy_score

    rng = np.random.default_rng(k)
    probabilities = rng.dirichlet(np.ones(10), size=200)
    y_true = rng.integers(0, 10, size=200)
    expected = top_k_accuracy_score(y_true, probabilities, k=k, labels=range(10))
    assert top_k_accuracy(y_true.tolist(), probabilities.tolist(), k) == pytest.approx(expected)


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


@pytest.mark.parametrize(
    "accuracy, baseline, max_drop, blessed",
    [
        (0.75, None, 0.0, True),  # exactly the minimum meets it
        (0.7499, None, 0.0, False),  # just below it does not
        (0.90, 0.95, 0.05, True),  # exactly the allowed drop below the baseline
        (0.8999, 0.95, 0.05, False),  # just past it
        (0.80, 0.80, 0.0, True),  # level with the baseline, no drop allowed
        (0.7999, 0.80, 0.0, False),
        (0.80 - 1e-12, 0.80, 0.0, True),  # a rounding error below the baseline is level with it
        (0.80 - 1e-11, 0.80, 0.0, False),
    ],
)
def test_the_blessing_thresholds_hold_at_their_boundaries(accuracy, baseline, max_drop, blessed):
    """Hand-written numbers at each threshold's edge, both ways (minimum 0.75): a model exactly at a threshold is
    blessed, one a hair under it is not."""
    assert bless(accuracy, 0.75, baseline, max_drop)["blessed"] is blessed


def test_the_reasons_against_a_baseline_say_the_drop_allowed_only_when_there_is_one():
    assert bless(0.90, 0.75, 0.92, 0.05)["reasons"][1] == (
        "accuracy 0.9000 is not worse than the baseline's 0.9200 by more than 0.0500"
    )
    assert bless(0.93, 0.75, 0.92, 0.0)["reasons"][1] == "accuracy 0.9300 is not worse than the baseline's 0.9200"
    assert bless(0.80, 0.75, 0.92, 0.05)["reasons"][0] == (
        "accuracy 0.8000 is below the baseline's 0.9200 by more than the allowed 0.0500"
    )


@pytest.mark.parametrize("value, refused", [(0.0, False), (1.0, False), (1.0001, True), (-0.0001, True)])
def test_a_blessing_threshold_is_a_fraction_from_0_to_1(value, refused, tmp_path):
    if not refused:
        EvaluateConfig("e", "m", str(tmp_path), min_accuracy=value, max_accuracy_drop=value)
        return
    with pytest.raises(UsageError) as raised:
        EvaluateConfig("e", "m", str(tmp_path), max_accuracy_drop=value)
    assert str(raised.value) == f"--max-accuracy-drop {value} is out of range: use a fraction in [0, 1]"


def test_a_model_that_did_not_learn_is_never_blessed_and_that_reason_comes_first():
    outcome = bless(0.95, 0.75, None, 0.0, not_learning="the loss stayed at chance (2.303)")
    assert outcome == {
        "blessed": False,
        "reasons": [
            "training did not learn: the loss stayed at chance (2.303)",
            "accuracy 0.9500 meets the minimum 0.7500",
            "no baseline model: judged on the value threshold alone",
        ],
        "thresholds": {"min_accuracy": 0.75, "max_accuracy_drop": 0.0, "chance_bar": None},
        "baseline_accuracy": None,
        "baseline_comparable": True,
    }


def supports(**counts) -> dict:
    """per_class figures with these test counts, every class recalled."""
    return {name: {"precision": 1.0, "recall": 0.5, "f1": 0.6, "support": count} for name, count in counts.items()}


def test_by_default_a_model_must_beat_always_answering_the_most_common_class_beyond_chance():
    """No --min-accuracy: the bar is the most common class's share plus what chance gives at 99%. By hand, for 60
    of 100 test examples in one class: 0.6 + 2.326 * sqrt(0.6 * 0.4 / 100) + 0.5 / 100 = 0.71895."""
    per_class = supports(a=60, b=40)
    below = bless(0.71, 0.0, None, 0.0, per_class=per_class)
    assert below["blessed"] is False and below["thresholds"]["chance_bar"] == pytest.approx(0.71895, abs=1e-5)
    assert below["reasons"][0] == (
        "accuracy 0.7100 does not beat always answering a (0.6000 of the 100 test examples) by more than chance: it "
        "needs 0.7190 (--min-accuracy sets a bar of your own)"
    )
    above = bless(0.72, 0.0, None, 0.0, per_class=per_class)
    assert above["blessed"] is True
    assert above["reasons"][0] == (
        "accuracy 0.7200 beats always answering a (0.6000 of the 100 test examples) beyond chance (it needed 0.7190)"
    )
    # ten even classes: a weak but real model passes where a fixed 0.75 refused it
    assert bless(0.34, 0.0, None, 0.0, per_class=supports(**{f"c{n}": 40 for n in range(10)}))["blessed"] is True
    # an explicit minimum is the bar instead
    assert (
        bless(0.72, 0.8, None, 0.0, per_class=per_class)["reasons"][0] == "accuracy 0.7200 is below the minimum 0.8000"
    )
    few = bless(1.0, 0.0, None, 0.0, per_class=supports(a=3, b=2))
    assert few["blessed"] is False and few["reasons"][0] == (
        "5 test examples are too few to show that a model beats always answering a (0.6000 of the 5 test examples): "
        "add data (--min-accuracy sets a bar of your own)"
    )


@pytest.mark.parametrize("count, share", [(40, 0.5), (100, 0.6), (400, 0.1), (2000, 0.3)])
def test_a_model_no_better_than_the_most_common_class_is_blessed_at_most_once_in_a_hundred(count, share):
    """20,000 test splits drawn for a model right as often as always answering the most common class: the share of
    them that bless it stays within 1%, the bar's promise, at every size."""
    import numpy as np

    majority = round(count * share)
    per_class = supports(a=majority, b=count - majority)
    right = np.random.default_rng(count).binomial(count, majority / count, size=20_000)
    values, times = np.unique(right, return_counts=True)
    blessed = sum(
        int(n)
        for r, n in zip(values, times, strict=True)
        if bless(r / count, 0.0, None, 0.0, per_class=per_class)["blessed"]
    )
    assert blessed / right.size <= 0.01


def test_the_reasons_that_decided_against_a_model_come_first():
    outcome = bless(0.95, 0.0, 0.90, 0.0, per_class={**supports(a=50, b=30), "c": {"recall": 0.0, "support": 20}})
    assert outcome["blessed"] is False
    assert outcome["reasons"][0] == "class c: recall 0 (none of its 20 test examples predicted right)"
    assert outcome["reasons"][1].startswith("accuracy 0.9500 beats always answering a")


def test_an_image_baseline_is_compared_only_on_the_same_classes_and_size():
    """Hand-written cases of the rule: the same classes in any order and the same size compare; each other case
    says what differs."""

    def model(classes, size, **more) -> dict:
        return {"modality": "image", "class_names": classes, "image_size": size, **more}

    baseline = Baseline("export", "/m", model(["cat", "dog"], 32))
    assert comparability(baseline, model(["dog", "cat"], 32)) == ""
    assert comparability(baseline, model(["cat", "dog"], 48)) == "image size differs (baseline 32 px, candidate 48 px)"
    assert comparability(baseline, model(["cat", "dog", "fox"], 32)) == "classes differ (new fox)"
    assert comparability(baseline, model(["cat"], 32)) == "classes differ (gone dog)"
    assert comparability(baseline, model(["fox", "cat", "emu"], 48)) == "classes differ (new fox, emu; gone dog)"
    text = Baseline("export", "/t", {"modality": "text", "class_names": ["cat", "dog"], "sequence_length": 250})
    assert (
        comparability(text, model(["cat", "dog"], 32)) == "the baseline is a text model, the candidate an image model"
    )
    # an image model reads no ids: a vocabulary means nothing to it
    trained = Baseline("trained", "/m", model(["cat", "dog"], 32, vocabulary_sha256="a"))
    assert comparability(trained, model(["cat", "dog"], 32, vocabulary_sha256="b")) == ""


def test_a_tolerated_drop_against_the_baseline_still_blesses():
    assert bless(0.90, 0.75, 0.92, 0.05)["blessed"] is True
    assert bless(0.90, 0.75, 0.92, 0.01)["blessed"] is False


def always_predicting(model_dir: str, class_index: int, output: str) -> str:
    """A copy of the trained model whose softmax layer answers ``class_index`` for every input (its kernel zero, its
    bias one-hot): a baseline whose accuracy is that class's share of the test split, known without running it."""
    import shutil

    import keras
    import numpy as np

    shutil.copytree(model_dir, output)
    model = keras.models.load_model(os.path.join(output, "model.keras"), compile=False)
    kernel, bias = model.layers[-1].get_weights()
    model.layers[-1].set_weights([np.zeros_like(kernel), np.eye(len(bias), dtype=bias.dtype)[class_index] * 10])
    model.save(os.path.join(output, "model.keras"))
    return output


def test_blessing_against_a_baseline_is_recorded_in_metrics_json(converted, trained, tmp_path):
    examples_dir, stats = converted
    model_dir, _ = trained
    baseline = always_predicting(model_dir, 1, str(tmp_path / "baseline"))
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "evaluation"), baseline=baseline))
    share = stats["per_class"]["test"][CLASSES[1]] / stats["counts"]["test"]
    assert metrics["blessing"]["baseline_accuracy"] == pytest.approx(share)
    assert metrics["accuracy"] > share and metrics["blessing"]["blessed"] is True
    # the other way round: the trained model is the baseline, the one-class model is refused for the drop
    worse = run(EvaluateConfig(examples_dir, baseline, str(tmp_path / "worse"), baseline=model_dir, min_accuracy=0))
    assert worse["accuracy"] == pytest.approx(share) and worse["blessing"]["blessed"] is False
    assert any("below the baseline's" in reason for reason in worse["blessing"]["reasons"]), worse["blessing"]
    # the one-class model against a minimum just above its known accuracy: not blessed, and the reason says so
    strict = run(EvaluateConfig(examples_dir, baseline, str(tmp_path / "strict"), min_accuracy=round(share + 0.01, 4)))
    assert strict["blessing"]["blessed"] is False
    assert strict["blessing"]["reasons"][0] == f"accuracy {share:.4f} is below the minimum {share + 0.01:.4f}"
    with open(os.path.join(tmp_path, "evaluation", "metrics.json")) as handle:
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


def test_a_baseline_with_other_classes_is_not_comparable_and_the_value_threshold_decides(
    converted, trained, exported, tmp_path
):
    """The documented rule for a class change (a scheduled retraining after a class was added or renamed): the
    baseline is not compared, the value threshold decides, and the reason says so; the run is not refused."""
    import shutil

    examples_dir, _ = converted
    model_dir, _ = trained
    export_dir, report = exported
    other = tmp_path / "other"
    shutil.copytree(export_dir, other)
    dataclasses.replace(report, class_names=["cat", "dog", "bird"]).write(str(other))
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "out"), min_accuracy=0.5, baseline=str(other)))
    blessing = metrics["blessing"]
    assert blessing["blessed"] is True and blessing["baseline_comparable"] is False
    assert blessing["baseline_accuracy"] is None
    assert blessing["reasons"][1] == (
        "baseline not comparable: classes differ (new fish; gone bird): judged on the value threshold alone"
    )
    failing = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "o2"), min_accuracy=1.0, baseline=str(other)))
    assert failing["blessing"]["blessed"] is (failing["accuracy"] >= 1.0)


def test_a_baseline_with_the_same_classes_in_another_order_is_compared_class_by_class(converted, trained, tmp_path):
    """The same trained network with its output columns (and class list) permuted is the same model: after
    reordering its answers, its accuracy equals the candidate's."""
    import shutil

    import keras

    from components.artifacts.model import MODEL_FILE
    from components.artifacts.records import MODEL_CONFIG

    examples_dir, _ = converted
    model_dir, _ = trained
    permuted = tmp_path / "permuted"
    shutil.copytree(model_dir, permuted)
    order = [2, 0, 1]  # new column j holds old class order[j]
    model = keras.models.load_model(os.path.join(model_dir, MODEL_FILE), compile=False)
    kernel, bias = model.layers[-1].get_weights()
    model.layers[-1].set_weights([kernel[:, order], bias[order]])
    model.save(permuted / MODEL_FILE)
    config = json.loads((permuted / MODEL_CONFIG.name).read_text())
    config["class_names"] = [config["class_names"][i] for i in order]
    (permuted / MODEL_CONFIG.name).write_text(json.dumps(config))
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "out"), baseline=str(permuted)))
    blessing = metrics["blessing"]
    assert blessing["baseline_comparable"] is True
    assert blessing["baseline_accuracy"] == pytest.approx(metrics["accuracy"])


@pytest.mark.parametrize("change", ["reordered", "renamed", "resized"])
def test_examples_that_do_not_match_the_model_are_refused_naming_both(converted, trained, tmp_path, change):
    """A reordered class list would silently mean other classes: evaluate and export refuse examples whose classes
    (names and order) or image size are not the model's, in one line naming both sides."""
    import shutil

    from components.export.core import ExportConfig
    from components.export.core import run as export

    examples_dir, stats = converted
    model_dir, _ = trained
    other = tmp_path / "examples"
    shutil.copytree(examples_dir, other)
    edited = json.loads((other / "stats.json").read_text())
    if change == "reordered":
        edited["class_names"] = list(reversed(stats["class_names"]))
        expected = "fish, dog, cat, but model .* was trained on cat, dog, fish in another order"
    elif change == "renamed":
        edited["class_names"] = ["cat", "dog", "bird"]
        expected = "cat, dog, bird, but model .* was trained on cat, dog, fish \\(class ids"
    else:
        edited["image_size"] = stats["image_size"] * 2
        expected = f"hold {stats['image_size'] * 2}-pixel images, but model .* on {stats['image_size']}-pixel ones"
    (other / "stats.json").write_text(json.dumps(edited))
    with pytest.raises(UsageError, match=f"examples {other} .*{expected}"):
        run(EvaluateConfig(str(other), model_dir, str(tmp_path / "out")))
    with pytest.raises(UsageError, match=f"examples {other} .*{expected}"):
        export(ExportConfig(model_dir=model_dir, examples_dir=str(other), output_dir=str(tmp_path / "export")))
    assert not (tmp_path / "out").exists() and not (tmp_path / "export").exists()


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
    # the run's facts (model, data, epochs, precision, hardware, backend, batch, time), the scores (header, accuracy,
    # accuracy on the files as clients send them, top-k), the per-class table (header + one per class), then the
    # data checks' (header + the prediction mix's row: skipped, as a train output keeps no evaluation)
    assert parser.rows == 8 + 4 + 1 + len(CLASSES) + 2
    _, stats = converted
    counts = stats["counts"]
    with open(os.path.join(model_dir, "history.json")) as handle:
        history = json.load(handle)
    facts = text[: text.index('<p class="verdict">')]
    assert f"{counts['train']} train, {counts['validation']} validation, {counts['test']} test images" in facts
    assert f"<td>epochs</td><td>{history['epochs']}</td>" in facts
    assert f"<td>training time</td><td>{history['train_seconds']:.1f} s</td>" in facts
    assert "<td>hardware</td><td>cpu, 1 device(s), 1 process(es)</td>" in facts
    # the baseline (the model itself here) beside the candidate: the same figures in both columns
    assert "<th class=base>baseline</th>" in text and "<th class=base>baseline recall</th>" in text
    assert metrics["baseline_metrics"]["per_class"] == metrics["per_class"]
    assert text.count(f"{metrics['accuracy']:.4f}") >= 2
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


def test_a_class_never_predicted_right_or_never_tested_is_not_blessed():
    """The blessing's per-class rule: accuracy alone would bless a model that never predicts a rare class."""
    fine = {"precision": 1.0, "recall": 1.0, "support": 9}
    blessing = bless(0.95, 0.75, None, 0.0, per_class={"cat": fine, "dog": {**fine, "recall": 0.0, "support": 1}})
    assert blessing["blessed"] is False
    assert blessing["reasons"][0] == "class dog: recall 0 (none of its 1 test examples predicted right)"
    blessing = bless(0.95, 0.75, None, 0.0, per_class={"cat": fine, "fish": {**fine, "recall": 0.0, "support": 0}})
    assert blessing["blessed"] is False and blessing["reasons"][0].startswith("class fish has no test example")
    assert bless(0.95, 0.75, None, 0.0, per_class={"cat": fine, "dog": fine})["blessed"] is True


def test_the_report_lists_the_classes_with_few_examples(converted, trained, tmp_path):
    examples_dir, stats = converted
    model_dir, _ = trained
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path)))
    assert metrics["small_classes"] == stats["small_classes"] != {}
    with open(metrics["report_html"]) as handle:
        page = handle.read()
    split, names = next(iter(stats["small_classes"].items()))
    name, count = next(iter(names.items()))
    assert "Classes with few examples" in page and f"{split}: " in page and f"{name} ({count})" in page


def test_the_report_shows_the_data_checks_of_the_run(converted, trained, tmp_path):
    from components.check_data.core import CheckDataConfig
    from components.check_data.core import run as check_data

    examples_dir, _ = converted
    model_dir, _ = trained
    checked = check_data(
        CheckDataConfig(examples_dir=examples_dir, output_dir=str(tmp_path / "checks"), baseline=examples_dir)
    )
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "eval"), data_checks=str(tmp_path / "checks")))
    assert metrics["data_checks"]["checks"] == checked["checks"] and metrics["data_checks"]["warnings"] == []
    with open(metrics["report_html"]) as handle:
        page = handle.read()
    section = page[page.index("<h2>Data checks</h2>") : page.index("<h2>Training curves</h2>")]
    assert section.count("<tr><td>") == len(checked["checks"])
    assert "<tr><td>class mix</td><td>train</td><td>0</td><td>warn 0.1, block 0.3</td>" in section
    with pytest.raises(UsageError, match=r"data checks .* has no data_checks.json: pass the check-data step"):
        run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "again"), data_checks=str(tmp_path)))


def test_the_confusion_matrix_writes_whole_class_names_over_its_columns():
    """Column labels used to be cut to 4 characters ("sunf", "dand"): they are written upwards, whole."""
    import io

    import numpy as np
    from PIL import Image

    from components.evaluate.report import confusion_png

    def header_ink_rows(names) -> int:
        pixels = np.asarray(Image.open(io.BytesIO(confusion_png([[3, 1], [0, 4]], names))).convert("L"))
        margin = 12 + 7 * max(len(name) for name in names)
        column = pixels[:margin, margin : margin + 36]  # above the first column
        return int((column < 128).any(axis=1).sum())

    assert header_ink_rows(["sunflowers", "daisy"]) > 2 * header_ink_rows(["sunf", "daisy"]) > 0


def test_every_confusion_matrix_count_is_readable_on_its_cell():
    """Counts used to be black on every fill, 3:1 on the darkest blue: each count's colour now contrasts at least
    4.5:1 (WCAG AA) with its cell, measured on the drawn picture, at every shade from empty to full."""
    import io

    import numpy as np
    from PIL import Image

    from components.evaluate.report import confusion_png, contrast

    matrix = [[10, 0, 0, 0, 0], [6, 4, 0, 0, 0], [3, 3, 4, 0, 0], [1, 1, 1, 7, 0], [0, 0, 0, 1, 9]]
    names = ["a", "b", "c", "d", "e"]
    pixels = np.asarray(Image.open(io.BytesIO(confusion_png(matrix, names))).convert("RGB")).astype(int)
    margin, cell = 12 + 7, 36
    for row in range(len(names)):
        for column in range(len(names)):
            box = pixels[
                margin + row * cell + 3 : margin + (row + 1) * cell - 2,
                margin + column * cell + 3 : margin + (column + 1) * cell - 2,
            ]
            colours, counts = np.unique(box.reshape(-1, 3), axis=0, return_counts=True)
            fill = colours[counts.argmax()]
            best = max(contrast(fill, colour) for colour in colours)  # the glyphs' core, not their antialiasing
            assert best >= 4.5, (row, column, fill.tolist(), best)


def test_misclassified_images_name_the_file_they_came_from(converted, image_folder):
    """A model that always answers the first class gets every other test image wrong: each one is listed with the
    file it was converted from, which exists under its true class's folder."""
    import tensorflow as tf

    from components.evaluate.predictions import predict_split
    from components.modalities import reading_of

    examples_dir, stats = converted

    def always_first(images, training):
        return tf.one_hot(tf.zeros(tf.shape(images)[0], tf.int32), len(CLASSES))

    y_true, _, wrong = predict_split(always_first, examples_dir, "test", reading_of(stats), 100)
    assert len(wrong) == int((y_true != 0).sum()) > 0
    for _, truth, predicted, _, source in wrong:
        assert predicted == 0 and os.path.isfile(source) and source.startswith(image_folder)
        assert os.path.basename(os.path.dirname(source)) == CLASSES[truth]


def test_a_baseline_an_older_version_made_is_not_compared_and_the_value_threshold_decides(tmp_path, caplog):
    """A baseline whose ``model_config.json`` or ``export.json`` an older version of the pipeline wrote (no
    ``format_version``: before the formats were versioned), or one of this format without its record's facts, is
    found with a warning and not compared; one of this version's format, the same classes and input, is."""
    import logging

    from components.artifacts.records import EXPORT, MODEL_CONFIG
    from components.evaluate.baseline import check_baseline, comparability
    from components.evaluate.blessing import bless

    facts = {"modality": "image", "class_names": ["a", "b"], "image_size": 4, "num_classes": 2}
    trained, exported = tmp_path / "trained", tmp_path / "export"
    (exported / "saved_model").mkdir(parents=True)
    trained.mkdir()
    (exported / "saved_model" / "saved_model.pb").write_bytes(b"")
    (trained / MODEL_CONFIG.name).write_text(json.dumps(facts))
    (exported / EXPORT.name).write_text(json.dumps({**facts, "format_version": 0}))
    for folder, record in ((trained, MODEL_CONFIG), (exported, EXPORT)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            found = check_baseline(str(folder))
        reason = comparability(found, facts)
        assert f"older version of this pipeline ({record.name} format 0, this one reads" in reason
        assert f"baseline {folder} was made by an older version" in caplog.text and "not compared" in caplog.text
        blessing = bless(0.9, 0.5, None, 0.0, reason)
        assert blessing["blessed"] and "judged on the value threshold alone" in blessing["reasons"][-1]
    # of this version's format without the facts its record must have: left aside the same way, naming them
    (trained / MODEL_CONFIG.name).write_text(json.dumps({**facts, "format_version": MODEL_CONFIG.version}))
    reason = comparability(check_baseline(str(trained)), facts)
    assert reason.startswith("it was made by a version of this pipeline that did not record model_name, model, ")
    # with them, the same classes and input: compared
    (exported / EXPORT.name).write_text(json.dumps(made_up_export(exported, "e" * 64, image_size=4)))
    assert comparability(check_baseline(str(exported)), facts) == ""


# a kept evaluation of a 3-class model on 30 test examples: rows true, columns its answers (a 8, b 12, c 10)
KEPT = Evaluation.from_dict(
    made_up_evaluation(class_names=["a", "b", "c"], confusion_matrix=[[8, 2, 0], [0, 10, 0], [0, 0, 10]]), "kept"
)


def test_the_prediction_mix_compares_the_model_in_services_answers_with_its_own_evaluations():
    from components.evaluate.blessing import prediction_mix

    def mix(answered, kept=KEPT, least=20):
        return prediction_mix(answered, kept, "test", 0.1, least)

    same = mix({"a": 8, "b": 12, "c": 10})
    assert (same["verdict"], same["value"], same["severity"]) == ("pass", 0.0, "warn")
    assert mix({"a": 5, "b": 15, "c": 10})["verdict"] == "pass"  # a: 8 of 30 -> 5 of 30, 10 points: at the threshold
    moved = mix({"a": 4, "b": 16, "c": 10})  # 8 of 30 -> 4 of 30: 13.3 points
    assert moved == {
        "check": "prediction mix",
        "verdict": "warn",
        "severity": "warn",
        "value": 0.1333,
        "thresholds": {"warn": 0.1},
        "split": "test",
        "detail": "class a 26.7% -> 13.3% of its answers (its test split of 30, this test split of 30)",
    }
    # shares, not counts: twice the answers in the same mix pass; the kept classes in another order are the same
    assert mix({"a": 16, "b": 24, "c": 20})["value"] == 0.0
    reordered = dataclasses.replace(
        KEPT, class_names=["c", "a", "b"], confusion_matrix=[[10, 0, 0], [0, 8, 2], [0, 0, 10]]
    )
    assert mix({"a": 4, "b": 16, "c": 10}, kept=reordered)["value"] == 0.1333
    assert mix({"a": 7, "b": 11, "c": 12})["detail"].startswith("class c 33.3% -> 40.0%")  # c: 10 -> 12 of 30
    for skipped, why in [
        (mix({"a": 8, "b": 12, "c": 10}, kept=None), "keeps no evaluation of its own"),
        (mix({"a": 8, "b": 12, "d": 10}), "evaluation was of other classes"),
        (mix({"a": 4, "b": 6, "c": 5}), "15 answers on one side, under min_split_examples 20"),
        (mix({"a": 8, "b": 12, "c": 10}, least=31), "30 answers on one side, under min_split_examples 31"),
    ]:
        assert skipped["verdict"] == "skipped" and skipped["value"] is None and why in skipped["detail"]


def test_a_registered_baselines_prediction_mix_is_checked_warned_and_shown(converted, trained, exported, tmp_path):
    import shutil

    from components.check_data.core import CheckDataConfig
    from components.check_data.core import run as check_data

    examples_dir, _ = converted
    model_dir, _ = trained
    export_dir, _ = exported

    def evaluate(name: str, baseline, **thresholds) -> dict:  # with the run's data checks set so
        checks = str(tmp_path / f"checks-{name}")
        check_data(
            CheckDataConfig(examples_dir=examples_dir, output_dir=checks, baseline=examples_dir, thresholds=thresholds)
        )
        return run(
            EvaluateConfig(examples_dir, model_dir, str(tmp_path / name), baseline=str(baseline), data_checks=checks)
        )

    own = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "own")))
    total = own["num_examples"]  # (the tiny test split: 14)
    version = tmp_path / "registry" / "1"  # a version as the register step keeps it: the export and its evaluation
    shutil.copytree(export_dir, version)
    shutil.copy(tmp_path / "own" / "metrics.json", version / "metrics.json")
    # the same weights on the same split give the same answers: no distance, whether the baseline is named by its
    # folder (a folder registry) or by its saved_model/ (the Vertex AI Model Registry)
    for index, baseline in enumerate((version, version / "saved_model")):
        metrics = evaluate(f"same{index}", baseline, min_split_examples=total)
        assert (metrics["prediction_mix"]["verdict"], metrics["prediction_mix"]["value"]) == ("pass", 0.0)
    few = run(EvaluateConfig(examples_dir, model_dir, str(tmp_path / "few"), baseline=str(version)))  # at 20
    assert few["prediction_mix"]["verdict"] == "skipped"
    assert f"{total} answers on one side, under min_split_examples 20" in few["prediction_mix"]["detail"]
    # had it answered its first class to every example of its own evaluation, its answers now moved a long way
    first = own["class_names"][0]
    rows = [[sum(row) if column == 0 else 0 for column in range(len(row))] for row in own["confusion_matrix"]]
    dataclasses.replace(own, confusion_matrix=rows).write(str(version))
    moved = evaluate("moved", version, min_split_examples=total)
    answered_first = sum(row[0] for row in own["confusion_matrix"])  # (the same answers as the candidate's)
    assert moved["prediction_mix"]["verdict"] == "warn"
    assert moved["prediction_mix"]["value"] == round(1 - answered_first / total, 4)
    assert moved["prediction_mix"]["detail"].startswith(f"class {first} 100.0% -> ")
    with open(moved["report_html"]) as handle:
        assert "<tr><td>prediction mix</td><td>test</td>" in handle.read()
    loose = evaluate("loose", version, min_split_examples=total, prediction_mix_warn=0.99)
    assert (loose["prediction_mix"]["verdict"], loose["prediction_mix"]["thresholds"]) == ("pass", {"warn": 0.99})
    # an export step's own output keeps no evaluation: skipped, with a word
    bare = evaluate("bare", export_dir, min_split_examples=total)
    assert bare["prediction_mix"]["verdict"] == "skipped" and "keeps no evaluation" in bare["prediction_mix"]["detail"]


def test_a_truncated_shard_is_one_line_naming_it(converted, trained, tmp_path):
    """TensorFlow reports a damaged record without its file (an 89-line DataLossError): evaluate names the shard."""
    from tests.conftest import truncated_copy

    model_dir, _ = trained
    copy, shard = truncated_copy(converted[0], "test", tmp_path)
    with pytest.raises(UsageError) as raised:
        run(EvaluateConfig(copy, model_dir, str(tmp_path / "out")))
    assert str(raised.value) == (
        f"examples shard {shard} is damaged (truncated record): convert the data again into a new folder"
    )
