"""Batch-norm statistics re-estimated with the final weights (``components.train.batch_norm``): each trainable layer's
moving mean and variance become numpy's mean of its inputs' per-batch means and variances, on TensorFlow and on JAX
over two virtual devices (DataParallel); a frozen layer keeps its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from tests.components.test_train_jax import jax_env
from tests.conftest import REPO_ROOT

CHECK = """
import json, sys
import numpy as np
import keras
from components.train.batch_norm import reestimate

backend = keras.backend.backend()
if backend == "jax" and len(keras.distribution.list_devices()) > 1:  # the train step's JAX placement
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
keras.utils.set_random_seed(2)
model = keras.Sequential([
    keras.Input((4,)), keras.layers.Dense(6), keras.layers.BatchNormalization(), keras.layers.ReLU(),
    keras.layers.Dense(5), keras.layers.BatchNormalization(), keras.layers.BatchNormalization(), keras.layers.Dense(3),
])
model.layers[-2].trainable = False  # a frozen layer (a pretrained backbone's) keeps its statistics
rng = np.random.default_rng(0)
batches = [(rng.normal(loc=n, scale=1 + n, size=(16, 4)).astype("float32"), np.zeros(16)) for n in range(5)]
norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
inputs = keras.Model(model.inputs, [layer.input for layer in norms[:2]])  # what the trainable layers are given
seen = [[np.asarray(a) for a in inputs(x, training=True)] for x, _ in batches]  # (training mode: batch statistics)
frozen = [np.asarray(w) for w in norms[2].get_weights()]
used = reestimate(model, batches, backend)
expected = [(np.mean([batch[n].mean(axis=0) for batch in seen], axis=0),
             np.mean([batch[n].var(axis=0) for batch in seen], axis=0)) for n in range(2)]
print(json.dumps({
    "used": used,
    "errors": [max(float(np.abs(np.asarray(layer.moving_mean) - mean).max()),
                   float(np.abs(np.asarray(layer.moving_variance) - variance).max()))
               for layer, (mean, variance) in zip(norms[:2], expected)],
    "frozen_kept": all(np.array_equal(a, np.asarray(b)) for a, b in zip(frozen, norms[2].get_weights())),
    "momentum": [layer.momentum for layer in norms],
}))
"""


def check(env: dict, script: str = CHECK) -> dict:
    """What ``script`` prints last (a JSON object), run in a fresh Python with ``env``."""
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_tensorflow_statistics_are_the_mean_of_the_batches_with_the_final_weights():
    import os

    found = check({**os.environ, "KERAS_BACKEND": "tensorflow"})
    assert found["used"] == 5 and max(found["errors"]) < 1e-5, found
    assert found["frozen_kept"] and found["momentum"] == [0.99, 0.99, 0.99]  # (the layers' own, given back)


def test_jax_statistics_over_two_devices_are_the_mean_of_the_batches_with_the_final_weights():
    found = check({**jax_env(XLA_FLAGS="--xla_force_host_platform_device_count=2"), "KERAS_BACKEND": "jax"})
    assert found["used"] == 5 and max(found["errors"]) < 1e-5, found
    assert found["frozen_kept"] and found["momentum"] == [0.99, 0.99, 0.99]


def test_a_model_without_batch_norm_reads_no_batch():
    import keras

    from components.train.batch_norm import reestimate

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])

    def never():
        raise AssertionError("read")
        yield

    assert reestimate(model, never(), "tensorflow") == 0
    assert np.isfinite(model.get_weights()[0]).all()


TWO_PROCESSES = """
import json, os
import numpy as np
from components.train.hosts import connect_processes

processes, index = connect_processes(2, os.environ)
import keras
from components.train.batch_norm import reestimate

keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
keras.utils.set_random_seed(2)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6), keras.layers.BatchNormalization(),
                          keras.layers.Dense(3)])
