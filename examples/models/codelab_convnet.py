"""The "Keras on TPU" codelab's convnet, written as a model of your own.

    .venv/bin/python -m pipeline run-local --model examples/models/codelab_convnet.py:build
    .venv/bin/python -m pipeline run-local --model examples/models/codelab_convnet.py:build --hparam width=1.5

The pipeline calls ``build(spec, **hparams)`` with what the data decided: ``spec.inputs()`` is the input (uint8
pixels, ``[size, size, 3]``), ``spec.num_classes`` the width of the softmax. Every other argument is a
hyperparameter: ``--hparam NAME=VALUE`` sets it, and ``--tune N`` searches ``SEARCH_SPACE``.
"""

import keras
from keras import layers

# the codelab's stack: (filters, kernel size) of each convolution, "pool" a 2x2 max pooling
STACK = [(16, 3), (30, 3), "pool", (60, 3), "pool", (90, 3), "pool", (110, 3), "pool", (130, 3), (40, 1)]

# what --tune searches beside the learning rate and the batch size
SEARCH_SPACE = {"width": [0.5, 1.0, 1.5]}


def build(spec, batch_norm: bool = True, width: float = 1.0):
    """The codelab's convolutions, pooling and softmax. ``batch_norm``: normalise each convolution before its ReLU
    (without it, the network can stall at chance on smooth images); ``width``: scales every convolution's filters."""
    model = keras.Sequential(name="codelab_convnet")
    model.add(spec.inputs())
    model.add(layers.Rescaling(1 / 255))  # pixels to [0, 1]: the exported model takes them as decoded
    for item in STACK:
        if item == "pool":
            model.add(layers.MaxPooling2D(2))
            continue
        filters, kernel = max(1, round(item[0] * width)), item[1]
        if batch_norm:
            model.add(layers.Conv2D(filters, kernel, padding="same", use_bias=False))
            model.add(layers.BatchNormalization(momentum=0.9))
            model.add(layers.Activation("relu"))
        else:
            model.add(layers.Conv2D(filters, kernel, padding="same", activation="relu"))
    model.add(layers.GlobalAveragePooling2D())
    # float32 under mixed precision: a numerically sound softmax and loss
    model.add(layers.Dense(spec.num_classes, activation="softmax", dtype="float32"))
    return model
