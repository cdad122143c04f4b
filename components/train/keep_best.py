"""Training keeps the best epoch's weights, not the last's, and stops once validation stops improving.

On a small validation split the validation figures swing from epoch to epoch, so the last epoch is often not the best
one. ``KeepBest`` watches the validation loss at each epoch's end (the lower, the better); process 0 keeps a host copy
of the weights of the best epoch so far, and a file of them beside the run's backups
(``<checkpoint dir>/best[_fine_tune]/``), so that a resumed run still knows its best epoch. Once ``patience`` epochs
have passed without a better one, training stops. At the end, every process takes process 0's best weights
(``Placement.from_chief_arrays``), so the hosts of a slice keep the same model. Keras's ``EarlyStopping`` with
``restore_best_weights`` does the same within one process and one attempt; this survives a resume.
"""

from __future__ import annotations

import logging
import math
import os

log = logging.getLogger(__name__)

BEST_FILE = "best.npz"  # the best epoch so far: its number, validation loss and weights (in the model's order)
MIN_PATIENCE = 5  # auto patience: a third of the phase's epochs, at least this many


def auto_patience(epochs: int) -> int:
    """The epochs without a better validation loss after which a phase of ``epochs`` stops: a third of them, at least
    ``MIN_PATIENCE`` (a small validation split's loss wanders for a few epochs before it improves again)."""
    return max(MIN_PATIENCE, epochs // 3)


def best_folder(checkpoint_dir: str, backup: str) -> str:
    """Where a phase (its backup folder's name, ``backup``) keeps its best epoch."""
    return os.path.join(checkpoint_dir, backup.replace("backup", "best", 1))


def read_best(folder: str) -> tuple[dict, list] | None:
    """The best epoch a phase kept so far ({"epoch", "val_loss"}, and its weights), None before its first."""
    import numpy as np

    try:
        with np.load(os.path.join(folder, BEST_FILE)) as stored:
            weights = [stored[f"w{n}"] for n in range(len(stored.files) - 2)]
            return {"epoch": int(stored["epoch"]), "val_loss": float(stored["val_loss"])}, weights
    except (OSError, ValueError, KeyError):
        return None


def keep_best_callback(folder: str, placement, patience: int, finished_before: int):
    """The callback (see the module's docstring); ``patience`` 0: training never stops early. ``finished_before``:
    the epochs the run resumes after (the best epoch an earlier attempt kept counts)."""
    import keras
    import numpy as np

    from components.train.averaging import averaged_weights

    class KeepBest(keras.callbacks.Callback):
        async_safe = True  # epoch hooks only
        best = stopped = None  # the best epoch ({"epoch", "val_loss"}, process 0's), where training stopped early

        def on_train_begin(self, logs=None):
            self.best, self.weights, self.stopped = None, None, None
            kept = read_best(folder) if placement.is_chief else None
            if kept is not None:
                self.best, self.weights = kept
                log.info(
                    "the best epoch before resuming: %d (validation loss %.4f)",
                    self.best["epoch"],
                    self.best["val_loss"],
                )

        def on_epoch_end(self, epoch, logs=None):
            stop = 0
            if placement.is_chief:
                loss = (logs or {}).get("val_loss")
                if loss is not None and math.isfinite(loss) and (self.best is None or loss < self.best["val_loss"]):
                    self.best = {"epoch": epoch + 1, "val_loss": float(loss)}
                    self.weights = averaged_weights(self.model)
                    self._keep()
                since = epoch + 1 - (self.best["epoch"] if self.best else finished_before)
                stop = int(bool(patience) and since >= patience)
            if placement.from_chief(stop):
                self.stopped = epoch + 1
                self.model.stop_training = True

        def on_train_end(self, logs=None):
            if not placement.from_chief(int(self.weights is not None)):  # (no finite validation loss)
                return
            self.model.set_weights(
                placement.from_chief_arrays(self.weights if placement.is_chief else self.model.get_weights())
            )
            if placement.is_chief:
                after = f"stopped after epoch {self.stopped}, {patience} without a better one; " if self.stopped else ""
                log.info(
                    "%skept the weights of epoch %d, the best validation loss (%.4f)",
                    after,
                    self.best["epoch"],
                    self.best["val_loss"],
                )

        def _keep(self) -> None:
            """The best epoch, written whole (``write_atomically``): a kill while writing leaves the one before."""
            import io

            from components.storage import write_atomically

            arrays = {
                f"w{n}": w.astype(np.float32) if w.dtype.name in ("bfloat16", "float16") else w
                for n, w in enumerate(self.weights)
            }  # (numpy files keep no bfloat16)
            buffer = io.BytesIO()
            np.savez(buffer, epoch=self.best["epoch"], val_loss=self.best["val_loss"], **arrays)
            write_atomically(os.path.join(folder, BEST_FILE), buffer.getvalue())

    keeper = KeepBest()
    keeper.patience = patience
    return keeper
