"""Transfer learning: a pretrained backbone under a new classifier, its head trained with the backbone frozen, then
its top blocks fine-tuned (``components.train.transfer``). There is no network here, so the pretrained weights are
a backbone's trained on these images (``--weights none``) and saved, as a user would pass their own file; ImageNet's
download is tested against a local HTTP server in its place, and its refusal against a closed port."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from components.artifacts.checkpoints import FINE_TUNE_BACKUP_DIR, epochs_kept
from components.cli import UsageError
from components.models import BACKBONES, Backbone, backbone_of, check_image_size, load
from components.train.config import TrainConfig
from components.train.core import run
from components.train.transfer import weights_file
from tests.conftest import BUCKET, IN_MEMORY, REPO_ROOT

SIZE = 32  # the smallest the MobileNets take
MODEL = "mobilenet_v3_small"


@pytest.fixture(scope="module")
def converted32(image_folder, tmp_path_factory) -> tuple[str, dict]:
    from components.convert.core import ConvertConfig
    from components.convert.core import run as convert

    output = str(tmp_path_factory.mktemp("examples32"))
    stats = convert(
        ConvertConfig(
            source=image_folder,
            output_dir=output,
            image_size=SIZE,
            validation_fraction=0.2,
            test_fraction=0.2,
            pipeline_args=IN_MEMORY,
        )
    )
    return output, stats


@pytest.fixture(scope="module")
def backbone_weights(tmp_path_factory) -> str:
    """The weights of a MobileNetV3-Small backbone, saved as a user saves theirs (Keras's ``save_weights`` of the
    backbone): Keras's initial weights, each moved by seeded noise, so that no fresh build has them (the batch
    norm statistics included)."""
    import keras

    keras.utils.set_random_seed(0)  # the same initial weights every run
    backbone = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(SIZE, SIZE, 3), pooling="avg"
    )
    noise = np.random.default_rng(0)
    for weight in backbone.weights:
        value = np.array(weight)
        weight.assign(value * noise.uniform(0.9, 1.1, value.shape) + noise.normal(0.0, 0.01, value.shape))
    path = os.path.join(str(tmp_path_factory.mktemp("scratch")), "backbone.weights.h5")
    backbone.save_weights(path)
    return path


def layer_weights(layer) -> list[np.ndarray]:
    return [np.array(weight) for weight in layer.weights]


def test_fine_tuning_trains_the_head_then_the_top_blocks_and_never_the_batch_norm(
    converted32, backbone_weights, tmp_path, caplog
):
    import keras

    caplog.set_level("INFO", logger="components.train")
    model_dir = str(tmp_path / "model")
    result = run(
        TrainConfig(
            examples_dir=converted32[0],
            model_dir=model_dir,
            model_name=MODEL,
            weights=backbone_weights,
            epochs=2,
            fine_tune_epochs=2,
            fine_tune_blocks=2,
            per_replica_batch_size=8,
            backend="tensorflow",
            precision="float32",
        ),
        env={},
    )
    assert result["epochs_trained"] == 4
    with open(os.path.join(model_dir, "history.json")) as handle:
        assert len(json.load(handle)["history"]["loss"]) == 4  # both phases' epochs, one curve
    lines = [record.getMessage() for record in caplog.records]
    assert [line.split(":")[0] for line in lines if line.startswith("epoch ")] == [
        f"epoch {n} of 4" for n in range(1, 5)
    ]
    # MobileNetV3-Small's top two blocks, by their layers' names: its last expanded convolution and conv_1
    top = re.compile(r"(expanded_conv_10|conv_1)(_|$)")
    reference = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(SIZE, SIZE, 3), pooling="avg"
    )
    reference.load_weights(backbone_weights)
    learners = [
        layer
        for layer in reference.layers
        if top.match(layer.name) and not isinstance(layer, keras.layers.BatchNormalization)
    ]
    unfrozen = sum(weight.size for layer in learners for weight in layer_weights(layer))
    with open(os.path.join(model_dir, "model_config.json")) as handle:
        config = json.load(handle)
    assert (config["weights"], config["head_epochs"]) == (backbone_weights, 2)
    assert config["fine_tune"] == {
        "epochs": 2,
        "blocks": 2,
        "learning_rate": pytest.approx(0.0002),
        "trainable_backbone_weights": unfrozen,
    }
    trained = backbone_of(keras.models.load_model(os.path.join(model_dir, "model.keras"), compile=False))
    changed = set()
    for before, after in zip(reference.layers, trained.layers, strict=True):
        same = all(np.array_equal(a, b) for a, b in zip(layer_weights(before), layer_weights(after), strict=True))
        if not same:
            changed.add(before.name)
    assert changed  # the top blocks learned
    assert all(top.match(name) for name in changed), sorted(changed)  # and nothing below them did
    assert not any(isinstance(reference.get_layer(name), keras.layers.BatchNormalization) for name in changed)


def test_head_only_leaves_the_whole_backbone_as_loaded(converted32, backbone_weights, tmp_path):
    import keras

    model_dir = str(tmp_path / "model")
    run(
        TrainConfig(
            examples_dir=converted32[0],
            model_dir=model_dir,
            model_name=MODEL,
            weights=backbone_weights,
            epochs=2,
            fine_tune_epochs=0,
            per_replica_batch_size=8,
            backend="tensorflow",
            precision="float32",
        ),
        env={},
    )
    reference = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(SIZE, SIZE, 3), pooling="avg"
    )
    reference.load_weights(backbone_weights)
    trained = backbone_of(keras.models.load_model(os.path.join(model_dir, "model.keras"), compile=False))
    for before, after in zip(reference.weights, trained.weights, strict=True):
        np.testing.assert_array_equal(np.array(before), np.array(after))
    with open(os.path.join(model_dir, "model_config.json")) as handle:
        assert "fine_tune" not in json.load(handle)
    # evaluate loads it as it loads any model, and its report says where its weights came from
    from components.evaluate.core import EvaluateConfig
    from components.evaluate.core import run as evaluate

    result = evaluate(
        EvaluateConfig(
            examples_dir=converted32[0], model_dir=model_dir, output_dir=str(tmp_path / "e"), min_accuracy=0.0
        )
    )
    with open(result["report_html"]) as handle:
        assert f"<td>{backbone_weights} weights: 2 epochs of its head, the backbone frozen</td>" in handle.read()


def test_a_kill_while_fine_tuning_resumes_there_without_training_the_head_again(
    converted32, backbone_weights, tmp_path
):
    model_dir, checkpoints = tmp_path / "model", tmp_path / "checkpoints"
    command = [
        sys.executable,
        "-m",
        "components.train",
        "--examples",
        converted32[0],
        "--model-dir",
        str(model_dir),
        "--checkpoint-dir",
        str(checkpoints),
        "--model",
        MODEL,
        "--weights",
        backbone_weights,
        "--epochs",
        "2",
        "--fine-tune-epochs",
        "4",
        "--batch-size",
        "8",
        "--precision",
        "float32",
        "--backend",
        "tensorflow",
        "--backup-interval",
        "0",
        "--patience",
        "0",  # (every epoch trained: none stops it early)
    ]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if epochs_kept(str(checkpoints), FINE_TUNE_BACKUP_DIR) >= 3:  # a fine-tuning epoch backed up
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL, "training finished before it could be killed"
    kept = epochs_kept(str(checkpoints), FINE_TUNE_BACKUP_DIR)
    assert 3 <= kept < 6
    resumed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (summary["resumed_after_epoch"], summary["epochs_trained"]) == (kept, 6 - kept)
    assert "the head was trained before" in resumed.stderr
    assert f"epoch {kept + 1} of 6: loss " in resumed.stderr and "epoch 1 of 6" not in resumed.stderr
    with open(model_dir / "history.json") as handle:
        assert len(json.load(handle)["history"]["loss"]) == 6
    assert not checkpoints.exists() or not os.listdir(checkpoints)  # a finished run leaves no backup behind


def test_the_jax_path_fine_tunes_over_two_devices_in_bfloat16_and_exports_with_parity(
    converted32, backbone_weights, tmp_path
):
    from components.export.core import ExportConfig
    from components.export.core import run as export
    from tests.components.test_train_jax import TWO_DEVICES, jax_env, run_train

    model_dir = str(tmp_path / "model")
    trained = run_train(
        "--examples",
        converted32[0],
        "--model-dir",
        model_dir,
        "--model",
        MODEL,
        "--weights",
        backbone_weights,
        "--epochs",
        "1",
        "--fine-tune-epochs",
        "1",
        "--batch-size",
        "8",
        "--backend",
        "jax",
        "--cpu-replicas",
        "2",
        "--precision",
        "mixed_bfloat16",
        env=jax_env(XLA_FLAGS=TWO_DEVICES),
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    with open(os.path.join(model_dir, "model_config.json")) as handle:
        config = json.load(handle)
    assert (config["backend"], config["replicas"], config["precision"]) == ("jax", 2, "mixed_bfloat16")
    assert config["distribution"]["variables_replicated"] and config["fine_tune"]["blocks"] == 3
    report = export(ExportConfig(model_dir=model_dir, examples_dir=converted32[0], output_dir=str(tmp_path / "e")))
    # the float32 SavedModel against the model as it trained, in bfloat16: a few borderline examples of this barely
    # trained model's (two of 13 here) may go the other way, no more
    parity = report["parity"]
    assert parity["argmax_agreement"] * parity["num_examples"] >= parity["num_examples"] - 2, parity
    formats = report["formats"]
    # the int8 file takes pixels as decoded: only the pixel scaling left its network, not the backbone's range
    assert formats["tflite_float"]["test_accuracy"] == formats["saved_model"]["test_accuracy"]
    assert formats["saved_model"]["test_accuracy"] - formats["tflite_int8"]["test_accuracy"] <= 0.2


def test_the_int8_source_network_drops_the_pixel_scaling_and_keeps_the_backbones_range():
    """Export quantizes the network without its pixel scaling (input in [0, 1]); a backbone's own rescaling to the
    range it takes stays."""
    import keras

    from components.export.image import unit_range_network
    from components.models import ModelSpec, build_model

    # (a backbone's answers do not show it: untrained, in inference mode, its features all but vanish)
    for name, size, kept in (("mobilenet_v3_small", SIZE, (255.0, 0.0)), ("xception", 71, (2.0, -1.0))):
        bare = unit_range_network(build_model(name, ModelSpec.for_images(size, 3)), size)
        first, second = bare.layers[1:3]
        assert isinstance(first, keras.layers.Identity)  # the pixel scaling
        assert isinstance(second, keras.layers.Rescaling) and (second.scale, second.offset) == kept


class Served(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass


def test_imagenet_weights_are_downloaded_once_into_the_cache_on_gcs(gcs, backbone_weights, monkeypatch, tmp_path):
    """The one network edge: the keras-applications bucket is a local HTTP server here, serving a file in its
    place (its origin and hash in the table)."""
    import functools

    import keras

    served = tmp_path / "served"
    served.mkdir()
    name = "weights_mobilenet_v3_small_no_top.weights.h5"
    with open(backbone_weights, "rb") as handle:
        content = handle.read()
    (served / name).write_bytes(content)
    handler = functools.partial(Served, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}/{name}"
    spec = BACKBONES[MODEL]
    monkeypatch.setitem(
        BACKBONES, MODEL, Backbone(spec.application, spec.takes, spec.block, (origin, hashlib.md5(content).hexdigest()))
    )
    cache = f"gs://{BUCKET}/root/keras-weights"
    try:
        first = weights_file("imagenet", MODEL, cache)
    finally:
        server.shutdown()
    with open(first, "rb") as handle:
        assert handle.read() == content
    assert gcs.blob(f"root/keras-weights/{name}").download_as_bytes() == content  # kept for the next runs
    # the next run (another machine: a fresh local cache) finds it there, with the server gone
    again = weights_file("imagenet", MODEL, cache)
    assert again != first
    with open(again, "rb") as handle:
        assert handle.read() == content
    model = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(SIZE, SIZE, 3), pooling="avg"
    )
    model.load_weights(again)


def test_weights_on_gcs_are_copied_to_a_local_file_and_a_missing_one_is_one_line(gcs, tmp_path):
    """``--weights gs://...``: Keras reads local files only, so the run gets a local copy, byte for byte."""
    content = os.urandom(3000)
    gcs.blob("root/mine.weights.h5").upload_from_string(content)
    local = weights_file(f"gs://{BUCKET}/root/mine.weights.h5", MODEL, str(tmp_path / "cache"))
    assert "://" not in local and local.endswith("mine.weights.h5")
    with open(local, "rb") as handle:
        assert handle.read() == content
    with pytest.raises(UsageError, match=f"--weights gs://{BUCKET}/root/gone.weights.h5: no such file"):
        weights_file(f"gs://{BUCKET}/root/gone.weights.h5", MODEL, str(tmp_path / "cache"))


