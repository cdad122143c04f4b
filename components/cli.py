"""What every ``python -m components.<step>`` shares: logging set-up and the one-line error contract."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable


class UsageError(ValueError):
    """A mistake in the user's input: reported as one line on stderr, exit code 2, no traceback."""


USAGE_EXIT_CODE = 2


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
    # Beam's local job service relays every worker's INFO lines: keep the user's view to our progress lines
    for noisy in ("apache_beam", "absl", "tensorflow"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    """Runs ``main`` and turns a ``UsageError`` into ``error: ...`` on stderr with exit code 2."""
    try:
        code = main(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        code = USAGE_EXIT_CODE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


def config_from_args(config_class, args, **overrides):
    """Builds a config dataclass from parsed arguments whose ``dest`` names are the config's field names."""
    from dataclasses import fields

    values = {f.name: getattr(args, f.name) for f in fields(config_class) if hasattr(args, f.name)}
    return config_class(**{**values, **overrides})
