"""The train step: models, strategies, precision, XLA, replicas, schedules, preemption, Vertex AI conventions."""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from components.artifacts.checkpoints import BACKUP_DIR, EPOCH_LOG_FILE, epochs_kept, read_epoch_log
from components.artifacts.examples import make_dataset
from components.artifacts.records import STATS
from components.cli import UsageError
from components.modalities import reading_of
from components.models import DEFAULT_MODELS, ModelSpec, build_model
from components.train.backup import settle_backup
from components.train.config import TrainConfig, resolve_output_dirs
from components.train.core import run
from components.train.inputs import round_up_batch, validation_batching
from components.train.placement import choose_precision, read_cpu_flags, trains_on_tensorflow
from tests.conftest import CLASSES, REPO_ROOT, TINY_SIZE, run_cli


def conv_params(kernel: int, channels_in: int, filters: int, bias: bool = True) -> int:
    return kernel * kernel * channels_in * filters + (filters if bias else 0)


def test_codelab_convnet_has_the_codelab_parameter_count():
    model = build_model("codelab_convnet", ModelSpec.for_images(192, 5))
    assert model.count_params() == 293_233
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("MaxPooling2D") == 4
    assert kinds[-2:] == ["GlobalAveragePooling2D", "Dense"]


def test_the_default_image_model_is_the_codelab_convnet_with_batch_norm_before_each_relu():
    """The codelab's convolutions without their biases, each followed by batch norm (4 numbers a channel: scale,
    offset, moving mean and variance) and then the ReLU."""
    convolutions = ((3, 16, 3), (16, 30, 3), (30, 60, 3), (60, 90, 3), (90, 110, 3), (110, 130, 3), (130, 40, 1))
    expected = (
        sum(
            conv_params(kernel, channels, filters, bias=False) + 4 * filters
            for channels, filters, kernel in convolutions
        )
        + 40 * 5
        + 5
    )
    model = build_model(DEFAULT_MODELS["image"], ModelSpec.for_images(192, 5))
    assert model.count_params() == expected
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("BatchNormalization") == 7 and kinds.count("MaxPooling2D") == 4
    after = [kinds[i + 1 : i + 3] for i, kind in enumerate(kinds) if kind == "Conv2D"]
    assert after == [["BatchNormalization", "Activation"]] * 7


def test_squeezenet_has_the_codelab_parameter_count():
    model = build_model("squeezenet", ModelSpec.for_images(192, 5))
    assert model.count_params() == 120_613
    assert sum(type(layer).__name__ == "Concatenate" for layer in model.layers) == 5  # five fire modules


def test_cifar_convnet_parameter_count_follows_its_blocks():
    expected, channels = 0, 3
    for filters in (32, 64, 128):
        for _ in range(2):
            expected += conv_params(3, channels, filters, bias=False) + 4 * filters  # conv + batch norm
            channels = filters
    expected += 128 * 128 + 128 + 128 * 10 + 10
    assert build_model("cifar_convnet", ModelSpec.for_images(32, 10)).count_params() == expected


def test_dense_baseline_parameter_count_is_one_layer_over_the_pixels():
    assert build_model("dense_baseline", ModelSpec.for_images(24, 5)).count_params() == 24 * 24 * 3 * 5 + 5


@pytest.mark.parametrize(
    ("flag", "value", "choices"),
    [
        ("--precision", "float8", "auto, float32, mixed_bfloat16"),
        ("--lr-schedule", "cosine", "constant, rampup_exponential"),
        ("--backend", "torch", "auto, jax, tensorflow"),
    ],
)
def test_unknown_choice_is_one_line_exit_2_listing_the_choices(tmp_path, flag, value, choices):
    result = run_cli("components.train", "--examples", str(tmp_path), "--model-dir", str(tmp_path), flag, value)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {flag} '{value}' does not exist: choose one of ")
    assert sorted(line.split("choose one of ")[1].split(", ")) == sorted(choices.split(", "))


def test_an_unknown_model_is_one_line_exit_2_naming_its_forms_and_the_built_in_models(tmp_path):
    result = run_cli(
        "components.train", "--examples", str(tmp_path), "--model-dir", str(tmp_path), "--model", "resnet9000"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        "error: --model resnet9000: not a built-in model, FILE.py[:FUNCTION] (local or gs://) or "
        "MODULE:FUNCTION; the built-in models are "
    )
    assert sorted(line.split("the built-in models are ")[1].split(", ")) == sorted(
        [
            "codelab_convnet_bn",
            "codelab_convnet",
            "cifar_convnet",
            "dense_baseline",
            "squeezenet",
            "mobilenet_v3_small",
            "mobilenet_v3_large",
            "efficientnet_v2_b0",
            "xception",
            "lstm",
            "bilstm",
            "cnn1d",
            "ngrams",
        ]
    )


