"""The image export: a SavedModel that takes encoded images, and its TFLite files (float, and int8 on uint8 pixels).

Signatures: ``serving_default`` takes ``image_bytes`` (a batch of JPEG / PNG strings of any size, resized exactly as
the conversion does) and returns ``probabilities``, ``class_id`` and ``label``; ``serving_images`` takes decoded uint8
pixels ``[N, size, size, 3]``, as the TFLite files do (the model scales them itself). The exported model's
predictions are checked against the trained model's on the test split, and against the probabilities the training
backend computed itself (``backend_parity``); both agreements are recorded in ``export.json``.
"""

from __future__ import annotations

import logging
import os

from components.artifacts.exported import SAVED_MODEL_DIR, TFLITE_FILES, Exported, write_export_record
from components.artifacts.model import ModelConfig, model_digest
from components.artifacts.tflite import tflite_predict
from components.export.common import (
    PARITY_BATCH_SIZE,
    REPRESENTATIVE_IMAGES,
    ExportConfig,
    backend_parity,
    build_cpu_model,
    count_correct,
    format_entries,
    keep_model_code,
    loaded,
    predictions_of,
    served_report,
    shown_classes,
    write_archive,
)
from components.export.tflite_metadata import classifier_files
from components.imaging import DECODING, TFLITE_INPUT
from components.modalities.image import IMAGE
from components.models import load_trained_model
from components.schema import parse_example, split_files
from components.storage import write_atomically

log = logging.getLogger(__name__)


def write_saved_model(model, image_size: int, class_names, path: str) -> None:
    """Writes the serving SavedModel to ``path`` through a temporary folder beside it."""
    import tensorflow as tf
    from keras.export import ExportArchive

    from components.imaging import serving_decoder

    predictions = predictions_of(model, class_names)
    # traced once, a function of the SavedModel's that the endpoint calls: its concrete function, as saving traces the
    # endpoint again (in the save context, which a tf.function's cache tells apart) and would trace it again with it
    decode = serving_decoder(image_size).get_concrete_function()

    def serve_bytes(image_bytes):
        return predictions(decode(image_bytes))

    archive = ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default", serve_bytes, input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")]
    )
    archive.add_endpoint(
        "serving_images",
        predictions,
        input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.uint8, name="images")],
    )
    write_archive(archive, path)


def check_parity(saved_model, trained_model, examples_dir: str, split: str, model_config: ModelConfig) -> dict:
    """Compares the SavedModel (its path or itself loaded; fed the split's JPEG bytes) with the trained model (fed
    the pixels it trained on)."""
    import numpy as np
    import tensorflow as tf

    from components.artifacts.examples import decode_image

    serving = loaded(saved_model).signatures["serving_default"]
    files = split_files(examples_dir, split)

    def bytes_and_pixels(serialized):
        image_bytes = parse_example(serialized, model_config.num_classes)["image"]
        return image_bytes, decode_image(image_bytes, model_config.image_size)

    dataset = tf.data.TFRecordDataset(files).map(bytes_and_pixels, num_parallel_calls=tf.data.AUTOTUNE)
    agree, total, max_difference = 0, 0, 0.0
    for image_bytes, images in dataset.batch(PARITY_BATCH_SIZE):
        exported = serving(image_bytes=image_bytes)["probabilities"].numpy()
        trained = np.asarray(trained_model(images, training=False), dtype=np.float32)
        agree += int((exported.argmax(-1) == trained.argmax(-1)).sum())
        total += len(exported)
        max_difference = max(max_difference, float(np.abs(exported - trained).max()))
    return {
        "split": split,
        "num_examples": total,
        "argmax_agreement": agree / total if total else None,
        "max_probability_difference": max_difference,
    }


