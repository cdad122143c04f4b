"""The exported-model artifact: the export step's output folder, which evaluate (as a baseline), predict and the
Model Registry read.

It holds ``saved_model/`` (the serving SavedModel), ``model_float.tflite``, ``model_int8.tflite`` and
``export.json`` (formats, sizes, accuracies, parity, class names and image size).
"""

from __future__ import annotations

import os

SAVED_MODEL_DIR = "saved_model"
EXPORT_FILE = "export.json"
TFLITE_FILES = {"tflite_float": "model_float.tflite", "tflite_int8": "model_int8.tflite"}


def version_folders(model: str) -> list[str]:
    """Where a registered version keeps its own files (its data statistics, its evaluation), for the model at
    ``model``: that folder, and, for the ``saved_model/`` folder the Model Registry names, the version's folder
    above it."""
    folder = model.rstrip("/")
    return [folder, folder.rsplit("/", 1)[0]] if folder.endswith(f"/{SAVED_MODEL_DIR}") else [folder]


def find_saved_model(path: str) -> tuple[str, str] | None:
    """(the SavedModel folder, the ``export.json`` beside it) of an export step output or of its ``saved_model/``
    folder; None when neither holds a SavedModel."""
    for saved_model in (os.path.join(path, SAVED_MODEL_DIR), path):
        if os.path.isfile(os.path.join(saved_model, "saved_model.pb")):
            return saved_model, os.path.join(os.path.dirname(os.path.abspath(saved_model)), EXPORT_FILE)
    return None
