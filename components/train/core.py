"""Training: a Keras model built in the distribution strategy's scope, fed by a static-shape ``tf.data`` pipeline.

What TPUs need is met by construction and exercised on the CPU with the same mechanisms: several replicas
(``MirroredStrategy`` over logical CPU devices), XLA (``jit_compile``), bfloat16 (``mixed_bfloat16``), static shapes
(fixed image size, ``drop_remainder``), per-replica batches in multiples of 8, and nothing in the step but TensorFlow
ops (the learning-rate schedule is a graph function, not a Python callback).

Preemption: ``BackupAndRestore`` checkpoints every epoch; a restarted run resumes after the last finished epoch.
Vertex AI: ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR`` are honoured.

Writes ``model.keras``, ``model.weights.h5`` (for rebuilding on a CPU), ``model_config.json`` and ``history.json``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass

from components.cli import UsageError, one_line
from components.schema import read_stats, split_files, split_pattern
from components.storage import write_json
from components.train.models import MODELS, build_model

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "float32", "mixed_bfloat16")
LR_SCHEDULES = ("constant", "rampup_exponential")
MODEL_FILE = "model.keras"
WEIGHTS_FILE = "model.weights.h5"
MODEL_CONFIG_FILE = "model_config.json"
HISTORY_FILE = "history.json"
EPOCH_LOG_FILE = "epochs.jsonl"
BATCH_MULTIPLE = 8  # TPU cores work on 8x128 tiles: per-replica batches in multiples of 8 keep them full
CACHE_LIMIT_BYTES = 2 * 1024**3  # decoded images are cached in memory when they take less than this
SHUFFLE_BUFFER = 2048
# Cloud TPU VMs (v4 and later expose /dev/accel*, v5e and later /dev/vfio/<n>) reach their TPU as tpu="local"
TPU_VM_DEVICES = ("/dev/accel0", "/dev/vfio/0")


@dataclass(frozen=True)
class TrainConfig:
    """How to train.

    Args:
        examples_dir: the convert step's output (``<split>/*.tfrec`` and ``stats.json``).
        model_dir: where the model, its weights, its config and the history go; empty: ``AIP_MODEL_DIR``.
        model_name: one of ``components.train.models.MODELS``.
        epochs: passes over the training split.
        per_replica_batch_size: examples per replica per step, rounded up to a multiple of 8; the global batch is
            this times the replicas.
        learning_rate: Adam's learning rate (the peak, with ``rampup_exponential``).
        lr_schedule: ``constant``, or ``rampup_exponential``: linear ramp-up for ``rampup_epochs``, then
            exponential decay by ``lr_decay`` per epoch (the codelab's best run).
        precision: ``auto`` (bfloat16 where the hardware computes it natively), ``float32`` or ``mixed_bfloat16``.
        tpu: a TPU name, a ``grpc://host:8470`` address or ``local``; empty: ``TPU_NAME``, ``local`` on a TPU VM,
            else the GPUs, else the CPU.
        cpu_replicas: split the CPU into this many logical devices and mirror over them (tests the multi-replica
            paths without accelerators).
        jit_compile: compile the training step with XLA (what TPUs always do).
        steps_per_execution: training steps per call into the compiled function (fewer host round trips on TPUs).
        augment: random flips, brightness and saturation on training images.
        checkpoint_dir: ``BackupAndRestore`` state; empty: ``AIP_CHECKPOINT_DIR``, else ``<model_dir>/checkpoints``.
        tensorboard_dir: TensorBoard logs; empty: ``AIP_TENSORBOARD_LOG_DIR``, else ``<model_dir>/logs``.
        seed: seeds weight initialisation and shuffling.
    """

    examples_dir: str
    model_dir: str = ""
    model_name: str = "codelab_convnet"
    epochs: int = 20
    per_replica_batch_size: int = 32
    learning_rate: float = 0.002
    lr_schedule: str = "constant"
    rampup_epochs: int = 3
    lr_decay: float = 0.8
    precision: str = "auto"
    tpu: str = ""
    cpu_replicas: int = 1
    jit_compile: bool = False
    steps_per_execution: int = 1
    augment: bool = False
    checkpoint_dir: str = ""
    tensorboard_dir: str = ""
    seed: int = 42

    def __post_init__(self) -> None:
        choices = {"model_name": ("--model", MODELS), "precision": ("--precision", PRECISIONS),
                   "lr_schedule": ("--lr-schedule", LR_SCHEDULES)}  # fmt: skip
        for name, (flag, valid) in choices.items():
            if getattr(self, name) not in valid:
                raise UsageError(
                    f"{flag} {getattr(self, name)!r} does not exist: choose one of {', '.join(sorted(valid))}"
                )
        for name, minimum in (("epochs", 1), ("per_replica_batch_size", 1), ("cpu_replicas", 1),
                              ("steps_per_execution", 1), ("rampup_epochs", 0)):  # fmt: skip
            if getattr(self, name) < minimum:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(self, name)} must be at least {minimum}")
        if not self.learning_rate > 0:
            raise UsageError(f"--learning-rate {self.learning_rate} must be positive")
        if not 0 < self.lr_decay <= 1:
            raise UsageError(f"--lr-decay {self.lr_decay} must be in (0, 1]")
        if self.jit_compile and self.cpu_replicas > 1:
            # XLA compiles one device's program: a step cannot reach variables on another logical CPU device
            # (TensorFlow's known XLA issue); TPUStrategy compiles per core and is not affected
            raise UsageError("--jit-compile cannot be combined with --cpu-replicas > 1: use one or the other")


@dataclass(frozen=True)
class OutputDirs:
    model_dir: str
    checkpoint_dir: str
    tensorboard_dir: str


def resolve_output_dirs(config: TrainConfig, env: Mapping[str, str]) -> OutputDirs:
    """Flags win over Vertex AI's ``AIP_*`` variables; ``gs://`` paths become their ``/gcs/`` FUSE mounts."""
    model_dir = config.model_dir or env.get("AIP_MODEL_DIR", "")
    if not model_dir:
        raise UsageError("no model dir: pass --model-dir, or set AIP_MODEL_DIR (Vertex AI sets it for custom jobs)")
    model_dir = gcs_fuse_path(model_dir)
    checkpoint_dir = (
        config.checkpoint_dir or env.get("AIP_CHECKPOINT_DIR", "") or os.path.join(model_dir, "checkpoints")
    )
    tensorboard_dir = (
        config.tensorboard_dir or env.get("AIP_TENSORBOARD_LOG_DIR", "") or os.path.join(model_dir, "logs")
    )
    return OutputDirs(model_dir, gcs_fuse_path(checkpoint_dir), gcs_fuse_path(tensorboard_dir))


def gcs_fuse_path(path: str) -> str:
    """``gs://bucket/x`` -> ``/gcs/bucket/x``, where Vertex AI mounts Cloud Storage for training code."""
    return "/gcs/" + path[len("gs://") :] if path.startswith("gs://") else path


def round_up_batch(per_replica_batch_size: int) -> int:
    """The per-replica batch rounded up to a multiple of 8."""
    return math.ceil(per_replica_batch_size / BATCH_MULTIPLE) * BATCH_MULTIPLE


def tpu_target(tpu: str, env: Mapping[str, str], on_tpu_vm: bool) -> str | None:
    """Which TPU to resolve, if any: the flag, else ``TPU_NAME``, else ``local`` on a TPU VM (where the resolver
    otherwise fails with "Please provide a TPU Name"), else None."""
    if tpu:
        return tpu
    if env.get("TPU_NAME"):
        return env["TPU_NAME"]
    return "local" if on_tpu_vm else None


def choose_precision(requested: str, accelerator: str, gpu_compute_capability=None, cpu_flags=frozenset()) -> str:
    """``auto`` -> ``mixed_bfloat16`` on TPUs, on GPUs from Ampere (compute capability 8.0) on, and on CPUs with AMX
    or AVX512-BF16; ``float32`` otherwise. An explicit choice is kept."""
    if requested != "auto":
        return requested
    if accelerator == "tpu":
        return "mixed_bfloat16"
    if accelerator == "gpu":
        return "mixed_bfloat16" if gpu_compute_capability and tuple(gpu_compute_capability) >= (8, 0) else "float32"
    return "mixed_bfloat16" if {"amx_bf16", "avx512_bf16"} & set(cpu_flags) else "float32"


def read_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    try:
        with open(cpuinfo) as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def split_cpu(replicas: int) -> None:
    """Splits the CPU into ``replicas`` logical devices; must run before TensorFlow initialises its devices."""
    import tensorflow as tf

    if replicas <= 1:
        return
    (cpu,) = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError as err:
        raise UsageError(f"--cpu-replicas {replicas}: TensorFlow was already initialised in this process") from err


def resolve_strategy(tpu: str = "", env: Mapping[str, str] | None = None, resolver_class=None):
    """The codelab's order: a TPU (see ``tpu_target``), else every GPU, else every logical CPU device.

    Returns ``(strategy, accelerator)`` with accelerator ``tpu``, ``gpu`` or ``cpu``. ``resolver_class`` replaces
    ``TPUClusterResolver`` (tests fake that boundary only).
    """
    import tensorflow as tf

    env = os.environ if env is None else env
    target = tpu_target(tpu, env, any(os.path.exists(p) for p in TPU_VM_DEVICES))
    if target is not None:
        resolver_class = resolver_class or tf.distribute.cluster_resolver.TPUClusterResolver
        try:
            resolver = resolver_class(tpu=target)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except Exception as err:  # the resolver raises ValueError, URLError, OpError... all mean "no such TPU"
            raise UsageError(
                f"--tpu {target!r} could not be reached ({one_line(err)}): pass a TPU name from "
                "`gcloud compute tpus list`, a grpc://HOST:8470 address, or 'local' on a TPU VM; leave it empty to "
                "train on GPUs or the CPU"
            ) from err
        strategy, accelerator = tf.distribute.TPUStrategy(resolver), "tpu"
    elif tf.config.list_logical_devices("GPU"):
        strategy, accelerator = tf.distribute.MirroredStrategy(), "gpu"
    elif len(cpus := tf.config.list_logical_devices("CPU")) > 1:
        strategy, accelerator = tf.distribute.MirroredStrategy([d.name for d in cpus]), "cpu"
    else:
        strategy, accelerator = tf.distribute.get_strategy(), "cpu"
    log.info(
        "distribution strategy: %s with %d replica(s) on %s",
        type(strategy).__name__, strategy.num_replicas_in_sync, accelerator,
    )  # fmt: skip
    return strategy, accelerator


def gpu_compute_capability():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("compute_capability") if gpus else None


def make_dataset(
    examples_dir: str,
    split: str,
    image_size: int,
    num_classes: int,
    batch_size: int,
    training: bool,
    cache: bool = False,
    augment: bool = False,
    seed: int | None = None,
    drop_remainder: bool | None = None,
):
    """A batched ``tf.data.Dataset`` of ``(image float32 [0,1], one_hot_class)`` with fully static shapes.

    Shards are read interleaved in parallel; parsing and decoding run with AUTOTUNE parallelism. Training data is
    shuffled, repeated and batched with ``drop_remainder`` (a static batch shape, as TPUs need); evaluation data is
    read once, in order, keeping the last partial batch unless ``drop_remainder`` (static shapes for TPUs and for
    batches split across replicas).
    """
    import tensorflow as tf

    from components.imaging import to_model_input
    from components.schema import feature_spec

    autotune = tf.data.AUTOTUNE
    files = split_files(examples_dir, split)
    if not files:
        expected = split_pattern(examples_dir, split)
        raise UsageError(f"examples dir {examples_dir} has no {split} shards: expected {expected}")
    spec = feature_spec(num_classes)
    check_schema(files[0], spec)
    files_ds = tf.data.Dataset.from_tensor_slices(files)
    if training:
        files_ds = files_ds.shuffle(len(files), seed=seed)
    options = tf.data.Options()
    options.deterministic = not training
    dataset = files_ds.interleave(
        tf.data.TFRecordDataset, cycle_length=min(len(files), 16), num_parallel_calls=autotune
    ).with_options(options)

    def decode(serialized):
        example = tf.io.parse_single_example(serialized, spec)
        image = tf.io.decode_jpeg(example["image"], channels=3)
        image = tf.reshape(image, [image_size, image_size, 3])  # static shape: fails loudly on a wrong size
        return to_model_input(image), example["one_hot_class"]

    dataset = dataset.map(decode, num_parallel_calls=autotune)
    if cache:
        dataset = dataset.cache()
    if training:
        dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True).repeat()
        if augment:
            dataset = dataset.map(augment_image, num_parallel_calls=autotune)
    drop_remainder = training if drop_remainder is None else drop_remainder
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=autotune)
    return dataset.prefetch(autotune)


