"""The export step: a CPU SavedModel rebuilt from the weights, serving encoded images of any size."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from components.artifacts.records import EXPORT
from components.modalities import reading_of
from tests.conftest import CLASSES, COLORS, IN_MEMORY, TINY_SIZE, image_bytes, run_cli


def test_saved_model_serves_jpeg_and_png_of_any_size(exported):
    import tensorflow as tf

    output, _ = exported
    serving = tf.saved_model.load(os.path.join(output, "saved_model")).signatures["serving_default"]
    assert list(serving.structured_input_signature[1]) == ["image_bytes"]
    batch = tf.constant(
        [
            image_bytes(COLORS["cat"], (120, 45), "JPEG", seed=1),
            image_bytes(COLORS["fish"], (33, 90), "PNG", seed=2),
            image_bytes(COLORS["dog"], (16, 16), "JPEG", seed=3),
        ]
    )
    result = serving(image_bytes=batch)
    assert sorted(result) == ["class_id", "label", "probabilities"]
    probabilities = result["probabilities"].numpy()
    assert probabilities.shape == (3, len(CLASSES))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    labels = [label.decode() for label in result["label"].numpy()]
    assert labels == [CLASSES[i] for i in result["class_id"].numpy()]
    assert labels == ["cat", "fish", "dog"]


def test_decoded_image_signature_matches_the_bytes_signature(exported, converted):
    import tensorflow as tf

    output, _ = exported
    loaded = tf.saved_model.load(os.path.join(output, "saved_model"))
    encoded = image_bytes(COLORS["dog"], (TINY_SIZE, TINY_SIZE), "PNG", seed=4)
    from_bytes = loaded.signatures["serving_default"](image_bytes=tf.constant([encoded]))
    pixels = tf.io.decode_png(encoded, channels=3)[tf.newaxis]  # uint8, as decoded
    from_pixels = loaded.signatures["serving_images"](images=pixels)
    np.testing.assert_allclose(from_bytes["probabilities"], from_pixels["probabilities"], atol=1e-6)


def test_export_records_parity_with_the_trained_model(exported, converted):
    output, report = exported
    _, stats = converted
    with open(os.path.join(output, "export.json")) as handle:
        assert json.load(handle) == {"format_version": EXPORT.version, **report}
    parity = report["parity"]
    assert parity["num_examples"] == stats["counts"]["test"]
    assert parity["argmax_agreement"] == 1.0
    # float32 serving against the trained model's own arithmetic: bfloat16 keeps 8 bits of mantissa (~0.4% relative
    # on every activation, compounding through the layers: the demo model's probabilities differ by up to ~0.014)
    tolerance = 1e-4 if report["trained_precision"] == "float32" else 5e-2
    assert parity["max_probability_difference"] < tolerance


def test_model_dir_that_is_not_a_training_output_is_a_one_line_error(tmp_path, converted):
    examples_dir, _ = converted
    result = run_cli(
        "components.export", "--model-dir", str(tmp_path), "--examples", examples_dir, "--output", str(tmp_path / "o")
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: model dir {tmp_path} has no model_config.json: pass the train step's output"
    ]


def test_tflite_float_and_int8_are_exported_with_sizes_and_test_accuracy(exported, trained):
    import keras
    from ai_edge_litert.interpreter import Interpreter

    output, report = exported
    formats = report["formats"]
    assert sorted(formats) == ["saved_model", "tflite_float", "tflite_int8"]
    for name in ("tflite_float", "tflite_int8"):
        assert formats[name]["bytes"] == os.path.getsize(formats[name]["path"])
    for entry in formats.values():
        assert 0.0 <= entry["test_accuracy"] <= 1.0
    assert formats["tflite_int8"]["bytes"] < formats["tflite_float"]["bytes"]
    saved_model, int8 = formats["saved_model"], formats["tflite_int8"]
    # the float weights: 4 bytes a parameter of the trained model, counted by Keras itself
    params = keras.models.load_model(os.path.join(trained[0], "model.keras"), compile=False).count_params()
    assert saved_model["weights_bytes"] == 4 * params
    assert report["int8_size_vs_float_weights"] == pytest.approx(os.path.getsize(int8["path"]) / (4 * params))
    assert report["int8_accuracy_drop"] == pytest.approx(saved_model["test_accuracy"] - int8["test_accuracy"])
    # full-integer, uint8 in (pixels as decoded: the scaling is the input's quantization) and out
    interpreter = Interpreter(model_path=formats["tflite_int8"]["path"])
    source = interpreter.get_input_details()[0]
    assert source["dtype"].__name__ == "uint8"
    assert source["quantization"][0] == pytest.approx(1 / 255) and source["quantization"][1] == 0
    assert interpreter.get_output_details()[0]["dtype"].__name__ == "uint8"
    assert {detail["dtype"].__name__ for detail in interpreter.get_tensor_details()} >= {"int8"}
    with open(os.path.join(output, "export.json")) as handle:
        assert json.load(handle)["formats"] == formats


def test_the_serving_decoder_is_traced_once_for_the_saved_model(trained, tmp_path, monkeypatch):
    """Its graph takes seconds to trace: saving the SavedModel traces the endpoint again (in the save context), and
    the decoder goes into it as traced, not traced a second time."""
    import components.imaging as imaging
    from components.export.common import build_cpu_model
    from components.export.image import write_saved_model

    traced, pixels = [], imaging.serving_pixels
    monkeypatch.setattr(imaging, "serving_pixels", lambda *args: traced.append(args) or pixels(*args))
    imaging.serving_decoder.cache_clear()  # (a decoder another test traced is not this one's)
    model, config = build_cpu_model(trained[0])
    write_saved_model(model, config["image_size"], config["class_names"], str(tmp_path / "saved_model"))
    imaging.serving_decoder.cache_clear()
    assert len(traced) == 1


def test_formats_left_out_are_neither_written_nor_recorded(converted, trained, tmp_path):
    """``--formats saved_model,tflite_float``: no int8 file and no int8 figures; the export is whole (register and
    predict check it) and its SavedModel answers as the full export's does."""
    from components.artifacts.exported import check_export
    from components.export.core import ExportConfig, run

    output = str(tmp_path / "export")
    report = run(
        ExportConfig(
            model_dir=trained[0],
            examples_dir=converted[0],
            output_dir=output,
            formats=("saved_model", "tflite_float"),
        )
    )
    assert sorted(report["formats"]) == ["saved_model", "tflite_float"]
    assert sorted(name for name in os.listdir(output) if name.endswith(".tflite")) == ["model_float.tflite"]
    assert report.int8_size_vs_float_weights is None and report.int8_accuracy_drop is None
    assert check_export(output)["formats"] == report["formats"]
    assert report["parity"]["argmax_agreement"] == 1.0


