"""Small files and listings on local paths and ``gs://``, never leaving half a file behind. Local paths take plain
file calls; ``gs://`` takes the Cloud Storage client (``google-cloud-storage``, the one Beam's own GCS filesystem
uses), so that the steps that only list and read files need neither Beam nor TensorFlow."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import uuid
from typing import NamedTuple


class FileInfo(NamedTuple):
    """A file found by ``match``: the fields of Beam's ``FileMetadata`` that listings and fingerprints read."""

    path: str
    size_in_bytes: int
    last_updated_in_seconds: float


def write_atomically(path: str, payload: bytes) -> None:
    """Writes ``payload`` to ``path`` so that readers never see half a file: a local file through a temporary name,
    a Cloud Storage object in one upload (an object is replaced whole or not at all)."""
    if "://" in path:
        from google.cloud.storage.retry import DEFAULT_RETRY

        with naming(path):
            _blob(path).upload_from_string(payload, retry=DEFAULT_RETRY)  # (the same bytes again: safe to retry)
        return
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    try:
        with open(temporary, "wb") as handle:
            handle.write(payload)
    except BaseException as err:
        with contextlib.suppress(OSError):  # (a full disk: no half-written temporary file left behind)
            os.remove(temporary)
        if isinstance(err, OSError) and err.errno is not None and not err.filename:
            err.filename = path  # (a failed write names no file)
        raise
    os.replace(temporary, path)  # one atomic step: a reader sees the old file or the new one, never none


@contextlib.contextmanager
def naming(path: str):
    """An error of the Cloud Storage client (whose messages name its API's URL, not the object) noted with
    ``path``, for the one line that reports it."""
    try:
        yield
    except Exception as err:
        err.add_note(f"while reaching {path}")
        raise


def write_json(path: str, value) -> None:
    write_atomically(path, (json.dumps(value, indent=2, sort_keys=False) + "\n").encode())


def open_read(path: str, chunk_bytes: int | None = None):
    """``path`` opened for reading bytes; on ``gs://``, read ``chunk_bytes`` at a time (the client's default, 40 MiB,
    when None: a smaller chunk where only a header is read)."""
    if "://" not in path:
        return open(path, "rb")
    return _blob(path).open("rb", chunk_size=chunk_bytes)


def sha256_of(path: str) -> str:
    """The sha256 of a file (local or ``gs://``), read a piece at a time."""
    import hashlib

    with open_read(path) as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_bytes(path: str) -> bytes:
    """The whole of a file: on ``gs://``, in one request."""
    if "://" not in path:
        with open(path, "rb") as handle:
            return handle.read()
    with naming(path):
        return _blob(path).download_as_bytes()


def read_json(path: str):
    return json.loads(read_bytes(path))


def read_bytes_if_any(path: str) -> bytes | None:
    """``read_bytes``, or None where there is no such file: one request on ``gs://``, where asking whether it exists
    first makes two."""
    try:
        return read_bytes(path)
    except FileNotFoundError:
        return None
    except Exception as err:
        from google.api_core.exceptions import NotFound

        if isinstance(err, NotFound):
            return None
        raise


def exists(path: str) -> bool:
    """Whether the file (on ``gs://``, the object) exists."""
    if "://" not in path:
        return os.path.exists(path)
    with naming(path):
        return _blob(path).exists()


def glob(pattern: str) -> list[str]:
    """The paths that match ``pattern`` (``*`` within a folder), sorted."""
    return sorted(found.path for found in match(pattern))


def match(pattern: str, limit: int | None = None) -> list[FileInfo]:
    """The files that match ``pattern``, with their sizes and modification times, as Beam's ``FileSystems.match``
    finds them (the same files, so the same fingerprints): ``*`` and ``?`` within a folder, ``**`` across folders,
    ``[...]`` a character class; a pattern ending in ``/`` lists the folder; a pattern without them, that one file.
    At most ``limit`` files when given."""
    found = iter_match(pattern)
    return [info for _, info in zip(range(limit), found, strict=False)] if limit is not None else list(found)


