"""What every ``python -m components.<step>`` shares: logging set-up and the one-line error contract."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable


class ArgumentParser(argparse.ArgumentParser):
    """Every command line of the project: a flag is spelt whole (``--epoch 3`` is an error, not ``--epochs 3``, as in
    Beam's strict options); a subcommand's parser is of the same kind."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)


class UsageError(ValueError):
    """A mistake in the user's input: reported as one line on stderr, exit code 2, no traceback."""


USAGE_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as shells report a Ctrl-C
# set by run-local: a step that dies of an exception appends {"error", "usage"} as a JSON line to this file, so that
# the run can end on the step's own reason instead of the orchestrator's traceback
STEP_FAILURE_ENV = "TPU_PIPELINE_STEP_FAILURES"


class StepFailedError(RuntimeError):
    """A pipeline step failed: one line on stderr, exit code 2 when it was a usage error, else 1. A subclass whose
    message lists reasons a line each sets ``whole_message``: run-local then reports every line."""

    whole_message = False

    def __init__(self, message: str, usage: bool = False):
        super().__init__(message)
        self.exit_code = USAGE_EXIT_CODE if usage else 1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the work; the message says what was stopped and how to go on. Exit code 130."""


def one_line(err: BaseException, with_type: bool = False) -> str:
    """The first line of an exception's message (its type name when the message is empty), for one-line errors and
    quarantine reasons; ``with_type`` prefixes the type name."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    first = text.splitlines()[0]
    return f"{type(err).__name__}: {first}" if with_type else first


def configure_logging(verbose: bool = False) -> None:
    """Our progress lines at INFO; library chatter only with ``verbose``."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not verbose:  # TensorFlow's C++ start-up lines (CPU features, absl, graph optimizers): -v shows them
        import os

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Beam's local job service relays every worker's INFO lines: keep the user's view to our progress lines
    for noisy in ("apache_beam", "absl", "tensorflow"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
    record_step_failures()


def record_step_failures() -> None:
    """Under run-local (``STEP_FAILURE_ENV`` set), an uncaught exception also leaves its one line in that file."""
    import os

    path = os.environ.get(STEP_FAILURE_ENV)
    if not path or getattr(sys.excepthook, "records_step_failures", False):
        return
    original = sys.excepthook

    def hook(kind, err, trace):
        import json

        try:
            with open(path, "a", encoding="utf-8") as handle:
                text = str(err).strip() if getattr(err, "whole_message", False) else one_line(err)
                handle.write(json.dumps({"error": text, "usage": isinstance(err, UsageError)}) + "\n")
        finally:
            original(kind, err, trace)

    hook.records_step_failures = True
    sys.excepthook = hook


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    """Runs ``main`` and turns a ``UsageError`` into ``error: ...`` on stderr with exit code 2."""
    try:
        code = main(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        code = USAGE_EXIT_CODE
    except StepFailedError as err:
        print(f"error: {err}", file=sys.stderr)
        code = err.exit_code
    except KeyboardInterrupt as err:
        print(f"error: {err or 'interrupted'}", file=sys.stderr)
        code = INTERRUPTED_EXIT_CODE
    sys.exit(code)


def console_script(main: Callable[[list[str] | None], int]) -> Callable[[], None]:
    """A command's console-script entry point (pyproject.toml's ``[project.scripts]``): ``main`` run as
    ``run_main`` runs it, one-line errors and exit codes included."""
    import functools

    return functools.partial(run_main, main)


def config_from_args(config_class, args, **overrides):
    """Builds a config dataclass from parsed arguments whose ``dest`` names are the config's field names."""
    from dataclasses import fields

    values = {f.name: getattr(args, f.name) for f in fields(config_class) if hasattr(args, f.name)}
    return config_class(**{**values, **overrides})


def image_size_flag(text: str) -> int:
    """``--image-size``: ``auto`` (``AUTO_IMAGE_SIZE``, the source's typical size) or a side of 8 pixels or more."""
    import argparse

    from components.imaging import AUTO_IMAGE_SIZE

    if text.strip().lower() == "auto":
        return AUTO_IMAGE_SIZE
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: use auto or a number of pixels") from None
    if size < 8:
        raise argparse.ArgumentTypeError(f"{size} is too small: use 8 or more, or auto")
    return size


def comma_separated(text: str) -> list[str]:
    """A flag's ``a, b,c``: its items, stripped, the empty ones left out."""
    return [item.strip() for item in text.split(",") if item.strip()]


def class_names_flag(text: str) -> tuple[str, ...]:
    """``--classes a,b,c``: the class names in index order (empty: none given)."""
    return tuple(comma_separated(text))


def add_param(parser, params: dict, name: str, listed=(), **extra) -> None:
    """Adds parameter ``name`` of a declaration table (``components.params``) to ``parser``: its flag, type, default
    and help (``listed``: the choices, named in the help and checked by the step's config, whose one-line error
    lists them); a boolean is a switch."""
    from components.params import flag_of

    param = params[name]
    one_of = f"; one of {', '.join(listed)}" if listed else ""
    options = {"dest": name, "help": param.help_with_default().replace(" (default", one_of + " (default", 1), **extra}
    if isinstance(param.default, bool):
        parser.add_argument(flag_of(name, params), action="store_true", **options)
        return
    kind = options.pop("type", type(param.default))
    parser.add_argument(flag_of(name, params), type=kind, default=param.default, **options)
