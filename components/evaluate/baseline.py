"""The baseline: the model in service (a train step output, or an exported SavedModel), found, checked for whether
it can be compared with the candidate, loaded, and judged on the candidate's examples."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from components.artifacts.evaluation import answered_counts
from components.artifacts.examples import input_size
from components.artifacts.model import article, load_model_config
from components.cli import UsageError
from components.evaluate.metrics import classification_metrics, top_k_accuracy
from components.evaluate.predictions import predict_split
from components.models import INPUT_PIXELS, load_trained_model
from components.storage import gcs_fuse_path


def baseline_path(baseline: str) -> str:
    """The baseline's local path (``gs://`` through Vertex AI's ``/gcs/`` mount); a one-line error when nothing is
    there."""
    path = gcs_fuse_path(baseline)
    if not os.path.isdir(path):
        raise UsageError(
            f"baseline {baseline} does not exist: pass the last blessed model (a train or export step output, or "
            "the SavedModel the Model Registry holds) or leave --baseline out to judge on --min-accuracy alone"
        )
    return path


@dataclass(frozen=True)
class Baseline:
    kind: str  # "trained" (a train step output) or "export" (an exported SavedModel)
    path: str  # the model.keras folder or the SavedModel folder, local or under /gcs/
    image_size: int  # a text model's: its sequence length
    class_names: list
    input_pixels: str = ""  # a trained baseline's: INPUT_PIXELS, or "" for a model that takes [0, 1] floats
    modality: str = "image"
    vocabulary_sha256: str = ""  # a trained text baseline's (it takes ids of its vocabulary; an export takes texts)


class TextExport:
    """An exported text model as ``predict_split`` calls a baseline: fed the raw texts (``takes_text``)."""

    takes_text = True

    def __init__(self, serving):
        self.serving = serving

    def __call__(self, texts, training=False):
        return self.serving(text=texts)["probabilities"]


def comparability(
    baseline: Baseline, class_names: Sequence[str], image_size: int, modality: str, vocabulary_sha256: str
) -> str:
    """Why the baseline cannot be compared with a model of ``class_names`` and ``image_size`` ("" when it can).

    The rule: a baseline is compared only when it predicts the same classes (in any order: its answers are
    reordered). When a class was added, removed or renamed, the baseline's accuracy is over another task, so the
    candidate is judged on the value threshold alone and the reason says "baseline not comparable: classes differ"
    (a scheduled retraining over a grown dataset then still blesses, exports and registers a good model).
    """
    if baseline.modality != modality:
        return (
            f"the baseline is {article(baseline.modality)} {baseline.modality} model, the candidate "
            f"{article(modality)} {modality} model"
        )
    if sorted(baseline.class_names) == sorted(class_names):
        if modality == "text" and baseline.kind == "trained":  # it reads ids: of the same length and vocabulary
            if int(baseline.image_size) != int(image_size):
                return f"sequence length differs (baseline {baseline.image_size} tokens, candidate {image_size})"
            if baseline.vocabulary_sha256 != vocabulary_sha256:
                return "vocabulary differs (a trained baseline reads ids of its own; pass its export instead)"
        if modality == "text":
            return ""
        if int(baseline.image_size) != int(image_size):
            return f"image size differs (baseline {baseline.image_size} px, candidate {image_size} px)"
        return ""
    added = [name for name in class_names if name not in baseline.class_names]
    removed = [name for name in baseline.class_names if name not in class_names]
    changes = [f"{label} {', '.join(names)}" for label, names in (("new", added), ("gone", removed)) if names]
    return f"classes differ ({'; '.join(changes)})"


def check_baseline(baseline: str) -> Baseline:
    """Finds the baseline model without loading it; one-line errors when it is missing or not a model."""
    from components.artifacts.exported import EXPORT_FILE, find_saved_model
    from components.storage import read_json

    path = baseline_path(baseline)
    found_export = find_saved_model(path)
    if found_export is None:
        try:
            config = load_model_config(path)
        except UsageError:
            raise UsageError(
                f"baseline {baseline} is not a trained or exported model: expected a train or export step output"
            ) from None
        found = Baseline(
            "trained",
            path,
            input_size(config)[0],
            list(config["class_names"]),
            config.get("input_pixels", ""),
            config.get("modality", "image"),
            config.get("vocabulary_sha256", ""),
        )
    else:
        saved_model, report = found_export
        if not os.path.isfile(report):
            raise UsageError(
                f"baseline {baseline} has no {EXPORT_FILE} beside its SavedModel: pass a model this pipeline exported"
            )
        report_json = read_json(report)
        # (what an export takes is read from its serving_images signature when it is loaded)
        found = Baseline(
            "export",
            saved_model,
            input_size(report_json)[0],
            list(report_json["class_names"]),
            modality=report_json.get("modality", "image"),
        )
    return found


def load_baseline(baseline: Baseline):
    """The baseline as a callable from a batch of uint8 pixels to probabilities (as ``predict_split`` wants); a
    baseline made before the models scaled their pixels themselves is fed them in [0, 1], as it was trained."""
    import tensorflow as tf

    if baseline.kind == "trained":
        model = load_trained_model(baseline.path)
        if baseline.input_pixels == INPUT_PIXELS or baseline.modality == "text":
            return model
        return lambda images, training=False: model(tf.cast(images, tf.float32) / 255.0, training=training)
    signatures = tf.saved_model.load(baseline.path).signatures
    if baseline.modality == "text":  # the raw texts in: the export tokenises them with its own vocabulary
        return TextExport(signatures["serving_default"])
    if "serving_images" not in signatures:
        raise UsageError(
            f"baseline {baseline.path} has no serving_images signature: pass a model this pipeline exported"
        )
    serving = signatures["serving_images"]
    wanted = serving.structured_input_signature[1]["images"].dtype
    scale = 1.0 if wanted == tf.uint8 else 1.0 / 255.0
    return lambda images, training=False: serving(images=tf.cast(tf.cast(images, tf.float32) * scale, wanted))[
        "probabilities"
    ]


def baseline_figures(
    baseline: Baseline, examples_dir: str, split: str, model_config: dict, y_true, k: int, size, sequence_length
):
    """The baseline on the candidate's examples (``split`` of ``examples_dir``), its columns in this model's class
    order (the same classes, perhaps in another order): (its accuracy, for the blessing; its figures, for the report
    to set beside the candidate's; how often it gave each class)."""
    _, probabilities, _ = predict_split(
        load_baseline(baseline),
        examples_dir,
        split,
        size,
        model_config["num_classes"],
        sequence_length=sequence_length,
    )
    order = [baseline.class_names.index(name) for name in model_config["class_names"]]
    probabilities = probabilities[:, order]
    answers = probabilities.argmax(axis=-1)
    judged = classification_metrics(y_true, answers, model_config["class_names"])
    return (
        float((answers == y_true).mean()),
        {
            "accuracy": judged["accuracy"],
            "per_class": judged["per_class"],
            "top_k_accuracy": {"k": k, "accuracy": top_k_accuracy(y_true, probabilities, k)},
        },
        answered_counts(judged),
    )
