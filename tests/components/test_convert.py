"""The convert step on the DirectRunner: schema, resizing, deterministic splits, stats, quarantine, bad input."""

from __future__ import annotations

import glob
import json
import os
import random
import re
import shutil

import numpy as np
import pytest

from components.artifacts.records import STATS
from components.cli import UsageError
from components.convert.core import (
    ConvertConfig,
    assign_split,
    conversion_threads,
    default_pipeline_args,
    run,
    summarize_counts,
)
from components.convert.listing import list_image_folder, list_source
from components.decoding import IMAGE_FILES
from components.schema import SPLITS, split_pattern
from tests.conftest import BUCKET, CLASSES, COLORS, IN_MEMORY, TINY_SIZE, image_bytes, run_cli, write_image_folder


def read_examples(examples_dir: str, split: str) -> list[dict]:
    import tensorflow as tf

    from components.schema import parse_example

    records = []
    for path in sorted(glob.glob(split_pattern(examples_dir, split))):
        for serialized in tf.data.TFRecordDataset(path):
            example = parse_example(serialized, len(CLASSES))
            records.append({name: value.numpy() for name, value in example.items()})
    return records


def test_writes_sharded_tfrecords_in_the_codelab_schema(converted):
    import tensorflow as tf

    examples_dir, stats = converted
    total = 0
    for split in SPLITS:
        shards = sorted(os.listdir(os.path.join(examples_dir, split)))
        assert shards, f"no {split} shards"
        assert all(name.startswith(f"{split}-") and name.endswith(".tfrec") for name in shards)
        assert all("-of-" in name for name in shards)
        records = read_examples(examples_dir, split)
        assert len(records) == stats["counts"][split]
        for record in records:
            image = tf.io.decode_jpeg(record["image"]).numpy()
            assert image.shape == (TINY_SIZE, TINY_SIZE, 3)
            assert list(record["size"]) == [TINY_SIZE, TINY_SIZE]
            label = record["label"].decode()
            assert CLASSES[record["class"]] == label
            assert record["one_hot_class"].tolist() == [1.0 if c == label else 0.0 for c in CLASSES]
            # the picture is the class colour: the conversion kept the content
            assert np.abs(image.reshape(-1, 3).mean(axis=0) - COLORS[label]).max() < 30
        total += len(records)
    assert total == stats["num_examples"] == 60


def test_stats_count_per_split_and_class_with_class_names_in_index_order(converted):
    examples_dir, stats = converted
    with open(os.path.join(examples_dir, "stats.json")) as handle:
        on_disk = json.load(handle)
    assert on_disk == {"format_version": STATS.version, **stats}  # (what the step returns is what it wrote)
    assert stats["class_names"] == list(CLASSES)
    assert stats["quarantined"] == 0
    assert stats["image_size"] == TINY_SIZE
    for split in SPLITS:
        assert sum(stats["per_class"][split].values()) == stats["counts"][split]
    assert sum(stats["per_class"]["train"].values()) > sum(stats["per_class"]["test"].values())


def test_split_follows_the_fractions():
    contents = [random.Random(7).randbytes(64) + index.to_bytes(4, "big") for index in range(4000)]
    splits = [assign_split(c, 0.1, 0.2) for c in contents]
    shares = {split: splits.count(split) / len(splits) for split in SPLITS}
    assert shares["test"] == pytest.approx(0.2, abs=0.03)
    assert shares["validation"] == pytest.approx(0.1, abs=0.03)


# the split of known bytes, frozen: the first 8 bytes of their SHA-256, read as a big-endian fraction of 2**64 (in
# brackets, worked out with sha256sum), below 0.1 test, below 0.2 validation, else train. A change to this table
# moves images between train and test from one data version to the next: a deliberate, documented break
SPLIT_GOLDEN = {
    b"image-0": "train",  # 3dd3f8d1db39a536 (0.2415)
    b"image-1": "test",  # 0cf457e24a479f02 (0.0506)
    b"image-5": "validation",  # 32d86efbce5098c8 (0.1986)
    b"image-9": "test",  # 0246a19cef4dd805 (0.0089)
    b"image-10": "train",  # f6b2ead07677f614 (0.9637)
    b"image-11": "train",  # ad35f8a562adc02d (0.6766)
    b"image-15": "test",  # 09a75f0b5206092a (0.0377)
    b"image-26": "validation",  # 1eae78f1c5d95199 (0.1198)
    b"image-32": "test",  # 0198c99a947de9e6 (0.0062)
    b"image-33": "train",  # 4e046f8de4938013 (0.3048)
}


def test_the_split_of_known_bytes_never_changes():
    assert {content: assign_split(content, 0.1, 0.1) for content in SPLIT_GOLDEN} == SPLIT_GOLDEN


def test_a_bucket_on_a_fractions_edge_goes_to_the_next_split():
    """The first 8 bytes of the digest, big-endian, over 2**64: exactly a quarter is no longer test (test < 0.25),
    exactly a half no longer validation (validation < 0.25 + 0.25)."""
    from components.convert.common import split_for_digest

    quarter, half = (1 << 62).to_bytes(8, "big"), (1 << 63).to_bytes(8, "big")
    assert split_for_digest(quarter, 0.25, 0.25) == "validation"
    assert split_for_digest(((1 << 62) - (1 << 12)).to_bytes(8, "big"), 0.25, 0.25) == "test"  # (just below)
    assert split_for_digest(half, 0.25, 0.25) == "train"
    assert split_for_digest(((1 << 63) - (1 << 12)).to_bytes(8, "big"), 0.25, 0.25) == "validation"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("validation_fraction", 1.0, "--validation-fraction 1.0 is out of range: use a fraction in [0, 1)"),
        ("test_fraction", 1.5, "--test-fraction 1.5 is out of range: use a fraction in [0, 1)"),
        ("max_bad_fraction", -0.1, "--max-bad-fraction -0.1 is out of range: use a fraction in [0, 1)"),
        ("num_shards", -1, "--num-shards -1 is negative: use 0 (automatic) or a positive count"),
    ],
)
def test_split_options_out_of_range_are_one_line(field, value, message):
    from components.convert.config import check_split_options

    class Options:  # a conversion config's split options, one of them wrong
        validation_fraction, test_fraction, max_bad_fraction, num_shards = 0.0, 0.0, 0.0, 0

    setattr(Options, field, value)
    with pytest.raises(UsageError) as raised:
        check_split_options(Options, "images")
    assert str(raised.value) == message
    setattr(Options, field, 0.0 if field != "num_shards" else 0)
    check_split_options(Options, "images")  # zero is a fraction and a shard count: accepted


def test_rerun_puts_every_image_in_the_same_split(image_folder, converted, tmp_path):
    examples_dir, _ = converted
    again = str(tmp_path / "again")
    run(
        ConvertConfig(
            source=image_folder,
            output_dir=again,
            image_size=TINY_SIZE,
            validation_fraction=0.2,
            test_fraction=0.2,
            pipeline_args=IN_MEMORY,
        )
    )
    for split in SPLITS:
        before = sorted(r["image"] for r in read_examples(examples_dir, split))
        after = sorted(r["image"] for r in read_examples(again, split))
        assert before == after, f"{split} changed between runs"


