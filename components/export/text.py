"""Export of a text model for CPU serving: the article's last step (the LSTM trained on a TPU, moved to the CPU to
predict), with the tokenisation inside the model.

The SavedModel's ``serving_default`` takes raw strings (``text``): standardisation and tokenisation run in the graph
(``components.tokenizing.GraphTokenizer``) with the vocabulary the model was trained on, so a client sends the review
as it is. ``serving_tokens`` takes token ids ``[N, sequence_length]`` (int32), as the TFLite files do; ``tokenize``
returns the ids the graph computes for strings. Both check against the training examples on the test split: the
graph's ids against Beam's, and the SavedModel's answers against the trained model's (``parity`` in
``export.json``).

TFLite: float32, and an int8 file: full-integer (weights and activations, output uint8) for the convolution; for
the LSTMs, int8 weights with float activations (dynamic range), as full-integer calibration of their loops crashes
TensorFlow 2.21's converter (a segmentation fault, tried on both LSTMs). Both take ``[1, sequence_length]`` int32
ids and carry ``labels.txt`` and ``vocabulary.txt`` in their metadata.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from components.artifacts.exported import SAVED_MODEL_DIR, TFLITE_FILES, Exported, write_export_record
from components.artifacts.model import ModelConfig, model_digest
from components.artifacts.tflite import tflite_token_predict
from components.cli import StepFailedError
from components.export.common import (
    PARITY_BATCH_SIZE,
    REPRESENTATIVE_IMAGES,
    ExportConfig,
    backend_parity,
    build_cpu_model,
    count_correct,
    format_entries,
    keep_model_code,
    loaded,
    predictions_of,
    served_report,
    shown_classes,
    write_archive,
)
from components.export.tflite_metadata import text_classifier_files
from components.modalities.text import TEXT
from components.models import load_trained_model
from components.storage import write_atomically
from components.tokenizing import (
    STANDARDIZATION_FILE,
    VOCABULARY_FILE,
    GraphTokenizer,
    read_vocabulary,
    standardization_of,
    vocabulary_bytes,
)

log = logging.getLogger(__name__)

RECURRENT_LAYERS = ("LSTM", "GRU", "SimpleRNN", "Bidirectional", "RNN")


def write_text_saved_model(model, tokenizer: GraphTokenizer, class_names, path: str) -> None:
    """Writes the text SavedModel (``serving_default`` on strings, ``serving_tokens``, ``tokenize``) to ``path``."""
    import tensorflow as tf
    from keras.export import ExportArchive

    length = tokenizer.sequence_length
    predictions = predictions_of(model, class_names)
    archive = ExportArchive()
    archive.track(model)
    archive.track(tokenizer.table)
    strings = [tf.TensorSpec([None], tf.string, name="text")]
    archive.add_endpoint("serving_default", lambda text: predictions(tokenizer(text)), input_signature=strings)
    archive.add_endpoint(
        "serving_tokens", predictions, input_signature=[tf.TensorSpec([None, length], tf.int32, name="tokens")]
    )
    archive.add_endpoint("tokenize", lambda text: {"tokens": tokenizer(text)}, input_signature=strings)
    write_archive(archive, path)


def check_text_parity(saved_model, trained_model, examples_dir: str, split: str, model_config: ModelConfig):
    """On every example of ``split``: the SavedModel's token ids for the raw text against the conversion's (Beam's),
    and its probabilities for the raw text against the trained model's for the converted ids. Returns the record,
    and the first text whose ids differ (None when all agree)."""
    import numpy as np

    from components.artifacts.examples import make_dataset

    signatures = loaded(saved_model).signatures
    serving, tokenize = signatures["serving_default"], signatures["tokenize"]
    dataset = make_dataset(
        examples_dir, split, TEXT.reading(model_config), PARITY_BATCH_SIZE, training=False, sources=True
    )
    same_tokens, agree, total, max_difference, first_differing = 0, 0, 0, 0.0, None
    for tokens, _, texts in dataset:
        graph_tokens = tokenize(text=texts)["tokens"].numpy()
        equal = (graph_tokens == tokens.numpy()).all(axis=-1)
        same_tokens += int(equal.sum())
        if first_differing is None and not equal.all():
            first_differing = texts[int(np.flatnonzero(~equal)[0])].numpy().decode("utf-8", errors="replace")
        exported = serving(text=texts)["probabilities"].numpy()
        trained = np.asarray(trained_model(tokens, training=False), dtype=np.float32)
        agree += int((exported.argmax(-1) == trained.argmax(-1)).sum())
        total += len(exported)
        max_difference = max(max_difference, float(np.abs(exported - trained).max()))
    record = {
        "split": split,
        "num_examples": total,
        "token_agreement": same_tokens / total if total else None,  # texts whose ids all equal the conversion's
        "argmax_agreement": agree / total if total else None,
        "max_probability_difference": max_difference,
    }
    return record, first_differing


def is_recurrent(model) -> bool:
    """Whether the network holds a recurrent layer (whose loops the TFLite converter cannot calibrate)."""
    return any(type(layer).__name__ in RECURRENT_LAYERS for layer in model.layers)


def text_tflite_models(model, sequence_length: int, examples_dir: str, num_classes: int, formats) -> tuple[dict, str]:
    """The network as TFLite flatbuffers taking ``[1, sequence_length]`` int32 ids, those of ``formats``
    (``ExportConfig.tflite``): float32 and int8; and how the int8 file is quantized (``full_integer`` or
    ``dynamic_range``). Converted from a SavedModel with a batch of 1: the converter lowers the LSTM's loop only with
    static shapes."""
    import tensorflow as tf
    from keras.export import ExportArchive

    from components.artifacts.examples import make_dataset

    if not formats:
        return {}, ""
    staging = tempfile.mkdtemp(prefix=".tflite-source-")
    archive = ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serve",
        lambda tokens: model(tokens, training=False),
        input_signature=[tf.TensorSpec([1, sequence_length], tf.int32, name="tokens")],
    )
    archive.write_out(staging, verbose=False)

    def representative():
        facts = {"sequence_length": sequence_length, "num_classes": num_classes}
        train = make_dataset(examples_dir, "train", TEXT.reading(facts), 1, training=False)
        for tokens, _ in train.take(REPRESENTATIVE_IMAGES):
            yield [tokens]

    try:
        float_converter = tf.lite.TFLiteConverter.from_saved_model(staging)
        int8_converter = tf.lite.TFLiteConverter.from_saved_model(staging)
        int8_converter.optimizations = [tf.lite.Optimize.DEFAULT]
        quantization = "dynamic_range"  # int8 weights, float activations
        if not is_recurrent(model):
            quantization = "full_integer"
            int8_converter.representative_dataset = representative
            int8_converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            int8_converter.inference_output_type = tf.uint8  # (the ids stay int32: they are not quantized)
        converters = {"tflite_float": float_converter, "tflite_int8": int8_converter}
        return {name: converters[name].convert() for name in formats}, quantization
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def text_format_accuracies(saved_model, tflite: dict[str, bytes], examples_dir: str, model_config: ModelConfig):
    """Correct test predictions of each format: the SavedModel fed the raw texts (its own tokenisation), each
    TFLite file fed the converted ids; and the number of test texts."""

    from components.artifacts.examples import make_dataset

    serving = loaded(saved_model).signatures["serving_default"]
    test = make_dataset(examples_dir, "test", TEXT.reading(model_config), 64, training=False, sources=True)
    return count_correct(
        (
            labels.numpy(),
            {
                "saved_model": serving(text=texts)["probabilities"].numpy(),
                **{name: tflite_token_predict(content, tokens.numpy()) for name, content in tflite.items()},
            },
        )
        for tokens, labels, texts in test
    )


def describe_text(model_config: ModelConfig, fmt: str, quantization: str) -> str:
    kind = (
        "float32"
        if fmt == "tflite_float"
        else {"full_integer": "full-integer int8 (uint8 out)", "dynamic_range": "int8 weights, float activations"}[
            quantization
        ]
    )
    names = model_config.class_names
    return (
        f"{model_config.model_name}, {kind}: classifies a text, given as {model_config.sequence_length} "
        f"token ids of vocabulary.txt, into {len(names)} classes ({shown_classes(names)}); trained with "
        f"{model_config.backend} in {model_config.precision}."
    )


def export_text(config: ExportConfig) -> Exported:
    """Exports a text model (SavedModel on strings, TFLite on ids), checks it, and writes ``export.json``."""
    vocabulary = read_vocabulary(os.path.join(config.model_dir, VOCABULARY_FILE))
    model, model_config = build_cpu_model(config.model_dir)
    length = model_config.sequence_length
    saved_model_path = os.path.join(config.output_dir, SAVED_MODEL_DIR)
    standardization = standardization_of(model_config)
    tokenizer = GraphTokenizer(vocabulary, length, standardization)
    write_text_saved_model(model, tokenizer, model_config.class_names, saved_model_path)
    trained = load_trained_model(config.model_dir, model_config)
    saved_model = loaded(saved_model_path)  # once, for every check of it
    parity, differing = check_text_parity(saved_model, trained, config.examples_dir, config.parity_split, model_config)
    if differing is not None:  # serving would read texts otherwise than training did: nothing is exported
        shutil.rmtree(saved_model_path, ignore_errors=True)
        raise StepFailedError(
            f"the exported graph tokenises {1 - parity['token_agreement']:.2%} of the {config.parity_split} texts "
            f"otherwise than the conversion did, e.g. {differing[:80]!r}: nothing exported (a defect of "
            "components/tokenizing.py: please report the text)"
        )
    crossed = backend_parity(model, config.model_dir, model_config, config.examples_dir)
    tflite, quantization = text_tflite_models(
        model, length, config.examples_dir, model_config.num_classes, config.tflite()
    )
    digest = model_digest(config.model_dir)
    for name, content in tflite.items():
        tflite[name] = text_classifier_files(
            content,
            name=model_config.model_name,
            version=digest[:12],
            description=describe_text(model_config, name, quantization),
            sequence_length=length,
            class_names=model_config.class_names,
            vocabulary=vocabulary_bytes(vocabulary),
            standardization=standardization,
        )
        write_atomically(os.path.join(config.output_dir, TFLITE_FILES[name]), tflite[name])
    write_atomically(os.path.join(config.output_dir, VOCABULARY_FILE), vocabulary_bytes(vocabulary))
    write_atomically(os.path.join(config.output_dir, STANDARDIZATION_FILE), standardization.encode())
    correct, total = text_format_accuracies(saved_model, tflite, config.examples_dir, model_config)
    served = correct["saved_model"] / total if total else None
    figures = format_entries(model, saved_model_path, tflite, config.output_dir, correct, total)
    if "tflite_int8" in figures["formats"]:
        figures["formats"]["tflite_int8"]["quantization"] = quantization
    report = {
        "modality": "text",
        **figures,
        "signatures": {
            "serving_default": {"inputs": ["text"], "outputs": ["probabilities", "class_id", "label"]},
            "serving_tokens": {"inputs": ["tokens"], "outputs": ["probabilities", "class_id", "label"]},
            "tokenize": {"inputs": ["text"], "outputs": ["tokens"]},
        },
        "parity": parity,
        "backend_parity": crossed,
        # what clients get: the SavedModel on the test texts as they send them, raw strings tokenised in its graph
        "raw_texts": {"split": "test", "num_texts": total, "test_accuracy": served},
        "class_names": model_config.class_names,
        "sequence_length": length,
        "vocabulary_size": len(vocabulary),
        "vocabulary_file": VOCABULARY_FILE,
        "vocabulary_sha256": model_config.vocabulary_sha256,
        "standardization": standardization,
        "standardization_file": STANDARDIZATION_FILE,
        "trained_precision": model_config.precision,
        "trained_backend": crossed["trained_backend"],
        "model_digest": digest,
        **keep_model_code(config.model_dir, config.output_dir, model_config),
    }
    report = write_export_record(config.output_dir, {**report, **served_report(config, report)})
    log.info(
        "exported %s; on %d %s texts: the graph's token ids equal the conversion's for %.4f, argmax agreement "
        "%.4f, max probability difference %.2e",
        saved_model_path,
        parity["num_examples"],
        parity["split"],
        parity["token_agreement"] or 0.0,
        parity["argmax_agreement"] or 0.0,
        parity["max_probability_difference"],
    )
    return report