def validation_batching(count: int, replicas: int, global_batch: int, static: bool) -> tuple[int, int]:
    """(batch size, examples used) for validation while training. Static batches (TPUs, several replicas) must split
    evenly across replicas, so the remainder is left out; on one device every example is used."""
    if not static:
        return min(global_batch, count), count
    batch = min(global_batch, count // replicas * replicas)
    return batch, (count // batch * batch if batch else 0)


def validation_dataset(examples_dir: str, stats: dict, replicas: int, accelerator: str, global_batch: int, cache: bool):
    count = stats["counts"]["validation"]
    static = replicas > 1 or accelerator == "tpu"
    batch, used = validation_batching(count, replicas, global_batch, static)
    if not used:
        log.info("no validation during training: %d validation examples for %d replicas", count, replicas)
        return None
    if used < count:
        log.info("validating on %d of %d examples per epoch (static batches of %d)", used, count, batch)
    return make_dataset(examples_dir, "validation", stats["image_size"], stats["num_classes"], batch,
                        training=False, cache=cache, drop_remainder=static)  # fmt: skip


def augment_image(image, label):
    """Random horizontal flip, brightness and saturation, kept in ``[0, 1]``."""
    import tensorflow as tf

    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_brightness(image, 0.1)
    image = tf.image.random_saturation(image, 0.8, 1.2)
    return tf.clip_by_value(image, 0.0, 1.0), label


def check_schema(path: str, spec: dict) -> None:
    """Reads the first record of ``path``; ``UsageError`` names the file and the features it lacks."""
    import tensorflow as tf

    for serialized in tf.data.TFRecordDataset(path).take(1):
        example = tf.train.Example.FromString(serialized.numpy())
        missing = sorted(set(spec) - set(example.features.feature))
        if missing:
            raise UsageError(
                f"TFRecord file {path} does not match the schema: missing feature(s) {', '.join(missing)} "
                "(convert the images with `python -m components.convert`)"
            )
        for name, feature_spec in spec.items():
            kind = example.features.feature[name].WhichOneof("kind")
            expected = {tf.string: "bytes_list", tf.int64: "int64_list", tf.float32: "float_list"}[feature_spec.dtype]
            if kind != expected:
                raise UsageError(f"TFRecord file {path}: feature {name} is a {kind}, expected a {expected}")


def learning_rate(config: TrainConfig, steps_per_epoch: int):
    """A constant rate, or the ramp-up / exponential-decay schedule (per epoch) as a graph function of the step."""
    if config.lr_schedule == "constant":
        return config.learning_rate
    from components.train.schedules import RampUpExponentialDecay

    return RampUpExponentialDecay(
        peak=config.learning_rate,
        rampup_steps=config.rampup_epochs * steps_per_epoch,
        decay_steps=steps_per_epoch,
        decay_rate=config.lr_decay,
    )


def _epoch_log_callback(path: str):
    """A callback that appends each finished epoch's metrics to ``path`` (kept across preemptions)."""
    import keras

    class EpochLog(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            record = {"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}}
            with open(path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    return EpochLog()


def read_epoch_log(path: str) -> list[dict]:
    """Finished epochs in order, the latest record winning when an epoch was run twice (a kill mid-save)."""
    if not os.path.exists(path):
        return []
    by_epoch = {}
    with open(path) as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
                by_epoch[record["epoch"]] = record
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def run(config: TrainConfig, env: Mapping[str, str] | None = None) -> dict:
    """Trains and saves the model; returns the final epoch's metrics and where things were written."""
    env = os.environ if env is None else env
    stats = read_stats(config.examples_dir)  # checks the input before the slow TensorFlow import
    dirs = resolve_output_dirs(config, env)
    image_size, num_classes = stats["image_size"], stats["num_classes"]
    train_count, validation_count = stats["counts"]["train"], stats["counts"]["validation"]
    split_cpu(config.cpu_replicas)
    import keras

    keras.utils.set_random_seed(config.seed)
    strategy, accelerator = resolve_strategy(config.tpu, env)
    precision = choose_precision(
        config.precision, accelerator,
        gpu_compute_capability() if accelerator == "gpu" else None,
        read_cpu_flags() if accelerator == "cpu" else frozenset(),
    )  # fmt: skip
    per_replica = round_up_batch(config.per_replica_batch_size)
    if per_replica != config.per_replica_batch_size:
        log.info("per-replica batch %d rounded up to %d (a multiple of %d)",
                 config.per_replica_batch_size, per_replica, BATCH_MULTIPLE)  # fmt: skip
    global_batch = per_replica * strategy.num_replicas_in_sync
    steps_per_epoch = train_count // global_batch
    if steps_per_epoch < 1:
        raise UsageError(
            f"the train split of {config.examples_dir} has {train_count} examples, fewer than one global batch of "
            f"{global_batch}: lower --batch-size or add data"
        )
    cache = (train_count + validation_count) * image_size * image_size * 3 * 4 < CACHE_LIMIT_BYTES
    train_ds = make_dataset(config.examples_dir, "train", image_size, num_classes, global_batch, training=True,
                            cache=cache, augment=config.augment, seed=config.seed)  # fmt: skip
    validation_ds = validation_dataset(config.examples_dir, stats, strategy.num_replicas_in_sync, accelerator,
                                       global_batch, cache)  # fmt: skip
    keras.mixed_precision.set_global_policy(precision)
    try:
        with strategy.scope():
            model = build_model(config.model_name, image_size, num_classes)
            model.compile(
                optimizer=keras.optimizers.Adam(learning_rate(config, steps_per_epoch)),
                loss="categorical_crossentropy",
                metrics=["accuracy"],
                jit_compile=config.jit_compile,
                steps_per_execution=config.steps_per_execution,
            )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.summary(print_fn=lambda line, **_: log.info(line))

    os.makedirs(dirs.checkpoint_dir, exist_ok=True)
    epoch_log = os.path.join(dirs.checkpoint_dir, EPOCH_LOG_FILE)
    backup_dir = os.path.join(dirs.checkpoint_dir, "backup")
    finished_before = len(read_epoch_log(epoch_log)) if os.path.isdir(backup_dir) else 0
    if not os.path.isdir(backup_dir) and os.path.exists(epoch_log):
        os.remove(epoch_log)  # a log without its backup belongs to a finished run
    if finished_before:
        log.info("resuming from the checkpoint in %s after epoch %d", backup_dir, finished_before)
    callbacks = [
        keras.callbacks.BackupAndRestore(backup_dir, save_freq="epoch", delete_checkpoint=False),
        _epoch_log_callback(epoch_log),
        keras.callbacks.TensorBoard(dirs.tensorboard_dir, update_freq="epoch", write_graph=False, profile_batch=0),
    ]
    log.info(
        "training %s on %d images (%dx%d, %d classes): %d epochs of %d steps, global batch %d (%d x %d replicas), "
        "%s, XLA %s, %d steps per execution",
        config.model_name, train_count, image_size, image_size, num_classes, config.epochs, steps_per_epoch,
        global_batch, per_replica, strategy.num_replicas_in_sync, precision, "on" if config.jit_compile else "off",
        config.steps_per_execution,
    )  # fmt: skip
    started = time.monotonic()
    model.fit(
        train_ds,
        validation_data=validation_ds,
        epochs=config.epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=callbacks,
        verbose=2,
    )
    seconds = time.monotonic() - started
    epochs = read_epoch_log(epoch_log)

    os.makedirs(dirs.model_dir, exist_ok=True)
    # Keras writes .keras / .h5 from host copies of the variables, so TPU-trained weights load on a CPU
    # (what SaveOptions(experimental_io_device="/job:localhost") does for TensorFlow's own formats)
    model.save(os.path.join(dirs.model_dir, MODEL_FILE))
    model.save_weights(os.path.join(dirs.model_dir, WEIGHTS_FILE))
    model_config = {
        "model_name": config.model_name,
        "image_size": image_size,
        "num_classes": num_classes,
        "class_names": stats["class_names"],
        "precision": precision,
        "per_replica_batch_size": per_replica,
        "global_batch_size": global_batch,
        "replicas": strategy.num_replicas_in_sync,
        "strategy": type(strategy).__name__,
        "accelerator": accelerator,
        "jit_compile": config.jit_compile,
        "steps_per_execution": config.steps_per_execution,
    }
    write_json(os.path.join(dirs.model_dir, MODEL_CONFIG_FILE), model_config)
    curves = {name: [record[name] for record in epochs] for name in epochs[-1] if name != "epoch"} if epochs else {}
    history = {"epochs": len(epochs), "resumed_after_epoch": finished_before, "history": curves}
    write_json(os.path.join(dirs.model_dir, HISTORY_FILE), history)
    shutil.rmtree(backup_dir, ignore_errors=True)  # the run is complete: a rerun starts afresh
    os.remove(epoch_log)
    if not os.listdir(dirs.checkpoint_dir):
        os.rmdir(dirs.checkpoint_dir)
    final = {name: values[-1] for name, values in curves.items()}
    trained_epochs = config.epochs - finished_before
    images_per_second = trained_epochs * steps_per_epoch * global_batch / max(seconds, 1e-9)
    log.info("trained in %.1fs (%.0f images/s): %s", seconds, images_per_second, json.dumps(final))
    return {
        "final": final,
        "train_seconds": seconds,
        "images_per_second": images_per_second,
        "model_dir": dirs.model_dir,
        "resumed_after_epoch": finished_before,
        **model_config,
    }


def load_model_config(model_dir: str) -> dict:
    """Reads ``model_config.json``; raises ``UsageError`` when ``model_dir`` is not a trained model."""
    from components.storage import exists, read_json

    path = os.path.join(model_dir, MODEL_CONFIG_FILE)
    if not exists(path):
        raise UsageError(f"model dir {model_dir} has no {MODEL_CONFIG_FILE}: pass the train step's output")
    return read_json(path)
