"""The one place the convert step chooses between images and texts for the conversion (``convert_source``), for the
KFP component and the command line; the fingerprint of a source chooses alike in ``components.convert.listing``."""

from __future__ import annotations

import dataclasses


def convert_source(modality: str, options: dict) -> dict:
    """Converts ``options["source"]`` as ``modality`` says (``auto``: what the source holds), each conversion taking
    the options its config has; returns its ``stats.json``."""
    from components.convert.common import bound_beam_storage_retries
    from components.convert.core import ConvertConfig, run
    from components.convert.listing import resolve_modality
    from components.convert.text import TextConvertConfig, run_text

    bound_beam_storage_retries()
    columns = {name: options[name] for name in ("text_column", "label_column") if name in options}
    text = resolve_modality(modality, options["source"], **columns) == "text"
    config_class, convert = (TextConvertConfig, run_text) if text else (ConvertConfig, run)
    fields = {field.name for field in dataclasses.fields(config_class)}
    return convert(config_class(**{name: value for name, value in options.items() if name in fields}))