def raw_file_accuracy(saved_model, examples_dir: str, model_config: ModelConfig) -> dict:
    """The SavedModel's ``serving_default`` on what clients send: each test example's source file, read as it is
    (local or ``gs://``), beside the same example's TFRecord JPEG; the accuracy of both, and the first file whose
    answer differs. What is left out is counted (``components.artifacts.examples.client_files``). Scored a chunk at
    a time."""
    import tensorflow as tf

    from components.artifacts.examples import client_files

    serving = loaded(saved_model).signatures["serving_default"]
    counts, total, raw_correct, tfrecord_correct, differs, only_raw, only_tfrecord = {}, 0, 0, 0, [], 0, 0
    for chunk in client_files(examples_dir, "test", model_config.num_classes, counts, PARITY_BATCH_SIZE // 2):
        sent = [content for _, content, _, _ in chunk] + [encoded for _, _, encoded, _ in chunk]
        answers = serving(image_bytes=tf.constant(sent))["class_id"].numpy()
        for (path, _, _, truth), raw, recorded in zip(chunk, answers[: len(chunk)], answers[len(chunk) :], strict=True):
            total += 1
            raw_correct += int(raw == truth)
            tfrecord_correct += int(recorded == truth)
            if raw != recorded:
                differs.append(path)
                only_raw += int(raw == truth)
                only_tfrecord += int(recorded == truth)
    if counts["missing_files"]:
        log.warning(
            "%d test files named by the examples are gone since the conversion: the check on the files "
            "clients send leaves them out",
            counts["missing_files"],
        )
    return {
        "split": "test",
        "num_files": total,
        "test_accuracy": raw_correct / total if total else None,
        "tfrecord_test_accuracy": tfrecord_correct / total if total else None,
        "files_answered_otherwise": len(differs),
        "right_only_as_sent": only_raw,  # files the SavedModel gets right as sent and wrong from their TFRecords
        "right_only_from_tfrecords": only_tfrecord,
        "first_disagreeing_file": differs[0] if differs else None,
        **counts,
    }


# the TFRecords hold re-encoded JPEGs of the files: a borderline file may go either way on the two. A difference
# fails the export only past this many files and past what such flips give by chance
MAX_RAW_FILES_APART = 2
RAW_SKEW_Z = 3.0  # McNemar's test on the files answered otherwise: standard deviations of a fair coin's tosses


def check_raw_file_accuracy(raw: dict) -> None:
    """Skew between what clients get and what was measured, told from noise: an export error (one line naming the
    first file answered otherwise) when the files right only one way (as sent, or from their TFRecords) outnumber
    those right only the other way by more than ``MAX_RAW_FILES_APART`` and by more than ``RAW_SKEW_Z`` standard
    deviations of the fair coin that borderline files would be (McNemar's test), in either direction. Files that
    decode as in training are answered alike and never count."""
    import math

    from components.cli import UsageError

    if not raw["num_files"]:
        return
    sent, recorded = raw["right_only_as_sent"], raw["right_only_from_tfrecords"]
    apart = abs(sent - recorded)
    if apart > MAX_RAW_FILES_APART and apart > RAW_SKEW_Z * math.sqrt(sent + recorded):
        raise UsageError(
            f"the SavedModel scores {raw['test_accuracy']:.4f} on the {raw['num_files']} test files as clients send "
            f"them, against {raw['tfrecord_test_accuracy']:.4f} on their TFRecords (re-encoded JPEGs of the same "
            f"files): {sent} files are right only as sent and {recorded} only from their TFRecords, more than "
            f"chance flips; the first file answered otherwise is {raw['first_disagreeing_file']}; check how the "
            "serving graph decodes it against the conversion (docs/serving.md), and report it with the file"
        )


def unit_range_network(model, image_size: int):
    """The network without its pixel scaling (``components.models.builtin.pixels_in``'s ``Rescaling(1/255)``): float
    input in [0, 1], the same weights (for int8 quantization, which then maps uint8 pixels onto its input exactly, as
    the scaling would). Another rescaling (a pretrained backbone's range) stays. A model that scales its pixels
    otherwise (a model of one's own) takes [0, 1] through a scaling back to whole pixels in front of it instead."""
    import keras

    def pixel_scaling(layer) -> bool:
        return isinstance(layer, keras.layers.Rescaling) and (layer.scale, layer.offset) == (1.0 / 255, 0.0)

    def without_scaling(layer):
        return keras.layers.Identity() if pixel_scaling(layer) else layer.__class__.from_config(layer.get_config())

    unit = keras.Input(shape=(image_size, image_size, 3), dtype="float32")
    if any(pixel_scaling(layer) for layer in model.layers[:2]):
        try:
            bare = keras.models.clone_model(model, input_tensors=unit, clone_function=without_scaling)
            bare.set_weights(model.get_weights())
            return bare
        except (ValueError, TypeError, NotImplementedError) as err:  # (custom layers without a full config)
            log.info("int8 export: the model cannot be cloned without its scaling (%s): scaling its input back", err)
    return keras.Model(unit, model(keras.ops.round(unit * 255.0)))


def tflite_models(model, image_size: int, examples_dir: str, num_classes: int, formats) -> dict[str, bytes]:
    """The network as TFLite flatbuffers, those of ``formats`` (``ExportConfig.tflite``): float32, taking uint8
    pixels as the model does; and full-integer int8
    (post-training quantization of weights and activations, the ranges calibrated on images from the training
    split), uint8 in and out, the types MediaPipe's and LiteRT's task libraries feed and read (they refuse int8
    inputs). The int8 file is converted from the network without its scaling, so that its input quantization
    (scale 1/255, zero point 0) is the scaling, exactly: pixels go in as they are decoded. (Converted from the network
    with its scaling inside, uint8 in, the demo digits lost 1.5 to 3.5 points of accuracy; this way, none: the same
    answers as int8 in, on every test and validation image.)"""
    import tensorflow as tf

    from components.artifacts.examples import make_dataset

    def converter(network):
        """TFLite's converter of the bare network's inference (images in, probabilities out), from one traced
        function: no SavedModel written and read back (Keras's ``model.export``: 9 s a MobileNet on 2 cores, for the
        same answers to the last bit; the input is named ``images`` here)."""
        entry = network.inputs[0]
        spec = tf.TensorSpec([None, *entry.shape[1:]], entry.dtype)
        traced = tf.function(lambda images: network(images, training=False)).get_concrete_function(spec)
        holder = tf.Module()
        holder.weights = [variable.value for variable in network.variables]  # (TensorFlow's variables, to freeze)
        return tf.lite.TFLiteConverter.from_concrete_functions([traced], holder)

    def representative():
        # a black and a white image first: the input's range is then the pixels' whole range, [0, 1], so its
        # quantization is exactly scale 1/255 (zero point 0 in uint8), whatever the training images hold
        for level in (0.0, 1.0):
            yield [tf.fill([1, image_size, image_size, 3], level)]
        reading = IMAGE.reading({"image_size": image_size, "num_classes": num_classes})
        train = make_dataset(examples_dir, "train", reading, 1, training=False)
        for images, _ in train.take(REPRESENTATIVE_IMAGES):
            yield [tf.cast(images, tf.float32) / 255.0]

    def int8_converter():
        quantizing = converter(unit_range_network(model, image_size))
        quantizing.optimizations = [tf.lite.Optimize.DEFAULT]
        quantizing.representative_dataset = representative
        quantizing.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        quantizing.inference_input_type = tf.uint8
        quantizing.inference_output_type = tf.uint8
        return quantizing

    converters = {"tflite_float": lambda: converter(model), "tflite_int8": int8_converter}
    return {name: converters[name]().convert() for name in formats}


def describe(model_config: ModelConfig, fmt: str) -> str:
    """The TFLite file's description in its metadata: what it classifies, and how it was made."""
    kind = "float32" if fmt == "tflite_float" else "full-integer int8 (uint8 in and out)"
    names = model_config.class_names
    return (
        f"{model_config.model_name}, {kind}: classifies an RGB image into {len(names)} classes "
        f"({shown_classes(names)}); trained with {model_config.backend} in "
        f"{model_config.precision}. Input: {TFLITE_INPUT}."
    )


def format_accuracies(saved_model, tflite: dict[str, bytes], examples_dir: str, model_config: ModelConfig):
    """Correct test predictions of each exported format (the SavedModel's ``serving_images``, the SavedModel given
    by its path or loaded, and each TFLite model), and the number of test images."""
    from components.artifacts.examples import make_dataset

    serving = loaded(saved_model).signatures["serving_images"]
    test = make_dataset(examples_dir, "test", IMAGE.reading(model_config), 64, training=False)
    return count_correct(
        (
            labels.numpy(),
            {
                "saved_model": serving(images=images)["probabilities"].numpy(),
                **{name: tflite_predict(content, images.numpy()) for name, content in tflite.items()},
            },
        )
        for images, labels in test
    )


def export_image(config: ExportConfig) -> Exported:
    """Exports an image model (SavedModel on encoded images, TFLite on pixels), checks it, and writes
    ``export.json``."""
    model, model_config = build_cpu_model(config.model_dir)
    saved_model_path = os.path.join(config.output_dir, SAVED_MODEL_DIR)
    write_saved_model(model, model_config.image_size, model_config.class_names, saved_model_path)
    trained = load_trained_model(config.model_dir, model_config)
    saved_model = loaded(saved_model_path)  # once, for every check of it
    parity = check_parity(saved_model, trained, config.examples_dir, config.parity_split, model_config)
    raw = raw_file_accuracy(saved_model, config.examples_dir, model_config)
    check_raw_file_accuracy(raw)
    crossed = backend_parity(model, config.model_dir, model_config, config.examples_dir)
    tflite = tflite_models(
        model, model_config.image_size, config.examples_dir, model_config.num_classes, config.tflite()
    )
    digest = model_digest(config.model_dir)
    for name, content in tflite.items():  # labels, normalisation, size: so that task libraries run them as they are
        tflite[name] = classifier_files(
            content,
            name=model_config.model_name,
            version=digest[:12],
            description=describe(model_config, name),
            image_size=model_config.image_size,
            class_names=model_config.class_names,
        )
    for name, content in tflite.items():
        write_atomically(os.path.join(config.output_dir, TFLITE_FILES[name]), content)
    correct, total = format_accuracies(saved_model, tflite, config.examples_dir, model_config)
    report = {
        **format_entries(model, saved_model_path, tflite, config.output_dir, correct, total),
        "signatures": {
            "serving_default": {"inputs": ["image_bytes"], "outputs": ["probabilities", "class_id", "label"]},
            "serving_images": {"inputs": ["images"], "outputs": ["probabilities", "class_id", "label"]},
        },
        "parity": parity,
        "raw_files": raw,
        "backend_parity": crossed,
        # what the SavedModel does to the bytes it is sent, as the conversion did: what a client that decodes
        # for itself (the TFLite files, serving_images) must do the same way
        "decoding": DECODING,
        "class_names": model_config.class_names,
        "modality": "image",
        "image_size": model_config.image_size,
        "trained_precision": model_config.precision,
        "trained_backend": crossed["trained_backend"],
        "model_digest": digest,  # the trained weights' sha256: the model's identity
        **keep_model_code(config.model_dir, config.output_dir, model_config),
    }
    report = write_export_record(config.output_dir, {**report, **served_report(config, report)})
    log.info(
        "exported %s; parity on %d %s images: %.4f argmax agreement, max probability difference %.2e",
        saved_model_path,
        parity["num_examples"],
        parity["split"],
        parity["argmax_agreement"] or 0.0,
        parity["max_probability_difference"],
    )
    if raw["num_files"]:
        log.info(
            "test accuracy on the %d test files as clients send them: %.4f (on their TFRecords: %.4f)",
            raw["num_files"],
            raw["test_accuracy"],
            raw["tfrecord_test_accuracy"],
        )
    if crossed["num_examples"]:
        log.info(
            "trained on %s, exported on %s: %.4f argmax agreement on %d validation images, max probability "
            "difference %.2e",
            crossed["trained_backend"],
            crossed["export_backend"],
            crossed["argmax_agreement"],
            crossed["num_examples"],
            crossed["max_probability_difference"],
        )
    return report
