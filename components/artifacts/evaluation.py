"""The evaluation artifact: the evaluate step's output folder, which the register step, run-local's summary and the
Model Registry's imported evaluation read.

It holds ``metrics.json`` (accuracy, top-k accuracy, per-class figures, the confusion matrix, ``ranking``, the
blessing and its reasons) and ``report.html`` (with ``--screenshot``, ``report.png``). Its figures in Vertex AI's
classification metrics schema are what the register step imports and, in the DAG, the evaluate step's
``vertex_evaluation`` output (``sliced_metrics``).
"""

from __future__ import annotations

from components.artifacts.records import METRICS

REPORT_FILE = "report.html"
SCREENSHOT_FILE = "report.png"
# the schema of a classification model evaluation: what the console's Evaluate tab draws
CLASSIFICATION_METRICS_SCHEMA = "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml"


def export_anyway(metrics: dict, output: str, evaluation_dir: str) -> str:
    """The command that exports a model that was not blessed, the one these ``metrics`` (in ``evaluation_dir``)
    judged, into ``output``, with the evaluation's report led by what the export serves."""
    import shlex

    folders = (metrics["model_dir"], metrics["examples_dir"], output, evaluation_dir)
    return "python -m components.export --model-dir {} --examples {} --output {} --evaluation {}".format(
        *map(shlex.quote, folders)
    )


def vertex_evaluation(metrics: dict) -> tuple[dict, list[dict]]:
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

    ranking = metrics["ranking"]
    specs = [{"id": str(index), "displayName": name} for index, name in enumerate(metrics["class_names"])]
    overall = {
        "auPrc": ranking["au_prc"],
        "auRoc": ranking["au_roc"],
        "logLoss": ranking["log_loss"],
        "confidenceMetrics": confidence(ranking["thresholds"]),
        "confusionMatrix": {"annotationSpecs": specs, "rows": metrics["confusion_matrix"]},
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


def sliced_metrics(metrics: dict) -> dict:
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


def answered_counts(metrics: dict) -> dict[str, int]:
    """How often the evaluated model gave each class as its answer on its evaluation split: the sums of the
    confusion matrix's columns (rows: true, columns: predicted)."""
    matrix = metrics["confusion_matrix"]
    return {name: int(sum(row[index] for row in matrix)) for index, name in enumerate(metrics["class_names"])}


def keep_with_model(evaluation_dir: str, version_dir: str) -> None:
    """Copies ``metrics.json`` from ``evaluation_dir`` (an evaluate output) into ``version_dir`` (a registered
    version's folder, beside the export), so that a later run finds how the model in service answered on its own
    evaluation split; a one-line error when it holds none."""
    METRICS.write(version_dir, METRICS.read(evaluation_dir))


def kept_evaluation(model: str) -> dict | None:
    """The evaluation a registered version keeps (``keep_with_model``), for the model at ``model``: a version's
    folder or the SavedModel folder in it, which the Model Registry names; None when there is none (an export or
    train output, a version registered before it was kept, or by an older version of the pipeline)."""
    from components.artifacts.exported import version_folders

    for place in version_folders(model):
        if (found := METRICS.read_current(place)) is not None:
            return found
    return None
