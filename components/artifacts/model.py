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
MODEL_CONFIG_FILE = "model_config.json"
HISTORY_FILE = "history.json"
REFERENCE_FILE = "reference_predictions.npz"  # arrays: probabilities [N, classes], from the validation split in order


def load_model_config(model_dir: str) -> dict:
    """Reads ``model_config.json``; raises ``UsageError`` when ``model_dir`` is not a trained model."""
    from components.cli import UsageError
    from components.storage import exists, read_json

    path = os.path.join(model_dir, MODEL_CONFIG_FILE)
    if not exists(path):
        raise UsageError(f"model dir {model_dir} has no {MODEL_CONFIG_FILE}: pass the train step's output")
    return read_json(path)


def check_examples_match(model_config: dict, stats: dict, model_dir: str, examples_dir: str) -> None:
    """The examples must hold what the model was trained on: the same modality, the classes in the same order (a
    reordered class list would give wrong metrics and a wrong blessing), and the image size, or the sequence length
    and the vocabulary (ids of another vocabulary mean other words). A one-line error naming both sides."""
    from components.cli import UsageError

    again = "pass the examples the model was trained from"
    model_modality, example_modality = model_config.get("modality", "image"), stats.get("modality", "image")
    if model_modality != example_modality:
        raise UsageError(
            f"examples {examples_dir} hold {example_modality}s, but model {model_dir} is "
            f"{article(model_modality)} {model_modality} model: {again}"
        )
    model_names, example_names = list(model_config["class_names"]), list(stats["class_names"])
    if model_names != example_names:
        order = "in another order " if sorted(model_names) == sorted(example_names) else ""
        raise UsageError(
            f"examples {examples_dir} hold the classes {', '.join(example_names)}, but model {model_dir} was trained "
            f"on {', '.join(model_names)} {order}(class ids would mean other classes): {again}"
        )
    if model_modality == "text":
        if int(model_config["sequence_length"]) != int(stats["sequence_length"]):
            raise UsageError(
                f"examples {examples_dir} hold {stats['sequence_length']} tokens a text, but model "
                f"{model_dir} was trained on {model_config['sequence_length']}: {again}"
            )
        check_same_vocabulary(model_config, examples_dir, model_dir, again)
    elif int(model_config["image_size"]) != int(stats["image_size"]):
        raise UsageError(
            f"examples {examples_dir} hold {stats['image_size']}-pixel images, but model {model_dir} was trained on "
            f"{model_config['image_size']}-pixel ones: {again}"
        )


def article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def check_same_vocabulary(model_config: dict, examples_dir: str, model_dir: str, again: str) -> None:
    """A text model reads token ids of one vocabulary: the examples' must be the same."""
    from components.cli import UsageError
    from components.tokenizing import VOCABULARY_FILE, read_vocabulary, vocabulary_digest

    if not model_config.get("vocabulary_sha256"):
        raise UsageError(
            f"model {model_dir} does not record its vocabulary (trained before text models kept it): train it again"
        )
    vocabulary = read_vocabulary(f"{examples_dir.rstrip('/')}/{VOCABULARY_FILE}")
    if vocabulary_digest(vocabulary) != model_config.get("vocabulary_sha256"):
        raise UsageError(
            f"examples {examples_dir} were tokenised with another vocabulary than model {model_dir} "
            f"(their {VOCABULARY_FILE} differs): {again}"
        )


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
