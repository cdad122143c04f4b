"""``python -m components.convert.fingerprint``: the fingerprint of a source, as the DAG's fingerprint step
computes it (the conversion records the same one in ``stats.json``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from components.cli import configure_logging, console_script
from components.convert.listing import resolve_modality, source_fingerprint
from components.convert.text_listing import text_source_fingerprint
from components.flags import ArgumentParser, add_param, class_names_flag
from components.params import CONVERT, TEXT
from components.schema import MODALITIES


def fingerprint_source(
    source: str,
    classes: Sequence[str] = CONVERT["classes"].default,
    modality: str = CONVERT["modality"].default,
    text_column: str = TEXT["text_column"].default,
    label_column: str = TEXT["label_column"].default,
) -> str:
    """The fingerprint of any source convert takes, images or texts, as its conversion will record it."""
    fingerprints = {
        "image": lambda: source_fingerprint(source, classes),
        "text": lambda: text_source_fingerprint(source, classes, text_column, label_column),
    }
    return fingerprints[resolve_modality(modality, source, text_column, label_column)]()


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m components.convert.fingerprint",
        description="Print the fingerprint of a source (sha256 over its files' paths, sizes and modification times, "
        "and a manifest's bytes): the DAG reruns the conversion, cached or not, only when it changes.",
    )
    parser.add_argument(
        "--source",
        required=True,
        help="what convert takes: an image folder, a CSV manifest, an .npz, TFRecords, texts; local or gs://",
    )
    add_param(parser, CONVERT, "classes", metavar="A,B,C", type=class_names_flag)
    add_param(parser, CONVERT, "modality", choices=MODALITIES)
    add_param(parser, TEXT, "text_column")
    add_param(parser, TEXT, "label_column")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:

    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    found = fingerprint_source(args.source, tuple(args.classes), args.modality, args.text_column, args.label_column)
    print(json.dumps({"source": args.source, "fingerprint": found}))
    return 0


cli = console_script(main)  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()
