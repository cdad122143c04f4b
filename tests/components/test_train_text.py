"""Training on text (issue 15): the article's LSTM, a BiLSTM and a 1-D convolution learn a small sentiment set the
test writes, through the same train step as images: TensorFlow here, and JAX over two virtual devices (the TPU
path) in a subprocess, as a user starts it."""

from __future__ import annotations

import os
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest

from components.cli import UsageError
from components.modalities import reading_of
from tests.components.test_train_jax import TWO_DEVICES, jax_env, read, start_all
from tests.conftest import TEXT_SEQUENCE_LENGTH as SEQUENCE_LENGTH

MODELS = ("bilstm", "cnn1d", "ngrams")  # on JAX; the LSTM on TensorFlow (tests.conftest.trained_text)


def test_the_articles_lstm_learns_the_reviews_on_tensorflow(text_examples, trained_text):
    _, stats = text_examples
    model_dir, result = trained_text
    assert result["modality"] == "text" and result["backend"] == "tensorflow"
    assert result["sequence_length"] == SEQUENCE_LENGTH and result["vocabulary_size"] == stats["vocabulary_size"]
    assert "image_size" not in result and "input_pixels" not in result
    history = read(os.path.join(model_dir, "history.json"))["history"]
    assert history["loss"][-1] < history["loss"][0]
    assert history["val_accuracy"][-1] >= 0.9, history["val_accuracy"]
    config = read(os.path.join(model_dir, "model_config.json"))
    assert config["modality"] == "text" and config["model_name"] == "lstm"
    # the vocabulary its ids index goes with the model, byte for byte the conversion's
    with (
        open(os.path.join(model_dir, "vocabulary.txt"), "rb") as mine,
        open(os.path.join(text_examples[0], "vocabulary.txt"), "rb") as theirs,
    ):
        assert mine.read() == theirs.read()


def test_the_bilstm_the_convolution_and_the_ngrams_train_on_jax_over_two_devices(text_examples, tmp_path):
    """All three at once (start-up dominates these tiny runs), each over two virtual CPU devices."""
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
    # the ngrams bag's inverse document frequencies: counted here by hand over the training texts' words and pairs
    from components.artifacts.examples import make_dataset
    from components.models import load_trained_model
    from components.models.builtin import NGRAM_BUCKETS
    from components.models.text_layers import NGramBag

    vocabulary_size = read(tmp_path / "ngrams" / "model_config.json")["vocabulary_size"]
    documents = Counter()
    texts = [
        row
        for tokens, _ in make_dataset(
            examples, "train", reading_of(read(os.path.join(examples, "stats.json"))), 64, training=False
        ).as_numpy_iterator()
        for row in tokens.tolist()
    ]
    for ids in texts:
        words = [i for i in ids if i]
        pairs = [vocabulary_size + (a * vocabulary_size + b) % NGRAM_BUCKETS for a, b in pairwise(words)]
        documents.update(set(words + pairs))
    bag = next(layer for layer in load_trained_model(str(tmp_path / "ngrams")).layers if isinstance(layer, NGramBag))
    idf = bag.idf.numpy()
    grams = sorted(documents)
    expected = [np.log((1 + len(texts)) / (1 + documents[g])) + 1 for g in grams]
    np.testing.assert_allclose(idf[grams], expected, rtol=1e-5)
    assert np.count_nonzero(idf) == len(grams)  # a gram no training text holds weighs nothing


def test_a_text_model_in_float32_trains_on_jax_on_a_cpu_and_so_starts_cold_under_run_local(text_examples):
    from components.train.placement import trains_on_tensorflow

    assert not trains_on_tensorflow("auto", "float32", 1, text_examples[0])
    assert trains_on_tensorflow("auto", "mixed_bfloat16", 1, text_examples[0])  # (TensorFlow was faster in it)


def test_an_image_model_on_text_examples_is_one_line(text_examples, tmp_path):
    from components.train.config import TrainConfig
    from components.train.core import run

    examples, _ = text_examples
    with pytest.raises(UsageError) as raised:
        run(TrainConfig(examples_dir=examples, model_dir=str(tmp_path / "m"), model_name="codelab_convnet"), env={})
    assert str(raised.value) == (
        f"--model codelab_convnet takes images, and the examples in {examples} are texts: choose one of bilstm, "
        "cnn1d, lstm, ngrams, or a model of your own"
    )
    assert not os.path.exists(tmp_path / "m" / "model_config.json")


def test_the_train_step_refuses_augment_on_texts_before_it_trains(text_examples, tmp_path):
    from components.train.config import TrainConfig
    from components.train.core import run

    examples_dir, _ = text_examples
    with pytest.raises(UsageError, match=r"^--augment applies to images .*: texts get no augmentation; leave"):
        run(TrainConfig(examples_dir=examples_dir, model_dir=str(tmp_path / "model"), augment=True))
    assert not (tmp_path / "model").exists()
