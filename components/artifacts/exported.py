"""The exported-model artifact: the export step's output folder, which evaluate (as a baseline), predict and the
Model Registry read.

It holds ``saved_model/`` (the serving SavedModel), ``model_float.tflite``, ``model_int8.tflite`` and
``export.json`` (formats, sizes, accuracies, parity, class names and image size). ``export.json`` is written last,
with the size and sha256 of every other file (``files``): an export without it is unfinished, and one whose files
differ from it is damaged; register and predict refuse both (``check_export``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from components.artifacts.records import EXPORT, Facts, Record
from components.cli import UsageError
from components.storage import sha256_of

SAVED_MODEL_DIR = "saved_model"
TFLITE_FILES = {"tflite_float": "model_float.tflite", "tflite_int8": "model_int8.tflite"}
# what an export can hold: the SavedModel always (serving, the export's checks and registration read it), the TFLite
# files where a run asks for them
FORMATS = ("saved_model", *TFLITE_FILES)


@dataclass(frozen=True)
class Exported(Facts):
    """``export.json``: what an export holds, what it measured, and what a client needs to call it.

    - What it is: ``modality``, ``class_names`` (in index order), the served input (images: ``image_size`` and
      ``decoding``, what the SavedModel does to the bytes it is sent; texts: ``sequence_length`` and the vocabulary
      and standardization it tokenises with, ``vocabulary_*`` and ``standardization*``) and its ``signatures``.
    - Its files: ``formats`` (each one's path, bytes and test accuracy; ``saved_model`` is the SavedModel's entry),
      the int8 file's size and accuracy against the float model's, and ``files``, the size and sha256 of every
      other file of the folder, written last (``check_export``).
    - Its checks: ``parity`` (against the trained model), ``backend_parity`` (against the training backend's own
      predictions), ``raw_files`` or ``raw_texts`` (the test split as clients send it).
    - The model it came from: ``model_digest`` (the trained weights' sha256, its identity), ``model_name``, ``model``
      (the code that built it), ``hparams``, ``trained_precision``, ``trained_backend``; ``report_html``, the
      report beside it, and ``blessing``, the evaluation's decision, where an evaluation was given.

    It reads as the mapping of its facts too (``Facts``)."""

    RECORD: ClassVar[Record] = EXPORT

    modality: str
    class_names: list[str]
    formats: dict[str, dict]
    saved_model: dict
    signatures: dict[str, dict]
    parity: dict
    backend_parity: dict
    model_digest: str
    model_name: str
    model: dict
    hparams: dict
    trained_precision: str
    trained_backend: str
    files: dict[str, dict]
    int8_size_vs_float_weights: float | None = None
    int8_accuracy_drop: float | None = None
    image_size: int | None = None
    decoding: dict | None = None
    raw_files: dict | None = None
    sequence_length: int | None = None
    vocabulary_size: int | None = None
    vocabulary_file: str | None = None
    vocabulary_sha256: str | None = None
    standardization: str | None = None
    standardization_file: str | None = None
    raw_texts: dict | None = None
    report_html: str | None = None
    blessing: dict | None = None


def kept_blessing(export_dir: str) -> dict | None:
    """The evaluation's ``blessing`` that the ``export.json`` in ``export_dir`` keeps; None for an export made without
    an evaluation, or a folder without ``export.json``."""
    return (EXPORT.read_any(export_dir, missing_ok=True) or {}).get("blessing")


def check_blessed(blessing: dict | None, what: str) -> None:
    """A one-line error where ``blessing`` (an evaluation's, or the one an export made anyway keeps) did not bless the
    model: only a blessed export is registered. ``what``: the input, as the user gave it."""
    if blessing and not blessing["blessed"]:
        raise UsageError(
            f"{what}: evaluate did not bless this model ({'; '.join(blessing['reasons'])}): only a blessed export is "
            "registered"
        )


def check_formats(formats) -> None:
    """A one-line error where ``formats`` (``--formats``) names a format there is not, or leaves out the
    SavedModel."""
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise UsageError(f"--formats {','.join(formats)}: {unknown[0]} is no format: choose from {', '.join(FORMATS)}")
    if "saved_model" not in formats:
        raise UsageError(
            f"--formats {','.join(formats) or '(none)'}: add saved_model: it is always exported (serving, the "
            "export's checks and registration read it)"
        )


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
            return saved_model, EXPORT.path(os.path.dirname(os.path.abspath(saved_model)))
    return None


def export_folder(uri: str) -> str:
    """The export folder of an export or of its ``saved_model/`` folder (local or ``gs://``)."""
    return uri.rstrip("/").removesuffix("/" + SAVED_MODEL_DIR)


def read_export(uri: str) -> Exported | None:
    """The ``export.json`` of the export at ``uri`` or of its ``saved_model/`` folder; None for a SavedModel on its
    own; a one-line error for one another version of the pipeline made, or one that lacks a field."""
    return Exported.read_if_any(export_folder(uri))


def export_class_names(uri: str) -> list[str]:
    """The class names the export at ``uri`` records; none for a SavedModel on its own."""
    found = read_export(uri)
    return found.class_names if found else []


def write_export_record(output_dir: str, report: dict) -> Exported:
    """Writes ``export.json`` into the (local) ``output_dir``, last, with the size and sha256 of each file there;
    returns the record."""
    files = {}
    for folder, _, names in os.walk(output_dir):
        for name in names:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, output_dir).replace(os.sep, "/")
            if relative != EXPORT.name:
                files[relative] = {"bytes": os.path.getsize(path), "sha256": sha256_of(path)}
    record = Exported(**report, files=dict(sorted(files.items())))
    record.write(output_dir)
    return record


def check_export(uri: str) -> Exported:
    """The ``export.json`` of the export folder ``uri`` (local or ``gs://``), once every file it lists is there with
    its size and sha256; a one-line error for an unfinished export (no ``export.json``), a damaged one, or one
    another version of the pipeline made (or that lacks a field)."""
    from components.storage import match

    uri = uri.rstrip("/") if "://" in uri else os.path.abspath(uri)
    again = "export it again (python -m components.export, or the same run-local command)"
    if not EXPORT.exists(uri):
        raise UsageError(
            f"export {uri} is unfinished: it has no {EXPORT.name}, which the export step writes last; {again}"
        )
    record = Exported.read(uri)
    listed = record.files
    sizes = {info.path[len(uri) + 1 :]: info.size_in_bytes for info in match(f"{uri}/**")}
    for relative, expected in listed.items():
        if relative not in sizes:
            raise UsageError(f"export {uri} is damaged: {relative} is missing; {again}")
        digest = None if sizes[relative] != expected["bytes"] else sha256_of(f"{uri}/{relative}")
        if digest != expected["sha256"]:
            found = f"{sizes[relative]} bytes" + (f", sha256 {digest[:12]}" if digest else "")
            raise UsageError(
                f"export {uri} is damaged: {relative} is not the file exported ({found}; exported: "
                f"{expected['bytes']} bytes, sha256 {expected['sha256'][:12]}); {again}"
            )
    return record
