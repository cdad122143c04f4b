"""``python -m pipeline predict``: top labels from an exported model on the CPU or a Vertex AI endpoint."""

from __future__ import annotations

import argparse
import sys

from components.cli import UsageError


def add_command(commands) -> None:
    from pipeline.cli.vertex import add_vertex_options

    predict_cmd = commands.add_parser(
        "predict",
        help="top labels for image files or texts, from an exported model on the CPU or a Vertex AI endpoint",
        description="Print the top labels with their probabilities for each image (or, for a text model, each "
        "--text and --text-file; a folder stands for the files under it), from the export step's "
        "SavedModel (or a TFLite file of it) on this machine, or from the model a Vertex AI endpoint serves "
        '(--endpoint: each image sent as {"image_bytes": {"b64": ...}}). An image that cannot be decoded is '
        "reported on one line; the others are still answered (exit 2 when any could not be).",
    )
    where = predict_cmd.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="the export step's output dir (or its saved_model/, or a .tflite file)")
    where.add_argument("--endpoint", help="a Vertex AI endpoint (resource name or display name) serving an export")
    add_vertex_options(predict_cmd, for_jobs=False)
    predict_cmd.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="image files (JPEG, PNG, GIF, BMP, WebP), or folders: the image files under them, at any depth",
    )
    predict_cmd.add_argument(
        "--text",
        action="append",
        default=[],
        metavar="TEXT",
        help="a text for a text model (repeat for more); tokenised as the conversion did",
    )
    predict_cmd.add_argument(
        "--text-file",
        action="append",
        default=[],
        metavar="FILE",
        help="a UTF-8 file holding one text for a text model, or a folder: the .txt files under it, at any depth "
        "(repeat for more)",
    )
    predict_cmd.add_argument("--top", type=int, default=3, help="labels per image or text (default %(default)s)")
    predict_cmd.add_argument("--json", action="store_true", help="one JSON object per image or text instead")


def run(args: argparse.Namespace) -> int:
    import json

    texts = bool(args.text or args.text_file)
    if texts == bool(args.images):
        raise UsageError(
            "pass either images or --text/--text-file (a text model's inputs)"
            if texts
            else "pass image files, or --text/--text-file for a text model"
        )
    if texts and args.endpoint:
        raise UsageError("--endpoint takes images; predict texts with --model (the export step's output)")
    from components.decoding import IMAGE_FILES, IMAGE_SUFFIXES
    from pipeline.predict import TEXT_FILES, files_under

    images, notes, unread = files_under(args.images, IMAGE_SUFFIXES, "image", IMAGE_FILES)
    text_files, text_notes, unread_texts = files_under(args.text_file, (".txt",), "text", TEXT_FILES)
    for note in notes + text_notes:
        print(f"note: {note}", file=sys.stderr)
    if texts:
        from pipeline.predict import predict_texts

        answers, errors = predict_texts(args.model, args.text, text_files, args.top)
    elif args.endpoint:
        from components.vertex_client import VertexError
        from pipeline.deployment import predict_endpoint

        try:
            from pipeline.cli.vertex import vertex_settings

            answers, errors = predict_endpoint(vertex_settings(args), args.endpoint, images, args.top)
        except VertexError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    else:
        from pipeline.predict import predict

        answers, errors = predict(args.model, images, args.top)
    for answer in answers:
        if args.json:
            where = {"text": answer.text} if answer.text is not None else {"path": answer.path}
            print(json.dumps({**where, "top": [{"label": n, "probability": p} for n, p in answer.top]}))
        else:
            print(answer.line())
    for error in unread + unread_texts + errors:
        print(f"error: {error}", file=sys.stderr)
    return 2 if unread or unread_texts or errors else 0
