"""Leakage: held-out examples with a near-copy in train, within the version (across its splits) and across
versions (the new held-out examples against the baseline's train), by their near-duplicate keys."""

from __future__ import annotations

import numpy as np

from components.check_data import statistics as data_statistics
from components.check_data.thresholds import graded, row
from components.schema import SPLIT_METHODS

# the correlation of two thumbnails from which a small difference (near_duplicate_levels) makes them copies: a
# re-encoded copy of a low-contrast photograph keeps 0.957 or more, distinct photographs 0.78 at most, and two
# pictures of noise on one grey, which differ little, about 0 (bench/near_copies.py)
FLAT_SIMILARITY = 0.95


def near_copies(held_out: np.ndarray, train: np.ndarray, similarity: float, text: bool, levels: float) -> int:
    """How many of ``held_out``'s examples have a near-copy in ``train``: images whose thumbnails correlate at least
    at ``similarity``, or (pictures of little contrast, whose correlation JPEG noise lowers most) at least at
    ``FLAT_SIMILARITY`` with a root-mean-square difference of at most ``levels`` grey levels; texts by the hash of
    their standardised text."""
    if text:
        return int(np.isin(held_out, train).sum())
    unit, found = data_statistics.unit_thumbnails, np.zeros(len(held_out), bool)
    most_squared = levels**2 * train.shape[1]  # the largest sum of squared differences of two copies
    held_units, held_grey = unit(held_out), held_out.astype(np.float32)
    held_squares = (held_grey**2).sum(axis=1, keepdims=True)
    # train in chunks, against 256 held-out examples at a time: memory holds a chunk's thumbnails as floats and
    # 256 x TRAIN_CHUNK similarities (16 MB each), however large train is
    for first in range(0, len(train), TRAIN_CHUNK):
        chunk = train[first : first + TRAIN_CHUNK]
        chunk_units, chunk_grey = unit(chunk).T, chunk.astype(np.float32).T
        chunk_squares = (chunk_grey**2).sum(axis=0)
        for start in range(0, len(held_out), 256):
            block = slice(start, start + 256)
            correlated = held_units[block] @ chunk_units
            copies = correlated >= similarity
            if levels > 0:
                squared = held_squares[block] + chunk_squares - 2 * (held_grey[block] @ chunk_grey)
                copies |= (correlated >= FLAT_SIMILARITY) & (squared <= most_squared)
            found[block] |= copies.any(axis=1)
    return int(found.sum())


TRAIN_CHUNK = 16_384


# held-out examples compared with every train example (an even sample beyond): 5,000 against a million train images
# is about 2.6e12 multiply-adds (the correlations, and the differences in grey levels): tens of seconds
MAX_COMPARED = 5000


def leakage_counts(
    held_out: dict[str, np.ndarray], train: np.ndarray, limits: dict, text: bool
) -> dict[str, tuple[int, int]]:
    """{split: (count, of)} of the validation and test examples with a near-copy in ``train``: of them all, or of an
    even sample of each split, ``MAX_COMPARED`` in all (each is compared with every train example)."""
    sizes = {split: len(held_out[split]) for split in ("validation", "test") if split in held_out}
    scale = min(1.0, MAX_COMPARED / max(1, sum(sizes.values())))
    counts = {}
    for split, size in sizes.items():
        keys = held_out[split]
        if scale < 1.0:
            keys = keys[np.linspace(0, size - 1, max(1, int(size * scale))).astype(np.int64)] if size else keys
        found = near_copies(keys, train, limits["near_duplicate_similarity"], text, limits["near_duplicate_levels"])
        counts[split] = (found, len(keys))
    return counts


def leakage_share(
    held_out: dict[str, np.ndarray], train: np.ndarray, limits: dict, text: bool, train_count: int = 0
) -> tuple[float, int, int, dict]:
    """(share, count, of, ``leakage_counts``) of the validation and test examples with a near-copy in ``train``.
    Where ``train`` is a sample of a split of ``train_count`` examples (a large version's keys), a copy is found with
    the sample's odds: the share is scaled by them (at most 1)."""
    counts = leakage_counts(held_out, train, limits, text)
    found, total = sum(found for found, _ in counts.values()), sum(of for _, of in counts.values())
    share = found / total if total else 0.0
    if len(train) < train_count:
        share = min(1.0, share * train_count / max(1, len(train)))
    return share, found, total, counts


def check_leakage(new: dict, new_keys: dict, base: dict | None, base_keys: dict | None, limits: dict) -> list[dict]:
    """Near-copies across the new version's splits, and (with a baseline) new validation and test examples that
    sit in the baseline's train split (they flatter the model in service's figures)."""
    text = new["modality"] == "text"
    floor = 0.0
    if base is not None:  # (capped: a leaky baseline raises the warning up to the block level, never the block)
        own = leakage_share(base_keys, base_keys["train"], limits, text, base["counts"].get("train", 0))[0]
        floor = min(2 * own, limits["leakage_block"])
    warn, block = max(limits["leakage_warn"], floor), limits["leakage_block"]
    thresholds = {"warn": round(warn, 4), "block": round(block, 4)}
    held_out = new["counts"]["validation"] + new["counts"]["test"]

    def sampled(compared: int) -> str:
        return f" (an even sample of their {held_out})" if compared < held_out else ""

    def train_sampled(version: dict, keys: dict) -> str:  # (a large version's keys: about MAX_READ of a split)
        read, of = len(keys["train"]), version["counts"].get("train", 0)
        return f" (a sample of {read} of its {of} examples: the share is scaled to all of them)" if read < of else ""

    rows = []
    share, found, total, by_split = leakage_share(new_keys, new_keys["train"], limits, text, new["counts"]["train"])
    across = row(
        "leakage across splits",
        graded(share, warn, block),
        "block",
        value=round(share, 4),
        thresholds=thresholds,
        detail=f"{found} of {total} validation and test examples{sampled(total)} have a near-copy in train"
        + train_sampled(new, new_keys),
    )
    # the test split's own count, which the summary shows beside the test accuracy
    found_in_test, compared_in_test = by_split.get("test", (0, 0))
    rows.append({**across, "test_copies": {"found": found_in_test, "compared": compared_in_test}})
    if base is not None:
        share, found, total, _ = leakage_share(new_keys, base_keys["train"], limits, text, base["counts"]["train"])
        detail = f"{found} of {total} validation and test examples{sampled(total)} have a near-copy in the baseline's"
        detail += " train split" + train_sampled(base, base_keys)
        verdict = graded(share, warn, block)
        # a baseline split by another method: the same examples sit in other splits, so this version's held-out
        # examples meet the baseline's train by design; that warns, and never blocks the first run after an upgrade
        methods = base.get("split_method", 1), new.get("split_method", 1)
        if methods[0] != methods[1]:
            verdict = "warn" if verdict == "block" else verdict
            detail += (
                f"; the baseline was split by {SPLIT_METHODS.get(methods[0], 'another method')}, this version "
                f"by {SPLIT_METHODS.get(methods[1], 'another method')}: examples moved between splits, so "
                "this never blocks"
            )
        rows.append(
            row(
                "leakage across versions", verdict, "block", value=round(share, 4), thresholds=thresholds, detail=detail
            )
        )
    return rows
