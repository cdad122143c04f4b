"""``python -m components.export``: export a trained model as a CPU SavedModel (the DAG step's code)."""

from __future__ import annotations

import argparse
import json

from components.cli import configure_logging, console_script
from components.export.core import ExportConfig, run
from components.flags import ArgumentParser, comma_separated, config_from_args
from components.params import EXPORT


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m components.export",
        description="Rebuild the trained model on the CPU, load its weights and write a SavedModel whose "
        "serving_default signature takes image_bytes (encoded JPEG/PNG; a text model's: text, raw strings, tokenised "
        "in the graph) and returns probabilities, class_id and label, and TFLite files; checks its predictions "
        "against the trained model's on the test split.",
    )
    parser.add_argument("--model-dir", required=True, help="the train step's output dir")
    parser.add_argument(
        "--examples", dest="examples_dir", required=True, help="the convert step's output dir (for the parity check)"
    )
    parser.add_argument("--output", dest="output_dir", required=True, help="gets saved_model/ and export.json")
    parser.add_argument(
        "--evaluation",
        dest="evaluation_dir",
        default="",
        help="the evaluate step's output dir: its report, led by the served model's test accuracy, goes beside the "
        "export as report.html (default none)",
    )
    parser.add_argument(
        EXPORT["export_formats"].flag,
        dest="formats",
        type=comma_separated,
        default=EXPORT["export_formats"].default,
        metavar="A,B,...",
        help=EXPORT["export_formats"].help_with_default() + ", comma-separated",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    report = run(config_from_args(ExportConfig, args))
    print(json.dumps({"saved_model": report.saved_model["path"], "parity": report.parity}))
    return 0


cli = console_script(main)  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()