def test_precision_auto_picks_bfloat16_where_the_hardware_has_it():
    assert choose_precision("auto", "tpu") == "mixed_bfloat16"
    assert choose_precision("auto", "gpu", gpu_compute_capability=(8, 0)) == "mixed_bfloat16"
    assert choose_precision("auto", "gpu", gpu_compute_capability=(7, 5)) == "float32"
    assert choose_precision("auto", "cpu", cpu_flags={"avx2", "amx_bf16"}) == "mixed_bfloat16"
    assert choose_precision("auto", "cpu", cpu_flags={"avx512f", "avx512_bf16"}) == "mixed_bfloat16"
    assert choose_precision("auto", "cpu", cpu_flags={"avx2", "avx512f"}) == "float32"
    assert choose_precision("float32", "tpu") == "float32"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 avx512_bf16\n")
    assert read_cpu_flags(str(cpuinfo), env={}) == {"fpu", "avx2", "amx_bf16", "avx512_bf16"}
    assert read_cpu_flags(str(tmp_path / "missing"), env={}) == frozenset()


def test_a_host_profile_stands_in_for_the_cpus_own_flags(tmp_path):
    """``TPU_PIPELINE_CPU_FLAGS`` (make test PROFILE=...) replaces /proc/cpuinfo's flags, even with none in it."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu avx2 avx512_bf16\n")
    profile = {"TPU_PIPELINE_CPU_FLAGS": "avx2, avx512f amx_bf16"}
    assert read_cpu_flags(str(cpuinfo), env=profile) == {"avx2", "avx512f", "amx_bf16"}
    assert read_cpu_flags(str(cpuinfo), env={"TPU_PIPELINE_CPU_FLAGS": ""}) == frozenset()
    assert (
        choose_precision("auto", "cpu", cpu_flags=read_cpu_flags(str(cpuinfo), env={"TPU_PIPELINE_CPU_FLAGS": "avx2"}))
        == "float32"
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("per_replica_batch_size", 0, "--batch-size 0 must be at least 1"),  # the flag users type, not the field
        ("epochs", -1, "--epochs -1 must be at least 0"),  # (0: auto)
        ("steps_per_execution", 0, "--steps-per-execution 0 must be at least 1"),
    ],
)
def test_a_count_below_its_least_names_the_flag_users_type(tmp_path, field, value, message):
    with pytest.raises(UsageError, match=f"^{message}$"):
        TrainConfig(examples_dir=str(tmp_path), **{field: value})


def test_auto_trains_an_image_model_from_scratch_longer_at_a_lower_rate_and_keeps_what_is_given():
    from components.train.config import with_auto_training

    # the documented auto values (the flags' help): 30 epochs at 0.001 for an image model trained from scratch
    # (bench/image_models.py), 20 at 0.002 for a text model or a pretrained backbone's head
    image = with_auto_training(TrainConfig(examples_dir="e", weights="none"), "image")
    assert (image.epochs, image.learning_rate) == (30, 0.001)
    text = with_auto_training(TrainConfig(examples_dir="e", weights="none"), "text")
    head = with_auto_training(TrainConfig(examples_dir="e", weights="imagenet"), "image")
    assert (text.epochs, text.learning_rate) == (head.epochs, head.learning_rate) == (20, 0.002)
    given = with_auto_training(TrainConfig(examples_dir="e", weights="none", epochs=3, learning_rate=0.01), "image")
    assert (given.epochs, given.learning_rate) == (3, 0.01)
    with pytest.raises(UsageError, match=r"^--learning-rate -0.1 must be positive, or 0 for auto$"):
        TrainConfig(examples_dir="e", learning_rate=-0.1)


def test_per_replica_batch_is_rounded_up_to_a_multiple_of_8():
    assert [round_up_batch(n) for n in (1, 8, 9, 16, 100)] == [8, 8, 16, 16, 104]


def test_vertex_ai_directories_are_honoured_and_flags_win():
    env = {"AIP_MODEL_DIR": "gs://b/model", "AIP_CHECKPOINT_DIR": "gs://b/ckpt", "AIP_TENSORBOARD_LOG_DIR": "gs://b/tb"}
    dirs = resolve_output_dirs(TrainConfig(examples_dir="e"), env)
    assert (dirs.model_dir, dirs.checkpoint_dir, dirs.tensorboard_dir) == ("/gcs/b/model", "/gcs/b/ckpt", "/gcs/b/tb")
    dirs = resolve_output_dirs(TrainConfig(examples_dir="e", model_dir="/m"), {})
    assert (dirs.model_dir, dirs.checkpoint_dir, dirs.tensorboard_dir) == ("/m", "/m/checkpoints", "/m/logs")
    with pytest.raises(UsageError, match=r"--model-dir.*AIP_MODEL_DIR"):
        resolve_output_dirs(TrainConfig(examples_dir="e"), {})


def test_learning_rate_ramps_up_then_decays_per_epoch():
    from components.train.schedules import RampUpExponentialDecay

    schedule = RampUpExponentialDecay(peak=0.01, rampup_steps=30, decay_steps=10, decay_rate=0.5)
    rates = {step: float(schedule(step)) for step in (0, 15, 30, 45, 50, 500)}
    assert rates[0] == pytest.approx(0.001)
    assert rates[15] == pytest.approx(0.0055)
    assert rates[30] == pytest.approx(0.01)
    assert rates[45] == pytest.approx(0.005)
    assert rates[50] == pytest.approx(0.0025)
    assert rates[500] == pytest.approx(0.0001)  # the floor: peak / 100


def test_training_batches_have_static_shapes_and_augmentation_keeps_the_range(converted):
    examples_dir, stats = converted
    dataset = make_dataset(examples_dir, "train", reading_of(stats), batch_size=8, training=True, augment=True)
    images, labels = dataset.element_spec
    assert images.shape.as_list() == [8, TINY_SIZE, TINY_SIZE, 3]
    assert labels.shape.as_list() == [8, len(CLASSES)]
    batch, _ = next(iter(dataset))
    assert batch.dtype == "uint8"  # pixels as decoded: the model scales them


def test_augmentation_shifts_brightness_a_little_and_never_wraps_around():
    """White stays near white and black near black through every random flip, brightness (at most 0.1 of the range)
    and saturation: a pixel pushed past 255 is clipped, never wrapped to a dark one."""
    import numpy as np
    import tensorflow as tf

    from components.artifacts.examples import augment_image

    image = np.zeros((8, 8, 3), np.uint8)
    image[:, :4] = 255  # left half white, right half black (a flip swaps them)
    tf.random.set_seed(3)
    for _ in range(40):
        out = augment_image(tf.constant(image), 0)[0].numpy().astype(int)
        halves = sorted((out[:, :4], out[:, 4:]), key=lambda half: half.mean())
        assert halves[0].max() <= 26 and halves[1].min() >= 229, (halves[0].max(), halves[1].min())


def test_training_learns_and_saves_model_weights_config_and_history(trained):
    model_dir, result = trained
    for name in ("model.keras", "model.weights.h5", "model_config.json", "history.json"):
        assert os.path.exists(os.path.join(model_dir, name)), name
    with open(os.path.join(model_dir, "history.json")) as handle:
        history = json.load(handle)
    losses = history["history"]["loss"]
    assert history["epochs"] == len(losses) and all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]
    assert result["final"]["val_accuracy"] >= 0.9
    # the best epoch's weights kept, and its figures reported; 12 epochs, unless 5 (auto) went by without a better
    validation = history["history"]["val_loss"]
    assert history["kept_epoch"] == validation.index(min(validation)) + 1 == result["kept_epoch"]
    assert result["final"]["val_loss"] == min(validation) and history["patience"] == 5
    assert len(losses) == 12 or (history["stopped_after_epoch"] == len(losses) == history["kept_epoch"] + 5)
    with open(os.path.join(model_dir, "model_config.json")) as handle:
        config = json.load(handle)
    assert config["class_names"] == list(CLASSES) and config["image_size"] == TINY_SIZE
    assert config["per_replica_batch_size"] == 8  # 4 asked, rounded up
    assert config["global_batch_size"] == 8 * config["replicas"]
    assert os.listdir(os.path.join(model_dir, "logs")), "no TensorBoard logs"
    assert not os.path.exists(os.path.join(model_dir, "checkpoints")), "a finished run keeps no backup"


def test_run_local_knows_before_a_training_starts_whether_it_runs_on_tensorflow(converted, tmp_path, monkeypatch):
    """What the train step tells run-local's step server (whose Keras is loaded on TensorFlow) before it logs a
    line: image models train on TensorFlow on a CPU; JAX when asked for, over several hosts, or by KERAS_BACKEND;
    no answer (cold) for examples it cannot read, whose error the step reports itself."""
    examples_dir = converted[0]
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert trains_on_tensorflow("auto", "auto", 1, examples_dir)
    assert trains_on_tensorflow("tensorflow", "float32", 1, examples_dir)
    assert not trains_on_tensorflow("jax", "auto", 1, examples_dir)
    assert not trains_on_tensorflow("auto", "auto", 2, examples_dir)
    assert not trains_on_tensorflow("auto", "auto", 1, str(tmp_path / "missing"))
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert not trains_on_tensorflow("auto", "auto", 1, examples_dir)


def test_two_replicas_split_the_global_batch_and_learn_like_one(converted, trained, tmp_path):
    from components.evaluate.core import EvaluateConfig
    from components.evaluate.core import run as evaluate

    examples_dir, _ = converted
    one_replica_dir, _ = trained
    result = run_cli(
        "components.train",
        "--examples",
        examples_dir,
        "--model-dir",
        str(tmp_path / "model"),
        "--cpu-replicas",
        "2",
        "--epochs",
        "12",
        "--batch-size",
        "4",
        "--learning-rate",
        "0.002",
        "--model",
        "codelab_convnet",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MirroredStrategy over 2 cpu device(s) in 1 process(es)" in result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["replicas"] == 2
    with open(tmp_path / "model" / "model_config.json") as handle:
        config = json.load(handle)
    assert config["global_batch_size"] == 2 * config["per_replica_batch_size"] == 16
    with open(tmp_path / "model" / "history.json") as handle:
        losses = json.load(handle)["history"]["loss"]
    assert losses[-1] < losses[0]
    # the same band as one replica, measured on the held-out test split by the evaluate step (one device)
    two = evaluate(EvaluateConfig(examples_dir, str(tmp_path / "model"), str(tmp_path / "eval2")))["accuracy"]
    one = evaluate(EvaluateConfig(examples_dir, one_replica_dir, str(tmp_path / "eval1")))["accuracy"]
    assert two >= 0.9 and one >= 0.9 and abs(two - one) <= 0.1


def test_xla_compiled_steps_train_on_the_cpu(converted, tmp_path):
    examples_dir, _ = converted
    result = run(
        TrainConfig(
            examples_dir=examples_dir,
            model_dir=str(tmp_path),
            epochs=6,
            per_replica_batch_size=8,
            jit_compile=True,
            steps_per_execution=2,
            lr_schedule="rampup_exponential",
            rampup_epochs=1,
        )
    )
    assert result["jit_compile"] and result["steps_per_execution"] == 2
    with open(tmp_path / "history.json") as handle:
        losses = json.load(handle)["history"]["loss"]
    assert losses[-1] < losses[0]


def test_jit_compile_with_cpu_replicas_is_refused_with_the_reason():
    with pytest.raises(UsageError, match="--jit-compile cannot be combined with --cpu-replicas > 1 on TensorFlow"):
        TrainConfig(examples_dir="e", jit_compile=True, cpu_replicas=2, backend="tensorflow")
    TrainConfig(examples_dir="e", jit_compile=True, cpu_replicas=2, backend="jax")  # JAX compiles over devices


def test_vertex_ai_variables_choose_where_everything_goes(converted, tmp_path):
    examples_dir, _ = converted
    env = {
        "AIP_MODEL_DIR": str(tmp_path / "aip-model"),
        "AIP_CHECKPOINT_DIR": str(tmp_path / "aip-checkpoints"),
        "AIP_TENSORBOARD_LOG_DIR": str(tmp_path / "aip-tensorboard"),
    }
    run(TrainConfig(examples_dir=examples_dir, epochs=1, per_replica_batch_size=8, precision="float32"), env=env)
    assert os.path.exists(tmp_path / "aip-model" / "model.weights.h5")
    assert os.listdir(tmp_path / "aip-tensorboard")


@pytest.mark.parametrize(("backend", "interval"), [("tensorflow", "0"), ("jax", "auto")])
def test_killed_training_resumes_after_the_last_finished_epoch(converted, tmp_path, backend, interval):
    examples_dir, _ = converted
    model_dir, checkpoints = tmp_path / "model", tmp_path / "checkpoints"
    command = [
        sys.executable,
        "-m",
        "components.train",
        "--examples",
        examples_dir,
        "--model-dir",
        str(model_dir),
        "--checkpoint-dir",
        str(checkpoints),
        "--epochs",
        "30",
        "--batch-size",
        "8",
        "--precision",
        "float32",
        "--backend",
        backend,
        "--backup-interval",
        interval,
        "--patience",
        "0",  # (all 30 epochs, never stopping early)
    ]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    epoch_log = checkpoints / EPOCH_LOG_FILE
    # killed once this many epochs are backed up: every epoch is, with interval 0; auto backs up the first epoch,
    # then waits 19 times that backup's duration, which on a fast host can outlast the remaining 29 tiny epochs
    least = 3 if interval == "0" else 1
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if epochs_kept(str(checkpoints)) >= least:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)  # what a TPU or spot VM preemption looks like to the process
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL, "training finished before it could be killed"
    kept, finished = epochs_kept(str(checkpoints)), len(epoch_log.read_text().splitlines())
    assert least <= kept <= finished < 30
    if interval == "0":
        assert kept >= finished - 1  # every epoch is backed up; the kill may land between backup and log
    assert not (model_dir / "model.keras").exists()

    resumed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (summary["resumed_after_epoch"], summary["epochs_trained"]) == (kept, 30 - kept)
    assert f"epoch {summary['resumed_after_epoch'] + 1} of 30: loss " in resumed.stderr
    assert "epoch 1 of 30" not in resumed.stdout + resumed.stderr
    with open(model_dir / "history.json") as handle:
        history = json.load(handle)
    assert history["epochs"] == 30 and len(history["history"]["loss"]) == 30
    with open(model_dir / "model_config.json") as handle:
        assert json.load(handle)["backend"] == backend
    import keras

    model = keras.models.load_model(model_dir / "model.keras", compile=False)
    assert (
        model.count_params()
        == build_model(DEFAULT_MODELS["image"], ModelSpec.for_images(TINY_SIZE, len(CLASSES))).count_params()
    )


def test_a_second_training_into_a_checkpoint_folder_in_use_is_refused(converted, tmp_path):
    """One writer per checkpoint folder: while a training holds it (here this test process, as a step orphaned by a
    killed run-local would), another is refused in one line, before it reads or writes a backup; the lock goes with
    its holder (the killed training above resumes into its folder) and a finished training leaves no lock file."""
    import fcntl

    examples_dir, _ = converted
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    with open(checkpoints / ".writer", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("process 4242\n")
        held.flush()
        result = run_cli(
            "components.train",
            "--examples",
            examples_dir,
            "--model-dir",
            str(tmp_path / "model"),
            "--checkpoint-dir",
            str(checkpoints),
            "--epochs",
            "1",
            "--batch-size",
            "8",
        )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: checkpoint dir {checkpoints} is in use by another training (process 4242): wait for it to end or "
        "end it, or pass another --checkpoint-dir"
    )
    assert sorted(os.listdir(checkpoints)) == [".writer"]  # (a finished training leaves none: the test above)


def test_a_truncated_shard_is_one_line_naming_it(converted, tmp_path):
    """TensorFlow reports a damaged record without its file (an 89-line DataLossError): the step names the shard."""
    from tests.conftest import truncated_copy

    copy, shard = truncated_copy(converted[0], "train", tmp_path)
    with pytest.raises(UsageError) as raised:
        run(
            TrainConfig(
                examples_dir=copy,
                model_dir=str(tmp_path / "model"),
                epochs=1,
                per_replica_batch_size=8,
                precision="float32",
                backend="tensorflow",
            )
        )
    assert str(raised.value) == (
        f"examples shard {shard} is damaged (truncated record): convert the data again into a new folder"
    )


def backups_of_two_epochs(checkpoint_dir, saves: int = 2):
    """Keras's own ``BackupAndRestore`` (``double_checkpoint``, as the train step keeps it) after ``saves`` epochs of
    a one-layer model whose kernel is filled with the epoch's number; the restore of a fresh model from it."""
    import keras
    import numpy as np

    def model():
        built = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        built.compile(optimizer="adam", loss="mse")
        built.optimizer.build(built.trainable_variables)
        return built

    def callback(of):
        backup = keras.callbacks.BackupAndRestore(
            str(checkpoint_dir / BACKUP_DIR), delete_checkpoint=False, double_checkpoint=True
        )
        backup.set_model(of)
        return backup

    trained = model()
    backup = callback(trained)
    for epoch in range(saves):
        trained.layers[0].kernel.assign(np.full((3, 2), epoch + 1.0))
        backup.on_epoch_end(epoch)

    def restore() -> tuple[int, float]:
        """(the epoch a restart resumes after, the kernel's value it resumes with)"""
        fresh = model()
        fresh.layers[0].kernel.assign(np.zeros((3, 2)))
        callback(fresh).on_train_begin()
        return fresh._initial_epoch or 0, float(np.asarray(fresh.layers[0].kernel).mean())

    return backup, restore