def iter_match(pattern: str):
    """``match``'s files one at a time, as the listing finds them (in no particular order): memory does not grow
    with their number."""
    if pattern.endswith("/"):
        pattern += "*"
    prefix = re.match(r"^[^[*?]*", pattern).group(0)
    if prefix == pattern:
        if info := _info(pattern):
            yield info
        return
    wanted = re.compile(translate_pattern(pattern)).match
    yield from (info for info in _listed(prefix) if wanted(info.path))


# a listing call returns up to 1,000 objects (the service's largest page); a folder whose wanted objects would take a
# page of listing for fewer than LISTED_PER_PAGE of them is asked object by object instead, PARALLEL_LOOKUPS at once
# (the connections the storage client's session keeps: requests' default pool of 10)
LIST_PAGE, LISTED_PER_PAGE, PARALLEL_LOOKUPS = 1000, 10, 10


def find(paths) -> dict[str, FileInfo]:
    """{path: its file} of the ``paths`` that exist (files, not patterns). Local files are looked up one by one; on
    ``gs://`` each folder is listed, a call for 1,000 objects, from its first wanted name on, for as many pages as
    its wanted objects would fill at ``LISTED_PER_PAGE`` a page: a million files in one folder take a thousand
    calls, not a million. Objects the listing did not reach are asked one by one, ``PARALLEL_LOOKUPS`` at once."""
    found, folders = {}, {}
    for path in paths:
        if "://" not in path:
            if info := _info(path):
                found[path] = info
        else:
            folders.setdefault(path.rpartition("/")[0], set()).add(path)
    lookups = []
    for folder, wanted in folders.items():
        lookups += sorted(_listed_among(folder, wanted, found) if len(wanted) > LISTED_PER_PAGE else wanted)
    if lookups:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(PARALLEL_LOOKUPS, len(lookups))) as pool:
            found.update((info.path, info) for info in pool.map(_info, lookups) if info is not None)
    return found


def _listed_among(folder: str, wanted: set[str], found: dict) -> set[str]:
    """Lists ``folder`` (its own objects, not its subfolders') into ``found``, the ``wanted`` ones, for at most one
    page per ``LISTED_PER_PAGE`` of them; -> the wanted ones it did not reach (none where it listed the folder to
    its end: those are missing)."""
    from google.api_core.exceptions import Forbidden

    bucket, name = _bucket_and_name(folder + "/")
    left, pages = set(wanted), 1 + len(wanted) // LISTED_PER_PAGE
    start = min(wanted)[len(f"gs://{bucket}/") :]
    try:
        with naming(folder + "/"):
            listing = _client().list_blobs(bucket, prefix=name, delimiter="/", start_offset=start, page_size=LIST_PAGE)
            for page in listing.pages:
                for blob in page:
                    path = f"gs://{bucket}/{blob.name}"
                    if path in left:
                        found[path] = FileInfo(path, blob.size, blob.updated.timestamp())
                        left.discard(path)
                pages -= 1
                if not left or not pages:
                    return left
    except Forbidden:  # (allowed to read the objects, not to list their folder: asked one by one)
        return left
    return set()  # (the whole folder listed: what it did not hold does not exist)


def copy(source: str, target: str) -> None:
    """Copies one file, each side local or ``gs://`` (within Cloud Storage, by the server: nothing passes here)."""
    if "://" not in source + target:
        import shutil

        shutil.copyfile(source, target)
    elif "://" not in source:
        _blob(target).upload_from_filename(source)
    elif "://" not in target:
        _blob(source).download_to_filename(target)
    else:
        origin, destination, token = _blob(source), _blob(target), None
        while True:  # (a large object takes several rewrite calls)
            token, _, _ = destination.rewrite(origin, token=token)
            if token is None:
                return


def remove_tree(folder: str) -> int:
    """Removes every file under ``folder`` (local or ``gs://``) and, locally, the folder; returns the files removed."""
    found = match(f"{folder.rstrip('/')}/**")
    if "://" not in folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        return len(found)
    for info in found:
        _blob(info.path).delete()
    return len(found)


