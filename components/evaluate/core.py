"""Evaluation on the held-out ``test`` split: accuracy, top-k accuracy, per-class precision / recall / F1, the
confusion matrix, and the blessing: whether the model is good enough to be exported and registered.

Blessing works as TFX's Evaluator does: value thresholds (``min_accuracy``), and a change threshold against a
baseline (the last blessed model, evaluated here on the same examples): the candidate may be worse by at most
``max_accuracy_drop``. With no baseline, the value thresholds alone decide. The outcome and its reasons are recorded.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from components.artifacts.evaluation import METRICS_FILE, answered_counts
from components.artifacts.examples import input_size, make_dataset
from components.artifacts.model import HISTORY_FILE, article, check_examples_match, load_model_config
from components.cli import UsageError
from components.models import INPUT_PIXELS, load_trained_model
from components.params import EVALUATE
from components.schema import read_stats
from components.storage import check_writable, gcs_fuse_path, write_json

log = logging.getLogger(__name__)

EVAL_BATCH_SIZE = 256
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


@dataclass(frozen=True)
class EvaluateConfig:
    """Args: examples_dir (the convert output), model_dir (the train output), output_dir (gets ``metrics.json``);
    min_accuracy, baseline and max_accuracy_drop decide the blessing. The baseline (empty: none) is the last blessed
    model: a train step output, an export step output, or its ``saved_model/`` folder as the Vertex AI Model
    Registry holds it (``gs://`` is read through Vertex AI's ``/gcs/`` mount). ``screenshot``: also draw the report
    in a headless browser into ``report.png`` beside it (``components.evaluate.browser``). ``data_checks``: the
    check-data step's output, whose checks the report shows ("": none)."""

    examples_dir: str
    model_dir: str
    output_dir: str
    split: str = "test"
    min_accuracy: float = EVALUATE["min_accuracy"].default
    baseline: str = EVALUATE["baseline"].default
    max_accuracy_drop: float = EVALUATE["max_accuracy_drop"].default
    screenshot: bool = False  # also save report.png, as a headless browser draws the report (a few seconds)
    data_checks: str = ""

    def __post_init__(self) -> None:
        check_fraction("--min-accuracy", self.min_accuracy)
        check_fraction("--max-accuracy-drop", self.max_accuracy_drop)


def check_fraction(flag: str, value: float) -> None:
    """A blessing threshold must be a fraction in [0, 1]; a one-line error naming the flag otherwise."""
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"{flag} {value} is out of range: use a fraction in [0, 1]")


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


CHANCE_Z = 2.326  # the automatic bar's one-sided confidence, 99%


def chance_bar(per_class: dict) -> tuple[str, float, int, float]:
    """What beating chance takes on these test examples (``per_class``: their support by class): the most common
    class, its share, the number of examples, and the accuracy a model needs to beat always answering that class by
    more than chance gives at 99% confidence (the share, plus 2.326 standard errors of a binomial share of that many
    examples, plus half an example)."""
    count = sum(figures["support"] for figures in per_class.values())
    name = max(per_class, key=lambda c: per_class[c]["support"])
    share = per_class[name]["support"] / max(count, 1)
    return name, share, count, share + CHANCE_Z * math.sqrt(share * (1 - share) / max(count, 1)) + 0.5 / max(count, 1)


