"""Export checks what clients send (issue 27): the test accuracy of the SavedModel on the raw source files of the test
split, beside the TFRecords', on data where a decoder that differs from the conversion's gets the wrong answer:
transparent PNGs (a dark bar on a transparent background whose hidden colour is black) and phone photos (JPEGs
stored turned a quarter, with EXIF orientation 6), the class being the bar's direction."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from tests.conftest import IN_MEMORY


def bar(horizontal: bool, rng) -> np.ndarray:
    """A 40x40 mask of a dark bar, horizontal or vertical, at a random place."""
    mask = np.zeros((40, 40), bool)
    at, start = rng.integers(6, 30), rng.integers(0, 12)
    if horizontal:
        mask[at : at + 6, start : start + 28] = True
    else:
        mask[start : start + 28, at : at + 6] = True
    return mask


def write_bars(root, per_class: int = 40) -> str:
    from PIL import Image

    rng = np.random.default_rng(3)
    for name in ("horizontal", "vertical"):
        os.makedirs(root / name)
        for index in range(per_class):
            mask = bar(name == "horizontal", rng)
            if index % 2:  # a transparent PNG: the bar opaque, the rest transparent black
                rgba = np.zeros((40, 40, 4), np.uint8)
                rgba[mask] = (30, 30, 30, 255)
                Image.fromarray(rgba).save(root / name / f"{index:03d}.png")
            else:  # a phone photo: the pixels stored turned, EXIF orientation 6 turns them back
                upright = np.full((40, 40, 3), 235, np.uint8)
                upright[mask] = 30
                exif = Image.Exif()
                exif[0x0112] = 6
                stored = Image.fromarray(np.ascontiguousarray(np.rot90(upright, 1)))
                buffer = io.BytesIO()
                stored.save(buffer, format="JPEG", quality=95, exif=exif.tobytes())
                (root / name / f"{index:03d}.jpg").write_bytes(buffer.getvalue())
    return str(root)


@pytest.fixture(scope="module")
def bars_exported(tmp_path_factory):
    from components.convert.core import ConvertConfig
    from components.convert.core import run as convert
    from components.export.core import ExportConfig
    from components.export.core import run as export
    from components.train.config import TrainConfig
    from components.train.core import run as train

    root = tmp_path_factory.mktemp("bars")
    source = write_bars(root / "source")
    examples, model, output = str(root / "examples"), str(root / "model"), str(root / "export")
    convert(
        ConvertConfig(
            source=source,
            output_dir=examples,
            image_size=16,
            validation_fraction=0.15,
            test_fraction=0.25,
            pipeline_args=IN_MEMORY,
        )
    )
    train(
        TrainConfig(
            examples_dir=examples,
            model_dir=model,
            epochs=12,
            per_replica_batch_size=8,
            precision="float32",
            backend="tensorflow",
        )
    )
    return output, export(ExportConfig(model_dir=model, examples_dir=examples, output_dir=output))


def test_the_saved_model_scores_on_the_files_clients_send_what_it_scores_on_the_tfrecords(bars_exported):
    output, report = bars_exported
    raw = report["raw_files"]
    assert raw["num_files"] >= 10 and raw["without_file"] == 0 and raw["refused_formats"] == {}
    assert raw["tfrecord_test_accuracy"] >= 0.9  # the bars are learned
    # the TFRecords hold re-encoded JPEGs of the files: the answers may differ on a borderline file, by 1 point at most
    assert abs(raw["test_accuracy"] - raw["tfrecord_test_accuracy"]) <= 0.01
    with open(os.path.join(output, "export.json")) as handle:
        written = json.load(handle)
    assert written["raw_files"] == raw
    assert written["decoding"]["alpha_background"] == "white" and written["decoding"]["exif_orientation"] == "applied"


def test_a_serving_graph_that_decodes_otherwise_fails_the_export_in_one_line(bars_exported, tmp_path):
    """The check itself: the same model served by a graph that drops alpha and ignores EXIF (TensorFlow's plain
    ``decode_image``, as the export did before) scores far below its TFRecords, and the export says so."""
    import keras
    import tensorflow as tf

    from components.cli import UsageError
    from components.export.common import build_cpu_model, write_archive
    from components.export.image import check_raw_file_accuracy, raw_file_accuracy
    from components.imaging import fill_square

    output, report = bars_exported
    examples = os.path.dirname(os.path.dirname(report["raw_files"]["first_disagreeing_file"] or output))
    model, config = build_cpu_model(os.path.join(os.path.dirname(output), "model"))

    def plain(image_bytes):
        def decode(encoded):
            image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
            image.set_shape([None, None, 3])
            return fill_square(image, 16)

        images = tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec([16, 16, 3], tf.uint8))
        probabilities = model(images)
        return {"class_id": tf.argmax(probabilities, -1)}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", plain, input_signature=[tf.TensorSpec([None], tf.string)])
    write_archive(archive, str(tmp_path / "plain"))
    examples = os.path.join(os.path.dirname(output), "examples")
    raw = raw_file_accuracy(str(tmp_path / "plain"), examples, config)
    assert raw["test_accuracy"] < raw["tfrecord_test_accuracy"] - 0.2
    with pytest.raises(UsageError) as raised:
        check_raw_file_accuracy(raw)
    message = str(raised.value)
    assert "\n" not in message and raw["first_disagreeing_file"] in message
    assert raw["first_disagreeing_file"].startswith(os.path.dirname(output))


def test_phone_photos_score_as_their_upright_twins(bars_exported):
    """Every test image saved twice as JPEG: upright, and as a phone saves it (the pixels turned, EXIF orientation
    6). The SavedModel gives the twins the same accuracy."""
    import glob

    import tensorflow as tf
    from PIL import Image

    from components.decoding import decode_rgb_image

    output, _ = bars_exported
    serving = tf.saved_model.load(os.path.join(output, "saved_model")).signatures["serving_default"]
    paths = sorted(glob.glob(os.path.join(os.path.dirname(output), "source", "*", "*")))
    exif = Image.Exif()
    exif[0x0112] = 6
    upright, phone, truth = [], [], []
    for path in paths:
        pixels = np.asarray(decode_rgb_image(open(path, "rb").read()))  # noqa: SIM115
        for twins, stored, options in ((upright, pixels, {}), (phone, np.rot90(pixels, 1), {"exif": exif.tobytes()})):
            buffer = io.BytesIO()
            Image.fromarray(np.ascontiguousarray(stored)).save(buffer, format="JPEG", quality=95, **options)
            twins.append(buffer.getvalue())
        truth.append(os.path.basename(os.path.dirname(path)))
    labels = {
        name: [label.decode() for label in serving(image_bytes=tf.constant(twins))["label"].numpy()]
        for name, twins in (("upright", upright), ("phone", phone))
    }
    accuracy = {name: np.mean(np.array(answers) == np.array(truth)) for name, answers in labels.items()}
    assert accuracy["upright"] >= 0.9
    assert abs(accuracy["phone"] - accuracy["upright"]) <= 0.01


def test_a_gap_fails_the_export_only_past_2_files_and_past_what_chance_flips_give_either_way():
    """The TFRecords hold re-encoded JPEGs, so borderline files flip either way: a difference fails only where the
    files right only one way outnumber those right only the other by more than 2 and by more than 3 standard
    deviations of a fair coin's tosses (McNemar's test), whichever way."""
    from components.cli import UsageError
    from components.export.image import check_raw_file_accuracy

    def raw(sent: int, recorded: int, files: int = 250) -> dict:
        return {
            "num_files": files,
            "test_accuracy": (150 + sent) / files,
            "tfrecord_test_accuracy": (150 + recorded) / files,
            "right_only_as_sent": sent,
            "right_only_from_tfrecords": recorded,
            "first_disagreeing_file": "gs://b/cats/IMG#1.jpg",
        }

    check_raw_file_accuracy(raw(0, 2))  # 2 files apart
    check_raw_file_accuracy(raw(12, 5))  # the files as sent 7 better: 7 against 3 x sqrt(17) = 12.4, chance
    check_raw_file_accuracy(raw(0, 5))  # 5 against 3 x sqrt(5) = 6.7
    check_raw_file_accuracy(raw(20, 5))  # 15 against 3 x sqrt(25) = 15: not past it
    for sent, recorded in ((21, 5), (5, 21), (0, 10), (3, 40)):  # 16 > 15.3, 16 > 15.3, 10 > 9.5, 37 > 19.2
        with pytest.raises(UsageError, match=r"first file answered otherwise is gs://b/cats/IMG#1\.jpg"):
            check_raw_file_accuracy(raw(sent, recorded))
    check_raw_file_accuracy({"num_files": 0})  # nothing to score: an array source


def test_a_savedmodel_without_its_export_record_is_sent_the_conversions_squares(tmp_path):
    """Nothing says how a SavedModel on its own decodes (plain decode_image drops EXIF and alpha): predict sends it
    lossless PNGs of what the conversion made of each file, never the file itself."""
    from PIL import Image

    from pipeline.predict import sent_bytes

    write_bars(tmp_path / "bars", per_class=2)
    for path in sorted((tmp_path / "bars").rglob("*.*")):
        content = path.read_bytes()
        assert sent_bytes(content, 16) == content
        old = Image.open(io.BytesIO(sent_bytes(content, 16, raw_files=False)))
        assert old.format == "PNG" and old.size == (16, 16)


def test_the_evaluation_report_shows_the_files_as_clients_send_them(bars_exported, tmp_path, monkeypatch):
    """Evaluate scores the test files themselves beside the TFRecords, and the report and metrics.json carry both.
    It decodes them as the conversion does, without the seconds of tracing the serving graph, and answers on them
    as the SavedModel does on the same files (within a file: the two decoders agree within a level)."""
    from components import imaging
    from components.evaluate.core import EvaluateConfig, run

    def traced(*args, **kwargs):
        raise AssertionError("evaluate built the serving graph")

    imaging.serving_decoder.cache_clear()  # (a decoder another test traced would hide a trace here)
    monkeypatch.setattr(imaging, "serving_pixels", traced)
    output, report = bars_exported
    root = os.path.dirname(output)
    metrics = run(
        EvaluateConfig(
            examples_dir=os.path.join(root, "examples"),
            model_dir=os.path.join(root, "model"),
            output_dir=str(tmp_path / "eval"),
        )
    )
    client = metrics["client_files"]
    assert client["num_files"] == report["raw_files"]["num_files"] == metrics["num_examples"]
    assert abs(client["accuracy"] - metrics["accuracy"]) <= 0.01 and client["refused_formats"] == {}
    assert abs(client["accuracy"] - report["raw_files"]["test_accuracy"]) <= 1 / client["num_files"]
    with open(metrics["report_html"], encoding="utf-8") as handle:
        html = handle.read()
    assert f"accuracy on the {client['num_files']} files as clients send them</td><td>{client['accuracy']:.4f}" in html
