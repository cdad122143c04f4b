"""Existing TFRecords in the codelab schema (such as the public ``tfrecords-jpeg-192x192-2`` flowers set), validated
and used as they are: no reconversion, no copy.

Every record of every file is read (CRC-checked) and checked against the schema: the five features with their types
and lengths, one square image size throughout, class ids within ``one_hot_class`` and one label per class id; the
first image of each file is decoded to check it has the size it claims. Whole files go to splits: by the split a file
names (``train/``, ``validation-00.tfrec``, ...) when every file names one, otherwise by a hash of the file name with
the configured fractions. ``stats.json`` lists each split's files; the train, evaluate and export steps read those.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from apache_beam.io.filesystems import FileSystems

from components.artifacts.conversion import ExamplesStats
from components.cli import UsageError, one_line
from components.convert.common import summarize_counts
from components.convert.listing import fingerprint_of, match_tfrecords
from components.schema import SPLITS, RecordError, check_class_count, read_records
from components.storage import write_atomically

log = logging.getLogger(__name__)

EXPECTED = "the codelab schema: image (JPEG bytes), class (int64), label (bytes), size (int64[2]), one_hot_class"
FIX = "convert the original images instead (--source <folder>|<manifest.csv>)"
SPLIT_NAMES = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "test": "test",
}


@dataclass
class FileSummary:
    path: str
    records: int = 0
    per_class: Counter = field(default_factory=Counter)
    labels: dict = field(default_factory=dict)  # class id -> label
    sizes: set = field(default_factory=set)
    num_classes: set = field(default_factory=set)
    digests: list = field(default_factory=list)


def check_file(path: str) -> FileSummary:
    """Reads and checks every record of one file; raises ``UsageError`` naming the file, the record and the fix."""
    import tensorflow as tf

    summary = FileSummary(path)
    opened = False
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            opened = True
            for data in read_records(handle):
                example = tf.train.Example.FromString(data)
                class_id, label, size, num_classes, image = _fields(example)
                if summary.labels.setdefault(class_id, label) != label:
                    raise RecordError(f"class {class_id} is labelled both {summary.labels[class_id]!r} and {label!r}")
                if not summary.records:
                    _check_image(image, size)
                summary.per_class[class_id] += 1
                summary.sizes.add(size)
                summary.num_classes.add(num_classes)
                summary.digests.append(hashlib.sha256(image).digest())
                summary.records += 1
    except Exception as err:  # a CRC or protobuf error, a missing feature, an unreadable file
        where = f"record {summary.records + 1}" if opened else "cannot be read"
        raise UsageError(f"TFRecord {path}, {where}: {one_line(err)}: expected {EXPECTED}; or {FIX}") from None
    if not summary.records:
        raise UsageError(f"TFRecord {path} holds no records: remove it from the source, or {FIX}")
    return summary


def _fields(example):
    features = example.features.feature

    def values(name: str, kind: str, count: int | None):
        if name not in features or features[name].WhichOneof("kind") != kind:
            raise RecordError(f"feature {name!r} is missing or not a {kind}")
        found = list(getattr(features[name], kind).value)
        if count is not None and len(found) != count:
            raise RecordError(f"feature {name!r} has {len(found)} values, expected {count}")
        return found

    (image,) = values("image", "bytes_list", 1)
    (class_id,) = values("class", "int64_list", 1)
    (label,) = values("label", "bytes_list", 1)
    height, width = values("size", "int64_list", 2)
    one_hot = values("one_hot_class", "float_list", None)
    if height != width:
        raise RecordError(f"image size {height}x{width} is not square")
    if not 0 <= class_id < len(one_hot):
        raise RecordError(f"class {class_id} is outside one_hot_class's {len(one_hot)} classes")
    return class_id, label.decode("utf-8", "replace"), height, len(one_hot), image


def _check_image(image: bytes, size: int) -> None:
    from PIL import Image

    try:
        decoded = Image.open(io.BytesIO(image))
    except Exception as err:
        raise RecordError(f"image is not a decodable image ({one_line(err)})") from None
    if decoded.format != "JPEG" or decoded.size != (size, size):
        raise RecordError(f"image is a {decoded.format} of {decoded.size[0]}x{decoded.size[1]}, size says {size}")


def assign_file_splits(paths: list[str], validation_fraction: float, test_fraction: float) -> dict[str, list[str]]:
    """Whole files to splits: the split each file names when all name one, else by a hash of the file name."""
    named = {path: _named_split(path) for path in paths}
    if all(named.values()):
        return {split: sorted(p for p in paths if named[p] == split) for split in SPLITS}
    ordered = sorted(paths, key=lambda p: hashlib.sha256(p.rsplit("/", 1)[-1].encode()).digest())
    counts = {}
    for split, fraction in (("test", test_fraction), ("validation", validation_fraction)):
        counts[split] = max(1, round(len(paths) * fraction)) if fraction > 0 else 0
    if len(paths) - counts["test"] - counts["validation"] < 1:
        raise UsageError(
            f"TFRecord source has {len(paths)} files, too few to split by file with --validation-fraction "
            f"{validation_fraction} and --test-fraction {test_fraction}: name the files train-*/validation-*/test-*, "
            f"lower the fractions, or {FIX}"
        )
    test, rest = ordered[: counts["test"]], ordered[counts["test"] :]
    validation, train = rest[: counts["validation"]], rest[counts["validation"] :]
    return {"train": sorted(train), "validation": sorted(validation), "test": sorted(test)}


def _named_split(path: str) -> str:
    for part in reversed(path.split("/")[-2:]):
        match = re.match(r"([a-z]+)", part.lower())
        if match and match.group(1) in SPLIT_NAMES:
            return SPLIT_NAMES[match.group(1)]
    return ""


def validate_files(metadata: list, threads: int, source: str) -> dict:
    """Each matched file's ``check_file`` summary, by path, with a progress line per file."""
    paths = [m.path for m in metadata]
    log.info(
        "validating %d TFRecord files (%.0f MB) of %s", len(paths), sum(m.size_in_bytes for m in metadata) / 1e6, source
    )
    summaries = {}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for done, summary in enumerate(pool.map(check_file, paths), start=1):
            summaries[summary.path] = summary
            log.info("validated %d/%d files (%s: %d records)", done, len(paths), summary.path, summary.records)
    return summaries


