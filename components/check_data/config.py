"""What the data checks compare and how strictly (``CheckDataConfig``), and the parsing of ``--data-thresholds``:
the checks of the step's values that run-local, submit and schedule make before a run."""

from __future__ import annotations

from dataclasses import dataclass, field

from components.check_data.thresholds import THRESHOLDS, parse_thresholds
from components.cli import UsageError
from components.params import CHECK_DATA, EVALUATE

__all__ = ["CheckDataConfig", "parse_thresholds"]


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
