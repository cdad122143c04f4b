"""Evaluation of a text model (issue 15): the same metrics and blessing as for images, the misclassified texts in
the report, an exported text model as the baseline (fed the raw texts), and one-line errors for examples that do not
match the model."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from components.artifacts.records import METRICS
from components.cli import UsageError
from components.evaluate.baseline import Baseline, comparability
from components.evaluate.core import EvaluateConfig, run


@pytest.fixture(scope="module")
def evaluated_text(text_examples, trained_text, exported_text, tmp_path_factory):
    """The LSTM evaluated against its own export as the baseline; (metrics, output dir)."""
    output = str(tmp_path_factory.mktemp("text-evaluation"))
    metrics = run(
        EvaluateConfig(text_examples[0], trained_text[0], output, min_accuracy=0.8, baseline=exported_text[0])
    )
    return metrics, output


def test_a_text_model_is_evaluated_and_blessed_on_the_test_texts(text_examples, evaluated_text):
    from tests.conftest import TEXT_SEQUENCE_LENGTH

    _, stats = text_examples
    metrics, output = evaluated_text
    assert metrics["num_examples"] == stats["counts"]["test"] == sum(map(sum, metrics["confusion_matrix"]))
    assert metrics["class_names"] == ["neg", "pos"]
    assert metrics["accuracy"] >= 0.9 and metrics["blessing"]["blessed"], metrics["blessing"]
    assert metrics["training"]["modality"] == "text"
    assert metrics["training"]["sequence_length"] == TEXT_SEQUENCE_LENGTH
    with open(os.path.join(output, "metrics.json")) as handle:
        assert json.load(handle) == {"format_version": METRICS.version, **metrics}


def test_a_weak_models_misclassified_texts_are_listed_and_quoted(text_examples, tmp_path):
    """An LSTM barely trained (one epoch at a tiny learning rate) gets many test texts wrong: each is listed whole
    in metrics.json with its labels, and quoted in the report."""
    import html

    import tensorflow as tf

    from components.schema import split_files, text_feature_spec
    from components.train.config import TrainConfig
    from components.train.core import run as train
    from tests.conftest import TEXT_SEQUENCE_LENGTH

    examples, _ = text_examples
    train(
        TrainConfig(
            examples_dir=examples,
            model_dir=str(tmp_path / "weak"),
            model_name="lstm",
            epochs=1,
            learning_rate=1e-6,
            per_replica_batch_size=16,
            backend="tensorflow",
        ),
        env={},
    )
    metrics = run(EvaluateConfig(examples, str(tmp_path / "weak"), str(tmp_path / "evaluation"), min_accuracy=0.9))
    spec = text_feature_spec(TEXT_SEQUENCE_LENGTH, 2)
    texts = {
        tf.io.parse_single_example(record, spec)["text"].numpy().decode()
        for record in tf.data.TFRecordDataset(split_files(examples, "test"))
    }
    wrong = metrics["misclassified"]
    assert len(wrong) == min(24, round((1 - metrics["accuracy"]) * metrics["num_examples"])) > 0
    assert all(item["text"] in texts and item["label"] != item["predicted"] for item in wrong)
    with open(metrics["report_html"], encoding="utf-8") as handle:
        page = handle.read()
    assert page.count("<blockquote class=text>") == len(wrong)
    assert html.escape(wrong[0]["text"]) in page and not metrics["blessing"]["blessed"]


def test_an_exported_text_baseline_reads_the_raw_texts(exported_text, evaluated_text):
    """The export, fed the raw texts (its own tokenisation), scores what export measured on its SavedModel."""
    metrics, _ = evaluated_text
    _, report = exported_text
    blessing = metrics["blessing"]
    assert blessing["baseline_comparable"] and blessing["baseline_accuracy"] is not None
    assert blessing["baseline_accuracy"] == pytest.approx(report["formats"]["saved_model"]["test_accuracy"])
    assert blessing["baseline_accuracy"] == pytest.approx(metrics["accuracy"])  # the same weights
    assert any("is not worse than the baseline" in reason for reason in blessing["reasons"])


def test_the_report_quotes_the_misclassified_texts_escaped():
    from components.evaluate.report import MAX_TEXT_CHARACTERS, render

    metrics = {
        "accuracy": 0.5,
        "num_examples": 2,
        "class_names": ["neg", "pos"],
        "confusion_matrix": [[1, 0], [1, 0]],
        "per_class": {
            "neg": {"precision": 0.5, "recall": 1.0, "f1": 0.67, "support": 1},
            "pos": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
        },
        "training": {"modality": "text", "sequence_length": 250, "vocabulary_size": 15000},
        "counts": {"train": 8, "validation": 2, "test": 2},
    }
    long_review = "A <b>fine</b> film<br />really. " + "word " * 400
    page = render(metrics, None, [(None, "pos", "neg", 0.91, long_review)])
    assert "Misclassified test texts" in page and "On 2 test texts" in page
    assert "A &lt;b&gt;fine&lt;/b&gt; film&lt;br /&gt;really." in page and "<b>fine</b>" not in page
    quoted = page[page.index("<blockquote") : page.index("</blockquote>")]
    assert "…" in quoted and quoted.count("word") < 400 and len(quoted) < MAX_TEXT_CHARACTERS + 300
    assert "true <b>pos</b>, predicted neg (0.91)" in quoted
    assert "250 tokens each, a vocabulary of 15000" in page


def test_a_trained_text_baseline_of_another_vocabulary_is_not_compared():
    def model(classes, length, vocabulary) -> dict:
        return {"modality": "text", "class_names": classes, "sequence_length": length, "vocabulary_sha256": vocabulary}

    trained = Baseline("trained", "/m", model(["neg", "pos"], 16, "a"))
    assert comparability(trained, model(["neg", "pos"], 16, "a")) == ""
    assert comparability(trained, model(["pos", "neg"], 16, "b")) == (
        "vocabulary differs (a trained baseline reads ids of its own; pass its export instead)"
    )
    assert comparability(trained, model(["neg", "pos"], 32, "a")) == (
        "sequence length differs (baseline 16 tokens, candidate 32)"
    )
    # an export takes the texts themselves
    exported = Baseline("export", "/e", {"modality": "text", "class_names": ["neg", "pos"], "sequence_length": 16})
    assert comparability(exported, model(["neg", "pos"], 32, "b")) == ""
    image = Baseline("export", "/i", {"modality": "image", "class_names": ["neg", "pos"], "image_size": 32})
    assert comparability(image, model(["neg", "pos"], 16, "a")) == (
        "the baseline is an image model, the candidate a text model"
    )


def test_examples_that_do_not_match_the_text_model_are_one_line(text_examples, trained_text, trained, tmp_path):
    examples, _ = text_examples
    model_dir, _ = trained_text
    with pytest.raises(UsageError) as raised:
        run(EvaluateConfig(examples, trained[0], str(tmp_path / "a")))
    assert str(raised.value) == (
        f"examples {examples} hold texts, but model {trained[0]} is an image model: pass the examples the model was "
        "trained from"
    )
    other = tmp_path / "other"
    shutil.copytree(examples, other)
    vocabulary = (other / "vocabulary.txt").read_text(encoding="utf-8").split("\n")
    vocabulary[2], vocabulary[3] = vocabulary[3], vocabulary[2]  # two ids swapped: other words
    (other / "vocabulary.txt").write_text("\n".join(vocabulary), encoding="utf-8")
    with pytest.raises(UsageError, match="tokenised with another vocabulary"):
        run(EvaluateConfig(str(other), model_dir, str(tmp_path / "b")))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_text_model_is_never_blessed_in_place_of_an_image_model(text_examples, trained_text, exported, tmp_path):
    """A registry's model in service of the other modality (the same display name for both): not comparable, and
    the candidate is not blessed, so it never replaces the image model (nor its deployment)."""
    metrics = run(
        EvaluateConfig(text_examples[0], trained_text[0], str(tmp_path), min_accuracy=0.5, baseline=exported[0])
    )
    blessing = metrics["blessing"]
    assert metrics["accuracy"] >= 0.5 and not blessing["blessed"] and not blessing["baseline_comparable"]
    assert blessing["reasons"][-1].startswith("the baseline is an image model: a text model must not take its place")
