"""The export step as a lightweight KFP component: a thin wrapper over ``components.export.core``."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output


def export(model: Input[Model], examples: Input[Dataset], exported_model: Output[Model]) -> str:
    """Exports a CPU SavedModel (and TFLite float and int8) from the trained weights; records the parity with the
    trained model and each format's size and accuracy in the artifact's metadata; returns the export's URI."""
    from components.cli import start_step
    from components.export.core import ExportConfig, run

    start_step()
    report = run(ExportConfig(model_dir=model.path, examples_dir=examples.path, output_dir=exported_model.path))
    exported_model.metadata.update(
        {
            "framework": "tensorflow",
            "format": "saved_model",
            "parity": report["parity"],
            "formats": {
                name: {"bytes": e["bytes"], "test_accuracy": e["test_accuracy"]}
                for name, e in report["formats"].items()
            },
        }
    )
    return exported_model.uri


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(export, base_image=base_image, install_kfp_package=False)