def test_imagenet_out_of_reach_is_one_line_naming_the_way_out(monkeypatch, tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    origin = f"http://127.0.0.1:{port}/weights_no_top.h5"
    spec = BACKBONES[MODEL]
    monkeypatch.setitem(BACKBONES, MODEL, Backbone(spec.application, spec.takes, spec.block, (origin, "0" * 32)))
    with pytest.raises(UsageError) as refused:
        weights_file("imagenet", MODEL, str(tmp_path / "cache"))
    message = str(refused.value)
    assert message.startswith(
        f"--weights imagenet: the ImageNet weights of {MODEL} could not be downloaded from {origin} ("
    )
    assert message.endswith("pass --weights PATH (local or gs://), or --weights none") and "\n" not in message


def test_the_imagenet_table_is_keras_applications_own():
    """Our origins and hashes are the ones ``keras.applications`` downloads (it fails on a Keras upgrade that moves
    them)."""
    from keras.src.applications import efficientnet_v2, mobilenet_v3, xception

    expected = {
        "mobilenet_v3_small": (
            f"{mobilenet_v3.BASE_WEIGHT_PATH}weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5",
            mobilenet_v3.WEIGHTS_HASHES["small_224_1.0_float"][1],
        ),
        "mobilenet_v3_large": (
            f"{mobilenet_v3.BASE_WEIGHT_PATH}weights_mobilenet_v3_large_224_1.0_float_no_top_v2.h5",
            mobilenet_v3.WEIGHTS_HASHES["large_224_1.0_float"][1],
        ),
        "efficientnet_v2_b0": (
            f"{efficientnet_v2.BASE_WEIGHTS_PATH}efficientnetv2-b0_notop.h5",
            efficientnet_v2.WEIGHTS_HASHES["b0"][1],
        ),
        "xception": (xception.WEIGHTS_PATH_NO_TOP, "b0042744bf5b25fce3cb969f33bebb97"),
    }
    assert {name: spec.imagenet for name, spec in BACKBONES.items()} == expected


def test_weights_that_do_not_fit_are_one_line(converted32, backbone_weights, tmp_path):
    def train(**options):
        return run(
            TrainConfig(
                examples_dir=converted32[0],
                model_dir=str(tmp_path / "m"),
                epochs=1,
                per_replica_batch_size=8,
                backend="tensorflow",
                **options,
            ),
            env={},
        )

    with pytest.raises(UsageError, match=r"^--weights imagenet: codelab_convnet is trained from scratch; pretrained"):
        train(model_name="codelab_convnet", weights="imagenet")
    with pytest.raises(UsageError, match=r"^--weights /nowhere/w.h5: no such file; give the backbone's weights"):
        train(model_name=MODEL, weights="/nowhere/w.h5")
    with pytest.raises(
        UsageError,
        match=rf"^--weights {re.escape(backbone_weights)}: not the weights of "
        r"mobilenet_v3_large's backbone",
    ):
        train(model_name="mobilenet_v3_large", weights=backbone_weights)
    with pytest.raises(UsageError, match=r"^--image-size 32 is too small for xception, which needs 71 or more"):
        check_image_size(load("xception"), 32)


def test_the_run_local_summary_says_where_a_backbones_weights_came_from_and_its_two_phases():
    from pipeline.local.summary import model_line

    common = {"learning_rate": 0.002, "lr_schedule": "constant", "global_batch_size": 32}
    tuned = {
        "model_name": MODEL,
        "epochs": 5,
        "weights": "imagenet",
        "head_epochs": 5,
        "fine_tune": {"epochs": 10, "blocks": 3, "learning_rate": 0.0002},
        **common,
    }
    assert model_line(tuned) == (
        f"{MODEL} from imagenet weights, 5 epochs of its head then 10 fine-tuning its top 3 "
        "blocks, learning rate 0.002 (constant), batch 32"
    )
    head_only = {**tuned, "fine_tune": None}
    assert model_line(head_only).startswith(f"{MODEL} from imagenet weights, 5 epochs of its head, learning rate")
    scratch = {"model_name": MODEL, "epochs": 15, "weights": "none", **common}
    assert model_line(scratch).startswith(f"{MODEL}, 15 epochs, learning rate")


def test_the_report_says_where_a_backbones_weights_came_from_and_its_two_phases():
    from components.artifacts.model import History
    from components.evaluate.report import run_facts

    training = {
        "weights": "gs://b/w.weights.h5",
        "head_epochs": 5,
        "fine_tune": {"epochs": 10, "blocks": 3, "learning_rate": 0.0002},
    }
    rows = run_facts({"model_name": MODEL, "training": training}, History({}, 15, 9.0))
    assert (
        "<tr><td>pretrained</td><td>gs://b/w.weights.h5 weights: 5 epochs of its head, the backbone frozen, "
        "then 10 fine-tuning its top 3 blocks at learning rate 0.0002</td></tr>"
    ) in rows
    assert "pretrained" not in run_facts({"model_name": "codelab_convnet_bn", "training": {}}, History({}, 15, 9.0))


def test_an_interrupted_fine_tuning_is_said_to_stop_at_its_epoch_of_both_phases(tmp_path):
    """run-local's summary of an interrupted run counts the epochs over both phases: 7 of 5 + 10, not 5 of 5."""
    from components.artifacts.checkpoints import BACKUP_DIR, BACKUP_METADATA
    from pipeline.local.summary import epochs_done

    for folder, epoch in ((BACKUP_DIR, 5), (FINE_TUNE_BACKUP_DIR, 7)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / BACKUP_METADATA).write_text(json.dumps({"epoch": epoch}))
    assert (epochs_kept(str(tmp_path)), epochs_kept(str(tmp_path), BACKUP_DIR)) == (7, 5)
    spec = {
        "root": {
            "inputDefinitions": {
                "parameters": {"epochs": {"defaultValue": 5}, "fine_tune_epochs": {"defaultValue": 10}}
            }
        }
    }
    assert epochs_done(str(tmp_path), {}, spec) == " (after epoch 7 of 15)"
    assert epochs_done(str(tmp_path), {"epochs": 8}, spec) == " (after epoch 7 of 8)"  # still its head
