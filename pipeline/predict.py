"""Prediction on the CPU, the codelab's last step: the exported SavedModel answers for image files, or for texts.

Each image file is sent to the ``serving_default`` signature as it is, as a client sends it: the serving graph
decodes and resizes it as the conversion did (``docs/serving.md``). A format the serving graph refuses (WebP) is
decoded here, as the conversion does, and sent as lossless PNG. Every file is also decoded here first, so that an
image that cannot be used gets a one-line error naming it; the others are still answered. A text model's SavedModel
takes the texts as they are (it tokenises them itself); its TFLite files take the ids ``components.tokenizing`` gives
with the vocabulary packed in them.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

from components.artifacts.exported import (
    SAVED_MODEL_DIR,
    check_export,
    export_class_names,
    find_saved_model,
    read_export,
)
from components.cli import UsageError, one_line
from components.modalities import modality_of, named


@dataclass
class Answer:
    path: str  # the image or text file ("" for a text given inline)
    top: list[tuple[str, float]]  # (label, probability), most likely first
    text: str | None = None  # a text given inline (--text)

    def line(self) -> str:
        shown = self.path or repr(self.text if len(self.text or "") <= 60 else self.text[:57] + "...")
        return f"{shown}: " + ", ".join(f"{label} {probability:.3f}" for label, probability in self.top)


def locate_export(model: str) -> tuple[str, list[str]]:
    """(SavedModel dir or .tflite file, class names) from an export dir (``saved_model/`` + ``export.json``), a
    SavedModel dir, or a TFLite file (its packed labels, or those of the export.json beside it)."""
    if model.endswith(".tflite") and os.path.isfile(model):
        from components.artifacts.tflite import packed_labels

        with open(model, "rb") as handle:  # the labels packed in the file (its metadata), else its export's
            packed = packed_labels(handle.read())
        return model, packed or export_class_names(os.path.dirname(os.path.abspath(model)))
    if not os.path.exists(model):
        raise UsageError(f"model {model} does not exist: pass the export step's output (or its saved_model/)")
    found = find_saved_model(model)
    if found is not None:
        saved_model, report = found
        if os.path.isfile(report) or os.path.isdir(os.path.join(model, SAVED_MODEL_DIR)):
            check_export(os.path.dirname(report))  # an export: finished and intact, as its export.json records
        return saved_model, export_class_names(saved_model)
    raise UsageError(
        f"model {model} is not an export: expected the export step's output (saved_model/ and export.json), "
        "a SavedModel folder or a .tflite file"
    )


TEXT_FILES = "texts are UTF-8 .txt files"


def files_under(paths: list[str], suffixes: tuple[str, ...], kind: str, what: str):
    """The ``paths`` as given, each folder among them standing for the files under it, at any depth, whose names end
    in ``suffixes`` (in any case), in the order of their paths, hidden ones (``.name``) left out. Returns (the files,
    a note for each folder with other files, which are left out, and a one-line error for each folder without any;
    ``what`` says which files a folder's ``kind`` files are)."""
    from components.storage import glob

    files, notes, errors = [], [], []
    for path in paths:
        if not os.path.isdir(path):
            files.append(path)
            continue
        inside = [os.path.relpath(found, path) for found in glob(path.rstrip("/") + "/**")]  # (sorted)
        visible = [name for name in inside if not any(part.startswith(".") for part in name.split(os.sep))]
        found = [os.path.join(path, name) for name in visible if name.lower().endswith(suffixes)]
        others = [name for name in visible if not name.lower().endswith(suffixes)]
        if not found:
            errors.append(f"folder {path} holds no {kind} file: {what}")
            continue
        files += found
        if others:
            listed = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            notes.append(
                f"folder {path}: {plural(len(found), kind + ' file')}; {plural(len(others), 'other file')} left out "
                f"({listed}): {what}"
            )
    return files, notes, errors


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def check_top(top: int) -> None:
    if top < 1:
        raise UsageError(f"--top {top} must be at least 1")


def read_images(images: list[str]) -> tuple[list, list[str]]:
    """(path, the file's bytes) for each image that can be used (every format the conversion reads), and a one-line
    error for each other."""
    from components.decoding import UnusableImageError, decode_rgb_image

    readable, errors = [], []
    for path in images:
        try:
            with open(path, "rb") as handle:
                content = handle.read()
            decode_rgb_image(content)  # the conversion's own checks, for their one-line reasons
            readable.append((path, content))
        except (OSError, UnusableImageError) as err:
            errors.append(f"image {path} cannot be used: {one_line(err)}")
    return readable, errors


def sent_bytes(content: bytes, size: int, limit: int | None = None, raw_files: bool = True) -> bytes:
    """What ``serving_default`` is sent for one image file: the file itself, as a client sends it, where the serving
    graph decodes it as the conversion does and it is at most ``limit`` bytes; otherwise (a WebP, a photo too large
    for one online request, or any file for a SavedModel without the ``export.json`` that says its graph decodes as
    the conversion does: ``raw_files`` False) the square the conversion makes of it, ``size`` pixels, as lossless
    PNG, which every serving graph takes exactly."""
    from components.decoding import conversion_square
    from components.imaging import unserved_reason

    if raw_files and unserved_reason(content) is None and (limit is None or len(content) <= limit):
        return content
    return png_bytes(conversion_square(content, size))


def top_labels(path: str, probabilities, class_names: list[str], top: int) -> Answer:
    """The ``top`` most probable labels of one image (class ids when no names are known)."""
    import numpy as np

    row = np.asarray(probabilities, dtype=np.float64)
    names = class_names or [str(i) for i in range(len(row))]
    return Answer(path, [(names[i], float(row[i])) for i in row.argsort()[::-1][:top]])


# image files read, decoded and answered at a time: the memory a request takes is a batch's, whatever its count
PREDICT_BATCH = 16


def predict(model: str, images: list[str], top: int = 3) -> tuple[list[Answer], list[str]]:
    """Top-``top`` labels for each readable image, and one-line errors for the others, ``PREDICT_BATCH`` files at
    a time."""
    check_top(top)
    saved_model, class_names = locate_export(model)
    named("image").check_served(named(export_modality(saved_model)), model)
    answer = _tflite_answerer(saved_model) if saved_model.endswith(".tflite") else _serving_answerer(saved_model)
    answers, errors = [], []
    for start in range(0, len(images), PREDICT_BATCH):
        readable, failed = read_images(images[start : start + PREDICT_BATCH])
        errors += failed
        if readable:
            probabilities = answer([content for _, content in readable])
            answers += [
                top_labels(path, row, class_names, top) for (path, _), row in zip(readable, probabilities, strict=True)
            ]
    return answers, errors


def load_saved_model(saved_model: str):
    """The SavedModel at ``saved_model``, loaded; a one-line error naming it when it cannot be (a missing or
    truncated file)."""
    import tensorflow as tf

    try:
        return tf.saved_model.load(saved_model)
    except (OSError, ValueError, tf.errors.OpError) as err:
        raise UsageError(f"model {saved_model} cannot be loaded: {one_line(err)[:300]}; export it again") from None


def _serving_answerer(saved_model: str):
    """contents -> probabilities through the SavedModel's ``serving_default``, as a client sends the files."""
    import tensorflow as tf

    signatures = load_saved_model(saved_model).signatures
    # the model's size, from the pixels serving_images takes: [None, size, size, 3]
    size = int(signatures["serving_images"].structured_input_signature[1]["images"].shape[1])
    raw_files = read_export(saved_model) is not None  # (a SavedModel on its own: the conversion's squares)

    def answer(contents: list[bytes]):
        batch = tf.constant([sent_bytes(content, size, raw_files=raw_files) for content in contents])
        return signatures["serving_default"](image_bytes=batch)["probabilities"].numpy()

    return answer


def png_bytes(pixels) -> bytes:
    """Decoded pixels as lossless PNG bytes, for the SavedModel's ``image_bytes`` input."""
    buffer = io.BytesIO()
    pixels.save(buffer, format="PNG")
    return buffer.getvalue()


def tflite_content(path: str) -> tuple[bytes, dict]:
    """The bytes of the TFLite file at ``path``, once an interpreter takes them, and what its input takes (its
    ``get_input_details()``, shape and dtype); a one-line error naming it when it is damaged (a truncated file)."""
    from ai_edge_litert.interpreter import Interpreter

    with open(path, "rb") as handle:
        content = handle.read()
    try:
        return content, Interpreter(model_content=content).get_input_details()[0]
    except (ValueError, RuntimeError) as err:
        raise UsageError(f"model {path} cannot be loaded: {one_line(err)[:300]}; export it again") from None


def _tflite_answerer(path: str):
    """contents -> the TFLite model's probabilities, each image decoded and resized here as the conversion does
    (the TFLite input is decoded, upright RGB pixels: the caller's work)."""
    import numpy as np

    from components.artifacts.tflite import tflite_predict
    from components.decoding import conversion_square

    content, given = tflite_content(path)
    size = int(given["shape"][1])

    def answer(contents: list[bytes]):
        images = [np.asarray(conversion_square(image, size), dtype=np.uint8) for image in contents]
        return tflite_predict(content, np.stack(images))

    return answer


TEXT_MODEL = "text"


def export_modality(model: str) -> str:
    """ "text" or "image": what an export (its ``export.json``) or a TFLite file (int32 ids in) takes."""
    if model.endswith(".tflite"):
        import numpy as np

        return TEXT_MODEL if tflite_content(model)[1]["dtype"] == np.int32 else "image"
    found = find_saved_model(model)
    if found and (report := read_export(found[0])) is not None:
        return modality_of(report).name
    if found:  # a SavedModel alone: what its serving_default takes
        inputs = load_saved_model(found[0]).signatures["serving_default"].structured_input_signature[1]
        return TEXT_MODEL if "text" in inputs else "image"
    return "image"


def read_texts(texts: list[str], files: list[str]) -> tuple[list[Answer], list[str]]:
    """(an empty answer per text, given inline or read from a UTF-8 file, with the text), and a one-line error for
    each file that cannot be read and each empty text (the conversion quarantines those: nothing to classify)."""
    readable, errors = [], []
    for number, text in enumerate(texts, start=1):
        if text.strip():
            readable.append(Answer("", [], text))
        else:
            errors.append(f"--text {number} is empty: nothing to classify")
    for path in files:
        try:
            with open(path, encoding="utf-8-sig") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as err:
            errors.append(f"text file {path} cannot be read: {one_line(err)} (pass a UTF-8 text file)")
            continue
        if text.strip():
            readable.append(Answer(path, [], text))
        else:
            errors.append(f"text file {path} is empty: nothing to classify")
    return readable, errors


def predict_texts(model: str, texts: list[str], files: list[str], top: int = 3) -> tuple[list[Answer], list[str]]:
    """Top-``top`` labels for each text of a text model's export, and one-line errors for unreadable files."""
    check_top(top)
    exported, class_names = locate_export(model)
    named("text").check_served(named(export_modality(exported)), model)
    answers, errors = read_texts(texts, files)
    if not answers:
        return [], errors
    strings = [answer.text for answer in answers]
    if exported.endswith(".tflite"):
        probabilities = _tflite_text_probabilities(exported, strings)
    else:
        import tensorflow as tf

        serving = load_saved_model(exported).signatures["serving_default"]
        probabilities = serving(text=tf.constant(strings))["probabilities"].numpy()
    for answer, row in zip(answers, probabilities, strict=True):
        answer.top = top_labels(answer.path, row, class_names, top).top
        if answer.path:
            answer.text = None  # a file's answer names the file
    return answers, errors


def _tflite_text_probabilities(path: str, texts: list[str]):
    """A text TFLite model's probabilities: the texts tokenised here with the vocabulary and standardisation packed in
    the file (or the ``vocabulary.txt`` and ``standardization.txt`` beside it; a file from before the standardisation
    was packed stripped punctuation)."""
    import numpy as np

    from components.artifacts.tflite import packed_file, tflite_token_predict
    from components.tokenizing import (
        STANDARDIZATION_FILE,
        VOCABULARY_FILE,
        parse_vocabulary,
        standardization_of,
        token_ids,
    )

    content, given = tflite_content(path)

    def packed_or_beside(name: str) -> bytes | None:
        found = packed_file(content, name)
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), name)
        if found is None and os.path.isfile(beside):
            with open(beside, "rb") as handle:
                found = handle.read()
        return found

    vocabulary = packed_or_beside(VOCABULARY_FILE)
    standardization = standardization_of({"standardization": (packed_or_beside(STANDARDIZATION_FILE) or b"").decode()})
    if vocabulary is None:
        raise UsageError(f"model {path} carries no {VOCABULARY_FILE} and none is beside it: pass the export's file")
    length = int(given["shape"][1])
    index = {token: i for i, token in enumerate(parse_vocabulary(vocabulary))}
    ids = np.array([token_ids(text, index, length, standardization)[0] for text in texts], dtype=np.int32)
    return tflite_token_predict(content, ids)
