"""The data statistics artifact: the check-data step's output (``data_checks.json``, and a data version's statistics,
which ``components.check_data.statistics`` writes and reads), and the copy of the statistics that the register step
keeps with a version, so that a later run finds the statistics of the data the model in service learned from in its
registered folder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from components.artifacts.records import CHECKS, DATA_STATS, Facts, Record

# two thresholds of the data checks that evaluate reads too (the rest: components.check_data.thresholds.THRESHOLDS), for
# the prediction mix, which it checks where the model in service already answers on the new data
MIN_SPLIT_EXAMPLES = 20
PREDICTION_MIX_WARN = 0.1
NEAR_DUPLICATES_NAME = "near_duplicates.npz"
FILES = (DATA_STATS.name, NEAR_DUPLICATES_NAME)


@dataclass(frozen=True)
class DataStatistics(Facts):
    """``data_stats.json``: the statistics of one data version, as the data checks compare them
    (``components.check_data.statistics``).

    - Of its conversion's ``stats.json``: ``modality``, ``class_names``, ``counts``, ``per_class``,
      ``num_examples``, ``quarantined``, ``duplicates``, ``fingerprint``, ``source``, ``split_method``; and
      ``quarantine_reasons``, the quarantine's records by the kind of reason.
    - Per split, under the modality's name: ``image`` (brightness, contrast and the sources' sizes and formats) or
      ``text`` (token counts, truncated and out-of-vocabulary shares, under ``standardization``).
    - ``sampled``: the splits read as a sample of a large version, and the sample's size.

    It reads as the mapping of its fields too (``Facts``): the checks read each modality's block by its name."""

    RECORD: ClassVar[Record] = DATA_STATS

    modality: str
    class_names: list[str]
    counts: dict[str, int]
    per_class: dict[str, dict[str, int]]
    num_examples: int
    quarantined: int
    duplicates: int
    quarantine_reasons: dict[str, int]
    fingerprint: str
    source: str
    split_method: int
    image: dict | None = None
    text: dict | None = None
    standardization: str | None = None
    sampled: dict[str, int] | None = None


@dataclass(frozen=True)
class DataChecks(Facts):
    """``data_checks.json``: a data version against the data the model in service learned from.

    - What was compared: ``examples`` (the new version), ``baseline`` (the registered folder given, "" for none) and
      ``baseline_statistics`` (where its statistics were found, "" for none), ``baseline_note`` (why nothing was
      compared, where nothing was), and the ``thresholds`` the checks used.
    - ``checks``: a row per check (``check``, ``verdict``, ``severity``, ``value``, ``thresholds``, ``split``,
      ``detail``).
    - The outcome: ``blocked``, the ``blocking`` and ``warnings`` reasons, and ``accepted_data_change`` (whether the
      run accepted blocking reasons, which then did not block).

    It reads as the mapping of its fields too (``Facts``)."""

    RECORD: ClassVar[Record] = CHECKS

    examples: str
    baseline: str
    baseline_statistics: str
    baseline_note: str
    blocked: bool
    blocking: list[str]
    warnings: list[str]
    accepted_data_change: bool
    thresholds: dict[str, float]
    checks: list[dict]

    def for_report(self) -> dict:
        """What evaluate keeps of them in its ``metrics.json``, for its report and the export's: the rows, the
        reasons and whether they were accepted, the baseline's note and the thresholds."""
        keys = ("checks", "warnings", "blocking", "accepted_data_change", "baseline_note", "thresholds")
        return {key: getattr(self, key) for key in keys}


def read_checks(checks_dir: str) -> DataChecks:
    """The data checks in ``checks_dir`` (a check-data output); a one-line error when it holds none."""
    return DataChecks.read(checks_dir)


def test_copies(rows: list[dict]) -> dict | None:
    """Of the data checks' ``rows``: the test examples with a near-copy in train (``found``) of those compared
    (``compared``); None when the checks did not look."""
    across = next((row for row in rows if row["check"] == "leakage across splits"), {})
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
