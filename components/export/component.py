"""The export step as a lightweight KFP component: a thin wrapper over ``components.export.core``."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output


def export(model: Input[Model], examples: Input[Dataset], exported_model: Output[Model]) -> float:
    """Exports a CPU SavedModel from the trained weights; returns its argmax agreement with the trained model."""
    from components.cli import configure_logging
    from components.export.core import ExportConfig, run

    configure_logging()
    report = run(ExportConfig(model_dir=model.path, examples_dir=examples.path, output_dir=exported_model.path))
    exported_model.metadata.update({"framework": "tensorflow", "format": "saved_model", "parity": report["parity"]})
    return float(report["parity"]["argmax_agreement"] or 0.0)


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(export, base_image=base_image, install_kfp_package=False)