def bless(
    accuracy: float,
    min_accuracy: float,
    baseline_accuracy: float | None,
    max_accuracy_drop: float,
    not_comparable: str | None = None,
    per_class: dict | None = None,
    not_learning: str | None = None,
) -> dict:
    """The blessing: ``blessed`` and the ``reasons`` for it, one per threshold, those that decided against it first.
    ``not_comparable``: why a baseline was given but cannot be compared (the value threshold alone decides, and the
    reason says so).

    The value threshold: ``min_accuracy``, an absolute bar; 0 (the default), beating always answering the test
    split's most common class by more than chance would (``chance_bar``), whatever the number of classes.

    ``per_class`` (precision, recall, support by class): a model is never blessed while a class it should predict
    has recall 0 on its test examples, or has no test example at all (then nothing shows it can predict it).

    ``not_learning``: why training ended at chance or diverged (``components.learning``): never blessed, and that
    reason comes first, since it explains the others."""
    failed, passed = [], []  # the reasons of each kind

    def check(holds: bool, reason: str) -> None:
        (passed if holds else failed).append(reason)

    if not_learning:
        check(False, f"training did not learn: {not_learning}")
    needed = None
    if min_accuracy > 0 or not per_class:
        meets = accuracy >= min_accuracy
        check(meets, f"accuracy {accuracy:.4f} {'meets' if meets else 'is below'} the minimum {min_accuracy:.4f}")
    else:
        name, share, count, needed = chance_bar(per_class)
        always = f"always answering {name} ({share:.4f} of the {count} test examples)"
        own = "--min-accuracy sets a bar of your own"
        if needed > 1:
            check(False, f"{count} test examples are too few to show that a model beats {always}: add data ({own})")
        elif accuracy < needed:
            check(
                False,
                f"accuracy {accuracy:.4f} does not beat {always} by more than chance: it needs {needed:.4f} ({own})",
            )
        else:
            check(True, f"accuracy {accuracy:.4f} beats {always} beyond chance (it needed {needed:.4f})")
    if not_comparable:
        check(True, f"baseline not comparable: {not_comparable}: judged on the value threshold alone")
    elif baseline_accuracy is None:
        check(True, "no baseline model: judged on the value threshold alone")
    elif accuracy < baseline_accuracy - max_accuracy_drop - 1e-12:
        allowed = f"by more than the allowed {max_accuracy_drop:.4f}"
        check(False, f"accuracy {accuracy:.4f} is below the baseline's {baseline_accuracy:.4f} {allowed}")
    else:
        allowed = f" by more than {max_accuracy_drop:.4f}" if max_accuracy_drop else ""
        check(True, f"accuracy {accuracy:.4f} is not worse than the baseline's {baseline_accuracy:.4f}{allowed}")
    for name, figures in (per_class or {}).items():
        if figures["support"] == 0:
            check(False, f"class {name} has no test example: nothing shows the model predicts it (add images)")
        elif figures["recall"] == 0.0:
            support = figures["support"]
            check(False, f"class {name}: recall 0 (none of its {support} test examples predicted right)")
    return {
        "blessed": not failed,
        "reasons": failed + passed,
        "thresholds": {"min_accuracy": min_accuracy, "max_accuracy_drop": max_accuracy_drop, "chance_bar": needed},
        "baseline_accuracy": baseline_accuracy,
        "baseline_comparable": not not_comparable,
    }


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], class_names: Sequence[str]) -> dict:
    """Accuracy, per-class precision / recall / F1 / support and the confusion matrix (rows: true, columns:
    predicted), scikit-learn's over every class of the model.

    A class never predicted has precision 0; a class absent from ``y_true`` has recall 0 (and support 0).
    """
    import numpy as np
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    labels = list(range(len(class_names)))
    if not len(y_true):
        return {
            "accuracy": 0.0,
            "num_examples": 0,
            "class_names": list(class_names),
            "per_class": {name: {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0} for name in class_names},
            "confusion_matrix": np.zeros((len(labels), len(labels)), dtype=int).tolist(),
        }
    matrix = confusion_matrix(y_true, y_pred, labels=labels)
    precision, recall, f1, support = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    per_class = {
        name: {
            "precision": float(precision[i]),
            "recall": float(recall[i]),
            "f1": float(f1[i]),
            "support": int(support[i]),
        }
        for i, name in enumerate(class_names)
    }
    return {
        "accuracy": float(np.trace(matrix) / matrix.sum()),
        "num_examples": int(matrix.sum()),
        "class_names": list(class_names),
        "per_class": per_class,
        "confusion_matrix": matrix.tolist(),
    }


# the confidence thresholds Vertex AI's Evaluate tab lets a user slide over (its classification metrics schema)
CONFIDENCE_THRESHOLDS = tuple(round(0.05 * step, 2) for step in range(21))


def ranking_metrics(y_true: Sequence[int], probabilities, class_names: Sequence[str]) -> dict:
    """The figures that need the probabilities, not just the top class, one-vs-rest over all classes at once (micro
    average) and for each class: area under the precision-recall curve (average precision), under the ROC curve,
    the log loss, and precision / recall / F1 / false-positive rate at each of ``CONFIDENCE_THRESHOLDS`` (an
    example counts as a positive for every class whose probability reaches the threshold; ``...At1``, for its most
    probable class only). This is what Vertex AI's classification evaluation schema holds."""
    import numpy as np
    from sklearn.metrics import log_loss

    probabilities = np.asarray(probabilities, dtype=np.float64)
    truth = np.zeros_like(probabilities, dtype=bool)
    truth[np.arange(len(probabilities)), np.asarray(y_true, dtype=np.int64)] = True
    top = np.zeros_like(truth)
    top[np.arange(len(probabilities)), probabilities.argmax(axis=-1)] = True
    # each row summed to one in float64 (a model's float32 or bfloat16 softmax is off by rounding)
    rows = probabilities / np.maximum(probabilities.sum(axis=-1, keepdims=True), np.finfo(np.float64).tiny)
    loss = log_loss(y_true, y_proba=rows, labels=range(len(class_names))) if len(rows) else 0.0
    overall = {"log_loss": float(loss), **curve_metrics(truth, probabilities, top)}
    per_class = {name: curve_metrics(truth[:, i], probabilities[:, i], top[:, i]) for i, name in enumerate(class_names)}
    return {**overall, "per_class": per_class}


