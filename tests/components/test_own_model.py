"""A model of one's own: a builder ``build(spec, **hparams)`` in a Python file or a module, built through the one
interface the built-in models are built through, checked before it trains (one line and exit 2 for each mistake),
trained, evaluated and exported as ours are, and served without its code."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from components.cli import UsageError
from components.models import BUILTINS, ModelSpec, build_model, load, parse_ref, resolve_hparams
from components.models.source import declared_space
from tests.conftest import CLASSES, REPO_ROOT, TINY_SIZE, run_cli

EXAMPLES = os.path.join(REPO_ROOT, "examples", "models")
CODELAB = os.path.join(EXAMPLES, "codelab_convnet.py")
# the codelab's convnet, as its notebook prints it: (input channels, filters, kernel) of each convolution
CODELAB_CONVOLUTIONS = ((3, 16, 3), (16, 30, 3), (30, 60, 3), (60, 90, 3), (90, 110, 3), (110, 130, 3), (130, 40, 1))


def write_model(folder, name: str, body: str) -> str:
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(textwrap.dedent(body))
    return path


def codelab_parameters(classes: int, batch_norm: bool, width: float = 1.0) -> int:
    """The codelab convnet's parameter count, its filters scaled by ``width``: each convolution's weights (and its
    bias, or batch norm's four numbers a channel), then the softmax over the last 1x1 convolution's channels."""
    total, previous = 0, 3
    for _, filters, kernel in CODELAB_CONVOLUTIONS:
        filters = max(1, round(filters * width))
        total += kernel * kernel * previous * filters + (4 * filters if batch_norm else filters)
        previous = filters
    return total + previous * classes + classes


def test_a_model_ref_is_a_built_in_name_a_file_or_a_module():
    assert parse_ref("squeezenet").kind == "builtin" and parse_ref("auto").kind == "builtin"
    ref = parse_ref("examples/models/codelab_convnet.py")
    assert (ref.kind, ref.location, ref.function, ref.name) == (
        "file",
        "examples/models/codelab_convnet.py",
        "build",
        "codelab_convnet.py:build",
    )
    ref = parse_ref("gs://bucket/models/0123/net.py:make_net")
    assert (ref.kind, ref.location, ref.function) == ("file", "gs://bucket/models/0123/net.py", "make_net")
    ref = parse_ref("my_package.models:build@0123456789abcdef")
    assert (ref.kind, ref.location, ref.function, ref.pinned) == (
        "module",
        "my_package.models",
        "build",
        "0123456789abcdef",
    )
    for wrong in ("resnet9000", "my_package.models", "net.py:make-net", "pkg.mod:build@XYZ", ""):
        with pytest.raises(UsageError, match=r"^--model .*(not a built-in model|is not a function|is not a digest)"):
            parse_ref(wrong)


def test_a_module_is_imported_by_name_and_pinned_to_its_files_digest(tmp_path, monkeypatch):
    """``my_models.nets:build``: imported as any module, pinned for a run to the digest of its file, which must not
    change under the run."""
    import hashlib

    from components.models.source import pin

    os.makedirs(tmp_path / "my_models")
    (tmp_path / "my_models" / "__init__.py").write_text("")
    path = write_model(tmp_path / "my_models", "nets", "def build(spec, units: int = 4):\n    return units\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    pinned = pin(parse_ref("my_models.nets:build"), str(tmp_path / "run"))
    assert pinned == f"my_models.nets:build@{digest[:16]}" and not (tmp_path / "run").exists()
    loaded = load(pinned)
    assert (loaded.sha256, loaded.name, loaded.build(None, **resolve_hparams(loaded, ["units=7"]))) == (
        digest,
        "my_models.nets:build",
        7,
    )
    with open(path, "a") as handle:
        handle.write("# changed\n")
    with pytest.raises(UsageError, match=r"module my_models.nets has changed since the run was started"):
        load(pinned)
    with pytest.raises(
        UsageError,
        match=r"^--model no_such_package.nets:build: module no_such_package.nets is not "
        r"importable here: install its package",
    ):
        load("no_such_package.nets:build")


def test_the_built_in_models_are_builders_of_the_same_interface(capsys):
    """One way to build a model: each built-in is ``build(spec, **hparams)``, listed by ``pipeline models list`` with
    its hyperparameters, and built through ``build_model`` like a model of one's own."""
    from pipeline.__main__ import main

    for name, builtin in BUILTINS.items():
        parameters = list(inspect.signature(builtin.build).parameters.values())
        assert parameters[0].name == "spec", name
        assert all(p.default is not inspect.Parameter.empty for p in parameters[1:]), name
        assert not load(name).own
    assert main(["models", "list"]) == 0
    listed = capsys.readouterr().out
    for name in BUILTINS:
        assert f"\n{name} " in listed
    assert "units=32, embedding_dim=32" in listed and "codelab_convnet_bn   images of 16+ px (default)" in listed
    text = ModelSpec.for_texts(12, 50, 4)
    assert build_model("cnn1d", text, {"filters": 8, "kernel_size": 3, "embedding_dim": 4}).count_params() == (
        50 * 4 + 3 * 4 * 8 + 8 + 8 * 4 + 4
    )


def test_the_example_convnet_is_the_codelabs_and_its_hyperparameters_change_the_network():
    """The example file, written as a user writes it: without batch norm, the codelab's published 293,233
    parameters for 5 classes; each hyperparameter given (typed as its default is) changes what is built."""
    loaded = load(CODELAB)
    assert loaded.own and loaded.name == "codelab_convnet.py:build" and len(loaded.sha256) == 64
    spec = ModelSpec.for_images(192, 5)
    assert build_model(loaded, spec, resolve_hparams(loaded, ["batch_norm=false"])).count_params() == 293_233
    assert build_model(loaded, spec).count_params() == codelab_parameters(5, batch_norm=True)
    wide = resolve_hparams(loaded, ["width=1.5", "batch_norm=no"])
    assert wide == {"batch_norm": False, "width": 1.5}
    assert build_model(loaded, spec, wide).count_params() == codelab_parameters(5, False, 1.5)
    with pytest.raises(
        UsageError,
        match=r"^--hparam depth=3: codelab_convnet.py:build has no hyperparameter depth: "
        r"it takes batch_norm, width$",
    ):
        resolve_hparams(loaded, ["depth=3"])
    with pytest.raises(UsageError, match=r"^--hparam width=wide: width is a float \(its default is 1.0\)$"):
        resolve_hparams(loaded, ["width=wide"])
    with pytest.raises(UsageError, match=r"^--hparam 'width' is not NAME=VALUE, e.g. --hparam units=64$"):
        resolve_hparams(loaded, ["width"])
    assert declared_space(loaded) == {"width": {"values": [0.5, 1.0, 1.5]}}


def test_a_declared_search_space_is_checked_against_the_builder(tmp_path):
    path = write_model(
        tmp_path,
        "spaced",
        """
        import keras
        SEARCH_SPACE = {"units": {"min": 8, "max": 64, "scale": "log"}, "rate": [0.1, 0.2], "act": ["relu", "gelu"]}
        def build(spec, units: int = 16, rate: float = 0.1, act: str = "relu"):
            raise AssertionError("not built here")
    """,
    )
    assert declared_space(load(path)) == {
        "units": {"min": 8, "max": 64, "scale": "log"},
        "rate": {"values": [0.1, 0.2]},
        "act": {"values": ["relu", "gelu"]},
    }
    for space, message in (
        ('{"depth": [1, 2]}', r"SEARCH_SPACE\['depth'\]: build has no hyperparameter depth"),
        ('{"units": {"min": 64, "max": 8}}', r"SEARCH_SPACE\['units'\]: give min < max"),
        ('{"units": 16}', r"SEARCH_SPACE\['units'\]: give a list of values"),
    ):
        path = write_model(
            tmp_path,
            f"bad_space_{abs(hash(space))}",
            f"""
            SEARCH_SPACE = {space}
            def build(spec, units: int = 16):
                pass
        """,
        )
        with pytest.raises(UsageError, match=message):
            declared_space(load(path))


# each mistake of a model of one's own, and the one line that names it: refused before anything is converted
MISTAKES = {
    "missing file": (
        None,
        r"model file .*nowhere\.py does not exist: pass the path of a Python file that defines "
        r"build\(spec, \.\.\.\)",
    ),
    "missing function": (
        "import keras\ndef make(spec):\n    pass\n",
        r"model file .*model\.py has no function build: define def build\(spec, \.\.\.\) there, or name another one "
        r"\(FILE\.py:FUNCTION\); it defines make$",
    ),
    "syntax error": (
        "def build(spec)\n    pass\n",
        r"model file .*model\.py \(model\.py line 1\): SyntaxError: expected ':'$",
    ),
    "raises": (
        "import keras\ndef build(spec):\n    units = {}\n    return units['wide']\n",
        r"build raised KeyError \(model\.py line 4\) while building the model \(uint8 \[N, 16, 16, 3\], 3 "
        r"classes\): 'wide'",
    ),
    "wrong classes": (
        "import keras\nfrom keras import layers\ndef build(spec):\n    return keras.Sequential([spec.inputs("
        "), layers.Flatten(), layers.Dense(7, activation='softmax')])\n",
        r"the model outputs \[N, 7\], and the data has 3 classes \(cat, dog, fish\): end it with "
        r"keras\.layers\.Dense\(spec\.num_classes, activation=\"softmax\", dtype=\"float32\"\)$",
    ),
    "wrong input": (
        "import keras\nfrom keras import layers\ndef build(spec):\n    return keras.Sequential([keras.Inp"
        "ut((28, 28, 1)), layers.Flatten(), layers.Dense(spec.num_classes, activation='softmax')])\n",
        r"the model takes float32 \[N, 28, 28, 1\], and the pipeline feeds uint8 \[N, 16, 16, 3\]: start "
        r"it with spec\.inputs\(\)",
    ),
    "logits": (
        "import keras\nfrom keras import layers\ndef build(spec):\n    return keras.Sequential([spec.inputs(), "
        "layers.Rescaling(1 / 255), layers.Flatten(), layers.Dense(spec.num_classes)])\n",
        r"the model's outputs are not probabilities \(a row sums to .*\): end it with keras\.layers\.Dense\(spec"
        r"\.num_classes, activation=\"softmax\", dtype=\"float32\"\), not logits$",
    ),
    "unregistered layer": (
        "import keras\nfrom keras import layers\nclass Twice(layers.Layer):\n    def __init__(self, "
        "factor, **kw):\n        super().__init__(**kw)\n        self.factor = factor\n    def call("
        "self, x):\n        return x * self.factor\ndef build(spec):\n    x = inputs = spec.inputs()"
        "\n    x = Twice(2.0)(layers.Flatten()(layers.Rescaling(1 / 255)(x)))\n    return keras.M"
        "odel(inputs, layers.Dense(spec.num_classes, activation='softmax')(x))\n",
        r"the model cannot be saved and loaded again \(its layer class Twice is not registered\): "
        r"decorate each custom layer with @keras\.saving\.register_keras_serializable\(\)",
    ),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_is_one_line_naming_the_model_and_the_fix(mistake, tmp_path):
    """What run-local's up-front check and the train step's check run (here on TensorFlow, in this process): each
    mistake is one line naming the model and the fix."""
    from components.models.checks import check_code

    body, message = MISTAKES[mistake]
    path = str(tmp_path / "nowhere.py") if body is None else write_model(tmp_path, "model", body)
    with pytest.raises(UsageError, match=rf"^--model {path}: {message}"):
        check_code(path, [], ModelSpec.for_images(TINY_SIZE, len(CLASSES), CLASSES), "tensorflow")


def test_run_local_checks_the_model_in_a_process_of_its_own_before_converting_anything(tmp_path, image_folder):
    """Built for the source's classes and the image size given, on JAX: a builder that raises is one line, its
    traceback in the work dir's model-check.log, and nothing is converted."""
    from pipeline.__main__ import main

    path = write_model(tmp_path, "model", MISTAKES["raises"][0])
    work = tmp_path / "work"
    with pytest.raises(
        UsageError,
        match=rf"^--model {path}: {MISTAKES['raises'][1]} \(its traceback: "
        rf"{work}/model-check\.log\)$",
    ):
        main(["run-local", "--work-dir", str(work), "--source", image_folder, "--image-size", "16", "--model", path])
    assert sorted(os.listdir(work)) == ["model-check.log"]
    assert "return units['wide']" in (work / "model-check.log").read_text()


def test_a_hyperparameter_the_builder_does_not_take_is_refused_up_front_with_exit_2(tmp_path, image_folder):
    result = run_cli(
        "pipeline",
        "run-local",
        "--work-dir",
        str(tmp_path / "work"),
        "--source",
        image_folder,
        "--model",
        CODELAB,
        "--hparam",
        "depth=3",
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --hparam depth=3: codelab_convnet.py:build has no hyperparameter depth: it takes batch_norm, width"
    )
    assert not (tmp_path / "work" / "artifacts").exists()


TF_CALL = """
    import keras
    import tensorflow as tf
    from keras import layers

    @keras.saving.register_keras_serializable(package="mine")
    class TfRelu(layers.Layer):
        def call(self, x):
            return tf.nn.relu(x)

    def build(spec):
        inputs = spec.inputs()
        x = TfRelu()(layers.Flatten()(layers.Rescaling(1 / 255)(inputs)))
        return keras.Model(inputs, layers.Dense(spec.num_classes, activation="softmax", dtype="float32")(x))
"""


def test_a_tensorflow_call_is_refused_where_jax_trains_and_a_warning_where_tensorflow_does(tmp_path, caplog):
    """Under JAX (the TPUs' backend) a layer that calls ``tf.*`` cannot run: the layer, the call, its line and the
    fix, before anything trains (run-local's check, in a process of its own on JAX); on a run that TensorFlow
    trains, a warning that TPUs would refuse it, and the model checked on TensorFlow."""
    from pipeline.model_code import checked_and_pinned

    path = write_model(tmp_path, "tf_relu", TF_CALL)
    spec, log = ModelSpec.for_images(16, 3, CLASSES), str(tmp_path / "check.log")
    message = (
        rf"^--model {path}: layer TfRelu calls TensorFlow \(tf\.nn\.relu, tf_relu\.py line 9\), which cannot "
        r"run under JAX \(the backend that trains on TPUs\): write it with keras\.ops"
    )
    with pytest.raises(UsageError, match=message):
        checked_and_pinned({"model_name": path, "backend": "jax"}, str(tmp_path / "run"), spec, log)
    assert not (tmp_path / "run").exists()
    pinned = checked_and_pinned({"model_name": path}, str(tmp_path / "run"), spec, log)
    assert pinned["model_name"].startswith(str(tmp_path / "run" / "models"))
    assert any(
        "layer TfRelu calls TensorFlow (tf.nn.relu" in r.getMessage()
        and "here it trains on TensorFlow" in r.getMessage()
        for r in caplog.records
    )


def test_the_train_step_refuses_a_builder_that_raises_in_one_line_its_traceback_in_the_log(tmp_path, converted, caplog):
    """The train step checks the model before any epoch (a run that skipped run-local's check: the step command,
    Vertex AI): one line naming the file, the line and the exception; the user's traceback in the step's log."""
    from components.train.config import TrainConfig
    from components.train.core import run

    path = write_model(tmp_path, "broken", "import keras\ndef build(spec, units: int = 4):\n    return units / 0\n")
    config = TrainConfig(
        examples_dir=converted[0],
        model_dir=str(tmp_path / "model"),
        model_name=path,
        hparams=("units=8",),
        per_replica_batch_size=8,
        backend="tensorflow",
    )
    with pytest.raises(UsageError) as raised:
        run(config)
    assert str(raised.value) == (
        f"--model {path}: build raised ZeroDivisionError (broken.py line 3) while building the "
        f"model (uint8 [N, {TINY_SIZE}, {TINY_SIZE}, 3], 3 classes): division by zero"
    )
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "Traceback (most recent call last)" in logged and "return units / 0" in logged
    assert "epoch 1 of" not in logged and not (tmp_path / "model" / "model.keras").exists()


CUSTOM_LAYER = """
    import keras
    from keras import layers


    @keras.saving.register_keras_serializable(package="mine")
    class Gate(layers.Layer):
        \"\"\"x * sigmoid(w): a learned gate per feature.\"\"\"

        def __init__(self, initial: float = 1.0, **kwargs):
            super().__init__(**kwargs)
            self.initial = initial

        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1],), initializer=keras.initializers.Constant(self.initial))

        def call(self, x):
            return x * keras.ops.sigmoid(self.w)

        def get_config(self):
            return {**super().get_config(), "initial": self.initial}


    def build(spec, filters: int = 8):
        inputs = spec.inputs()
        x = layers.Rescaling(1 / 255)(inputs)
        x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = Gate(2.0)(layers.GlobalAveragePooling2D()(x))
        return keras.Model(inputs, layers.Dense(spec.num_classes, activation="softmax", dtype="float32")(x))
"""


def test_a_registered_custom_layer_trains_evaluates_exports_and_serves_without_its_file(
    tmp_path, converted, image_folder
):
    """Train records the file and keeps a copy; evaluate (a fresh process, the user's file gone) loads the model
    through that copy; export rebuilds it, keeps the copy beside the export, and its SavedModel answers in a fresh
    process that never imports any model code."""
    import hashlib

    from components.export.core import ExportConfig
    from components.export.core import run as export
    from components.train.config import TrainConfig
    from components.train.core import run

    examples, _ = converted
    os.makedirs(tmp_path / "mine")
    path = write_model(tmp_path / "mine", "gated", CUSTOM_LAYER)
    model_dir = str(tmp_path / "model")
    result = run(
        TrainConfig(
            examples_dir=examples,
            model_dir=model_dir,
            model_name=path,
            hparams=("filters=6",),
            epochs=3,
            per_replica_batch_size=8,
            precision="float32",
            backend="tensorflow",
        )
    )
    with open(os.path.join(model_dir, "model_config.json")) as handle:
        config = json.load(handle)
    assert (config["model_name"], config["hparams"]) == ("gated.py:build", {"filters": 6})
    assert config["model"]["kind"] == "file" and config["model"]["file"] == "model_source/gated.py"
    with open(os.path.join(model_dir, "model_source", "gated.py"), "rb") as kept, open(path, "rb") as original:
        source = original.read()
        assert kept.read() == source
    digest = hashlib.sha256(source).hexdigest()
    assert config["model"]["sha256"] == result["model"]["sha256"] == digest
    os.remove(path)  # from here on, only the copy beside the model can say what Gate is
    evaluated = run_cli(
        "components.evaluate",
        "--model-dir",
        model_dir,
        "--examples",
        examples,
        "--output",
        str(tmp_path / "evaluation"),
        "--min-accuracy",
        "0",
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    with open(tmp_path / "evaluation" / "metrics.json") as handle:
        metrics = json.load(handle)
    assert metrics["training"]["hparams"] == {"filters": 6} and metrics["num_examples"] > 0
    with open(metrics["report_html"], encoding="utf-8") as handle:
        assert f"gated.py:build (sha256 {config['model']['sha256'][:16]}), filters=6" in handle.read()
    report = export(ExportConfig(model_dir=model_dir, examples_dir=examples, output_dir=str(tmp_path / "export")))
    assert report["parity"]["argmax_agreement"] == 1.0
    assert report["model"]["sha256"] == config["model"]["sha256"] and report["hparams"] == {"filters": 6}
    assert (tmp_path / "export" / "model_source" / "gated.py").read_bytes() == source
    from components.register.vertex import register_version

    decided = json.loads(register_version(str(tmp_path / "export"), "mine", "", str(tmp_path / "registry"), "r1", None))
    version = tmp_path / "registry" / str(decided["version"])
    kept = json.loads((version / "version.json").read_text())
    assert (kept["model_name"], kept["model_sha256"], kept["hparams"]) == ("gated.py:build", digest, {"filters": 6})
    assert (version / "model_source" / "gated.py").read_bytes() == source
    for copy in (
        tmp_path / "export" / "model_source" / "gated.py",
        os.path.join(model_dir, "model_source", "gated.py"),
    ):
        os.remove(copy)
    image = os.path.join(image_folder, "dog", sorted(os.listdir(os.path.join(image_folder, "dog")))[0])
    probe = (
        "import json, sys\nimport tensorflow as tf\n"
        f"serving = tf.saved_model.load({str(tmp_path / 'export' / 'saved_model')!r}).signatures['serving_default']\n"
        f"answer = serving(image_bytes=tf.constant([open({image!r}, 'rb').read()]))\n"
        "print(json.dumps({'label': answer['label'].numpy()[0].decode(), 'sum': float(answer['probabilities'].numpy("
        ").sum()), 'model_code': sorted(m for m in sys.modules if 'user_models' in m or 'gated' in m)}))\n"
    )
    served = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=str(tmp_path)
    )
    assert served.returncode == 0, served.stderr[-3000:]
    answer = json.loads(served.stdout.strip().splitlines()[-1])
    assert answer["label"] in CLASSES and abs(answer["sum"] - 1) < 1e-4 and answer["model_code"] == []


def test_the_cifar10_and_imdb_examples_train_on_tiny_data(tmp_path, converted, text_examples):
    """The examples as users copy them: the CIFAR-10 convnet (functional API, its hyperparameters given) on the
    tiny images, the IMDB LSTM on the tiny reviews; each records where its code came from."""
    from components.train.config import TrainConfig
    from components.train.core import run

    runs = {
        "cifar10_convnet": (converted[0], ("filters=8", "blocks=2", "dropout=0.1")),
        "imdb_lstm": (text_examples[0], ("units=8",)),
    }
    for name, (examples, hparams) in runs.items():
        model_dir = str(tmp_path / name)
        result = run(
            TrainConfig(
                examples_dir=examples,
                model_dir=model_dir,
                model_name=os.path.join(EXAMPLES, f"{name}.py:build"),
                hparams=hparams,
                epochs=2,
                per_replica_batch_size=8,
                precision="float32",
                backend="tensorflow",
            )
        )
        assert result["epochs_trained"] == 2 and result["model_name"] == f"{name}.py:build"
        given = dict(pair.split("=") for pair in hparams)
        assert {key: str(value) for key, value in result["hparams"].items() if key in given} == given
        assert os.path.isfile(os.path.join(model_dir, "model_source", f"{name}.py"))


def test_the_guides_model_check_prints_what_the_guide_shows_and_keeps_jaxs_compiled_programs(tmp_path):
    """docs/your-model.md's ``pipeline models check`` command, run as written: the lines it shows. Built on JAX, the
    programs it compiled (the weights' initializers) stay in the user's cache folder for the next process."""
    with open(os.path.join(REPO_ROOT, "docs", "your-model.md"), encoding="utf-8") as handle:
        guide = handle.read()
    command, shown = re.search(
        r"```sh\n\.venv/bin/python -m (pipeline models check [^\n]+)\n```\n\n```\n(.*?)```", guide, flags=re.S
    ).groups()
    result = run_cli(*command.split(), env={"XDG_CACHE_HOME": str(tmp_path), "JAX_COMPILATION_CACHE_DIR": None})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines() == shown.strip().splitlines()
    assert len(os.listdir(tmp_path / "tpu-pipeline" / "jax")) >= 5


def test_a_check_on_jax_never_imports_tensorflow_and_still_finds_an_unregistered_layer(tmp_path):
    """run-local checks a model of one's own on JAX before anything else runs. Keras's serialisation would import
    TensorFlow there (5 s) to ask whether an object is one of its types; the check leaves it unloaded and still
    refuses a custom layer that cannot be loaded again."""
    good = os.path.join(REPO_ROOT, "examples", "models", "codelab_convnet.py:build")
    bad = write_model(tmp_path, "model", MISTAKES["unregistered layer"][0])
    said = []
    for ref in (good, bad):
        result = run_cli(
            *("pipeline", "models", "check", ref, "--json", "--backend", "jax", "--image-size", str(TINY_SIZE)),
            *("--classes", ",".join(CLASSES)),
            env={"PYTHONPROFILEIMPORTTIME": "1", "JAX_PLATFORMS": "cpu"},
        )
        imported = re.findall(r"^import time:.*\| +([\w.]+)$", result.stderr, flags=re.M)
        tensorflow = [name for name in imported if name.split(".")[0] == "tensorflow"]
        assert "keras" in imported and not tensorflow, result.stderr[-2000:]
        said.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert (said[0]["backend"], said[0]["classes"]) == ("jax", len(CLASSES))
    assert re.match(rf"^--model {bad}: {MISTAKES['unregistered layer'][1]}", said[1]["error"])


def test_jaxs_compilation_cache_is_the_users_choice_when_they_made_one(tmp_path):
    from components.keras_backend import use_jax_cache

    (tmp_path / "file").write_text("a file, not a folder")
    chosen = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "mine"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}
    for env, expected in (
        ({"XDG_CACHE_HOME": str(tmp_path)}, {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "tpu-pipeline" / "jax")}),
        (dict(chosen), chosen),
        ({"JAX_COMPILATION_CACHE_DIR": ""}, {"JAX_COMPILATION_CACHE_DIR": ""}),
        ({"XDG_CACHE_HOME": str(tmp_path / "file")}, {"JAX_COMPILATION_CACHE_DIR": None}),  # cannot be made
    ):
        use_jax_cache(env)
        assert {name: env.get(name) for name in expected} == expected
