"""Prediction on the CPU, the codelab's last step: the exported SavedModel answers for image files.

Each image is decoded here first (every format the conversion reads, EXIF orientation applied) and handed to the
``serving_default`` signature as PNG bytes, which resizes it exactly as the conversion did. An image that cannot be
decoded gets a one-line error naming it; the others are still answered.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass

from components.artifacts.exported import EXPORT_FILE, find_saved_model
from components.cli import UsageError, one_line


@dataclass
class Answer:
    path: str
    top: list[tuple[str, float]]  # (label, probability), most likely first

    def line(self) -> str:
        return f"{self.path}: " + ", ".join(f"{label} {probability:.3f}" for label, probability in self.top)


def locate_export(model: str) -> tuple[str, list[str]]:
    """(SavedModel dir or .tflite file, class names) from an export dir (``saved_model/`` + ``export.json``), a
    SavedModel dir, or a TFLite file (its packed labels, or those of the export.json beside it)."""
    if model.endswith(".tflite") and os.path.isfile(model):
        from components.export.tflite_metadata import packed_labels

        with open(model, "rb") as handle:  # the labels packed in the file (its metadata), else its export's
            packed = packed_labels(handle.read())
        return model, packed or _class_names(os.path.join(os.path.dirname(os.path.abspath(model)), EXPORT_FILE))
    if not os.path.exists(model):
        raise UsageError(f"model {model} does not exist: pass the export step's output (or its saved_model/)")
    found = find_saved_model(model)
    if found is not None:
        saved_model, report = found
        return saved_model, _class_names(report)
    raise UsageError(
        f"model {model} is not an export: expected the export step's output (saved_model/ and export.json), "
        "a SavedModel folder or a .tflite file"
    )


def _class_names(report: str) -> list[str]:
    if not os.path.isfile(report):
        return []
    with open(report, encoding="utf-8") as handle:
        return json.load(handle).get("class_names", [])


def check_top(top: int) -> None:
    if top < 1:
        raise UsageError(f"--top {top} must be at least 1")


def read_images(images: list[str]) -> tuple[list, list[str]]:
    """(path, decoded RGB pixels) for each image that can be used (every format the conversion reads, EXIF
    applied), and a one-line error for each other."""
    from components.decoding import UnusableImageError, decode_rgb_image

    readable, errors = [], []
    for path in images:
        try:
            with open(path, "rb") as handle:
                readable.append((path, decode_rgb_image(handle.read())))
        except (OSError, UnusableImageError) as err:
            errors.append(f"image {path} cannot be used: {one_line(err)}")
    return readable, errors


def top_labels(path: str, probabilities, class_names: list[str], top: int) -> Answer:
    """The ``top`` most probable labels of one image (class ids when no names are known)."""
    import numpy as np

    row = np.asarray(probabilities, dtype=np.float64)
    names = class_names or [str(i) for i in range(len(row))]
    return Answer(path, [(names[i], float(row[i])) for i in row.argsort()[::-1][:top]])


def predict(model: str, images: list[str], top: int = 3) -> tuple[list[Answer], list[str]]:
    """Top-``top`` labels for each readable image, and one-line errors for the others."""
    check_top(top)
    saved_model, class_names = locate_export(model)
    readable, errors = read_images(images)
    if not readable:
        return [], errors
    decoded = [pixels for _, pixels in readable]
    if saved_model.endswith(".tflite"):
        probabilities = _tflite_probabilities(saved_model, decoded)
    else:
        import tensorflow as tf

        serving = tf.saved_model.load(saved_model).signatures["serving_default"]
        batch = tf.constant([png_bytes(pixels) for pixels in decoded])
        probabilities = serving(image_bytes=batch)["probabilities"].numpy()
    answers = [top_labels(path, row, class_names, top) for (path, _), row in zip(readable, probabilities, strict=True)]
    return answers, errors


def png_bytes(pixels) -> bytes:
    """Decoded pixels as lossless PNG bytes, for the SavedModel's ``image_bytes`` input."""
    buffer = io.BytesIO()
    pixels.save(buffer, format="PNG")
    return buffer.getvalue()


def _tflite_probabilities(path: str, decoded: list):
    """The TFLite model's probabilities for decoded RGB images, each resized as the conversion does."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from components.export.core import tflite_predict
    from components.imaging import fill_square_pillow

    with open(path, "rb") as handle:
        content = handle.read()
    interpreter = Interpreter(model_content=content)
    size = int(interpreter.get_input_details()[0]["shape"][1])
    images = [np.asarray(fill_square_pillow(pixels, size), dtype=np.uint8) for pixels in decoded]
    return tflite_predict(content, np.stack(images))
