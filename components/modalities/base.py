"""``Modality``: what each modality answers for the steps (``components.modalities.image`` and ``.text`` say it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from components.cli import UsageError

if TYPE_CHECKING:
    from components.artifacts.examples import Reading
    from components.models.spec import ModelSpec


class Modality:
    """One kind of data: its words, its input's facts, what a model of it is given, and what travels with it.

    ``facts``: a conversion's ``stats.json``, a model's ``model_config.json`` or an ``export.json`` (the input's keys
    are the same in each)."""

    name: str  # "image"
    items: str  # what its examples are called: "images"
    a_model: str  # "an image model"
    augments: bool  # whether --augment changes its training examples
    sent_as: str  # what a client passes to pipeline predict: "image files"
    companion_files: tuple[str, ...] = ()  # files that travel beside the examples, the model and its checks

    def input_size(self, facts: Mapping) -> tuple[int, int | None]:
        """(size, sequence_length) as ``components.artifacts.examples.make_dataset`` takes them."""
        raise NotImplementedError

    def example_shape(self, facts: Mapping) -> tuple[int, ...]:
        """One example's input shape."""
        raise NotImplementedError

    def input_facts(self, facts: Mapping) -> dict:
        """The keys of ``facts`` that describe one input (what the convert step's KFP artifact shows)."""
        raise NotImplementedError

    def reading(self, facts: Mapping) -> Reading:
        """How its examples are read (``components.artifacts.examples.make_dataset``)."""
        raise NotImplementedError

    def spec(self, facts: Mapping) -> ModelSpec:
        """What a model builder is given for these facts (``components.models.spec``)."""
        raise NotImplementedError

    def check_augment(self, augment: bool) -> None:
        """A one-line error where ``--augment`` would do nothing."""

    def training_kind(self, pretrained: bool) -> str:
        """Which of ``components.params.AUTO_TRAINING``'s kinds a model of this modality trains as."""
        raise NotImplementedError

    def check_input_matches(self, model: Mapping, examples: Mapping, model_dir: str, examples_dir: str, again: str):
        """The examples' input must be the one the model was trained on: a one-line error naming both sides."""
        raise NotImplementedError

    def model_input_facts(self, stats: Mapping, vocabulary: list | None) -> dict:
        """What ``model_config.json`` records of the model's input."""
        raise NotImplementedError

    def read_vocabulary(self, examples_dir: str) -> list | None:
        """The tokens the examples' ids index, where the modality has any."""
        return None

    def served_tokens(self, folder: str, facts: Mapping) -> tuple[list | None, str | None]:
        """(the vocabulary, the standardisation) that the model in service at ``folder`` reads texts with, where
        it keeps a vocabulary; (None, None) for a modality without one."""
        return None, None

    def baseline_differs(self, baseline: Mapping, candidate: Mapping, baseline_kind: str) -> str:
        """Why a baseline of the same classes cannot be compared with the candidate on its input ("" when it can):
        ``baseline`` and ``candidate``: their input facts (``input_facts`` keys, and a text model's vocabulary
        digest); ``baseline_kind``: ``trained`` (a train step output) or ``export`` (a SavedModel)."""
        raise NotImplementedError

    def load_baseline(self, kind: str, path: str, facts: Mapping):
        """The model in service (``kind``: ``trained``, a train step output at ``path``; ``export``, a SavedModel),
        as a callable from a batch of examples' inputs to probabilities; ``facts``: its config or ``export.json``."""
        raise NotImplementedError

    def check_model_takes(self, loaded, facts: Mapping, where: str) -> None:
        """A one-line error when the built-in model ``loaded`` cannot take the examples' input (``where``: whose)."""

    def adapt(self, model, examples_dir: str, facts: Mapping) -> None:
        """Sets what ``model`` learns from the training examples before training, where it learns anything so."""

    def takes(self, min_image_size: int) -> str:
        """What a built-in model of this modality takes, for ``pipeline models list``."""
        return self.items

    def check_served(self, served: Modality, model: str) -> None:
        """A one-line error when ``model`` serves another modality than the inputs a client is sending."""
        if served is not self:
            raise UsageError(f"model {model} is {served.a_model}: pass {served.sent_as}, not {self.sent_as}")

    def describe(self, facts: Mapping, classes: int) -> str:
        """The data in a phrase, for the report: ``images of 5 classes, 32 px``."""
        raise NotImplementedError

    def check_arguments(self, spec: ModelSpec) -> list[str]:
        """The input's flags of ``python -m pipeline models check`` for ``spec``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<modality {self.name}>"
