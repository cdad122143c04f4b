"""The phases of training (the whole model; or a pretrained backbone's head, then fine-tuning), each compiled with
its own trainable weights and learning rate, resumed from its own backup and watched by its callbacks."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

from components.artifacts.checkpoints import (
    BACKUP_DIR,
    EPOCH_LOG_FILE,
    FINE_TUNE_BACKUP_DIR,
    HEAD_WEIGHTS,
    epochs_kept,
    read_epoch_log,
    trim_epoch_log,
)
from components.learning import what_to_try
from components.modalities import named
from components.models import BACKBONES, backbone_of, parse_ref
from components.train.callbacks import learning_watch, training_callbacks
from components.train.config import OutputDirs, TrainConfig
from components.train.inputs import Examples, ModelCode, class_counts
from components.train.keep_best import auto_patience, best_folder, keep_best_callback
from components.train.transfer import freeze_backbone, load_backbone_weights, unfreeze_top

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Phase:
    """A part of training with its own trainable weights, learning rate and backup: ``train`` (the whole model),
    or a pretrained backbone's ``head`` (the backbone frozen) then ``fine_tune`` (its top blocks unfrozen).
    ``first``/``last``: the epochs before it and at its end, counted over the whole run."""

    name: str
    first: int
    last: int
    backup: str


PHASE_WORDS = {
    "train": "",
    "head": " (its head, the backbone frozen)",
    "fine_tune": " (fine-tuning the backbone's top blocks)",
}


def training_phases(config: TrainConfig) -> list[Phase]:
    """One phase, or a pretrained backbone's two (its head, then fine-tuning unless ``fine_tune_epochs`` is 0)."""
    if config.model_name not in BACKBONES or config.weights == "none":
        return [Phase("train", 0, config.epochs, BACKUP_DIR)]
    head = Phase("head", 0, config.epochs, BACKUP_DIR)
    if not config.fine_tune_epochs:
        return [head]
    return [head, Phase("fine_tune", config.epochs, config.epochs + config.fine_tune_epochs, FINE_TUNE_BACKUP_DIR)]


def head_finished(dirs: OutputDirs, placement) -> bool:
    """Whether an earlier attempt finished the head phase (its weights kept): the same answer on every host."""
    finished = os.path.exists(os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
    placement.check_agreement(
        int(finished),
        "whether the head was trained",
        f"give every host the same checkpoint dir, not {dirs.checkpoint_dir} on each",
    )
    return finished


def save_head(model, dirs: OutputDirs, placement) -> None:
    """Keeps the model after its head phase: fine-tuning starts from it, also after a preemption."""
    if placement.is_chief:
        kept = os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS)
        model.save_weights(kept + ".tmp.weights.h5")
        os.replace(kept + ".tmp.weights.h5", kept)  # a kill mid-save leaves no head to start from
    placement.barrier("head saved")


def fine_tune_rate(config: TrainConfig) -> float:
    return config.fine_tune_learning_rate or config.learning_rate / 10


def learning_rate(config: TrainConfig, steps_per_epoch: int):
    """A constant rate, or the ramp-up / exponential-decay schedule (per epoch) as a function of the step."""
    if config.lr_schedule == "constant":
        return config.learning_rate
    from components.train.schedules import RampUpExponentialDecay

    return RampUpExponentialDecay(
        peak=config.learning_rate,
        rampup_steps=config.rampup_epochs * steps_per_epoch,
        decay_steps=steps_per_epoch,
        decay_rate=config.lr_decay,
    )


def transfer_facts(config: TrainConfig, plan: list[Phase], model) -> dict:
    """What ``model_config.json`` says of a pretrained backbone's training (nothing for the other models)."""
    if config.model_name not in BACKBONES:
        return {}
    facts: dict = {"weights": config.weights, "head_epochs": config.epochs if plan[0].name == "head" else 0}
    if plan[-1].name == "fine_tune":
        trainable = sum(math.prod(weight.shape) for weight in backbone_of(model).trainable_weights)
        facts["fine_tune"] = {
            "epochs": config.fine_tune_epochs,
            "blocks": config.fine_tune_blocks,
            "learning_rate": fine_tune_rate(config),
            "trainable_backbone_weights": trainable,
        }
    return facts


