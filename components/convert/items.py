"""One image's conversion, from its path to its example (read, decode, resize, re-encode, serialize), and the local
worker processes that run it.

Light on purpose (Pillow, NumPy and the schema; Beam only for a remote path): the worker processes import this module
alone. On Beam's local engine with one worker (the default), reading local files, the conversion runs on processes of
their own, one per core: threads would share one interpreter lock for the Python between Pillow's calls, and Beam's
own work shares it too. Anywhere else (Dataflow's workers, ``gs://`` sources), it runs on a worker's threads.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from components.cli import one_line, storage_unreachable
from components.convert.split_keys import image_key, split_digest
from components.decoding import DEFAULT_MAX_PIXELS, UnusableImageError, conversion_square
from components.schema import serialize_example

log = logging.getLogger(__name__)

# items a worker process takes at a time: few enough to keep both busy to a batch's end, enough to pay one message
CHUNK = 8


def content_digest(content: bytes) -> bytes:
    return hashlib.sha256(content).digest()


def read_item(path: str) -> bytes:
    """The encoded bytes of one item: a file, or ``<file.npz>#<index>`` as a lossless PNG."""
    file, separator, index = path.rpartition("#")
    if separator and file.lower().endswith(".npz"):
        import io

        from PIL import Image

        from components.convert.listing import _npz_arrays

        pixels = _npz_arrays(file)["x"][int(index)]
        buffer = io.BytesIO()
        Image.fromarray(pixels.squeeze(-1) if pixels.ndim == 3 and pixels.shape[2] == 1 else pixels).save(
            buffer, format="PNG"
        )
        return buffer.getvalue()
    if "://" not in path:
        with open(path, "rb") as handle:
            return handle.read()
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as handle:
        return handle.read()


def encode_image(content: bytes, image_size: int, jpeg_quality: int, max_pixels: int = DEFAULT_MAX_PIXELS) -> bytes:
    """Decodes image bytes (any format, see ``components.decoding``), resizes to fill the square, centre-crops and
    re-encodes as JPEG; raises ``UnusableImageError`` with the reason for a file that is not a usable image.

    All in Pillow, which releases the GIL between its Python steps. A large JPEG is decoded at a reduced DCT scale
    that keeps both sides at least twice the target (as Pillow's ``thumbnail`` does), then resized with the same
    triangle filter as the serving signature (``components.imaging``).
    """
    return jpeg_bytes(conversion_square(content, image_size, max_pixels), jpeg_quality)


def jpeg_bytes(image, jpeg_quality: int) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=jpeg_quality)
    return buffer.getvalue()


def oriented_size(content: bytes) -> tuple[int, int]:
    """(width, height) of an image file as its EXIF orientation turns it, from its header (a converted file decodes,
    so its header reads); for the data checks' statistics of the sources."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(content)) as image:
        width, height = image.size
        turned = image.getexif().get(0x0112, 1) in (5, 6, 7, 8)  # Orientation: a quarter turn, mirrored or not
    return (height, width) if turned else (width, height)


@dataclass(frozen=True)
class ItemSettings:
    """What converting one item takes from the conversion's config."""

    image_size: int
    jpeg_quality: int
    max_pixels: int
    class_names: tuple[str, ...]


