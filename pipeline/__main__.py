"""``python -m pipeline``: compile the DAG, run it locally under ``kfp.local``, submit it to Vertex AI Pipelines, and
schedule it to retrain. Each command group is a module of ``pipeline/cli/``."""

from __future__ import annotations

import argparse
import sys

from components.cli import configure_logging, console_script
from components.flags import ArgumentParser, unknown_flag
from pipeline.cli import compile as compile_command
from pipeline.cli import local, models, predict, vertex


def build_parser(dag_parameters: bool = False) -> argparse.ArgumentParser:
    """The CLI. ``dag_parameters``: give run-local a flag for every other pipeline parameter too (that imports the
    DAG, about 2 s, so only when run-local is asked for)."""
    parser = ArgumentParser(
        prog="python -m pipeline",
        description="Compile the classification DAG (images or texts) to pipeline.yaml, run it locally under "
        "kfp.local, submit it to Vertex AI Pipelines, or schedule it to retrain. Vertex AI settings: flags over "
        "environment variables (TPU_PIPELINE_PROJECT, TPU_PIPELINE_REGION, ...) over a YAML config file (--config) "
        "over defaults.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compile_command.add_command(commands)
    local.add_command(commands, dag_parameters)
    models.add_command(commands)
    predict.add_command(commands)
    vertex.add_commands(commands)
    for sub in subcommands(parser).values():  # -v after the subcommand too (only when given: never undoes a first -v)
        if "-v" not in sub._option_string_actions:
            sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging")
    return parser


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpu-image-pipeline")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "unknown"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its name path, "run-local" or "schedule create"."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {inner}": p for inner, p in subcommands(sub).items()})
    return found


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The arguments, and the parser of the (sub)command they chose: an unknown flag gets that command's usage."""
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(dag_parameters="run-local" in words)
    unknown_flag(parser, words)
    args, unknown = parser.parse_known_args(argv)
    chosen = subcommands(parser)[" ".join(filter(None, (args.command, getattr(args, "action", None))))]
    if unknown:
        chosen.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args, chosen


def main(argv: list[str] | None = None) -> int:
    args, chosen = parse(argv)
    configure_logging(args.verbose)
    if args.command in ("check", "submit", "schedule", "register", "deploy", "batch-predict"):
        return vertex.run(args)
    if args.command == "predict":
        return predict.run(args)
    if args.command == "compile":
        return compile_command.run(args)
    if args.command == "models":
        return models.run(args)
    return local.run(args, chosen)


cli = console_script(main)  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()
