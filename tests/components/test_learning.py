"""A run that does not learn says so (issue 28): the train step warns, with what to try, and evaluate does not bless
it, with that reason first."""

from __future__ import annotations

import json
import math
import os

from components.evaluate.blessing import bless
from components.learning import not_learning

LN_10 = 2.302585  # the loss of a uniform guess over 10 classes


def test_a_loss_at_chance_after_the_first_epochs_is_named():
    assert not_learning([LN_10 + 0.0004] * 2, 10) is None  # too early to tell
    said = not_learning([LN_10, LN_10 - 0.001, LN_10 + 0.002], 10)
    assert said and "2.3046 after 3 epochs" in said and "chance for 10 classes (ln 10 = 2.3026)" in said
    assert not_learning([0.6932, 0.6930, 0.6931, 0.6929], 2)  # two classes: ln 2
    assert not_learning([2.2, 1.4, 0.9], 10) is None  # learning
    assert not_learning([2.30, 1.9, 2.0], 10) is None  # slow, but off chance by more than 1%
    # a run that learned and then fell back to chance ends at chance
    assert not_learning([1.2, 0.8, LN_10], 10)


def test_a_loss_that_is_not_a_number_is_named_at_once():
    assert "is nan at epoch 2" in not_learning([2.1, math.nan], 10)
    assert "is inf at epoch 1" in not_learning([math.inf], 3)


def test_a_run_at_chance_is_not_blessed_and_says_why_first():
    blessing = bless(0.99, 0.75, None, 0.0, not_learning="the training loss is still 2.3026 after 20 epochs")
    assert blessing["blessed"] is False
    assert blessing["reasons"][0] == "training did not learn: the training loss is still 2.3026 after 20 epochs"
    assert bless(0.99, 0.75, None, 0.0)["blessed"] is True


def test_training_that_never_learns_warns_in_its_log_and_evaluate_refuses_it(converted, tmp_path, caplog):
    """A learning rate far too high wrecks the weights within the first steps: the loss sits at ln 3 (every unit
    dark), above it, or is NaN. (The steps run in this process: their logs are what a user reads.)"""
    from components.evaluate.core import EvaluateConfig
    from components.evaluate.core import run as evaluate
    from components.train.config import TrainConfig
    from components.train.core import run as train

    examples, stats = converted
    model_dir, evaluation = tmp_path / "model", tmp_path / "eval"
    caplog.set_level("INFO", logger="components")
    train(
        TrainConfig(
            examples_dir=examples,
            model_dir=str(model_dir),
            epochs=4,
            learning_rate=50.0,
            per_replica_batch_size=8,
            precision="float32",
            backend="tensorflow",
        ),
        env={},
    )
    warnings = [record.getMessage() for record in caplog.records if "training is not learning:" in record.getMessage()]
    assert len(warnings) == 1, caplog.text[-3000:]  # once, at the epoch it showed
    assert "try a smaller --learning-rate (this run: 50)" in warnings[0]
    with open(model_dir / "history.json") as handle:
        history = json.load(handle)
    losses = history["history"]["loss"]
    assert any(math.isnan(x) for x in losses) or losses[-1] >= 0.99 * math.log(stats["num_classes"])  # chance or worse
    assert history["not_learning"].startswith("the training loss is")
    blessing = evaluate(EvaluateConfig(examples, str(model_dir), str(evaluation), min_accuracy=0.0))["blessing"]
    with open(os.path.join(evaluation, "metrics.json")) as handle:
        assert json.load(handle)["blessing"] == blessing
    assert blessing["blessed"] is False
    assert blessing["reasons"][0].startswith("training did not learn: the training loss is")


def test_what_to_try_names_this_runs_values_and_the_sources_own_size():
    from components.learning import what_to_try

    advice = what_to_try(0.002, 192, "codelab_convnet", source_size=32)
    assert "--learning-rate (this run: 0.002)" in advice
    assert "--image-size nearer the images' own size (this run: 192; the source's images are about 32 px)" in advice
    assert "another --model (this run: codelab_convnet; codelab_convnet_bn normalises its activations" in advice
    assert "normalises" not in what_to_try(0.002, 192, "squeezenet")  # already a batch-norm model
    assert "--image-size" not in what_to_try(0.01, None, "lstm")  # a text model has no image size


def test_chance_is_the_classes_own_shares_when_they_are_not_balanced():
    """90 to 10: a model that learned only that most examples are of the first class sits at their entropy, 0.3251,
    far below ln 2; a loss above chance is no learning either."""
    stalled = [0.3262, 0.3255, 0.3249]
    assert not_learning(stalled, 2) is None  # judged against ln 2 it would pass
    said = not_learning(stalled, 2, class_counts=[90, 10])
    assert said and "their entropy: 0.3251" in said
    assert not_learning([0.30, 0.2, 0.1], 2, class_counts=[90, 10]) is None
    assert not_learning([3.1, 3.0, 2.9], 10)  # worse than a uniform guess
