"""A TFRecord source in the codelab schema is validated and used as it is: no reconversion, splits by whole file."""

from __future__ import annotations

import json
import os

import pytest

from components.cli import UsageError
from components.convert.core import ConvertConfig, run
from components.modalities import reading_of
from components.schema import SPLITS, serialize_example, split_files
from tests.conftest import CLASSES, COLORS, image_bytes, run_cli

SIZE = 16


def codelab_example(class_index: int, seed: int, size: int = SIZE) -> bytes:
    jpeg = image_bytes(COLORS[CLASSES[class_index]], (size, size), seed=seed)
    return serialize_example(jpeg, class_index, CLASSES[class_index], (size, size), len(CLASSES))


def write_tfrecords(folder, files: int = 6, per_file: int = 9, name="flowers{:02d}-{}.tfrec") -> str:
    """Files named like the public flowers set (``flowers00-230.tfrec``), examples of every class in each."""
    import tensorflow as tf

    os.makedirs(folder, exist_ok=True)
    for number in range(files):
        with tf.io.TFRecordWriter(os.path.join(folder, name.format(number, per_file))) as writer:
            for n in range(per_file):
                writer.write(codelab_example(n % len(CLASSES), seed=number * 100 + n))
    return str(folder)


def test_codelab_tfrecords_are_adopted_as_they_are_and_train(tmp_path):
    import tensorflow as tf

    from components.artifacts.examples import make_dataset

    source = write_tfrecords(tmp_path / "flowers")
    before = {name: os.path.getmtime(os.path.join(source, name)) for name in os.listdir(source)}
    output = tmp_path / "examples"
    result = run_cli("components.convert", "--source", f"{source}/*.tfrec", "--output", str(output))
    assert result.returncode == 0, result.stderr
    stats = json.loads((output / "stats.json").read_text())
    assert stats["adopted"] is True and stats["image_size"] == SIZE and stats["class_names"] == list(CLASSES)
    # whole files per split: 6 files at 0.1 / 0.1 -> one test file, one validation file, four training files
    assert [len(stats["files"][split]) for split in ("train", "validation", "test")] == [4, 1, 1]
    listed = sorted(path for split in SPLITS for path in stats["files"][split])
    assert listed == sorted(os.path.join(source, name) for name in before)
    assert stats["counts"] == {split: 9 * len(stats["files"][split]) for split in SPLITS}
    assert stats["num_examples"] == 54 and stats["duplicates"] == 0
    assert not list(output.glob("*/*.tfrec"))  # nothing converted or copied
    assert before == {name: os.path.getmtime(os.path.join(source, name)) for name in os.listdir(source)}
    # the train / evaluate / export steps read the listed files
    assert split_files(str(output), "test") == stats["files"]["test"]
    reading = reading_of(stats)
    images, labels = next(iter(make_dataset(str(output), "train", reading, 8, training=True)))
    assert images.shape == (8, SIZE, SIZE, 3) and labels.shape == (8, len(CLASSES))
    assert images.dtype == tf.uint8
    # they carry no source paths: the report says nothing rather than something wrong
    _, _, sources = next(iter(make_dataset(str(output), "test", reading, 4, training=False, sources=True)))
    assert sources.numpy().tolist() == [b""] * 4


def test_files_that_name_their_split_keep_it(tmp_path):
    source = tmp_path / "sets"
    for split in ("train", "validation", "test"):
        write_tfrecords(source, files=1, per_file=3, name=split + "-{:02d}-{}.tfrec")
    stats = run(ConvertConfig(source=f"{source}/*.tfrec", output_dir=str(tmp_path / "out")))
    assert {split: [os.path.basename(f) for f in stats["files"][split]] for split in SPLITS} == {
        "train": ["train-00-3.tfrec"],
        "validation": ["validation-00-3.tfrec"],
        "test": ["test-00-3.tfrec"],
    }


