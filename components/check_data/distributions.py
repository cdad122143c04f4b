"""The checks of what a version holds against the baseline's: its label set, class mix, counts, quarantine rate,
and the distributions of its images (sizes, brightness, ...) or texts (lengths, out-of-vocabulary words); and, within
the version alone, its class mix across splits."""

from __future__ import annotations

import math

import numpy as np

from components.check_data.thresholds import graded, row
from components.schema import SPLITS, reason_kind


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
    """The share of the items quarantined, the files an image folder holds that are named as no image aside."""
    from components.decoding import NO_IMAGE

    quarantined = statistics["quarantined"] - statistics.get("quarantine_reasons", {}).get(reason_kind(NO_IMAGE), 0)
    items = statistics["num_examples"] + quarantined + statistics.get("duplicates", 0)
    return quarantined / items if items else 0.0


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


def distribution_rows(
    name: str, new_hist: dict[str, list], base_hist: dict[str, list], limits: dict, categorical: bool = False
) -> dict:
    """Jensen-Shannon of one histogram, every split together, over the baseline's decile bins (or the categories),
    against the larger of its threshold and twice the baseline's own train-against-validation figure."""
    if categorical:
        keys = sorted(set().union(*new_hist.values(), *base_hist.values()))

        def one(hist, split):
            return np.array([hist[split].get(key, 0) for key in keys], dtype=np.float64)
    else:
        edges = quantile_bins(np.sum([base_hist[split] for split in SPLITS], axis=0))

        def one(hist, split):
            return rebin(hist[split], edges)

    def total(hist):  # every split's counts together
        return sum(one(hist, split) for split in SPLITS)

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
