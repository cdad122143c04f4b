"""The model artifact: the train step's output folder, which evaluate and export read.

It holds ``model.keras`` (the whole model), ``model.weights.h5`` (the weights alone, which any Keras backend loads:
export rebuilds the network on the CPU with TensorFlow from them, whatever backend trained it),
``model_config.json`` (how it was trained: architecture, image size, classes, backend, devices, precision),
``history.json`` (the curves, the epochs and how long they took) and ``reference_predictions.npz`` (the trained
model's probabilities on validation images, computed by the training backend, for export's cross-backend parity check).
A text model's artifact also holds ``vocabulary.txt``, the vocabulary its token ids index (export tokenises with it).
"""

from __future__ import annotations

import os

MODEL_FILE = "model.keras"
WEIGHTS_FILE = "model.weights.h5"
REFERENCE_FILE = "reference_predictions.npz"  # arrays: probabilities [N, classes], from the validation split in order


def load_model_config(model_dir: str) -> dict:
    """Reads ``model_config.json``; raises ``UsageError`` when ``model_dir`` is not a trained model, or one an older
    version of the pipeline trained."""
    from components.artifacts.records import MODEL_CONFIG

    return MODEL_CONFIG.read(model_dir)


def model_digest(model_dir: str) -> str:
    """sha256 of the trained weights: the model's identity, kept with its export (a cached train step gives the same
    file, so the same digest; any retraining gives another)."""
    import hashlib

    from components.storage import open_read

    digest = hashlib.sha256()
    with open_read(os.path.join(model_dir, WEIGHTS_FILE)) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