def test_duplicate_images_across_splits_are_reported(tmp_path):
    import tensorflow as tf

    source = tmp_path / "dups"
    os.makedirs(source)
    for split in ("train", "test"):
        with tf.io.TFRecordWriter(str(source / f"{split}.tfrec")) as writer:
            writer.write(codelab_example(0, seed=1))  # the same image in both
            writer.write(codelab_example(1, seed=2 if split == "train" else 3))
    stats = run(ConvertConfig(source=f"{source}/*.tfrec", output_dir=str(tmp_path / "out")))
    assert stats["duplicates"] == 1 and stats["duplicates_in_two_splits"] == 1
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "duplicates.jsonl").read_text().splitlines()]
    assert record["cross_split"] is True and record["path"].endswith("train.tfrec#0")


def bad_file(folder, kind: str) -> str:
    import tensorflow as tf

    path = os.path.join(folder, "bad.tfrec")
    if kind == "corrupt":
        write_tfrecords(folder, files=1, per_file=2, name="bad.tfrec{}{}")
        os.rename(os.path.join(folder, "bad.tfrec02"), path)
        data = bytearray(open(path, "rb").read())  # noqa: SIM115 (a test: read, flip a byte, write back)
        data[40] ^= 0xFF
        open(path, "wb").write(bytes(data))  # noqa: SIM115
        return path
    example = tf.train.Example.FromString(codelab_example(0, seed=5))
    if kind == "missing":
        del example.features.feature["one_hot_class"]
    elif kind == "not square":
        example.features.feature["size"].int64_list.value[:] = [16, 20]
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(codelab_example(1, seed=6))
        writer.write(example.SerializeToString())
    return path


@pytest.mark.parametrize(
    "kind, message",
    [
        ("corrupt", "record 1: corrupt record data (CRC mismatch)"),
        ("missing", "record 2: feature 'one_hot_class' is missing"),
        ("not square", "record 2: image size 16x20 is not square"),
    ],
)
def test_bad_tfrecords_are_one_line_errors_naming_file_and_record(tmp_path, kind, message):
    folder = tmp_path / "in"
    os.makedirs(folder)
    path = bad_file(str(folder), kind)
    with pytest.raises(UsageError) as raised:
        run(ConvertConfig(source=f"{folder}/*.tfrec", output_dir=str(tmp_path / "out")))
    error = str(raised.value)
    assert "\n" not in error and error.startswith(f"TFRecord {path}, ") and message in error
    assert "convert the original images instead" in error
    assert not (tmp_path / "out" / "stats.json").exists()


def test_a_glob_that_matches_nothing_is_one_line_exit_2(tmp_path):
    # (the CLI turns every UsageError into this: one line on stderr, exit 2)
    result = run_cli("components.convert", "--source", f"{tmp_path}/*.tfrec", "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: TFRecord source {tmp_path}/*.tfrec matches no files: pass a glob such as gs://b/flowers/*.tfrec"
    ]


def test_a_tfrecord_glob_is_a_source_for_the_dags_fingerprint_step_and_run_local(tmp_path):
    """The DAG's fingerprint step and run-local's source check accept the globs convert accepts, and the fingerprint
    is convert's own: a new file changes it."""
    from pipeline.local import LocalRunConfig, resolve_source
    from tests.conftest import fingerprint_step as fingerprint

    glob = f"{write_tfrecords(tmp_path / 'flowers', files=4, per_file=3)}/*.tfrec"
    stats = run(ConvertConfig(source=glob, output_dir=str(tmp_path / "out")))
    assert fingerprint(source=glob) == stats["fingerprint"]
    assert resolve_source(LocalRunConfig(work_dir=str(tmp_path / "run"), source=glob)) == (glob, stats["fingerprint"])
    write_tfrecords(tmp_path / "flowers", files=5, per_file=3)  # a fifth file
    assert fingerprint(source=glob) != stats["fingerprint"]
    with pytest.raises(UsageError, match=r"matches no files"):
        resolve_source(LocalRunConfig(source=f"{tmp_path}/nothing/*.tfrec"))
