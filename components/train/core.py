"""Training: a Keras model built in the distribution strategy's scope, fed by a static-shape ``tf.data`` pipeline.

The strategy is resolved in the codelab's order (TPU, then GPUs, then the CPU) and the global batch is the
per-replica batch times the replica count. Writes ``model.keras``, ``model.weights.h5`` (for rebuilding on a CPU),
``model_config.json`` and ``history.json`` into the model dir.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass

from components.cli import UsageError
from components.schema import read_stats, split_pattern
from components.storage import write_json
from components.train.models import MODELS, build_model

log = logging.getLogger(__name__)

PRECISIONS = ("float32", "mixed_bfloat16")
MODEL_FILE = "model.keras"
WEIGHTS_FILE = "model.weights.h5"
MODEL_CONFIG_FILE = "model_config.json"
HISTORY_FILE = "history.json"
# decoded images are cached in memory when they take less than this
CACHE_LIMIT_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class TrainConfig:
    """How to train.

    Args:
        examples_dir: the convert step's output (``<split>/*.tfrec`` and ``stats.json``).
        model_dir: where the model, its weights, its config and the training history go.
        model_name: one of ``components.train.models.MODELS``.
        epochs: passes over the training split.
        per_replica_batch_size: examples per replica per step (the global batch is this times the replicas).
        learning_rate: Adam's learning rate.
        precision: ``float32`` or ``mixed_bfloat16``.
        tpu: a TPU name or address; empty: the ``TPU_NAME`` variable, else GPUs, else the CPU.
        seed: seeds weight initialisation and shuffling.
    """

    examples_dir: str
    model_dir: str
    model_name: str = "codelab_convnet"
    epochs: int = 20
    per_replica_batch_size: int = 32
    learning_rate: float = 0.002
    precision: str = "float32"
    tpu: str = ""
    seed: int = 42

    def __post_init__(self) -> None:
        if self.model_name not in MODELS:
            raise UsageError(f"--model {self.model_name!r} does not exist: choose one of {', '.join(sorted(MODELS))}")
        if self.precision not in PRECISIONS:
            raise UsageError(f"--precision {self.precision!r} does not exist: choose one of {', '.join(PRECISIONS)}")
        if self.epochs < 1:
            raise UsageError(f"--epochs {self.epochs} must be at least 1")
        if self.per_replica_batch_size < 1:
            raise UsageError(f"--batch-size {self.per_replica_batch_size} must be at least 1")
        if not self.learning_rate > 0:
            raise UsageError(f"--learning-rate {self.learning_rate} must be positive")


def resolve_strategy(tpu: str = ""):
    """The codelab's order: a TPU when one is named (argument or ``TPU_NAME``), else every GPU, else the CPU."""
    import tensorflow as tf

    tpu = tpu or os.environ.get("TPU_NAME", "")
    if tpu:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif tf.config.list_logical_devices("GPU"):
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    log.info("distribution strategy: %s with %d replica(s)", type(strategy).__name__, strategy.num_replicas_in_sync)
    return strategy


def make_dataset(
    examples_dir: str,
    split: str,
    image_size: int,
    num_classes: int,
    batch_size: int,
    training: bool,
    cache: bool = False,
    seed: int | None = None,
):
    """A batched ``tf.data.Dataset`` of ``(image float32 [0,1], one_hot_class)`` with fully static shapes.

    Training data is shuffled, repeated and batched with ``drop_remainder`` (static batch shape, as TPUs need);
    evaluation data is read once, in order, keeping the last partial batch.
    """
    import tensorflow as tf

    from components.imaging import to_model_input
    from components.schema import parse_example

    autotune = tf.data.AUTOTUNE
    files = tf.io.gfile.glob(split_pattern(examples_dir, split))
    if not files:
        raise UsageError(
            f"examples dir {examples_dir} has no {split} shards: expected {split_pattern(examples_dir, split)}"
        )
    files_ds = tf.data.Dataset.from_tensor_slices(sorted(files))
    if training:
        files_ds = files_ds.shuffle(len(files), seed=seed)
    dataset = files_ds.interleave(
        tf.data.TFRecordDataset,
        num_parallel_calls=autotune,
        deterministic=not training,
        cycle_length=min(len(files), 16),
    )

    def decode(serialized):
        example = parse_example(serialized, num_classes)
        image = tf.io.decode_jpeg(example["image"], channels=3)
        image = tf.reshape(image, [image_size, image_size, 3])  # static shape: fails loudly on a wrong size
        return to_model_input(image), example["one_hot_class"]

    dataset = dataset.map(decode, num_parallel_calls=autotune, deterministic=not training)
    if cache:
        dataset = dataset.cache()
    if training:
        dataset = dataset.shuffle(2048, seed=seed, reshuffle_each_iteration=True).repeat()
    dataset = dataset.batch(batch_size, drop_remainder=training, num_parallel_calls=autotune)
    return dataset.prefetch(autotune)


