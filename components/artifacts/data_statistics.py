"""The data statistics artifact: a data version's statistics (``components.check_data.statistics`` writes and reads
them), and the copy that the export keeps beside the model, so that a later run finds the statistics of the data
the model in service learned from in its registered folder."""

from __future__ import annotations

STATS_NAME = "data_stats.json"
NEAR_DUPLICATES_NAME = "near_duplicates.npz"
FILES = (STATS_NAME, NEAR_DUPLICATES_NAME)


def keep_with_model(statistics_dir: str, export_dir: str) -> None:
    """Copies the statistics in ``statistics_dir`` (a check-data output) into ``export_dir``; a one-line error when
    it holds none."""
    from components.cli import UsageError
    from components.storage import exists, open_read, write_atomically

    for name in FILES:
        source = f"{statistics_dir.rstrip('/')}/{name}"
        if not exists(source):
            raise UsageError(f"--data-statistics {statistics_dir} has no {name}: pass the check-data step's output")
        with open_read(source) as handle:
            write_atomically(f"{export_dir.rstrip('/')}/{name}", handle.read())
