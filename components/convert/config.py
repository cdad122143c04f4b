"""The checks of a conversion's values that run before anything is read: the split fractions and shard count, the
text options and the Beam options (the convert step's configs make them, and so do run-local, submit and schedule on
a run's parameters); and what run-local knows of a source before converting it: its classes and its fingerprint."""

from __future__ import annotations

from collections.abc import Sequence

from components.cli import UsageError
from components.convert.fingerprint import fingerprint_source

__all__ = ["check_beam_args", "check_split_options", "check_text_options", "fingerprint_source", "listed_classes"]


def check_split_options(config, items: str) -> None:
    """The fractions and the shard count a conversion config shares (images or texts): one-line errors."""
    for name in ("validation_fraction", "test_fraction", "max_bad_fraction"):
        value = getattr(config, name)
        if not 0.0 <= value < 1.0:
            raise UsageError(f"--{name.replace('_', '-')} {value} is out of range: use a fraction in [0, 1)")
    if config.validation_fraction + config.test_fraction >= 1.0:
        raise UsageError(f"--validation-fraction plus --test-fraction must leave some {items} for training (< 1)")
    if config.num_shards < 0:
        raise UsageError(f"--num-shards {config.num_shards} is negative: use 0 (automatic) or a positive count")


def check_beam_args(args: Sequence[str], own_flags: Sequence[str] = ()) -> None:
    """Options are passed to Beam only when some Beam pipeline option (of any runner) takes them: Beam itself would
    only log "Unparseable argument" and go on with its defaults, so a mistyped flag of ours would be silently lost.
    A one-line error names the first unknown one and the closest known option, ours (``own_flags``) or Beam's."""
    if not args:  # (nothing to check: no Beam import, 2 s)
        return
    import difflib

    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for option_class in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        option_class._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(list(args))
    for arg in unknown:
        if not arg.startswith("-"):
            continue
        name = arg.split("=", 1)[0]
        if name in own_flags:
            raise UsageError(f"{name} is not a Beam pipeline option: pass it as an option of its own, not to Beam")
        known = [*own_flags, *(option for action in parser._actions for option in action.option_strings)]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f", did you mean {close[0]}?" if close else ": see --help, and Beam's pipeline options"
        raise UsageError(f"unknown option {name}{hint}")
    from components.convert.staging import check_worker_code

    check_worker_code(args)


def check_text_options(config) -> None:
    """The vocabulary and sequence length of a text conversion config: one-line errors."""
    if config.vocabulary_size < 3:
        raise UsageError(
            f"--vocabulary-size {config.vocabulary_size} is too small: use 3 or more (the article "
            "uses 15000; 2 ids are padding and out-of-vocabulary)"
        )
    if config.sequence_length < 1:
        raise UsageError(f"--sequence-length {config.sequence_length} must be positive (the article uses 250)")


def listed_classes(
    source: str, classes: Sequence[str], modality: str, text_column: str, label_column: str
) -> tuple[str, list[str]] | None:
    """(the modality, the class names) of ``source`` as its conversion will list them, checked as it will check them
    (a one-line error for a source with fewer than 2 classes), before anything is written; None for TFRecords,
    whose classes only their conversion reads."""
    from components.convert.listing import is_tfrecord_source, list_source, resolve_modality
    from components.convert.text_listing import list_text_source
    from components.schema import check_class_count

    modality = resolve_modality(modality, source, text_column, label_column)
    listings = {
        "image": lambda: None if is_tfrecord_source(source) else list_source(source, classes),
        "text": lambda: list_text_source(source, classes, text_column, label_column),
    }
    listing = listings[modality]()
    if listing is None:
        return None
    check_class_count(listing.class_names, source)
    return modality, list(listing.class_names)
