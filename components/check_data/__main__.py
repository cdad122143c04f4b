"""``python -m components.check_data``: check a new data version against the one the model in service learned from
(the DAG step's code)."""

from __future__ import annotations

import argparse
import json

from components.artifacts.records import CHECKS
from components.check_data.config import CheckDataConfig
from components.check_data.core import run
from components.check_data.thresholds import THRESHOLDS, parse_thresholds
from components.cli import configure_logging, console_script
from components.flags import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    listed = "; ".join(f"{name} ({default:g}): {help}" for name, (default, help) in THRESHOLDS.items())
    parser = ArgumentParser(
        prog="python -m components.check_data",
        description="Compare a converted data version with the one the model in service learned from (label set, "
        "class mix, counts, quarantine rate, leakage, image or text distributions); writes <output>/"
        f"{CHECKS.name} and the version's statistics. Exit code 1 when a blocking check fails.",
    )
    parser.add_argument("--examples", dest="examples_dir", required=True, help="the convert step's output dir")
    parser.add_argument(
        "--baseline",
        default="",
        help="the statistics of the model in service's data: a check-data "
        "output or registered model holding data_stats.json, or that version's convert output; "
        "none: the first version (it passes, and says so)",
    )
    parser.add_argument("--output", dest="output_dir", required=True, help=f"where {CHECKS.name} goes")
    parser.add_argument(
        "--accept-data-change",
        action="store_true",
        help="go on past blocking checks, deliberately (recorded in the output)",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"set a threshold (repeat the flag for several): {listed}",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    result = run(
        CheckDataConfig(
            examples_dir=args.examples_dir,
            output_dir=args.output_dir,
            baseline=args.baseline,
            accept_data_change=args.accept_data_change,
            thresholds=parse_thresholds(args.threshold),
        )
    )
    print(
        json.dumps(
            {
                "blocked": result.blocked,
                "blocking": result.blocking,
                "warnings": result.warnings,
                "data_checks": CHECKS.path(args.output_dir),
            }
        )
    )
    return 0


cli = console_script(main)  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()
