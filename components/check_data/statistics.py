"""The statistics of one data version (a convert step's output), as the data checks compare them.

``data_stats.json`` holds the counts per split and class, the quarantine's size and reasons, and fine histograms:
for images the brightness and contrast of each example after the resize, and the sources' formats; for texts the
token counts, the truncated share and the out-of-vocabulary share. ``near_duplicates.npz`` holds, per split, what
finds an example's copies: a 16x16 grey thumbnail of each image (re-encodings of one picture agree to a cosine
similarity of 0.9989 or more, distinct handwritten digits to 0.9961 at most: ``bench/near_copies.py``), or a hash of
each text after standardisation.

The two files go with the model trained on the version (the register step copies them into the version's folder),
so that a later run finds the statistics of the data that the model in service learned from.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from collections import Counter

import numpy as np

from components.artifacts.conversion import ExamplesStats
from components.artifacts.data_statistics import NEAR_DUPLICATES_NAME, DataStatistics
from components.modalities import modality_of
from components.modalities.text import TEXT
from components.schema import SPLITS, read_stats, reason_kind, split_files
from components.tokenizing import STANDARDIZATION, standardization_of

THUMBNAIL_SIDE = 16
BRIGHTNESS_BINS = 256  # the mean grey level of an image, 0 to 255, rounded
CONTRAST_BINS = 128  # the standard deviation of its grey levels, rounded, 127 and above in the last bin
TOKEN_BINS = 1025  # tokens per text, 0 to 1,023, and more in the last bin (the same whatever the sequence length)
SIZE_STEP, ASPECT_STEP = 16, 0.05  # the sources' width and height in bins of 16 pixels, their aspect of 0.05
SIZE_BINS = {"width": 512, "height": 512, "aspect": 201}  # up to 8,192 pixels and an aspect of 10, the rest beyond


def compute(
    examples_dir: str, vocabulary: list[str] | None = None, served_standardization: str | None = None
) -> tuple[DataStatistics, dict[str, np.ndarray]]:
    """(``data_stats.json``'s content, the near-duplicate keys per split) of the version in ``examples_dir``.

    ``vocabulary``: for texts, the served model's vocabulary: the out-of-vocabulary share under it is counted too
    (``served_out_of_vocabulary_share``, for the comparison), beside the share under the version's own
    ``vocabulary.txt``, which is what the statistics keep for later runs. Each under its own standardisation:
    the version's, and ``served_standardization`` (the served model's).
    """
    stats = read_stats(examples_dir)
    modality = modality_of(stats).name
    result = {
        "modality": modality,
        "class_names": list(stats.class_names),
        "counts": stats.counts,
        "per_class": stats.per_class,
        "num_examples": stats.num_examples,
        "quarantined": stats.quarantined,
        "duplicates": stats.duplicates,
        "quarantine_reasons": quarantine_reasons(examples_dir),
        "fingerprint": stats.fingerprint,
        "source": stats.source,
        "split_method": stats.split_method,
    }
    of_split = SPLIT_STATISTICS[modality](examples_dir, stats, result, vocabulary, served_standardization)
    keys, result[modality] = {}, {}
    for split in SPLITS:
        result[modality][split], keys[split] = of_split(split)
        if len(keys[split]) < stats["counts"].get(split, 0):  # (a large version: a sample of about MAX_READ)
            result.setdefault("sampled", {})[split] = len(keys[split])
    return DataStatistics(**result), keys


def image_splits(examples_dir: str, stats: ExamplesStats, result: dict, vocabulary, served_standardization):
    return lambda split: image_statistics(examples_dir, split, stats["counts"].get(split), stats.adopted)


def text_splits(examples_dir: str, stats: ExamplesStats, result: dict, vocabulary, served_standardization):
    """A text split's statistics, under the version's standardisation (recorded in ``result``) and the served
    model's."""
    own = {token: i for i, token in enumerate(TEXT.read_vocabulary(examples_dir))}
    served = {token: i for i, token in enumerate(vocabulary)} if vocabulary else None
    result["standardization"] = standardization_of(stats)
    length = stats["sequence_length"]
    return lambda split: text_statistics(
        examples_dir,
        split,
        own,
        length,
        served,
        result["standardization"],
        served_standardization,
        total=stats["counts"].get(split),
        adopted=stats.adopted,
    )


SPLIT_STATISTICS = {"image": image_splits, "text": text_splits}


