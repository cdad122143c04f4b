"""The evaluate step as a lightweight KFP component: a thin wrapper over ``components.evaluate.core``."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output


def evaluate(
    examples: Input[Dataset],
    model: Input[Model],
    metrics: Output[Metrics],
    confusion: Output[ClassificationMetrics],
    evaluation: Output[Artifact],
    report: Output[HTML],
) -> float:
    """Evaluates on the test split; logs KFP Metrics and ClassificationMetrics, publishes the HTML report (shown by
    the Vertex AI console); returns the test accuracy."""
    import shutil

    from components.cli import configure_logging
    from components.evaluate.core import EvaluateConfig, run

    configure_logging()
    result = run(EvaluateConfig(examples_dir=examples.path, model_dir=model.path, output_dir=evaluation.path))
    metrics.log_metric("accuracy", result["accuracy"])
    metrics.log_metric("num_examples", result["num_examples"])
    for name, figures in result["per_class"].items():
        metrics.log_metric(f"precision_{name}", figures["precision"])
        metrics.log_metric(f"recall_{name}", figures["recall"])
    confusion.log_confusion_matrix(result["class_names"], result["confusion_matrix"])
    shutil.copyfile(result["report_html"], report.path)
    return result["accuracy"]


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(evaluate, base_image=base_image, install_kfp_package=False)
