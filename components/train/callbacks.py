"""The train step's callbacks: the epoch log (a progress line per epoch, and ``epochs.jsonl`` across preemptions),
the watch that warns when training is not learning, TensorBoard's epoch scalars and the backup."""

from __future__ import annotations

import json
import logging
import math
import os
import time

from components.artifacts.checkpoints import BACKUP_DIR, EPOCH_LOG_FILE
from components.learning import not_learning
from components.train.backup import backup_callback

log = logging.getLogger(__name__)


def epoch_line(epoch: int, epochs: int, logs: dict, seconds: float, left: float | None) -> str:
    """The progress line of a finished epoch (1-based): its metrics, its seconds and the time left."""
    shown = ("loss", "accuracy", "val_loss", "val_accuracy")
    figures = ", ".join(f"{name} {logs[name]:.4f}" for name in shown if name in logs)
    remaining = f"; about {left:.0f}s left" if left else ""
    return f"epoch {epoch} of {epochs}: {figures} ({seconds:.1f}s{remaining})"


def epoch_log_callback(path: str, total_epochs: int | None = None):
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


def learning_watch(num_classes: int, advice: str, earlier_losses: list[float], class_counts: list[int]):
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

    backup = backup_callback(os.path.join(checkpoint_dir, backup), placement, backup_interval)
    if not placement.is_chief:
        return [backup]

    class EpochTensorBoard(keras.callbacks.TensorBoard):
        async_safe = True  # update_freq="epoch", no graph, no profiling: its batch hooks write nothing

    # the epoch's log line before its backup: a kill between the two leaves the log ahead of the backup (which
    # resume allows for), never a backed-up epoch missing from the curves
    return [
        epoch_log_callback(os.path.join(checkpoint_dir, EPOCH_LOG_FILE), total_epochs),
        backup,
        EpochTensorBoard(tensorboard_dir, update_freq="epoch", write_graph=False, profile_batch=0),
    ]