def shapes_picture(seed: int, side: int = 48):
    """A picture of four random ellipses and rectangles on a random background."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    picture = Image.new("RGB", (side, side), tuple(int(v) for v in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(picture)
    for _ in range(4):
        x, y = (int(v) for v in rng.integers(0, side - 8, 2))
        width, height = (int(v) for v in rng.integers(8, side // 2, 2))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape([x, y, x + width, y + height], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    return picture


def encoded(picture, fmt: str, **options) -> bytes:
    import io

    buffer = io.BytesIO()
    picture.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def test_near_copies_land_in_one_split(tmp_path):
    """Each picture three times, as a PNG, re-encoded as a JPEG and resized to twice its side: the copies of nearly
    every picture share one split (by chance, with these fractions, about 12% would), and copies that share the
    split key always do. The split fractions still hold across pictures."""
    from PIL import Image

    from components.schema import SOURCE_FEATURE, bytes_features, read_records

    pictures = 60
    for index in range(pictures):
        picture = shapes_picture(index)
        folder = tmp_path / "src" / CLASSES[index % len(CLASSES)]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index}-png.png").write_bytes(encoded(picture, "PNG"))
        (folder / f"{index}-q75.jpg").write_bytes(encoded(picture, "JPEG", quality=75))
        larger = picture.resize((96, 96), Image.Resampling.BILINEAR)
        (folder / f"{index}-large.jpg").write_bytes(encoded(larger, "JPEG", quality=90))
    output = tmp_path / "out"
    run(
        ConvertConfig(
            source=str(tmp_path / "src"),
            output_dir=str(output),
            image_size=32,
            validation_fraction=0.3,
            test_fraction=0.3,
            pipeline_args=IN_MEMORY,
        )
    )
    splits_of: dict[str, set] = {}
    for split in SPLITS:
        for path in glob.glob(split_pattern(str(output), split)):
            with open(path, "rb") as handle:
                for record in read_records(handle):
                    source = bytes_features(record, (SOURCE_FEATURE,))[SOURCE_FEATURE].decode()
                    splits_of.setdefault(os.path.basename(source).split("-")[0], set()).add(split)
    assert len(splits_of) == pictures
    together = [name for name, splits in splits_of.items() if len(splits) == 1]
    assert len(together) >= 0.8 * pictures, f"only {len(together)} of {pictures} pictures in one split"
    shares = {split: sum(split in found for found in splits_of.values()) / pictures for split in SPLITS}
    assert all(share >= 0.1 for share in shares.values()), shares


def test_the_key_sees_shapes_in_grey_and_tells_flat_pictures_apart():
    """A picture and its copy recoloured share the key (the data checks' near-copy search is colour-blind too);
    flat pictures of two colours, which have no shape to hash, do not; a flat picture keeps its own key."""
    from PIL import Image, ImageOps

    from components.convert.split_keys import image_key

    picture = shapes_picture(3)
    inverted_hue = ImageOps.grayscale(picture).convert("RGB")
    assert image_key(picture) == image_key(inverted_hue)
    red, blue = Image.new("RGB", (32, 32), (200, 30, 30)), Image.new("RGB", (32, 32), (30, 30, 200))
    assert image_key(red) != image_key(blue)
    assert image_key(red) == image_key(red.copy())
    assert image_key(picture) != image_key(shapes_picture(4))


def test_texts_the_same_once_standardised_are_one_example(tmp_path):
    """A text written three ways (case, punctuation, spacing) is kept once, in one split; the others are listed as
    its duplicates."""
    from components.convert.text import TextConvertConfig, run_text

    rows = ["text,label"]
    for index in range(40):
        words = f"package number {index} does thing {index % 7} well"
        label = ("alpha", "beta")[index % 2]
        rows += [f"{words},{label}", f'"{words.upper()}!",{label}', f'"  {words.title()} ... ",{label}']
    (tmp_path / "texts.csv").write_text("\n".join(rows) + "\n")
    output = tmp_path / "out"
    config = TextConvertConfig(
        source=str(tmp_path / "texts.csv"),
        output_dir=str(output),
        validation_fraction=0.3,
        test_fraction=0.3,
        pipeline_args=IN_MEMORY,
    )
    stats = run_text(config)
    assert stats["num_examples"] == 40 and stats["duplicates"] == 80
    assert stats["split_method"] == 2
    duplicates = [json.loads(line) for line in (output / "duplicates.jsonl").read_text().splitlines()]
    assert len(duplicates) == 80 and not any(record.get("label_conflict") for record in duplicates)


def test_resize_fills_the_square_then_centre_crops():
    import tensorflow as tf

    from components.imaging import fill_square

    # a wide image: left third red, middle third green, right third blue; the crop keeps the middle
    image = np.zeros((30, 90, 3), dtype=np.uint8)
    image[:, :30] = (255, 0, 0)
    image[:, 30:60] = (0, 255, 0)
    image[:, 60:] = (0, 0, 255)
    square = fill_square(tf.constant(image), 10).numpy()
    assert square.shape == (10, 10, 3)
    assert (square[:, :, 1] > 200).all() and (square[:, :, 0] < 50).all()
    tall = fill_square(tf.constant(np.zeros((101, 37, 3), np.uint8)), 24).numpy()
    assert tall.shape == (24, 24, 3)


@pytest.mark.parametrize("height, width, size", [(375, 500, 192), (91, 37, 32), (480, 640, 64), (192, 193, 192)])
def test_conversion_resize_matches_the_serving_resize(height, width, size):
    """Pillow in the conversion, TensorFlow in the serving signature: same sizes, filter and crop, to within one
    level of rounding, so a model sees the same pixels in training and in serving."""
    import tensorflow as tf
    from PIL import Image

    from components.imaging import fill_square, fill_square_pillow

    coarse = np.random.default_rng(height).integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    converted = np.asarray(fill_square_pillow(image, size), dtype=np.int16)
    served = fill_square(tf.constant(np.asarray(image)), size).numpy().astype(np.int16)
    assert converted.shape == served.shape == (size, size, 3)
    assert np.abs(converted - served).max() <= 1


def test_large_jpegs_decode_at_a_reduced_scale_without_visible_change():
    """A 2000x1600 photo is decoded at 1/8 scale (DCT domain) before the resize; the result stays within one level
    of decoding it in full, and the pixel limit still sees the full size."""
    import io

    from PIL import Image

    from components.convert.items import encode_image
    from components.decoding import UnusableImageError, decode_rgb_image
    from components.imaging import fill_square_pillow

    coarse = np.random.default_rng(7).integers(0, 256, size=(8, 10, 3), dtype=np.uint8)
    photo = Image.fromarray(coarse).resize((2000, 1600), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    photo.save(buffer, format="JPEG", quality=92)
    content = buffer.getvalue()
    assert decode_rgb_image(content, at_least=64).size == (250, 200)
    assert decode_rgb_image(content, at_least=400).size == (500, 400)
    # what encode_image resizes (before its JPEG re-encode) against a full-size decode: within one level
    fast = np.asarray(fill_square_pillow(decode_rgb_image(content, at_least=64), 32), dtype=np.int16)
    full = np.asarray(fill_square_pillow(decode_rgb_image(content), 32), dtype=np.int16)
    assert np.abs(fast - full).max() <= 1
    assert Image.open(io.BytesIO(encode_image(content, 32, 95))).size == (32, 32)
    with pytest.raises(UnusableImageError, match="decompression bomb"):
        encode_image(content, 32, 95, max_pixels=1_000_000)


def test_examples_are_byte_identical_to_tensorflows_own():
    import tensorflow as tf

    from components.schema import serialize_example

    ours = serialize_example(b"\xff\xd8jpeg", 3, "roses", (192, 192), 5)
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\xff\xd8jpeg"])),
        "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
        "label": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"roses"])),
        "size": tf.train.Feature(int64_list=tf.train.Int64List(value=[192, 192])),
        "one_hot_class": tf.train.Feature(float_list=tf.train.FloatList(value=[0, 0, 0, 1, 0])),
    }
    theirs = tf.train.Example(features=tf.train.Features(feature=feature))
    assert ours == theirs.SerializeToString(deterministic=True)
    with_source = serialize_example(b"\xff\xd8jpeg", 3, "roses", (192, 192), 5, source="gs://b/roses/1 é.jpg")
    feature["source"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=["gs://b/roses/1 é.jpg".encode()]))
    theirs = tf.train.Example(features=tf.train.Features(feature=feature))
    assert with_source == theirs.SerializeToString(deterministic=True)


def test_corrupt_and_empty_files_are_quarantined_not_lost(tmp_path):
    source = write_image_folder(tmp_path / "images", per_class=4)
    (tmp_path / "images" / "cat" / "broken.jpg").write_bytes(image_bytes(COLORS["cat"])[:40])
    (tmp_path / "images" / "dog" / "empty.png").write_bytes(b"")
    output = str(tmp_path / "out")
    stats = run(
        ConvertConfig(
            source=source, output_dir=output, image_size=TINY_SIZE, max_bad_fraction=0.5, pipeline_args=IN_MEMORY
        )
    )
    assert stats["quarantined"] == 2
    assert stats["num_examples"] == 12
    with open(os.path.join(output, "quarantine.jsonl")) as handle:
        records = [json.loads(line) for line in handle]
    assert sorted(os.path.basename(r["path"]) for r in records) == ["broken.jpg", "empty.png"]
    assert all(r["reason"] for r in records)


def test_too_many_bad_files_fail_the_job_with_one_line(tmp_path):
    source = write_image_folder(tmp_path / "images", per_class=2)
    (tmp_path / "images" / "cat" / "broken.jpg").write_bytes(b"not an image")
    result = run_cli(
        "components.convert",
        "--source",
        source,
        "--output",
        str(tmp_path / "out"),
        "--image-size",
        "8",
        "--max-bad-fraction",
        "0.01",
        *IN_MEMORY,
    )
    assert result.returncode == 1
    assert "1 of 7 images could not be converted" in result.stdout
    assert "Traceback" not in result.stderr
    # progress: the job's images done (converted or quarantined) / total and the rate
    assert re.search(r"processed 7/7 images \(100%\), \d+ images/s", result.stderr), result.stderr
    # what it wrote is marked failed: no step reads it, and the corrected command takes the folder over
    from components.schema import read_stats

    with open(tmp_path / "out" / "conversion-failed.json") as handle:
        assert json.load(handle)["reason"].startswith("ConversionError: 1 of 7 images could not be converted")
    with pytest.raises(UsageError, match=r"holds a conversion that failed \(ConversionError: 1 of 7 images"):
        read_stats(str(tmp_path / "out"))
    stats = run(
        ConvertConfig(
            source=source, output_dir=str(tmp_path / "out"), image_size=8, max_bad_fraction=0.5, pipeline_args=IN_MEMORY
        )
    )
    assert stats["num_examples"] == 6 and read_stats(str(tmp_path / "out")) == stats
    assert not (tmp_path / "out" / "conversion-failed.json").exists()


def test_listing_orders_classes_skips_hidden_files_and_keeps_every_other_file(tmp_path):
    source = write_image_folder(tmp_path / "images", per_class=2)
    (tmp_path / "images" / "cat" / ".DS_Store").write_bytes(b"junk")
    (tmp_path / "images" / "dog" / "photo").write_bytes(b"no suffix: the conversion reads it to know")
    listing = list_image_folder(source)
    assert listing.class_names == CLASSES
    assert len(listing.items) == 7
    assert [index for _, index, _ in listing.items] == [0, 0, 1, 1, 1, 2, 2]


def test_files_that_are_no_images_by_name_are_recorded_not_counted_as_bad_images(tmp_path, caplog):
    """A class folder's notes.txt or Thumbs.db does not fail a conversion at the default --max-bad-fraction: each
    is left out, recorded in the quarantine file and said; an unreadable image still counts."""
    source = write_image_folder(tmp_path / "images", per_class=3)
    (tmp_path / "images" / "dog" / "notes.txt").write_text("about these dogs")
    (tmp_path / "images" / "cat" / "Thumbs.db").write_bytes(b"\xd0\xcf\x11\xe0")
    caplog.set_level("INFO", logger="components.convert.core")
    output = tmp_path / "out"
    stats = run(ConvertConfig(source=source, output_dir=str(output), image_size=8, pipeline_args=IN_MEMORY))
    assert stats["num_examples"] == 9 and stats["quarantined"] == 2
    with open(output / "quarantine.jsonl") as handle:
        records = sorted((os.path.basename(r["path"]), r["reason"]) for r in map(json.loads, handle))
    left_out = f"not an image file: left out ({IMAGE_FILES})"
    assert records == [("Thumbs.db", left_out), ("notes.txt", left_out)]
    said = [r.getMessage() for r in caplog.records if r.name == "components.convert.core"]
    assert f"found 9 images in 3 classes under {source} (11 files, 2 non-image): cat, dog, fish" in said
    assert any(line.endswith("quarantined 2 (2 of them non-image files), duplicates dropped 0") for line in said), said
    (tmp_path / "images" / "fish" / "broken.jpg").write_bytes(b"not an image")
    with pytest.raises(Exception, match=r"^1 of 10 images could not be converted \(10\.0% > --max-bad-fraction"):
        run(ConvertConfig(source=source, output_dir=str(tmp_path / "again"), image_size=8, pipeline_args=IN_MEMORY))


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("missing", "does not exist"),
        ("empty", "holds no images"),
        ("flat", "has images but no class subfolders"),
        ("file", "is not a folder"),
    ],
)
def test_bad_data_path_is_one_line_exit_2_and_writes_nothing(tmp_path, layout, message):
    source = tmp_path / "data"
    if layout == "empty":
        source.mkdir()
        (source / "cat").mkdir()
    elif layout == "flat":
        source.mkdir()
        (source / "a.jpg").write_bytes(image_bytes((1, 2, 3)))
    elif layout == "file":
        source.write_bytes(b"x")
    output = tmp_path / "out"
    result = run_cli("components.convert", "--source", str(source), "--output", str(output))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: data path ") and str(source) in lines[0] and message in lines[0]
    assert not output.exists()


def test_config_rejects_impossible_fractions():
    with pytest.raises(UsageError, match="--test-fraction"):
        ConvertConfig(source="s", output_dir="o", test_fraction=1.5)
    with pytest.raises(UsageError, match="leave some images for training"):
        ConvertConfig(source="s", output_dir="o", validation_fraction=0.5, test_fraction=0.5)


def test_an_image_size_that_would_take_the_host_down_is_refused_before_any_work(tmp_path, image_folder):
    """The DAG's step takes its size from a parameter, the command line from a flag: both refused, nothing read."""
    from components.convert.__main__ import main as convert

    with pytest.raises(UsageError, match=r"^--image-size 100000 is too large: use 1024 or less, or auto$"):
        ConvertConfig(source="s", output_dir="o", image_size=100000)
    ConvertConfig(source="s", output_dir="o", image_size=1024)  # the largest taken
    with pytest.raises(SystemExit) as exited:
        convert(["--source", image_folder, "--output", str(tmp_path / "out"), "--image-size", "100000"])
    assert exited.value.code == 2 and not (tmp_path / "out").exists()


def test_local_runs_default_to_every_core_and_dataflow_options_pass_through():
    # one process (no worker start-up), whose conversion threads use every core
    assert default_pipeline_args([]) == [
        "--runner=FnApiRunner",
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
    ]
    assert conversion_threads(ConvertConfig(source="photos", output_dir="o")) == os.cpu_count()
    assert conversion_threads(ConvertConfig(source="gs://b/photos", output_dir="o")) == 4 * os.cpu_count()
    assert conversion_threads(ConvertConfig(source="photos", output_dir="o", threads=3)) == 3
    chosen = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    assert default_pipeline_args(chosen) == [*chosen, "--runner=FnApiRunner"]
    dataflow = ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west4"]
    assert default_pipeline_args(dataflow) == dataflow


def test_summarize_counts_fills_missing_classes_with_zero():
    stats = summarize_counts([(("train", 0), 3), (("test", 2), 1)], ["a", "b", "c"])
    assert stats["counts"] == {"train": 3, "validation": 0, "test": 1}
    assert stats["per_class"]["train"] == {"a": 3, "b": 0, "c": 0}
    assert stats["num_examples"] == 4


def test_byte_identical_images_are_kept_once_and_counted(tmp_path):
    source = write_image_folder(tmp_path / "images", per_class=4)
    original = tmp_path / "images" / "cat" / "001.jpg"
    (tmp_path / "images" / "cat" / "copy-of-001.jpg").write_bytes(original.read_bytes())
    (tmp_path / "images" / "dog" / "misfiled-001.jpg").write_bytes(original.read_bytes())
    output = tmp_path / "out"
    stats = run(ConvertConfig(source=source, output_dir=str(output), image_size=8, pipeline_args=IN_MEMORY))
    assert stats["num_examples"] == 12 and stats["duplicates"] == 2 and stats["quarantined"] == 0
    with open(output / "duplicates.jsonl") as handle:
        records = [json.loads(line) for line in handle]
    assert records == [
        {"path": str(tmp_path / "images" / "cat" / "copy-of-001.jpg"), "duplicate_of": str(original)},
        {
            "path": str(tmp_path / "images" / "dog" / "misfiled-001.jpg"),
            "duplicate_of": str(original),
            "label_conflict": True,
        },
    ]
    images = [r["image"] for split in SPLITS for r in read_examples(str(output), split)]
    assert len(images) == len(set(images)) == 12


def shard_contents(output) -> dict[str, list[str]]:
    """{shard file: the sources of its examples, in order}, read with both CRCs of every record checked."""
    from components.schema import bytes_features, read_records

    found = {}
    for path in sorted(glob.glob(f"{output}/*/*")):
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                records = list(read_records(handle))
            found[os.path.relpath(path, output)] = [bytes_features(r, ["source"])["source"].decode() for r in records]
    return found


@pytest.mark.parametrize("named_splits", [False, True], ids=["splits-from-content", "splits-from-a-manifest"])
def test_every_split_is_written_in_its_shards_and_a_rerun_writes_the_same(tmp_path, named_splits):
    """Each split has exactly its shard count, the empty shards too (as Beam's own writer leaves them); each example
    is in one shard, whose records both CRCs check; a rerun puts every example in the same shard; no temporary file
    is left."""
    source = write_image_folder(tmp_path / "images", per_class=8)
    if named_splits:  # the other grouping: copies meet by content first, then each split's examples by shard
        rows = [
            f"{'TEST' if n % 5 == 0 else 'TRAINING'},{source}/{name}/{n:03d}.{'png' if n % 4 == 0 else 'jpg'},{name}"
            for name in CLASSES
            for n in range(8)
        ]
        (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
        source = str(tmp_path / "manifest.csv")
    runs = []
    for name in ("first", "again"):
        output = tmp_path / name
        config = ConvertConfig(
            source=source,
            output_dir=str(output),
            image_size=8,
            num_shards=4,
            validation_fraction=0.0 if named_splits else 0.25,
            pipeline_args=IN_MEMORY,
        )
        stats = run(config)
        assert stats["shards"] == {split: 4 for split in SPLITS}
        contents = shard_contents(output)
        assert sorted(name for name in contents if "/" in name) == sorted(
            f"{split}/{split}-{shard:05d}-of-00004.tfrec" for split in SPLITS for shard in range(4)
        )
        for split in SPLITS:
            sources = [s for name, found in contents.items() if name.startswith(f"{split}/") for s in found]
            assert len(sources) == len(set(sources)) == stats["counts"][split]
        assert sum(map(len, contents.values())) == stats["num_examples"] == 8 * len(CLASSES)
        runs.append({name: set(found) for name, found in contents.items()})
    assert runs[0] == runs[1]
    train = [name for name, found in runs[0].items() if name.startswith("train/") and found]
    assert len(train) > 1, "the examples of a split are spread over its shards"


def test_a_shard_whose_writing_fails_leaves_nothing_behind(tmp_path):
    from components.convert.common import WriteShard

    def records():
        yield 0, 0, b"an example"
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        list(WriteShard(str(tmp_path), {"train": 2}).process((("train", 1), records())))
    assert os.listdir(tmp_path / "train") == []  # neither the shard nor its temporary file


class ReadOnce:
    """A grouping's values that can be read once: on Dataflow a second pass over a large group reads the shuffle
    again."""

    def __init__(self, values):
        self.values, self.reads = values, 0

    def __iter__(self):
        self.reads += 1
        assert self.reads == 1, "the shard's examples were read twice"
        return iter(self.values)


def test_copies_meeting_in_a_shard_keep_the_first_path_whatever_order_they_come_in_read_once(tmp_path):
    from components.convert.common import DUPLICATE_TAG, WriteUniqueShard
    from components.schema import read_records

    one, other = b"d" * 32, b"e" * 32
    pairs = [
        (one, ("b/2.jpg", 1, None, b"example of b/2", b"k" * 32)),
        (other, ("c/9.jpg", 2, None, b"example of c/9", b"k" * 32)),
        (one, ("a/1.jpg", 0, None, b"example of a/1", b"k" * 32)),
        (one, ("a/3.jpg", 0, None, b"example of a/3", b"k" * 32)),
    ]
    out = list(WriteUniqueShard(str(tmp_path), {"test": 1}).process((("test", 0), ReadOnce(pairs))))
    duplicates = sorted((o.value for o in out if getattr(o, "tag", None) == DUPLICATE_TAG), key=lambda r: r["path"])
    assert duplicates == [
        {"path": "a/3.jpg", "duplicate_of": "a/1.jpg"},
        {"path": "b/2.jpg", "duplicate_of": "a/1.jpg", "label_conflict": True},
    ]
    assert [o for o in out if getattr(o, "tag", None) is None] == [("test", 0, {0: 1, 2: 1})]
    with open(tmp_path / "test" / "test-00000-of-00001.tfrec", "rb") as handle:
        assert sorted(read_records(handle)) == [b"example of a/1", b"example of c/9"]


def test_dataflow_options_reach_beam_without_launching_a_job():
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions, WorkerOptions

    from components.convert.__main__ import build_parser
    from components.convert.core import pipeline_options

    argv = [
        "--source",
        "gs://bucket/flower_photos",
        "--output",
        "gs://bucket/tfrec",
        "--runner",
        "DataflowRunner",
        "--project",
        "my-project",
        "--region",
        "europe-west4",
        "--temp_location",
        "gs://bucket/tmp",
        "--sdk_container_image",
        "europe-docker.pkg.dev/p/r/pipeline:1",
        "--max_num_workers",
        "20",
    ]
    args, beam_args = build_parser().parse_known_args(argv)
    options = pipeline_options(
        ConvertConfig(source=args.source, output_dir=args.output_dir, pipeline_args=tuple(beam_args))
    )
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("my-project", "europe-west4", "gs://bucket/tmp")
    workers = options.view_as(WorkerOptions)
    assert workers.sdk_container_image == "europe-docker.pkg.dev/p/r/pipeline:1"
    assert workers.max_num_workers == 20
    assert not any("direct" in arg for arg in options.get_all_options(drop_default=True))


def test_csv_manifest_honours_ml_use_and_quarantines_bad_rows(tmp_path, caplog):
    images = tmp_path / "bucket"
    images.mkdir()
    rows = []
    for n in range(9):
        name = CLASSES[n % 3]
        (images / f"{name}{n}.png").write_bytes(image_bytes(COLORS[name], (20 + n, 20), "PNG", seed=n))
        ml_use = ("training", "validation", "test")[n // 3]
        path = f"bucket/{name}{n}.png" if n % 2 else str(images / f"{name}{n}.png")  # relative and absolute
        rows.append(f"{ml_use},{path},{name}")
    rows += [
        "bucket/cat9.png,cat",  # no ML_USE: the content hash decides (the file is missing, though)
        "training,bucket/cat0.png,",  # empty label
        "training,bucket/cat0.png,hamster",  # not one of --classes
        "sometimes,bucket/cat0.png,cat",  # unknown ML_USE
        "a,b,c,d",  # malformed
    ]
    manifest = tmp_path / "import.csv"
    manifest.write_text("\n".join(rows) + "\n")
    output = tmp_path / "out"
    caplog.set_level("INFO", logger="components.convert.core")
    stats = run(
        ConvertConfig(
            source=str(manifest),
            output_dir=str(output),
            image_size=8,
            classes=CLASSES,
            max_bad_fraction=0.5,
            pipeline_args=IN_MEMORY,
        )
    )
    # the lines agree: 14 rows, 10 of them images (one file missing), 9 converted, 4 + 1 quarantined
    said = [r.getMessage() for r in caplog.records if r.name == "components.convert.core"]
    assert f"found 10 images in 3 classes under {manifest} (14 rows, 4 unusable): cat, dog, fish" in said
    assert any(line.startswith("processed 10/10 images (100%)") for line in said), said
    assert any(
        line.startswith("converted 9 images in ")
        and line.endswith(
            ": train 3, validation 3, test 3; quarantined 5 (4 of them unusable rows), duplicates dropped 0"
        )
        for line in said
    ), said
    assert stats["counts"] == {"train": 3, "validation": 3, "test": 3}
    assert stats["class_names"] == list(CLASSES)
    assert stats["quarantined"] == 5
    with open(output / "quarantine.jsonl") as handle:
        reasons = sorted(json.loads(line)["reason"] for line in handle)
    assert reasons[0] == "malformed row: 4 columns, expected [ML_USE,]URI,LABEL"
    assert reasons[1] == "missing file"
    assert reasons[2] == "unknown ML_USE 'sometimes': use training, validation or test"
    assert reasons[3] == "unknown label 'hamster': not one of --classes"
    assert reasons[4] == "unknown label: the label column is empty"


def test_a_manifest_lists_each_row_where_it_points_and_records_each_unusable_row_by_line(tmp_path, monkeypatch):
    """The manifest read alone (no conversion): each usable row's path (relative ones against the manifest's folder,
    "." for a manifest named without one), class index and split; each unusable row's record naming its line (or
    its file); the classes sorted unless given; the files' total size; a fingerprint of the files and the manifest."""
    from components.convert.listing import list_manifest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bucket").mkdir()
    sizes = {}
    for name, size in (("b.png", 11), ("a.png", 7), ("c.png", 5)):
        (tmp_path / "bucket" / name).write_bytes(b"x" * size)
        sizes[name] = size
    text = (
        "\ufeff"
        + "\n".join(
            [
                "TEST,bucket/b.png,dog",  # line 1, behind a byte-order mark; ML_USE in capitals
                "",  # line 2: blank lines are skipped, not the end
                "a,b,c,d",  # line 3
                "sometimes,bucket/a.png,cat",  # line 4
                "training,bucket/a.png,",  # line 5: the file is named, not the line
                "training,,",  # line 6: no file either: the line
                f"validation,{tmp_path}/bucket/a.png,cat",  # line 7: an absolute path as it is
                "bucket/c.png,ant",  # line 8: no ML_USE, the bytes decide the split
                "training,bucket/c.png,bee",  # line 9: the same image again, another label (bee: no class of its own)
                "bucket/b.png,dog",  # line 10: the same row again
            ]
        )
        + "\n"
    )
    (tmp_path / "import.csv").write_text(text, encoding="utf-8")
    listing = list_manifest("import.csv")
    assert listing.class_names == ("ant", "cat", "dog")
    assert listing.items == (
        ("./bucket/b.png", 2, "test"),
        (f"{tmp_path}/bucket/a.png", 1, "validation"),
        ("./bucket/c.png", 0, ""),
    )
    assert listing.rejected == (
        {"path": "import.csv:3", "reason": "malformed row: 4 columns, expected [ML_USE,]URI,LABEL"},
        {"path": "import.csv:4", "reason": "unknown ML_USE 'sometimes': use training, validation or test"},
        {"path": "bucket/a.png", "reason": "unknown label: the label column is empty"},
        {"path": "import.csv:6", "reason": "unknown label: the label column is empty"},
        {
            "path": "import.csv:9",
            "reason": "bucket/c.png is listed again with another label ('bee', not 'ant'): its row 8 is kept",
        },
        {"path": "import.csv:10", "reason": "bucket/b.png is listed again: its row 1 is kept"},
    )
    assert listing.total_bytes == 11 + 7 + 5
    assert re.fullmatch("[0-9a-f]{64}", listing.fingerprint)
    # given classes fix the order and refuse the others; another manifest over the same files is another source
    given = list_manifest(str(tmp_path / "import.csv"), classes=("dog", "cat"))
    assert given.class_names == ("dog", "cat")
    assert [(os.path.basename(path), index) for path, index, _ in given.items] == [("b.png", 0), ("a.png", 1)]
    assert {"path": "bucket/c.png", "reason": "unknown label 'ant': not one of --classes"} in given.rejected
    (tmp_path / "again.csv").write_text(text.replace("TEST,", "test,"), encoding="utf-8")
    assert list_manifest("again.csv").items == listing.items
    assert list_manifest("again.csv").fingerprint != listing.fingerprint
    for manifest, message in (
        ("nope.csv", "manifest nope.csv does not exist: pass a CSV file of [ML_USE,]IMAGE_URI,LABEL rows"),
        ("again.csv.empty", "manifest again.csv.empty has no usable rows: expected [ML_USE,]IMAGE_URI,LABEL lines"),
    ):
        if manifest.endswith(".empty"):
            (tmp_path / manifest).write_text("\n,,\nx,y,\n", encoding="utf-8")
        with pytest.raises(UsageError) as raised:
            list_manifest(manifest)
        assert str(raised.value) == message


@pytest.mark.parametrize("header", ["image_uri,label", "ML_USE,GCS_PATH,LABEL", " path , class "])
def test_a_manifests_header_row_is_read_as_one_and_said(tmp_path, caplog, header):
    """A first row of column names (the paths' cell neither a path nor a file name) is a header: no class named
    "label", no missing file "image_uri"; the log says it. The same row further down is a row like any other."""
    from components.convert.listing import list_manifest

    (tmp_path / "a.png").write_bytes(b"x")
    columns = header.count(",") + 1
    row = "training,a.png,cat" if columns == 3 else "a.png,cat"
    (tmp_path / "import.csv").write_text(f"\n{header}\n{row}\n{header}\n")
    caplog.set_level("INFO", logger="components.convert.listing")
    listing = list_manifest(str(tmp_path / "import.csv"))
    cells = [cell.strip() for cell in header.split(",")]
    assert listing.items[0] == (f"{tmp_path}/a.png", 0, "train" if columns == 3 else "")
    if columns == 3:  # (further down, an unknown ML_USE)
        assert listing.class_names == ("cat",) and len(listing.items) == 1
        assert listing.rejected[0]["path"] == f"{tmp_path}/import.csv:4"
    else:  # (further down, a missing file of class "class")
        assert listing.class_names == ("cat", cells[-1]) and len(listing.items) == 2
    said = [r.getMessage() for r in caplog.records if r.name == "components.convert.listing"]
    assert said == [f"manifest {tmp_path}/import.csv: its line 2 ({','.join(cells)}) read as a header"]


def test_a_manifest_and_an_array_file_on_gcs_are_listed_where_they_point(gcs):
    """A manifest on Cloud Storage (the emulator): gs:// URIs as they are, relative ones against its folder;
    neither it nor an array file there is looked for on the local disk. (Here, beside the local listing, rather than
    in test_convert_gcs.py: make mutants runs this file.)"""
    import io

    import numpy as np

    from components.convert.listing import list_image_folder, list_manifest, list_npz

    for path in ("photos/a.png", "lists/b.png"):
        gcs.blob(path).upload_from_string(b"x" * 9)
    gcs.blob("lists/import.csv").upload_from_string(f"training,gs://{BUCKET}/photos/a.png,cat\ntest,b.png,dog\n")
    listing = list_manifest(f"gs://{BUCKET}/lists/import.csv")
    assert listing.items == ((f"gs://{BUCKET}/photos/a.png", 0, "train"), (f"gs://{BUCKET}/lists/b.png", 1, "test"))
    assert listing.total_bytes == 18
    buffer = io.BytesIO()
    np.savez(buffer, x=np.zeros((2, 4, 4), np.uint8), y=np.array([1, 0]))
    gcs.blob("arrays/digits.npz").upload_from_string(buffer.getvalue())
    gcs.blob("folder/cat/a.jpg").upload_from_string(b"x")
    for placeholder in ("folder/", "folder/cat/", "folder/cat/empty/"):  # as the Cloud Console's "Create folder"
        gcs.blob(placeholder).upload_from_string(b"")
    assert list_image_folder(f"gs://{BUCKET}/folder").items == ((f"gs://{BUCKET}/folder/cat/a.jpg", 0, ""),)
    arrays = list_npz(f"gs://{BUCKET}/arrays/digits.npz")
    assert arrays.class_names == ("0", "1")
    assert arrays.items == (
        (f"gs://{BUCKET}/arrays/digits.npz#0", 1, ""),
        (f"gs://{BUCKET}/arrays/digits.npz#1", 0, ""),
    )


def test_an_image_folder_is_listed_file_by_file_under_its_class_and_each_wrong_layout_named(tmp_path):
    """The listing alone, on a root typed with a trailing slash: each file under its class folder (hidden ones and
    hidden folders left out), its class index, the total size; then each wrong layout's own one line."""
    from components.convert.listing import list_image_folder

    root = tmp_path / "photosX"  # (a name ending in X, and a file named X: the strip takes "/" alone)
    for name, size in (
        ("dog/b.jpg", 5),
        ("cat/a.jpg", 3),
        ("cat/notes.txt", 2),
        ("dog/Thumbs.db", 4),
        ("dog/c.jfif", 6),  # (a JPEG, as browsers save some: a suffix Python's table does not know is read)
        ("cat/.DS_Store", 7),
        (".thumbnails/x.jpg", 11),
        ("dog/X", 1),
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * size)
    listing = list_image_folder(f"{root}/")
    assert listing.class_names == ("cat", "dog")
    # a file that may be an image is an item (by its content: a name without a suffix too); one whose suffix names
    # another type is left out, recorded
    assert listing.items == (
        (f"{root}/cat/a.jpg", 0, ""),
        (f"{root}/dog/X", 1, ""),
        (f"{root}/dog/b.jpg", 1, ""),
        (f"{root}/dog/c.jfif", 1, ""),
    )
    assert listing.others == (
        {"path": f"{root}/cat/notes.txt", "reason": f"not an image file: left out ({IMAGE_FILES})"},
        {"path": f"{root}/dog/Thumbs.db", "reason": f"not an image file: left out ({IMAGE_FILES})"},
    )
    assert listing.total_bytes == 3 + 1 + 5 + 6 and re.fullmatch("[0-9a-f]{64}", listing.fingerprint)
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.jpg").write_bytes(b"x")
    for path, message in (
        (tmp_path / "nope", "does not exist: pass a folder of class subfolders of images"),
        (tmp_path / "file.jpg", "is not a folder: expected <root>/<class_name>/*.jpg"),
        (tmp_path / "flat", "has images but no class subfolders: expected <root>/<class_name>/*.jpg"),
        (tmp_path / "empty", "holds no images: expected <root>/<class_name>/*.jpg"),
    ):
        with pytest.raises(UsageError) as raised:
            list_image_folder(str(path))
        assert str(raised.value) == f"data path {path} {message}"


def test_hidden_files_and_folders_are_told_by_their_own_name():
    from components.convert.listing import is_hidden

    assert is_hidden("/data/.git/") and is_hidden("gs://b/photos/cat/.DS_Store") and is_hidden(".hidden")
    assert not is_hidden("/data/.git/cat/a.jpg") and not is_hidden("/data/photos/") and not is_hidden("a.b")
    assert not is_hidden("/data/.cache/X")  # the name is X, whatever its folder


def test_an_array_files_classes_index_its_labels_or_the_labels_are_refused(tmp_path):
    from components.convert.listing import list_npz

    source = tmp_path / "rgba.npz"
    np.savez(source, x=np.zeros((3, 6, 4, 4), np.uint8), y=np.array([[2], [0], [2]]))  # RGBA, y as (N, 1)
    listing = list_npz(str(source), classes=("a", "b", "c"))
    assert listing.class_names == ("a", "b", "c") and [index for _, index, _ in listing.items] == [2, 0, 2]
    assert list_source(str(source), classes=("a", "b", "c")).class_names == ("a", "b", "c")  # as convert lists it
    assert [path for path, _, _ in listing.items] == [f"{source}#0", f"{source}#1", f"{source}#2"]
    assert (listing.total_bytes, listing.shorter_side) == (3 * 6 * 4 * 4, 4)
    assert re.fullmatch("[0-9a-f]{64}", listing.fingerprint)
    gray = tmp_path / "gray.npz"
    np.savez(gray, x=np.zeros((2, 5, 7, 1), np.uint8), y=np.array([7, 3]))  # no names: the label values, in order
    listing = list_npz(str(gray))
    assert listing.class_names == ("3", "7") and [index for _, index, _ in listing.items] == [1, 0]
    assert listing.shorter_side == 5
    for name, labels, classes in (("high", [0, 1, 3], ("a", "b", "c")), ("low", [-1, 0, 1], ("a", "b"))):
        wrong = tmp_path / f"{name}.npz"
        np.savez(wrong, x=np.zeros((3, 5, 7), np.uint8), y=np.array(labels))
        with pytest.raises(UsageError) as raised:
            list_npz(str(wrong), classes=classes)
        assert str(raised.value) == (
            f"array file {wrong}: labels {min(labels)}..{max(labels)} do not index {len(classes)} classes"
        )


NPZ = "expected arrays x (N,H,W[,C]) uint8 and y (N,) integer labels"


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (None, "does not exist: pass a .npz with arrays x (N,H,W[,C]) uint8 and y (N,) integer labels"),
        ("a folder", "does not exist: pass a .npz with arrays x (N,H,W[,C]) uint8 and y (N,) integer labels"),
        (b"PK\x03\x04 cut short", "cannot be read as .npz (BadZipFile: File is not a zip file): " + NPZ),
        ({"y": np.zeros(2, np.int64)}, "has no x array: " + NPZ),
        ({"z": np.zeros(2, np.int64)}, "has no x or y array: " + NPZ),
        ({"x": np.zeros((2, 4, 4, 3), np.float32), "y": np.zeros(2, np.int64)}, "x is float32 (2, 4, 4, 3), " + NPZ),
        ({"x": np.zeros((2, 4, 4, 2), np.uint8), "y": np.zeros(2, np.int64)}, "x is uint8 (2, 4, 4, 2), " + NPZ),
        ({"x": np.zeros((2, 4, 4, 3, 1), np.uint8), "y": np.zeros(2, np.int64)}, "x is uint8 (2, 4, 4, 3, 1), " + NPZ),
        ({"x": np.zeros((2, 4), np.uint8), "y": np.zeros(2, np.int64)}, "x is uint8 (2, 4), " + NPZ),
        ({"x": np.zeros((2, 4, 4), np.uint8), "y": np.zeros((3, 1), np.int64)}, "y is int64 (3,) for 2 images, " + NPZ),
        ({"x": np.zeros((2, 4, 4), np.uint8), "y": np.zeros(2, np.float32)}, "y is float32 (2,) for 2 images, " + NPZ),
    ],
)
def test_each_way_an_array_file_is_wrong_is_named_in_one_line(tmp_path, arrays, message):
    from components.convert.listing import list_npz

    source = tmp_path / "data.npz"
    if isinstance(arrays, dict):
        np.savez(source, **arrays)
    elif arrays == "a folder":  # (named data.npz: no file is there to read)
        source.mkdir()
    elif arrays is not None:
        source.write_bytes(arrays)
    with pytest.raises(UsageError) as raised:
        list_npz(str(source))
    assert str(raised.value) == f"array file {source}" + (": " if message.startswith(("x ", "y ")) else " ") + message


def test_classes_fix_the_index_order_and_refuse_unknown_folders(tmp_path):
    source = write_image_folder(tmp_path / "images", per_class=2)
    listing = list_source(source, classes=("fish", "dog", "cat"))
    assert listing.class_names == ("fish", "dog", "cat")
    assert [index for _, index, _ in listing.items] == [2, 2, 1, 1, 0, 0]
    # each image keeps its own path, under its folder's new index
    folders = [os.path.basename(os.path.dirname(path)) for path, _, _ in listing.items]
    assert folders == ["cat", "cat", "dog", "dog", "fish", "fish"]
    with pytest.raises(UsageError) as raised:
        list_source(source, classes=("cat",))
    assert str(raised.value) == f"data path {source} has class folders not in --classes: dog, fish"


@pytest.mark.parametrize("modality", ["image", "text"])
def test_a_class_named_in_classes_that_the_source_lacks_is_one_line_before_anything_is_written(tmp_path, modality):
    """(It converted with a warning, trained an output it never saw, and was refused at the gate.)"""
    if modality == "image":
        source, given = write_image_folder(tmp_path / "images", per_class=2), "cat,dog,zebra,fish,yak"
    else:
        source, given = str(tmp_path / "texts"), "pos,neg,meh"
        for label in ("pos", "neg"):
            (tmp_path / "texts" / label).mkdir(parents=True)
            (tmp_path / "texts" / label / "1.txt").write_text(f"a {label} text")
    output = tmp_path / "out"
    result = run_cli("components.convert", "--source", str(source), "--output", str(output), "--classes", given)
    assert result.returncode == 2, result.stderr
    missing = (
        "zebra, yak, named in --classes: add their examples, or leave them"
        if modality == "image"
        else ("meh, named in --classes: add its examples, or leave it")
    )
    assert result.stderr.strip().splitlines() == [
        f"error: data path {source} has no example of {missing} out of --classes"
    ]
    assert not output.exists()


def test_missing_manifest_is_one_line_exit_2(tmp_path):
    result = run_cli("components.convert", "--source", str(tmp_path / "nope.csv"), "--output", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: manifest {tmp_path / 'nope.csv'} does not exist: pass a CSV file of [ML_USE,]IMAGE_URI,LABEL rows"
    ]


def test_numpy_arrays_convert_like_keras_datasets_gives_them(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    labels = np.array([0, 1, 2] * 10, dtype=np.int64).reshape(-1, 1)  # CIFAR's y is (N, 1)
    colors = np.array([COLORS[name] for name in CLASSES], dtype=np.uint8)
    pixels = np.clip(colors[labels[:, 0]][:, None, None, :] + rng.integers(-20, 20, (30, 12, 12, 3)), 0, 255)
    source = tmp_path / "cifar-like.npz"
    np.savez(source, x=pixels.astype(np.uint8), y=labels, class_names=np.array(CLASSES))
    output = tmp_path / "out"
    stats = run(ConvertConfig(source=str(source), output_dir=str(output), image_size=8, pipeline_args=IN_MEMORY))
    assert stats["num_examples"] == 30 and stats["class_names"] == list(CLASSES) and stats["quarantined"] == 0
    import tensorflow as tf

    for record in read_examples(str(output), "train"):
        mean = tf.io.decode_jpeg(record["image"]).numpy().reshape(-1, 3).mean(axis=0)
        assert np.abs(mean - COLORS[record["label"].decode()]).max() < 30

    gray = tmp_path / "digits.npz"
    np.savez(gray, x=np.zeros((4, 8, 8), np.uint8), y=np.array([3, 5, 3, 5]))
    assert list_source(str(gray)).class_names == ("3", "5")


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x": "uint8"}, "has no y array"),
        ({"x": "float32", "y": "int"}, "x is float32"),
    ],
)
def test_npz_without_the_expected_arrays_is_one_line_exit_2(tmp_path, arrays, message):
    import numpy as np

    source = tmp_path / "data.npz"
    values = {"x": np.zeros((2, 4, 4, 3), dtype=arrays["x"])}
    if "y" in arrays:
        values["y"] = np.array([0, 1])
    np.savez(source, **values)
    result = run_cli("components.convert", "--source", str(source), "--output", str(tmp_path / "o"))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: array file {source}") and message in line
    assert "expected arrays x (N,H,W[,C]) uint8 and y (N,) integer labels" in line


