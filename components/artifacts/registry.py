"""The model registry's storage: model versions kept in a folder, local or ``gs://``, free of KFP and of Vertex AI.

Each blessed export is copied whole to ``<root>/<N>/`` (``saved_model/``, the TFLite files, ``export.json``) with a
``version.json`` written last, and ``<root>/default`` names the version in service. A copy without ``version.json``
was interrupted and is ignored (TFX's Pusher does the same with a filesystem destination, with the SavedModel itself
at ``<N>/``; here it is at ``<N>/saved_model/``, beside the TFLite files). The register step writes it
(``components.register``); run-local and the evaluate and check-data steps read its default version, the baseline.

Registrations take turns (on a local folder a lock the kernel releases when its holder dies; on Cloud Storage a lock
object created only where there is none, with a lease), and each checks the default it would replace first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from components.artifacts.exported import export_folder
from components.artifacts.records import DEFAULT, VERSION
from components.cli import UsageError, one_line
from components.storage import copy, exists, match

log = logging.getLogger(__name__)

DEFAULT_FILE = DEFAULT.name  # {"version": N}
VERSION_FILE = VERSION.name  # written last: the version is complete
LOCK_FILE = ".lock"  # a local registry's registrations take turns on it


@dataclass(frozen=True)
class Version:
    number: int
    uri: str  # the export folder: saved_model/ and export.json inside
    record: dict


class FolderRegistry:
    """Numbered versions under ``root`` (a local folder or ``gs://bucket/prefix``) and a ``default`` pointer."""

    def __init__(self, root: str):
        if not root:
            raise UsageError("a model registry folder is needed: pass --registry DIR (or the model_root parameter)")
        self.root = root.rstrip("/") if "://" in root else os.path.abspath(root)

    def _numbers(self, complete_only: bool) -> list[int]:
        """The numbered folders (only those with their ``version.json`` when ``complete_only``)."""
        if "://" not in self.root:  # folders, empty ones included (a claimed number)
            names = os.listdir(self.root) if os.path.isdir(self.root) else []
            return sorted(
                int(name)
                for name in names
                if name.isdigit() and (not complete_only or os.path.isfile(os.path.join(self.root, name, VERSION_FILE)))
            )
        numbers = set()
        for metadata in match(f"{self.root}/*/{VERSION_FILE}" if complete_only else f"{self.root}/**"):
            name = metadata.path[len(self.root) + 1 :].split("/", 1)[0]
            if name.isdigit():
                numbers.add(int(name))
        return sorted(numbers)

    def versions(self) -> list[Version]:
        """Complete versions, oldest first."""
        return [self.version(number) for number in self._numbers(complete_only=True)]

    def version(self, number: int) -> Version:
        uri = f"{self.root}/{number}"
        return Version(number, uri, VERSION.read_any(uri))

    def default(self) -> Version | None:
        """The version in service; None before the first push. A one-line error when ``root`` is not a registry
        (a file, or a ``default`` that names no complete version)."""
        if os.path.exists(self.root) and not os.path.isdir(self.root):  # (never true of a gs:// URI)
            raise UsageError(f"model registry {self.root} is a file: pass a folder (it may not exist yet)")
        if not DEFAULT.exists(self.root):
            return None
        not_ours = UsageError(
            f"model registry {self.root} is not one this pipeline keeps: its {DEFAULT_FILE} does not name a "
            f"complete version <N>/{VERSION_FILE}; pass another folder"
        )
        try:
            number = int(DEFAULT.read_any(self.root)["version"])
        except (ValueError, KeyError, TypeError, OSError, UsageError):
            raise not_ours from None
        if not exists(f"{self.root}/{number}/{VERSION_FILE}"):
            raise not_ours
        try:
            return self.version(number)
        except (ValueError, OSError, UsageError) as err:
            raise UsageError(
                f"model registry {self.root}: version {number}'s {VERSION_FILE} is damaged ({one_line(err)}): "
                f'restore it, or make another version the default ({{"version": N}} in {self.root}/{DEFAULT_FILE})'
            ) from None

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """This process's turn to register: on a local folder, an exclusive lock on ``<root>/.lock``, which the
        kernel releases when its holder ends however it ends; on Cloud Storage, the object ``<root>/.lock``, created
        only where there is none (``cloud_turn``)."""
        if "://" in self.root:
            with cloud_turn(f"{self.root}/{LOCK_FILE}"):
                yield
            return
        import fcntl

        os.makedirs(self.root, exist_ok=True)
        with open(os.path.join(self.root, LOCK_FILE), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def check_default_is(self, baseline: str) -> None:
        """``check_still_default`` against this registry's default version."""
        current = self.default()
        check_still_default(
            self.root,
            baseline,
            current.uri if current else "",
            f"version {current.number}" if current else "no version",
        )

    def push(
        self, export_uri: str, record: dict, make_default: bool = True, data_statistics: str = "", evaluation: str = ""
    ) -> Version:
        """Copies the export at ``export_uri`` to the next number, with the statistics of the data it learned from
        (``data_statistics``, a check-data output; "": none) and its evaluation (``evaluation``, an evaluate
        output's ``metrics.json``; "": none); makes it the default version unless told not to (the cloud DAG does
        so once the Model Registry has it)."""
        number = self._claim()
        uri = f"{self.root}/{number}"
        copied = copy_tree(export_uri, uri)
        if data_statistics:  # (before version.json: a version is complete with them)
            from components.artifacts.data_statistics import FILES, keep_with_model

            keep_with_model(data_statistics, uri)
            copied += len(FILES)
        if evaluation:
            from components.artifacts import evaluation as evaluation_files

            evaluation_files.keep_with_model(evaluation, uri)
            copied += 1
        version_record = {"version": number, "source": export_uri, "files": copied, "created": _now(), **record}
        version_record = VERSION.write(uri, version_record)
        if make_default:
            self.set_default(number)
        log.info("model registry %s: version %d (%d files from %s)", self.root, number, copied, export_uri)
        return Version(number, uri, version_record)

    def unfinished(self, older_than: float = 0.0) -> list[tuple[int, float]]:
        """(number, seconds since its last file was written) of each copy without its ``version.json`` (a push
        that was killed, or one in progress) whose last write is at least ``older_than`` seconds ago, oldest
        number first."""
        complete = set(self._numbers(complete_only=True))
        found = []
        for number in self._numbers(complete_only=False):
            if number in complete:
                continue
            times = [info.last_updated_in_seconds for info in match(f"{self.root}/{number}/**")]
            if not times and "://" not in self.root:  # (an empty claimed folder)
                times = [os.path.getmtime(os.path.join(self.root, str(number)))]
            age = time.time() - max(times, default=0.0)
            if age >= older_than:
                found.append((number, age))
        return found

    def set_default(self, number: int) -> None:
        DEFAULT.write(self.root, {"version": number})

    def _claim(self) -> int:
        """The next free number. Locally the folder is made atomically, so runs that overlap never share one; on
        Cloud Storage, registrations take turns (``turn``)."""
        taken = self._numbers(complete_only=False)  # unfinished copies keep their number: never write into one
        number = (taken[-1] if taken else 0) + 1
        if "://" in self.root:
            return number
        os.makedirs(self.root, exist_ok=True)
        while True:
            try:
                os.mkdir(os.path.join(self.root, str(number)))
                return number
            except FileExistsError:
                number += 1


LOCK_LEASE_SECONDS = 900.0  # a Cloud Storage registry's lock, left by a holder that died, is taken over after it
LOCK_WAIT_SECONDS = 1200.0  # then a registration stops waiting for its turn


@contextlib.contextmanager
def cloud_turn(lock: str) -> Iterator[None]:
    """Holds the Cloud Storage object ``lock``, created only where there is none (a precondition the service checks,
    so of two registrations at once one holds it), and deleted at the end. Its record names its holder and the end
    of its lease: a lock whose holder died without deleting it is taken over once its lease is over."""
    import random
    import socket
    import uuid

    from components.cli import StepFailedError
    from components.storage import create_only, delete_generation, read_generation

    me = f"{socket.gethostname()} process {os.getpid()}"
    record = {"holder": me, "token": uuid.uuid4().hex, "until": time.time() + LOCK_LEASE_SECONDS}
    started, told = time.monotonic(), False
    while (generation := create_only(lock, json.dumps(record).encode())) is None:
        found = read_generation(lock)
        if found is None:  # (released in between)
            continue
        try:
            holding = json.loads(found[0])
        except ValueError:
            holding = {}
        if holding.get("token") == record["token"]:  # our own, its answer lost and the call retried
            generation = found[1]
            break
        holder = holding.get("holder", "another registration")
        if float(holding.get("until", 0)) < time.time():
            log.warning("model registry lock %s: %s held it past its lease; taking it over", lock, holder)
            delete_generation(lock, found[1])
            continue
        waited = time.monotonic() - started
        if waited > LOCK_WAIT_SECONDS:
            raise StepFailedError(
                f"model registry lock {lock}: {holder} has held it for the {waited / 60:.0f} min this registration "
                "waited; once it has ended, run again (or delete the lock if nothing holds it)"
            )
        if not told:
            log.info("model registry lock %s: waiting for the registration of %s to end", lock, holder)
            told = True
        time.sleep(random.uniform(0.5, 1.5))
    try:
        yield
    finally:
        delete_generation(lock, generation)


def check_still_default(root: str, baseline: str, current: str, current_name: str) -> None:
    """A one-line error when the model in service (``current``, its folder or ``saved_model/``; "": none) is no
    longer ``baseline``, the model a candidate was judged against ("": none), because another run registered
    meanwhile: the default never moves to a model that was not compared with the one it replaces. A baseline outside
    the registry ``root`` (one given by hand) is not the registry's to check."""
    judged = export_folder(baseline)
    if (judged and not judged.startswith(root + "/")) or export_folder(current) == judged:
        return
    was = f"version {judged.rsplit('/', 1)[-1]}" if judged else "no model"
    raise UsageError(
        f"model registry {root}: its default is now {current_name}, not the {was} this model was judged against "
        "(another run registered meanwhile), so it is not registered: run again to be judged against it"
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def copy_tree(source: str, destination: str) -> int:
    """Copies every file under ``source`` to the same relative path under ``destination`` (each local or ``gs://``);
    returns the number of files."""
    source = source.rstrip("/")
    # (folder placeholder objects, "dir/", which the /gcs/ mount may leave, would copy their whole subtree again)
    paths = sorted(m.path for m in match(f"{source}/**") if not m.path.endswith("/"))
    if not paths:
        raise UsageError(f"export {source} holds no files: pass the export step's output")
    targets = [f"{destination}/{path[len(source) + 1 :]}" for path in paths]
    if "://" not in destination:
        for target in targets:
            os.makedirs(os.path.dirname(target), exist_ok=True)
    for path, target in zip(paths, targets, strict=True):
        copy(path, target)
    return len(paths)