def curve_metrics(truth, scores, top) -> dict:
    """Area under the precision-recall curve (average precision) and the ROC curve, scikit-learn's (0 where a
    curve has no positives, or for ROC no negatives), and Vertex AI's figures at each confidence threshold, for one
    set of yes/no answers (``truth``) and their ``scores``; ``top``: where the score is the example's highest."""
    import numpy as np
    from sklearn.metrics import average_precision_score, roc_auc_score

    truth, scores, top = (np.asarray(a).ravel() for a in (truth, scores, top))
    positives, negatives = int(truth.sum()), int((~truth).sum())

    def ratio(a, b) -> float:
        return float(a / b) if b else 0.0

    def at(selected) -> dict:
        tp, fp = int((selected & truth).sum()), int((selected & ~truth).sum())
        precision, recall = ratio(tp, tp + fp), ratio(tp, positives)
        f1 = ratio(2 * precision * recall, precision + recall)
        return {"tp": tp, "fp": fp, "precision": precision, "recall": recall, "f1": f1, "fpr": ratio(fp, negatives)}

    thresholds = []
    for threshold in CONFIDENCE_THRESHOLDS:
        every, first = at(scores >= threshold), at(top & (scores >= threshold))
        thresholds.append(
            {
                "threshold": threshold,
                **{k: every[k] for k in ("precision", "recall", "f1", "fpr")},
                "tp": every["tp"],
                "fp": every["fp"],
                "fn": positives - every["tp"],
                "tn": negatives - every["fp"],
                **{f"{k}_at_1": first[k] for k in ("precision", "recall", "f1", "fpr")},
            }
        )
    au_prc = float(average_precision_score(truth, scores)) if positives else 0.0
    au_roc = float(roc_auc_score(truth, scores)) if positives and negatives else 0.0
    return {"au_prc": au_prc, "au_roc": au_roc, "thresholds": thresholds}


def predict_split(
    model,
    examples_dir: str,
    split: str,
    image_size: int,
    num_classes: int,
    keep_wrong: int = 0,
    sequence_length: int | None = None,
):
    """Runs ``model`` over a split in order; returns (true class ids, predicted probabilities) as NumPy arrays, and
    the first ``keep_wrong`` misclassified images as (uint8 pixels, true id, predicted id, its probability, source:
    the image's file, "" when the records do not say). Texts (``sequence_length`` given): the pixels are None and
    the source is the text."""
    import numpy as np

    dataset = make_dataset(
        examples_dir,
        split,
        image_size,
        num_classes,
        EVAL_BATCH_SIZE,
        training=False,
        sources=True,
        sequence_length=sequence_length,
    )
    true_ids, probabilities, wrong = [], [], []
    for images, one_hot, sources in dataset:
        # (an exported text baseline takes the raw texts: it tokenises them with its own vocabulary)
        batch_probabilities = model(sources if getattr(model, "takes_text", False) else images, training=False).numpy()
        batch_true = np.argmax(one_hot.numpy(), axis=-1)
        probabilities.append(batch_probabilities)
        true_ids.append(batch_true)
        for index in np.flatnonzero(batch_probabilities.argmax(axis=-1) != batch_true)[: keep_wrong - len(wrong)]:
            predicted = int(batch_probabilities[index].argmax())
            pixels = None if sequence_length else images[index].numpy()  # the uint8 pixels the model saw
            source = sources[index].numpy().decode("utf-8", errors="replace")
            wrong.append(
                (pixels, int(batch_true[index]), predicted, float(batch_probabilities[index][predicted]), source)
            )
    return np.concatenate(true_ids), np.concatenate(probabilities), wrong