def test_converting_into_a_folder_that_holds_an_earlier_conversion_is_refused(converted, image_folder, tmp_path):
    """Its shards would mix with the new ones (stats.json counting one dataset, the readers reading both)."""
    examples_dir, stats = converted
    before = sorted(os.listdir(examples_dir))
    with pytest.raises(UsageError, match=f"--output {examples_dir} already holds files .*pass a new or empty folder"):
        run(ConvertConfig(source=image_folder, output_dir=examples_dir, image_size=8))
    assert sorted(os.listdir(examples_dir)) == before
    with open(os.path.join(examples_dir, "stats.json")) as handle:
        assert json.load(handle)["image_size"] == stats["image_size"]


def test_a_single_class_is_refused_and_small_classes_are_listed(tmp_path, converted):
    """One class would train to "accuracy 1.0" and be blessed, saying nothing. Classes with few examples in a split
    are listed (their figures say little)."""
    from components.schema import SMALL_CLASS_EXAMPLES

    write_image_folder(tmp_path / "one", per_class=3)
    for name in ("dog", "fish"):
        shutil.rmtree(tmp_path / "one" / name)
    with pytest.raises(UsageError, match=r"has one class \(cat\): a classifier needs at least 2 classes"):
        run(ConvertConfig(source=str(tmp_path / "one"), output_dir=str(tmp_path / "out")))
    _, stats = converted
    expected = {
        split: {name: count for name, count in counts.items() if count < SMALL_CLASS_EXAMPLES}
        for split, counts in stats["per_class"].items()
    }
    assert stats["small_classes"] == {split: names for split, names in expected.items() if names}
    assert stats["small_classes"], "the tiny fixture has classes with few validation or test images"


