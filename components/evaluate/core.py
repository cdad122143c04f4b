"""Evaluation on the held-out ``test`` split: accuracy, top-k accuracy, per-class precision / recall / F1, the
confusion matrix, and the blessing: whether the model is good enough to be exported and registered.

Blessing works as TFX's Evaluator does: value thresholds (``min_accuracy``), and a change threshold against a
baseline (the last blessed model, evaluated here on the same examples): the candidate may be worse by at most
``max_accuracy_drop``. With no baseline, the value thresholds alone decide. The outcome and its reasons are recorded.

This module runs the step and writes its outputs (``metrics.json``, the report). The parts: ``predictions`` (the
model's answers on the TFRecords and on the client files), ``metrics``, ``blessing``, ``baseline`` (the model in
service) and ``report`` (the HTML).
"""

from __future__ import annotations

import logging
import os

from components.artifacts.evaluation import Evaluation, kept_evaluation
from components.artifacts.model import History, load_model_config
from components.browser import draw_report
from components.cli import UsageError
from components.evaluate.baseline import baseline_figures, check_baseline, comparability
from components.evaluate.blessing import bless, prediction_mix
from components.evaluate.config import EvaluateConfig
from components.evaluate.metrics import classification_metrics, ranking_metrics, top_k_accuracy
from components.evaluate.predictions import client_file_accuracy, predict_split
from components.modalities import check_examples_match, input_size, modality_of
from components.models import load_trained_model
from components.schema import read_stats
from components.storage import check_writable

log = logging.getLogger(__name__)


# what the report says of the training, from the model's model_config.json
TRAINING_FACTS = (
    "model",
    "hparams",
    "backend",
    "precision",
    "accelerator",
    "replicas",
    "processes",
    "global_batch_size",
    "image_size",
    "modality",
    "sequence_length",
    "vocabulary_size",
    "weights",
    "head_epochs",
    "fine_tune",
)


TOP_K = 3


def run(config: EvaluateConfig) -> Evaluation:
    """Evaluates the trained model (and the baseline, if any) on ``config.split``; writes ``metrics.json`` with the
    metrics and the blessing. A damaged shard is one line naming it."""
    from components.artifacts.examples import damaged_shards_named

    with damaged_shards_named(config.examples_dir):
        return _evaluate(config)


