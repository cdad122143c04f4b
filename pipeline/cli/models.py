"""``python -m pipeline models``: the built-in models, and a model of one's own checked before it trains."""

from __future__ import annotations

import argparse
import json
import sys

from components.params import TEXT, TRAIN

CHECK_BACKENDS = ("jax", "tensorflow")


def add_command(commands) -> None:
    models_cmd = commands.add_parser(
        "models",
        help="list the built-in models, or check a model of your own",
        description="Every model is a builder build(spec, **hparams) that returns a Keras model (docs/your-model.md): "
        "ours by name, yours as FILE.py[:FUNCTION] or MODULE:FUNCTION.",
    )
    actions = models_cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="the built-in models: what they take, their hyperparameters")
    check = actions.add_parser(
        "check",
        help="build a model as a run would and check it: its input, its outputs, its custom layers",
        description="Import the model, build it with its hyperparameters for the input and classes given, and "
        "check what a run checks before training: it takes the pipeline's input, ends in a probability for each "
        "class, runs on the backend (TensorFlow calls do not run under JAX, which trains on TPUs), and saves and "
        "loads again. One line for a mistake, exit 2; its traceback goes to stderr.",
    )
    check.add_argument("model", metavar="MODEL", help="a built-in model, FILE.py[:FUNCTION] or MODULE:FUNCTION")
    check.add_argument(
        "--hparam", dest="hparams", action="append", default=[], metavar="NAME=VALUE", help=TRAIN["hparams"].help
    )
    shape = check.add_mutually_exclusive_group()
    shape.add_argument("--image-size", type=int, default=32, help="images of this side (default %(default)s)")
    shape.add_argument("--sequence-length", type=int, help="texts of this many token ids (instead of images)")
    check.add_argument(
        "--vocabulary-size",
        type=int,
        default=TEXT["vocabulary_size"].default,
        help="texts: ids below this (default %(default)s)",
    )
    check.add_argument(
        "--classes", default="10", metavar="N|A,B,...", help="how many classes, or their names (default %(default)s)"
    )
    check.add_argument(
        "--no-build",
        dest="build",
        action="store_false",
        help="only import it and check its hyperparameters (no input is known yet)",
    )
    check.add_argument(
        "--backend",
        choices=CHECK_BACKENDS,
        default="jax",
        help="the Keras backend to build it on (default %(default)s: the TPUs')",
    )
    check.add_argument("--json", action="store_true", help="one JSON line: what was found, or the error")


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return list_builtins()
    return check_model(args)


def list_builtins() -> int:
    """The built-in models, a line each: name, modality, smallest image, hyperparameters, what it is."""
    from components.modalities import named
    from components.models import BUILTINS, DEFAULT_MODELS, load
    from components.models.source import hparam_defaults

    rows = []
    for name, builtin in BUILTINS.items():
        hparams, _ = hparam_defaults(load(name))
        takes = named(builtin.modality).takes(builtin.min_image_size)
        shown = ", ".join(f"{key}={value}" for key, value in hparams.items()) or "-"
        default = " (default)" if DEFAULT_MODELS[builtin.modality] == name else ""
        rows.append((name, takes + default, shown, builtin.about))
    width = max(len(row[2]) for row in rows)
    for name, takes, shown, about in [("model", "takes", "hyperparameters", "what it is"), *rows]:
        print(f"{name:<20} {takes:<28} {shown:<{width}} {about}")
    print(
        "Your own: --model FILE.py[:FUNCTION] or MODULE:FUNCTION, a builder build(spec, **hparams) "
        "(docs/your-model.md)."
    )
    return 0


def class_names(text: str) -> tuple[str, ...]:
    """``--classes``: a number of classes (named ``class_0``, ...), or their names."""
    from components.cli import UsageError
    from components.flags import comma_separated

    if text.strip().isdigit():
        count = int(text)
        if count < 2:
            raise UsageError(f"--classes {text}: a classifier needs 2 classes or more")
        return tuple(f"class_{index}" for index in range(count))
    return tuple(comma_separated(text))


def check_model(args: argparse.Namespace) -> int:
    from components.cli import UsageError
    from components.models import ModelSpec
    from components.models.checks import TensorFlowUnderJaxError, check_code

    spec = None
    if args.build:
        names = class_names(args.classes)
        spec = (
            ModelSpec.for_texts(args.sequence_length, args.vocabulary_size, len(names), names)
            if args.sequence_length
            else ModelSpec.for_images(args.image_size, len(names), names)
        )
    try:
        found = check_code(args.model, args.hparams, spec, args.backend)
    except UsageError as err:
        if not args.json:
            raise
        print(json.dumps({"error": str(err), "tensorflow_under_jax": isinstance(err, TensorFlowUnderJaxError)}))
        return 2
    if args.json:
        print(json.dumps(found, default=str))
        return 0
    digest = f" (sha256 {found['sha256'][:16]})" if found["sha256"] else ""
    values = ", ".join(f"{key}={value}" for key, value in found["hparams"].items()) or "none"
    print(f"{found['model']}{digest}: hyperparameters {values}", file=sys.stdout)
    if spec is not None:
        print(
            f"  builds on {args.backend} for {found['input']} and {found['classes']} classes: "
            f"{found['parameters']:,} parameters; its input, outputs and saving check"
        )
    if found["search_space"]:
        print(f"  searches {', '.join(found['search_space'])} with --tune")
    return 0
