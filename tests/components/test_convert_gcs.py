"""Cloud paths: images read from and TFRecords written to gs://, with the real Beam and Cloud Storage clients
pointed at gcp-storage-emulator on 127.0.0.1 (the `gcs` fixture). Beam looks for Google credentials first (about 24 s of
retries, once per process) and then connects anonymously, as it would on a laptop without credentials."""

from __future__ import annotations

import pytest

from components.convert.core import ConvertConfig, run
from components.convert.listing import list_image_folder
from components.schema import SPLITS, split_files
from components.storage import read_json
from tests.conftest import BUCKET, COLORS, IN_MEMORY, image_bytes


def test_converts_a_gcs_folder_into_gcs_tfrecords(gcs):
    for name in ("cat", "dog", "fish"):
        for n in range(6):
            gcs.blob(f"photos/{name}/{n}.jpg").upload_from_string(image_bytes(COLORS[name], (30 + n, 20), seed=n))
    gcs.blob("photos/dog/broken.jpg").upload_from_string(b"not an image")

    listing = list_image_folder(f"gs://{BUCKET}/photos")
    assert listing.class_names == ("cat", "dog", "fish") and len(listing.items) == 19

    output = f"gs://{BUCKET}/examples"
    stats = run(ConvertConfig(source=f"gs://{BUCKET}/photos", output_dir=output, image_size=8,
                              max_bad_fraction=0.1, pipeline_args=IN_MEMORY))  # fmt: skip
    assert stats["num_examples"] == 18 and stats["quarantined"] == 1
    assert read_json(f"{output}/stats.json") == stats
    names = {blob.name for blob in gcs.client.list_blobs(BUCKET, prefix="examples/")}
    assert {"examples/stats.json", "examples/quarantine.jsonl", "examples/duplicates.jsonl"} <= names
    for split in SPLITS:
        shards = sorted(f"gs://{BUCKET}/{n}" for n in names if n.startswith(f"examples/{split}/{split}-"))
        assert all(shard.endswith(".tfrec") for shard in shards) and bool(shards) == bool(stats["counts"][split])
        assert split_files(output, split) == shards  # what train, evaluate and export read, listed on gs://
    # the data checks read the records back on gs:// too: every example, each split's classes counted
    from components.check_data.statistics import compute

    counted, thumbnails = compute(output)
    for split in SPLITS:
        assert sum(counted["image"][split]["brightness"]) == stats["counts"][split] == len(thumbnails[split])
        assert counted["image"][split]["formats"] == ({"jpg": stats["counts"][split]} if stats["counts"][split] else {})
    assert not [n for n in names if "tmp" in n or "beam-temp" in n], "temporary files left behind"


def test_missing_gcs_folder_is_a_one_line_usage_error(gcs):
    from components.cli import UsageError

    with pytest.raises(UsageError, match=f"data path gs://{BUCKET}/nothing-here holds no images"):
        list_image_folder(f"gs://{BUCKET}/nothing-here")
