"""The TFRecord schema every step agrees on: the "Keras on TPU" codelab's flowers format.

Fields: ``image`` (JPEG bytes), ``class`` (int64), ``label`` (bytes, the class name), ``size`` (int64[2]: height,
width) and ``one_hot_class`` (float list). Convert writes it, train / evaluate / export read it. Convert also writes
``source`` (bytes: the image's file, URI or ``<array file>#<index>``), which the evaluation report names; it is
optional, since TFRecords adopted as they are (the codelab's among them) lack it.
TensorFlow is imported inside the functions so that importing this module stays cheap.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from components.artifacts.conversion import ExamplesStats

SPLITS = ("train", "validation", "test")
# what the examples hold: images (this schema), or texts (``text_feature_spec``); auto: recognised from the source
MODALITIES = ("auto", "image", "text")
SHARD_SUFFIX = ".tfrec"
STATS_FILE = "stats.json"
# how a conversion split its examples, recorded in its stats as ``split_method`` (none: 1); the data checks compare
# two versions split the same way (components.convert.split_keys)
SPLIT_METHOD = 2
SPLIT_METHODS = {
    1: "a hash of each file's bytes",
    2: "a hash of each image's perceptual key or each text's standardised words (near-copies in one split)",
}
QUARANTINE_FILE = "quarantine.jsonl"  # a record a line for each item that could not be converted, with its reason


def reason_kind(reason: str) -> str:
    """The kind of a quarantine record's reason: its words before the first colon (``not an image file``)."""
    return reason.split(":")[0]


# what a failed conversion leaves in its output folder beside what it wrote: no step reads that folder, and the next
# conversion into it takes it over
FAILED_FILE = "conversion-failed.json"


def split_pattern(examples_dir: str, split: str) -> str:
    """The glob that matches every shard of ``split`` under ``examples_dir``."""
    return f"{examples_dir.rstrip('/')}/{split}/*{SHARD_SUFFIX}"


def split_files(examples_dir: str, split: str) -> list[str]:
    """The TFRecord files of ``split``: those ``stats.json`` lists when the convert step adopted existing TFRecords
    as they are, else the shards under ``<examples_dir>/<split>/``."""
    from components.artifacts.conversion import ExamplesStats
    from components.storage import glob

    stats = ExamplesStats.read_if_any(examples_dir)
    listed = stats.files if stats is not None else None
    return list(listed.get(split, [])) if listed is not None else glob(split_pattern(examples_dir, split))


def serialize_example(
    jpeg: bytes,
    class_index: int,
    label: str,
    size: Sequence[int],
    num_classes: int,
    source: str = "",
    source_size: Sequence[int] = (),
) -> bytes:
    """One serialized ``tf.train.Example`` in the codelab schema, with ``source`` (where the image came from) and
    ``source_size`` (its width and height, as it is oriented) when given.

    Written straight in the protobuf wire format (what ``tf.train.Example.SerializeToString`` produces, fields in
    name order), so that the conversion's workers need no TensorFlow import; ``tests/components/test_convert.py``
    parses the result with TensorFlow.
    """
    one_hot = [0.0] * num_classes
    one_hot[class_index] = 1.0
    feature = {
        "class": _int64_feature([class_index]),
        "image": _bytes_feature(jpeg),
        "label": _bytes_feature(label.encode("utf-8")),
        "one_hot_class": _delimited(0x12, _delimited(0x0A, struct.pack(f"<{num_classes}f", *one_hot))),
        "size": _int64_feature(size),
    }
    if source:
        feature[SOURCE_FEATURE] = _bytes_feature(source.encode("utf-8"))
    if source_size:
        feature[SOURCE_SIZE_FEATURE] = _int64_feature(source_size)
    entries = b"".join(
        _delimited(0x0A, _delimited(0x0A, name.encode()) + _delimited(0x12, value)) for name, value in feature.items()
    )
    return _delimited(0x0A, entries)


class RecordError(ValueError):
    """A record or file that does not hold the codelab schema."""


