"""``python -m components.evaluate``: evaluate a trained model on the test split (the DAG step's code)."""

from __future__ import annotations

import argparse
import json

from components.artifacts.records import METRICS
from components.cli import configure_logging, console_script
from components.evaluate.config import EvaluateConfig
from components.evaluate.core import run
from components.flags import ArgumentParser, add_param, config_from_args
from components.params import EVALUATE


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m components.evaluate",
        description="Accuracy, per-class precision and recall and the confusion matrix of a trained model on a "
        "split of the converted TFRecords; writes <output>/metrics.json.",
    )
    parser.add_argument("--examples", dest="examples_dir", required=True, help="the convert step's output dir")
    parser.add_argument("--model-dir", required=True, help="the train step's output dir")
    parser.add_argument("--output", dest="output_dir", required=True, help="where metrics.json goes")
    parser.add_argument(
        "--data-checks",
        default="",
        metavar="DIR",
        help="the check-data step's output: its checks go into the report (default: none)",
    )
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"), help="default %(default)s")
    for name in EVALUATE:
        add_param(parser, EVALUATE, name)
    parser.add_argument(
        "--screenshot",
        action="store_true",
        help="also save report.png beside report.html, as a headless Chromium draws it (apt-get install chromium; "
        "TPU_PIPELINE_BROWSER names another browser binary)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    metrics = run(config_from_args(EvaluateConfig, args))
    print(
        json.dumps(
            {
                "accuracy": metrics.accuracy,
                "num_examples": metrics.num_examples,
                "blessed": metrics.blessing["blessed"],
                "reasons": metrics.blessing["reasons"],
                "metrics_json": METRICS.path(args.output_dir),
                **({"report_png": (metrics.report_screenshot or {}).get("path")} if args.screenshot else {}),
            }
        )
    )
    return 0


cli = console_script(main)  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()
