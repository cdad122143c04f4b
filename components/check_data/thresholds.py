"""The data checks' thresholds (every one by the name ``--threshold NAME=VALUE`` takes, with its default and
meaning), the row each check gives, its grading, and the step's verdict over the rows."""

from __future__ import annotations

from components.artifacts.data_statistics import MIN_SPLIT_EXAMPLES, PREDICTION_MIX_WARN
from components.cli import UsageError

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
