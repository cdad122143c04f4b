"""The command lines' flags: a parser that takes a flag spelt whole and names an unknown one with the flag meant,
the flags of a declaration table (``components.params``), and the parsers of the values they take."""

from __future__ import annotations

import argparse
import sys


class ArgumentParser(argparse.ArgumentParser):
    """Every command line of the project: a flag is spelt whole (``--epoch 3`` is an error, not ``--epochs 3``, as in
    Beam's strict options); a subcommand's parser is of the same kind."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def parse_args(self, args=None, namespace=None):
        """argparse's, but an unknown ``--flag`` is named first, with the closest known one (argparse would name a
        missing required flag first, or list the unknown one without a fix), under its subcommand's usage."""
        args = sys.argv[1:] if args is None else list(args)
        unknown_flag(self, args)
        return super().parse_args(args, namespace)


def unknown_flag(parser: argparse.ArgumentParser, args: list[str]) -> None:
    """``parser.error`` (exit 2) at the first ``--flag`` in ``args`` that neither ``parser`` nor the subcommand
    named in ``args`` knows: ``unknown option --epoch, did you mean --epochs?``."""
    import difflib

    actions = {option: action for action in parser._actions for option in action.option_strings}
    known = list(actions)
    commands = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
    value_next = False  # (the token after an option that takes a value is that value: --text "--- a review")
    for at, arg in enumerate(args):
        if value_next:
            value_next = False
            continue
        if arg == "--":
            return
        if arg in commands:
            return unknown_flag(commands[arg], args[at + 1 :])
        name = arg.split("=", 1)[0]
        if name in actions:
            value_next = "=" not in arg and actions[name].nargs != 0
        elif name.startswith("--") and " " not in arg:  # (argparse too reads a token with a space as a value)
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            parser.error(f"unknown option {name}" + (f", did you mean {close[0]}?" if close else ": see --help"))


def config_from_args(config_class, args, **overrides):
    """Builds a config dataclass from parsed arguments whose ``dest`` names are the config's field names."""
    from dataclasses import fields

    values = {f.name: getattr(args, f.name) for f in fields(config_class) if hasattr(args, f.name)}
    return config_class(**{**values, **overrides})


def image_size_flag(text: str) -> int:
    """``--image-size``: ``auto`` (``AUTO_IMAGE_SIZE``, the source's typical size) or a side in pixels that
    ``image_size_mistake`` takes."""
    from components.imaging import AUTO_IMAGE_SIZE, image_size_mistake  # (0 given is a size, too small)

    if text.strip().lower() == "auto":
        return AUTO_IMAGE_SIZE
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: use auto or a number of pixels") from None
    mistake = image_size_mistake(size)
    if mistake:
        raise argparse.ArgumentTypeError(mistake)
    return size


def auto_or(kind: type, auto: int | float, least: int | None = None):
    """A flag's type that reads ``auto`` as ``auto`` (the value that stands for it) and anything else as ``kind``
    does, at least ``least`` where it is given (so that 0 typed is not taken for auto)."""

    def read(text: str):
        if text.strip().lower() == "auto":
            return auto
        try:
            value = kind(text)
        except ValueError:
            example = "a whole number, e.g. 20" if kind is int else "a number, e.g. 0.002"
            raise argparse.ArgumentTypeError(f"{text!r} is neither auto nor {example}") from None
        if least is not None and value < least:
            raise argparse.ArgumentTypeError(f"{text} is too small: use {least} or more, or auto")
        return value

    return read


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
    if param.auto_number() is not None and kind in (int, float):  # the help's "auto" is a value users may type too
        kind = auto_or(kind, param.auto_number())
    default = list(param.default) if options.get("action") == "append" else param.default  # (repeated: a list)
    parser.add_argument(flag_of(name, params), type=kind, default=default, **options)
