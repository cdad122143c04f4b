"""The evaluation artifact: the evaluate step's output folder, which the register step, run-local's summary and the
Model Registry's imported evaluation read.

It holds ``metrics.json`` (accuracy, top-k accuracy, per-class figures, the confusion matrix, ``ranking``, the
blessing and its reasons) and ``report.html`` (with ``--screenshot``, ``report.png``). Its figures in Vertex AI's
classification metrics schema are what the register step imports and, in the DAG, the evaluate step's
``vertex_evaluation`` output (``sliced_metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from components.artifacts.records import METRICS, Facts, Record

REPORT_FILE = "report.html"
SCREENSHOT_FILE = "report.png"
# the schema of a classification model evaluation: what the console's Evaluate tab draws
CLASSIFICATION_METRICS_SCHEMA = "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml"


@dataclass(frozen=True)
class Evaluation(Facts):
    """``metrics.json``: how the model answered on one split of its examples, and whether it is blessed.

    - The figures (``components.evaluate.metrics``): ``accuracy``, ``num_examples``, ``class_names`` (in index
      order), ``per_class`` (precision, recall, F1, support), ``confusion_matrix`` (rows: true, columns: predicted),
      ``top_k_accuracy``, ``ranking`` (log loss, areas under the curves, the figures at each confidence threshold);
      images: ``client_files``, the accuracy on the same examples' own files.
    - What was judged: ``split``, ``model_name``, ``model_dir``, ``examples_dir``, ``counts`` and ``small_classes``
      (the examples'), ``training`` (the model config's facts the report leads with).
    - The verdict: ``blessing`` (``blessed``, ``reasons``, the baseline's accuracy and whether it was comparable);
      with a baseline it could compare, ``baseline_metrics`` and ``prediction_mix``; ``data_checks``, where the
      run's were given.
    - ``misclassified`` (at most the report's), ``report_html`` and, with ``--screenshot``, ``report_screenshot``.

    It reads as the mapping of its figures too (``Facts``)."""

    RECORD: ClassVar[Record] = METRICS

    accuracy: float
    num_examples: int
    class_names: list[str]
    per_class: dict[str, dict]
    confusion_matrix: list[list[int]]
    top_k_accuracy: dict
    ranking: dict
    split: str
    model_name: str
    model_dir: str
    examples_dir: str
    counts: dict[str, int]
    training: dict
    blessing: dict
    report_html: str
    small_classes: dict[str, dict[str, int]] = field(default_factory=dict)
    misclassified: list[dict] = field(default_factory=list)
    client_files: dict | None = None
    baseline_metrics: dict | None = None
    prediction_mix: dict | None = None
    data_checks: dict | None = None
    report_screenshot: dict | None = None


def export_anyway(model_dir: str, examples_dir: str, evaluation_dir: str) -> str:
    """The command that exports a model that was not blessed (the train output ``model_dir``, judged on
    ``examples_dir`` by the evaluation in ``evaluation_dir``) into ``exported-anyway`` beside the evaluation, with its
    report led by what the export serves: the same command in the step's log and in run-local's summary."""
    import os
    import shlex

    output = os.path.join(os.path.dirname(evaluation_dir.rstrip("/")), "exported-anyway")
    folders = (model_dir, examples_dir, output, evaluation_dir)
    return "python -m components.export --model-dir {} --examples {} --output {} --evaluation {}".format(
        *map(shlex.quote, folders)
    )


def vertex_evaluation(metrics: Evaluation) -> tuple[dict, list[dict]]:
    """Evaluate's ``metrics.json`` as Vertex AI's classification evaluation (``metrics``, ``metricsSchemaUri``) and
    one slice per class (the console's per-label figures): confusion matrix, areas under the precision-recall and
    ROC curves, log loss, and the figures at each confidence threshold."""

    def confidence(rows: list[dict]) -> list[dict]:
        return [
            {
                "confidenceThreshold": row["threshold"],
                "precision": row["precision"],
                "recall": row["recall"],
                "f1Score": row["f1"],
                "falsePositiveRate": row["fpr"],
                "precisionAt1": row["precision_at_1"],
                "recallAt1": row["recall_at_1"],
                "f1ScoreAt1": row["f1_at_1"],
                "falsePositiveRateAt1": row["fpr_at_1"],
                "truePositiveCount": str(row["tp"]),
                "falsePositiveCount": str(row["fp"]),
                "falseNegativeCount": str(row["fn"]),
                "trueNegativeCount": str(row["tn"]),
            }
            for row in rows
        ]

    ranking = metrics.ranking
    specs = [{"id": str(index), "displayName": name} for index, name in enumerate(metrics.class_names)]
    overall = {
        "auPrc": ranking["au_prc"],
        "auRoc": ranking["au_roc"],
        "logLoss": ranking["log_loss"],
        "confidenceMetrics": confidence(ranking["thresholds"]),
        "confusionMatrix": {"annotationSpecs": specs, "rows": metrics.confusion_matrix},
    }
    evaluation = {"metricsSchemaUri": CLASSIFICATION_METRICS_SCHEMA, "metrics": overall}
    slices = [
        {
            "slice": {"dimension": "annotationSpec", "value": name},
            "metricsSchemaUri": CLASSIFICATION_METRICS_SCHEMA,
            "metrics": {
                "auPrc": figures["au_prc"],
                "auRoc": figures["au_roc"],
                "confidenceMetrics": confidence(figures["thresholds"]),
            },
        }
        for name, figures in ranking["per_class"].items()
    ]
    return evaluation, slices


def sliced_metrics(metrics: Evaluation) -> dict:
    """``metrics.json`` as the file of a ``google.ClassificationMetrics`` artifact, the evaluate step's
    ``vertex_evaluation`` output: ``slicedMetrics``, the whole test split first, then one slice per class, each
    figure under ``classification``. Google Cloud Pipeline Components' evaluation import
    (``ModelImportEvaluationOp``, its ``classification_metrics`` input) reads it as it is."""
    evaluation, slices = vertex_evaluation(metrics)
    whole = {"singleOutputSlicingSpec": {}, "metrics": {"classification": evaluation["metrics"]}}
    per_class = [
        {"singleOutputSlicingSpec": one["slice"], "metrics": {"classification": one["metrics"]}} for one in slices
    ]
    return {"slicedMetrics": [whole, *per_class]}


def answered_counts(matrix: list[list[int]], class_names: list[str]) -> dict[str, int]:
    """How often a model gave each class as its answer: the sums of its confusion ``matrix``'s columns (rows: true,
    columns: predicted)."""
    return {name: int(sum(row[index] for row in matrix)) for index, name in enumerate(class_names)}


def keep_with_model(evaluation_dir: str, version_dir: str) -> None:
    """Writes the ``metrics.json`` of ``evaluation_dir`` (an evaluate output) into ``version_dir`` (a registered
    version's folder, beside the export), as its record reads it, so that a later run finds how the model in service
    answered on its own evaluation split; a one-line error when it holds none or one this code does not read."""
    Evaluation.read(evaluation_dir).write(version_dir)


def kept_evaluation(model: str) -> Evaluation | None:
    """The evaluation a registered version keeps (``keep_with_model``), for the model at ``model``: a version's
    folder or the SavedModel folder in it, which the Model Registry names; None when there is none (an export or
    train output, a version registered before it was kept), and, with a warning, when another version of the pipeline
    made it or it lacks a field."""
    from components.artifacts.exported import version_folders

    for place in version_folders(model):
        if (found := Evaluation.read_current(place)) is not None:
            return found
    return None