def convert_item(item: Sequence, settings: ItemSettings):
    """(path, class index, split) -> (content digest, (path, class index, split, serialized example, split digest),
    the source's shorter side), or a quarantine record ``{"path", "reason"}`` for an item that cannot be read or is
    not a usable image."""
    path, class_index, split = item
    try:
        content = read_item(path)
    except Exception as err:  # named in a manifest but absent, gone since the listing, unreadable
        if storage_unreachable(err):  # an outage, not a bad file: the conversion stops, in one line
            err.add_note(f"while reading {path}")
            raise
        missing = isinstance(err, FileNotFoundError) or "no such file" in str(err).lower() or not _exists(path)
        reason = "missing file" if missing else f"unreadable: {one_line(err, with_type=True)}"
        return {"path": path, "reason": reason}
    try:
        square = conversion_square(content, settings.image_size, settings.max_pixels)
        jpeg = jpeg_bytes(square, settings.jpeg_quality)
    except UnusableImageError as err:
        return {"path": path, "reason": str(err)}
    except Exception as err:  # one bad file must not sink the job: record it instead
        return {"path": path, "reason": one_line(err, with_type=True)}
    size, source_size = (settings.image_size, settings.image_size), oriented_size(content)
    example = serialize_example(
        jpeg,
        class_index,
        settings.class_names[class_index],
        size,
        len(settings.class_names),
        source=path,
        source_size=source_size,
    )
    key = split_digest(image_key(square))
    return content_digest(content), (path, class_index, split, example, key), min(source_size)


def _exists(path: str) -> bool:
    try:
        if "://" not in path:
            import os

            return os.path.exists(path)
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.exists(path)
    except Exception:
        return False


_pool = None  # (the pool, its worker count)
_pool_lock = threading.Lock()


def worker_processes(count: int):
    """This process's pool of ``count`` worker processes, started on the first call and kept for later conversions
    (its workers start importing at once, while the caller goes on); None where processes cannot start here."""
    global _pool
    from concurrent.futures import ProcessPoolExecutor

    with _pool_lock:
        if _pool is not None and _pool[1] == count and not getattr(_pool[0], "_broken", False):
            return _pool[0]
        if _pool is not None:
            _pool[0].shutdown(wait=False, cancel_futures=True)
            _pool = None
        try:
            import multiprocessing

            # spawn: a fresh interpreter, never a copy of this process's threads and locks (Beam runs threads)
            spawn = multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(count, mp_context=spawn, initializer=_worker_started)
            with _main_script_left_out():
                for _ in range(count):
                    pool.submit(_ready)  # each worker starts now, importing this module while the caller goes on
        except (OSError, ImportError) as err:  # no semaphores (no /dev/shm), no processes allowed
            log.warning("worker processes cannot start here (%s): converting on threads", one_line(err))
            return None
        _pool = (pool, count)
        return pool


@contextlib.contextmanager
def _main_script_left_out():
    """While workers spawn: a spawned process imports its parent's main script first (``multiprocessing``'s rule),
    and a script that calls the conversion without an ``if __name__ == "__main__":`` guard would convert again in
    each. The workers need nothing of it: they run this module's functions."""
    import sys
    import types

    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _worker_started() -> None:
    """Each worker's set-up: the memory it frees kept (``_keep_freed_memory``); Ctrl-C left to the conversion's
    process (a terminal sends it to the workers too: they finish their chunk and are shut down with it); and an end
    of its own when that process ends, however it ends (else a worker blocked handing back a result would live on)."""
    import multiprocessing
    import signal

    _keep_freed_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with, args=(parent.sentinel,), name="parent-watch", daemon=True).start()


def _end_with(sentinel: int) -> None:
    from multiprocessing.connection import wait

    wait([sentinel])  # readable once the parent process has ended
    import os

    os._exit(1)


def _keep_freed_memory() -> None:
    """Each worker's set-up: glibc's malloc keeps the memory of the images it frees (blocks of 4 MB and over come
    from its heap, not a mapping of their own, and up to 64 MB freed at the heap's top is kept). With its defaults,
    each photo's buffers are handed back and faulted in afresh, a quarter of a photo's time on this project's benches
    (``bench/convert.py``). Nothing where the C library has no ``mallopt``."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD
    mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD


def _shut_down() -> None:
    """At exit, before the interpreter's teardown (a pool collected during it logs an error)."""
    global _pool
    with _pool_lock:
        found, _pool = _pool, None
    if found is not None:
        found[0].shutdown(wait=True, cancel_futures=True)


