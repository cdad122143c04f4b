"""What differs between the kinds of data the pipeline classifies, one module per modality: ``image`` (pixels) and
``text`` (token ids of the conversion's vocabulary). A step asks the examples' or the model's modality
(``modality_of``) what it needs, instead of branching on its name: adding a modality is a module here.

Importing this package is light (no NumPy, TensorFlow or Keras): the steps' configs and the command lines use it."""

from __future__ import annotations

from collections.abc import Mapping

from components.artifacts.examples import Reading
from components.cli import UsageError
from components.modalities.base import Modality
from components.modalities.image import IMAGE
from components.modalities.text import TEXT
from components.models.spec import ModelSpec
from components.params import AUTO_TRAINING

MODALITIES: dict[str, Modality] = {modality.name: modality for modality in (IMAGE, TEXT)}
# what an artifact without a "modality" key holds: the pipeline's first conversions were of images alone
DEFAULT = IMAGE


def named(name: str) -> Modality:
    """The modality called ``name``; a one-line error for another word."""
    try:
        return MODALITIES[name]
    except KeyError:
        raise UsageError(f"modality {name!r} is not one of {', '.join(MODALITIES)}") from None


def modality_of(facts: Mapping) -> Modality:
    """The modality of a conversion's ``stats.json``, a model's ``model_config.json`` or an ``export.json`` (their
    ``modality`` key; images where it is missing)."""
    name = facts.get("modality")
    return DEFAULT if name is None else named(name)


def input_size(facts: Mapping) -> tuple[int, int | None]:
    """(size, sequence_length) of a conversion's examples, as ``make_dataset`` takes them: an image side and None,
    or a text's sequence length twice. ``stats.json``, a ``model_config.json`` or an ``export.json``."""
    return modality_of(facts).input_size(facts)


def example_shape(facts: Mapping) -> tuple[int, ...]:
    """One example's input shape: ``(size, size, 3)`` pixels, or ``(sequence_length,)`` token ids."""
    return modality_of(facts).example_shape(facts)


def reading_of(facts: Mapping) -> Reading:
    """How the examples of a ``stats.json`` (or of a model's ``model_config.json``) are read."""
    return modality_of(facts).reading(facts)


def spec_of(facts: Mapping) -> ModelSpec:
    """What a model builder is given for a conversion's ``stats.json`` or a model's ``model_config.json``."""
    return modality_of(facts).spec(facts)


def auto_training(modality: str, pretrained: bool) -> tuple[str, dict]:
    """(what trains, the epochs and learning rate that ``auto`` means for it: ``components.params.AUTO_TRAINING``)."""
    kind = named(modality).training_kind(pretrained)
    return kind, AUTO_TRAINING[kind]


def check_examples_match(model_config: Mapping, stats: Mapping, model_dir: str, examples_dir: str) -> None:
    """The examples must hold what the model was trained on: the same modality, the classes in the same order (a
    reordered class list would give wrong metrics and a wrong blessing), and the same input (the image size, or the
    sequence length and the vocabulary: ids of another vocabulary mean other words). A one-line error naming both
    sides."""
    again = "pass the examples the model was trained from"
    check_same_modality(model_config, stats, model_dir, examples_dir, again)
    model_names, example_names = list(model_config["class_names"]), list(stats["class_names"])
    if model_names != example_names:
        order = "in another order " if sorted(model_names) == sorted(example_names) else ""
        raise UsageError(
            f"examples {examples_dir} hold the classes {', '.join(example_names)}, but model {model_dir} was trained "
            f"on {', '.join(model_names)} {order}(class ids would mean other classes): {again}"
        )
    modality_of(stats).check_input_matches(model_config, stats, model_dir, examples_dir, again)


def check_same_modality(model: Mapping, examples: Mapping, model_dir: str, examples_dir: str, again: str) -> None:
    """A model reads only its own modality's examples: a one-line error naming both sides otherwise."""
    theirs, ours = modality_of(model), modality_of(examples)
    if theirs is not ours:
        raise UsageError(
            f"examples {examples_dir} hold {ours.items}, but model {model_dir} is {theirs.a_model}: {again}"
        )


__all__ = [
    "DEFAULT",
    "MODALITIES",
    "Modality",
    "auto_training",
    "check_examples_match",
    "check_same_modality",
    "example_shape",
    "input_size",
    "modality_of",
    "named",
    "reading_of",
    "spec_of",
]
