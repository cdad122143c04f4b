"""The blessing, as TFX's Evaluator decides it: value thresholds (``min_accuracy``, by default beating the most
common class by more than chance), and a change threshold against the model in service (``max_accuracy_drop``);
and the prediction-mix row, the model in service's answers on the new data against its own evaluation's."""

from __future__ import annotations

import math

from components.artifacts.evaluation import Evaluation, answered_counts
from components.cli import UsageError


def check_fraction(flag: str, value: float) -> None:
    """A blessing threshold must be a fraction in [0, 1]; a one-line error naming the flag otherwise."""
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"{flag} {value} is out of range: use a fraction in [0, 1]")


CHANCE_Z = 2.326  # the automatic bar's one-sided confidence, 99%


def chance_bar(per_class: dict) -> tuple[str, float, int, float]:
    """What beating chance takes on these test examples (``per_class``: their support by class): the most common
    class, its share, the number of examples, and the accuracy a model needs to beat always answering that class by
    more than chance gives at 99% confidence (the share, plus 2.326 standard errors of a binomial share of that many
    examples, plus half an example)."""
    count = sum(figures["support"] for figures in per_class.values())
    name = max(per_class, key=lambda c: per_class[c]["support"])
    share = per_class[name]["support"] / max(count, 1)
    return name, share, count, share + CHANCE_Z * math.sqrt(share * (1 - share) / max(count, 1)) + 0.5 / max(count, 1)


def bless(
    accuracy: float,
    min_accuracy: float,
    baseline_accuracy: float | None,
    max_accuracy_drop: float,
    not_comparable: str | None = None,
    per_class: dict | None = None,
    not_learning: str | None = None,
) -> dict:
    """The blessing: ``blessed`` and the ``reasons`` for it, one per threshold, those that decided against it first.
    ``not_comparable``: why a baseline was given but cannot be compared (the value threshold alone decides, and the
    reason says so).

    The value threshold: ``min_accuracy``, an absolute bar; 0 (the default), beating always answering the test
    split's most common class by more than chance would (``chance_bar``), whatever the number of classes.

    ``per_class`` (precision, recall, support by class): a model is never blessed while a class it should predict
    has recall 0 on its test examples, or has no test example at all (then nothing shows it can predict it).

    ``not_learning``: why training ended at chance or diverged (``components.learning``): never blessed, and that
    reason comes first, since it explains the others."""
    failed, passed = [], []  # the reasons of each kind

    def check(holds: bool, reason: str) -> None:
        (passed if holds else failed).append(reason)

    if not_learning:
        check(False, f"training did not learn: {not_learning}")
    needed = None
    if min_accuracy > 0 or not per_class:
        meets = accuracy >= min_accuracy
        check(meets, f"accuracy {accuracy:.4f} {'meets' if meets else 'is below'} the minimum {min_accuracy:.4f}")
    else:
        name, share, count, needed = chance_bar(per_class)
        always = f"always answering {name} ({share:.4f} of the {count} test examples)"
        own = "--min-accuracy sets a bar of your own"
        if needed > 1:
            check(False, f"{count} test examples are too few to show that a model beats {always}: add data ({own})")
        elif accuracy < needed:
            check(
                False,
                f"accuracy {accuracy:.4f} does not beat {always} by more than chance: it needs {needed:.4f} ({own})",
            )
        else:
            check(True, f"accuracy {accuracy:.4f} beats {always} beyond chance (it needed {needed:.4f})")
    if not_comparable:
        check(True, f"baseline not comparable: {not_comparable}: judged on the value threshold alone")
    elif baseline_accuracy is None:
        check(True, "no baseline model: judged on the value threshold alone")
    elif accuracy < baseline_accuracy - max_accuracy_drop - 1e-12:
        allowed = f"by more than the allowed {max_accuracy_drop:.4f}"
        check(False, f"accuracy {accuracy:.4f} is below the baseline's {baseline_accuracy:.4f} {allowed}")
    else:
        allowed = f" by more than {max_accuracy_drop:.4f}" if max_accuracy_drop else ""
        check(True, f"accuracy {accuracy:.4f} is not worse than the baseline's {baseline_accuracy:.4f}{allowed}")
    for name, figures in (per_class or {}).items():
        if figures["support"] == 0:
            check(False, f"class {name} has no test example: nothing shows the model predicts it (add images)")
        elif figures["recall"] == 0.0:
            support = figures["support"]
            check(False, f"class {name}: recall 0 (none of its {support} test examples predicted right)")
    return {
        "blessed": not failed,
        "reasons": failed + passed,
        "thresholds": {"min_accuracy": min_accuracy, "max_accuracy_drop": max_accuracy_drop, "chance_bar": needed},
        "baseline_accuracy": baseline_accuracy,
        "baseline_comparable": not not_comparable,
    }


def prediction_mix(answered: dict[str, int], kept: Evaluation | None, split: str, warn: float, least: float) -> dict:
    """The model in service's answers on the new data's ``split`` (``answered``: how often it gave each class)
    against its answers on its own evaluation split (``kept``: the ``metrics.json`` its registered version keeps):
    the L-infinity distance of the two class mixes, as a row of the data checks. It warns above ``warn`` and never
    blocks: the model in service answering differently says the data moved, or the model's errors did. Skipped,
    with a word, without a kept evaluation, or with fewer than ``least`` answers on either side."""

    def row(verdict: str, value: float | None = None, detail: str = "") -> dict:
        return {
            "check": "prediction mix",
            "verdict": verdict,
            "severity": "warn",
            "value": value,
            "thresholds": {"warn": warn},
            "detail": detail,
            "split": split,
        }

    if kept is None:
        return row(
            "skipped",
            detail="the model in service keeps no evaluation of its own (a version that the "
            "register step keeps with its metrics.json does): nothing to compare its answers with",
        )
    before = answered_counts(kept.confusion_matrix, kept.class_names)
    if sorted(before) != sorted(answered):
        return row("skipped", detail="the model in service's own evaluation was of other classes")
    now_total, before_total = sum(answered.values()), sum(before.values())
    if min(now_total, before_total) < least:
        return row(
            "skipped",
            detail=f"{min(now_total, before_total)} answers on one side, under "
            f"min_split_examples {least:g}: too few to compare shares",
        )
    names = list(answered)
    moved = {name: answered[name] / now_total - before[name] / before_total for name in names}
    most = max(names, key=lambda name: abs(moved[name]))
    distance = abs(moved[most])
    own_split = kept.split
    detail = (
        f"class {most} {before[most] / before_total:.1%} -> {answered[most] / now_total:.1%} of its answers "
        f"(its {own_split} split of {before_total}, this {split} split of {now_total})"
    )
    return row("warn" if distance > warn else "pass", round(distance, 4), detail)