atexit.register(_shut_down)


def _ready() -> None:
    """A worker's first task: nothing, once this module (Pillow, NumPy) is imported."""


def _discard(pool) -> None:
    global _pool
    with _pool_lock:
        if _pool is not None and _pool[0] is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


def convert_chunk(chunk: Sequence, settings: ItemSettings, work: Callable = convert_item) -> list:
    """``work`` (``convert_item``) of each item of ``chunk``, in order: one task for a worker."""
    return [work(item, settings) for item in chunk]


class Converter:
    """Converts items on ``processes`` worker processes (``worker_processes``), or on ``threads`` threads where
    there are none, several chunks in flight: the workers keep converting while the caller hands results on and
    fetches the next items. Results come in the order of the items.

    An item whose worker process dies (a decoder's crash, the memory killer) breaks the pool: the items in flight are
    then converted one at a time, each on a fresh pool, and the one whose worker dies again is quarantined with that
    reason (on threads, such a crash takes the whole process down). Where the workers die before any converts an
    item (a machine that starts processes it cannot run), the conversion goes on on threads."""

    def __init__(self, settings: ItemSettings, processes: int, threads: int, work: Callable = convert_item):
        self._settings = settings
        self._processes = processes
        self._threads = threads
        self._work = work
        self._thread_pool = None
        self._pending: collections.deque = collections.deque()
        self._worked = False  # whether a worker process has converted a chunk yet
        # chunks kept in flight between calls: work queued for each worker while the caller is busy elsewhere
        self.in_flight = 2 * max(processes, threads, 1)

    def _executor(self):
        if self._processes:
            pool = worker_processes(self._processes)
            if pool is not None:
                return pool
            self._processes = 0  # (worker_processes logged why)
        if self._thread_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._thread_pool = ThreadPoolExecutor(self._threads, thread_name_prefix="convert")
        return self._thread_pool

    def _submit(self, chunk: list):
        from concurrent.futures.process import BrokenProcessPool

        executor = self._executor()
        try:
            return executor.submit(convert_chunk, chunk, self._settings, self._work)
        except BrokenProcessPool:  # broken by an earlier chunk, found out here first
            _discard(executor)
            return self._executor().submit(convert_chunk, chunk, self._settings, self._work)

    def submit(self, items: Sequence) -> None:
        for start in range(0, len(items), CHUNK):
            chunk = list(items[start : start + CHUNK])
            self._pending.append((chunk, self._submit(chunk)))

    def results(self, keep: int = 0):
        """The results of the items submitted, in order, until ``keep`` chunks are left in flight."""
        from concurrent.futures.process import BrokenProcessPool

        while len(self._pending) > keep:
            chunk, future = self._pending.popleft()
            try:
                results = future.result()
                self._worked = self._worked or bool(self._processes)
            except BrokenProcessPool:
                results = self._one_at_a_time(chunk) if self._worked else self._on_threads(chunk)
            yield from results

    def _on_threads(self, chunk: list) -> list:
        if self._processes:
            log.warning("the conversion's worker processes died before converting anything: converting on threads")
            self._processes = 0
        return self._executor().submit(convert_chunk, chunk, self._settings, self._work).result()

    def _one_at_a_time(self, chunk: list) -> list:
        from concurrent.futures.process import BrokenProcessPool

        log.warning("a conversion worker process died: converting %d images one at a time to find which", len(chunk))
        results = []
        for item in chunk:
            executor = self._executor()
            try:
                results.extend(executor.submit(convert_chunk, [item], self._settings, self._work).result())
            except BrokenProcessPool:
                _discard(executor)
                results.append(
                    {
                        "path": item[0],
                        "reason": "its worker process died converting it (a decoder crash, or out of memory)",
                    }
                )
        return results

    def close(self) -> None:
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._thread_pool is not None:
            self._thread_pool.shutdown(wait=False, cancel_futures=True)
