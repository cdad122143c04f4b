"""Training keeps a moving average of the weights (an exponential moving average, EMA), and validation, the kept best
epoch and the trained model are the average's: on a small training set the weights after each step wander around
a minimum, and their recent average is nearer to it (measured: bench/RESULTS.md, the image default over several
splits). The average lives in the optimizer (Keras's ``use_ema``), so backups and resumes carry it.

Imports Keras at module level: import it only where training happens.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

MOMENTUM = 0.99  # once warmed up, the average weighs about the last 100 steps
WARM_UP = 10.0  # the momentum at step k is at most (1 + k) / (WARM_UP + k)


@keras.saving.register_keras_serializable(package="tpu_pipeline")
class AveragedAdam(keras.optimizers.Adam):
    """Adam, keeping the moving average of the trainable weights. Its momentum warms up as TensorFlow's
    ``ExponentialMovingAverage(num_updates=step)`` does, ``min(ema_momentum, (1 + step) / (10 + step))`` (after the
    first step, which sets the average): a run of a few steps averages its last weights, not its first (Keras's own
    average runs at full momentum from the second step)."""

    def __init__(self, learning_rate=0.001, ema_momentum: float = MOMENTUM, **kwargs):
        kwargs.pop("use_ema", None)
        super().__init__(learning_rate, use_ema=True, ema_momentum=ema_momentum, **kwargs)

    def _update_model_variables_moving_average(self, trainable_variables):
        step = ops.cast(self.iterations, "float32")
        # (0 at the first step: the average starts as the weights that step left, not as its variable's zeros)
        momentum = ops.where(step > 0, ops.minimum(self.ema_momentum, (1.0 + step) / (WARM_UP + step)), 0.0)
        for variable, average in zip(trainable_variables, self._model_variables_moving_average, strict=True):
            if average is not None:
                kept = ops.cast(momentum, variable.dtype)
                average.assign(kept * average + (1.0 - kept) * variable)


def averaged_weights(model) -> list[np.ndarray]:
    """``model.get_weights()``, with the moving average of each trainable weight in its place where the model's
    optimizer keeps one (the weights validation judged)."""
    optimizer = getattr(model, "optimizer", None)
    averages = getattr(optimizer, "_model_variables_moving_average", None)
    if not getattr(optimizer, "use_ema", False) or not averages:
        return model.get_weights()
    average_of = {id(v): a for v, a in zip(optimizer._trainable_variables, averages, strict=True) if a is not None}
    return [np.asarray(average_of.get(id(variable), variable).numpy()) for variable in model.weights]


def validation_on_average():
    """The callback that puts the average in the model's place while validation runs, and takes it out after.
    (Keras's ``SwapEMAWeights`` swaps TensorFlow's variables by adding and subtracting them, which rounds both.)"""

    class ValidateOnAverage(keras.callbacks.Callback):
        async_safe = True  # no batch hooks

        def _swap(self):
            optimizer = self.model.optimizer
            pairs = zip(optimizer._trainable_variables, optimizer._model_variables_moving_average, strict=True)
            for variable, average in pairs:
                if average is not None:
                    held = ops.convert_to_numpy(variable)
                    variable.assign(average)
                    average.assign(held)

        def on_test_begin(self, logs=None):
            self._swap()

        def on_test_end(self, logs=None):
            self._swap()

    return ValidateOnAverage()
