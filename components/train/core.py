"""Training: a Keras 3 model on the backend that reaches the hardware, fed by a static-shape ``tf.data`` pipeline.

TPUs train on JAX (``keras.distribution.DataParallel`` over every device, and over every host of a multi-host slice
through ``jax.distributed``); GPUs and the CPU on TensorFlow (``MirroredStrategy``) or JAX, whichever
``components.train.placement`` picks. What TPUs need is met by construction and exercised on the CPU with the same
mechanisms: several devices (virtual CPU devices, local processes), compiled steps, bfloat16 (``mixed_bfloat16``),
static shapes (fixed image size, ``drop_remainder``), per-device batches in multiples of 8, and nothing in the step
but backend ops (the learning-rate schedule is written with ``keras.ops``).

Preemption: ``BackupAndRestore`` backs up an epoch's end (``--backup-interval``: every epoch, or auto, at most 5% of the
time); a restarted run resumes after the last epoch backed up.
Vertex AI: ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR`` are honoured. On several hosts,
only process 0 writes.

Writes the model artifact (``components.artifacts.model``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from components.artifacts.examples import damaged_shards_named, example_shape, first_images, input_size, make_dataset
from components.artifacts.model import HISTORY_FILE, MODEL_CONFIG_FILE, MODEL_FILE, REFERENCE_FILE, WEIGHTS_FILE
from components.cli import UsageError, check_no_augment
from components.learning import not_learning, what_to_try
from components.models import (
    BACKBONES,
    INPUT_PIXELS,
    SOURCE_DIR,
    LoadedModel,
    ModelSpec,
    backbone_of,
    check_image_size,
    check_modality,
    load,
    parse_ref,
    resolve_auto,
    resolve_hparams,
)
from components.models.source import local_copy, split_pairs
from components.params import TRAIN, auto_training
from components.schema import read_stats
from components.storage import check_writable, gcs_fuse_path, read_json, write_atomically, write_json
from components.tokenizing import (
    VOCABULARY_FILE,
    read_vocabulary,
    standardization_of,
    vocabulary_bytes,
    vocabulary_digest,
)
from components.train import writer_lock
from components.train.batch_norm import MAX_BATCHES, reestimate
from components.train.keep_best import auto_patience, best_folder, keep_best_callback
from components.train.placement import BACKENDS, PRECISIONS
from components.train.transfer import (
    HEAD_WEIGHTS,
    freeze_backbone,
    load_backbone_weights,
    resolve_weights_choice,
    unfreeze_top,
    weights_file,
)

log = logging.getLogger(__name__)

LR_SCHEDULES = ("constant", "rampup_exponential")
EPOCH_LOG_FILE = "epochs.jsonl"
BACKUP_DIR = "backup"  # BackupAndRestore's state under the checkpoint dir
FINE_TUNE_BACKUP_DIR = "backup_fine_tune"  # the fine-tuning phase's (components.train.transfer)
BACKUP_METADATA = "training_metadata.json"  # BackupAndRestore's record of the epochs its backup holds
BACKUP_AUTO_FACTOR = 19  # --backup-interval auto: backups take at most 1 / (1 + 19) = 5% of the training time
BATCH_MULTIPLE = 8  # TPU cores work on 8x128 tiles: per-device batches in multiples of 8 keep them full
CACHE_LIMIT_BYTES = 2 * 1024**3  # decoded images are cached in memory when they take less than this
REFERENCE_EXAMPLES = 128  # validation images whose probabilities export compares across backends
ADAPT_BATCH = 1024  # training texts counted at a time when a text model adapts to them


@dataclass(frozen=True)
class TrainConfig:
    """How to train.

    Args:
        examples_dir: the convert step's output (``<split>/*.tfrec`` and ``stats.json``).
        model_dir: where the model, its weights, its config and the history go; empty: ``AIP_MODEL_DIR``.
        model_name: a built-in model (``components.models.BUILTINS``), a model of one's own (``FILE.py[:FUNCTION]``,
            local or ``gs://``, or ``MODULE:FUNCTION``: ``components.models.source``), or ``auto``: the codelab
            convnet with batch norm for images, the bag of words and word pairs (``ngrams``) for texts
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
        key: stats.get(key)
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


def round_up_batch(per_replica_batch_size: int) -> int:
    """The per-device batch rounded up to a multiple of 8."""
    return math.ceil(per_replica_batch_size / BATCH_MULTIPLE) * BATCH_MULTIPLE