def translate_pattern(pattern: str) -> str:
    """``pattern`` as a regular expression, by Beam's rules (``FileSystem.translate_pattern``: fnmatch's, with ``*``
    kept within a folder and ``**`` across folders)."""
    parts, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        i += 1
        if c == "*" and pattern[i : i + 1] == "*":
            parts.append(".*")
            i += 1
        elif c == "*":
            parts.append(r"[^/\\]*")
        elif c == "?":
            parts.append(".")
        elif c == "[" and "]" in pattern[i + (pattern[i : i + 1] == "!") + 1 :]:
            j = pattern.index("]", i + (pattern[i : i + 1] == "!") + 1)
            stuff = pattern[i:j].replace("\\", "\\\\")
            parts.append(
                "[" + ("^" + stuff[1:] if stuff[0] == "!" else "\\" + stuff if stuff[0] == "^" else stuff) + "]"
            )
            i = j + 1
        else:
            parts.append(re.escape(c))
    return "(?ms)" + "".join(parts) + r"\Z"


def _listed(prefix: str):
    """Every file under ``prefix``: a local folder walked (the prefix's folder), or the objects whose names start
    with it, but a folder's placeholder (a name ending in ``/``, as the Cloud Console's "Create folder" writes).
    One at a time: a folder of a million files is never held whole (on ``gs://``, pages of 1,000 objects)."""
    if "://" not in prefix:
        folder = os.path.dirname(prefix)  # (as Beam: "data/x*" walks data, and "x*" alone finds nothing)
        yield from _walked(folder) if folder else ()
        return
    bucket, name = _bucket_and_name(prefix)
    with naming(prefix):
        for blob in _client().list_blobs(bucket, prefix=name, page_size=LIST_PAGE):
            if not blob.name.endswith("/"):
                yield FileInfo(f"gs://{bucket}/{blob.name}", blob.size, blob.updated.timestamp())


def _walked(folder: str):
    """The files under a local folder, as ``os.walk`` finds them (a link to a folder is not followed, a link to a
    file is a file), each with one ``stat``, read as the folder is (``os.scandir``), not its names first."""
    folders = [folder]
    while folders:
        try:
            entries = os.scandir(folders.pop())
        except OSError:  # (gone, or not readable, as os.walk skips it)
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir():
                        if not entry.is_symlink():
                            folders.append(entry.path)
                        continue
                    stat = entry.stat()
                except OSError:  # (gone while listing; a broken link)
                    continue
                yield FileInfo(entry.path, stat.st_size, stat.st_mtime)


def _info(path: str) -> FileInfo | None:
    """The file's size and time; None when there is no such file (on ``gs://``, one request either way)."""
    if "://" not in path:
        try:
            return FileInfo(path, os.path.getsize(path), os.path.getmtime(path))
        except OSError:
            return None
    bucket, name = _bucket_and_name(path)
    with naming(path):
        blob = _client().bucket(bucket).get_blob(name)
    return FileInfo(path, blob.size, blob.updated.timestamp()) if blob is not None else None


def create_only(path: str, payload: bytes) -> int | None:
    """Creates the Cloud Storage object ``path`` unless it exists, in one call whose precondition the service checks
    (``ifGenerationMatch=0``): of writers at once, one wins. Its generation, or None where it exists."""
    from google.api_core.exceptions import PreconditionFailed
    from google.cloud.storage.retry import DEFAULT_RETRY

    blob = _blob(path)
    with naming(path):
        try:
            blob.upload_from_string(payload, if_generation_match=0, retry=DEFAULT_RETRY)
        except PreconditionFailed:
            return None
    return blob.generation


