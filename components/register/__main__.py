"""``python -m components.register``: the DAG's registry steps on their own, on a folder registry (numbered
versions and a ``default`` pointer, local or ``gs://``): ``baseline`` finds the model in service, ``add`` registers
a blessed export as its next version. (``python -m pipeline register`` uploads a SavedModel to the Vertex AI Model
Registry.)"""

from __future__ import annotations

import argparse
import json
import os

from components.cli import configure_logging, console_script
from components.flags import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m components.register",
        description="The registry steps of the DAG on a folder registry: find the model in service (the baseline "
        "evaluate compares against), or register a blessed export as the next numbered version and make it the "
        "default, unless it is the baseline itself.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    baseline = actions.add_parser("baseline", help="print the baseline: the one given, else the registry's default")
    add = actions.add_parser("add", help="register an export as the next version and make it the default")
    unfinished = actions.add_parser(
        "unfinished", help="list the copies a killed registration left (no version.json); --remove deletes them"
    )
    unfinished.add_argument(
        "--remove",
        action="store_true",
        help="delete them (those not written to for an hour: "
        "a copy still being written may be a registration in progress)",
    )
    add.add_argument("--export", required=True, help="the export step's output folder")
    add.add_argument("--run", default="", help="the run that made it, recorded with the version")
    add.add_argument(
        "--data-statistics",
        default="",
        metavar="DIR",
        help="the check-data step's output: the "
        "statistics of the data the model learned from, kept with the version (the data baseline of "
        "later runs) (default: none)",
    )
    add.add_argument(
        "--evaluation",
        default="",
        metavar="DIR",
        help="the evaluate step's output: its metrics.json "
        "is kept with the version (the prediction mix of later runs) (default: none)",
    )
    unfinished.add_argument("--registry", required=True, help="the registry folder (local or gs://)")
    unfinished.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    for action in (baseline, add):
        action.add_argument("--registry", required=True, help="the registry folder (local or gs://)")
        action.add_argument(
            "--baseline",
            help="the model in service, when known (add: the model the export was "
            'judged against, which must still be the registry\'s default; "": none) (default: the '
            "registry's default version)",
        )
        action.add_argument("--display-name", default="", help="the model's name (default: the registry folder's)")
        action.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    from components.register.vertex import find_baseline, register_version

    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    if args.action == "unfinished":
        return unfinished_versions(args.registry, args.remove)
    name = args.display_name or os.path.basename(args.registry.rstrip("/"))
    if args.action == "baseline":
        print(json.dumps({"baseline": find_baseline(name, args.baseline or "", args.registry, None)}))
    else:
        print(
            register_version(
                args.export,
                name,
                args.baseline or "",
                args.registry,
                args.run,
                None,
                evaluation=args.evaluation,
                data_statistics=args.data_statistics,
                judged=args.baseline is not None,
            )
        )
    return 0


IN_PROGRESS_SECONDS = 3600  # a copy written to more recently may be a registration still running


def unfinished_versions(root: str, remove: bool) -> int:
    """Prints each unfinished copy of the registry ``root`` (a line each), and with ``remove`` deletes those not
    written to for ``IN_PROGRESS_SECONDS``, taking the registry's turn first (locally)."""
    from components.artifacts.registry import FolderRegistry
    from components.storage import remove_tree

    registry = FolderRegistry(root)
    with registry.turn():
        unfinished = registry.unfinished()
        if not unfinished:
            print(f"{registry.root}: no unfinished copies")
        for number, age in unfinished:
            recent = age < IN_PROGRESS_SECONDS
            if remove and not recent:
                removed = remove_tree(f"{registry.root}/{number}")
                print(f"{registry.root}/{number}: removed ({removed} files of an unfinished copy)")
            else:
                state = "written to in the last hour: may be in progress" if recent else "no version.json"
                print(f"{registry.root}/{number}: unfinished ({state})")
    return 0


cli = console_script(main)  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()
