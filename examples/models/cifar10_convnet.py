"""The CIFAR-10 convnet of the "CIFAR-10 on a TPU" article: blocks of Conv-BN-Conv-Pool with dropout, then a dense
layer, written as a model of your own.

    .venv/bin/python -m pipeline run-local --source path/to/cifar10 --image-size 32 \
        --model examples/models/cifar10_convnet.py:build --hparam blocks=3 --hparam dropout=0.3

``spec.inputs()`` is the input (uint8 pixels, ``[size, size, 3]``); each block halves the image, so ``blocks`` may be
at most log2 of the image size. Built with the functional API, as keras-io's examples are.
"""

import keras
from keras import layers

SEARCH_SPACE = {"dropout": {"min": 0.1, "max": 0.5}, "filters": [16, 32, 64]}


def build(spec, filters: int = 32, blocks: int = 3, dropout: float = 0.25, dense: int = 128):
    """``blocks`` blocks of two 3x3 convolutions (``filters``, doubled at each block) with batch norm, 2x2 max
    pooling and ``dropout``; then a ``dense``-unit layer and the softmax."""
    inputs = spec.inputs()
    x = layers.Rescaling(1 / 255)(inputs)
    for block in range(blocks):
        width = filters * 2**block
        x = layers.Conv2D(width, 3, padding="same", activation="relu")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Conv2D(width, 3, padding="same", activation="relu")(x)
        x = layers.MaxPooling2D(2)(x)
        x = layers.Dropout(dropout)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(dense, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(spec.num_classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="cifar10_convnet")
