"""Reading and writing small files on any Beam filesystem (local, ``gs://``), never leaving half a file behind."""

from __future__ import annotations

import json
import os
import uuid


def write_atomically(path: str, payload: bytes) -> None:
    """Writes ``payload`` to ``path`` through a temporary name, so readers never see half a file."""
    from apache_beam.io.filesystems import FileSystems

    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    parent = os.path.dirname(path)
    if "://" not in path and parent:
        os.makedirs(parent, exist_ok=True)
    with FileSystems.create(temporary) as handle:
        handle.write(payload)
    if "://" not in path:  # one atomic step: a reader sees the old file or the new one, never none
        os.replace(temporary, path)
        return
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])


def write_json(path: str, value) -> None:
    write_atomically(path, (json.dumps(value, indent=2, sort_keys=False) + "\n").encode())


def read_json(path: str):
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as handle:
        return json.loads(handle.read())


def exists(path: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def gcs_fuse_path(path: str) -> str:
    """``gs://bucket/x`` -> ``/gcs/bucket/x``, where Vertex AI mounts Cloud Storage for training code."""
    return "/gcs/" + path[len("gs://") :] if path.startswith("gs://") else path


def check_writable(path: str, what: str) -> None:
    """A local folder about to be written, probed with a file before any work starts (in the folder, or in its
    nearest existing parent when it is not there yet: nothing is created); a one-line error naming it and the user
    when it cannot be written (read-only, no permission). ``gs://`` paths are not probed."""
    import tempfile

    from components.cli import UsageError

    if "://" in path:
        return
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    try:
        if not os.path.isdir(folder):
            raise NotADirectoryError(20, "Not a directory", folder)
        handle, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        os.close(handle)
        os.remove(probe)
    except OSError as err:
        raise UsageError(
            f"{what} {path} cannot be written by user {user_name()} (uid {os.getuid()}): "
            f"{err.strerror or err}; choose a folder you can write, or fix its permissions"
        ) from None


def user_name() -> str:
    """This process's user name; a container may run as a uid its /etc/passwd does not name (``docker --user``)."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "(unnamed)"
