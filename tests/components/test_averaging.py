"""Training keeps a moving average of the weights (``components.train.averaging``): the average is numpy's, step by
step, at the momentum of the phase's length; validation judges the average, and the best epoch kept is the
average's; on TensorFlow and on JAX over two virtual devices (DataParallel)."""

from __future__ import annotations

import os

import numpy as np

from tests.components.test_batch_norm import check
from tests.components.test_train_jax import jax_env

CHECK = """
import json, tempfile
import numpy as np
import keras
from components.train.averaging import averaged_weights, averaging_adam, validation_on_average
from components.train.keep_best import keep_best_callback
from components.train.placement import Placement

backend = keras.backend.backend()
if backend == "jax" and len(keras.distribution.list_devices()) > 1:  # the train step's JAX placement
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
keras.utils.set_random_seed(3)
model = keras.Sequential([
    keras.Input((4,)), keras.layers.Dense(5), keras.layers.BatchNormalization(), keras.layers.ReLU(),
    keras.layers.Dense(3),
])
model.compile(averaging_adam(0.05, 30), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x, y = rng.normal(size=(32, 4)).astype("float32"), rng.integers(0, 3, 32)
xv, yv = rng.normal(size=(16, 4)).astype("float32"), rng.integers(0, 3, 16)
trajectory = [[np.asarray(w) for w in model.trainable_weights]]  # the weights before each step, then after the last

class Record(keras.callbacks.Callback):  # one step an epoch: the weights each step left, as training has them
    def on_epoch_end(self, epoch, logs=None):
        trajectory.append([np.asarray(w) for w in self.model.trainable_weights])

keep = keep_best_callback(tempfile.mkdtemp(), Placement(backend, "cpu", 1, "OneDevice"), 0, 0)
history = model.fit(x, y, batch_size=32, epochs=8, verbose=0, validation_data=(xv, yv),
                    callbacks=[validation_on_average(), Record(), keep])
average = [np.zeros_like(w) for w in trajectory[0]]
for step, weights in enumerate(trajectory[1:]):  # the first step sets the average
    momentum = 1 - 1 / 3 if step else 0.0  # (the horizon of 30 steps: 3)
    average = [momentum * a + (1 - momentum) * w for a, w in zip(average, weights)]
kept_epoch = keep.best["epoch"]
model.set_weights(keep.weights)
print(json.dumps({
    "steps": int(model.optimizer.iterations.numpy()),
    "kept": kept_epoch,
    "best_is_lowest": kept_epoch == 1 + int(np.argmin(history.history["val_loss"])),
    "raw_differs": float(max(np.abs(a - w).max() for a, w in zip(average, trajectory[-1]))),
    "average_error": float(max(np.abs(np.asarray(a) - b).max()
                               for a, b in zip(model.optimizer._model_variables_moving_average, average))),
    "validated_average": abs(float(model.evaluate(xv, yv, verbose=0)) - history.history["val_loss"][kept_epoch - 1]),
    "statistics_kept": all(np.array_equal(a, b)
                           for a, b in zip(averaged_weights(model)[4:6], model.get_weights()[4:6])),
}))
"""


def expect_averaged(found: dict) -> None:
    assert found["steps"] == 8 and found["best_is_lowest"], found
    # the average is numpy's, step by step, and not the last weights (the test would pass with no average at all)
    assert found["average_error"] < 1e-5 and found["raw_differs"] > 1e-2, found
    # validation judged the weights the kept epoch keeps: the average (the raw ones score another loss)
    assert found["validated_average"] < 1e-5, found
    assert found["statistics_kept"], found  # batch norm's moving statistics are the model's own, averaged by nothing


def test_tensorflow_keeps_and_validates_the_moving_average_of_the_weights():
    expect_averaged(check({**os.environ, "KERAS_BACKEND": "tensorflow"}, CHECK))


def test_jax_over_two_devices_keeps_and_validates_the_moving_average_of_the_weights():
    env = jax_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    expect_averaged(check({**env, "KERAS_BACKEND": "jax"}, CHECK))


def test_without_an_average_the_kept_weights_are_the_models():
    import keras

    from components.train.averaging import averaged_weights

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(0.1), "mse")
    model.fit(np.ones((4, 2)), np.zeros((4, 2)), verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(averaged_weights(model), model.get_weights(), strict=True))


def test_the_averages_horizon_is_a_tenth_of_the_phase_from_1_to_1000_steps():
    from components.train.averaging import averaging_momentum

    assert averaging_momentum(5) == 0.0  # a run of a few steps: its last weights
    assert abs(averaging_momentum(540) - (1 - 1 / 54)) < 1e-12  # 30 epochs of 18 steps: about the last 3 epochs
    assert abs(averaging_momentum(10**7) - 0.999) < 1e-12