def cut_short(path) -> None:
    """What a kill in the middle of writing ``path`` leaves: its first half."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    ("cut", "saves", "resumed"),
    [
        ("nothing", 2, (2, 2.0)),
        ("weights", 2, (1, 1.0)),  # killed while saving the second epoch's weights
        ("epoch count", 2, (1, 1.0)),  # killed while writing the second epoch's count, after its weights
        ("first weights", 1, (0, 0.0)),  # the first backup's weights written, its count not yet: start afresh
    ],
)
def test_a_backup_cut_short_by_a_kill_is_settled_before_any_host_loads_it(tmp_path, cut, saves, resumed):
    backup, restore = backups_of_two_epochs(tmp_path, saves)
    weights, metadata = pathlib.Path(backup._weights_path), pathlib.Path(backup._training_metadata_path)
    if cut == "weights":
        cut_short(weights)
        metadata.write_bytes(pathlib.Path(f"{metadata}.bkp").read_bytes())  # its count not yet rewritten
    elif cut == "epoch count":
        metadata.write_text("")  # opened for writing, not yet written
    elif cut == "first weights":
        metadata.unlink()
    settle_backup(str(weights), str(metadata))
    assert restore() == resumed
    assert epochs_kept(str(tmp_path)) == resumed[0]  # what the hosts agree on before loading is what is loaded


def test_a_backup_whose_both_copies_are_unreadable_is_one_line(tmp_path):
    backup, _ = backups_of_two_epochs(tmp_path)
    weights = pathlib.Path(backup._weights_path)
    cut_short(weights)
    cut_short(pathlib.Path(f"{weights}.bkp"))
    with pytest.raises(UsageError) as raised:
        settle_backup(str(weights), backup._training_metadata_path)
    assert str(raised.value) == (
        f"the backup in {tmp_path / BACKUP_DIR} and its previous copy are unreadable: remove it to train from the "
        "first epoch"
    )


def test_records_that_miss_a_feature_name_the_file_and_the_feature(tmp_path):
    import tensorflow as tf

    os.makedirs(tmp_path / "train")
    shard = tmp_path / "train" / "train-00000-of-00001.tfrec"
    with tf.io.TFRecordWriter(str(shard)) as writer:
        feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x"]))}
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    stats = {
        "modality": "image",
        "image_size": 16,
        "num_classes": 2,
        "class_names": ["a", "b"],
        "counts": {"train": 64, "validation": 0, "test": 0},
        "num_examples": 64,
    }
    STATS.write(str(tmp_path), stats)
    result = run_cli("components.train", "--examples", str(tmp_path), "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.strip().splitlines() if line.startswith("error:")]
    assert line == (
        f"error: TFRecord file {shard} does not match the schema: missing feature(s) class, label, one_hot_class, "
        "size (convert the images with `python -m components.convert`)"
    )


def test_validation_batches_split_evenly_across_replicas():
    assert validation_batching(11, 1, 16, static=False) == (11, 11)
    assert validation_batching(184, 1, 32, static=False) == (32, 184)
    assert validation_batching(11, 2, 16, static=True) == (10, 10)
    assert validation_batching(184, 2, 32, static=True) == (32, 160)
    assert validation_batching(1, 2, 16, static=True) == (0, 0)


def test_each_model_builds_at_its_stated_minimum_size_and_train_refuses_smaller(tmp_path, image_folder):
    """Each built-in image model's ``min_image_size`` is its real limit: it builds there, and one pixel less is
    refused in one line before Keras's "Computed output size would be zero or negative"."""
    from components.cli import UsageError
    from components.convert.core import ConvertConfig
    from components.convert.core import run as convert
    from components.keras_backend import activate_backend
    from components.models import BUILTINS, build_model
    from components.train.config import TrainConfig
    from components.train.core import run

    activate_backend("tensorflow")
    for name, least in ((name, b.min_image_size) for name, b in BUILTINS.items() if b.modality == "image"):
        assert build_model(name, ModelSpec.for_images(least, 3)).output_shape == (None, 3)
        if least > 8:
            with pytest.raises(Exception, match=r"zero or negative|Negative dimension|must be"):
                build_model(name, ModelSpec.for_images(least - 1, 3))
    examples = str(tmp_path / "examples")
    convert(ConvertConfig(source=image_folder, output_dir=examples, image_size=8))
    with pytest.raises(UsageError, match=r"image size .* 8 is too small for codelab_convnet, which needs 16"):
        run(TrainConfig(examples_dir=examples, model_dir=str(tmp_path / "model"), model_name="codelab_convnet"))


