"""A Cloud Storage client held in memory that counts its calls, for what no emulator shows: how many requests a
step makes as its source grows. It answers the calls ``components.storage`` makes of ``google.cloud.storage.Client``
as the service does, listings in pages of at most 1,000 objects (``gcp-storage-emulator`` answers a listing in one),
a page a call. Objects hold a size and a time, and their bytes where a test gives them.

    store = CountingStorage()
    store.add("gs://b/data/a/1.png", size=120)
    monkeypatch.setattr(components.storage, "_client", lambda: store)
"""

from __future__ import annotations

import bisect
import datetime
import io
from collections import Counter

PAGE = 1000  # the service's largest page of a listing
UPDATED = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class CountingStorage:
    def __init__(self):
        self.objects: dict[str, dict[str, tuple[int, bytes | None]]] = {}
        self._names: dict[str, list[str]] = {}  # each bucket's names, sorted (made again after an add)
        self.calls: Counter = Counter()  # "list" (a page), "get" (an object's metadata), "read" (its bytes)

    def add(self, path: str, size: int = 0, payload: bytes | None = None) -> None:
        bucket, _, name = path.removeprefix("gs://").partition("/")
        self.objects.setdefault(bucket, {})[name] = (len(payload) if payload is not None else size, payload)
        self._names.pop(bucket, None)

    def total(self) -> int:
        return sum(self.calls.values())

    # what components.storage calls
    def bucket(self, name: str) -> Bucket:
        return Bucket(self, name)

    def list_blobs(self, bucket_or_name, prefix=None, delimiter=None, start_offset=None, page_size=None, **_):
        bucket = getattr(bucket_or_name, "name", bucket_or_name)
        return Listing(self, bucket, prefix or "", delimiter, start_offset, min(page_size or PAGE, PAGE))

    def names(self, bucket: str) -> list[str]:
        if bucket not in self._names:
            self._names[bucket] = sorted(self.objects.get(bucket, {}))
        return self._names[bucket]


class Listing:
    """``list_blobs``'s answer: its objects, or (``pages``) its pages, each one call."""

    def __init__(self, store, bucket, prefix, delimiter, start_offset, page_size):
        self.store, self.bucket, self.prefix, self.delimiter = store, bucket, prefix, delimiter
        self.start, self.page_size = max(prefix, start_offset or ""), page_size

    def __iter__(self):
        for page in self.pages:
            yield from page

    @property
    def pages(self):
        """Pages of up to ``page_size`` entries: objects and, with a delimiter, each subfolder once (a prefix
        counts in a page as an object does; its objects are not returned)."""
        names = self.store.names(self.bucket)
        at, prefixes = bisect.bisect_left(names, self.start), set()
        while True:
            self.store.calls["list"] += 1
            page, entries = [], 0
            while at < len(names) and names[at].startswith(self.prefix) and entries < self.page_size:
                name = names[at]
                at += 1
                rest = name[len(self.prefix) :]
                if self.delimiter and self.delimiter in rest:  # (a subfolder's: its prefix, once)
                    folder = rest.split(self.delimiter, 1)[0]
                    entries += folder not in prefixes
                    prefixes.add(folder)
                else:
                    page.append(Blob(self.store, self.bucket, name))
                    entries += 1
            yield page
            if at >= len(names) or not names[at].startswith(self.prefix):
                return


class Bucket:
    def __init__(self, store, name):
        self.store, self.name = store, name

    def get_blob(self, name, **_):
        self.store.calls["get"] += 1
        return Blob(self.store, self.name, name) if name in self.store.objects.get(self.name, {}) else None

    def blob(self, name, **_):
        return Blob(self.store, self.name, name)


class Blob:
    def __init__(self, store, bucket, name):
        self.store, self.bucket, self.name = store, bucket, name
        self.updated, self.generation = UPDATED, 1

    @property
    def size(self) -> int:
        return self.store.objects[self.bucket][self.name][0]

    def exists(self, **_) -> bool:
        self.store.calls["get"] += 1
        return self.name in self.store.objects.get(self.bucket, {})

    def download_as_bytes(self, **_) -> bytes:
        from google.api_core.exceptions import NotFound

        self.store.calls["read"] += 1
        if self.name not in self.store.objects.get(self.bucket, {}):
            raise NotFound(f"GET https://storage.googleapis.com/download/storage/v1/b/{self.bucket}/o/{self.name}")
        return self.store.objects[self.bucket][self.name][1] or b""

    def open(self, mode="rb", **_):
        return io.BytesIO(self.download_as_bytes())
