"""What the image and text exports share: the config, the float32 CPU model rebuilt from the trained weights, the
TFLite interpreter runs, the parity with the training backend, and the format entries of ``export.json``."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass

from components.artifacts.exported import TFLITE_FILES, check_formats
from components.artifacts.model import REFERENCE_FILE, WEIGHTS_FILE, ModelConfig, load_model_config
from components.modalities import reading_of
from components.params import EXPORT

log = logging.getLogger(__name__)


PARITY_BATCH_SIZE = 128
REPRESENTATIVE_IMAGES = 200  # training images that calibrate the int8 ranges


@dataclass(frozen=True)
class ExportConfig:
    """Args: model_dir (the train output), examples_dir (for the parity check), output_dir (gets ``saved_model/``
    and ``export.json``), evaluation_dir (the evaluate step's output: its report, led by the served model's figure,
    goes beside the export; "": none), formats (``saved_model`` and the TFLite files to build: those left out are
    neither converted nor scored)."""

    model_dir: str
    examples_dir: str
    output_dir: str
    parity_split: str = "test"
    evaluation_dir: str = ""
    formats: tuple[str, ...] = EXPORT["export_formats"].default

    def __post_init__(self) -> None:
        check_formats(self.formats)
        object.__setattr__(self, "formats", tuple(self.formats))

    def tflite(self) -> tuple[str, ...]:
        """The TFLite files this export builds."""
        return tuple(name for name in TFLITE_FILES if name in self.formats)


def check_evaluation(evaluation_dir: str) -> None:
    """A one-line error when ``evaluation_dir`` is not an evaluate step's output (before the slow work)."""
    from components.artifacts.evaluation import REPORT_FILE, Evaluation
    from components.cli import UsageError
    from components.storage import exists

    split = Evaluation.read(evaluation_dir).split
    if not exists(f"{evaluation_dir.rstrip('/')}/{REPORT_FILE}"):
        raise UsageError(f"evaluation {evaluation_dir} has no {REPORT_FILE}: pass the evaluate step's output")
    if split != "test":  # the served figure is the test split's, and the report's figures must be of the same
        raise UsageError(
            f"--evaluation {evaluation_dir} evaluated the {split} split: pass an evaluation of the test "
            "split (python -m components.evaluate without --split)"
        )


def served_report(config: ExportConfig, record: dict) -> dict:
    """With ``config.evaluation_dir``: evaluate's report, led by the served model's figure that this export measured
    (``components.artifacts.served``), written as ``report.html`` beside the export; the record's ``report_html``
    and the evaluation's ``blessing`` (nothing without an evaluation)."""
    if not config.evaluation_dir:
        return {}
    from components.artifacts.data_statistics import test_copies
    from components.artifacts.evaluation import REPORT_FILE, Evaluation
    from components.artifacts.served import with_served
    from components.storage import read_bytes, write_atomically

    metrics = Evaluation.read(config.evaluation_dir)
    facts = {
        "counts": {"test": metrics.num_examples},
        "test_accuracy": metrics.accuracy,
        **{key: record.get(key) for key in ("raw_files", "raw_texts", "formats")},
        "data_checks": {"test_copies": test_copies(metrics.data_checks["checks"]) if metrics.data_checks else None},
    }
    evaluated = read_bytes(f"{config.evaluation_dir.rstrip('/')}/{REPORT_FILE}").decode("utf-8")
    path = os.path.join(config.output_dir, REPORT_FILE)
    write_atomically(path, with_served(evaluated, facts).encode("utf-8"))
    return {"report_html": path, "blessing": metrics.blessing}


def build_cpu_model(model_dir: str):
    """The trained network rebuilt on the CPU in float32 by the builder that made it (with the hyperparameters it was
    trained with), the trained weights loaded."""
    import keras
    import tensorflow as tf

    from components.modalities import spec_of
    from components.models import build_model, load_trained

    config = load_model_config(model_dir)
    loaded = load_trained(config, model_dir)
    keras.mixed_precision.set_global_policy("float32")
    with tf.device("/CPU:0"):
        model = build_model(loaded, spec_of(config), config.hparams)
        model.load_weights(os.path.join(model_dir, WEIGHTS_FILE))
    return model, config


def keep_model_code(model_dir: str, output_dir: str, model_config: ModelConfig) -> dict:
    """The export's record of the code that made the model (``export.json``'s ``model`` and ``hparams``), and a
    copy of a model file of one's own beside the export (it goes with it into the registry): a version can be traced
    to its code. The SavedModel and the TFLite files need none of it to serve."""
    from components.storage import read_bytes, write_atomically

    record = model_config.model
    if record["file"]:
        write_atomically(os.path.join(output_dir, record["file"]), read_bytes(os.path.join(model_dir, record["file"])))
    return {"model_name": model_config.model_name, "model": record, "hparams": model_config.hparams}