@pytest.mark.parametrize(
    "formats, message",
    [
        ("tflite_int8", "--formats tflite_int8: add saved_model: it is always exported"),
        ("saved_model,onnx", "--formats saved_model,onnx: onnx is no format: choose from saved_model, tflite_float"),
    ],
)
def test_formats_are_checked_before_anything_is_read(formats, message, tmp_path):
    result = run_cli(
        "components.export",
        *("--model-dir", str(tmp_path), "--examples", str(tmp_path), "--output", str(tmp_path / "o")),
        *("--formats", formats),
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not (tmp_path / "o").exists()


def test_the_int8_input_is_the_pixels_whatever_range_the_training_images_cover(tmp_path, capfd):
    """The int8 file's input quantization is the pixel scaling, 1/255 with zero point 0, even when the training
    images (the calibration set) hold no black and no white pixel: a client's 0 and 255 go in as they are."""
    import keras
    from ai_edge_litert.interpreter import Interpreter
    from PIL import Image

    from components.convert.core import ConvertConfig
    from components.convert.core import run as convert
    from components.export.image import tflite_models
    from components.models import ModelSpec
    from components.models.builtin import pixels_in, softmax

    for index, name in enumerate(("a", "b")):  # mid greys only: 100 to 150
        (tmp_path / "grey" / name).mkdir(parents=True)
        for n in range(6):
            level = 100 + 25 * index + 4 * n
            Image.new("RGB", (16, 16), (level, level, level)).save(tmp_path / "grey" / name / f"{n}.png")
    convert(
        ConvertConfig(
            source=str(tmp_path / "grey"),
            output_dir=str(tmp_path / "examples"),
            image_size=8,
            validation_fraction=0.0,
            test_fraction=0.0,
            pipeline_args=IN_MEMORY,
        )
    )
    model = keras.Sequential([*pixels_in(ModelSpec.for_images(8, 2)), keras.layers.Flatten(), softmax(2)])
    capfd.readouterr()
    built = tflite_models(model, 8, str(tmp_path / "examples"), 2, ("tflite_int8",))
    assert list(built) == ["tflite_int8"]  # (what --formats asked for, and only that)
    int8 = built["tflite_int8"]
    assert capfd.readouterr().out == ""  # (the CLI's stdout is its JSON line: Keras's export lines stay out)
    scale, zero_point = Interpreter(model_content=int8).get_input_details()[0]["quantization"]
    assert (scale, zero_point) == (pytest.approx(1 / 255), 0)


def test_every_format_takes_uint8_pixels_and_answers_as_the_saved_model(exported, converted):
    """The scaling is inside the model: serving_images and both TFLite files take uint8 pixels as decoded, and give
    the SavedModel's answers on them."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from components.artifacts.examples import first_images
    from components.artifacts.tflite import tflite_predict

    output, report = exported
    examples_dir, stats = converted
    serving = tf.saved_model.load(os.path.join(output, "saved_model")).signatures["serving_images"]
    assert serving.structured_input_signature[1]["images"].dtype == tf.uint8
    pixels = first_images(examples_dir, "test", reading_of(stats), 8)
    assert pixels.dtype == np.uint8
    expected = serving(images=tf.constant(pixels))["probabilities"].numpy()
    for name in ("tflite_float", "tflite_int8"):
        with open(report["formats"][name]["path"], "rb") as handle:
            content = handle.read()
        interpreter = Interpreter(model_content=content)
        assert interpreter.get_input_details()[0]["dtype"] == np.uint8
        answers = tflite_predict(content, pixels)
        assert (answers.argmax(-1) == expected.argmax(-1)).mean() >= 0.75, name
        if name == "tflite_float":
            np.testing.assert_allclose(answers, expected, atol=1e-4)


def test_an_older_tflite_file_that_takes_floats_is_refused_in_one_line():
    """Exports made before the scaling moved inside took [0, 1] floats: fed pixels they would answer wrong, so they
    are refused, with what to do."""
    import keras
    import tensorflow as tf

    from components.artifacts.tflite import tflite_predict
    from components.cli import UsageError

    keras.utils.set_random_seed(3)
    old = keras.Sequential(
        [keras.Input(shape=(4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(3, activation="softmax")]
    )
    content = tf.lite.TFLiteConverter.from_keras_model(old).convert()
    pixels = np.random.default_rng(0).integers(0, 256, size=(2, 4, 4, 3), dtype=np.uint8)
    with pytest.raises(UsageError, match=r"takes float32 pixels, not uint8 ones: .* export it again"):
        tflite_predict(content, pixels)


def _metadata(content: bytes):
    """The TFLite file's ModelMetadata, found and parsed by MediaPipe's generated readers (not by our writer)."""
    from mediapipe.tasks.metadata import metadata_schema_py_generated as metadata_fb
    from mediapipe.tasks.metadata import schema_py_generated as schema_fb

    model = schema_fb.Model.GetRootAsModel(content, 0)
    (index,) = [
        model.Metadata(i).Buffer()
        for i in range(model.MetadataLength())
        if model.Metadata(i).Name() == b"TFLITE_METADATA"
    ]
    buffer = model.Buffers(index).DataAsNumpy().tobytes()
    assert metadata_fb.ModelMetadata.ModelMetadataBufferHasIdentifier(buffer, 0)
    return metadata_fb, metadata_fb.ModelMetadataT.InitFromPackedBuf(buffer, 0)


def test_tflite_files_carry_the_labels_image_and_normalisation_metadata(exported):
    """What MediaPipe's and LiteRT's task libraries read: an RGB image of the model's size, normalised as (p - 0) / 1
    (the model scales pixels itself), 0..255; a probability per class, labelled by labels.txt packed in the file."""
    import io
    import zipfile

    _, report = exported
    for name in ("tflite_float", "tflite_int8"):
        with open(report["formats"][name]["path"], "rb") as handle:
            content = handle.read()
        fb, metadata = _metadata(content)
        assert metadata.name == b"codelab_convnet" and metadata.minParserVersion == b"1.0.0"
        assert metadata.version.decode() == report["model_digest"][:12]
        assert b"3 classes (cat, dog, fish)" in metadata.description
        (subgraph,) = metadata.subgraphMetadata
        (image,), (output_tensor,) = subgraph.inputTensorMetadata, subgraph.outputTensorMetadata
        assert image.content.contentPropertiesType == fb.ContentProperties.ImageProperties
        assert image.content.contentProperties.colorSpace == fb.ColorSpaceType.RGB
        size = image.content.contentProperties.defaultSize
        assert (size.width, size.height) == (report["image_size"], report["image_size"])
        (unit,) = image.processUnits
        assert unit.optionsType == fb.ProcessUnitOptions.NormalizationOptions
        assert (list(unit.options.mean), list(unit.options.std)) == ([0.0], [1.0])
        assert (list(image.stats.min), list(image.stats.max)) == ([0.0], [255.0])
        assert output_tensor.content.contentPropertiesType == fb.ContentProperties.FeatureProperties
        assert (list(output_tensor.stats.min), list(output_tensor.stats.max)) == ([0.0], [1.0])
        (labels,) = output_tensor.associatedFiles
        assert labels.name == b"labels.txt" and labels.type == fb.AssociatedFileType.TENSOR_AXIS_LABELS
        with zipfile.ZipFile(io.BytesIO(content)) as packed:
            assert packed.namelist() == ["labels.txt"]
            assert packed.read("labels.txt").decode().splitlines() == report["class_names"] == list(CLASSES)


def test_mediapipes_image_classifier_runs_the_tflite_files_as_they_are(exported, converted):
    """A task library, given only the file: MediaPipe's ImageClassifier names the classes from the packed labels and
    gives the probabilities LiteRT gives for the same pixels."""
    import mediapipe as mp
    from mediapipe.tasks.python.core.base_options import BaseOptions
    from mediapipe.tasks.python.vision import ImageClassifier, ImageClassifierOptions

    from components.artifacts.examples import first_images
    from components.artifacts.tflite import tflite_predict

    _, report = exported
    examples_dir, stats = converted
    pixels = first_images(examples_dir, "test", reading_of(stats), 6)
    for name in ("tflite_float", "tflite_int8"):
        path = report["formats"][name]["path"]
        with open(path, "rb") as handle:
            expected = tflite_predict(handle.read(), pixels)
        options = ImageClassifierOptions(base_options=BaseOptions(model_asset_path=path), max_results=len(CLASSES))
        with ImageClassifier.create_from_options(options) as classifier:
            for image, probabilities in zip(pixels, expected, strict=True):
                frame = mp.Image(image_format=mp.ImageFormat.SRGB, data=np.ascontiguousarray(image))
                (head,) = classifier.classify(frame).classifications
                scores = {category.category_name: category.score for category in head.categories}
                assert sorted(scores) == sorted(CLASSES), name
                assert head.categories[0].category_name == CLASSES[int(probabilities.argmax())], name
                got = np.array([scores[label] for label in CLASSES])
                np.testing.assert_allclose(got, probabilities, atol=1e-5, err_msg=name)


def test_the_vendored_metadata_schema_is_mediapipes_generated_module():
    """third_party/tflite_metadata/metadata_schema_py_generated.py is MediaPipe's file, unmodified below its header:
    after a MediaPipe upgrade that changes the schema, copy it again (the header says from where)."""
    from mediapipe.tasks.metadata import metadata_schema_py_generated as theirs

    from third_party.tflite_metadata import metadata_schema_py_generated as ours

    with open(ours.__file__, encoding="utf-8") as handle:
        vendored = handle.read()
    with open(theirs.__file__, encoding="utf-8") as handle:
        installed = handle.read()
    header, _, body = vendored.partition("# fmt: off\n")
    assert "Apache License 2.0" in header and body == installed


def test_metadata_replaces_the_metadata_a_file_already_has():
    """Writing twice leaves one TFLITE_METADATA buffer, the second's, and the file still runs."""
    import keras
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from components.export.tflite_metadata import classifier_files

    bare = keras.Sequential(
        [keras.Input(shape=(4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(2, activation="softmax")]
    )
    content = tf.lite.TFLiteConverter.from_keras_model(bare).convert()
    first = classifier_files(content, name="m", description="d", version="1", image_size=4, class_names=["a", "b"])
    packed = first[: first.index(b"PK\x03\x04")]  # the flatbuffer without its archive
    second = classifier_files(packed, name="m", description="d", version="2", image_size=4, class_names=["a", "b"])
    _, metadata = _metadata(second)
    assert metadata.version == b"2"
    from mediapipe.tasks.metadata import schema_py_generated as schema_fb

    model = schema_fb.Model.GetRootAsModel(second, 0)
    assert [model.Metadata(i).Name() for i in range(model.MetadataLength())].count(b"TFLITE_METADATA") == 1
    interpreter = Interpreter(model_content=second)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], np.zeros((1, 4, 4, 3), np.float32))
    interpreter.invoke()
    assert interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).shape == (1, 2)


