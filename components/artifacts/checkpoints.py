"""A training's checkpoint folder as the other parts of a run read it: the preemption backups (``BackupAndRestore``'s,
one folder a phase) and the epochs they hold, which a restart resumes after and run-local's summary reports."""

from __future__ import annotations

import json
import os

BACKUP_DIR = "backup"  # BackupAndRestore's state under the checkpoint dir
FINE_TUNE_BACKUP_DIR = "backup_fine_tune"  # the fine-tuning phase's (components.train.transfer)
BACKUP_METADATA = "training_metadata.json"  # BackupAndRestore's record of the epochs its backup holds
HEAD_WEIGHTS = "head.weights.h5"  # the model after the head phase, under the checkpoint dir: phase 2 starts from it
EPOCH_LOG_FILE = "epochs.jsonl"  # each finished epoch's figures, a line each, written before its backup


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


def epochs_logged(checkpoint_dir: str) -> int:
    """The last epoch the epoch log records as finished (0: none), which may be ahead of the backup's."""
    records = read_epoch_log(os.path.join(checkpoint_dir, EPOCH_LOG_FILE))
    return max((int(record["epoch"]) for record in records), default=0)


def trim_epoch_log(path: str, last_epoch: int) -> None:
    """Drops the epoch log's records of the epochs after ``last_epoch``, where a restart resumes: an earlier attempt
    ran them past its last backup, and they run again."""
    records = read_epoch_log(path)
    if any(record["epoch"] > last_epoch for record in records):
        with open(path + ".tmp", "w") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in records if record["epoch"] <= last_epoch)
        os.replace(path + ".tmp", path)