def test_image_size_auto_takes_the_sources_typical_size_within_bounds():
    from components.convert.sizing import auto_image_size

    assert auto_image_size(32)[0] == 32  # the demo digits
    assert auto_image_size(375)[0] == 192  # a 500x375 photo: the codelab's size at most
    assert auto_image_size(8)[0] == 16  # what the codelab convnet, the most demanding, still takes
    size, why = auto_image_size(None)
    assert size == 192 and "no image size could be read" in why


def test_image_size_auto_converts_at_the_median_shorter_side_and_says_so(image_folder, tmp_path):
    """The tiny folder's images are 40 to 173 wide and 30 to 40 high: auto converts at their median height."""
    import glob
    import statistics

    from PIL import Image

    from components.convert.core import ConvertConfig, run

    sides = [min(Image.open(path).size) for path in glob.glob(f"{image_folder}/*/*")]
    stats = run(ConvertConfig(source=image_folder, output_dir=str(tmp_path / "out"), pipeline_args=IN_MEMORY))
    assert stats["image_size"] == int(statistics.median(sides)) == stats["source_image_size"]
    assert f"median shorter side is {stats['image_size']} px" in stats["image_size_auto"]
    with open(tmp_path / "out" / "stats.json") as handle:
        assert json.load(handle)["image_size_auto"] == stats["image_size_auto"]
    given = run(
        ConvertConfig(source=image_folder, output_dir=str(tmp_path / "given"), image_size=24, pipeline_args=IN_MEMORY)
    )
    assert given.image_size == 24 and given.image_size_auto is None
    # the source's size, for the train step's advice: the median of every image converted, not of a sample
    assert given["source_image_size"] == int(statistics.median(sides))


