"""Export for CPU serving: rebuild the model on TensorFlow with no distribution, load the trained weights (the codelab's
hand-off after TPU training, here across backends: weights trained on JAX load as they are), and write a SavedModel
with its TFLite files. ``run`` checks the inputs and hands the work to the model's modality: ``image.py`` (encoded
images in) or ``text.py`` (raw strings in); both build on ``common.py``.
"""

from __future__ import annotations

import importlib

from components.artifacts.exported import Exported
from components.artifacts.model import load_model_config
from components.export.common import ExportConfig, check_evaluation
from components.keras_backend import activate_backend
from components.modalities import check_examples_match, modality_of
from components.schema import read_stats
from components.storage import check_writable

# each modality's serving export: (module, function), imported once the inputs are checked (they import TensorFlow)
SERVING_EXPORTS = {
    "image": ("components.export.image", "export_image"),
    "text": ("components.export.text", "export_text"),
}


def run(config: ExportConfig) -> Exported:
    """Exports the SavedModel and the TFLite files, checks their parity with the trained model, writes the
    evaluation's report led by the served model's figure (with ``config.evaluation_dir``), and ``export.json``."""
    trained_config = load_model_config(config.model_dir)
    check_examples_match(trained_config, read_stats(config.examples_dir), config.model_dir, config.examples_dir)
    check_writable(config.output_dir, "--output")  # (the inputs checked before the slow TensorFlow import)
    if config.evaluation_dir:
        check_evaluation(config.evaluation_dir)
    activate_backend("tensorflow")  # the SavedModel and TFLite files are TensorFlow graphs, whatever trained it
    module, function = SERVING_EXPORTS[modality_of(trained_config).name]
    return getattr(importlib.import_module(module), function)(config)