def masked_crc(crc: int) -> int:
    """TFRecord's masked form of a CRC-32C (what each record stores beside its length and its data)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record_bytes(data: bytes, crc: int) -> bytes:
    """One TFRecord record of ``data``, whose CRC-32C is ``crc``: its length, the length's CRC, the data, its CRC."""
    import google_crc32c

    length = struct.pack("<Q", len(data))
    head = struct.pack("<I", masked_crc(google_crc32c.value(length)))
    return length + head + data + struct.pack("<I", masked_crc(crc))


def read_records(handle):
    """The records of a TFRecord file, checking both CRCs of each (as TensorFlow's reader does)."""
    import google_crc32c

    def masked(data: bytes) -> int:
        return masked_crc(google_crc32c.value(data))

    while True:
        header = handle.read(12)
        if not header:
            return
        if len(header) < 12:
            raise RecordError("truncated record header")
        (length,) = struct.unpack("<Q", header[:8])
        if struct.unpack("<I", header[8:])[0] != masked(header[:8]):
            raise RecordError("corrupt record length (CRC mismatch)")
        data = handle.read(length)
        footer = handle.read(4)
        if len(data) < length or len(footer) < 4:
            raise RecordError("truncated record")
        if struct.unpack("<I", footer)[0] != masked(data):
            raise RecordError("corrupt record data (CRC mismatch)")
        yield data


def bytes_features(serialized: bytes, names: Sequence[str]) -> dict[str, bytes]:
    """The first value of each bytes feature ``names`` of one serialized ``tf.train.Example``, read from the wire
    format without TensorFlow (as ``serialize_example`` writes it); a feature absent or of another kind is left out.
    """
    found = {}
    for name, kind, payload in _features(serialized, names):
        values = [value for tag, value in _fields(payload) if tag == 1] if kind == 1 else []  # BytesList.value (1)
        if values:
            found[name] = values[0]
    return found


def int64_features(serialized: bytes, names: Sequence[str]) -> dict[str, list[int]]:
    """The values of each int64 feature ``names`` of one serialized ``tf.train.Example``, without TensorFlow: packed,
    as TensorFlow and ``serialize_example`` write them; a feature absent or of another kind is left out."""

    def signed(value: int) -> int:
        return value - (1 << 64) if value >= 1 << 63 else value

    found = {}
    for name, kind, payload in _features(serialized, names):
        if kind != 3:
            continue
        values = []
        for tag, value in _fields(payload, varints=True):  # Int64List.value (1): packed, or a varint each
            if tag == 1 and isinstance(value, int):
                values.append(signed(value))
            elif tag == 1:
                position = 0
                while position < len(value):
                    number, position = _read_varint(value, position)
                    values.append(signed(number))
        found[name] = values
    return found


def _features(serialized: bytes, names: Sequence[str]):
    """(name, the kind's field number: 1 bytes, 2 float, 3 int64, its list's payload) of the features ``names``."""
    wanted = set(names)
    features = b"".join(payload for number, payload in _fields(serialized) if number == 1)  # Example.features
    for number, pair in _fields(features):  # Features.feature (1): its map entries
        entry = dict(_fields(pair)) if number == 1 else {}  # key (1), value (2)
        name = entry.get(1, b"").decode("utf-8")
        if name in wanted:
            for kind, payload in _fields(entry.get(2, b"")):  # Feature: its one list
                yield name, kind, payload