def test_a_new_artifact_format_changes_the_sources_fingerprint(tmp_path, monkeypatch):
    """The fingerprint is the conversion's cache key in the DAG: after an upgrade that changes what an artifact holds
    (here the model's config), the same files are converted and trained again instead of a cached artifact being
    handed to a step that refuses it."""
    import dataclasses

    from components.artifacts import records
    from components.convert.fingerprint import fingerprint_source

    source = write_image_folder(tmp_path / "photos", per_class=2)
    before = fingerprint_source(source)
    assert fingerprint_source(source) == before  # the same files, the same format: the same key
    newer = dataclasses.replace(records.MODEL_CONFIG, version=records.MODEL_CONFIG.version + 1)
    monkeypatch.setattr(records, "RECORDS", tuple(newer if r is records.MODEL_CONFIG else r for r in records.RECORDS))
    assert fingerprint_source(source) != before


def test_a_manifest_that_names_no_file_that_exists_is_one_line_before_converting(tmp_path):
    """A CSV of texts under columns of its own (``review,sentiment``), which ``--modality auto`` takes for an image
    manifest, or a manifest moved away from its images: every row would be quarantined as a missing file after the
    whole conversion. It is refused at once, naming the first row's path and both ways out (its header read as one,
    its first review, with commas, as a malformed row)."""
    from components.convert.listing import list_manifest

    review = "A long and lovely film, with a plot I did not see coming at all, and a cast to match it"
    (tmp_path / "reviews.csv").write_text(f"review,sentiment\n{review},pos\nDull.,neg\n", encoding="utf-8")
    with pytest.raises(UsageError) as raised:
        list_manifest(str(tmp_path / "reviews.csv"))
    assert str(raised.value) == (
        f"manifest {tmp_path}/reviews.csv names no image file that exists (2 rows; the first: 'Dull.'): list "
        "images by paths relative to its folder or gs:// URIs, or, for a CSV of texts, pass --modality text with "
        "--text-column and --label-column"
    )
