"""Training on text (issue 15): the article's LSTM, a BiLSTM and a 1-D convolution learn a small sentiment set the
test writes, through the same train step as images: TensorFlow here, and JAX over two virtual devices (the TPU
path) in a subprocess, as a user starts it."""

from __future__ import annotations

import json
import os
import random

import pytest

from components.cli import UsageError
from tests.components.test_train_jax import TWO_DEVICES, jax_env, read, start_all
from tests.conftest import IN_MEMORY

POSITIVE = ["good", "great", "fine", "nice", "superb", "lovely"]
NEGATIVE = ["bad", "awful", "poor", "sad", "dull", "boring"]
NEUTRAL = ["the", "a", "movie", "film", "was", "it", "and", "plot", "cast", "really"]
SEQUENCE_LENGTH = 16
MODELS = ("bilstm", "cnn1d")  # on JAX; the LSTM on TensorFlow


@pytest.fixture(scope="module")
def text_examples(tmp_path_factory) -> tuple[str, dict]:
    """320 short reviews, each with 2 to 4 words of its class among neutral ones, converted by the text convert."""
    from components.convert.text import TextConvertConfig, run_text

    rng = random.Random(5)
    root = tmp_path_factory.mktemp("reviews")
    lines = []
    for n in range(320):
        label, words = ("pos", POSITIVE) if n % 2 else ("neg", NEGATIVE)
        tokens = rng.choices(NEUTRAL, k=rng.randint(3, 14)) + rng.choices(words, k=rng.randint(2, 4))
        rng.shuffle(tokens)
        lines.append(json.dumps({"text": " ".join(tokens) + f". Review {n}!", "label": label}))
    (root / "reviews.jsonl").write_text("\n".join(lines))
    output = str(tmp_path_factory.mktemp("text") / "examples")
    stats = run_text(TextConvertConfig(source=str(root / "reviews.jsonl"), output_dir=output, vocabulary_size=64,
                                       sequence_length=SEQUENCE_LENGTH, pipeline_args=IN_MEMORY))  # fmt: skip
    return output, stats


def test_the_articles_lstm_learns_the_reviews_on_tensorflow(text_examples, tmp_path):
    from components.train.core import TrainConfig, run

    examples, stats = text_examples
    result = run(TrainConfig(examples_dir=examples, model_dir=str(tmp_path / "model"), model_name="lstm", epochs=6,
                             per_replica_batch_size=16, backend="tensorflow"), env={})  # fmt: skip
    assert result["modality"] == "text" and result["backend"] == "tensorflow"
    assert result["sequence_length"] == SEQUENCE_LENGTH and result["vocabulary_size"] == stats["vocabulary_size"]
    assert "image_size" not in result and "input_pixels" not in result
    history = read(tmp_path / "model" / "history.json")["history"]
    assert history["loss"][-1] < history["loss"][0]
    assert history["val_accuracy"][-1] >= 0.9, history["val_accuracy"]
    config = read(tmp_path / "model" / "model_config.json")
    assert config["modality"] == "text" and config["model_name"] == "lstm"


def test_the_bilstm_and_the_convolution_train_on_jax_over_two_devices(text_examples, tmp_path):
    """Both at once (start-up dominates these tiny runs), each over two virtual CPU devices."""
    examples, _ = text_examples
    env = jax_env(XLA_FLAGS=TWO_DEVICES, KERAS_BACKEND="jax")
    common = ["--examples", examples, "--epochs", "6", "--batch-size", "8", "--backend", "jax", "--cpu-replicas", "2"]
    start_all(*(([*common, "--model", model, "--model-dir", str(tmp_path / model)], env) for model in MODELS))
    for model in MODELS:
        config = read(tmp_path / model / "model_config.json")
        assert (config["model_name"], config["backend"], config["replicas"]) == (model, "jax", 2)
        assert config["modality"] == "text"
        assert config["distribution"]["batch_axes"][0] == "batch" and config["distribution"]["variables_replicated"]
        assert config["distribution"]["per_device_batch_shape"] == [8, SEQUENCE_LENGTH]
        history = read(tmp_path / model / "history.json")["history"]
        assert history["loss"][-1] < history["loss"][0], model
        assert history["val_accuracy"][-1] >= 0.9, (model, history["val_accuracy"])


def test_an_image_model_on_text_examples_is_one_line(text_examples, tmp_path):
    from components.train.core import TrainConfig, run

    examples, _ = text_examples
    with pytest.raises(UsageError) as raised:
        run(TrainConfig(examples_dir=examples, model_dir=str(tmp_path / "m")), env={})
    assert str(raised.value) == (
        f"--model codelab_convnet takes images, and the examples in {examples} are texts: choose one of bilstm, "
        "cnn1d, lstm"
    )
    assert not os.path.exists(tmp_path / "m" / "model_config.json")


def test_evaluate_and_export_say_in_one_line_that_text_models_are_not_theirs_yet(text_examples, tmp_path):
    """Until they take text (issue 15), evaluate and export refuse a text model in one line, before any work."""
    from components.evaluate.core import EvaluateConfig
    from components.evaluate.core import run as evaluate
    from components.export.core import ExportConfig
    from components.export.core import run as export
    from components.train.core import TrainConfig, run

    examples, _ = text_examples
    model_dir = str(tmp_path / "model")
    run(TrainConfig(examples_dir=examples, model_dir=model_dir, model_name="cnn1d", epochs=1,
                    per_replica_batch_size=16, backend="tensorflow"), env={})  # fmt: skip
    expected = f"model {model_dir} is a text model: evaluating and exporting text models is not built yet (issue 15)"
    with pytest.raises(UsageError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        evaluate(EvaluateConfig(examples, model_dir, str(tmp_path / "evaluation")))
    with pytest.raises(UsageError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        export(ExportConfig(model_dir=model_dir, examples_dir=examples, output_dir=str(tmp_path / "export")))
    assert not os.path.exists(tmp_path / "evaluation") and not os.path.exists(tmp_path / "export")
