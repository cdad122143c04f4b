"""Serving compatibility, as TFX's InfraValidator checks it: the Model Registry serves our exports with Vertex AI's
prebuilt TensorFlow CPU image (``vertex_resources.DEFAULT_SERVING_IMAGE``, tf2-cpu.2-15), while we export with
TensorFlow 2.21. The export is loaded by that TensorFlow, in its own environment (``serving/tf2.<minor>``, a member
of the uv workspace, pinned by ``uv.lock``, built here from the package index and cached in ``.serving/``), and its
answers must equal 2.21's on the same image bytes. When the serving image changes, the version followed changes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

SERVE = """
import json, sys
import tensorflow as tf
model_dir, paths = sys.argv[1], sys.argv[2:]
serving = tf.saved_model.load(model_dir).signatures["serving_default"]
answers = serving(image_bytes=tf.constant([open(path, "rb").read() for path in paths]))
print(json.dumps({"version": tf.__version__, "probabilities": answers["probabilities"].numpy().tolist(),
                  "label": [label.decode() for label in answers["label"].numpy()]}))
"""


def serving_version() -> str:
    """``2.15`` from ``.../tf2-cpu.2-15:latest``."""
    from components.vertex_resources import DEFAULT_SERVING_IMAGE

    match = re.search(r"tf2-cpu\.2-(\d+)", DEFAULT_SERVING_IMAGE)
    assert match, f"the serving image {DEFAULT_SERVING_IMAGE} is not a Vertex AI TensorFlow 2 CPU image"
    return f"2.{match.group(1)}"


@pytest.fixture(scope="module")
def serving_python() -> str:
    """The Python of the serving TensorFlow's environment, synced from uv.lock (a no-op once it is there)."""
    version = serving_version()
    member = os.path.join(REPO_ROOT, "serving", f"tf{version}")
    assert os.path.isfile(os.path.join(member, "pyproject.toml")), (
        f"the serving image moved to TensorFlow {version}: add serving/tf{version} (a copy of the old member with the "
        "new pins), list it in pyproject.toml's workspace and conflicts, and run make lock"
    )
    uv = os.path.join(REPO_ROOT, ".tools", "bin", "uv")
    uv = uv if os.path.isfile(uv) else shutil.which("uv")
    environment = os.path.join(REPO_ROOT, ".serving", f"tf{version}")
    result = subprocess.run(
        [uv, "sync", "--locked", "--package", f"serving-tf{version.replace('.', '-')}", "--python", sys.executable],
        cwd=REPO_ROOT,
        env={**os.environ, "UV_PROJECT_ENVIRONMENT": environment, "UV_PYTHON_DOWNLOADS": "never"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return os.path.join(environment, "bin", "python")


def serve(serving_python: str, script: str, *args: str) -> dict:
    """Runs ``script`` in the serving TensorFlow; its JSON answer (checked to come from that TensorFlow)."""
    served = subprocess.run(
        [serving_python, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""},
    )
    assert served.returncode == 0, served.stderr[-3000:]
    theirs = json.loads(served.stdout.strip().splitlines()[-1])
    assert theirs["version"].startswith(serving_version() + "."), theirs["version"]
    return theirs


@pytest.fixture(scope="module")
def served_images(exported, image_folder, serving_python, tmp_path_factory) -> dict:
    """The image export's answers in the serving TensorFlow and in ours, one load in each: for every fifth image of
    the tiny folder ("folder") and for the decoding corpus (every format, mode, EXIF orientation, alpha, 16-bit,
    sizes: "corpus"). Returns {set: (their labels, their probabilities, our labels, our probabilities)}."""
    import tensorflow as tf

    from tests.components.test_decoding_parity import CORPUS

    folder = [os.path.join(root, name) for root, _, names in os.walk(image_folder) for name in sorted(names)][::5]
    corpus, written = [], tmp_path_factory.mktemp("corpus")
    for index, content in enumerate(CORPUS.values()):
        corpus.append(str(written / f"{index:02d}"))
        with open(corpus[-1], "wb") as handle:
            handle.write(content)
    saved_model = os.path.join(exported[0], "saved_model")
    theirs = serve(serving_python, SERVE, saved_model, *folder, *corpus)
    contents = []
    for path in folder + corpus:
        with open(path, "rb") as handle:
            contents.append(handle.read())
    ours = tf.saved_model.load(saved_model).signatures["serving_default"](image_bytes=tf.constant(contents))
    labels, probabilities = [label.decode() for label in ours["label"].numpy()], ours["probabilities"].numpy()
    assert tf.__version__.startswith("2.21") and len(folder) >= 10
    cut = len(folder)
    return {
        name: (theirs["label"][part], np.asarray(theirs["probabilities"][part]), labels[part], probabilities[part])
        for name, part in (("folder", slice(0, cut)), ("corpus", slice(cut, None)))
    }


def test_the_serving_tensorflow_answers_as_the_exporting_one(served_images):
    their_labels, theirs, labels, ours = served_images["folder"]
    assert their_labels == labels
    np.testing.assert_allclose(theirs, ours, atol=1e-5)


SERVE_TEXT = """
import json, sys
import tensorflow as tf
model_dir, texts = sys.argv[1], json.loads(sys.argv[2])
serving = tf.saved_model.load(model_dir).signatures["serving_default"]
answers = serving(text=tf.constant(texts))
print(json.dumps({"version": tf.__version__, "probabilities": answers["probabilities"].numpy().tolist(),
                  "label": [label.decode() for label in answers["label"].numpy()]}))
"""


def test_the_serving_tensorflow_tokenises_and_answers_texts_as_the_exporting_one(exported_text, serving_python):
    """A text export's graph (lookup table, regular expressions, ragged split, Keras 3's LSTM loop) in the serving
    TensorFlow: the same labels and probabilities for raw strings."""
    import tensorflow as tf

    export_dir, _ = exported_text
    saved_model = os.path.join(export_dir, "saved_model")
    texts = [
        "A superb, lovely film!<br /><br />Really GOOD.",
        "Awful... the plot was dull\u00a0and BORING",
        "ΟΔΟΣ Straße naïve… 😀",
        "",
    ]
    theirs = serve(serving_python, SERVE_TEXT, saved_model, json.dumps(texts))
    ours = tf.saved_model.load(saved_model).signatures["serving_default"](text=tf.constant(texts))
    assert theirs["label"] == [label.decode() for label in ours["label"].numpy()]
    assert theirs["label"][:2] == ["pos", "neg"]
    np.testing.assert_allclose(theirs["probabilities"], ours["probabilities"].numpy(), atol=1e-5)


def test_the_serving_tensorflow_decodes_every_file_a_client_sends_as_the_exporting_one(served_images):
    """The decoding corpus (every format, mode, EXIF orientation, alpha, 16-bit, sizes) through the SavedModel in
    the serving TensorFlow: the decoding graph's ops exist there and give the same answers."""
    from tests.components.test_decoding_parity import CORPUS

    their_labels, theirs, labels, ours = served_images["corpus"]
    assert len(labels) == len(CORPUS) and their_labels == labels
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
