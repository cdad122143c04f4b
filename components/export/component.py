"""The export step as a lightweight KFP component: a thin wrapper over ``components.export.core``."""

from typing import List

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Model, Output


def export(
    model: Input[Model],
    examples: Input[Dataset],
    evaluation: Input[Artifact],
    exported_model: Output[Model],
    report: Output[HTML],
    export_formats: List[str],
) -> str:
    """Exports a CPU SavedModel and the TFLite files of ``export_formats`` (float, int8) from the trained weights;
    records the parity with the trained model and each format's size and accuracy in the artifact's metadata;
    publishes the evaluation's report (``evaluation``, the evaluate step's output) led by the served model's test
    accuracy; returns the export's URI."""
    import shutil

    from components.export.core import ExportConfig, run
    from components.step_server import start_step

    start_step()
    exported = run(
        ExportConfig(
            model_dir=model.path,
            examples_dir=examples.path,
            output_dir=exported_model.path,
            evaluation_dir=evaluation.path,
            formats=tuple(export_formats),
        )
    )
    shutil.copyfile(exported.report_html, report.path)
    exported_model.metadata.update(
        {
            "framework": "tensorflow",
            "format": "saved_model",
            "parity": exported.parity,
            "formats": {
                name: {"bytes": e["bytes"], "test_accuracy": e["test_accuracy"]} for name, e in exported.formats.items()
            },
        }
    )
    return exported_model.uri


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(export, base_image=base_image, install_kfp_package=False)
