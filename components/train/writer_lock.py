"""One writer per checkpoint folder. A training process holds an exclusive lock on ``<checkpoint dir>/.writer`` while
it trains, which the kernel releases when the process ends, however it ends (SIGKILL, the out-of-memory killer). A
second training into the same folder (a step left running by a killed run-local, when the run is started again) is
refused in one line instead of interleaving its backups with the first one's."""

from __future__ import annotations

import contextlib
import logging
import os

from components.cli import UsageError

log = logging.getLogger(__name__)

LOCK_FILE = ".writer"
_held: list = []  # this process's open lock files: held until it ends


def hold(checkpoint_dir: str) -> None:
    """Takes ``checkpoint_dir`` for this process (a local folder, or a mount whose files take locks; a folder
    without locks, such as Cloud Storage's FUSE mount, where Vertex AI runs one attempt of a job at a time, is taken
    as it is)."""
    import fcntl

    if "://" in checkpoint_dir:
        return
    path = os.path.join(os.path.abspath(checkpoint_dir), LOCK_FILE)
    if any(held.name == path for held in _held):
        return  # (this process holds it already: a trial of a search, a second phase)
    os.makedirs(checkpoint_dir, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 (held until the process ends)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UsageError(
            f"checkpoint dir {checkpoint_dir} is in use by another training ({holder}): wait for it to end or end "
            "it, or pass another --checkpoint-dir"
        ) from None
    except OSError as err:
        log.debug("checkpoint dir %s takes no locks (%s): not locked", checkpoint_dir, err)
        handle.close()
        return
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}\n")
    handle.flush()
    _held.append(handle)


def release() -> None:
    """Gives back the folders this process holds, once training is done, leaving no lock file behind."""
    while _held:
        handle = _held.pop()
        with contextlib.suppress(OSError):
            os.remove(handle.name)
        handle.close()
