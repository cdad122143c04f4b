"""The train step: the codelab model, the input pipeline's static shapes, real training, saved outputs."""

from __future__ import annotations

import json
import math
import os

import pytest

from components.cli import UsageError
from components.train.core import TrainConfig, make_dataset, resolve_strategy
from components.train.models import build_model
from tests.conftest import CLASSES, TINY_SIZE, run_cli


def test_codelab_convnet_has_the_codelab_parameter_count():
    model = build_model("codelab_convnet", 192, 5)
    assert model.count_params() == 293_233
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("MaxPooling2D") == 4
    assert kinds[-2:] == ["GlobalAveragePooling2D", "Dense"]


def test_unknown_model_or_precision_names_the_choices():
    with pytest.raises(UsageError, match="choose one of codelab_convnet"):
        TrainConfig(examples_dir="e", model_dir="m", model_name="resnet9000")
    with pytest.raises(UsageError, match="float32, mixed_bfloat16"):
        TrainConfig(examples_dir="e", model_dir="m", precision="float8")


def test_strategy_falls_back_to_the_cpu_when_there_is_no_tpu_or_gpu(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    strategy = resolve_strategy("")
    assert strategy.num_replicas_in_sync == 1


def test_training_batches_have_static_shapes(converted):
    examples_dir, _ = converted
    dataset = make_dataset(examples_dir, "train", TINY_SIZE, len(CLASSES), batch_size=4, training=True)
    images, labels = dataset.element_spec
    assert images.shape.as_list() == [4, TINY_SIZE, TINY_SIZE, 3]
    assert labels.shape.as_list() == [4, len(CLASSES)]
    batch, _ = next(iter(dataset))
    assert float(batch.numpy().min()) >= 0.0 and float(batch.numpy().max()) <= 1.0


def test_training_learns_and_saves_model_weights_config_and_history(trained):
    model_dir, result = trained
    for name in ("model.keras", "model.weights.h5", "model_config.json", "history.json"):
        assert os.path.exists(os.path.join(model_dir, name)), name
    with open(os.path.join(model_dir, "history.json")) as handle:
        history = json.load(handle)["history"]
    losses = history["loss"]
    assert len(losses) == 10 and all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]
    # three flat colours are easy: a convnet that trains at all separates them
    assert result["final"]["accuracy"] >= 0.9
    with open(os.path.join(model_dir, "model_config.json")) as handle:
        config = json.load(handle)
    assert config["class_names"] == list(CLASSES) and config["image_size"] == TINY_SIZE
    assert config["global_batch_size"] == 4 * config["replicas"]


def test_missing_examples_dir_is_a_one_line_error(tmp_path):
    result = run_cli("components.train", "--examples", str(tmp_path / "nope"), "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: examples dir {tmp_path / 'nope'} has no stats.json: run the convert step into it first"
    ]
