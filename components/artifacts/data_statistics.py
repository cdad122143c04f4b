"""The data statistics artifact: the check-data step's output (``data_checks.json``, and a data version's statistics,
which ``components.check_data.statistics`` writes and reads), and the copy of the statistics that the register step
keeps with a version, so that a later run finds the statistics of the data the model in service learned from in its
registered folder."""

from __future__ import annotations

from components.artifacts.records import CHECKS, DATA_STATS

# two thresholds of the data checks that evaluate reads too (the rest: components.check_data.thresholds.THRESHOLDS), for
# the prediction mix, which it checks where the model in service already answers on the new data
MIN_SPLIT_EXAMPLES = 20
PREDICTION_MIX_WARN = 0.1
NEAR_DUPLICATES_NAME = "near_duplicates.npz"
FILES = (DATA_STATS.name, NEAR_DUPLICATES_NAME)


def read_checks(checks_dir: str) -> dict:
    """The data checks in ``checks_dir`` (a check-data output): the rows, the warnings, the blocking reasons and
    whether they were accepted, and the baseline's note; a one-line error when it holds none."""
    found = CHECKS.read(checks_dir)
    keys = ("checks", "warnings", "blocking", "accepted_data_change", "baseline_note")
    return {**{key: found[key] for key in keys}, "thresholds": found.get("thresholds", {})}


def test_copies(checks: dict) -> dict | None:
    """Of the data checks ``read_checks`` read: the test examples with a near-copy in train (``found``) of those
    compared (``compared``); None when the checks did not look."""
    across = next((row for row in checks["checks"] if row["check"] == "leakage across splits"), {})
    return across.get("test_copies")


def keep_with_model(statistics_dir: str, export_dir: str) -> None:
    """Copies the statistics in ``statistics_dir`` (a check-data output) into ``export_dir`` (a registered version's
    folder, beside the export); a one-line error when it holds none."""
    from components.cli import UsageError
    from components.storage import exists, open_read, write_atomically

    for name in FILES:
        source = f"{statistics_dir.rstrip('/')}/{name}"
        if not exists(source):
            raise UsageError(f"--data-statistics {statistics_dir} has no {name}: pass the check-data step's output")
        with open_read(source) as handle:
            write_atomically(f"{export_dir.rstrip('/')}/{name}", handle.read())