def test_a_step_refuses_an_input_an_older_version_made_in_one_line(converted, trained, exported, tmp_path, capsys):
    """Each artifact carries its format version: one without it (made before the formats were versioned) is refused,
    with what makes it again; this version's are taken."""
    import shutil

    from components.artifacts.records import EXPORT, MODEL_CONFIG, STATS
    from components.cli import UsageError, run_main
    from components.evaluate.__main__ import main as evaluate
    from components.export.__main__ import main as export
    from pipeline.predict import predict

    def older(folder, record) -> str:
        copy = tmp_path / f"older-{record.name}"
        shutil.copytree(folder, copy)
        written = json.loads((copy / record.name).read_text())
        assert written.pop("format_version") == record.version
        (copy / record.name).write_text(json.dumps(written))
        return str(copy)

    def refused(main, argv) -> str:
        with pytest.raises(SystemExit) as ended:
            run_main(main, argv)
        assert ended.value.code == 2
        return capsys.readouterr().err.strip()

    (examples_dir, _), (model_dir, _), (export_dir, _) = converted, trained, exported
    old_examples = older(examples_dir, STATS)
    said = refused(evaluate, ["--examples", old_examples, "--model-dir", model_dir, "--output", str(tmp_path / "e")])
    assert said == (
        f"error: examples dir {old_examples} was made by an older version of this pipeline (stats.json format 0, "
        f"this one reads {STATS.version}): convert the data again"
    )
    old_model = older(model_dir, MODEL_CONFIG)
    said = refused(export, ["--model-dir", old_model, "--examples", examples_dir, "--output", str(tmp_path / "x")])
    assert said.startswith(f"error: model dir {old_model} was made by an older version") and said.endswith(": retrain")
    assert not os.path.exists(tmp_path / "x")
    old_export = older(export_dir, EXPORT)
    with pytest.raises(UsageError, match=r"was made by an older version .*\(export.json format 0.*: export it again$"):
        predict(old_export, [])
    newer = json.loads((tmp_path / "older-export.json" / EXPORT.name).read_text())
    (tmp_path / "older-export.json" / EXPORT.name).write_text(json.dumps({**newer, "format_version": 99}))
    with pytest.raises(UsageError, match=r"made by a newer version .*: upgrade the pipeline$"):
        predict(old_export, [])
    assert predict(export_dir, []) == ([], [])
