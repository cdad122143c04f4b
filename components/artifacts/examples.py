"""The examples artifact, read: the convert step's TFRecords as a ``tf.data`` input pipeline with static shapes.

Train, evaluate and export all read the examples through ``make_dataset``; the format itself (features, shard
names, ``stats.json``) is ``components.schema``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from components.cli import UsageError, one_line
from components.schema import split_files, split_pattern

log = logging.getLogger(__name__)

SHUFFLE_BUFFER = 2048


@dataclass(frozen=True)
class Reading:
    """How one modality's examples are read (``components.modalities``: ``Modality.reading``): the features parsed
    (and looked for in the first file), what one parsed example becomes, and the random change of a training example.

    ``element(parsed, sources)``: ``(input, one_hot_class)``, and with ``sources`` where the input came from (an
    image's file, "" for records without it; a text's own words). ``source_spec``: the features parsed besides
    ``spec`` when the sources are asked for (they may be missing from a record). ``augment``: ``(input, label) ->
    (input, label)`` for ``--augment``, None where there is none. ``pictures``: whether an input is a picture (a
    report shows the misclassified ones)."""

    spec: dict
    element: Callable
    source_spec: dict = field(default_factory=dict)
    augment: Callable | None = None
    pictures: bool = True


def make_dataset(
    examples_dir: str,
    split: str,
    reading: Reading,
    batch_size: int,
    training: bool,
    cache: bool = False,
    augment: bool = False,
    seed: int | None = None,
    drop_remainder: bool | None = None,
    shard: tuple[int, int] = (1, 0),
    take: int | None = None,
    sources: bool = False,
):
    """A batched ``tf.data.Dataset`` of ``reading``'s elements with fully static shapes: ``(image uint8,
    one_hot_class)`` for images (the models scale the pixels themselves, ``components.models``), ``(tokens int32
    [sequence_length], one_hot_class)`` for texts; with ``sources``, where each came from as a third item.

    Shards are read interleaved in parallel; parsing and decoding run with AUTOTUNE parallelism. Training data is
    shuffled, repeated and batched with ``drop_remainder`` (a static batch shape, as TPUs need); evaluation data is
    read once, in order, keeping the last partial batch unless ``drop_remainder`` (static shapes for TPUs and for
    batches split across devices). ``augment``: ``reading.augment`` on each training example, where it has one.

    ``shard`` = (processes, this process's index): on a multi-host slice each host reads its own share, whole files
    when there are at least as many files as hosts, else every ``processes``-th record. ``take``: only the first
    ``take`` records of the split (before sharding), so that every host runs the same number of evaluation steps.
    """
    import tensorflow as tf

    autotune = tf.data.AUTOTUNE
    files = split_files(examples_dir, split)
    if not files:
        expected = split_pattern(examples_dir, split)
        raise UsageError(f"examples dir {examples_dir} has no {split} shards: expected {expected}")
    check_schema(files[0], reading.spec)
    parsed = {**reading.spec, **reading.source_spec} if sources else reading.spec

    def decode(serialized):
        return reading.element(tf.io.parse_single_example(serialized, parsed), sources)

    dataset = records(files, split, training, seed, shard, take).map(decode, num_parallel_calls=autotune)
    if cache:
        dataset = dataset.cache()
    if training:
        dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True).repeat()
        if augment and reading.augment is not None:
            dataset = dataset.map(reading.augment, num_parallel_calls=autotune)
    drop_remainder = training if drop_remainder is None else drop_remainder
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=autotune)
    return dataset.prefetch(autotune)


def records(files: list[str], split: str, training: bool, seed: int | None, shard: tuple[int, int], take: int | None):
    """The serialized records of a split's ``files``: this process's share of them (``make_dataset``'s ``shard``),
    read interleaved in a fixed order, shuffled by file when ``training``."""
    import tensorflow as tf

    processes, index = shard
    by_file = processes > 1 and take is None and len(files) >= processes
    if by_file:
        log.info(
            "process %d of %d reads %d of the %d %s files",
            index,
            processes,
            len(files[index::processes]),
            len(files),
            split,
        )
        files = files[index::processes]
    elif processes > 1:
        log.info("process %d of %d reads every %d-th %s record", index, processes, processes, split)
    files_ds = tf.data.Dataset.from_tensor_slices(files)
    if training:
        files_ds = files_ds.shuffle(len(files), seed=seed)
    options = tf.data.Options()
    options.deterministic = True  # the same seed gives the same batches whatever the threads do (docs/training.md)
    dataset = files_ds.interleave(
        tf.data.TFRecordDataset, cycle_length=min(len(files), 16), num_parallel_calls=tf.data.AUTOTUNE
    ).with_options(options)
    if take is not None:
        dataset = dataset.take(take)
    if processes > 1 and not by_file:
        dataset = dataset.shard(processes, index)
    return dataset


def decode_image(encoded, image_size: int):
    """An example's ``image`` (a JPEG the conversion wrote) as the model trains on it: ``[size, size, 3]`` uint8."""
    import tensorflow as tf

    # the accurate IDCT, as the conversion and the serving graph decode (TensorFlow's default differs)
    image = tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE")
    return tf.reshape(image, [image_size, image_size, 3])  # static shape: fails loudly on a wrong size


def first_images(examples_dir: str, split: str, reading: Reading, count: int):
    """The first ``count`` inputs (images or token rows) of ``split`` in order, as one NumPy batch (the same on
    every call: train's reference predictions and export's cross-backend check compare on them)."""
    images, _ = next(iter(make_dataset(examples_dir, split, reading, count, training=False, take=count)))
    return images.numpy()


def augment_image(image, label):
    """Random horizontal flip, brightness and saturation of uint8 pixels (computed in [0, 1], rounded back)."""
    import tensorflow as tf

    image = tf.image.convert_image_dtype(tf.image.random_flip_left_right(image), tf.float32)
    image = tf.image.random_brightness(image, 0.1)
    image = tf.image.random_saturation(image, 0.8, 1.2)
    return tf.image.convert_image_dtype(tf.clip_by_value(image, 0.0, 1.0), tf.uint8, saturate=True), label


def check_schema(path: str, spec: dict) -> None:
    """Reads the first record of ``path``; ``UsageError`` names the file and the features it lacks."""
    import tensorflow as tf

    for serialized in tf.data.TFRecordDataset(path).take(1):
        example = tf.train.Example.FromString(serialized.numpy())
        missing = sorted(set(spec) - set(example.features.feature))
        if missing:
            raise UsageError(
                f"TFRecord file {path} does not match the schema: missing feature(s) {', '.join(missing)} "
                "(convert the images with `python -m components.convert`)"
            )
        for name, feature_spec in spec.items():
            kind = example.features.feature[name].WhichOneof("kind")
            expected = {tf.string: "bytes_list", tf.int64: "int64_list", tf.float32: "float_list"}[feature_spec.dtype]
            if kind != expected:
                raise UsageError(f"TFRecord file {path}: feature {name} is a {kind}, expected a {expected}")


def client_files(examples_dir: str, split: str, num_classes: int, counts: dict, chunk: int):
    """The examples of ``split`` whose source is a file a client could send, ``chunk`` at a time: yields lists of
    (path, the file's bytes, the example's TFRecord JPEG, true class id), in the split's order (the last list may be
    shorter). ``counts`` gets what is left out and why:
    ``without_file`` (a NumPy array's rows, records adopted as they were), ``missing_files`` (gone since the
    conversion) and ``refused_formats`` (what the serving graph refuses, ``components.imaging.unserved_reason``)."""
    import re

    import numpy as np
    import tensorflow as tf

    from components.imaging import unserved_reason
    from components.schema import SOURCE_FEATURE, feature_spec, source_feature_spec
    from components.storage import exists, open_read

    counts.update(without_file=0, missing_files=0, refused_formats={})
    spec = {**feature_spec(num_classes), **source_feature_spec()}
    records = tf.data.TFRecordDataset(split_files(examples_dir, split)).map(
        lambda serialized: tf.io.parse_single_example(serialized, spec)
    )
    rows = []
    for example in records.as_numpy_iterator():
        path = example[SOURCE_FEATURE].decode()
        if not path or re.search(r"\.npz#\d+$", path):
            counts["without_file"] += 1
            continue
        if not exists(path):
            counts["missing_files"] += 1
            continue
        with open_read(path) as handle:
            content = handle.read()
        reason = unserved_reason(content)
        if reason:
            counts["refused_formats"][reason] = counts["refused_formats"].get(reason, 0) + 1
            continue
        rows.append((path, content, example["image"], int(np.argmax(example["one_hot_class"]))))
        if len(rows) == chunk:
            yield rows
            rows = []
    if rows:
        yield rows


@contextlib.contextmanager
def damaged_shards_named(examples_dir: str) -> Iterator[None]:
    """A damaged record (a truncated shard, a CRC mismatch), which TensorFlow reports without naming its file, as
    one line that names the shard: every shard of ``examples_dir`` is read again, its CRCs checked."""
    try:
        yield
    except Exception as err:
        if not any(type(cause).__name__ == "DataLossError" for cause in (err, err.__cause__, err.__context__)):
            raise
        raise UsageError(
            damaged_shard(examples_dir)
            or f"examples dir {examples_dir} holds a damaged record ({one_line(err)}): convert the data again"
        ) from None


def damaged_shard(examples_dir: str) -> str | None:
    """One line naming the first shard of ``examples_dir`` whose records do not read back whole; None if all do."""
    from components.schema import SPLITS, RecordError, read_records
    from components.storage import open_read

    for split in SPLITS:
        for path in split_files(examples_dir, split):
            try:
                with open_read(path) as handle:
                    for _ in read_records(handle):
                        pass
            except RecordError as err:
                return f"examples shard {path} is damaged ({err}): convert the data again into a new folder"
    return None
