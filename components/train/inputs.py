"""What training reads: the examples' facts (``Examples``), the model's code (``ModelCode``), the training and
validation datasets with their static batches, what a text model adapts to, and the reference predictions export
compares backends on."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from components.artifacts.conversion import ExamplesStats
from components.artifacts.examples import first_images, make_dataset
from components.modalities import named, reading_of
from components.models import LoadedModel, ModelSpec, check_modality, load, resolve_hparams
from components.train.config import TrainConfig

log = logging.getLogger(__name__)


BATCH_MULTIPLE = 8  # TPU cores work on 8x128 tiles: per-device batches in multiples of 8 keep them full


CACHE_LIMIT_BYTES = 2 * 1024**3  # decoded images are cached in memory when they take less than this


REFERENCE_EXAMPLES = 128  # validation images whose probabilities export compares across backends


def round_up_batch(per_replica_batch_size: int) -> int:
    """The per-device batch rounded up to a multiple of 8."""
    return math.ceil(per_replica_batch_size / BATCH_MULTIPLE) * BATCH_MULTIPLE


def validation_batching(count: int, replicas: int, global_batch: int, static: bool) -> tuple[int, int]:
    """(batch size, examples used) for validation while training. Static batches (TPUs, several devices) must split
    evenly across devices, so the remainder is left out; on one device every example is used."""
    if not static:
        return min(global_batch, count), count
    batch = min(global_batch, count // replicas * replicas)
    return batch, (count // batch * batch if batch else 0)


def validation_dataset(examples_dir: str, stats: ExamplesStats, placement, global_batch: int, cache: bool):
    """The dataset validation reads while training, or None when there are too few examples: each example once an
    epoch, in batches of a known count, so that a compiled call of several steps ends where the pass does. On several
    hosts, each reads its share of the same first examples, and all run the same number of steps."""
    import tensorflow as tf

    count = stats.counts["validation"]
    static = placement.devices > 1 or placement.accelerator == "tpu"
    batch, used = validation_batching(count, placement.devices, global_batch, static)
    if not used:
        log.info("no validation during training: %d validation examples for %d devices", count, placement.devices)
        return None
    if used < count:
        log.info("validating on %d of %d examples per epoch (static batches of %d)", used, count, batch)
    dataset = make_dataset(
        examples_dir,
        "validation",
        reading_of(stats),
        batch // placement.processes,
        training=False,
        cache=cache,
        drop_remainder=static,
        shard=(placement.processes, placement.process_index),
        take=used if placement.processes > 1 else None,
    )
    # (Keras reads a pass of known length anew each epoch; given a count of steps over a repeated pass, it reads whole
    # calls of --steps-per-execution steps, past the pass's end)
    return dataset.apply(tf.data.experimental.assert_cardinality(math.ceil(used / batch)))


def steps_per_call(requested: int, steps_per_epoch: int) -> int:
    """The training steps of one compiled call: the most, up to ``requested``, that divide the epoch's steps. The
    training pass repeats without end, and Keras runs whole calls, so a call that crossed the epoch's end would train
    steps of the next epoch in this one."""
    return max(count for count in range(1, min(requested, steps_per_epoch) + 1) if steps_per_epoch % count == 0)


def datasets(config: TrainConfig, examples: Examples, placement, global_batch: int):
    """(the training dataset, each process's share of the global batch; the validation dataset)."""
    counts = examples.stats.counts
    cache = (counts["train"] + counts["validation"]) * math.prod(examples.shape) * 4 < CACHE_LIMIT_BYTES
    shard = (placement.processes, placement.process_index)
    train_ds = make_dataset(
        config.examples_dir,
        "train",
        reading_of(examples.stats),
        global_batch // placement.processes,
        training=True,
        cache=cache,
        augment=config.augment,
        seed=config.seed,
        shard=shard,
    )
    validation_ds = validation_dataset(config.examples_dir, examples.stats, placement, global_batch, cache)
    if placement.accelerator == "cpu":
        train_ds, validation_ds = (without_autotuning(d) if d is not None else None for d in (train_ds, validation_ds))
    return train_ds, validation_ds


def without_autotuning(dataset):
    """``dataset`` without tf.data's autotuning: its AUTOTUNE parallelism is then a fixed default (the cores, at most
    16) and its prefetch buffers still grow as they run dry. The autotuning thread of an iterator waits out its
    period, which doubles up to a minute, before the iterator can be deleted: at the end of ``fit``, each of its two
    iterators could hold the train step for that long (the demo on 2 cores: 9 to 18 s after 30 s of training, in one
    run of four). On the CPU the pipeline shares the cores with the model, whose work autotuning would give them to
    anyway; on accelerators it keeps tuning, and a minute at the end of a long training is not worth its
    throughput."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


@dataclass(frozen=True)
class Examples:
    """What training needs to know of the examples, read before the slow framework imports."""

    stats: ExamplesStats
    modality: str
    num_classes: int
    shape: tuple
    vocabulary: list | None  # a text model's tokens, which its ids index
    spec: ModelSpec  # what the model's builder is given


def class_counts(examples: Examples) -> list:
    """The training examples of each class."""
    return list(examples.stats.per_class.get("train", {}).values())


@dataclass(frozen=True)
class ModelCode:
    """The model's builder, loaded, and the hyperparameters it is built with (every one, defaults included)."""

    loaded: LoadedModel
    hparams: dict


def load_model_code(config: TrainConfig, examples: Examples) -> ModelCode:
    """The builder of ``config.model_name`` (``auto`` resolved before), checked against the examples, with its
    hyperparameters: after the backend is chosen, since a model file of one's own imports Keras."""
    loaded = load(config.model_name)
    check_modality(loaded, examples.modality, config.examples_dir)
    where = f"the examples' image size ({config.examples_dir})"
    named(examples.modality).check_model_takes(loaded, examples.stats, where)
    return ModelCode(loaded, resolve_hparams(loaded, config.hparams))


def reference_predictions(model, examples_dir: str, stats: ExamplesStats, placement):
    """The trained model's probabilities on the first validation images, computed by the training backend (None on
    several hosts, where a prediction would need every host's part of the batch)."""
    import numpy as np

    count = min(REFERENCE_EXAMPLES, stats.counts["validation"]) // placement.devices * placement.devices
    if placement.processes > 1 or not count:
        return None
    images = first_images(examples_dir, "validation", reading_of(stats), count)
    with placement.scope():
        return np.asarray(model.predict(images, batch_size=count, verbose=0), dtype=np.float32)