def quarantine_reasons(examples_dir: str) -> dict[str, int]:
    """The quarantine's records counted by the kind of reason (its words before the first colon)."""
    import json

    from components.schema import QUARANTINE_FILE
    from components.storage import exists, open_read

    path = f"{examples_dir.rstrip('/')}/{QUARANTINE_FILE}"
    if not exists(path):
        return {}
    with open_read(path) as handle:
        reasons = [reason_kind(json.loads(line)["reason"]) for line in handle.read().decode().splitlines() if line]
    return dict(sorted(Counter(reasons).items()))


# the most examples of a split whose statistics and near-copy keys are computed. A larger split is sampled: of the
# conversion's shards, as many as hold about this many examples (it spreads examples over shards by their checksum,
# so any shards are a random sample; adopted TFRecords are read whole, as their files may be by class), and of their
# records this many, evenly spaced. It bounds the step's memory (256 bytes of keys an image) and its decoding (about a
# minute for this many small images on one core), however large the version. Counts come from stats.json.
MAX_READ = 100_000


def read_examples(examples_dir: str, split: str, total: int | None = None, adopted: bool = False):
    """Each serialized example of the split, read without TensorFlow; of a split of ``total`` examples (stats.json's
    count) over ``MAX_READ``, ``MAX_READ`` of them (fewer where the files hold fewer than ``total`` says): the first
    shards that hold that many (all files where they are ``adopted`` TFRecords), their records evenly spaced."""
    from components.schema import read_records
    from components.storage import open_read

    files = every = split_files(examples_dir, split)
    held = 0  # (the records the files read are expected to hold; 0: read every record)
    if total and total > MAX_READ and files:
        held = total
        if not adopted:  # (the conversion's shards)
            files = every[: math.ceil(MAX_READ * len(every) / total)]
            held = max(MAX_READ, total * len(files) // len(every))
    at = taken = 0
    for path in files:
        with open_read(path) as handle:
            for record in read_records(handle):
                if not held:
                    yield record
                elif at == taken * held // MAX_READ:  # (the next of MAX_READ picks spaced evenly over held)
                    yield record
                    taken += 1
                    if taken == MAX_READ:
                        return
                at += 1


def image_statistics(
    examples_dir: str, split: str, total: int | None = None, adopted: bool = False
) -> tuple[dict, np.ndarray]:
    """A split's brightness and contrast histograms, its sources' formats and sizes (width, height and aspect
    histograms; the records of adopted TFRecords do not say), and its thumbnails (N, 256) uint8; of a sample where
    ``total`` is over ``MAX_READ`` (``read_examples``, as are ``adopted`` TFRecords)."""
    from PIL import Image

    from components.schema import SOURCE_FEATURE, SOURCE_SIZE_FEATURE, bytes_features, int64_features

    brightness, contrast = np.zeros(BRIGHTNESS_BINS, np.int64), np.zeros(CONTRAST_BINS, np.int64)
    sizes = {name: np.zeros(bins, np.int64) for name, bins in SIZE_BINS.items()}
    formats: Counter = Counter()
    thumbnails = []
    for record in read_examples(examples_dir, split, total, adopted):
        found = bytes_features(record, ("image", SOURCE_FEATURE))
        encoded, source = found["image"], found.get(SOURCE_FEATURE, b"")
        source_size = int64_features(record, (SOURCE_SIZE_FEATURE,)).get(SOURCE_SIZE_FEATURE)
        if source_size and min(source_size) > 0:
            width, height = source_size
            sizes["width"][min(width // SIZE_STEP, SIZE_BINS["width"] - 1)] += 1
            sizes["height"][min(height // SIZE_STEP, SIZE_BINS["height"] - 1)] += 1
            sizes["aspect"][min(round(width / height / ASPECT_STEP), SIZE_BINS["aspect"] - 1)] += 1
        with Image.open(io.BytesIO(encoded)) as image:
            grey = image.convert("L")
        levels = np.asarray(grey, dtype=np.float32)
        brightness[min(BRIGHTNESS_BINS - 1, round(float(levels.mean())))] += 1
        contrast[min(CONTRAST_BINS - 1, round(float(levels.std())))] += 1
        thumbnails.append(thumbnail(grey))
        formats[source_format(source.decode("utf-8", "replace"))] += 1
    statistics = {
        "brightness": brightness.tolist(),
        "contrast": contrast.tolist(),
        "formats": dict(formats),
        **{name: counts.tolist() for name, counts in sizes.items()},
    }
    keys = np.stack(thumbnails) if thumbnails else np.zeros((0, THUMBNAIL_SIDE * THUMBNAIL_SIDE), np.uint8)
    return statistics, keys


def thumbnail(grey) -> np.ndarray:
    """A grey Pillow image's near-copy key: its ``THUMBNAIL_SIDE`` square thumbnail (box filter), flat, uint8."""
    from PIL import Image

    small = grey.resize((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.uint8).reshape(-1)


def unit_thumbnails(thumbnails: np.ndarray) -> np.ndarray:
    """Thumbnails less their mean grey, at unit length (a flat one all zeros): their dot products are the
    correlations the near-copy search compares with its threshold."""
    vectors = thumbnails.astype(np.float32)
    vectors -= vectors.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def source_format(source: str) -> str:
    """An example's source format, by its file's extension (``.jpeg`` as ``jpg``); an array file's items are
    ``npz``, and a record without its source (adopted TFRecords) is ``unknown``."""
    if not source:
        return "unknown"
    path = source.rsplit("#", 1)[0] if ".npz#" in source.lower() else source
    extension = os.path.splitext(path)[1].lower().lstrip(".")
    return {"jpeg": "jpg", "tif": "tiff"}.get(extension, extension or "none")


def text_statistics(
    examples_dir: str,
    split: str,
    index: dict[str, int],
    sequence_length: int,
    served: dict[str, int] | None = None,
    standardization: str = STANDARDIZATION,
    served_standardization: str | None = None,
    total: int | None = None,
    adopted: bool = False,
) -> tuple[dict, np.ndarray]:
    """A split's token counts (a histogram, one bin per count up to ``TOKEN_BINS - 1``, the longer in the last,
    whatever the sequence length), truncated and out-of-vocabulary shares under ``index`` (and under ``served``, the
    served model's vocabulary, when given), and a hash of each text's split key (uint64: texts with one key are
    copies). Tokens under ``standardization`` (``components.tokenizing``), and under ``served`` by the served model's
    ``served_standardization`` (None: the same)."""
    from components.tokenizing import standardize, text_key

    lengths = np.zeros(TOKEN_BINS, np.int64)
    tokens_seen = unknown = unknown_served = truncated = 0
    hashes = []
    from components.schema import bytes_features

    for record in read_examples(examples_dir, split, total, adopted):
        text = bytes_features(record, ("text",)).get("text", b"").decode("utf-8")
        tokens = standardize(text, standardization)
        lengths[min(len(tokens), TOKEN_BINS - 1)] += 1
        truncated += len(tokens) > sequence_length
        tokens_seen += len(tokens)
        unknown += sum(1 for token in tokens if index.get(token, 0) < 2)  # (ids 0 and 1: padding, unknown)
        if served is not None:
            same = served_standardization in (None, standardization)
            served_tokens = tokens if same else standardize(text, served_standardization)
            unknown_served += sum(1 for token in served_tokens if served.get(token, 0) < 2)
        digest = hashlib.sha256(text_key(text)).digest()
        hashes.append(int.from_bytes(digest[:8], "big"))
    examples = int(lengths.sum())
    statistics = {
        "token_counts": lengths.tolist(),
        "truncated_share": truncated / examples if examples else 0.0,
        "out_of_vocabulary_share": unknown / tokens_seen if tokens_seen else 0.0,
    }
    if served is not None:
        statistics["served_out_of_vocabulary_share"] = unknown_served / tokens_seen if tokens_seen else 0.0
    return statistics, np.asarray(hashes, dtype=np.uint64)


def write(folder: str, statistics: DataStatistics, keys: dict[str, np.ndarray]) -> None:
    """``data_stats.json`` and ``near_duplicates.npz`` into ``folder`` (each written whole, then renamed)."""
    from components.storage import write_atomically

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **keys)
    write_atomically(f"{folder.rstrip('/')}/{NEAR_DUPLICATES_NAME}", buffer.getvalue())
    statistics.write(folder)


def read(folder: str) -> tuple[DataStatistics, dict[str, np.ndarray]] | None:
    """The statistics written by ``write`` in ``folder``; None when it holds none; a one-line error for those of
    another version of the pipeline."""
    statistics = DataStatistics.read_if_any(folder)
    return None if statistics is None else (statistics, read_keys(folder))


def read_keys(folder: str) -> dict[str, np.ndarray]:
    """The near-duplicate keys ``write`` put beside the statistics in ``folder``."""
    from components.storage import open_read

    with open_read(f"{folder.rstrip('/')}/{NEAR_DUPLICATES_NAME}") as handle:
        payload = handle.read()
    with np.load(io.BytesIO(payload), allow_pickle=False) as arrays:
        return {split: arrays[split] for split in arrays.files}
