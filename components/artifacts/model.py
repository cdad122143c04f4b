"""The model artifact: the train step's output folder, which evaluate and export read.

It holds ``model.keras`` (the whole model), ``model.weights.h5`` (the weights alone, which any Keras backend loads:
export rebuilds the network on the CPU with TensorFlow from them, whatever backend trained it),
``model_config.json`` (how it was trained: architecture, image size, classes, backend, devices, precision),
``history.json`` (the curves, the epochs and how long they took) and ``reference_predictions.npz`` (the trained
model's probabilities on validation images, computed by the training backend, for export's cross-backend parity check).
A text model's artifact also holds ``vocabulary.txt``, the vocabulary its token ids index (export tokenises with it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from components.artifacts.records import HISTORY, MODEL_CONFIG, TUNING, Facts, Record, Typed

MODEL_FILE = "model.keras"
WEIGHTS_FILE = "model.weights.h5"
REFERENCE_FILE = "reference_predictions.npz"  # arrays: probabilities [N, classes], from the validation split in order


@dataclass(frozen=True)
class History(Typed):
    """``history.json``: how the training went. ``history``: each metric's value per epoch (``loss``, ``accuracy``,
    ``val_loss``, ``val_accuracy``; ``lr`` under a schedule), as Keras's ``History.history``; ``epochs``: how many
    they are; ``train_seconds``: how long this run's epochs took; ``resumed_after_epoch``: the epochs an earlier
    attempt had finished; ``not_learning``: why the curves show no learning, with what to try (None: they do);
    ``kept_epoch`` (1-based) and ``kept_index`` (in the curves): the epoch whose weights the model has, where it keeps
    the best; ``stopped_after_epoch`` and ``patience``: where early stopping ended the run, after how many epochs
    without a better one; ``saved_model_validation``: the saved model's ``val_loss`` and ``val_accuracy`` once its
    batch-norm statistics were re-estimated (None: the model has none, or there is no validation split), where the
    curves scored the statistics training left."""

    RECORD: ClassVar[Record] = HISTORY

    history: dict[str, list[float]]
    epochs: int
    train_seconds: float
    resumed_after_epoch: int = 0
    not_learning: str | None = None
    kept_epoch: int | None = None
    kept_index: int | None = None
    stopped_after_epoch: int | None = None
    patience: int | None = None
    saved_model_validation: dict[str, float] | None = None


@dataclass(frozen=True)
class Tuning(Typed):
    """``tuning.json``, beside a model a local search kept: the ``metric`` it ranked trials by and its ``goal``,
    the search ``space`` (as Vertex AI's study spec writes parameters), every trial's ``trial`` number,
    ``parameters`` and score, and the ``best`` of them, whose model the folder holds."""

    RECORD: ClassVar[Record] = TUNING

    metric: str
    goal: str
    space: list[dict]
    trials: list[dict]
    best: dict


@dataclass(frozen=True)
class ModelConfig(Facts):
    """``model_config.json``: the model, what it takes and how it was trained.

    - The model: ``model_name``; ``model``, where its code came from (``ref``, ``kind``: builtin, file or module,
      ``sha256``, and ``file``: the copy kept beside it, "" for a built-in); ``hparams``, its builder's arguments.
    - Its input (``components.modalities``): ``modality``, ``num_classes``, ``class_names``; an image model's
      ``image_size``; a text model's ``sequence_length``, ``vocabulary_size``, ``vocabulary_sha256`` and
      ``standardization``.
    - Its training: ``backend`` (and ``backend_reason``), ``precision``, the batch sizes, ``epochs``,
      ``learning_rate``, ``augment``, the devices (``replicas``, ``processes``, ``strategy``, ``accelerator``,
      ``distribution``), ``jit_compile``, ``steps_per_execution``; a pretrained backbone's ``weights``,
      ``head_epochs`` and ``fine_tune`` (its epochs, blocks, learning rate and trainable weights).

    It reads as the mapping of its facts too (``Facts``)."""

    RECORD: ClassVar[Record] = MODEL_CONFIG

    model_name: str
    model: dict
    hparams: dict
    modality: str
    num_classes: int
    class_names: list[str]
    backend: str
    precision: str
    augment: bool
    backend_reason: str = ""
    image_size: int | None = None
    sequence_length: int | None = None
    vocabulary_size: int | None = None
    vocabulary_sha256: str | None = None
    standardization: str | None = None
    per_replica_batch_size: int | None = None
    global_batch_size: int | None = None
    epochs: int | None = None
    learning_rate: float | None = None
    replicas: int = 1
    processes: int = 1
    strategy: str | None = None
    accelerator: str | None = None
    jit_compile: bool | None = None
    steps_per_execution: int | None = None
    distribution: dict | None = None
    weights: str | None = None
    head_epochs: int | None = None
    fine_tune: dict | None = None


def load_model_config(model_dir: str) -> ModelConfig:
    """Reads ``model_config.json``; raises ``UsageError`` when ``model_dir`` is not a trained model, or one an older
    version of the pipeline trained."""
    return ModelConfig.read(model_dir)


def model_digest(model_dir: str) -> str:
    """sha256 of the trained weights: the model's identity, kept with its export (a cached train step gives the same
    file, so the same digest; any retraining gives another)."""
    from components.storage import sha256_of

    return sha256_of(os.path.join(model_dir, WEIGHTS_FILE))
