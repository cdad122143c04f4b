"""The TFRecord schema every step agrees on: the "Keras on TPU" codelab's flowers format.

Fields: ``image`` (JPEG bytes), ``class`` (int64), ``label`` (bytes, the class name), ``size`` (int64[2]: height,
width) and ``one_hot_class`` (float list). Convert writes it, train / evaluate / export read it.
TensorFlow is imported inside the functions so that importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

SPLITS = ("train", "validation", "test")
SHARD_SUFFIX = ".tfrec"
STATS_FILE = "stats.json"


def split_pattern(examples_dir: str, split: str) -> str:
    """The glob that matches every shard of ``split`` under ``examples_dir``."""
    return f"{examples_dir.rstrip('/')}/{split}/*{SHARD_SUFFIX}"


def serialize_example(jpeg: bytes, class_index: int, label: str, size: Sequence[int], num_classes: int) -> bytes:
    """One serialized ``tf.train.Example`` in the codelab schema."""
    import tensorflow as tf

    one_hot = [0.0] * num_classes
    one_hot[class_index] = 1.0
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
        "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[class_index])),
        "label": tf.train.Feature(bytes_list=tf.train.BytesList(value=[label.encode("utf-8")])),
        "size": tf.train.Feature(int64_list=tf.train.Int64List(value=list(size))),
        "one_hot_class": tf.train.Feature(float_list=tf.train.FloatList(value=one_hot)),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def feature_spec(num_classes: int) -> dict:
    """The parsing spec for ``tf.io.parse_single_example``."""
    import tensorflow as tf

    return {
        "image": tf.io.FixedLenFeature([], tf.string),
        "class": tf.io.FixedLenFeature([], tf.int64),
        "label": tf.io.FixedLenFeature([], tf.string),
        "size": tf.io.FixedLenFeature([2], tf.int64),
        "one_hot_class": tf.io.FixedLenFeature([num_classes], tf.float32),
    }


def parse_example(serialized, num_classes: int) -> dict:
    """Parses one serialized example into a dict of tensors (graph-safe)."""
    import tensorflow as tf

    return tf.io.parse_single_example(serialized, feature_spec(num_classes))


def read_stats(examples_dir: str) -> dict:
    """Reads ``<examples_dir>/stats.json``; raises ``UsageError`` when the folder is not a conversion output."""
    from components.cli import UsageError
    from components.storage import exists, read_json

    path = f"{examples_dir.rstrip('/')}/{STATS_FILE}"
    if not exists(path):
        raise UsageError(f"examples dir {examples_dir} has no {STATS_FILE}: run the convert step into it first")
    return read_json(path)