def loaded(saved_model):
    """A SavedModel loaded from its path, or as it was given, loaded already (export loads it once for its checks)."""
    import tensorflow as tf

    return tf.saved_model.load(saved_model) if isinstance(saved_model, str) else saved_model


def predictions_of(model, class_names):
    """The serving outputs of a batch of model inputs: ``probabilities``, ``class_id`` and ``label``."""
    import tensorflow as tf

    labels = tf.constant(list(class_names))

    def predictions(inputs):
        probabilities = tf.cast(model(inputs, training=False), tf.float32)
        class_id = tf.argmax(probabilities, axis=-1)
        return {"probabilities": probabilities, "class_id": class_id, "label": tf.gather(labels, class_id)}

    return predictions


def write_archive(archive, path: str) -> None:
    """Writes a Keras ``ExportArchive`` to ``path`` through a temporary folder beside it (never half a SavedModel
    where the last one was)."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".saved_model-", dir=parent)
    try:
        archive.write_out(staging, verbose=False)
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def shown_classes(names) -> str:
    """The first 10 class names, and how many more, for a TFLite file's description."""
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def count_correct(batches) -> tuple[dict[str, int], int]:
    """(correct predictions of each format, examples) over ``batches`` of (one-hot labels, {format: probabilities})."""
    import numpy as np

    correct, total = {}, 0
    for one_hot, predicted in batches:
        truth = one_hot.argmax(-1)
        for name, probabilities in predicted.items():
            correct[name] = correct.get(name, 0) + int((np.argmax(probabilities, -1) == truth).sum())
        total += len(truth)
    return correct, total


def format_entries(
    model, saved_model_path: str, tflite: dict[str, bytes], output_dir: str, correct: dict, total: int
) -> dict:
    """``export.json``'s figures of the formats: each one's path, bytes and test accuracy (the SavedModel's float32
    weights too), and the int8 file against the float model (goals: at most 30% of the weights' bytes, at most 1
    point of accuracy lost); logged on one line."""
    from keras.backend import is_float_dtype

    # the float32 weights (not a lookup table of ids, such as the character grams' of ngrams)
    weights_bytes = sum(int(weight.numpy().nbytes) for weight in model.weights if is_float_dtype(weight.dtype))
    formats = {
        "saved_model": {"path": saved_model_path, "bytes": tree_bytes(saved_model_path), "weights_bytes": weights_bytes}
    }
    for name, content in tflite.items():
        formats[name] = {"path": os.path.join(output_dir, TFLITE_FILES[name]), "bytes": len(content)}
    for name, entry in formats.items():
        entry["test_accuracy"] = correct.get(name, 0) / total if total else None
    log.info(
        "formats: %s",
        ", ".join(f"{name} {e['bytes'] / 1e6:.2f} MB, accuracy {e['test_accuracy']}" for name, e in formats.items()),
    )
    int8 = "tflite_int8" in tflite  # (None where the run did not ask for it)
    return {
        "formats": formats,
        "int8_size_vs_float_weights": len(tflite["tflite_int8"]) / weights_bytes if int8 and weights_bytes else None,
        "int8_accuracy_drop": (correct["saved_model"] - correct["tflite_int8"]) / total if int8 and total else None,
        "saved_model": formats["saved_model"],
    }


def backend_parity(model, model_dir: str, model_config: ModelConfig, examples_dir: str) -> dict:
    """The codelab's hand-off, across backends: the CPU model (TensorFlow, float32) against the probabilities the
    training backend itself computed on the same validation images, in its own precision (``reference_predictions``
    in the model artifact)."""
    import numpy as np

    from components.artifacts.examples import first_images

    record = {"trained_backend": model_config.backend, "export_backend": "tensorflow"}
    path = os.path.join(model_dir, REFERENCE_FILE)
    if not os.path.exists(path):
        return {**record, "num_examples": 0, "skipped": "the train step recorded no reference predictions"}
    with np.load(path) as arrays:
        reference = arrays["probabilities"]
    count = len(reference)
    images = first_images(examples_dir, "validation", reading_of(model_config), count)
    exported = np.asarray(model(images, training=False), dtype=np.float32)
    return {
        **record,
        "split": "validation",
        "num_examples": count,
        "argmax_agreement": float((exported.argmax(-1) == reference.argmax(-1)).mean()),
        "max_probability_difference": float(np.abs(exported - reference).max()),
    }


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