rng = np.random.default_rng(0)
global_batches = [rng.normal(loc=n, scale=1 + n, size=(16, 4)).astype("float32") for n in range(5)]
share = [(batch[8 * index : 8 * (index + 1)], np.zeros(8)) for batch in global_batches]  # this process's half
used = reestimate(model, share, "jax")


def local(variable):
    return np.asarray(variable.value.addressable_data(0))


dense, norm = model.layers[0], model.layers[1]
inputs = [batch @ local(dense.kernel) + local(dense.bias) for batch in global_batches]  # what the layer is given
print(json.dumps({
    "used": used, "processes": processes, "devices": len(keras.distribution.list_devices()),
    "mean_error": float(np.abs(local(norm.moving_mean) - np.mean([x.mean(axis=0) for x in inputs], axis=0)).max()),
    "variance_error": float(np.abs(local(norm.moving_variance)
                                   - np.mean([x.var(axis=0) for x in inputs], axis=0)).max()),
    "half_error": float(np.abs(local(norm.moving_mean) - np.mean([x[:8].mean(axis=0) for x in inputs], axis=0)).max()),
}))
"""


def test_jax_statistics_over_two_processes_are_those_of_the_global_batches():
    """Each process reads its half of every global batch; both get numpy's mean and variance of the whole batches'
    layer inputs (the weights read back from the model), not of their own halves."""
    from tests.components.test_train_jax import hosts_of_two

    hosts = hosts_of_two([], KERAS_BACKEND="jax")
    started = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_PROCESSES],
            cwd=REPO_ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _, env in hosts
    ]
    outputs = [process.communicate(timeout=300) for process in started]
    for process, (_, stderr) in zip(started, outputs, strict=True):
        assert process.returncode == 0, stderr[-3000:]
    for stdout, _ in outputs:
        found = json.loads(stdout.strip().splitlines()[-1])
        assert (found["used"], found["processes"], found["devices"]) == (5, 2, 2), found
        assert found["mean_error"] < 1e-5 and found["variance_error"] < 1e-4, found
        assert found["half_error"] > 0.01, found  # (a process's own half would not do)


def test_the_saved_models_validation_accuracy_is_scored_after_its_statistics_are_re_estimated(converted, tmp_path):
    """Two epochs of the default image model leave its moving statistics short of its weights: the curves score
    those, and history.json, the step's figures and the run summary give the saved model's own score."""
    import keras
    import numpy as np

    from components.artifacts.examples import make_dataset
    from components.artifacts.model import ModelConfig
    from components.modalities import reading_of
    from components.models import DEFAULT_MODELS
    from components.train.config import TrainConfig
    from components.train.core import run
    from pipeline.local.summary import training_run

    examples_dir, stats = converted
    model_dir = str(tmp_path / "model")
    config = TrainConfig(
        examples_dir=examples_dir,
        model_dir=model_dir,
        model_name=DEFAULT_MODELS["image"],
        epochs=2,
        per_replica_batch_size=8,
        precision="float32",
        backend="tensorflow",
    )
    result = run(config)
    with open(os.path.join(model_dir, "history.json")) as handle:
        history = json.load(handle)
    saved = keras.models.load_model(os.path.join(model_dir, "model.keras"), compile=False)
    right = total = 0
    for images, labels in make_dataset(examples_dir, "validation", reading_of(stats), 8, training=False):
        right += int((np.argmax(saved(images, training=False), -1) == np.argmax(labels, -1)).sum())
        total += len(labels)
    scored = history["saved_model_validation"]["val_accuracy"]
    assert abs(scored - right / total) < 1e-6 and total == stats["counts"]["validation"]
    assert result["final"]["val_accuracy"] == scored
    used = {"epochs": 2, "learning_rate": 0.001, "lr_schedule": "constant"}
    spec = {"root": {"inputDefinitions": {"parameters": {name: {} for name in used}}}}  # (the DAG's, in short)
    summary = training_run(model_dir, ModelConfig.read(model_dir), spec, used)
    assert summary["final_validation_accuracy"] == scored
