"""The evaluate step as lightweight KFP components: a thin wrapper over ``components.evaluate.core``, and the step
a run takes instead of export and registration when the model is not blessed."""

from google_cloud_pipeline_components.types import artifact_types
from kfp import dsl
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output, OutputPath


def evaluate(
    examples: Input[Dataset],
    model: Input[Model],
    metrics: Output[Metrics],
    confusion: Output[ClassificationMetrics],
    evaluation: Output[Artifact],
    vertex_evaluation: Output[artifact_types.ClassificationMetrics],
    report: Output[HTML],
    test_accuracy: OutputPath(float),
    data_checks: Input[Artifact],
    min_accuracy: float,
    max_accuracy_drop: float,
    baseline: str,
) -> bool:
    """Evaluates on the test split (and the baseline, if any); logs KFP Metrics and ClassificationMetrics, publishes
    the HTML report (shown by the Vertex AI console), with the data checks (``data_checks``, the check-data step's
    output), and ``vertex_evaluation``, the figures as Google Cloud Pipeline Components' evaluation import reads them
    (a ``google.ClassificationMetrics``); returns the blessing, which gates export and registration."""
    given = dict(locals())  # (the parameters, read before anything else is named here)
    import json
    import shutil

    from components.artifacts.evaluation import sliced_metrics
    from components.evaluate.config import EvaluateConfig
    from components.evaluate.core import run
    from components.params import EVALUATE
    from components.step_server import start_step
    from components.storage import write_json

    start_step()
    result = run(
        EvaluateConfig(
            examples_dir=examples.path,
            model_dir=model.path,
            output_dir=evaluation.path,
            data_checks=data_checks.path,
            **{name: given[name] for name in EVALUATE},
        )
    )
    blessing = result.blessing
    metrics.log_metric("accuracy", result.accuracy)
    metrics.log_metric(f"top_{result.top_k_accuracy['k']}_accuracy", result.top_k_accuracy["accuracy"])
    metrics.log_metric("num_examples", result.num_examples)
    metrics.log_metric("blessed", int(blessing["blessed"]))
    if blessing.get("baseline_accuracy") is not None:
        metrics.log_metric("baseline_accuracy", blessing["baseline_accuracy"])
    if (result.prediction_mix or {}).get("value") is not None:
        metrics.log_metric("prediction_mix", result.prediction_mix["value"])
    for name, figures in result.per_class.items():
        for figure in ("precision", "recall", "f1"):
            metrics.log_metric(f"{figure}_{name}", figures[figure])
    confusion.log_confusion_matrix(result.class_names, result.confusion_matrix)
    # the ROC curve over every class at once (one-vs-rest, micro average), at Vertex AI's confidence thresholds
    curve = result.ranking["thresholds"]
    confusion.log_roc_curve(
        [row["fpr"] for row in curve], [row["recall"] for row in curve], [row["threshold"] for row in curve]
    )
    evaluation.metadata.update({"blessed": blessing["blessed"], "reasons": blessing["reasons"]})
    ranking = result.ranking
    vertex_evaluation.metadata.update(
        {
            "accuracy": result.accuracy,
            "auPrc": ranking["au_prc"],
            "auRoc": ranking["au_roc"],
            "logLoss": ranking["log_loss"],
        }
    )
    with open(vertex_evaluation.path, "w", encoding="utf-8") as handle:
        json.dump(sliced_metrics(result), handle)
    shutil.copyfile(result.report_html, report.path)
    for logged in (metrics, confusion):  # (kfp.local's cache takes an output without a file for a lost one)
        write_json(logged.path, logged.metadata)
    with open(test_accuracy, "w", encoding="utf-8") as handle:
        handle.write(repr(float(result.accuracy)))
    return bool(blessing["blessed"])


def not_blessed(evaluation: Input[Artifact]) -> str:
    """The branch of a run whose model is not blessed: says why; nothing is exported or registered, and the run
    still succeeds. Returns "" (no exported model)."""
    from components.artifacts.evaluation import Evaluation

    metrics = Evaluation.read(evaluation.path)
    import logging

    from components.artifacts.evaluation import export_anyway
    from components.cli import start_step

    start_step()  # (a warning: on the terminal under run-local, in Cloud Logging on Vertex AI)
    anyway = export_anyway(metrics.model_dir, metrics.examples_dir, evaluation.path)
    logging.getLogger(__name__).warning(
        "NOT blessed: " + "; ".join(metrics.blessing["reasons"]) + ". Nothing was exported or registered; the "
        f"serving model stays as it was. To export this model all the same: {anyway}"
    )
    return ""


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(evaluate, base_image=base_image, install_kfp_package=False)


def make_not_blessed_component(base_image: str):
    return dsl.component(not_blessed, base_image=base_image, install_kfp_package=False)
