"""How many Cloud Storage calls the steps that run before a conversion make, and how they grow with the source: a
manifest's files are found by listing their folders (a call per 1,000 objects), not a call a row, and a folder's
fingerprint streams through its listing. Counted by a client held in memory that pages as the service does
(``tests/counting_storage.py``): the emulator answers a listing in one page."""

import math
import tracemalloc

import pytest

from components import storage
from components.cli import UsageError
from components.convert.fingerprint import fingerprint_source
from components.convert.listing import fingerprint_of, image_folder_fingerprint, list_image_folder, list_manifest
from tests.counting_storage import CountingStorage


@pytest.fixture
def store(monkeypatch) -> CountingStorage:
    found = CountingStorage()
    monkeypatch.setattr(storage, "_client", lambda: found)
    return found


def add_folders(store: CountingStorage, classes: int, per_class: int, root: str = "gs://b/data") -> list[str]:
    paths = []
    for c in range(classes):
        for i in range(per_class):
            paths.append(f"{root}/class{c}/{i:06d}.png")
            store.add(paths[-1], size=100 + i % 7)
    store.names("b")  # (sorted before any call is counted)
    return paths


def one_by_one(paths) -> list:
    """The files as a call per file finds them (what the listing must agree with)."""
    return [info for path in paths if (info := storage._info(path))]


@pytest.mark.parametrize("per_class", [1500, 15_000])
def test_a_manifests_files_are_found_by_listing_their_folders_a_call_per_1000_files_not_one_a_row(store, per_class):
    paths = add_folders(store, 3, per_class)
    store.add("gs://b/missing/1.png", size=1)  # (another folder, not in the manifest)
    manifest = "".join(f"{path},{path.split('/')[-2]}\n" for path in paths) + "gs://b/data/class0/gone.png,class0\n"
    store.add("gs://b/manifest.csv", payload=manifest.encode())
    store.calls.clear()

    listing = list_manifest("gs://b/manifest.csv")

    # the manifest read once, then each class folder's pages of 1,000: 2 each for 1,500 files, 15 for 15,000
    assert store.calls == {"read": 1, "list": 3 * math.ceil(per_class / 1000)}
    assert len(listing.items) == 3 * per_class + 1  # (the missing file is still a row: the conversion quarantines it)
    store.calls.clear()
    found = one_by_one(paths)
    assert store.calls["get"] == 3 * per_class  # what a call a row costs
    assert listing.total_bytes == sum(info.size_in_bytes for info in found)
    assert listing.fingerprint == fingerprint_of(found, extra=manifest.encode())


def test_a_manifest_naming_a_few_files_of_a_large_folder_asks_for_them_not_for_the_whole_folder(store):
    paths = add_folders(store, 1, 100_000)
    named = paths[::4000]  # 25 files spread over the folder
    manifest = "".join(f"{path},a\n" for path in named)
    store.add("gs://b/few.csv", payload=manifest.encode())
    store.calls.clear()

    listing = list_manifest("gs://b/few.csv")

    # a page from the first name on, and at most a page per 10 files named (3), then a call each for those not met
    assert store.calls["list"] <= 1 + len(named) // 10 and store.calls["get"] <= len(named)
    assert listing.total_bytes == sum(info.size_in_bytes for info in one_by_one(named))


@pytest.mark.parametrize("per_class", [500, 5000])
def test_a_folders_fingerprint_takes_a_listing_call_per_1000_files_and_the_same_memory_however_many(store, per_class):
    paths = add_folders(store, 5, per_class)
    store.calls.clear()
    tracemalloc.start()
    fingerprint = fingerprint_source("gs://b/data")  # (--modality auto: the first page tells images from texts)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert store.calls == {"list": 1 + math.ceil(5 * per_class / 1000)}
    assert fingerprint == list_image_folder("gs://b/data").fingerprint == fingerprint_of(one_by_one(paths))
    # a page of the listing at a time: at 25,000 files what at 2,500 (each page's objects, about 1 MB)
    assert peak < 2_000_000


def test_a_fingerprint_is_the_same_whatever_order_the_files_are_listed_in_and_changes_with_any_of_them(store):
    paths = add_folders(store, 2, 30)
    found = one_by_one(paths)
    assert fingerprint_of(found) == fingerprint_of(reversed(found))
    changed = [found[0]._replace(size_in_bytes=found[0].size_in_bytes + 1), *found[1:]]
    assert fingerprint_of(changed) != fingerprint_of(found)
    assert fingerprint_of(found[1:]) != fingerprint_of(found)
    assert fingerprint_of([*found, found[0]]) != fingerprint_of(found)  # (a file listed twice is not the same)


