"""Every model is built one way: ``build(spec, **hparams)``, returning a Keras 3 model. ``spec`` (``ModelSpec``) is
what the data and the run decided (the input, the classes, the vocabulary); the other arguments are the model's own
hyperparameters. Ours are in ``builtin``; a model of one's own is a builder in a Python file or an importable
module (``source``), checked before it trains (``checks``). Everything around the model (the input pipeline,
distribution, precision, resume, evaluation, export, the registry) is the pipeline's.

Importing this package is light: Keras is imported by the functions that build."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from components.cli import UsageError
from components.models.builtin import (
    BACKBONES,
    BATCH_NORM_MODELS,
    BUILTINS,
    DEFAULT_MODELS,
    Backbone,
    backbone_blocks,
    backbone_of,
)
from components.models.source import (
    AUTO_MODEL,
    SOURCE_DIR,
    LoadedModel,
    ModelRef,
    load,
    parse_ref,
    resolve_hparams,
)
from components.models.spec import ModelSpec

if TYPE_CHECKING:
    from components.artifacts.model import ModelConfig

__all__ = [
    "AUTO_MODEL",
    "BACKBONES",
    "BATCH_NORM_MODELS",
    "BUILTINS",
    "DEFAULT_MODELS",
    "SOURCE_DIR",
    "Backbone",
    "LoadedModel",
    "ModelRef",
    "ModelSpec",
    "backbone_blocks",
    "backbone_of",
    "build_model",
    "check_image_size",
    "check_modality",
    "load",
    "load_trained",
    "load_trained_model",
    "parse_ref",
    "resolve_auto",
    "resolve_hparams",
]


def resolve_auto(ref: ModelRef, modality: str) -> ModelRef:
    """``auto``: the default model of the examples' modality; any other ref as it is."""
    return parse_ref(DEFAULT_MODELS[modality]) if ref.text == AUTO_MODEL else ref


def check_modality(loaded: LoadedModel, modality: str, examples_dir: str) -> None:
    """A one-line error when a built-in model takes the other modality than the examples hold (a model of one's own
    is built for whatever its data is, and its checks say whether it takes it)."""
    if loaded.modality is not None and loaded.modality != modality:
        fits = [name for name, builtin in sorted(BUILTINS.items()) if builtin.modality == modality]
        raise UsageError(
            f"--model {loaded.name} takes {loaded.modality}s, and the examples in {examples_dir} are "
            f"{modality}s: choose one of {', '.join(fits)}, or a model of your own"
        )


def check_image_size(loaded: LoadedModel, image_size: int, flag: str = "--image-size") -> None:
    """A one-line error when a built-in model cannot take ``image_size`` pixels (instead of Keras's "Computed output
    size would be zero or negative" deep in the model)."""
    least = loaded.min_image_size
    if loaded.modality == "image" and image_size < least:
        fits = ", ".join(
            name
            for name, builtin in sorted(BUILTINS.items())
            if builtin.modality == "image" and builtin.min_image_size <= image_size
        )
        raise UsageError(
            f"{flag} {image_size} is too small for {loaded.name}, which needs {least} or more"
            + (f"; {fits} take {image_size}" if fits else "")
        )


def build_model(loaded: LoadedModel | str, spec: ModelSpec, hparams: dict | None = None):
    """The model, built under the current Keras dtype policy and distribution: ``loaded`` (a ``LoadedModel`` or a
    built-in's name) called with ``spec`` and ``hparams`` (its defaults where None)."""
    loaded = load(loaded) if isinstance(loaded, str) else loaded
    return loaded.build(spec, **(resolve_hparams(loaded, {}) if hparams is None else hparams))


def load_trained(model_config: ModelConfig, model_dir: str) -> LoadedModel:
    """The builder a trained model was made by, as ``model_config.json`` records it: ours by name, a file from the
    copy kept beside the model (``SOURCE_DIR``), a module imported (the same file it was trained from)."""
    source = model_config.model
    ref = parse_ref(source["ref"])
    if ref.kind != "file":
        loaded = load(ref)
        if source.get("sha256") and loaded.sha256 != source["sha256"]:
            raise UsageError(
                f"model {model_dir} was trained from module {ref.location} as it was then (sha256 "
                f"{source['sha256'][:16]}), and it has changed since: reinstall that version, or train "
                "again"
            )
        return loaded
    kept = os.path.join(model_dir, source["file"])
    from components.storage import exists

    if not exists(kept):
        raise UsageError(f"model {model_dir} has lost its model file {source['file']}: train it again")
    return load(ModelRef(kept, "file", kept, ref.function))


def load_trained_model(model_dir: str, model_config: ModelConfig | None = None):
    """A trained model as it was saved (``model.keras``, in the precision it trained in), the user's custom layers
    registered first by importing the file it was built from."""
    import keras

    from components.artifacts.model import MODEL_FILE, ModelConfig

    if model_config is None:  # (a baseline saved by hand may have none: a model of Keras's own layers)
        model_config = ModelConfig.read_if_any(model_dir)
    if model_config is not None and model_config.model["kind"] != "builtin":
        load_trained(model_config, model_dir)  # (its import registers the model's custom layers)
    import components.models.text_layers  # noqa: F401 (registers the built-in models' own layers)

    return keras.models.load_model(os.path.join(model_dir, MODEL_FILE), compile=False)