def read_generation(path: str) -> tuple[bytes, int] | None:
    """The Cloud Storage object ``path`` and its generation, read together; None where there is none."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    bucket, name = _bucket_and_name(path)
    with naming(path):
        blob = _client().bucket(bucket).get_blob(name)
        if blob is None:
            return None
        generation = blob.generation
        try:
            return blob.download_as_bytes(if_generation_match=generation), generation
        except (NotFound, PreconditionFailed):  # (deleted or written in between)
            return None


def delete_generation(path: str, generation: int) -> None:
    """Deletes the Cloud Storage object ``path`` if it is still ``generation`` (not one written since)."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    with naming(path), contextlib.suppress(NotFound, PreconditionFailed):
        _blob(path).delete(if_generation_match=generation)


def bucket_of(path: str):
    """The ``google.cloud.storage`` bucket of a ``gs://`` path (the emulator's where ``STORAGE_EMULATOR_HOST`` is
    set), not read yet."""
    bucket, _ = _bucket_and_name(path.rstrip("/") + "/")
    return _client().bucket(bucket)


def _bucket_and_name(path: str) -> tuple[str, str]:
    if not path.startswith("gs://"):
        raise ValueError(f"{path}: only local paths and gs:// are supported")
    bucket, _, name = path[len("gs://") :].partition("/")
    return bucket, name


def _blob(path: str):
    bucket, name = _bucket_and_name(path)
    return _client().bucket(bucket).blob(name)


def _client():
    return _client_for(os.environ.get("STORAGE_EMULATOR_HOST"))


def bound_storage_retries() -> None:
    """Every call of the Cloud Storage client in this process retried for ``storage_deadline()`` seconds at most;
    then it fails, and the command says so in one line (``components.cli.storage_unreachable``). (The client's retry
    is a shared object, read at each call; Beam's GCS filesystem uses it too, beside a throttling retry of its own,
    which the conversion bounds: ``components.convert.common.bound_beam_storage_retries``.)"""
    from google.cloud.storage import retry

    from components.cli import storage_deadline, storage_retrying

    retry.DEFAULT_RETRY._timeout, retry.DEFAULT_RETRY._on_error = storage_deadline(), storage_retrying


@functools.lru_cache(maxsize=4)
def _client_for(emulator: str | None):
    """One Cloud Storage client per process (and per emulator, in tests): the Application Default Credentials, or
    anonymous where there are none (public buckets, as Beam does)."""
    import google.auth.exceptions
    from google.cloud import storage

    bound_storage_retries()

    try:
        return storage.Client()
    except google.auth.exceptions.DefaultCredentialsError:
        return storage.Client.create_anonymous_client()


def gcs_fuse_path(path: str) -> str:
    """``gs://bucket/x`` -> ``/gcs/bucket/x``, where Vertex AI mounts Cloud Storage for training code."""
    return "/gcs/" + path[len("gs://") :] if path.startswith("gs://") else path


# what Linux takes: a file name's bytes, a path's; and the room the steps' own files take beneath a folder given
NAME_MAX, PATH_MAX, PATH_MARGIN = 255, 4096, 1024


def check_writable(path: str, what: str) -> None:
    """A local folder about to be written, probed with a file before any work starts (in the folder, or in its
    nearest existing parent when it is not there yet: nothing is created); a one-line error naming it and the user
    when it cannot be written (read-only, no permission). ``gs://`` paths are not probed."""
    import tempfile

    from components.cli import UsageError

    if "://" in path:
        return
    folder = os.path.abspath(path)
    longest = max(folder.split(os.sep), key=len)
    if len(longest.encode()) > NAME_MAX:
        raise UsageError(
            f"{what} {path} cannot be made: its part {longest[:40]}... is {len(longest.encode())} bytes "
            f"long, more than the {NAME_MAX} a file name may take; choose a shorter name"
        )
    if len(folder.encode()) > PATH_MAX - PATH_MARGIN:
        raise UsageError(
            f"{what} {path} is {len(folder.encode())} bytes long: the files written under it would pass "
            f"the {PATH_MAX} a path may take; choose a shorter path"
        )
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        where = "a file" if folder == os.path.abspath(path) else f"under a file, {folder}"
        raise UsageError(f"{what} {path} is {where}: pass a new or empty folder")
    try:
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
