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
import os

from components.artifacts.data_statistics import DataChecks, DataStatistics
from components.artifacts.records import DATA_STATS
from components.check_data import statistics as data_statistics
from components.check_data.config import CheckDataConfig
from components.check_data.distributions import (
    check_class_mix,
    check_counts,
    check_images,
    check_label_set,
    check_quarantine,
    check_split_mix,
    check_texts,
)
from components.check_data.leakage import check_leakage
from components.check_data.thresholds import row, threshold_values, verdict_of
from components.cli import StepFailedError, UsageError
from components.modalities import modality_of

log = logging.getLogger(__name__)


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
    rows += DISTRIBUTION_CHECKS[modality_of(new).name](new, base, limits)
    return [*rows, own]


# each modality's distributions against the baseline's (what its statistics describe)
DISTRIBUTION_CHECKS = {"image": check_images, "text": check_texts}


class DataBlockedError(StepFailedError):
    """The new version fails a blocking data check: the run stops before training (exit code 1), with each reason
    on a line of its own."""

    whole_message = True


FIRST_VERSION = (
    "the first version, with no baseline: nothing to compare with; its own leakage is reported, never blocking"
)


def load_baseline(baseline: str) -> tuple[tuple[DataStatistics, dict] | None, str, str]:
    """(statistics and near-duplicate keys or None, the folder they came from, a note when None) of ``baseline``:
    a folder with ``data_stats.json`` (a check-data output; a registered version, whose SavedModel folder the
    Vertex AI Model Registry names: its parent is looked at too), or a convert output whose statistics are computed
    here. A model without statistics (registered before the data checks), or statistics another version of the
    pipeline made (or that lack a field), are no baseline, with a note (and a warning); a path that does not exist is
    a one-line error."""
    from components.artifacts.exported import version_folders
    from components.artifacts.records import STATS

    if not baseline:
        return None, "", FIRST_VERSION
    folder, made_by = baseline.rstrip("/"), ""
    for place in version_folders(folder):
        statistics = DATA_STATS.read_any(place, missing_ok=True)
        if statistics is not None and not (made_by := DataStatistics.made_by(statistics)):
            found = DataStatistics.from_dict(statistics, f"{DATA_STATS.folder} {place}")
            return (found, data_statistics.read_keys(place)), place, ""
    examples = STATS.read_any(folder, missing_ok=True)
    if examples is not None and not (made_by := STATS.other_version(examples)):
        return data_statistics.compute(folder), folder, ""
    if made_by:
        note = (
            f"the baseline {baseline}'s statistics were made by {made_by}: nothing to compare with; the new data's "
            "own leakage is reported, never blocking"
        )
        return None, "", note
    if "://" not in folder and not os.path.exists(folder):
        raise UsageError(
            f"--baseline {baseline} does not exist: pass the check-data output, the examples or the "
            "registered model of the model in service"
        )
    note = (
        f"the baseline {baseline} holds no {DATA_STATS.name} (an export step's output, or a model "
        "registered before the data checks: a registered version keeps them): nothing to compare with; the new "
        "data's own leakage is reported, never blocking"
    )
    return None, "", note


def run(config: CheckDataConfig) -> DataChecks:
    """Computes the new version's statistics, compares them with the baseline's, writes ``data_checks.json`` and the
    statistics; returns the checks. Raises ``DataBlockedError`` (after writing) when a blocking check fails."""
    from components.storage import check_writable

    check_writable(config.output_dir, "--output")
    limits = threshold_values(config.thresholds)
    base, base_folder, note = load_baseline(config.baseline)
    base_statistics, base_keys = base if base else (None, None)
    vocabulary, served_standardization = None, None
    if base_statistics is not None:  # (a text model in service reads its own vocabulary)
        vocabulary, served_standardization = modality_of(base_statistics).served_tokens(base_folder, base_statistics)
    new, new_keys = data_statistics.compute(config.examples_dir, vocabulary, served_standardization)
    data_statistics.write(config.output_dir, new, new_keys)
    for name in modality_of(new).companion_files:  # (a text's vocabulary) beside them: a baseline as it is
        from components.storage import open_read, write_atomically

        with open_read(f"{config.examples_dir.rstrip('/')}/{name}") as handle:
            write_atomically(f"{config.output_dir.rstrip('/')}/{name}", handle.read())
    rows = compare(new, new_keys, base_statistics, base_keys, limits)
    outcome = verdict_of(rows, base is not None, config.accept_data_change)
    result = DataChecks(
        examples=config.examples_dir,
        baseline=config.baseline,
        baseline_statistics=base_folder,
        baseline_note=note,
        **outcome,
        thresholds=limits,
        checks=rows,
    )
    result.write(config.output_dir)
    report(result)
    if result.blocked:
        raise DataBlockedError(
            "the new data is blocked before training:\n"
            + "\n".join(f"  {reason}" for reason in result.blocking)
            + "\n  (pass --accept-data-change, the DAG's accept_data_change, to train on it anyway; the run records it)"
        )
    return result


def report(result: DataChecks) -> None:
    """A line per check that did not pass, and the outcome, to the log (the terminal, Cloud Logging)."""
    if result.baseline_note:  # (a first version is as expected; a baseline without statistics to compare is not)
        level = logging.INFO if result.baseline_note == FIRST_VERSION else logging.WARNING
        log.log(level, "check data: %s", result.baseline_note)
    # a blocking row stops the run with its reasons (DataBlockedError); one that did not (accepted) is logged here
    for found in result.checks:
        if found["verdict"] in ("warn", "skipped") or (found["verdict"] == "block" and not result.blocked):
            split = f" ({found['split']})" if found.get("split") else ""
            verdict = "block, accepted" if found["verdict"] == "block" else found["verdict"]
            log.warning("check data: %s %s%s: %s", verdict, found["check"], split, found["detail"])
    counts = {
        verdict: sum(1 for found in result.checks if found["verdict"] == verdict)
        for verdict in ("pass", "warn", "block", "skipped")
    }
    summary = ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count)
    if result.accepted_data_change:
        log.warning(
            "check data: %s; blocking checks accepted (--accept-data-change): %s",
            summary,
            "; ".join(result.blocking),
        )
    else:
        log.info("check data: %s", summary)