def compiled_model(
    config: TrainConfig,
    examples: Examples,
    placement,
    precision: str,
    steps_per_epoch: int,
    jit_compile: bool,
    phase: Phase,
    pretrained: str | None,
    dirs: OutputDirs,
    code: ModelCode,
    backend: str,
):
    """The model built in ``precision`` under the placement's scope and compiled for ``phase`` (its trainable
    weights, its learning rate): the pretrained backbone's weights loaded from ``pretrained``, or, to fine-tune, the
    head phase's; its summary goes to the log. A model of one's own is checked first (``components.models.checks``):
    one line for a mistake, before any training."""
    import keras

    from components.models.checks import call_builder, check_model
    from components.train.averaging import averaging_adam

    rate = fine_tune_rate(config) if phase.name == "fine_tune" else learning_rate(config, steps_per_epoch)
    keras.mixed_precision.set_global_policy(precision)
    try:
        with placement.scope():
            model = call_builder(code.loaded, examples.spec, code.hparams, backend)
            if placement.processes == 1:  # (a prediction on several hosts needs every host's part of the batch)
                check_model(model, code.loaded, examples.spec, backend, batch_size=max(2, placement.devices))
            if phase.name == "fine_tune":
                model.load_weights(os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
                unfrozen = unfreeze_top(model, config.fine_tune_blocks)
                log.info(
                    "fine-tuning the top %d blocks of %s's backbone (%d weights; batch norm stays frozen) at "
                    "learning rate %g",
                    config.fine_tune_blocks,
                    config.model_name,
                    unfrozen,
                    rate,
                )
            elif pretrained is not None:
                load_backbone_weights(model, pretrained)
                if phase.name == "head":
                    freeze_backbone(model)
            named(examples.modality).adapt(model, config.examples_dir, examples.stats)
            model.compile(
                optimizer=averaging_adam(rate, steps_per_epoch * (phase.last - phase.first)),
                loss="categorical_crossentropy",
                metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
                jit_compile=jit_compile,
                steps_per_execution=config.steps_per_execution,
            )
            # the optimizer's and the metric's variables made here: on one device Keras leaves them to the first
            # trace of the training step, and TensorFlow traces a function again when its first trace made variables
            model.optimizer.build(model.trainable_variables)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    if placement.is_chief:
        model.summary(print_fn=lambda line, **_: log.info(line))
    return model


def resume_and_watch(config: TrainConfig, examples: Examples, dirs, placement, phase: Phase, total_epochs: int):
    """The epochs a backup already holds (the same on every host), the callbacks (the backup, the epoch log,
    TensorBoard, and on process 0 the watch that warns when training does not learn), and what to try if it does
    not: (finished_before, callbacks, advice). ``phase``: the part of training they are for (its own backup)."""
    epoch_log = os.path.join(dirs.checkpoint_dir, EPOCH_LOG_FILE)
    backup_dir = os.path.join(dirs.checkpoint_dir, phase.backup)
    kept = epochs_kept(dirs.checkpoint_dir, phase.backup)
    finished_before = max(kept, phase.first)
    # hosts that resumed from different epochs would run different numbers of steps and wait on each other forever
    placement.check_agreement(
        finished_before,
        "the epochs already finished",
        f"give every host the same checkpoint "
        f"dir (a gs:// path, as AIP_CHECKPOINT_DIR is), not {dirs.checkpoint_dir} on each",
    )
    if placement.is_chief:
        os.makedirs(dirs.checkpoint_dir, exist_ok=True)
        if not phase.first and not os.path.isdir(backup_dir) and os.path.exists(epoch_log):
            os.remove(epoch_log)  # a log without its backup belongs to a finished run
        trim_epoch_log(epoch_log, finished_before)  # (an earlier attempt's epochs past its backup run again)
    callbacks = training_callbacks(
        dirs.checkpoint_dir, dirs.tensorboard_dir, placement, config.backup_interval, phase.backup, total_epochs
    )
    image_size = examples.spec.image_size  # (None for texts)
    advice = what_to_try(
        config.learning_rate, image_size, parse_ref(config.model_name).name, examples.stats.source_image_size
    )
    if placement.is_chief:
        earlier = [record["loss"] for record in read_epoch_log(epoch_log)] if finished_before else []
        callbacks.append(learning_watch(examples.num_classes, advice, earlier, class_counts(examples)))
    patience = auto_patience(phase.last - phase.first) if config.patience is None else config.patience
    callbacks.append(
        keep_best_callback(best_folder(dirs.checkpoint_dir, phase.backup), placement, patience, finished_before)
    )
    from components.train.averaging import validation_on_average

    callbacks.insert(0, validation_on_average())  # (keep-best stays last: train reads what it kept)
    if kept > phase.first:
        log.info("resuming from the checkpoint in %s after epoch %d", backup_dir, finished_before)
    return finished_before, callbacks, advice