def _fields(message: bytes, varints: bool = False):
    """(field number, payload) of each length-delimited field of a protobuf message, and with ``varints`` (field
    number, value) of each varint field too; the other wire types skipped."""
    position, end = 0, len(message)
    while position < end:
        key, position = _read_varint(message, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 2:
            length, position = _read_varint(message, position)
            if position + length > end:
                raise RecordError("truncated protobuf field")
            yield number, message[position : position + length]
            position += length
        elif wire_type == 0:
            value, position = _read_varint(message, position)
            if varints:
                yield number, value
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        else:
            raise RecordError(f"protobuf wire type {wire_type} is not one tf.train.Example uses")


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise RecordError("truncated protobuf varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # int64 as protobuf encodes it: negatives take ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2) with a one-byte tag."""
    return bytes([tag]) + _varint(len(payload)) + payload


def _bytes_feature(value: bytes) -> bytes:  # Feature.bytes_list (1) -> BytesList.value (1)
    return _delimited(0x0A, _delimited(0x0A, value))


def _int64_feature(values: Sequence[int]) -> bytes:  # Feature.int64_list (3) -> Int64List.value (1), packed
    return _delimited(0x1A, _delimited(0x0A, b"".join(_varint(int(v)) for v in values)))


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


def text_feature_spec(sequence_length: int, num_classes: int) -> dict:
    """The parsing spec of the text examples (``components.convert.text``): ``tokens``, ``text``, ``class``,
    ``label``, ``one_hot_class``."""
    import tensorflow as tf

    return {
        "tokens": tf.io.FixedLenFeature([sequence_length], tf.int64),
        "text": tf.io.FixedLenFeature([], tf.string),
        "class": tf.io.FixedLenFeature([], tf.int64),
        "label": tf.io.FixedLenFeature([], tf.string),
        "one_hot_class": tf.io.FixedLenFeature([num_classes], tf.float32),
    }


# optional: absent from adopted TFRecords
SOURCE_FEATURE = "source"
SOURCE_SIZE_FEATURE = "source_size"  # [width, height] of the source image, as its EXIF orientation turns it


def source_feature_spec() -> dict:
    """The parsing spec of the optional ``source`` feature ("" where a record lacks it)."""
    import tensorflow as tf

    return {SOURCE_FEATURE: tf.io.FixedLenFeature([], tf.string, default_value="")}


def parse_example(serialized, num_classes: int) -> dict:
    """Parses one serialized example into a dict of tensors (graph-safe)."""
    import tensorflow as tf

    return tf.io.parse_single_example(serialized, feature_spec(num_classes))


def read_stats(examples_dir: str) -> ExamplesStats:
    """Reads ``<examples_dir>/stats.json``; raises ``UsageError`` when the folder is not a conversion output, or one
    an older version of the pipeline made."""
    from components.artifacts.conversion import ExamplesStats
    from components.cli import UsageError
    from components.storage import exists, read_json

    failed = f"{examples_dir.rstrip('/')}/{FAILED_FILE}"
    if exists(failed):
        try:
            reason = read_json(failed)["reason"]
        except (ValueError, KeyError, TypeError):  # (an empty marker: its record could not be written, a full disk)
            reason = "its reason could not be recorded"
        raise UsageError(
            f"examples dir {examples_dir} holds a conversion that failed ({reason}): convert again into it"
        )
    return ExamplesStats.read(examples_dir)


# a class with fewer examples than this in a split is listed in stats.json, the run-local summary and the report
SMALL_CLASS_EXAMPLES = 5


def check_class_count(class_names, source: str) -> None:
    """A classifier needs two classes: one class would train to "accuracy 1.0" and be blessed, saying nothing."""
    from components.cli import UsageError

    if len(class_names) < 2:
        only = f"one class ({class_names[0]})" if class_names else "no class"
        raise UsageError(f"data path {source} has {only}: a classifier needs at least 2 classes (one folder each)")


def check_classes_found(listing, source: str) -> None:
    """Each class ``--classes`` names has an example in ``listing`` (items ``(where, class index, ...)``): a class the
    source lacks would give the model an output it never learns, and the evaluation would not bless it."""
    from components.cli import UsageError

    found = {item[1] for item in listing.items}
    missing = [name for index, name in enumerate(listing.class_names) if index not in found]
    if missing:
        raise UsageError(
            f"data path {source} has no example of {', '.join(missing)}, named in --classes: add "
            f"{'its' if len(missing) == 1 else 'their'} examples, or leave {'it' if len(missing) == 1 else 'them'} "
            "out of --classes"
        )


def small_classes(per_class: dict) -> dict:
    """{split: {class: count}} for the classes below ``SMALL_CLASS_EXAMPLES`` in a split (empty splits left out)."""
    found = {
        split: {name: count for name, count in counts.items() if count < SMALL_CLASS_EXAMPLES}
        for split, counts in per_class.items()
    }
    return {split: names for split, names in found.items() if names}
