"""Reading and writing small files on any Beam filesystem (local, ``gs://``), never leaving half a file behind. Local
paths take plain file calls: a step that never touches ``gs://`` does not import Beam (1 to 2 s a process)."""

from __future__ import annotations

import json
import os
import uuid


def write_atomically(path: str, payload: bytes) -> None:
    """Writes ``payload`` to ``path`` through a temporary name, so readers never see half a file."""
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    if "://" not in path:  # one atomic step: a reader sees the old file or the new one, never none
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(temporary, "wb") as handle:
            handle.write(payload)
        os.replace(temporary, path)
        return
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.create(temporary) as handle:
        handle.write(payload)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])


def write_json(path: str, value) -> None:
    write_atomically(path, (json.dumps(value, indent=2, sort_keys=False) + "\n").encode())


def open_read(path: str):
    """``path`` opened for reading bytes: a local file as it is, any other (``gs://``) through Beam's filesystems."""
    if "://" not in path:
        return open(path, "rb")
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path)


def read_json(path: str):
    with open_read(path) as handle:
        return json.loads(handle.read())


def exists(path: str) -> bool:
    if "://" not in path:
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def glob(pattern: str) -> list[str]:
    """The paths that match ``pattern`` (``*`` within a folder), sorted: a local glob, else Beam's filesystems
    (``gs://``: the same client that reads and writes them here, not TensorFlow's own)."""
    if "://" not in pattern:
        import glob as local

        return sorted(local.glob(pattern))
    from apache_beam.io.filesystems import FileSystems

    (result,) = FileSystems.match([pattern])
    return sorted(metadata.path for metadata in result.metadata_list)


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