def test_a_folders_streamed_fingerprint_refuses_what_its_listing_refuses(store):
    from components.cli import UsageError

    store.add("gs://b/flat/1.png", size=3)
    with pytest.raises(UsageError, match="has images but no class subfolders"):
        image_folder_fingerprint("gs://b/flat")
    with pytest.raises(UsageError, match="holds no images"):
        image_folder_fingerprint("gs://b/empty")
    add_folders(store, 2, 3, root="gs://b/two")
    with pytest.raises(UsageError, match="class folders not in --classes: class1"):
        image_folder_fingerprint("gs://b/two", ("class0",))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_text_tables_fingerprint_is_its_bytes_read_a_piece_at_a_time_with_the_conversions_checks(tmp_path, suffix):
    import json

    from components.cli import UsageError
    from components.convert.text_listing import list_text_table, text_source_fingerprint

    table = tmp_path / f"texts{suffix}"
    rows = [{"text": f"review {i} " + "words " * 60, "label": ("neg", "pos")[i % 2]} for i in range(40_000)]
    if suffix == ".csv":
        table.write_text("text,label\n" + "".join(f"{row['text']},{row['label']}\n" for row in rows))
    else:
        table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert table.stat().st_size > 15_000_000
    tracemalloc.start()
    fingerprint = text_source_fingerprint(str(table))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the fingerprint of the file and its bytes, read whole; the conversion's listing records the same
    assert fingerprint == fingerprint_of(storage.match(str(table)), extra=table.read_bytes())
    assert list_text_table(str(table), "text", "label").fingerprint == fingerprint
    assert peak < 10_000_000  # (a 4 MiB piece at a time, not the 15 MB table and its rows)
    # it refuses what the conversion refuses, in the same line
    with pytest.raises(UsageError, match=r"has classes not in --classes: pos"):
        text_source_fingerprint(str(table), classes=("neg",))
    with pytest.raises(UsageError, match=r"has no column 'body' \(its columns: label, text\): .* --text-column"):
        text_source_fingerprint(str(table), text_column="body")
    broken = tmp_path / f"latin{suffix}"
    broken.write_bytes(table.read_bytes()[:100_000] + "é".encode("latin-1") + b"\n")
    for listed in (text_source_fingerprint, lambda path: list_text_table(path, "text", "label")):
        with pytest.raises(UsageError, match=r"is not UTF-8 text \(invalid continuation byte\): save it as UTF-8"):
            listed(str(broken))


def test_a_conversion_of_a_100000_row_manifest_makes_a_hundred_listing_calls_before_its_job_starts(
    store, monkeypatch, tmp_path
):
    from components.convert import core

    paths = add_folders(store, 10, 10_000)
    store.add("gs://b/big.csv", payload="".join(f"{path},{path.split('/')[-2]}\n" for path in paths).encode())
    store.calls.clear()

    class JobStartedError(Exception):
        pass

    def job_starts(rows, pipeline_args):
        assert len(rows["items"]) == 100_000
        raise JobStartedError

    monkeypatch.setattr(core, "staged_rows", job_starts)
    config = core.ConvertConfig(source="gs://b/big.csv", output_dir=str(tmp_path / "out"), image_size=32)
    with pytest.raises(JobStartedError):
        core.run(config)
    # the manifest read once, each of its 10 folders listed in 10 pages of 1,000: not 100,000 calls
    assert store.calls == {"read": 1, "list": 100}


def test_texts_are_told_from_images_by_the_class_folders_files_past_a_deep_folder_within_ten_listing_calls(store):
    from components.convert.listing import is_text_source

    for i in range(1200):  # (listed first: "_" sorts before the class folders' letters)
        store.add(f"gs://b/t/_cache/a/b/{i:05d}.png", size=1)
    for label in ("neg", "pos"):
        for i in range(50):
            store.add(f"gs://b/t/{label}/{i:03d}.txt", size=1)
    add_folders(store, 2, 3000, root="gs://b/images")
    store.calls.clear()
    assert is_text_source("gs://b/t") and store.calls["list"] == 2  # (1,300 objects: two pages)
    store.calls.clear()
    assert not is_text_source("gs://b/images") and store.calls["list"] == 1  # (1,000 images in the first page)


def test_a_manifests_files_are_asked_one_by_one_where_their_folder_may_not_be_listed(store, monkeypatch):
    from google.api_core.exceptions import Forbidden

    from tests.counting_storage import Listing

    paths = add_folders(store, 1, 30)
    store.add("gs://b/m.csv", payload="".join(f"{path},a\n" for path in paths).encode())

    def refused(self):
        self.store.calls["list"] += 1
        raise Forbidden("storage.objects.list denied")
        yield

    monkeypatch.setattr(Listing, "pages", property(refused))
    store.calls.clear()
    listing = list_manifest("gs://b/m.csv")
    assert store.calls == {"read": 1, "list": 1, "get": 30}
    assert listing.total_bytes == sum(info.size_in_bytes for info in one_by_one(paths))


def test_a_record_is_read_in_one_request_and_a_missing_one_in_one_too(store):
    import json

    from components.artifacts.records import DATA_STATS, STATS

    store.add("gs://b/v/data_stats.json", payload=json.dumps({"format_version": DATA_STATS.version}).encode())
    store.add("gs://b/old/data_stats.json", payload=json.dumps({"format_version": 0}).encode())
    store.calls.clear()
    assert DATA_STATS.read_current("gs://b/v") == {"format_version": DATA_STATS.version}
    assert DATA_STATS.read_if_any("gs://b/v") is not None
    assert DATA_STATS.read_current("gs://b/old") is None  # (made by an older version: left aside)
    assert DATA_STATS.read_any("gs://b/none", missing_ok=True) is None and STATS.read_if_any("gs://b/none") is None
    assert store.calls == {"read": 5}
    with pytest.raises(UsageError, match=r"^data statistics gs://b/none has no data_stats\.json: pass the check-data"):
        DATA_STATS.read("gs://b/none")
