"""The data checks between versions: does a new conversion look like the data that the model in service learned
from, and is it fit to train on?

Each check gives a row of ``data_checks.json``: its value, its thresholds, its severity (``block``: it can stop the
run; ``warn``: it only reports) and its verdict (``pass``, ``warn``, ``block`` or ``skipped``, with a word why). The
thresholds' defaults are the anchors': TFX's ExampleValidator and Vertex AI Model Monitoring measure class mixes by
their L-infinity distance and numeric features by the Jensen-Shannon divergence (``scipy``'s distance squared, in
bits, as TFDV reports it). ``docs/data-checks.md`` says what each check means and how to set it.

No false alarms on the same data: a distance counts only above the larger of its threshold and twice the
baseline's own distance between its train and validation splits (the noise of a split by hash), so that the same
source converted again, or split again, passes clean.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

import numpy as np

from components.artifacts.data_statistics import CHECKS_NAME, MIN_SPLIT_EXAMPLES, PREDICTION_MIX_WARN
from components.check_data import statistics as data_statistics
from components.cli import StepFailedError, UsageError
from components.params import CHECK_DATA, EVALUATE
from components.schema import SPLIT_METHODS, SPLITS

log = logging.getLogger(__name__)

CHECKS_FILE = CHECKS_NAME
# every threshold, by the name that --threshold NAME=VALUE and the DAG's data_thresholds take
THRESHOLDS = {
    "class_mix_warn": (0.1, "L-infinity distance of a split's class shares that warns"),
    "class_mix_block": (0.3, "L-infinity distance of a split's class shares that blocks"),
    "min_split_examples": (
        MIN_SPLIT_EXAMPLES,
        "a split with fewer examples on either side is not compared (skipped; the prediction mix too)",
    ),
    "count_block_below": (0.5, "examples below this share of the baseline's block"),
    "count_warn_above": (3.0, "examples above this many times the baseline's warn"),
    "quarantine_warn_factor": (2.0, "a quarantine rate over this many times the baseline's warns..."),
    "quarantine_warn_min": (0.005, "...when it is also above this share of the items"),
    "leakage_warn": (
        0.0,
        "share of validation and test examples with a near-copy in train (or in the baseline's "
        "train) above which it warns: any",
    ),
    "leakage_block": (0.05, "that share above which it blocks"),
    "near_duplicate_similarity": (
        0.998,
        "cosine similarity of two images' 16x16 grey thumbnails from which they are copies",
    ),
    "near_duplicate_levels": (
        3.0,
        "root-mean-square difference in grey levels of two images' thumbnails that correlate at 0.95 or more, "
        "at or under which they are copies too (pictures of little contrast, whose correlation JPEG noise lowers)",
    ),
    "distribution_warn": (
        0.1,
        "Jensen-Shannon divergence of brightness, contrast, formats or token counts that warns (never blocks)",
    ),
    "prediction_mix_warn": (
        PREDICTION_MIX_WARN,
        "L-infinity distance of the class shares of the model in service's answers, on the new test split against "
        "its own evaluation split, that warns (evaluate checks it; never blocks)",
    ),
    "split_mix_block": (
        0.25,
        "within the version: a class whose share of train is under this fraction of its share of validation and "
        "test blocks, even on a first version (it is nearly absent from what the model learns from)",
    ),
    "split_mix_warn": (0.5, "that fraction under which it warns"),
    "split_mix_chance": (
        3.0,
        "...each only where chance would not set that many aside: more held-out examples of the class than a random "
        "split gives by this many standard deviations (and by one more to block)",
    ),
    "text_share_warn": (0.02, "rise of the truncated or out-of-vocabulary share that warns (2 points)"),
    "text_share_block": (0.10, "that rise that blocks (10 points)"),
}


@dataclass(frozen=True)
class CheckDataConfig:
    """What to check, against what, and how strictly.

    Args:
        examples_dir: the new version (a convert step's output).
        baseline: the statistics of the version the model in service learned from: a folder holding
            ``data_stats.json`` (a check-data output, or a registered model), or that version's convert output;
            empty: none (the first version: it passes, and says so).
        output_dir: where ``data_checks.json``, and the new version's ``data_stats.json`` and
            ``near_duplicates.npz``, go.
        accept_data_change: go on past blocking checks (recorded in ``data_checks.json``).
        thresholds: overrides of ``THRESHOLDS`` by name.
    """

    examples_dir: str
    output_dir: str
    baseline: str = EVALUATE["baseline"].default
    accept_data_change: bool = CHECK_DATA["accept_data_change"].default
    thresholds: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.thresholds) - set(THRESHOLDS))
        if unknown:
            raise UsageError(f"data threshold {unknown[0]} is not one of {', '.join(THRESHOLDS)}")
        for name, value in self.thresholds.items():
            if not isinstance(value, int | float) or value < 0:
                raise UsageError(f"data threshold {name}={value} must be a number of 0 or more")


def parse_thresholds(items) -> dict[str, float]:
    """``NAME=VALUE`` items (the CLI's ``--threshold``, the DAG's ``data_thresholds``) as a dict; a one-line error
    for an item of another form."""
    found = {}
    for item in items:
        name, equals, value = str(item).partition("=")
        try:
            number = float(value) if equals else None
        except ValueError:
            number = None
        if number is None or number != number:  # (NaN)
            raise UsageError(
                f"data threshold {item!r} is not NAME=VALUE with a number: for example class_mix_block=0.25"
            )
        found[name.strip()] = number
    return found


def threshold_values(overrides: dict) -> dict[str, float]:
    return {name: overrides.get(name, default) for name, (default, _) in THRESHOLDS.items()}


def row(
    check: str, verdict: str, severity: str, *, detail: str, value=None, thresholds: dict | None = None, split: str = ""
) -> dict:
    """One line of ``data_checks.json``."""
    found = {
        "check": check,
        "verdict": verdict,
        "severity": severity,
        "value": value,
        "thresholds": thresholds or {},
        "detail": detail,
    }
    return {**found, "split": split} if split else found


def graded(value: float, warn: float | None, block: float | None) -> str:
    """``block`` above ``block``, ``warn`` above ``warn``, else ``pass`` (None: no such level)."""
    if block is not None and value > block:
        return "block"
    if warn is not None and value > warn:
        return "warn"
    return "pass"


def shares(counts: dict[str, int], names: list[str]) -> np.ndarray:
    total = sum(counts.get(name, 0) for name in names)
    return np.array([counts.get(name, 0) / total for name in names]) if total else np.zeros(len(names))


def jensen_shannon(p, q) -> float:
    """TFDV's figure: scipy's Jensen-Shannon distance squared, in bits (0: the same, 1: disjoint)."""
    from scipy.spatial.distance import jensenshannon

    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.sum() == 0 or q.sum() == 0:
        return 0.0
    return float(jensenshannon(p, q, base=2) ** 2)


def quantile_bins(fine: list[int], bins: int = 10) -> np.ndarray:
    """The edges (fine-bin indices) that cut a fine histogram into ``bins`` bins of about equal mass, plus a bin
    below its lowest value and one above its highest (so that values outside the baseline's range are seen)."""
    fine = np.asarray(fine)
    cumulative = np.cumsum(fine)
    if not len(fine) or cumulative[-1] == 0:
        return np.array([], dtype=np.int64)
    targets = cumulative[-1] * np.arange(1, bins) / bins
    occupied = np.flatnonzero(fine)
    edges = np.concatenate([[occupied[0]], np.searchsorted(cumulative, targets, side="right"), [occupied[-1] + 1]])
    return np.unique(edges[(edges > 0) & (edges < len(fine))])


def rebin(fine: list[int], edges: np.ndarray) -> np.ndarray:
    return np.add.reduceat(np.asarray(fine, dtype=np.int64), np.concatenate([[0], edges])) if len(fine) else np.zeros(1)


# the floor a baseline's own train-against-validation distance sets, at most: a distance (shares' L-infinity, a
# divergence) is at most 1, and a floor above this would silence its check for good
MAX_FLOOR = 0.5


def check_label_set(new: dict, base: dict) -> dict:
    gone = sorted(set(base["class_names"]) - set(new["class_names"]))
    added = sorted(set(new["class_names"]) - set(base["class_names"]))
    if not gone and not added:
        if list(new["class_names"]) != list(base["class_names"]):  # the same classes, other ids: clients reading ids
            return row(
                "label set",
                "warn",
                "block",
                value=0,
                detail=(
                    f"the same {len(new['class_names'])} classes in another order (class ids change meaning for "
                    f"clients that read them): {', '.join(base['class_names'])} -> {', '.join(new['class_names'])}"
                ),
            )
        return row("label set", "pass", "block", value=0, detail=f"{len(new['class_names'])} classes, as before")
    words = [f"gone {', '.join(gone)}" if gone else "", f"new {', '.join(added)}" if added else ""]
    detail = "; ".join(word for word in words if word) + (
        ": the model in service cannot be compared with a model of other classes, and its clients would lose or "
        "gain classes"
    )
    return row("label set", "block", "block", value=len(gone) + len(added), detail=detail)


def check_class_mix(new: dict, base: dict, limits: dict) -> list[dict]:
    """Each split's class shares against the baseline's (L-infinity; Jensen-Shannon beside it), skipped where a
    side has fewer than ``min_split_examples``."""
    names = sorted(set(base["class_names"]) | set(new["class_names"]))
    floor = 0.0
    if min(base["counts"]["train"], base["counts"]["validation"]) >= limits["min_split_examples"]:
        own = shares(base["per_class"]["train"], names) - shares(base["per_class"]["validation"], names)
        floor = min(2 * float(np.abs(own).max()), MAX_FLOOR)  # capped, as the distributions' floor
    warn, block = max(limits["class_mix_warn"], floor), max(limits["class_mix_block"], floor)
    rows = []
    for split in SPLITS:
        least = min(new["counts"][split], base["counts"][split])
        if least < limits["min_split_examples"]:
            rows.append(
                row(
                    "class mix",
                    "skipped",
                    "block",
                    split=split,
                    detail=(
                        f"{least} examples on one side, under min_split_examples {limits['min_split_examples']:g}: too "
                        "few to compare shares"
                    ),
                )
            )
            continue
        p, q = shares(new["per_class"][split], names), shares(base["per_class"][split], names)
        distance = float(np.abs(p - q).max())
        moved = names[int(np.abs(p - q).argmax())]
        rows.append(
            row(
                "class mix",
                graded(distance, warn, block),
                "block",
                value=round(distance, 4),
                thresholds={"warn": round(warn, 4), "block": round(block, 4)},
                split=split,
                detail=f"class {moved} {q[names.index(moved)]:.1%} -> {p[names.index(moved)]:.1%}; "
                f"Jensen-Shannon {jensen_shannon(p, q):.4f}",
            )
        )
    return rows


def check_split_mix(new: dict, limits: dict) -> dict:
    """Within the version, each class's share of train against its share of validation and test: a class nearly
    absent from train cannot be learned, whatever the baseline. A class is judged where its share of train is under
    ``split_mix_warn`` (``split_mix_block``) of its held-out share and a random split would set that many of its
    examples aside less often than ``split_mix_chance`` (one more) standard deviations allow; the row gives the
    class with the least ratio among those judged, else the least of all. Its block holds on a first version too
    (``within_version``)."""
    per_class, counts = new["per_class"], new["counts"]
    held_total, train_total = counts["validation"] + counts["test"], counts["train"]
    share_aside = held_total / max(held_total + train_total, 1)  # a random split's, for any class
    judged = {}
    for name in new["class_names"]:
        train = per_class["train"].get(name, 0)
        held = per_class["validation"].get(name, 0) + per_class["test"].get(name, 0)
        if not held:
            continue
        ratio = (train / max(train_total, 1)) / (held / held_total)
        total = train + held
        spread = math.sqrt(total * share_aside * (1 - share_aside)) or 1.0
        above = (held - total * share_aside) / spread  # how unlikely a random split sets that many aside
        verdict = (
            "block"
            if ratio < limits["split_mix_block"] and above > limits["split_mix_chance"] + 1
            else "warn"
            if ratio < limits["split_mix_warn"] and above > limits["split_mix_chance"]
            else "pass"
        )
        judged[name] = (verdict, ratio, train, held)
    thresholds = {
        "warn": limits["split_mix_warn"],
        "block": limits["split_mix_block"],
        "chance": limits["split_mix_chance"],
    }
    if not judged:
        return {
            **row("split class mix", "skipped", "block", thresholds=thresholds, detail="no held-out examples"),
            "within_version": True,
        }
    order = {"block": 0, "warn": 1, "pass": 2}
    name = min(judged, key=lambda n: (order[judged[n][0]], judged[n][1]))
    verdict, ratio, train, held = judged[name]
    detail = (
        f"class {name}: {train / max(train_total, 1):.1%} of train ({train} examples) against "
        f"{held / held_total:.1%} of validation and test ({held})"
    )
    if verdict == "block":
        detail += ": it is nearly absent from what the model learns from; add its examples to train (or convert "
        detail += "again without the split that put them aside)"
    return {
        **row("split class mix", verdict, "block", value=round(ratio, 4), thresholds=thresholds, detail=detail),
        "within_version": True,
    }


def check_counts(new: dict, base: dict, limits: dict) -> dict:
    ratio = new["num_examples"] / max(1, base["num_examples"])
    verdict = (
        "block" if ratio < limits["count_block_below"] else "warn" if ratio > limits["count_warn_above"] else "pass"
    )
    return row(
        "examples",
        verdict,
        "block",
        value=round(ratio, 4),
        thresholds={"block_below": limits["count_block_below"], "warn_above": limits["count_warn_above"]},
        detail=f"{new['num_examples']} examples against the baseline's {base['num_examples']}",
    )


def quarantine_rate(statistics: dict) -> float:
    items = statistics["num_examples"] + statistics["quarantined"] + statistics.get("duplicates", 0)
    return statistics["quarantined"] / items if items else 0.0


def check_quarantine(new: dict, base: dict, limits: dict) -> dict:
    rate, base_rate = quarantine_rate(new), quarantine_rate(base)
    warn = max(limits["quarantine_warn_factor"] * base_rate, limits["quarantine_warn_min"])
    reasons = ", ".join(f"{reason} {count}" for reason, count in new["quarantine_reasons"].items()) or "none"
    return row(
        "quarantine rate",
        graded(rate, warn, None),
        "warn",
        value=round(rate, 4),
        thresholds={"warn": round(warn, 4)},
        detail=f"{new['quarantined']} quarantined ({reasons}); the baseline's rate {base_rate:.2%}",
    )


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
    unit = data_statistics.unit_thumbnails
    train_units, found = unit(train), 0
    train_grey = train.astype(np.float32)
    train_squares = (train_grey**2).sum(axis=1)
    most_squared = levels**2 * train.shape[1]  # the largest sum of squared differences of two copies
    for start in range(0, len(held_out), 256):  # 256 held-out examples against all of train at a time (1 GB of
        # similarities for a million train images)
        block = held_out[start : start + 256]
        correlated = unit(block) @ train_units.T
        copies = correlated >= similarity
        if levels > 0:
            grey = block.astype(np.float32)
            squared = (grey**2).sum(axis=1, keepdims=True) + train_squares - 2 * (grey @ train_grey.T)
            copies |= (correlated >= FLAT_SIMILARITY) & (squared <= most_squared)
        found += int(copies.any(axis=1).sum())
    return found


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
    held_out: dict[str, np.ndarray], train: np.ndarray, limits: dict, text: bool
) -> tuple[float, int, int, dict]:
    """(share, count, of, ``leakage_counts``) of the validation and test examples with a near-copy in ``train``."""
    counts = leakage_counts(held_out, train, limits, text)
    found, total = sum(found for found, _ in counts.values()), sum(of for _, of in counts.values())
    return (found / total if total else 0.0), found, total, counts


def check_leakage(new: dict, new_keys: dict, base: dict | None, base_keys: dict | None, limits: dict) -> list[dict]:
    """Near-copies across the new version's splits, and (with a baseline) new validation and test examples that
    sit in the baseline's train split (they flatter the model in service's figures)."""
    text = new["modality"] == "text"
    floor = 0.0
    if base is not None:  # (capped: a leaky baseline raises the warning up to the block level, never the block)
        floor = min(2 * leakage_share(base_keys, base_keys["train"], limits, text)[0], limits["leakage_block"])
    warn, block = max(limits["leakage_warn"], floor), limits["leakage_block"]
    thresholds = {"warn": round(warn, 4), "block": round(block, 4)}
    held_out = new["counts"]["validation"] + new["counts"]["test"]

    def sampled(compared: int) -> str:
        return f" (an even sample of their {held_out})" if compared < held_out else ""

    rows = []
    share, found, total, by_split = leakage_share(new_keys, new_keys["train"], limits, text)
    across = row(
        "leakage across splits",
        graded(share, warn, block),
        "block",
        value=round(share, 4),
        thresholds=thresholds,
        detail=f"{found} of {total} validation and test examples{sampled(total)} have a near-copy in train",
    )
    # the test split's own count, which the summary shows beside the test accuracy
    found_in_test, compared_in_test = by_split.get("test", (0, 0))
    rows.append({**across, "test_copies": {"found": found_in_test, "compared": compared_in_test}})
    if base is not None:
        share, found, total, _ = leakage_share(new_keys, base_keys["train"], limits, text)
        detail = f"{found} of {total} validation and test examples{sampled(total)} have a near-copy in the baseline's"
        detail += " train split"
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


def distribution_rows(
    name: str, new_hist: dict[str, list], base_hist: dict[str, list], limits: dict, categorical: bool = False
) -> dict:
    """Jensen-Shannon of one histogram, every split together, over the baseline's decile bins (or the categories),
    against the larger of its threshold and twice the baseline's own train-against-validation figure."""
    if categorical:
        keys = sorted(set().union(*new_hist.values(), *base_hist.values()))

        def total(hist):
            return np.array([sum(hist[split].get(key, 0) for split in SPLITS) for key in keys], dtype=np.float64)

        def one(hist, split):
            return np.array([hist[split].get(key, 0) for key in keys], dtype=np.float64)
    else:
        edges = quantile_bins(np.sum([base_hist[split] for split in SPLITS], axis=0))

        def total(hist):
            return rebin(np.sum([hist[split] for split in SPLITS], axis=0), edges)

        def one(hist, split):
            return rebin(hist[split], edges)

    floor = 0.0
    if min(sum(one(base_hist, "train")), sum(one(base_hist, "validation"))) >= limits["min_split_examples"]:
        floor = min(2 * jensen_shannon(one(base_hist, "train"), one(base_hist, "validation")), MAX_FLOOR)
    warn = max(limits["distribution_warn"], floor)
    value = jensen_shannon(total(new_hist), total(base_hist))
    return row(
        name,
        graded(value, warn, None),
        "warn",
        value=round(value, 4),
        thresholds={"warn": round(warn, 4)},
        detail="Jensen-Shannon divergence, every split, against the baseline's",
    )


def check_images(new: dict, base: dict, limits: dict) -> list[dict]:
    def field_of(statistics, name):
        return {split: statistics["image"][split][name] for split in SPLITS}

    rows = [
        distribution_rows(name, field_of(new, name), field_of(base, name), limits)
        for name in ("brightness", "contrast")
    ]
    for name in ("width", "height", "aspect"):  # of the sources, where the records say (not adopted TFRecords)
        check = f"source {name}"
        if all(any(sum(statistics["image"][split].get(name, [])) for split in SPLITS) for statistics in (new, base)):
            rows.append(distribution_rows(check, field_of(new, name), field_of(base, name), limits))
        else:
            rows.append(
                row(
                    check,
                    "skipped",
                    "warn",
                    detail="the records do not say their sources' sizes (TFRecords "
                    "adopted as they are, or a conversion older than the data checks)",
                )
            )
    rows.append(
        distribution_rows("formats", field_of(new, "formats"), field_of(base, "formats"), limits, categorical=True)
    )
    rows[-1]["detail"] = "source formats: " + ", ".join(
        f"{key} {sum(new['image'][split]['formats'].get(key, 0) for split in SPLITS)}"
        for key in sorted(set().union(*(new["image"][split]["formats"] for split in SPLITS)))
    )
    return rows


def overall(statistics: dict, key: str) -> float:
    """A text figure of every split together, each split weighed by its examples."""
    counts = [statistics["counts"][split] for split in SPLITS]
    values = [statistics["text"][split][key] for split in SPLITS]
    return float(np.average(values, weights=counts)) if sum(counts) else 0.0


def check_texts(new: dict, base: dict, limits: dict) -> list[dict]:
    rows = [
        distribution_rows(
            "token counts",
            {s: new["text"][s]["token_counts"] for s in SPLITS},
            {s: base["text"][s]["token_counts"] for s in SPLITS},
            limits,
        )
    ]
    for name, key in (("truncated share", "truncated_share"), ("out-of-vocabulary share", "out_of_vocabulary_share")):
        # the new texts under the served model's vocabulary (where the baseline keeps it), against the share its own
        # data had under it
        served = "served_out_of_vocabulary_share" if key == "out_of_vocabulary_share" else key
        now = overall(new, served if served in new["text"]["train"] else key)
        before = overall(base, key)
        rise = now - before
        rows.append(
            row(
                name,
                graded(rise, limits["text_share_warn"], limits["text_share_block"]),
                "block",
                value=round(rise, 4),
                thresholds={"warn": limits["text_share_warn"], "block": limits["text_share_block"]},
                detail=f"{before:.1%} -> {now:.1%}",
            )
        )
    return rows


def compare(new: dict, new_keys: dict, base: dict | None, base_keys: dict | None, limits: dict) -> list[dict]:
    """Every check's row, the new version's statistics against the baseline's (None: the first version, whose own
    leakage is still checked)."""
    own = check_split_mix(new, limits)  # (the version alone: it blocks on a first version too)
    if base is None:  # nothing learned from before to block against: its blocking rows are warnings
        return [
            *(
                dict(found, verdict="warn", severity="warn") if found["verdict"] == "block" else found
                for found in check_leakage(new, new_keys, None, None, limits)
            ),
            own,
        ]
    rows = [check_label_set(new, base)]
    if new["modality"] != base["modality"]:
        return [*rows, row("modality", "block", "block", detail=f"{base['modality']} -> {new['modality']}"), own]
    rows += check_class_mix(new, base, limits)
    rows.append(check_counts(new, base, limits))
    rows.append(check_quarantine(new, base, limits))
    rows += check_leakage(new, new_keys, base, base_keys, limits)
    rows += check_images(new, base, limits) if new["modality"] == "image" else check_texts(new, base, limits)
    return [*rows, own]


def verdict_of(rows: list[dict], has_baseline: bool, accepted: bool) -> dict:
    """The step's outcome: ``blocked`` (a blocking row, without ``accept_data_change``; without a baseline only a
    check of the version alone, as nothing was learned from before: the other blocking rows are reported as
    warnings), the reasons of each kind."""

    def reason(found):
        split = f" ({found['split']})" if found.get("split") else ""
        return f"{found['check']}{split}: {found['detail']}"

    blocking = [reason(found) for found in rows if found["verdict"] == "block"]
    warnings = [reason(found) for found in rows if found["verdict"] == "warn"]
    if not has_baseline:  # (but a check of the version alone)
        demoted = [reason(found) for found in rows if found["verdict"] == "block" and not found.get("within_version")]
        blocking, warnings = [line for line in blocking if line not in demoted], demoted + warnings
    return {
        "blocked": bool(blocking) and not accepted,
        "blocking": blocking,
        "warnings": warnings,
        "accepted_data_change": accepted and bool(blocking),
    }


class DataBlockedError(StepFailedError):
    """The new version fails a blocking data check: the run stops before training (exit code 1), with each reason
    on a line of its own."""

    whole_message = True


FIRST_VERSION = (
    "the first version, with no baseline: nothing to compare with; its own leakage is reported, never blocking"
)


def load_baseline(baseline: str) -> tuple[tuple[dict, dict] | None, str, str]:
    """(statistics and near-duplicate keys or None, the folder they came from, a note when None) of ``baseline``:
    a folder with ``data_stats.json`` (a check-data output; a registered version, whose SavedModel folder the
    Vertex AI Model Registry names: its parent is looked at too), or a convert output whose statistics are computed
    here. A model without statistics (registered before the data checks) is no baseline, with a note; a path that
    does not exist is a one-line error."""
    from components.artifacts.exported import version_folders
    from components.schema import STATS_FILE
    from components.storage import exists

    if not baseline:
        return None, "", FIRST_VERSION
    folder = baseline.rstrip("/")
    for place in version_folders(folder):
        found = data_statistics.read(place)
        if found is not None:
            return found, place, ""
    if exists(f"{folder}/{STATS_FILE}"):
        return data_statistics.compute(folder), folder, ""
    if "://" not in folder and not os.path.exists(folder):
        raise UsageError(
            f"--baseline {baseline} does not exist: pass the check-data output, the examples or the "
            "registered model of the model in service"
        )
    note = (
        f"the baseline {baseline} holds no {data_statistics.STATS_NAME} (an export step's output, or a model "
        "registered before the data checks: a registered version keeps them): nothing to compare with; the new "
        "data's own leakage is reported, never blocking"
    )
    return None, "", note


def run(config: CheckDataConfig) -> dict:
    """Computes the new version's statistics, compares them with the baseline's, writes ``data_checks.json`` and the
    statistics; returns the checks. Raises ``DataBlockedError`` (after writing) when a blocking check fails."""
    from components.storage import check_writable, write_json

    check_writable(config.output_dir, "--output")
    limits = threshold_values(config.thresholds)
    base, base_folder, note = load_baseline(config.baseline)
    base_statistics, base_keys = base if base else (None, None)
    vocabulary, served_standardization = None, None
    if base_statistics is not None and base_statistics["modality"] == "text":
        from components.tokenizing import standardization_of

        vocabulary, served_standardization = baseline_vocabulary(base_folder), standardization_of(base_statistics)
    new, new_keys = data_statistics.compute(config.examples_dir, vocabulary, served_standardization)
    data_statistics.write(config.output_dir, new, new_keys)
    if new["modality"] == "text":  # the vocabulary beside them: this output is a baseline as it is
        from components.storage import open_read, write_atomically
        from components.tokenizing import VOCABULARY_FILE

        with open_read(f"{config.examples_dir.rstrip('/')}/{VOCABULARY_FILE}") as handle:
            write_atomically(f"{config.output_dir.rstrip('/')}/{VOCABULARY_FILE}", handle.read())
    rows = compare(new, new_keys, base_statistics, base_keys, limits)
    outcome = verdict_of(rows, base is not None, config.accept_data_change)
    result = {
        "examples": config.examples_dir,
        "baseline": config.baseline,
        "baseline_statistics": base_folder,
        "baseline_note": note,
        **outcome,
        "thresholds": limits,
        "checks": rows,
    }
    write_json(f"{config.output_dir.rstrip('/')}/{CHECKS_FILE}", result)
    report(result)
    if result["blocked"]:
        raise DataBlockedError(
            "the new data is blocked before training:\n"
            + "\n".join(f"  {reason}" for reason in result["blocking"])
            + "\n  (pass --accept-data-change, the DAG's accept_data_change, to train on it anyway; the run records it)"
        )
    return result


def baseline_vocabulary(baseline: str) -> list[str] | None:
    """The served model's vocabulary: the baseline's ``vocabulary.txt`` where it keeps one."""
    from components.storage import exists
    from components.tokenizing import VOCABULARY_FILE

    if exists(f"{baseline.rstrip('/')}/{VOCABULARY_FILE}"):
        return data_statistics.read_vocabulary(baseline)
    return None


def report(result: dict) -> None:
    """A line per check that did not pass, and the outcome, to the log (the terminal, Cloud Logging)."""
    if result["baseline_note"]:
        log.info("check data: %s", result["baseline_note"])
    # a blocking row stops the run with its reasons (DataBlockedError); one that did not (accepted) is logged here
    for found in result["checks"]:
        if found["verdict"] in ("warn", "skipped") or (found["verdict"] == "block" and not result["blocked"]):
            split = f" ({found['split']})" if found.get("split") else ""
            verdict = "block, accepted" if found["verdict"] == "block" else found["verdict"]
            log.warning("check data: %s %s%s: %s", verdict, found["check"], split, found["detail"])
    counts = {
        verdict: sum(1 for found in result["checks"] if found["verdict"] == verdict)
        for verdict in ("pass", "warn", "block", "skipped")
    }
    summary = ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count)
    if result["accepted_data_change"]:
        log.warning(
            "check data: %s; blocking checks accepted (--accept-data-change): %s",
            summary,
            "; ".join(result["blocking"]),
        )
    else:
        log.info("check data: %s", summary)