def client_file_accuracy(model, examples_dir: str, split: str, image_size: int, num_classes: int) -> dict:
    """The model's accuracy on the split's own source files, decoded as the exported SavedModel will decode what
    clients send (``components.imaging.serving_pixels``), beside the TFRecords' figure; what is left
    out is counted (``components.artifacts.examples.client_files``)."""
    import numpy as np
    import tensorflow as tf

    from components.artifacts.examples import client_files
    from components.imaging import serving_decoder

    decode = serving_decoder(image_size)
    counts, correct, total = {}, 0, 0
    for rows in client_files(examples_dir, split, num_classes, counts, EVAL_BATCH_SIZE):
        pixels = decode(tf.constant([content for _, content, _, _ in rows])).numpy()
        predicted = np.asarray(model(pixels, training=False)).argmax(axis=-1)
        correct += int((predicted == np.array([truth for _, _, _, truth in rows])).sum())
        total += len(rows)
    return {"num_files": total, "accuracy": correct / total if total else None, **counts}


def top_k_accuracy(y_true, probabilities, k: int) -> float:
    """Share of examples whose true class is among the ``k`` most probable (scikit-learn's; 1 when ``k`` covers
    every class)."""
    import numpy as np
    from sklearn.metrics import top_k_accuracy_score

    probabilities = np.asarray(probabilities, dtype=np.float64)
    if not len(y_true):
        return 0.0
    classes = probabilities.shape[-1]
    if k >= classes:
        return 1.0
    # two classes: scikit-learn takes the second one's scores
    scores = probabilities[:, 1] if classes == 2 else probabilities
    return float(top_k_accuracy_score(y_true, scores, k=k, labels=range(classes)))


def run(config: EvaluateConfig) -> dict:
    """Evaluates the trained model (and the baseline, if any) on ``config.split``; writes ``metrics.json`` with the
    metrics and the blessing. A damaged shard is one line naming it."""
    from components.artifacts.examples import damaged_shards_named

    with damaged_shards_named(config.examples_dir):
        return _evaluate(config)


def _evaluate(config: EvaluateConfig) -> dict:
    from components.keras_backend import activate_backend

    activate_backend("tensorflow")  # a CPU step; the baseline may be a TensorFlow SavedModel
    stats = read_stats(config.examples_dir)
    model_config = load_model_config(config.model_dir)
    if stats["counts"].get(config.split, 0) == 0:
        raise UsageError(f"examples dir {config.examples_dir} has no {config.split} examples to evaluate on")
    check_examples_match(model_config, stats, config.model_dir, config.examples_dir)
    check_writable(config.output_dir, "--output")
    size, sequence_length = input_size(stats)
    modality = stats.get("modality", "image")
    baseline = check_baseline(config.baseline) if config.baseline else None
    data_checks = None
    if config.data_checks:  # how the data compared with the model in service's, for the report
        from components.artifacts.data_statistics import read_checks

        data_checks = read_checks(config.data_checks)
    not_comparable = baseline and comparability(
        baseline, model_config["class_names"], size, modality, model_config.get("vocabulary_sha256", "")
    )
    model = load_trained_model(config.model_dir, model_config)
    history = read_history(config.model_dir)  # the curves for the report, and train's word on whether it learned
    from components.evaluate.report import MAX_MISCLASSIFIED

    y_true, probabilities, wrong = predict_split(
        model,
        config.examples_dir,
        config.split,
        size,
        model_config["num_classes"],
        keep_wrong=MAX_MISCLASSIFIED,
        sequence_length=sequence_length,
    )
    metrics = classification_metrics(y_true, probabilities.argmax(axis=-1), model_config["class_names"])
    k = min(TOP_K, model_config["num_classes"])
    metrics["top_k_accuracy"] = {"k": k, "accuracy": top_k_accuracy(y_true, probabilities, k)}
    metrics["ranking"] = ranking_metrics(y_true, probabilities, model_config["class_names"])
    metrics["split"] = config.split
    if not sequence_length:  # images: the figure clients will get, on the files themselves
        metrics["client_files"] = client_file_accuracy(
            model, config.examples_dir, config.split, size, model_config["num_classes"]
        )
    metrics.update(model_name=model_config["model_name"], model_dir=config.model_dir, examples_dir=config.examples_dir)
    # the run's facts, for the report to lead with: the data, and how and where the model was trained
    metrics["counts"] = dict(stats["counts"])
    metrics["training"] = {key: model_config.get(key) for key in TRAINING_FACTS}
    baseline_accuracy = None
    if baseline is not None and not not_comparable:
        figures = baseline_figures(baseline, config, model_config, y_true, k, size, sequence_length)
        baseline_accuracy, metrics["baseline_metrics"], answered = figures
        from components.artifacts.data_statistics import MIN_SPLIT_EXAMPLES, PREDICTION_MIX_WARN
        from components.artifacts.evaluation import kept_evaluation

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
        (history or {}).get("not_learning"),
    )
    if baseline is not None and baseline.modality != modality:  # never in place of the model in service
        metrics["blessing"]["blessed"] = False
        metrics["blessing"]["reasons"].append(
            f"the baseline is {article(baseline.modality)} {baseline.modality} model: {article(modality)} "
            f"{modality} model must not take its place (give text and image models their own --model-display-name "
            "or registry)"
        )
    metrics["small_classes"] = stats.get("small_classes", {})
    if data_checks is not None:
        metrics["data_checks"] = data_checks
    metrics["blessing"]["baseline"] = config.baseline or None
    metrics["misclassified"] = [
        {
            ("text" if sequence_length else "source"): source or None,
            "label": metrics["class_names"][truth],
            "predicted": metrics["class_names"][predicted],
            "probability": p,
        }
        for _, truth, predicted, p, source in wrong
    ]
    metrics["report_html"] = write_report(config, metrics, wrong, history)
    if config.screenshot:
        metrics["report_screenshot"] = draw_report(metrics["report_html"])
    write_json(os.path.join(config.output_dir, METRICS_FILE), metrics)
    log.info("%s accuracy %.4f on %d examples", config.split, metrics["accuracy"], metrics["num_examples"])
    blessing = metrics["blessing"]
    log.info("%s: %s", "blessed" if blessing["blessed"] else "NOT blessed", "; ".join(blessing["reasons"]))
    return metrics


