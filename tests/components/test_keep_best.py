"""Training keeps its best epoch: the weights of the lowest validation loss, early stopping after ``patience`` epochs
without a better one, and the best epoch kept across a resume (``components.train.keep_best``), in a real ``fit``."""

from __future__ import annotations

import numpy as np
import pytest

from components.train.keep_best import auto_patience, keep_best_callback, read_best
from components.train.placement import Placement


def fit(model, folder, losses: list[float], patience: int, initial_epoch: int = 0, finished_before: int = 0):
    """``model.fit`` over random data with the callback, each epoch's validation loss taken from ``losses`` (by
    epoch number); returns ({epoch: the weights at its end}, the callback)."""
    import keras

    seen = {}

    class Scripted(keras.callbacks.Callback):  # what validation measured, then the weights that epoch ended with
        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = losses[epoch]
            seen[epoch + 1] = [w.copy() for w in self.model.get_weights()]

    keeper = keep_best_callback(str(folder), Placement("tensorflow", "cpu", 1, "OneDevice"), patience, finished_before)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 4)).astype("float32"), rng.integers(0, 3, 64)
    model.fit(
        x, y, epochs=len(losses), initial_epoch=initial_epoch, batch_size=16, verbose=0, callbacks=[Scripted(), keeper]
    )
    return seen, keeper


def small_model():
    import keras

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def same(weights, other) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(weights, other, strict=True))


def test_the_best_epochs_weights_are_kept_and_training_stops_after_patience_epochs_without_better(tmp_path):
    model = small_model()
    seen, keeper = fit(model, tmp_path / "best", [0.9, 0.5, 0.6, 0.7, 0.4, 0.45, 0.5, 0.55, 0.3, 0.2], patience=3)
    assert sorted(seen) == [1, 2, 3, 4, 5, 6, 7, 8]  # 5 was the best; 6, 7 and 8 were not better: stopped
    assert keeper.best == {"epoch": 5, "val_loss": 0.4} and keeper.stopped == 8
    assert same(model.get_weights(), seen[5]) and not same(seen[5], seen[8])
    kept, weights = read_best(str(tmp_path / "best"))  # beside the backups, for a resumed run
    assert kept == {"epoch": 5, "val_loss": 0.4} and same(weights, seen[5])


def test_patience_0_trains_every_epoch_and_still_keeps_the_best(tmp_path):
    model = small_model()
    seen, keeper = fit(model, tmp_path / "best", [0.9, 0.3, 0.6, 0.7, 0.8, 0.9], patience=0)
    assert len(seen) == 6 and keeper.stopped is None and same(model.get_weights(), seen[2])


def test_a_resumed_run_keeps_the_best_epoch_of_the_attempt_before_it(tmp_path):
    """A first attempt ends after epoch 3 (its best, 2); the resumed one trains epochs 4 to 6, none better: the
    model ends with epoch 2's weights, read back from the file."""
    losses = [0.9, 0.3, 0.6, 0.7, 0.8, 0.9]
    model = small_model()
    first, _ = fit(model, tmp_path / "best", losses[:3], patience=0)
    resumed = small_model()  # a new process: other weights, none of the first attempt's in memory
    later, keeper = fit(resumed, tmp_path / "best", losses, patience=0, initial_epoch=3, finished_before=3)
    assert sorted(later) == [4, 5, 6] and keeper.best == {"epoch": 2, "val_loss": 0.3}
    assert same(resumed.get_weights(), first[2])


def test_a_loss_that_is_not_a_number_is_never_the_best(tmp_path):
    model = small_model()
    seen, keeper = fit(model, tmp_path / "best", [0.9, float("nan"), 0.8, float("inf")], patience=0)
    assert keeper.best["epoch"] == 3 and same(model.get_weights(), seen[3])


@pytest.mark.parametrize("epochs, patience", [(1, 5), (15, 5), (16, 5), (30, 10), (100, 33)])
def test_auto_patience_is_a_third_of_the_epochs_and_at_least_5(epochs, patience):
    assert auto_patience(epochs) == patience
