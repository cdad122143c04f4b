"""Training keeps a moving average of the weights (an exponential moving average, EMA), and validation, the kept best
epoch and the trained model are the average's: on a small training set the weights after each step wander around
a minimum, their recent average is nearer to it, and the best epoch is judged on weights that swing less from epoch
to epoch (measured: bench/RESULTS.md, the image default over several splits). The average lives in the optimizer
(Keras's ``use_ema``), so backups and resumes carry it.

Imports Keras at module level: import it only where training happens.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

HORIZON_SHARE = 10  # the average's horizon is a tenth of the phase's steps
MAX_HORIZON = 1000  # and at most this many (momentum 0.999)


def averaging_momentum(steps: int) -> float:
    """The momentum of the weights' moving average for a phase of ``steps`` training steps: 1 - 1/horizon, the
    horizon a tenth of the steps (at least 1: a run of a few steps keeps its last weights, at most ``MAX_HORIZON``).
    Its first step sets the average (Keras's ``use_ema``); the first weights then weigh ``momentum ** k`` after
    ``k`` steps, e^-3 after three tenths of the phase."""
    return 1.0 - 1.0 / min(float(MAX_HORIZON), max(1.0, steps / HORIZON_SHARE))


def averaging_adam(learning_rate, steps: int):
    """Adam keeping the moving average of the trainable weights, for a phase of ``steps`` steps."""
    return keras.optimizers.Adam(learning_rate, use_ema=True, ema_momentum=averaging_momentum(steps))


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
