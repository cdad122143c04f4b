"""Preemption backups: ``BackupAndRestore`` at an epoch's end when one is due (``--backup-interval``), kept in two
copies so that a kill while saving leaves the previous one; on a multi-host slice, process 0 settles the backup and
the other hosts restore from a checked copy of it (the handshake)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from components.artifacts.checkpoints import BACKUP_METADATA
from components.cli import UsageError

log = logging.getLogger(__name__)


BACKUP_AUTO_FACTOR = 19  # --backup-interval auto: backups take at most 1 / (1 + 19) = 5% of the training time


def backup_due(seconds_since: float, interval: float | None, last_cost: float) -> bool:
    """Whether an epoch that ends ``seconds_since`` the last backup (or the start) is backed up: once ``interval``
    seconds have passed; ``None`` (auto): once ``BACKUP_AUTO_FACTOR`` times the last backup's own duration has, so
    that backups take at most about 5% of the training time (every epoch where a backup is quick against an epoch)."""
    due = BACKUP_AUTO_FACTOR * last_cost if interval is None else interval
    return seconds_since >= due


def backup_callback(backup_dir: str, placement, interval: float | None):
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
