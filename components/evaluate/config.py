"""How to evaluate (``EvaluateConfig``), and the checks of its values that run-local makes before a run."""

from __future__ import annotations

import os
from dataclasses import dataclass

from components.evaluate.blessing import check_fraction
from components.params import EVALUATE


@dataclass(frozen=True)
class EvaluateConfig:
    """Args: examples_dir (the convert output), model_dir (the train output), output_dir (gets ``metrics.json``);
    min_accuracy, baseline and max_accuracy_drop decide the blessing. The baseline (empty: none) is the last blessed
    model: a train step output, an export step output, or its ``saved_model/`` folder as the Vertex AI Model
    Registry holds it (``gs://`` is read through Vertex AI's ``/gcs/`` mount). ``screenshot``: also draw the report
    in a headless browser into ``report.png`` beside it (``components.browser``). ``data_checks``: the
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


def check_baseline_model(baseline: str) -> str:
    """The baseline's local path, found and checked as the evaluate step will (a one-line error when nothing is
    there or it is no model), for run-local's ``--baseline-model`` before anything is written."""
    from components.evaluate.baseline import baseline_path, check_baseline

    path = os.path.abspath(baseline_path(baseline))
    check_baseline(path)
    return path