def test_the_same_seed_trains_the_same_model_on_the_cpu(converted, tmp_path):
    """Keras's seeds, the seeded shuffles, and tf.data keeping its order whatever its threads do: two runs with the
    same seed give the same losses, epoch by epoch (they did not while tf.data could reorder for throughput)."""
    from components.train.config import TrainConfig
    from components.train.core import run

    examples_dir, _ = converted
    histories = []
    for attempt in range(2):
        model_dir = tmp_path / str(attempt)
        run(TrainConfig(examples_dir=examples_dir, model_dir=str(model_dir), epochs=2, per_replica_batch_size=4))
        histories.append(json.loads((model_dir / "history.json").read_text())["history"]["loss"])
    assert histories[0] == histories[1]


def test_several_steps_per_execution_train_and_validate_as_one_step_at_a_time(converted, tmp_path, caplog):
    """A compiled call of several steps never crosses an epoch's end: --steps-per-execution 3 over the 4 steps of an
    epoch runs 2 a call (3 would train 6 steps an epoch), and validation's 2 steps are read once even in a call of 4
    (Keras's steps over a repeated dataset read 4 batches). The histories are those of one step a call."""
    from components.train.config import TrainConfig
    from components.train.core import run

    examples_dir, stats = converted
    assert (stats["counts"]["train"] // 8, -(-stats["counts"]["validation"] // 8)) == (4, 2)  # (the batch of 8)
    histories, kept = [], []
    for steps in (1, 3, 4):
        model_dir = tmp_path / str(steps)
        config = TrainConfig(
            examples_dir=examples_dir,
            model_dir=str(model_dir),
            epochs=2,
            per_replica_batch_size=8,
            steps_per_execution=steps,
            precision="float32",
        )
        with caplog.at_level(logging.INFO, logger="components.train"):
            run(config)
        histories.append(json.loads((model_dir / "history.json").read_text())["history"])
        kept.append(json.loads((model_dir / "model_config.json").read_text())["steps_per_execution"])
    assert kept == [1, 2, 4]
    for history in histories[1:]:
        for name in ("loss", "val_loss", "val_accuracy"):
            assert history[name] == pytest.approx(histories[0][name], rel=1e-5), name
    assert "--steps-per-execution 3: 2 steps a call, so that a call ends where the epoch of 4 steps does" in caplog.text


def test_one_device_traces_the_training_step_once_and_validates_each_example_once_an_epoch(
    converted, tmp_path, monkeypatch
):
    """TensorFlow traces a step function again when its first trace made variables: the optimizer's and the metric's
    are made before fit, so that one device traces the training step once, as several do. Validation reads each
    example once an epoch, by a count of steps, without Keras's "Your input ran out of data" in the log."""
    import warnings

    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    from components.train.config import TrainConfig
    from components.train.core import run

    traced = []
    train_step = TensorFlowTrainer.train_step

    def counted(self, data):
        traced.append(data)
        return train_step(self, data)

    monkeypatch.setattr(TensorFlowTrainer, "train_step", counted)
    examples_dir, stats = converted
    config = TrainConfig(
        examples_dir=examples_dir, model_dir=str(tmp_path), epochs=3, per_replica_batch_size=8, backend="tensorflow"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(config)["replicas"] == 1
    assert len(traced) == 1
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    count = stats["counts"]["validation"]
    accuracies = json.loads((tmp_path / "history.json").read_text())["history"]["val_accuracy"]
    assert count % 8 and len(accuracies) == 3  # (a last batch smaller than the others)
    assert all(abs(a * count - round(a * count)) < 1e-4 for a in accuracies), (count, accuracies)


def test_an_epochs_progress_line_gives_its_figures_its_seconds_and_the_time_left():
    from components.train.callbacks import epoch_line

    logs = {"loss": 0.123456, "accuracy": 0.9, "val_loss": 1.5, "val_accuracy": 0.875, "learning_rate": 0.002}
    assert epoch_line(3, 15, logs, 4.94, 61.2) == (
        "epoch 3 of 15: loss 0.1235, accuracy 0.9000, val_loss 1.5000, val_accuracy 0.8750 (4.9s; about 61s left)"
    )
    assert epoch_line(15, 15, {"loss": 0.5}, 2.0, 0.0) == "epoch 15 of 15: loss 0.5000 (2.0s)"


class Clock:
    """A stand-in for ``time.monotonic`` in the train step's module: time moves only when the test says."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


def test_each_epoch_is_logged_before_it_is_backed_up(tmp_path, monkeypatch):
    """A kill between the two must leave the epoch log ahead of the backup (resume allows for that), never a
    backed-up epoch missing from the log: make test once killed training right between them."""
    import keras

    from components.train.callbacks import training_callbacks
    from components.train.placement import Placement

    checkpoints = str(tmp_path / "checkpoints")
    os.makedirs(checkpoints)
    logged_at_backup = []
    save = keras.callbacks.BackupAndRestore._save_model

    def save_and_count(callback):
        logged_at_backup.append(len(read_epoch_log(os.path.join(checkpoints, EPOCH_LOG_FILE))))
        save(callback)

    monkeypatch.setattr(keras.callbacks.BackupAndRestore, "_save_model", save_and_count)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    callbacks = training_callbacks(checkpoints, str(tmp_path / "logs"), Placement("tensorflow", "cpu", 1, "x"), 0.0)
    hooks = keras.callbacks.CallbackList(callbacks, model=model, epochs=3, steps=1)
    hooks.on_train_begin()
    for epoch in range(3):
        hooks.on_epoch_begin(epoch)
        hooks.on_epoch_end(epoch, {"loss": 1.0})
    hooks.on_train_end()
    assert logged_at_backup == [1, 2, 3]


@pytest.mark.parametrize(
    ("interval", "backed_up"),
    [
        (None, [1, 1, 1, 1, 5, 5, 5, 5, 9, 9]),  # auto: 19 x 0.2 s = 3.8 s after each backup
        (0.0, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),  # every epoch
        (2.5, [0, 0, 3, 3, 3, 6, 6, 6, 9, 9]),
    ],
)
def test_backups_are_taken_as_often_as_the_interval_says_and_restarts_resume_from_the_last(
    tmp_path, monkeypatch, interval, backed_up
):
    """Epochs of 1 s and backups of 0.2 s: which epochs a restart would resume after, epoch by epoch."""
    import keras

    from components.train import backup
    from components.train.callbacks import training_callbacks
    from components.train.placement import Placement

    clock = Clock()
    monkeypatch.setattr(backup, "time", clock)  # the backups' clock
    save = keras.callbacks.BackupAndRestore._save_model

    def slow_save(callback):
        save(callback)
        clock.now += 0.2

    monkeypatch.setattr(keras.callbacks.BackupAndRestore, "_save_model", slow_save)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    checkpoints = str(tmp_path / "checkpoints")
    os.makedirs(checkpoints)  # as the train step does before it trains
    callbacks = training_callbacks(
        checkpoints, str(tmp_path / "logs"), Placement("tensorflow", "cpu", 1, "x"), interval
    )
    hooks = keras.callbacks.CallbackList(callbacks, model=model, epochs=10, steps=1)
    hooks.on_train_begin()
    kept = []
    for epoch in range(10):
        hooks.on_epoch_begin(epoch)
        clock.now += 1.0
        hooks.on_epoch_end(epoch, {"loss": 1.0})
        kept.append(epochs_kept(checkpoints))
    hooks.on_train_end()
    assert kept == backed_up
    assert len(read_epoch_log(os.path.join(checkpoints, EPOCH_LOG_FILE))) == 10  # the log has every epoch


def test_a_dag_runs_backup_is_found_again_by_a_retried_or_resubmitted_run_with_the_same_inputs(converted):
    """On Cloud Storage the train step keeps its backup under the bucket by a key of its inputs: a retried task
    (another model folder) and the same run submitted again find it; other examples or settings do not; locally,
    run-local gives the step its own checkpoint dir."""
    import dataclasses

    from components.train.config import lasting_checkpoint_dir

    config = TrainConfig(examples_dir=converted[0], epochs=4, hparams=("width=0.5",))
    first = lasting_checkpoint_dir(config, "gs://bucket/root/job-1/train/model")
    assert re.fullmatch(r"gs://bucket/checkpoints/[0-9a-f]{16}", first)
    retried = dataclasses.replace(config, model_dir="/gcs/bucket/root/job-2/train/model", backup_interval=30.0)
    assert lasting_checkpoint_dir(retried, "gs://bucket/root/job-2/train/model") == first
    for changed in ({"epochs": 5}, {"hparams": ("width=1.0",)}, {"seed": 7}):
        assert lasting_checkpoint_dir(dataclasses.replace(config, **changed), "gs://bucket/r/model") != first
    assert lasting_checkpoint_dir(config, "/work/runs/local/artifacts/run/train/model") == ""


@pytest.mark.parametrize("accelerator", ["cpu", "tpu"])
def test_training_datasets_autotune_on_accelerators_only(converted, tmp_path, accelerator):
    """On the CPU the training and validation datasets run without tf.data's autotuning, whose thread held the end of
    ``fit`` for up to its period (a minute at most) while Keras deleted their iterators; on a TPU or a GPU they keep
    it. Either way they give the same batches."""
    from components.modalities import example_shape, spec_of
    from components.schema import read_stats
    from components.train.inputs import Examples, datasets
    from components.train.placement import Placement

    stats = read_stats(converted[0])
    examples = Examples(stats, "image", stats.num_classes, example_shape(stats), None, spec_of(stats))
    config = TrainConfig(examples_dir=converted[0], model_dir=str(tmp_path / "model"), seed=7)
    train, validation = datasets(config, examples, Placement("tensorflow", accelerator, 1, "OneDevice"), 8)
    for dataset in (train, validation):
        assert dataset.options().autotune.enabled is (False if accelerator == "cpu" else None)
    cpu = datasets(config, examples, Placement("tensorflow", "cpu", 1, "OneDevice"), 8)[0]
    for ours, other in zip(train.take(3), cpu.take(3), strict=True):
        assert (ours[0].numpy() == other[0].numpy()).all() and (ours[1].numpy() == other[1].numpy()).all()
