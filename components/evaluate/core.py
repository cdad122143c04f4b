"""Evaluation on the held-out ``test`` split: accuracy, per-class precision and recall, and the confusion matrix."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from components.cli import UsageError
from components.schema import read_stats
from components.storage import write_json
from components.train.core import MODEL_FILE, load_model_config, make_dataset

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
EVAL_BATCH_SIZE = 256


@dataclass(frozen=True)
class EvaluateConfig:
    """Args: examples_dir (the convert output), model_dir (the train output), output_dir (gets ``metrics.json``)."""

    examples_dir: str
    model_dir: str
    output_dir: str
    split: str = "test"


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], class_names: Sequence[str]) -> dict:
    """Accuracy, per-class precision / recall / support and the confusion matrix (rows: true, columns: predicted).

    A class never predicted has precision 0; a class absent from ``y_true`` has recall 0 (and support 0).
    """
    import numpy as np

    num_classes = len(class_names)
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)), 1)
    correct = np.diag(matrix)
    predicted = matrix.sum(axis=0)
    actual = matrix.sum(axis=1)
    total = int(matrix.sum())
    per_class = {
        name: {
            "precision": float(correct[i] / predicted[i]) if predicted[i] else 0.0,
            "recall": float(correct[i] / actual[i]) if actual[i] else 0.0,
            "support": int(actual[i]),
        }
        for i, name in enumerate(class_names)
    }
    return {
        "accuracy": float(correct.sum() / total) if total else 0.0,
        "num_examples": total,
        "class_names": list(class_names),
        "per_class": per_class,
        "confusion_matrix": matrix.tolist(),
    }


def predict_split(model, examples_dir: str, split: str, image_size: int, num_classes: int):
    """Runs ``model`` over a split in order; returns (true class ids, predicted probabilities) as NumPy arrays."""
    import numpy as np

    dataset = make_dataset(examples_dir, split, image_size, num_classes, EVAL_BATCH_SIZE, training=False)
    true_ids, probabilities = [], []
    for images, one_hot in dataset:
        probabilities.append(model(images, training=False).numpy())
        true_ids.append(np.argmax(one_hot.numpy(), axis=-1))
    return np.concatenate(true_ids), np.concatenate(probabilities)


def run(config: EvaluateConfig) -> dict:
    """Evaluates the trained model on ``config.split`` and writes ``<output_dir>/metrics.json``."""
    import keras

    stats = read_stats(config.examples_dir)
    model_config = load_model_config(config.model_dir)
    if stats["counts"].get(config.split, 0) == 0:
        raise UsageError(f"examples dir {config.examples_dir} has no {config.split} examples to evaluate on")
    model = keras.models.load_model(os.path.join(config.model_dir, MODEL_FILE), compile=False)
    y_true, probabilities = predict_split(
        model, config.examples_dir, config.split, model_config["image_size"], model_config["num_classes"]
    )
    metrics = classification_metrics(y_true, probabilities.argmax(axis=-1), model_config["class_names"])
    metrics["split"] = config.split
    write_json(os.path.join(config.output_dir, METRICS_FILE), metrics)
    log.info("%s accuracy %.4f on %d examples", config.split, metrics["accuracy"], metrics["num_examples"])
    return metrics
