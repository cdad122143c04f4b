"""How to train (``TrainConfig``, its checks and its ``auto`` values) and where training writes: the model, checkpoint
and TensorBoard folders, and the lasting checkpoint folder a DAG run's training resumes from."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from components.cli import UsageError
from components.modalities import auto_training
from components.models import parse_ref
from components.models.source import split_pairs
from components.params import TRAIN
from components.schema import read_stats
from components.storage import gcs_fuse_path
from components.train.placement import BACKENDS, PRECISIONS

log = logging.getLogger(__name__)


LR_SCHEDULES = ("constant", "rampup_exponential")


@dataclass(frozen=True)
class TrainConfig:
    """How to train.

    Args:
        examples_dir: the convert step's output (``<split>/*.tfrec`` and ``stats.json``).
        model_dir: where the model, its weights, its config and the history go; empty: ``AIP_MODEL_DIR``.
        model_name: a built-in model (``components.models.BUILTINS``), a model of one's own (``FILE.py[:FUNCTION]``,
            local or ``gs://``, or ``MODULE:FUNCTION``: ``components.models.source``), or ``auto``: the codelab
            convnet with batch norm for images, the bag of words, word pairs and subwords (``ngrams``) for texts
            (``components.models.DEFAULT_MODELS``).
        hparams: the model's own hyperparameters, ``NAME=VALUE`` each: its builder's keyword arguments.
        epochs: passes over the training split (with a pretrained backbone: the head's, the backbone frozen); 0:
            auto (``components.params.AUTO_TRAINING``: 30 for an image model trained from scratch, else 20).
        weights: a backbone's pretrained weights: ``imagenet``, a file of them (local or ``gs://``), ``none``, or
            ``auto`` (``imagenet`` for the backbones, ``none`` for the others). See ``components.train.transfer``.
        weights_cache: where ``imagenet`` weights are downloaded to and found again (``gs://`` too); empty: Keras's
            own cache.
        fine_tune_epochs: with pretrained weights, the second phase's epochs: the top ``fine_tune_blocks`` blocks of
            the backbone unfrozen, at ``fine_tune_learning_rate`` (0: a tenth of ``learning_rate``); 0: the head alone.
        per_replica_batch_size: examples per device per step, rounded up to a multiple of 8; the global batch is
            this times the devices (of every host).
        learning_rate: Adam's learning rate (the peak, with ``rampup_exponential``); 0: auto (0.001 for an image
            model trained from scratch, else 0.002).
        lr_schedule: ``constant``, or ``rampup_exponential``: linear ramp-up for ``rampup_epochs``, then
            exponential decay by ``lr_decay`` per epoch (the codelab's best run).
        precision: ``auto`` (bfloat16 where the hardware computes it natively), ``float32`` or ``mixed_bfloat16``.
        backend: ``auto`` (JAX on TPUs; elsewhere ``KERAS_BACKEND`` if set, else the backend measured faster on that
            hardware), ``jax`` or ``tensorflow``. See ``components.train.placement``.
        cpu_replicas: train on this many virtual CPU devices (logical devices for TensorFlow, XLA host devices for
            JAX): the multi-device code paths without accelerators.
        hosts: the hosts of a multi-host TPU slice; more than 1 connects them with ``jax.distributed``.
        jit_compile: compile the TensorFlow training step with XLA; JAX steps are always compiled.
        steps_per_execution: training steps per call into the compiled function (fewer host round trips on TPUs).
        augment: random flips, brightness and saturation on training images.
        checkpoint_dir: ``BackupAndRestore`` state; empty: ``AIP_CHECKPOINT_DIR``, else ``<model_dir>/checkpoints``.
        backup_interval: seconds of training between two backups at least (an epoch's end after that is backed up);
            0: every epoch; ``None`` (auto): 19 times the last backup's own duration, at most 5% of the time.
        tensorboard_dir: TensorBoard logs; empty: ``AIP_TENSORBOARD_LOG_DIR``, else ``<model_dir>/logs``.
        seed: seeds weight initialisation and shuffling.
        patience: a phase stops after this many epochs without a better validation loss (0: never early; ``None``:
            auto, a third of its epochs, at least 5); the best epoch's weights are kept either way
            (``components.train.keep_best``).
    """

    examples_dir: str
    model_dir: str = ""
    model_name: str = TRAIN["model_name"].default
    hparams: tuple[str, ...] = TRAIN["hparams"].default
    epochs: int = TRAIN["epochs"].default
    weights: str = TRAIN["weights"].default
    weights_cache: str = ""
    fine_tune_epochs: int = TRAIN["fine_tune_epochs"].default
    fine_tune_blocks: int = TRAIN["fine_tune_blocks"].default
    fine_tune_learning_rate: float = TRAIN["fine_tune_learning_rate"].default
    per_replica_batch_size: int = TRAIN["per_replica_batch_size"].default
    learning_rate: float = TRAIN["learning_rate"].default
    lr_schedule: str = TRAIN["lr_schedule"].default
    rampup_epochs: int = 3
    lr_decay: float = 0.8
    precision: str = TRAIN["precision"].default
    backend: str = TRAIN["backend"].default
    cpu_replicas: int = 1
    hosts: int = 1
    jit_compile: bool = TRAIN["jit_compile"].default
    steps_per_execution: int = TRAIN["steps_per_execution"].default
    augment: bool = TRAIN["augment"].default
    checkpoint_dir: str = ""
    backup_interval: float | None = None
    tensorboard_dir: str = ""
    seed: int = TRAIN["seed"].default
    patience: int | None = None

    def __post_init__(self) -> None:
        parse_ref(self.model_name)
        split_pairs(self.hparams)
        choices = {
            "precision": ("--precision", PRECISIONS),
            "lr_schedule": ("--lr-schedule", LR_SCHEDULES),
            "backend": ("--backend", BACKENDS),
        }
        for name, (flag, valid) in choices.items():
            if getattr(self, name) not in valid:
                raise UsageError(
                    f"{flag} {getattr(self, name)!r} does not exist: choose one of {', '.join(sorted(valid))}"
                )
        for name, minimum in (
            ("epochs", 0),
            ("per_replica_batch_size", 1),
            ("cpu_replicas", 1),
            ("hosts", 1),
            ("steps_per_execution", 1),
            ("rampup_epochs", 0),
            ("fine_tune_epochs", 0),
            ("fine_tune_blocks", 0),
        ):
            if getattr(self, name) < minimum:
                flag = "--batch-size" if name == "per_replica_batch_size" else f"--{name.replace('_', '-')}"
                raise UsageError(f"{flag} {getattr(self, name)} must be at least {minimum}")
        if not 0 <= self.seed < 2**32:  # (NumPy's and the frameworks' generators take 0 to 2**32 - 1)
            raise UsageError(f"--seed {self.seed} is out of range: use 0 to {2**32 - 1}")
        if self.backup_interval is not None and not self.backup_interval >= 0:
            raise UsageError(f"--backup-interval {self.backup_interval} must be auto or a number of seconds >= 0")
        if not self.learning_rate >= 0:
            raise UsageError(f"--learning-rate {self.learning_rate} must be positive, or 0 for auto")
        if not self.fine_tune_learning_rate >= 0:
            raise UsageError(
                f"--fine-tune-learning-rate {self.fine_tune_learning_rate} must be positive, or 0 for "
                "a tenth of --learning-rate"
            )
        if not 0 < self.lr_decay <= 1:
            raise UsageError(f"--lr-decay {self.lr_decay} must be in (0, 1]")
        if self.backend == "tensorflow":  # auto is checked once it is resolved
            check_tensorflow_xla(self)


def check_tensorflow_xla(config: TrainConfig) -> None:
    if config.jit_compile and config.cpu_replicas > 1:
        # TensorFlow's XLA compiles one device's program: a step cannot reach variables on another logical CPU
        # device (TensorFlow's known XLA issue); JAX compiles the whole step over every device
        raise UsageError(
            "--jit-compile cannot be combined with --cpu-replicas > 1 on TensorFlow: use one or the other, or "
            "--backend jax"
        )


@dataclass(frozen=True)
class OutputDirs:
    model_dir: str
    checkpoint_dir: str
    tensorboard_dir: str


def resolve_output_dirs(config: TrainConfig, env: Mapping[str, str]) -> OutputDirs:
    """Flags win over Vertex AI's ``AIP_*`` variables; ``gs://`` paths become their ``/gcs/`` FUSE mounts."""
    model_dir = config.model_dir or env.get("AIP_MODEL_DIR", "")
    if not model_dir:
        raise UsageError("no model dir: pass --model-dir, or set AIP_MODEL_DIR (Vertex AI sets it for custom jobs)")
    model_dir = gcs_fuse_path(model_dir)
    checkpoint_dir = (
        config.checkpoint_dir or env.get("AIP_CHECKPOINT_DIR", "") or os.path.join(model_dir, "checkpoints")
    )
    tensorboard_dir = (
        config.tensorboard_dir or env.get("AIP_TENSORBOARD_LOG_DIR", "") or os.path.join(model_dir, "logs")
    )
    return OutputDirs(model_dir, gcs_fuse_path(checkpoint_dir), gcs_fuse_path(tensorboard_dir))


LASTING_CHECKPOINTS = "checkpoints"  # in the bucket of a DAG run's model: each training's backup, by its inputs


# what a backup depends on besides the examples: every other field is where things go
TRAINING_INPUTS_EXCLUDED = (
    "examples_dir",
    "model_dir",
    "checkpoint_dir",
    "tensorboard_dir",
    "weights_cache",
    "backup_interval",
)


def lasting_checkpoint_dir(config: TrainConfig, model_uri: str) -> str:
    """Where a DAG run's training on Cloud Storage keeps its backup: ``gs://<the model's bucket>/checkpoints/<key>``,
    the key a digest of the examples (their fingerprint, counts, classes and shape) and of every training setting. A
    retried task, or the same run submitted again, finds it and resumes after its last backed-up epoch, where the
    run's own output folder would be a new one; a finished training removes it. "" off Cloud Storage (run-local
    gives its steps a checkpoint dir of its own)."""
    if not model_uri.startswith("gs://"):
        return ""
    stats = read_stats(config.examples_dir)
    examples = {
        key: getattr(stats, key)
        for key in (
            "fingerprint",
            "counts",
            "class_names",
            "modality",
            "image_size",
            "sequence_length",
            "vocabulary_size",
        )
    }
    training = {
        f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in TRAINING_INPUTS_EXCLUDED
    }
    key = hashlib.sha256(
        json.dumps({"examples": examples, "training": training}, sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    bucket = model_uri[len("gs://") :].split("/", 1)[0]
    return f"gs://{bucket}/{LASTING_CHECKPOINTS}/{key}"


def with_auto_training(config: TrainConfig, modality: str) -> TrainConfig:
    """The config with the epochs and learning rate left to auto (0) set to what suits what trains
    (``components.params.AUTO_TRAINING``)."""
    kind, chosen = auto_training(modality, pretrained=config.weights != "none")
    auto = {name: value for name, value in chosen.items() if not getattr(config, name)}
    if auto:
        log.info(
            "auto for this %s: %s",
            kind,
            ", ".join(f"{name.replace('_', ' ')} {value:g}" for name, value in auto.items()),
        )
    return dataclasses.replace(config, **auto)