def _evaluate(config: EvaluateConfig) -> Evaluation:
    from components.keras_backend import activate_backend

    activate_backend("tensorflow")  # a CPU step; the baseline may be a TensorFlow SavedModel
    stats = read_stats(config.examples_dir)
    model_config = load_model_config(config.model_dir)
    if stats.counts.get(config.split, 0) == 0:
        raise UsageError(f"examples dir {config.examples_dir} has no {config.split} examples to evaluate on")
    check_examples_match(model_config, stats, config.model_dir, config.examples_dir)
    check_writable(config.output_dir, "--output")
    size, _ = input_size(stats)
    modality = modality_of(stats)
    reading = modality.reading(stats)
    baseline = check_baseline(config.baseline) if config.baseline else None
    data_checks = None
    if config.data_checks:  # how the data compared with the model in service's, for the report
        from components.artifacts.data_statistics import read_checks

        data_checks = read_checks(config.data_checks).for_report()
    not_comparable = baseline and comparability(baseline, model_config)
    model = load_trained_model(config.model_dir, model_config)
    history = History.read_if_any(config.model_dir)  # the curves for the report, and train's word on its learning
    from components.evaluate.report import MAX_MISCLASSIFIED

    y_true, probabilities, wrong = predict_split(
        model, config.examples_dir, config.split, reading, keep_wrong=MAX_MISCLASSIFIED
    )
    metrics = classification_metrics(y_true, probabilities.argmax(axis=-1), model_config.class_names)
    k = min(TOP_K, model_config.num_classes)
    metrics["top_k_accuracy"] = {"k": k, "accuracy": top_k_accuracy(y_true, probabilities, k)}
    metrics["ranking"] = ranking_metrics(y_true, probabilities, model_config.class_names)
    metrics["split"] = config.split
    if reading.pictures:  # images: the figure clients will get, on the files themselves
        metrics["client_files"] = client_file_accuracy(
            model, config.examples_dir, config.split, size, model_config.num_classes
        )
    metrics.update(model_name=model_config.model_name, model_dir=config.model_dir, examples_dir=config.examples_dir)
    # the run's facts, for the report to lead with: the data, and how and where the model was trained
    metrics["counts"] = dict(stats.counts)
    metrics["training"] = {key: getattr(model_config, key) for key in TRAINING_FACTS}
    baseline_accuracy = None
    if baseline is not None and not not_comparable:
        figures = baseline_figures(baseline, config.examples_dir, config.split, model_config, y_true, k, reading)
        baseline_accuracy, metrics["baseline_metrics"], answered = figures
        from components.artifacts.data_statistics import MIN_SPLIT_EXAMPLES, PREDICTION_MIX_WARN

        limits = (data_checks or {}).get("thresholds", {})  # as the run's data checks were set
        metrics["prediction_mix"] = prediction_mix(
            answered,
            kept_evaluation(config.baseline),
            config.split,
            limits.get("prediction_mix_warn", PREDICTION_MIX_WARN),
            limits.get("min_split_examples", MIN_SPLIT_EXAMPLES),
        )
        if metrics["prediction_mix"]["verdict"] == "warn":
            log.warning("prediction mix: warn: %s", metrics["prediction_mix"]["detail"])
    metrics["blessing"] = bless(
        metrics["accuracy"],
        config.min_accuracy,
        baseline_accuracy,
        config.max_accuracy_drop,
        not_comparable or None,
        metrics["per_class"],
        history and history.not_learning,
    )
    if baseline is not None and baseline.modality is not modality:  # never in place of the model in service
        metrics["blessing"]["blessed"] = False
        metrics["blessing"]["reasons"].append(
            f"the baseline is {baseline.modality.a_model}: {modality.a_model} must not take its place (give text "
            "and image models their own --model-display-name or registry)"
        )
    metrics["small_classes"] = stats.small_classes
    if data_checks is not None:
        metrics["data_checks"] = data_checks
    metrics["blessing"]["baseline"] = config.baseline or None
    metrics["misclassified"] = [
        {
            ("source" if reading.pictures else "text"): source or None,
            "label": metrics["class_names"][truth],
            "predicted": metrics["class_names"][predicted],
            "probability": p,
        }
        for _, truth, predicted, p, source in wrong
    ]
    metrics["report_html"] = write_report(config, metrics, wrong, history)
    if config.screenshot:
        metrics["report_screenshot"] = draw_report(metrics["report_html"])
    evaluation = Evaluation(**metrics)
    evaluation.write(config.output_dir)
    log.info("%s accuracy %.4f on %d examples", config.split, evaluation.accuracy, evaluation.num_examples)
    blessing = evaluation.blessing
    log.info("%s: %s", "blessed" if blessing["blessed"] else "NOT blessed", "; ".join(blessing["reasons"]))
    return evaluation


def write_report(config: EvaluateConfig, metrics: dict, wrong, history: History | None) -> str:
    """Writes ``report.html`` beside ``metrics.json``, with the misclassified images ``predict_split`` kept (the
    pixels the model saw); returns its path."""
    import io

    from PIL import Image

    from components.artifacts.evaluation import REPORT_FILE
    from components.evaluate.report import render
    from components.storage import write_atomically

    def jpeg(pixels) -> bytes | None:
        if pixels is None:  # a text: the report shows its words
            return None
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        return buffer.getvalue()

    names = metrics["class_names"]
    misclassified = [
        (jpeg(pixels), names[truth], names[predicted], p, source) for pixels, truth, predicted, p, source in wrong
    ]
    path = os.path.join(config.output_dir, REPORT_FILE)
    write_atomically(path, render(metrics, history, misclassified).encode("utf-8"))
    return path