def validation_batching(count: int, replicas: int, global_batch: int, static: bool) -> tuple[int, int]:
    """(batch size, examples used) for validation while training. Static batches (TPUs, several devices) must split
    evenly across devices, so the remainder is left out; on one device every example is used."""
    if not static:
        return min(global_batch, count), count
    batch = min(global_batch, count // replicas * replicas)
    return batch, (count // batch * batch if batch else 0)


def validation_dataset(examples_dir: str, stats: dict, placement, global_batch: int, cache: bool):
    """(dataset, steps) for validation while training, or (None, None) when there are too few examples. On several
    hosts, each reads its share of the same first examples, and all run the same number of steps (else None: one
    pass)."""
    count = stats["counts"]["validation"]
    static = placement.devices > 1 or placement.accelerator == "tpu"
    batch, used = validation_batching(count, placement.devices, global_batch, static)
    if not used:
        log.info("no validation during training: %d validation examples for %d devices", count, placement.devices)
        return None, None
    if used < count:
        log.info("validating on %d of %d examples per epoch (static batches of %d)", used, count, batch)
    size, length = input_size(stats)
    dataset = make_dataset(
        examples_dir,
        "validation",
        size,
        stats["num_classes"],
        batch // placement.processes,
        training=False,
        cache=cache,
        drop_remainder=static,
        shard=(placement.processes, placement.process_index),
        take=used if placement.processes > 1 else None,
        sequence_length=length,
    )
    if placement.processes == 1:
        return dataset, None
    # Keras keeps one validation iterator across epochs when it is given a number of steps: repeat the examples
    return dataset.repeat(), used // batch


def learning_rate(config: TrainConfig, steps_per_epoch: int):
    """A constant rate, or the ramp-up / exponential-decay schedule (per epoch) as a function of the step."""
    if config.lr_schedule == "constant":
        return config.learning_rate
    from components.train.schedules import RampUpExponentialDecay

    return RampUpExponentialDecay(
        peak=config.learning_rate,
        rampup_steps=config.rampup_epochs * steps_per_epoch,
        decay_steps=steps_per_epoch,
        decay_rate=config.lr_decay,
    )


def epoch_line(epoch: int, epochs: int, logs: dict, seconds: float, left: float | None) -> str:
    """The progress line of a finished epoch (1-based): its metrics, its seconds and the time left."""
    shown = ("loss", "accuracy", "val_loss", "val_accuracy")
    figures = ", ".join(f"{name} {logs[name]:.4f}" for name in shown if name in logs)
    remaining = f"; about {left:.0f}s left" if left else ""
    return f"epoch {epoch} of {epochs}: {figures} ({seconds:.1f}s{remaining})"


def _epoch_log_callback(path: str, total_epochs: int | None = None):
    """A callback that appends each finished epoch's metrics and wall time to ``path`` (kept across preemptions),
    and logs its progress line (``epoch_line``): on the terminal under run-local, in Cloud Logging on Vertex AI."""
    import keras

    class EpochLog(keras.callbacks.Callback):
        async_safe = True  # epoch ends only

        def on_train_begin(self, logs=None):
            self.took: list[float] = []  # this attempt's epochs, for the time left

        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.monotonic()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.monotonic() - self.started
            record = {"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}, "epoch_seconds": seconds}
            os.makedirs(os.path.dirname(path), exist_ok=True)  # (it now writes before the backup, which made it)
            with open(path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            self.took.append(seconds)  # (this phase's: a fine-tuning epoch costs more than a head's)
            epochs = total_epochs or int(self.params.get("epochs") or epoch + 1)
            # the first epoch traces and compiles: the time left goes by the later ones once there are some
            typical = self.took[1:] or self.took
            left = sum(typical) / len(typical) * (epochs - epoch - 1)
            log.info(epoch_line(epoch + 1, epochs, record, seconds, left))

    return EpochLog()


def _learning_watch(num_classes: int, advice: str, earlier_losses: list[float], class_counts: list[int]):
    """A callback that warns once, at the epoch where it shows, that training is not learning
    (``components.learning``), with what to try."""
    import keras

    class LearningWatch(keras.callbacks.Callback):
        async_safe = True  # epoch ends only
        losses, warned = list(earlier_losses), False

        def on_epoch_end(self, epoch, logs=None):
            self.losses.append(float((logs or {}).get("loss", math.nan)))
            diagnosis = not_learning(self.losses, num_classes, class_counts=class_counts)
            if diagnosis and not self.warned:
                self.warned = True
                log.warning("training is not learning: %s; %s", diagnosis, advice)

    return LearningWatch()


def training_callbacks(
    checkpoint_dir: str,
    tensorboard_dir: str,
    placement,
    backup_interval: float | None = None,
    backup: str = BACKUP_DIR,
    total_epochs: int | None = None,
) -> list:
    """The train step's callbacks: the backup on every process; the epoch log and TensorBoard's epoch scalars on
    process 0. None of them acts on a batch, and each says so (``async_safe``): Keras otherwise runs batch-end hooks
    on the training thread, which must first wait for the step's results, so the next step is not dispatched until
    the last has finished (on JAX, where Keras can dispatch asynchronously: half a bare ``fit``'s rate on a GPU,
    bench/RESULTS.md)."""
    import keras

    backup = _backup_callback(os.path.join(checkpoint_dir, backup), placement, backup_interval)
    if not placement.is_chief:
        return [backup]

    class EpochTensorBoard(keras.callbacks.TensorBoard):
        async_safe = True  # update_freq="epoch", no graph, no profiling: its batch hooks write nothing

    # the epoch's log line before its backup: a kill between the two leaves the log ahead of the backup (which
    # resume allows for), never a backed-up epoch missing from the curves
    return [
        _epoch_log_callback(os.path.join(checkpoint_dir, EPOCH_LOG_FILE), total_epochs),
        backup,
        EpochTensorBoard(tensorboard_dir, update_freq="epoch", write_graph=False, profile_batch=0),
    ]


def backup_due(seconds_since: float, interval: float | None, last_cost: float) -> bool:
    """Whether an epoch that ends ``seconds_since`` the last backup (or the start) is backed up: once ``interval``
    seconds have passed; ``None`` (auto): once ``BACKUP_AUTO_FACTOR`` times the last backup's own duration has, so
    that backups take at most about 5% of the training time (every epoch where a backup is quick against an epoch)."""
    due = BACKUP_AUTO_FACTOR * last_cost if interval is None else interval
    return seconds_since >= due


def _backup_callback(backup_dir: str, placement, interval: float | None):
    """``BackupAndRestore`` at the end of an epoch when ``backup_due``, with a second copy, so that a kill while
    saving leaves the previous backup to resume from. Process 0 keeps it and decides when, for every process; the
    other hosts of a slice restore from a copy of it and write theirs to a scratch folder: inside the
    distribution's scope every process takes part in saving (Keras creates a reference optimizer there, whose
    variables are placed on every device)."""
    import keras

    class IntervalBackup(keras.callbacks.BackupAndRestore):
        async_safe = True  # save_freq="epoch": its batch hook only returns

        def on_train_begin(self, logs=None):
            super().on_train_begin(logs)
            self.last_backup, self.backups = time.monotonic(), []  # the seconds each backup took

        def on_epoch_end(self, epoch, logs=None):
            due = backup_due(time.monotonic() - self.last_backup, interval, self.backups[-1] if self.backups else 0.0)
            if not placement.from_chief(int(due)):
                self._current_epoch, self._last_batch_seen = epoch + 1, 0  # as Keras keeps them; the next backup
                return  # records this epoch count
            started = time.monotonic()
            super().on_epoch_end(epoch, logs)
            self.last_backup = time.monotonic()
            self.backups.append(self.last_backup - started)

    if placement.is_chief:

        class ChiefBackup(IntervalBackup):
            def on_train_begin(self, logs=None):
                # settled on file alone, before any process loads: loading assigns every variable, and on several
                # hosts each assignment is a collective that all processes must make in the same order
                settle_backup(self._weights_path, self._training_metadata_path)
                # what the others must load, handed over with the barrier: their view of the backup folder may
                # be a Cloud Storage FUSE cache (/gcs) that has not seen this host's last writes yet
                placement.from_chief(backup_digest(self._weights_path, self._training_metadata_path))
                super().on_train_begin(logs)

        return ChiefBackup(backup_dir, save_freq="epoch", delete_checkpoint=False, double_checkpoint=True)

    class FollowerRestore(IntervalBackup):
        def on_train_begin(self, logs=None):
            expected = placement.from_chief(0)
            copy_chiefs_backup(backup_dir, self.backup_dir, expected, placement.process_index)
            super().on_train_begin(logs)

    scratch = tempfile.mkdtemp(prefix="backup-follower-")
    return FollowerRestore(scratch, save_freq="epoch", delete_checkpoint=True, double_checkpoint=True)


BACKUP_WEIGHTS = "latest.weights.h5"  # BackupAndRestore's weights under its folder
FOLLOWER_READS = 13  # a follower reads the chief's backup this many times, FOLLOWER_WAIT seconds apart, at most
FOLLOWER_WAIT = 5.0  # (Cloud Storage FUSE keeps file attributes for 60 s by default: 13 reads cover it)


def backup_digest(weights_path: str, metadata_path: str) -> int:
    """A 31-bit digest of a backup's weights and epoch count, 0 where there is none: what process 0 settled, handed
    to the other hosts (``Placement.from_chief``), for each to check that its copy is that one."""
    if not os.path.exists(weights_path) or not os.path.exists(metadata_path):
        return 0
    digest = hashlib.sha256()
    for path in (weights_path, metadata_path):
        with open(path, "rb") as handle:
            for block in iter(lambda handle=handle: handle.read(1 << 20), b""):
                digest.update(block)
    return int.from_bytes(digest.digest()[:4], "big") >> 1 or 1


def copy_chiefs_backup(
    backup_dir: str,
    scratch: str,
    expected: int,
    process_index: int,
    reads: int = FOLLOWER_READS,
    wait: Callable[[float], None] = time.sleep,
) -> None:
    """A follower's copy of the backup process 0 settled (``expected``: its ``backup_digest``) into ``scratch``,
    read again until the copy is that one: a folder seen through a cache may still show an older backup, or one
    process 0 removed. None where process 0 has none. A one-line error after ``reads`` reads."""
    weights, metadata = os.path.join(scratch, BACKUP_WEIGHTS), os.path.join(scratch, BACKUP_METADATA)
    for attempt in range(reads):
        shutil.rmtree(scratch, ignore_errors=True)
        os.makedirs(scratch)
        if expected and os.path.isdir(backup_dir):
            shutil.copytree(backup_dir, scratch, dirs_exist_ok=True)
        if backup_digest(weights, metadata) == expected:
            return
        if attempt + 1 < reads:
            log.info("process %d: the backup in %s is not yet process 0's: reading it again", process_index, backup_dir)
            wait(FOLLOWER_WAIT)
    raise UsageError(
        f"process {process_index} sees another backup in {backup_dir} than process 0 settled, after {reads} reads: "
        "the hosts must share the model folder (gs:// through the same bucket)"
    )


def settle_backup(weights_path: str, metadata_path: str) -> None:
    """Where the last backup was cut short by a kill (its weights or its epoch count unreadable), puts the previous
    copy of both back in its place (``double_checkpoint``), as ``BackupAndRestore`` would on loading, or, where the
    first backup was cut short, removes it (training starts from the first epoch), so that what is loaded is decided
    before loading starts. Nothing to do without a backup or with a whole one."""
    import h5py

    def read_all(_, item) -> None:  # (h5py stops visiting at any other value than None)
        if isinstance(item, h5py.Dataset):
            item[()]  # read: a file cut short fails here, or on opening

    def readable(weights: str, metadata: str) -> bool:
        try:
            with h5py.File(weights, "r") as handle:
                handle.visititems(read_all)
            with open(metadata) as handle:
                return isinstance(json.load(handle)["epoch"], int)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError):
            return False

    backup, latest, previous = (
        os.path.dirname(weights_path),
        (weights_path, metadata_path),
        (weights_path + ".bkp", metadata_path + ".bkp"),
    )
    if not any(map(os.path.exists, latest)) or readable(*latest):
        return
    if not any(map(os.path.exists, previous)):
        log.warning("the first backup in %s was cut short: training starts from the first epoch", backup)
        for path in latest:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        return
    if not readable(*previous):
        raise UsageError(
            f"the backup in {backup} and its previous copy are unreadable: remove it to train from the first epoch"
        )
    log.warning("the last backup in %s was cut short: resuming from the one before it", backup)
    for source, target in zip(previous, latest, strict=True):
        shutil.copyfile(source, target)


def epochs_kept(checkpoint_dir: str, backup: str | None = None) -> int:
    """The finished epochs a restart with ``checkpoint_dir`` resumes after (0: no backup to resume from): the
    backup's own count, which ``BackupAndRestore`` restores (its previous copy where the last save was cut short).
    The epoch log may run ahead of it, by the epochs that ended between two backups. ``backup``: one phase's backup
    folder; None: the furthest of every phase's (the epochs count over the whole run)."""
    if backup is None:
        return max(epochs_kept(checkpoint_dir, name) for name in (BACKUP_DIR, FINE_TUNE_BACKUP_DIR))
    for name in (BACKUP_METADATA, BACKUP_METADATA + ".bkp"):
        try:
            with open(os.path.join(checkpoint_dir, backup, name)) as handle:
                return int(json.load(handle)["epoch"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return 0


def read_epoch_log(path: str) -> list[dict]:
    """Finished epochs in order, the latest record winning when an epoch was run twice (a kill mid-save)."""
    if not os.path.exists(path):
        return []
    by_epoch = {}
    with open(path) as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
                by_epoch[record["epoch"]] = record
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def _precision(config: TrainConfig, placement) -> str:
    from components.train.placement import choose_precision, gpu_compute_capability, read_cpu_flags

    capability = None
    if placement.accelerator == "gpu":
        if placement.backend == "jax":
            import jax

            capability = tuple(int(p) for p in str(jax.devices()[0].compute_capability).split("."))
        else:
            capability = gpu_compute_capability()
    flags = read_cpu_flags() if placement.accelerator == "cpu" else frozenset()
    return choose_precision(config.precision, placement.accelerator, capability, flags)


def distribution_facts(model, placement, batch_shape: tuple[int, ...]) -> dict:
    """How the devices share the work (JAX): the layout ``DataParallel`` gives a global batch (its axes, and one
    device's share of it), and whether every trained variable, read back from its array, is whole on every
    device."""
    if placement.distribution is None:
        return {}
    layout = placement.distribution.get_data_layout(batch_shape)
    sharding = layout.backend_layout
    variables = [v.value.sharding for v in model.weights]
    replicated = all(s.is_fully_replicated and len(s.device_set) == placement.devices for s in variables)
    return {
        "mesh_devices": len(sharding.device_set),
        "batch_axes": list(layout.axes),
        "per_device_batch_shape": list(sharding.shard_shape(batch_shape)),
        "variables_replicated": replicated,
    }


def reference_predictions(model, examples_dir: str, stats: dict, placement):
    """The trained model's probabilities on the first validation images, computed by the training backend (None on
    several hosts, where a prediction would need every host's part of the batch)."""
    import numpy as np

    count = min(REFERENCE_EXAMPLES, stats["counts"]["validation"]) // placement.devices * placement.devices
    if placement.processes > 1 or not count:
        return None
    size, length = input_size(stats)
    images = first_images(examples_dir, "validation", size, stats["num_classes"], count, sequence_length=length)
    with placement.scope():
        return np.asarray(model.predict(images, batch_size=count, verbose=0), dtype=np.float32)


@dataclass(frozen=True)
class Examples:
    """What training needs to know of the examples, read before the slow framework imports."""

    stats: dict
    modality: str
    num_classes: int
    image_size: int | None
    sequence_length: int | None
    shape: tuple
    vocabulary: list | None  # a text model's tokens, which its ids index
    spec: ModelSpec  # what the model's builder is given


@dataclass(frozen=True)
class ModelCode:
    """The model's builder, loaded, and the hyperparameters it is built with (every one, defaults included)."""

    loaded: LoadedModel
    hparams: dict


def load_model_code(config: TrainConfig, examples: Examples) -> ModelCode:
    """The builder of ``config.model_name`` (``auto`` resolved before), checked against the examples, with its
    hyperparameters: after the backend is chosen, since a model file of one's own imports Keras."""
    loaded = load(config.model_name)
    check_modality(loaded, examples.modality, config.examples_dir)
    if examples.modality == "image":
        check_image_size(loaded, examples.image_size, f"the examples' image size ({config.examples_dir})")
    return ModelCode(loaded, resolve_hparams(loaded, config.hparams))


def run(config: TrainConfig, env: Mapping[str, str] | None = None) -> dict:
    """Trains and saves the model; returns the final epoch's metrics and where things were written. A damaged shard
    is one line naming it."""
    with damaged_shards_named(config.examples_dir):
        return _train(config, os.environ if env is None else env)


def _train(config: TrainConfig, env: Mapping[str, str]) -> dict:
    config, examples, dirs = check_inputs(config, env)
    placement, backend = placed(config, env, examples.modality)
    if placement.is_chief:  # (the other hosts of a slice keep their backups in scratch folders)
        writer_lock.hold(dirs.checkpoint_dir)
    import keras

    code = load_model_code(config, examples)

    keras.utils.set_random_seed(config.seed)
    precision = _precision(config, placement)
    per_device = round_up_batch(config.per_replica_batch_size)
    if per_device != config.per_replica_batch_size:
        log.info(
            "per-device batch %d rounded up to %d (a multiple of %d)",
            config.per_replica_batch_size,
            per_device,
            BATCH_MULTIPLE,
        )
    global_batch = per_device * placement.devices
    train_count = examples.stats["counts"]["train"]
    steps_per_epoch = train_count // global_batch
    if steps_per_epoch < 1:
        raise UsageError(
            f"the train split of {config.examples_dir} has {train_count} examples, fewer than one global batch of "
            f"{global_batch}: lower --batch-size or add data"
        )
    train_ds, validation_ds, validation_steps = datasets(config, examples, placement, global_batch)
    jit_compile = backend == "jax" or config.jit_compile  # JAX steps are always XLA programs
    plan = training_phases(config)
    pretrained = weights_file(config.weights, config.model_name, config.weights_cache)
    started, trained_epochs, backups, resumed_after, kept = time.monotonic(), 0, [], None, {}
    for phase in plan:
        if phase.name == "head" and len(plan) > 1 and head_finished(dirs, placement):
            log.info("the head was trained before (%s): fine-tuning", os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
            continue
        model = compiled_model(
            config, examples, placement, precision, steps_per_epoch, jit_compile, phase, pretrained, dirs, code, backend
        )
        finished_before, callbacks, advice = resume_and_watch(config, examples, dirs, placement, phase, plan[-1].last)
        resumed_after = finished_before if resumed_after is None else resumed_after
        log.info(
            "training %s%s on %d %s (%s, %d classes): epochs %d to %d of %d steps, global batch %d (%d x %d "
            "devices), %s, %s on %s, XLA %s, %d steps per execution",
            code.loaded.name,
            PHASE_WORDS[phase.name],
            train_count,
            f"{examples.modality}s",
            "x".join(map(str, examples.shape)),
            examples.num_classes,
            phase.first + 1,
            phase.last,
            steps_per_epoch,
            global_batch,
            per_device,
            placement.devices,
            precision,
            placement.strategy,
            backend,
            "on" if jit_compile else "off",
            config.steps_per_execution,
        )
        with placement.scope():
            fitted = model.fit(
                train_ds,
                validation_data=validation_ds,
                validation_steps=validation_steps,
                epochs=phase.last,
                initial_epoch=phase.first,
                steps_per_epoch=steps_per_epoch,
                callbacks=callbacks,
                verbose=0,  # the epoch log's own line instead (on process 0), through logging
            )
        trained_epochs += len(fitted.epoch)  # as Keras ran them, after the epoch its backup restored
        backups += next(c for c in callbacks if isinstance(c, keras.callbacks.BackupAndRestore)).backups
        keeper = callbacks[-1]  # (keep_best_callback's: the weights it restored, and where it stopped)
        kept = {
            "kept_epoch": keeper.best["epoch"] if keeper.best else None,
            "stopped_after_epoch": keeper.stopped,
            "last_epoch": keeper.stopped or phase.last,
            "patience": keeper.patience,
        }
        if phase.name == "head" and len(plan) > 1:
            save_head(model, dirs, placement)
    with placement.scope():  # (over several processes, each reads its share of the same global batches)
        reestimate(model, train_ds.take(min(steps_per_epoch, MAX_BATCHES)), backend)
    seconds = time.monotonic() - started
    finished_before = resumed_after or 0
    log.info(
        "%d preemption backup(s) over %d epoch(s), %.0f ms each on average (--backup-interval %s)",
        len(backups),
        trained_epochs,
        1000 * sum(backups) / max(len(backups), 1),
        "auto" if config.backup_interval is None else config.backup_interval,
    )
    model_config = {
        **model_facts(code, examples, backend, placement.why, precision),
        **transfer_facts(config, plan, model),
        "per_replica_batch_size": per_device,
        "global_batch_size": global_batch,
        "epochs": config.epochs,
        "learning_rate": config.learning_rate,
        "augment": config.augment,
        "replicas": placement.devices,
        "processes": placement.processes,
        "strategy": placement.strategy,
        "accelerator": placement.accelerator,
        "jit_compile": jit_compile,
        "steps_per_execution": config.steps_per_execution,
        "distribution": distribution_facts(model, placement, (global_batch, *examples.shape)),
    }
    curves, not_learned, kept = save_results(
        model, config, examples, dirs, placement, model_config, finished_before, seconds, advice, code.loaded, kept
    )
    at = kept.get("kept_index", -1)  # the figures of the epoch whose weights were kept (the best), else the last's
    final = {name: values[at] for name, values in curves.items()}
    if not_learned:
        log.warning("training did not learn: %s", not_learned)
    images_per_second = trained_epochs * steps_per_epoch * global_batch / max(seconds, 1e-9)
    log.info("trained in %.1fs (%.0f %ss/s): %s", seconds, images_per_second, examples.modality, json.dumps(final))
    return {
        "final": final,
        "train_seconds": seconds,
        "images_per_second": images_per_second,
        "model_dir": dirs.model_dir,
        "resumed_after_epoch": finished_before,
        "epochs_trained": trained_epochs,
        "kept_epoch": kept.get("kept_epoch"),
        "stopped_after_epoch": kept.get("stopped_after_epoch"),
        "not_learning": not_learned,
        "process_index": placement.process_index,
        **model_config,
    }


def check_inputs(config: TrainConfig, env: Mapping[str, str]):
    """The examples read and checked against the model, and the output folders checked, before the slow framework
    imports: (the config with ``auto`` resolved, the examples, the output dirs)."""
    stats = read_stats(config.examples_dir)
    dirs = resolve_output_dirs(config, env)
    for what, path in (
        ("model dir", dirs.model_dir),
        ("checkpoint dir", dirs.checkpoint_dir),
        ("TensorBoard dir", dirs.tensorboard_dir),
    ):
        check_writable(path, what)
    modality = stats.get("modality", "image")
    check_no_augment(config.augment, modality)
    image_size, sequence_length = input_size(stats)
    ref = resolve_auto(parse_ref(config.model_name), modality)
    if ref.text != config.model_name:
        log.info("--model auto: %s for %ss", ref.text, modality)
    config = dataclasses.replace(config, model_name=ref.text)
    if ref.kind == "builtin":  # (a model of one's own is loaded once the backend is chosen: it imports Keras)
        load_model_code(config, Examples(stats, modality, 0, image_size, None, (), None, ModelSpec.of(stats)))
    elif ref.kind == "file":
        local_copy(ref, "")  # a missing file is said before the slow imports
    config = dataclasses.replace(config, weights=resolve_weights_choice(config.weights, config.model_name))
    config = with_auto_training(config, modality)
    vocabulary = None
    if modality == "text":  # the ids mean this vocabulary's tokens: it goes into the model artifact, for export
        vocabulary = read_vocabulary(f"{config.examples_dir.rstrip('/')}/{VOCABULARY_FILE}")
    examples = Examples(
        stats,
        modality,
        stats["num_classes"],
        image_size,
        sequence_length,
        example_shape(stats),
        vocabulary,
        ModelSpec.of(stats),
    )
    return config, examples, dirs


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


def activated_backend(config: TrainConfig, env: Mapping[str, str], modality: str) -> tuple[str, str, str]:
    """The backend chosen (the hardware's, or the one asked for) and activated, before Keras is first imported:
    (backend, why, hardware)."""
    from components.keras_backend import activate_backend
    from components.train.placement import (
        activate_jax_cpu_devices,
        choose_backend,
        choose_precision,
        detect_hardware,
        read_cpu_flags,
    )

    hardware = detect_hardware()
    bfloat16 = hardware == "cpu" and choose_precision(config.precision, "cpu", cpu_flags=read_cpu_flags()) != "float32"
    backend, why = choose_backend(config.backend, hardware, env, config.hosts, modality, bfloat16)
    if backend == "tensorflow":
        check_tensorflow_xla(config)
    activate_backend(backend)
    if backend == "jax":
        activate_jax_cpu_devices(config.cpu_replicas)
    return backend, why, hardware


def placed(config: TrainConfig, env: Mapping[str, str], modality: str):
    """The backend activated and the devices placed: (placement, backend)."""
    from components.train.placement import place

    backend, why, hardware = activated_backend(config, env, modality)
    return place(backend, why, hardware, config.cpu_replicas, config.hosts, env), backend


def datasets(config: TrainConfig, examples: Examples, placement, global_batch: int):
    """(the training dataset, each process's share of the global batch; the validation dataset and its steps)."""
    counts = examples.stats["counts"]
    cache = (counts["train"] + counts["validation"]) * math.prod(examples.shape) * 4 < CACHE_LIMIT_BYTES
    shard = (placement.processes, placement.process_index)
    train_ds = make_dataset(
        config.examples_dir,
        "train",
        examples.image_size,
        examples.num_classes,
        global_batch // placement.processes,
        training=True,
        cache=cache,
        augment=config.augment,
        seed=config.seed,
        shard=shard,
        sequence_length=examples.sequence_length,
    )
    validation_ds, validation_steps = validation_dataset(
        config.examples_dir, examples.stats, placement, global_batch, cache
    )
    return train_ds, validation_ds, validation_steps


@dataclass(frozen=True)
class Phase:
    """A part of training with its own trainable weights, learning rate and backup: ``train`` (the whole model),
    or a pretrained backbone's ``head`` (the backbone frozen) then ``fine_tune`` (its top blocks unfrozen).
    ``first``/``last``: the epochs before it and at its end, counted over the whole run."""

    name: str
    first: int
    last: int
    backup: str


PHASE_WORDS = {
    "train": "",
    "head": " (its head, the backbone frozen)",
    "fine_tune": " (fine-tuning the backbone's top blocks)",
}


def training_phases(config: TrainConfig) -> list[Phase]:
    """One phase, or a pretrained backbone's two (its head, then fine-tuning unless ``fine_tune_epochs`` is 0)."""
    if config.model_name not in BACKBONES or config.weights == "none":
        return [Phase("train", 0, config.epochs, BACKUP_DIR)]
    head = Phase("head", 0, config.epochs, BACKUP_DIR)
    if not config.fine_tune_epochs:
        return [head]
    return [head, Phase("fine_tune", config.epochs, config.epochs + config.fine_tune_epochs, FINE_TUNE_BACKUP_DIR)]


def head_finished(dirs: OutputDirs, placement) -> bool:
    """Whether an earlier attempt finished the head phase (its weights kept): the same answer on every host."""
    finished = os.path.exists(os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
    placement.check_agreement(
        int(finished),
        "whether the head was trained",
        f"give every host the same checkpoint dir, not {dirs.checkpoint_dir} on each",
    )
    return finished


def save_head(model, dirs: OutputDirs, placement) -> None:
    """Keeps the model after its head phase: fine-tuning starts from it, also after a preemption."""
    if placement.is_chief:
        kept = os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS)
        model.save_weights(kept + ".tmp.weights.h5")
        os.replace(kept + ".tmp.weights.h5", kept)  # a kill mid-save leaves no head to start from
    placement.barrier("head saved")


def fine_tune_rate(config: TrainConfig) -> float:
    return config.fine_tune_learning_rate or config.learning_rate / 10


def transfer_facts(config: TrainConfig, plan: list[Phase], model) -> dict:
    """What ``model_config.json`` says of a pretrained backbone's training (nothing for the other models)."""
    if config.model_name not in BACKBONES:
        return {}
    facts: dict = {"weights": config.weights, "head_epochs": config.epochs if plan[0].name == "head" else 0}
    if plan[-1].name == "fine_tune":
        trainable = sum(math.prod(weight.shape) for weight in backbone_of(model).trainable_weights)
        facts["fine_tune"] = {
            "epochs": config.fine_tune_epochs,
            "blocks": config.fine_tune_blocks,
            "learning_rate": fine_tune_rate(config),
            "trainable_backbone_weights": trainable,
        }
    return facts


def compiled_model(
    config: TrainConfig,
    examples: Examples,
    placement,
    precision: str,
    steps_per_epoch: int,
    jit_compile: bool,
    phase: Phase,
    pretrained: str | None,
    dirs: OutputDirs,
    code: ModelCode,
    backend: str,
):
    """The model built in ``precision`` under the placement's scope and compiled for ``phase`` (its trainable
    weights, its learning rate): the pretrained backbone's weights loaded from ``pretrained``, or, to fine-tune, the
    head phase's; its summary goes to the log. A model of one's own is checked first (``components.models.checks``):
    one line for a mistake, before any training."""
    import keras

    from components.models.checks import call_builder, check_model

    rate = fine_tune_rate(config) if phase.name == "fine_tune" else learning_rate(config, steps_per_epoch)
    keras.mixed_precision.set_global_policy(precision)
    try:
        with placement.scope():
            model = call_builder(code.loaded, examples.spec, code.hparams, backend)
            if placement.processes == 1:  # (a prediction on several hosts needs every host's part of the batch)
                check_model(model, code.loaded, examples.spec, backend, batch_size=max(2, placement.devices))
            if phase.name == "fine_tune":
                model.load_weights(os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
                unfrozen = unfreeze_top(model, config.fine_tune_blocks)
                log.info(
                    "fine-tuning the top %d blocks of %s's backbone (%d weights; batch norm stays frozen) at "
                    "learning rate %g",
                    config.fine_tune_blocks,
                    config.model_name,
                    unfrozen,
                    rate,
                )
            elif pretrained is not None:
                load_backbone_weights(model, pretrained)
                if phase.name == "head":
                    freeze_backbone(model)
            if examples.modality == "text":
                adapt_to_training_texts(model, config.examples_dir, examples)
            model.compile(
                optimizer=keras.optimizers.Adam(rate),
                loss="categorical_crossentropy",
                metrics=["accuracy"],
                jit_compile=jit_compile,
                steps_per_execution=config.steps_per_execution,
            )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    if placement.is_chief:
        model.summary(print_fn=lambda line, **_: log.info(line))
    return model


def adapt_to_training_texts(model, examples_dir: str, examples: Examples) -> None:
    """Sets what a text model learns from the training texts before training (``text_layers.adapt``: the ``ngrams``
    bag's inverse document frequencies), from the whole train split, the same on every process."""
    from components.artifacts.examples import make_dataset
    from components.models.text_layers import adapt

    batches = make_dataset(
        examples_dir,
        "train",
        0,
        examples.num_classes,
        ADAPT_BATCH,
        training=False,
        sequence_length=examples.sequence_length,
    )
    texts = adapt(model, (tokens for tokens, _ in batches.as_numpy_iterator()))
    if texts:
        log.info("inverse document frequencies of the grams counted over the %d training texts", texts)


def resume_and_watch(config: TrainConfig, examples: Examples, dirs, placement, phase: Phase, total_epochs: int):
    """The epochs a backup already holds (the same on every host), the callbacks (the backup, the epoch log,
    TensorBoard, and on process 0 the watch that warns when training does not learn), and what to try if it does
    not: (finished_before, callbacks, advice). ``phase``: the part of training they are for (its own backup)."""
    epoch_log = os.path.join(dirs.checkpoint_dir, EPOCH_LOG_FILE)
    backup_dir = os.path.join(dirs.checkpoint_dir, phase.backup)
    kept = epochs_kept(dirs.checkpoint_dir, phase.backup)
    finished_before = max(kept, phase.first)
    # hosts that resumed from different epochs would run different numbers of steps and wait on each other forever
    placement.check_agreement(
        finished_before,
        "the epochs already finished",
        f"give every host the same checkpoint "
        f"dir (a gs:// path, as AIP_CHECKPOINT_DIR is), not {dirs.checkpoint_dir} on each",
    )
    if placement.is_chief:
        os.makedirs(dirs.checkpoint_dir, exist_ok=True)
        if not phase.first and not os.path.isdir(backup_dir) and os.path.exists(epoch_log):
            os.remove(epoch_log)  # a log without its backup belongs to a finished run
    callbacks = training_callbacks(
        dirs.checkpoint_dir, dirs.tensorboard_dir, placement, config.backup_interval, phase.backup, total_epochs
    )
    image_size = examples.image_size if examples.modality == "image" else None
    advice = what_to_try(
        config.learning_rate, image_size, parse_ref(config.model_name).name, examples.stats.get("source_image_size")
    )
    if placement.is_chief:
        earlier = [record["loss"] for record in read_epoch_log(epoch_log)] if finished_before else []
        callbacks.append(_learning_watch(examples.num_classes, advice, earlier, class_counts(examples)))
    patience = auto_patience(phase.last - phase.first) if config.patience is None else config.patience
    callbacks.append(
        keep_best_callback(best_folder(dirs.checkpoint_dir, phase.backup), placement, patience, finished_before)
    )
    if kept > phase.first:
        log.info("resuming from the checkpoint in %s after epoch %d", backup_dir, finished_before)
    return finished_before, callbacks, advice


def class_counts(examples: Examples) -> list:
    """The training examples of each class."""
    return list(examples.stats.get("per_class", {}).get("train", {}).values())


def model_facts(code: ModelCode, examples: Examples, backend: str, why: str, precision: str) -> dict:
    """What ``model_config.json`` says of the model, where its code came from, and its inputs."""
    stats = examples.stats
    return {
        "model_name": code.loaded.name,
        "model": code.loaded.record(kept_source_name(code.loaded)),
        "hparams": code.hparams,
        "modality": examples.modality,
        # images: uint8 pixels, scaled inside the model; texts: int32 token ids of the conversion's vocabulary
        **(
            {"image_size": examples.image_size, "input_pixels": INPUT_PIXELS}
            if examples.modality == "image"
            else {
                "sequence_length": examples.sequence_length,
                "vocabulary_size": stats["vocabulary_size"],
                "vocabulary_sha256": vocabulary_digest(examples.vocabulary),
                "standardization": standardization_of(stats),
            }
        ),
        "num_classes": examples.num_classes,
        "class_names": stats["class_names"],
        "backend": backend,
        "backend_reason": why,
        "precision": precision,
    }


def kept_source_name(loaded: LoadedModel) -> str:
    """Where the model artifact keeps a copy of the model's file, relative to it ("" for a built-in model)."""
    if not loaded.source_file:
        return ""
    name = os.path.basename(loaded.source_file)
    return f"{SOURCE_DIR}/{name if loaded.ref.kind == 'file' else loaded.ref.location + '.py'}"


def save_results(
    model,
    config: TrainConfig,
    examples: Examples,
    dirs,
    placement,
    model_config: dict,
    finished_before: int,
    seconds: float,
    advice: str,
    loaded: LoadedModel,
    kept: dict,
):
    """Process 0 writes the model artifact and removes the finished run's backup; every host then reports what it
    wrote: (the curves, why they show no learning or None, ``kept``: the epoch whose weights were kept, its index in
    the curves, and where training stopped)."""
    epoch_log = os.path.join(dirs.checkpoint_dir, EPOCH_LOG_FILE)
    epochs = read_epoch_log(epoch_log) if placement.is_chief else []  # process 0 alone keeps the log
    # (not an earlier attempt's epochs past where this one stopped)
    epochs = [record for record in epochs if record["epoch"] <= kept.get("last_epoch", record["epoch"])]
    numbers = [record["epoch"] for record in epochs]
    if kept.get("kept_epoch") in numbers:
        kept = {**kept, "kept_index": numbers.index(kept["kept_epoch"])}
    reference = reference_predictions(model, config.examples_dir, examples.stats, placement)
    curves = {name: [record[name] for record in epochs] for name in epochs[-1] if name != "epoch"} if epochs else {}
    not_learned = None  # why the curves show no learning, with what to try: process 0 decides, every host reports
    if placement.is_chief:
        diagnosis = not_learning(curves.get("loss", []), examples.num_classes, class_counts=class_counts(examples))
        not_learned = diagnosis and f"{diagnosis}; {advice}"
        save_model_artifact(
            model, dirs.model_dir, model_config, curves, finished_before, reference, seconds, not_learned, kept
        )
        if examples.vocabulary is not None:
            write_atomically(os.path.join(dirs.model_dir, VOCABULARY_FILE), vocabulary_bytes(examples.vocabulary))
        if model_config["model"]["file"]:  # the code that made the model, kept with it (evaluate and export load it)
            with open(loaded.source_file, "rb") as handle:
                write_atomically(os.path.join(dirs.model_dir, model_config["model"]["file"]), handle.read())
        for backup in (BACKUP_DIR, FINE_TUNE_BACKUP_DIR):  # a rerun starts afresh
            shutil.rmtree(os.path.join(dirs.checkpoint_dir, backup), ignore_errors=True)
            shutil.rmtree(best_folder(dirs.checkpoint_dir, backup), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
        os.remove(epoch_log)
        writer_lock.release()  # (its lock file too: a finished training leaves no trace there)
        if os.path.isdir(dirs.checkpoint_dir) and not os.listdir(dirs.checkpoint_dir):
            os.rmdir(dirs.checkpoint_dir)
    placement.barrier("model saved")
    history_path = os.path.join(dirs.model_dir, HISTORY_FILE)
    if not placement.is_chief and os.path.exists(history_path):  # every host reports what process 0 wrote
        history = read_json(history_path)
        curves, not_learned = history["history"], history.get("not_learning")
        kept = {name: history.get(name) for name in ("kept_epoch", "kept_index", "stopped_after_epoch")}
    return curves, not_learned, kept


def save_model_artifact(
    model,
    model_dir: str,
    model_config: dict,
    curves: dict,
    resumed_after: int,
    reference,
    seconds: float,
    not_learning: str | None = None,
    kept: dict | None = None,
):
    """Writes the model artifact (``components.artifacts.model``); ``seconds``: how long this run's epochs took;
    ``not_learning``: why the curves show no learning (with what to try), or None; ``kept``: the epoch whose weights
    the model has (``kept_epoch``, ``kept_index`` in the curves), and where training stopped early, if it did."""
    import numpy as np

    os.makedirs(model_dir, exist_ok=True)
    # Keras writes .keras / .h5 from host copies of the variables, in a format every backend reads: weights trained
    # on TPUs under JAX load into export's TensorFlow model on a CPU
    model.save(os.path.join(model_dir, MODEL_FILE))
    model.save_weights(os.path.join(model_dir, WEIGHTS_FILE))
    write_json(os.path.join(model_dir, MODEL_CONFIG_FILE), model_config)
    history = {
        "epochs": len(next(iter(curves.values()), [])),
        "resumed_after_epoch": resumed_after,
        "train_seconds": round(seconds, 3),
        "not_learning": not_learning,
        "history": curves,
        **{name: (kept or {}).get(name) for name in ("kept_epoch", "kept_index", "stopped_after_epoch", "patience")},
    }
    write_json(os.path.join(model_dir, HISTORY_FILE), history)
    if reference is not None:
        np.savez(os.path.join(model_dir, REFERENCE_FILE), probabilities=reference)