def shared_facts(summaries: dict, config) -> tuple[int, list[str]]:
    """The image size and class names (as many as the records' classes) that every file agrees on; a one-line error
    where they differ."""
    sizes = set().union(*(s.sizes for s in summaries.values()))
    widths = set().union(*(s.num_classes for s in summaries.values()))
    if len(sizes) != 1 or len(widths) != 1:
        raise UsageError(
            f"TFRecord source {config.source} mixes image sizes {sorted(sizes)} or class counts {sorted(widths)}: "
            f"every record must have the same; {FIX}"
        )
    (image_size,), (num_classes,) = sizes, widths
    labels: dict[int, str] = {}
    for summary in summaries.values():
        for class_id, label in summary.labels.items():
            if labels.setdefault(class_id, label) != label:
                raise UsageError(
                    f"TFRecord {summary.path}: class {class_id} is {label!r} here and {labels[class_id]!r} elsewhere; "
                    f"{FIX}"
                )
    class_names = [labels.get(i, str(i)) for i in range(num_classes)]
    check_class_count(class_names, config.source)
    if config.classes and list(config.classes) != class_names:
        raise UsageError(
            f"TFRecord source {config.source} has classes {', '.join(class_names)}, not --classes "
            f"{', '.join(config.classes)}: drop --classes, or {FIX}"
        )
    return image_size, class_names


def duplicate_records(paths: list[str], summaries: dict, split_of: dict) -> list[dict]:
    """A record for each image whose bytes appeared earlier, marked ``cross_split`` when the two are in two splits."""
    seen, duplicates = {}, []
    for path in paths:
        for index, digest in enumerate(summaries[path].digests):
            where = f"{path}#{index}"
            if digest in seen:
                first = seen[digest]
                record = {"path": where, "duplicate_of": first}
                if split_of[first.rsplit("#", 1)[0]] != split_of[path]:
                    record["cross_split"] = True
                duplicates.append(record)
            else:
                seen[digest] = where
    return duplicates


def adopt(config, threads: int) -> dict:
    """Validates the TFRecords that ``config.source`` matches and writes ``stats.json`` pointing at them."""
    started = time.monotonic()
    metadata = match_tfrecords(config.source)
    paths = [m.path for m in metadata]
    summaries = validate_files(metadata, threads, config.source)
    image_size, class_names = shared_facts(summaries, config)
    files = assign_file_splits(paths, config.validation_fraction, config.test_fraction)
    split_of = {path: split for split in SPLITS for path in files[split]}
    found = (((split, i), n) for path, split in split_of.items() for i, n in summaries[path].per_class.items())
    stats = summarize_counts(found, class_names)
    duplicates = duplicate_records(paths, summaries, split_of)
    leaks = sum(1 for record in duplicates if record.get("cross_split"))
    if leaks:
        log.warning(
            "%d images are in two splits of %s (see duplicates.jsonl); %s to drop them", leaks, config.source, FIX
        )
    stats |= {
        "quarantined": 0,
        "duplicates": len(duplicates),
        "duplicates_in_two_splits": leaks,
        "fingerprint": fingerprint_of(metadata),
        "fingerprint_basis": "sha256 over the TFRecord files' paths, sizes and modification times, and the artifacts' "
        "format versions",
        "modality": "image",
        "image_size": image_size,
        "source": config.source,
        "adopted": True,  # the files below are used as they are: nothing was converted or copied
        "files": files,
        "shards": {split: len(files[split]) for split in SPLITS},
        "input_bytes": sum(m.size_in_bytes for m in metadata),
    }
    output_dir = config.output_dir.rstrip("/")
    write_atomically(f"{output_dir}/quarantine.jsonl", b"")
    lines = "".join(json.dumps(record, sort_keys=True) + "\n" for record in duplicates)
    write_atomically(f"{output_dir}/duplicates.jsonl", lines.encode())
    stats = ExamplesStats(**stats).write(output_dir)
    log.info(
        "adopted %d records in %d files in %.1fs: %s",
        stats["num_examples"],
        len(paths),
        time.monotonic() - started,
        ", ".join(f"{split} {stats['counts'][split]} ({len(files[split])} files)" for split in SPLITS),
    )
    return stats
