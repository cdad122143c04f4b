"""The models, by name. Each builder makes the same network whether it runs in a TPU strategy's scope or on a CPU,
so weights trained on one load into the other."""

from __future__ import annotations

from collections.abc import Callable


def codelab_convnet(image_size: int, num_classes: int, dtype_policy=None):
    """The "Keras on TPU" codelab's convnet: stacked 3x3 / 1x1 convolutions, max pooling, global average pooling,
    softmax (293,233 parameters for 5 classes at 192x192)."""
    import keras
    from keras import layers

    def conv(filters: int, kernel: int = 3):
        return layers.Conv2D(filters, kernel, padding="same", activation="relu", dtype=dtype_policy)

    return keras.Sequential(
        [
            keras.Input(shape=(image_size, image_size, 3)),
            conv(16),
            conv(30),
            layers.MaxPooling2D(2, dtype=dtype_policy),
            conv(60),
            layers.MaxPooling2D(2, dtype=dtype_policy),
            conv(90),
            layers.MaxPooling2D(2, dtype=dtype_policy),
            conv(110),
            layers.MaxPooling2D(2, dtype=dtype_policy),
            conv(130),
            conv(40, kernel=1),
            layers.GlobalAveragePooling2D(dtype=dtype_policy),
            # the softmax stays float32 under mixed precision, for a numerically sound loss
            layers.Dense(num_classes, activation="softmax", dtype="float32"),
        ],
        name="codelab_convnet",
    )


MODELS: dict[str, Callable] = {"codelab_convnet": codelab_convnet}


def build_model(name: str, image_size: int, num_classes: int, dtype_policy=None):
    """Builds the named model; raises ``KeyError`` naming the valid choices for an unknown name."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}: choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name](image_size, num_classes, dtype_policy)
