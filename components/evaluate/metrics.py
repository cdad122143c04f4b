"""The figures of a model's answers on a split: accuracy, per-class precision / recall / F1 and the confusion matrix,
top-k accuracy, and each class's ranking curves (AU-PRC, AU-ROC, figures at confidence thresholds)."""

from __future__ import annotations

from collections.abc import Sequence


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
