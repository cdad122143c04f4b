"""Training: a Keras 3 model on the backend that reaches the hardware, fed by a static-shape ``tf.data`` pipeline.

TPUs train on JAX (``keras.distribution.DataParallel`` over every device, and over every host of a multi-host slice
through ``jax.distributed``); GPUs and the CPU on TensorFlow (``MirroredStrategy``) or JAX, whichever
``components.train.placement`` picks. What TPUs need is met by construction and exercised on the CPU with the same
mechanisms: several devices (virtual CPU devices, local processes), compiled steps, bfloat16 (``mixed_bfloat16``),
static shapes (fixed image size, ``drop_remainder``), per-device batches in multiples of 8, and nothing in the step
but backend ops (the learning-rate schedule is written with ``keras.ops``).

Preemption: ``BackupAndRestore`` backs up an epoch's end (``--backup-interval``: every epoch, or auto, at most 5% of the
time); a restarted run resumes after the last epoch backed up.
Vertex AI: ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR`` are honoured. On several hosts,
only process 0 writes.

This module runs the step: its inputs checked before the slow imports, the backend placed, then each phase trained.
The parts: ``config`` (``TrainConfig``, the output folders), ``inputs`` (the examples, the model's code, the
datasets), ``phases`` (compiling and resuming each phase), ``callbacks`` (epoch log, learning watch, TensorBoard),
``backup`` (preemption backups, the multi-host handshake), ``keep_best``, ``batch_norm``, and ``outputs`` (the model
artifact, ``components.artifacts.model``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping

from components.artifacts.checkpoints import HEAD_WEIGHTS
from components.artifacts.examples import damaged_shards_named
from components.artifacts.model import ModelConfig
from components.cli import UsageError
from components.modalities import example_shape, modality_of, spec_of
from components.models import parse_ref, resolve_auto
from components.models.source import local_copy
from components.schema import read_stats
from components.storage import check_writable
from components.train import writer_lock
from components.train.batch_norm import MAX_BATCHES, reestimate
from components.train.config import TrainConfig, check_tensorflow_xla, resolve_output_dirs, with_auto_training
from components.train.inputs import (
    BATCH_MULTIPLE,
    Examples,
    datasets,
    load_model_code,
    round_up_batch,
    steps_per_call,
)
from components.train.outputs import distribution_facts, model_facts, save_results
from components.train.phases import (
    PHASE_WORDS,
    compiled_model,
    head_finished,
    resume_and_watch,
    save_head,
    training_phases,
    transfer_facts,
)
from components.train.transfer import resolve_weights_choice, weights_file

log = logging.getLogger(__name__)


def _precision(config: TrainConfig, placement) -> str:
    from components.train.placement import choose_precision, gpu_compute_capability, read_cpu_flags

    capability = None
    if placement.accelerator == "gpu":
        if placement.backend == "jax":
            import jax

            capability = tuple(int(p) for p in str(jax.devices()[0].compute_capability).split("."))
        else:
            capability = gpu_compute_capability()
    flags = read_cpu_flags() if placement.accelerator == "cpu" else frozenset()
    return choose_precision(config.precision, placement.accelerator, capability, flags)


def run(config: TrainConfig, env: Mapping[str, str] | None = None) -> dict:
    """Trains and saves the model; returns the final epoch's metrics and where things were written. A damaged shard
    is one line naming it."""
    with damaged_shards_named(config.examples_dir):
        return _train(config, os.environ if env is None else env)


def _train(config: TrainConfig, env: Mapping[str, str]) -> dict:
    config, examples, dirs = check_inputs(config, env)
    placement, backend = placed(config, env, examples.modality)
    if placement.is_chief:  # (the other hosts of a slice keep their backups in scratch folders)
        writer_lock.hold(dirs.checkpoint_dir)
    import keras

    code = load_model_code(config, examples)

    keras.utils.set_random_seed(config.seed)
    precision = _precision(config, placement)
    per_device = round_up_batch(config.per_replica_batch_size)
    if per_device != config.per_replica_batch_size:
        log.info(
            "per-device batch %d rounded up to %d (a multiple of %d)",
            config.per_replica_batch_size,
            per_device,
            BATCH_MULTIPLE,
        )
    global_batch = per_device * placement.devices
    train_count = examples.stats.counts["train"]
    steps_per_epoch = train_count // global_batch
    if steps_per_epoch < 1:
        raise UsageError(
            f"the train split of {config.examples_dir} has {train_count} examples, fewer than one global batch of "
            f"{global_batch}: lower --batch-size or add data"
        )
    per_call = steps_per_call(config.steps_per_execution, steps_per_epoch)
    if per_call != config.steps_per_execution:
        log.info(
            "--steps-per-execution %d: %d steps a call, so that a call ends where the epoch of %d steps does",
            config.steps_per_execution,
            per_call,
            steps_per_epoch,
        )
        config = dataclasses.replace(config, steps_per_execution=per_call)
    train_ds, validation_ds = datasets(config, examples, placement, global_batch)
    jit_compile = backend == "jax" or config.jit_compile  # JAX steps are always XLA programs
    plan = training_phases(config)
    pretrained = weights_file(config.weights, config.model_name, config.weights_cache)
    started, trained_epochs, backups, resumed_after, kept = time.monotonic(), 0, [], None, {}
    for phase in plan:
        if phase.name == "head" and len(plan) > 1 and head_finished(dirs, placement):
            log.info("the head was trained before (%s): fine-tuning", os.path.join(dirs.checkpoint_dir, HEAD_WEIGHTS))
            continue
        model = compiled_model(
            config, examples, placement, precision, steps_per_epoch, jit_compile, phase, pretrained, dirs, code, backend
        )
        finished_before, callbacks, advice = resume_and_watch(config, examples, dirs, placement, phase, plan[-1].last)
        resumed_after = finished_before if resumed_after is None else resumed_after
        log.info(
            "training %s%s on %d %s (%s, %d classes): epochs %d to %d of %d steps, global batch %d (%d x %d "
            "devices), %s, %s on %s, XLA %s, %d steps per execution",
            code.loaded.name,
            PHASE_WORDS[phase.name],
            train_count,
            f"{examples.modality}s",
            "x".join(map(str, examples.shape)),
            examples.num_classes,
            phase.first + 1,
            phase.last,
            steps_per_epoch,
            global_batch,
            per_device,
            placement.devices,
            precision,
            placement.strategy,
            backend,
            "on" if jit_compile else "off",
            config.steps_per_execution,
        )
        with placement.scope():
            fitted = model.fit(
                train_ds,
                validation_data=validation_ds,
                epochs=phase.last,
                initial_epoch=phase.first,
                steps_per_epoch=steps_per_epoch,
                shuffle=False,  # (the datasets shuffle themselves, by the seed)
                callbacks=callbacks,
                verbose=0,  # the epoch log's own line instead (on process 0), through logging
            )
        trained_epochs += len(fitted.epoch)  # as Keras ran them, after the epoch its backup restored
        backups += next(c for c in callbacks if isinstance(c, keras.callbacks.BackupAndRestore)).backups
        keeper = callbacks[-1]  # (keep_best_callback's: the weights it restored, and where it stopped)
        kept = {
            "kept_epoch": keeper.best["epoch"] if keeper.best else None,
            "stopped_after_epoch": keeper.stopped,
            "last_epoch": keeper.stopped or phase.last,
            "patience": keeper.patience,
        }
        if phase.name == "head" and len(plan) > 1:
            save_head(model, dirs, placement)
    with placement.scope():  # (over several processes, each reads its share of the same global batches)
        if reestimate(model, train_ds.take(min(steps_per_epoch, MAX_BATCHES)), backend) and validation_ds is not None:
            # the curves scored the statistics training left: the saved model is scored again
            kept["saved_model_validation"] = {
                f"val_{name}": float(value)
                for name, value in model.evaluate(validation_ds, verbose=0, return_dict=True).items()
            }
    seconds = time.monotonic() - started
    finished_before = resumed_after or 0
    log.info(
        "%d preemption backup(s) over %d epoch(s), %.0f ms each on average (--backup-interval %s)",
        len(backups),
        trained_epochs,
        1000 * sum(backups) / max(len(backups), 1),
        "auto" if config.backup_interval is None else config.backup_interval,
    )
    facts = {
        **model_facts(code, examples, backend, placement.why, precision),
        **transfer_facts(config, plan, model),
        "per_replica_batch_size": per_device,
        "global_batch_size": global_batch,
        "epochs": config.epochs,
        "learning_rate": config.learning_rate,
        "augment": config.augment,
        "replicas": placement.devices,
        "processes": placement.processes,
        "strategy": placement.strategy,
        "accelerator": placement.accelerator,
        "jit_compile": jit_compile,
        "steps_per_execution": config.steps_per_execution,
        "distribution": distribution_facts(model, placement, (global_batch, *examples.shape)),
    }
    model_config = ModelConfig(**facts)
    history = save_results(
        model, config, examples, dirs, placement, model_config, finished_before, seconds, advice, code.loaded, kept
    )
    at = -1 if history.kept_index is None else history.kept_index  # the kept (best) epoch's figures, else the last's
    final = {name: values[at] for name, values in history.history.items()} | (history.saved_model_validation or {})
    if history.not_learning:
        log.warning("training did not learn: %s", history.not_learning)
    images_per_second = trained_epochs * steps_per_epoch * global_batch / max(seconds, 1e-9)
    log.info("trained in %.1fs (%.0f %ss/s): %s", seconds, images_per_second, examples.modality, json.dumps(final))
    return {
        "final": final,
        "train_seconds": seconds,
        "images_per_second": images_per_second,
        "model_dir": dirs.model_dir,
        "resumed_after_epoch": finished_before,
        "epochs_trained": trained_epochs,
        "kept_epoch": history.kept_epoch,
        "stopped_after_epoch": history.stopped_after_epoch,
        "not_learning": history.not_learning,
        "process_index": placement.process_index,
        **facts,
    }


def check_inputs(config: TrainConfig, env: Mapping[str, str]):
    """The examples read and checked against the model, and the output folders checked, before the slow framework
    imports: (the config with ``auto`` resolved, the examples, the output dirs)."""
    stats = read_stats(config.examples_dir)
    dirs = resolve_output_dirs(config, env)
    for what, path in (
        ("model dir", dirs.model_dir),
        ("checkpoint dir", dirs.checkpoint_dir),
        ("TensorBoard dir", dirs.tensorboard_dir),
    ):
        check_writable(path, what)
    kind = modality_of(stats)
    kind.check_augment(config.augment)
    modality = kind.name
    examples = Examples(stats, modality, stats.num_classes, example_shape(stats), None, spec_of(stats))
    ref = resolve_auto(parse_ref(config.model_name), modality)
    if ref.text != config.model_name:
        log.info("--model auto: %s for %ss", ref.text, modality)
    config = dataclasses.replace(config, model_name=ref.text)
    if ref.kind == "builtin":  # (a model of one's own is loaded once the backend is chosen: it imports Keras)
        load_model_code(config, examples)
    elif ref.kind == "file":
        local_copy(ref, "")  # a missing file is said before the slow imports
    config = dataclasses.replace(config, weights=resolve_weights_choice(config.weights, config.model_name))
    config = with_auto_training(config, modality)
    # a text model's ids mean its vocabulary's tokens: it goes into the model artifact, for export
    examples = dataclasses.replace(examples, vocabulary=kind.read_vocabulary(config.examples_dir))
    return config, examples, dirs


def activated_backend(config: TrainConfig, env: Mapping[str, str], modality: str) -> tuple[str, str, str]:
    """The backend chosen (the hardware's, or the one asked for) and activated, before Keras is first imported:
    (backend, why, hardware)."""
    from components.keras_backend import activate_backend
    from components.train.placement import activate_jax_cpu_devices, backend_here

    backend, why, hardware = backend_here(config.backend, config.precision, config.hosts, modality, env)
    if backend == "tensorflow":
        check_tensorflow_xla(config)
    activate_backend(backend)
    if backend == "jax":
        activate_jax_cpu_devices(config.cpu_replicas)
    return backend, why, hardware


def placed(config: TrainConfig, env: Mapping[str, str], modality: str):
    """The backend activated and the devices placed: (placement, backend)."""
    from components.train.placement import place

    backend, why, hardware = activated_backend(config, env, modality)
    return place(backend, why, hardware, config.cpu_replicas, config.hosts, env), backend
