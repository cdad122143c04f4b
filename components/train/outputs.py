"""What training writes once it has finished: the model artifact (``components.artifacts.model``), with what
``model_config.json`` says of the model, its distribution and its code, and the finished run's backups removed."""

from __future__ import annotations

import contextlib
import os
import shutil

from components.artifacts.checkpoints import (
    BACKUP_DIR,
    EPOCH_LOG_FILE,
    FINE_TUNE_BACKUP_DIR,
    HEAD_WEIGHTS,
    read_epoch_log,
)
from components.artifacts.model import MODEL_FILE, REFERENCE_FILE, WEIGHTS_FILE, History, ModelConfig
from components.learning import not_learning
from components.modalities import named
from components.models import SOURCE_DIR, LoadedModel
from components.storage import write_atomically
from components.tokenizing import VOCABULARY_FILE, vocabulary_bytes
from components.train import writer_lock
from components.train.config import TrainConfig
from components.train.inputs import Examples, ModelCode, class_counts, reference_predictions
from components.train.keep_best import best_folder


def distribution_facts(model, placement, batch_shape: tuple[int, ...]) -> dict:
    """How the devices share the work (JAX): the layout ``DataParallel`` gives a global batch (its axes, and one
    device's share of it), and whether every trained variable, read back from its array, is whole on every
    device."""
    if placement.distribution is None:
        return {}
    layout = placement.distribution.get_data_layout(batch_shape)
    sharding = layout.backend_layout
    variables = [v.value.sharding for v in model.weights]
    replicated = all(s.is_fully_replicated and len(s.device_set) == placement.devices for s in variables)
    return {
        "mesh_devices": len(sharding.device_set),
        "batch_axes": list(layout.axes),
        "per_device_batch_shape": list(sharding.shard_shape(batch_shape)),
        "variables_replicated": replicated,
    }


def model_facts(code: ModelCode, examples: Examples, backend: str, why: str, precision: str) -> dict:
    """What ``model_config.json`` says of the model, where its code came from, and its inputs."""
    stats = examples.stats
    return {
        "model_name": code.loaded.name,
        "model": code.loaded.record(kept_source_name(code.loaded)),
        "hparams": code.hparams,
        "modality": examples.modality,
        # images: uint8 pixels, scaled inside the model; texts: int32 token ids of the conversion's vocabulary
        **named(examples.modality).model_input_facts(stats, examples.vocabulary),
        "num_classes": examples.num_classes,
        "class_names": stats["class_names"],
        "backend": backend,
        "backend_reason": why,
        "precision": precision,
    }


def kept_source_name(loaded: LoadedModel) -> str:
    """Where the model artifact keeps a copy of the model's file, relative to it ("" for a built-in model)."""
    if not loaded.source_file:
        return ""
    name = os.path.basename(loaded.source_file)
    return f"{SOURCE_DIR}/{name if loaded.ref.kind == 'file' else loaded.ref.location + '.py'}"


def save_results(
    model,
    config: TrainConfig,
    examples: Examples,
    dirs,
    placement,
    model_config: ModelConfig,
    finished_before: int,
    seconds: float,
    advice: str,
    loaded: LoadedModel,
    kept: dict,
):
    """Process 0 writes the model artifact and removes the finished run's backup; every host then returns the
    ``History`` process 0 wrote (``kept``: the epoch whose weights were kept, the phase's last epoch, where it stopped
    and after what patience)."""
    epoch_log = os.path.join(dirs.checkpoint_dir, EPOCH_LOG_FILE)
    epochs = read_epoch_log(epoch_log) if placement.is_chief else []  # process 0 alone keeps the log
    # (not an earlier attempt's epochs past where this one stopped)
    epochs = [record for record in epochs if record["epoch"] <= kept.get("last_epoch", record["epoch"])]
    numbers = [record["epoch"] for record in epochs]
    reference = reference_predictions(model, config.examples_dir, examples.stats, placement)
    curves = {name: [record[name] for record in epochs] for name in epochs[-1] if name != "epoch"} if epochs else {}
    diagnosis = None  # process 0 decides whether the curves show learning, and writes what every host reports
    if placement.is_chief:
        diagnosis = not_learning(curves.get("loss", []), examples.num_classes, class_counts=class_counts(examples))
    history = History(
        history=curves,
        epochs=len(numbers),
        train_seconds=round(seconds, 3),
        resumed_after_epoch=finished_before,
        not_learning=diagnosis and f"{diagnosis}; {advice}",
        kept_epoch=kept.get("kept_epoch"),
        kept_index=numbers.index(kept["kept_epoch"]) if kept.get("kept_epoch") in numbers else None,
        stopped_after_epoch=kept.get("stopped_after_epoch"),
        patience=kept.get("patience"),
        saved_model_validation=kept.get("saved_model_validation"),
    )
    if placement.is_chief:
        save_model_artifact(model, dirs.model_dir, model_config, history, reference)
        if examples.vocabulary is not None:
            write_atomically(os.path.join(dirs.model_dir, VOCABULARY_FILE), vocabulary_bytes(examples.vocabulary))
        if model_config.model["file"]:  # the code that made the model, kept with it (evaluate and export load it)
            with open(loaded.source_file, "rb") as handle:
                write_atomically(os.path.join(dirs.model_dir, model_config.model["file"]), handle.read())
        for backup in (BACKUP_DIR, FINE_TUNE_BACKUP_DIR):  # a rerun starts afresh
            shutil.rmtree(os.path.join(dirs.checkpoint_dir, backup), ignore_errors=True)
            shutil.rmtree(best_folder(dirs.checkpoint_dir, backup), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
        os.remove(epoch_log)
        writer_lock.release()  # (its lock file too: a finished training leaves no trace there)
        if os.path.isdir(dirs.checkpoint_dir) and not os.listdir(dirs.checkpoint_dir):
            os.rmdir(dirs.checkpoint_dir)
    placement.barrier("model saved")
    if not placement.is_chief:  # every other host reports what process 0 wrote, where it sees the model folder
        history = History.read_if_any(dirs.model_dir) or history
    return history


def save_model_artifact(model, model_dir: str, model_config: ModelConfig, history: History, reference) -> None:
    """Writes the model artifact (``components.artifacts.model``): the model, its weights, ``model_config.json``,
    ``history.json`` and the reference predictions (where there are any)."""
    import numpy as np

    os.makedirs(model_dir, exist_ok=True)
    # Keras writes .keras / .h5 from host copies of the variables, in a format every backend reads: weights trained
    # on TPUs under JAX load into export's TensorFlow model on a CPU
    model.save(os.path.join(model_dir, MODEL_FILE))
    model.save_weights(os.path.join(model_dir, WEIGHTS_FILE))
    model_config.write(model_dir)
    history.write(model_dir)
    if reference is not None:
        np.savez(os.path.join(model_dir, REFERENCE_FILE), probabilities=reference)
