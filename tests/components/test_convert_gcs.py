"""Cloud paths: images read from and TFRecords written to gs://, with the real Beam and Cloud Storage clients
pointed at gcp-storage-emulator on 127.0.0.1 (the `gcs` fixture). Beam looks for Google credentials first (about 24 s of
retries, once per process) and then connects anonymously, as it would on a laptop without credentials."""

from __future__ import annotations

import re

import pytest

from components.artifacts.records import STATS
from components.convert.core import ConvertConfig, run
from components.convert.listing import list_image_folder
from components.schema import SPLITS, split_files
from components.storage import read_json
from tests.conftest import BUCKET, COLORS, IN_MEMORY, image_bytes


def test_converts_a_gcs_folder_into_gcs_tfrecords(gcs):
    for index, name in enumerate(("cat", "dog", "fish")):
        for n in range(6):
            picture = image_bytes(COLORS[name], (30 + n, 20), seed=100 * index + n)
            gcs.blob(f"photos/{name}/{n}.jpg").upload_from_string(picture)
    gcs.blob("photos/dog/broken.jpg").upload_from_string(b"not an image")

    listing = list_image_folder(f"gs://{BUCKET}/photos")
    assert listing.class_names == ("cat", "dog", "fish") and len(listing.items) == 19

    output = f"gs://{BUCKET}/examples"
    stats = run(
        ConvertConfig(
            source=f"gs://{BUCKET}/photos",
            output_dir=output,
            image_size=8,
            max_bad_fraction=0.1,
            pipeline_args=IN_MEMORY,
        )
    )
    assert stats["num_examples"] == 18 and stats["quarantined"] == 1
    assert read_json(f"{output}/stats.json") == {"format_version": STATS.version, **stats}
    names = {blob.name for blob in gcs.client.list_blobs(BUCKET, prefix="examples/")}
    assert {"examples/stats.json", "examples/quarantine.jsonl", "examples/duplicates.jsonl"} <= names
    for split in SPLITS:
        shards = sorted(f"gs://{BUCKET}/{n}" for n in names if n.startswith(f"examples/{split}/{split}-"))
        assert shards and all(shard.endswith(".tfrec") for shard in shards)  # (an empty split's shard, empty)
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


def test_a_storage_outage_mid_conversion_ends_in_one_line_once_its_retries_are_spent(
    image_folder, monkeypatch, capsys, caplog
):
    """The emulator (a process of its own) killed once the source is listed: each Cloud Storage call that meets the
    outage (an image read, Beam's own) is retried for TPU_PIPELINE_STORAGE_DEADLINE seconds, then the command ends in
    one line naming what it could not reach, not after minutes of silence and a traceback, and no image is taken for
    a bad file (quarantined) for it."""
    import logging
    import os
    import socket
    import subprocess
    import sys
    import time

    from apache_beam.internal.gcp import auth
    from apache_beam.io.gcp import gcsio_retry
    from google.cloud import storage
    from google.cloud.storage import retry

    from components.cli import run_main
    from components.convert.__main__ import main as convert

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = (
        "from gcp_storage_emulator.server import create_server; import time; "
        f"create_server('127.0.0.1', {port}, in_memory=True, default_bucket='{BUCKET}').start(); time.sleep(600)"
    )
    emulator = subprocess.Popen([sys.executable, "-c", server])
    kept = retry.DEFAULT_RETRY._timeout, gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER._timeout
    found = logging.getLogger("components.convert.core")

    class OutageOnceListed(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("found ") and emulator.poll() is None:
                emulator.kill()
                killed.append(time.monotonic())

    outage, killed = OutageOnceListed(), []
    try:
        for _ in range(100):
            with socket.socket() as up:
                if up.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("TPU_PIPELINE_STORAGE_DEADLINE", "3")
        monkeypatch.setattr(auth._Credentials, "_credentials_init", True)  # anonymous at once (see the gcs fixture)
        monkeypatch.setattr(auth._Credentials, "_credentials", None)
        bucket = storage.Client.create_anonymous_client().bucket(BUCKET)
        for folder, _, names in os.walk(image_folder):
            for name in names:
                path = os.path.join(folder, name)
                bucket.blob(f"src/{os.path.relpath(path, image_folder)}").upload_from_filename(path)
        found.addHandler(outage)
        monkeypatch.setattr(found, "level", logging.INFO)
        with pytest.raises(SystemExit) as exited:
            run_main(
                convert,
                ["--source", f"gs://{BUCKET}/src", "--output", f"gs://{BUCKET}/out", "--image-size", "16", *IN_MEMORY],
            )
        took = time.monotonic() - killed[0]
    finally:
        found.removeHandler(outage)
        emulator.kill()
        retry.DEFAULT_RETRY._timeout, gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER._timeout = kept
    assert exited.value.code == 1
    # Beam logs the failed step's error and traceback before it raises it again: the command's handlers hold it back
    # (the one line says it all), as they do pytest's here
    logged = [r for r in caplog.records if r.name.startswith("apache_beam") and r.levelno >= logging.ERROR]
    assert not logged, [r.getMessage()[:300] for r in logged]
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"error: gs://{BUCKET}/(src|out)/\S+ could not be reached: Cloud Storage did not answer within 3 s of "
        r"retries; check the network and the bucket, then run the same command again \(TPU_PIPELINE_STORAGE_DEADLINE "
        r"sets how long to retry\)",
        last,
    ), last
    assert took < 60  # (no hang: 3 s of retries for the calls that meet the outage, an image read or a write)
