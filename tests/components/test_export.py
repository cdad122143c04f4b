"""The export step: a CPU SavedModel rebuilt from the weights, serving encoded images of any size."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from components.export.core import ExportConfig, run
from tests.conftest import CLASSES, COLORS, TINY_SIZE, image_bytes, run_cli


@pytest.fixture(scope="module")
def exported(converted, trained, tmp_path_factory):
    examples_dir, _ = converted
    model_dir, _ = trained
    output = str(tmp_path_factory.mktemp("export"))
    return output, run(ExportConfig(model_dir=model_dir, examples_dir=examples_dir, output_dir=output))


def test_saved_model_serves_jpeg_and_png_of_any_size(exported):
    import tensorflow as tf

    output, _ = exported
    serving = tf.saved_model.load(os.path.join(output, "saved_model")).signatures["serving_default"]
    assert list(serving.structured_input_signature[1]) == ["image_bytes"]
    batch = tf.constant(
        [
            image_bytes(COLORS["cat"], (120, 45), "JPEG", seed=1),
            image_bytes(COLORS["fish"], (33, 90), "PNG", seed=2),
            image_bytes(COLORS["dog"], (16, 16), "JPEG", seed=3),
        ]
    )
    result = serving(image_bytes=batch)
    assert sorted(result) == ["class_id", "label", "probabilities"]
    probabilities = result["probabilities"].numpy()
    assert probabilities.shape == (3, len(CLASSES))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    labels = [label.decode() for label in result["label"].numpy()]
    assert labels == [CLASSES[i] for i in result["class_id"].numpy()]
    assert labels == ["cat", "fish", "dog"]


def test_decoded_image_signature_matches_the_bytes_signature(exported, converted):
    import tensorflow as tf

    output, _ = exported
    loaded = tf.saved_model.load(os.path.join(output, "saved_model"))
    encoded = image_bytes(COLORS["dog"], (TINY_SIZE, TINY_SIZE), "PNG", seed=4)
    from_bytes = loaded.signatures["serving_default"](image_bytes=tf.constant([encoded]))
    pixels = tf.cast(tf.io.decode_png(encoded, channels=3), tf.float32)[tf.newaxis] / 255.0
    from_pixels = loaded.signatures["serving_images"](images=pixels)
    np.testing.assert_allclose(from_bytes["probabilities"], from_pixels["probabilities"], atol=1e-6)


def test_export_records_parity_with_the_trained_model(exported, converted):
    output, report = exported
    _, stats = converted
    with open(os.path.join(output, "export.json")) as handle:
        assert json.load(handle) == report
    parity = report["parity"]
    assert parity["num_examples"] == stats["counts"]["test"]
    assert parity["argmax_agreement"] == 1.0
    assert parity["max_probability_difference"] < 1e-4


def test_model_dir_that_is_not_a_training_output_is_a_one_line_error(tmp_path, converted):
    examples_dir, _ = converted
    result = run_cli(
        "components.export", "--model-dir", str(tmp_path), "--examples", examples_dir, "--output", str(tmp_path / "o")
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: model dir {tmp_path} has no model_config.json: pass the train step's output"
    ]