def baseline_figures(baseline, config: EvaluateConfig, model_config: dict, y_true, k: int, size, sequence_length):
    """The baseline on the same examples, its columns in this model's class order (the same classes, perhaps in
    another order): (its accuracy, for the blessing; its figures, for the report to set beside the candidate's)."""
    _, probabilities, _ = predict_split(
        load_baseline(baseline),
        config.examples_dir,
        config.split,
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


def prediction_mix(answered: dict[str, int], kept: dict | None, split: str, warn: float, least: float) -> dict:
    """The model in service's answers on the new data's ``split`` (``answered``: how often it gave each class)
    against its answers on its own evaluation split (``kept``: the ``metrics.json`` its registered version keeps):
    the L-infinity distance of the two class mixes, as a row of the data checks. It warns above ``warn`` and never
    blocks: the model in service answering differently says the data moved, or the model's errors did. Skipped,
    with a word, without a kept evaluation, or with fewer than ``least`` answers on either side."""

    def row(verdict: str, value: float | None = None, detail: str = "") -> dict:
        return {
            "check": "prediction mix",
            "verdict": verdict,
            "severity": "warn",
            "value": value,
            "thresholds": {"warn": warn},
            "detail": detail,
            "split": split,
        }

    if kept is None:
        return row(
            "skipped",
            detail="the model in service keeps no evaluation of its own (a version that the "
            "register step keeps with its metrics.json does): nothing to compare its answers with",
        )
    before = answered_counts(kept)
    if sorted(before) != sorted(answered):
        return row("skipped", detail="the model in service's own evaluation was of other classes")
    now_total, before_total = sum(answered.values()), sum(before.values())
    if min(now_total, before_total) < least:
        return row(
            "skipped",
            detail=f"{min(now_total, before_total)} answers on one side, under "
            f"min_split_examples {least:g}: too few to compare shares",
        )
    names = list(answered)
    moved = {name: answered[name] / now_total - before[name] / before_total for name in names}
    most = max(names, key=lambda name: abs(moved[name]))
    distance = abs(moved[most])
    own_split = kept.get("split", "evaluation")
    detail = (
        f"class {most} {before[most] / before_total:.1%} -> {answered[most] / now_total:.1%} of its answers "
        f"(its {own_split} split of {before_total}, this {split} split of {now_total})"
    )
    return row("warn" if distance > warn else "pass", round(distance, 4), detail)


def read_history(model_dir: str) -> dict | None:
    """The model artifact's ``history.json`` (curves, and ``not_learning``: train's word that its run did not
    learn), or None for a model without one."""
    from components.storage import exists, read_json

    path = os.path.join(model_dir, HISTORY_FILE)
    return read_json(path) if exists(path) else None


def write_report(config: EvaluateConfig, metrics: dict, wrong, history: dict | None) -> str:
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


def draw_report(report_html: str) -> dict | None:
    """``report.png`` beside the report, as a headless browser draws it, when one is installed; what it drew (None
    without a browser). A browser that fails is a warning: the report itself is written."""
    import subprocess

    from components.evaluate.browser import screenshot_report

    try:
        drawn = screenshot_report(report_html)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as err:
        log.warning("the report could not be drawn: %s", err)
        return None
    return drawn and {key: drawn[key] for key in ("path", "images", "loaded", "svgs", "blank")}


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
