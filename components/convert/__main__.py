"""``python -m components.convert``: an image folder (or a text source) to sharded TFRecords (the same code the DAG's
step runs)."""

from __future__ import annotations

import argparse
import json

from components.cli import configure_logging, console_script
from components.convert.common import ConversionError
from components.convert.core import ConvertConfig
from components.convert.dispatch import convert_source
from components.flags import ArgumentParser, add_param, class_names_flag, image_size_flag
from components.params import CONVERT, TEXT
from components.schema import MODALITIES


def build_parser() -> argparse.ArgumentParser:
    defaults = ConvertConfig(source="", output_dir="")
    parser = ArgumentParser(
        prog="python -m components.convert",
        description="Convert an image folder (<root>/<class_name>/*, local or gs://), a CSV manifest "
        "([ML_USE,]IMAGE_URI,LABEL rows, Vertex AI's import format) or a .npz into sharded TFRecords "
        "in the Keras-on-TPU codelab schema, with Apache Beam; or texts (a folder of .txt per class, aclImdb's "
        "layout, a .jsonl or a .csv of text and label columns) into token ids with a vocabulary. Options this tool "
        "does not know are passed to Beam "
        "as pipeline options, e.g. --runner DataflowRunner --project P --region R --temp_location gs://...",
    )
    parser.add_argument(
        "--source",
        required=True,
        help="image folder <root>/<class_name>/<image>, a .csv manifest, a .npz of arrays x and y, or a glob of "
        "TFRecords in the codelab schema (validated and used as they are); text: a folder <root>/<class_name>/*.txt "
        "(or aclImdb's <root>/train|test/<class_name>/*.txt), a .jsonl, or a .csv with --modality text",
    )
    add_param(parser, CONVERT, "modality", choices=MODALITIES)
    parser.add_argument(
        "--output", dest="output_dir", required=True, help="examples dir: <split>/*.tfrec, stats.json, quarantine.jsonl"
    )
    add_param(parser, CONVERT, "image_size", type=image_size_flag)
    for name in ("validation_fraction", "test_fraction", "num_shards"):
        add_param(parser, CONVERT, name)
    parser.add_argument(
        "--jpeg-quality",
        type=int,
        default=defaults.jpeg_quality,
        help="quality of the re-encoded JPEGs (default %(default)s)",
    )
    add_param(parser, CONVERT, "max_bad_fraction")
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=defaults.max_pixels,
        help="quarantine images with more pixels, as decompression bombs (default %(default)s)",
    )
    add_param(parser, CONVERT, "classes", metavar="A,B,C", type=class_names_flag)
    parser.add_argument(
        "--threads",
        type=int,
        default=defaults.threads,
        help="parallel conversions per worker: processes of their own on the local engine for local files, threads "
        "elsewhere; 0: one per core, four threads per core for gs:// (default %(default)s)",
    )
    texts = parser.add_argument_group("text sources")
    for name in TEXT:
        add_param(texts, TEXT, name)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    configure_logging(args.verbose)
    try:
        stats = convert_source(args.modality, {**vars(args), "pipeline_args": tuple(beam_args)})
    except ConversionError as err:
        print(f"error: {err}")
        return 1
    print(json.dumps({"counts": stats["counts"], "quarantined": stats["quarantined"], "output": args.output_dir}))
    return 0


cli = console_script(main, at_once=True)  # the console script (pyproject.toml); Beam's teardown skipped


if __name__ == "__main__":
    cli()
