"""Batch-norm statistics re-estimated with the weights the model keeps.

A ``BatchNormalization`` layer normalises with its moving mean and variance at inference, which training updates as
an exponential average (momentum 0.99) of the statistics of batches seen with older weights. After a short run, or
with the best epoch's weights restored, they lag the weights: ``bench/RESULTS.md`` records a validation accuracy of
0.46 at 192 px that statistics computed again lift to 0.98. So, before the model is saved, each trainable
``BatchNormalization`` layer's moving statistics are replaced by the average of the statistics of up to
``MAX_BATCHES`` training batches, computed with the final weights (the forward pass in training mode, as PyTorch's
``update_bn`` does): each holds the plain mean of the ``n`` batches' means and variances. A frozen layer (a
pretrained backbone's) keeps its own. On several processes (JAX), each batch is the global batch, each process
reading its share.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

MAX_BATCHES = 64  # training batches whose statistics are averaged (fewer where an epoch has fewer)


def trainable_batch_norms(model) -> list:
    """The model's ``BatchNormalization`` layers that training updates, nested models' included."""
    import keras

    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.BatchNormalization) and layer.trainable
    ]


def reestimate(model, batches, backend: str) -> int:
    """Replaces the moving statistics of the model's trainable batch-norm layers by the mean of those of
    ``batches`` (an iterable of ``(inputs, labels)``, tensors or arrays) under its current weights; returns how many
    batches were used (0: the model has no such layer, and nothing was read)."""
    layers = trainable_batch_norms(model)
    if not layers:
        return 0
    momenta = [layer.momentum for layer in layers]
    variables = [variable for layer in layers for variable in (layer.moving_mean, layer.moving_variance)]
    try:
        for layer in layers:  # momentum 0: the moving statistics a pass in training mode leaves are the batch's
            layer.momentum = 0.0
        statistics = (_statistics_jax if backend == "jax" else _statistics_tensorflow)(model, variables, batches)
        used = _assign_means(variables, statistics)
    finally:
        for layer, momentum in zip(layers, momenta, strict=True):
            layer.momentum = momentum
    plural = "" if len(layers) == 1 else "s"
    log.info(
        "batch-norm statistics of %d layer%s re-estimated with the final weights on %d training batches",
        len(layers),
        plural,
        used,
    )
    return used


def _assign_means(variables, statistics) -> int:
    """Assigns each of ``variables`` the mean of its values in ``statistics`` (a list of arrays a batch, in the
    order of ``variables``); returns how many batches there were."""
    import numpy as np

    sums, used = None, 0
    for found in statistics:
        found = [np.asarray(value, dtype=np.float64) for value in found]
        sums = found if sums is None else [total + value for total, value in zip(sums, found, strict=True)]
        used += 1
    if used:
        for variable, total in zip(variables, sums, strict=True):
            variable.assign((total / used).astype(np.float32))
    return used


def _statistics_tensorflow(model, variables, batches):
    """TensorFlow: each batch's statistics (``variables``' values after one traced forward pass in training mode),
    the same graph for every batch; eagerly, each of the model's operations is a call of its own."""
    import tensorflow as tf

    forward = tf.function(lambda inputs: model(inputs, training=True))
    for inputs, _ in batches:
        forward(inputs)
        yield [variable.numpy() for variable in variables]


def _statistics_jax(model, variables, batches):
    """JAX: each batch's statistics from one compiled forward pass in training mode (``stateless_call``), the same
    program for every batch; JAX would compile each operation of an eager call on its own. Under a distribution each
    batch is this process's share of a global batch, placed as the train step places it: over several processes,
    every process runs each pass on its share and gets the global batch's statistics."""
    import jax
    import keras

    positions = {id(variable): n for n, variable in enumerate(model.non_trainable_variables)}
    wanted = [positions[id(variable)] for variable in variables]
    trainable = [variable.value for variable in model.trainable_variables]
    non_trainable = [variable.value for variable in model.non_trainable_variables]

    @jax.jit
    def statistics(trainable, non_trainable, inputs):
        _, updated = model.stateless_call(trainable, non_trainable, inputs, training=True)
        return [updated[n] for n in wanted], updated

    distribution = keras.distribution.distribution()
    for inputs, _ in batches:
        batch = inputs.numpy() if hasattr(inputs, "numpy") else inputs
        if distribution is not None:  # this process's share of the global batch, as the train step places it
            layout = distribution.get_data_layout(batch.shape).backend_layout
            batch = jax.make_array_from_process_local_data(layout, batch)
        found, non_trainable = statistics(trainable, non_trainable, batch)
        # the global batch's statistics, the same on every process (a copy of each is on this process's devices)
        yield [value.addressable_data(0) for value in found]
