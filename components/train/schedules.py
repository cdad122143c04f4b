"""Learning-rate schedules as functions of the step written with ``keras.ops``: they run inside the compiled step on
every backend (an XLA program on TPUs under JAX, a graph function under TensorFlow), with no Python callback.

Imports Keras at module level: import it only where training happens.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tpu_image_pipeline")
class RampUpExponentialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear ramp from ``peak / 10`` to ``peak`` over ``rampup_steps``, then ``peak * decay_rate ** k`` where k
    counts the whole ``decay_steps`` (epochs) since the ramp, never below ``peak / 100``. The codelab's best run."""

    def __init__(self, peak: float, rampup_steps: int, decay_steps: int, decay_rate: float):
        self.peak = peak
        self.rampup_steps = rampup_steps
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate

    def __call__(self, step):
        step = ops.cast(step, "float32")
        start, floor = self.peak / 10.0, self.peak / 100.0
        ramp = start + (self.peak - start) * step / max(self.rampup_steps, 1)
        epochs_after_ramp = ops.floor((step - self.rampup_steps) / max(self.decay_steps, 1))
        decayed = self.peak * ops.power(self.decay_rate, epochs_after_ramp)
        return ops.where(step < self.rampup_steps, ramp, ops.maximum(decayed, floor))

    def get_config(self):
        return {
            "peak": self.peak,
            "rampup_steps": self.rampup_steps,
            "decay_steps": self.decay_steps,
            "decay_rate": self.decay_rate,
        }
