"""The baseline: the model in service (a train step output, or an exported SavedModel), found, checked for whether
it can be compared with the candidate, loaded, and judged on the candidate's examples."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from components.artifacts.evaluation import answered_counts
from components.artifacts.examples import Reading
from components.artifacts.model import ModelConfig
from components.cli import UsageError
from components.evaluate.metrics import classification_metrics, top_k_accuracy
from components.evaluate.predictions import predict_split
from components.modalities import Modality, modality_of
from components.storage import gcs_fuse_path

log = logging.getLogger(__name__)


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
    """The model in service, found but not loaded."""

    kind: str  # "trained" (a train step output) or "export" (an exported SavedModel)
    path: str  # the model.keras folder or the SavedModel folder, local or under /gcs/
    facts: dict  # its model_config.json (trained) or export.json (export): its modality, classes and input
    older: str = ""  # which other version of the pipeline made it, where one did: it is not compared

    @property
    def modality(self) -> Modality:
        return modality_of(self.facts)

    @property
    def class_names(self) -> list:
        return list(self.facts["class_names"])


def comparability(baseline: Baseline, candidate: Mapping) -> str:
    """Why the baseline cannot be compared with the candidate (``candidate``: its ``model_config.json``; "" when it
    can).

    The rule: a baseline is compared only when it predicts the same classes (in any order: its answers are
    reordered) of the same input. When a class was added, removed or renamed, the baseline's accuracy is over
    another task, so the candidate is judged on the value threshold alone and the reason says "baseline not
    comparable: classes differ" (a scheduled retraining over a grown dataset then still blesses, exports and
    registers a good model).
    """
    if baseline.older:
        return f"it was made by {baseline.older}"
    ours, class_names = modality_of(candidate), list(candidate["class_names"])
    if baseline.modality is not ours:
        return f"the baseline is {baseline.modality.a_model}, the candidate {ours.a_model}"
    if sorted(baseline.class_names) == sorted(class_names):
        return ours.baseline_differs(baseline.facts, candidate, baseline.kind)
    added = [name for name in class_names if name not in baseline.class_names]
    removed = [name for name in baseline.class_names if name not in class_names]
    changes = [f"{label} {', '.join(names)}" for label, names in (("new", added), ("gone", removed)) if names]
    return f"classes differ ({'; '.join(changes)})"


def check_baseline(baseline: str) -> Baseline:
    """Finds the baseline model without loading it; one-line errors when it is missing or not a model. One an older
    version of the pipeline made is found with a warning, and not compared (``comparability``)."""
    from components.artifacts.exported import Exported, find_saved_model
    from components.artifacts.records import EXPORT, MODEL_CONFIG

    path = baseline_path(baseline)
    found_export = find_saved_model(path)
    if found_export is None:
        if not MODEL_CONFIG.exists(path):
            raise UsageError(
                f"baseline {baseline} is not a trained or exported model: expected a train or export step output"
            )
        found = Baseline("trained", path, MODEL_CONFIG.read_any(path))
        older = ModelConfig.made_by(found.facts)
    else:
        saved_model, report = found_export
        folder = os.path.dirname(report)
        if not EXPORT.exists(folder):
            raise UsageError(
                f"baseline {baseline} has no {EXPORT.name} beside its SavedModel: pass a model this pipeline exported"
            )
        found = Baseline("export", saved_model, EXPORT.read_any(folder))
        older = Exported.made_by(found.facts)
    if older:
        log.warning(
            "baseline %s was made by %s: it is not compared; the value threshold alone decides", baseline, older
        )
        found = Baseline(found.kind, found.path, found.facts, older)
    return found


def load_baseline(baseline: Baseline):
    """The baseline as a callable from a batch of the examples' inputs to probabilities (as ``predict_split`` wants),
    loaded as its modality serves it (``Modality.load_baseline``)."""
    return baseline.modality.load_baseline(baseline.kind, baseline.path, baseline.facts)


def baseline_figures(
    baseline: Baseline, examples_dir: str, split: str, model_config: ModelConfig, y_true, k: int, reading: Reading
):
    """The baseline on the candidate's examples (``split`` of ``examples_dir``), its columns in this model's class
    order (the same classes, perhaps in another order): (its accuracy, for the blessing; its figures, for the report
    to set beside the candidate's; how often it gave each class)."""
    _, probabilities, _ = predict_split(load_baseline(baseline), examples_dir, split, reading)
    order = [baseline.class_names.index(name) for name in model_config.class_names]
    probabilities = probabilities[:, order]
    answers = probabilities.argmax(axis=-1)
    judged = classification_metrics(y_true, answers, model_config.class_names)
    return (
        float((answers == y_true).mean()),
        {
            "accuracy": judged["accuracy"],
            "per_class": judged["per_class"],
            "top_k_accuracy": {"k": k, "accuracy": top_k_accuracy(y_true, probabilities, k)},
        },
        answered_counts(judged["confusion_matrix"], judged["class_names"]),
    )
