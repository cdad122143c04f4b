"""The one place the convert step chooses between images and texts: the conversion (``convert_source``) and the
fingerprint of a source (``fingerprint_source``), for the KFP component, the command line and ``run-local``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from components.params import CONVERT, TEXT


def convert_source(modality: str, options: dict) -> dict:
    """Converts ``options["source"]`` as ``modality`` says (``auto``: what the source holds), each conversion taking
    the options its config has; returns its ``stats.json``."""
    from components.convert.core import ConvertConfig, run
    from components.convert.listing import resolve_modality
    from components.convert.text import TextConvertConfig, run_text

    columns = {name: options[name] for name in ("text_column", "label_column") if name in options}
    text = resolve_modality(modality, options["source"], **columns) == "text"
    config_class, convert = (TextConvertConfig, run_text) if text else (ConvertConfig, run)
    fields = {field.name for field in dataclasses.fields(config_class)}
    return convert(config_class(**{name: value for name, value in options.items() if name in fields}))


def fingerprint_source(source: str, classes: Sequence[str] = CONVERT["classes"].default,
                       modality: str = CONVERT["modality"].default, text_column: str = TEXT["text_column"].default,
                       label_column: str = TEXT["label_column"].default) -> str:  # fmt: skip
    """The fingerprint of any source convert takes, images or texts, as its conversion will record it."""
    from components.convert.listing import resolve_modality, source_fingerprint, text_source_fingerprint

    if resolve_modality(modality, source, text_column, label_column) == "text":
        return text_source_fingerprint(source, classes, text_column, label_column)
    return source_fingerprint(source, classes)