def run(config: TrainConfig) -> dict:
    """Trains and saves the model; returns the final epoch's metrics and where things were written."""
    stats = read_stats(config.examples_dir)  # checks the input before the slow TensorFlow import
    image_size, num_classes = stats["image_size"], stats["num_classes"]
    train_count, validation_count = stats["counts"]["train"], stats["counts"]["validation"]
    import keras

    keras.utils.set_random_seed(config.seed)
    strategy = resolve_strategy(config.tpu)
    global_batch = config.per_replica_batch_size * strategy.num_replicas_in_sync
    steps_per_epoch = train_count // global_batch
    if steps_per_epoch < 1:
        raise UsageError(
            f"the train split of {config.examples_dir} has {train_count} examples, fewer than one global batch of "
            f"{global_batch}: lower --batch-size or add data"
        )
    cache = (train_count + validation_count) * image_size * image_size * 3 * 4 < CACHE_LIMIT_BYTES
    train_ds = make_dataset(
        config.examples_dir,
        "train",
        image_size,
        num_classes,
        global_batch,
        training=True,
        cache=cache,
        seed=config.seed,
    )
    validation_ds = None
    if validation_count:
        validation_ds = make_dataset(
            config.examples_dir, "validation", image_size, num_classes, global_batch, training=False, cache=cache
        )
    keras.mixed_precision.set_global_policy(config.precision)
    with strategy.scope():
        model = build_model(config.model_name, image_size, num_classes)
        model.compile(
            optimizer=keras.optimizers.Adam(config.learning_rate),
            loss="categorical_crossentropy",
            metrics=["accuracy"],
        )
    model.summary(print_fn=lambda line, **_: log.info(line))
    log.info(
        "training %s on %d images (%dx%d, %d classes): %d epochs of %d steps, global batch %d, %s",
        config.model_name,
        train_count,
        image_size,
        image_size,
        num_classes,
        config.epochs,
        steps_per_epoch,
        global_batch,
        config.precision,
    )
    started = time.monotonic()
    history = model.fit(
        train_ds,
        validation_data=validation_ds,
        epochs=config.epochs,
        steps_per_epoch=steps_per_epoch,
        verbose=2,
    )
    seconds = time.monotonic() - started
    keras.mixed_precision.set_global_policy("float32")

    os.makedirs(config.model_dir, exist_ok=True)
    model.save(os.path.join(config.model_dir, MODEL_FILE))
    model.save_weights(os.path.join(config.model_dir, WEIGHTS_FILE))
    model_config = {
        "model_name": config.model_name,
        "image_size": image_size,
        "num_classes": num_classes,
        "class_names": stats["class_names"],
        "precision": config.precision,
        "global_batch_size": global_batch,
        "replicas": strategy.num_replicas_in_sync,
        "strategy": type(strategy).__name__,
    }
    write_json(os.path.join(config.model_dir, MODEL_CONFIG_FILE), model_config)
    curves = {name: [float(v) for v in values] for name, values in history.history.items()}
    write_json(os.path.join(config.model_dir, HISTORY_FILE), {"epochs": config.epochs, "history": curves})
    final = {name: values[-1] for name, values in curves.items()}
    images_per_second = config.epochs * steps_per_epoch * global_batch / max(seconds, 1e-9)
    log.info("trained in %.1fs (%.0f images/s): %s", seconds, images_per_second, json.dumps(final))
    return {"final": final, "train_seconds": seconds, "images_per_second": images_per_second, **model_config}


def load_model_config(model_dir: str) -> dict:
    """Reads ``model_config.json``; raises ``UsageError`` when ``model_dir`` is not a trained model."""
    from components.storage import exists, read_json

    path = os.path.join(model_dir, MODEL_CONFIG_FILE)
    if not exists(path):
        raise UsageError(f"model dir {model_dir} has no {MODEL_CONFIG_FILE}: pass the train step's output")
    return read_json(path)
