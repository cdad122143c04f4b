"""Tiny real data for every tier: image folders on disk, TFRecords converted by Beam, a model trained for real."""

from __future__ import annotations

import io
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = ("cat", "dog", "fish")
# the in-process runner (also the default since conversion threads use the cores); spelt out for the unit tests
IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
TINY_SIZE = 16
# the demo run's test accuracy bar, in its own precision (auto), for evaluate's figure and the SavedModel's: over 3
# seeds under each host profile (bench/spread.py, bench/RESULTS.md) the worst run scored 0.976 (4 of 166 digits
# wrong); 0.95 (8 wrong) leaves a margin of 4 digits
DEMO_ACCURACY_BAR = 0.95


def demo_export_agreement_floor(precision: str) -> float:
    """The least argmax agreement of the demo's float32 export with the trained model as it computes: the same
    answers when it trained in float32; trained in mixed_bfloat16 (auto with AVX512-BF16 or AMX), a borderline digit
    of the 166 may go the other way (an Intel Xeon with AMX: 1 digit)."""
    return 1.0 if precision == "float32" else 0.99


# how far below the SavedModel's test accuracy each TFLite file of the demo may fall: the float file computes as the
# SavedModel does (less than 1 digit of 166), int8 loses at most 1.5 points (2 digits); over the same runs the float
# file lost none, the int8 file at most 1
FORMAT_GAP_BOUNDS = {"tflite_float": 0.005, "tflite_int8": 0.015}
BUCKET = "pipeline-test"


def image_bytes(color, size=(40, 30), fmt="JPEG", seed=0) -> bytes:
    """An encoded picture: a flat ``color`` with noise and a class-coloured square, ``size`` = (width, height)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = size
    pixels = np.empty((height, width, 3), dtype=np.uint8)
    pixels[:] = color
    noise = rng.integers(-25, 25, size=pixels.shape)
    pixels = np.clip(pixels.astype(int) + noise, 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


COLORS = {"cat": (220, 40, 40), "dog": (40, 200, 40), "fish": (40, 40, 220)}


def write_image_folder(root, per_class: int = 12) -> str:
    """``root/<class>/<n>.jpg|png`` with varied sizes and formats; returns the root as a string."""
    for class_name in CLASSES:
        os.makedirs(os.path.join(root, class_name), exist_ok=True)
        for n in range(per_class):
            fmt = "PNG" if n % 4 == 0 else "JPEG"
            size = (40 + 7 * n, 30 + 5 * (n % 3))
            path = os.path.join(root, class_name, f"{n:03d}.{'png' if fmt == 'PNG' else 'jpg'}")
            with open(path, "wb") as handle:
                handle.write(image_bytes(COLORS[class_name], size, fmt, seed=CLASSES.index(class_name) * 1000 + n))
    return str(root)


def session_fixture(name: str, tmp_path_factory, make, after: tuple[str, ...] = ()):
    """The session fixture ``name`` (one that converts or trains, made after the fixtures ``after``): ``make(folder)``
    in a new temporary folder; under ``make test``'s workers once for all of them, and under ``make mutants`` once for
    the whole run, unless the mutant is in code it runs (tests/fixture_cache.py)."""
    from tests.fixture_cache import made_once

    shared = tmp_path_factory.getbasetemp().parent / "session-fixtures" if os.environ.get("PYTEST_XDIST_WORKER") else ""
    return made_once(name, make, lambda: str(tmp_path_factory.mktemp(name)), after, shared=str(shared))


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> str:
    return session_fixture("image_folder", tmp_path_factory, lambda folder: write_image_folder(folder, per_class=20))


@pytest.fixture(scope="session")
def converted(image_folder, tmp_path_factory) -> tuple[str, dict]:
    """The tiny folder converted to TFRecords (16x16) by the real Beam pipeline; (examples dir, stats)."""
    from components.convert.core import ConvertConfig, run

    def make(output: str) -> tuple[str, dict]:
        config = ConvertConfig(
            source=image_folder,
            output_dir=output,
            image_size=TINY_SIZE,
            validation_fraction=0.2,
            test_fraction=0.2,
            pipeline_args=IN_MEMORY,
        )
        return output, run(config)

    return session_fixture("converted", tmp_path_factory, make, after=("image_folder",))


@pytest.fixture(scope="session")
def trained(converted, tmp_path_factory) -> tuple[str, dict]:
    """The codelab convnet really trained for a few epochs on the tiny examples, in float32 on TensorFlow; (model
    dir, result). Not the default image model: with batch norm, the few dozen steps of the tiny data leave its moving
    statistics short of the final weights' (bench/RESULTS.md); the demo runs train the default."""
    from components.train.config import TrainConfig
    from components.train.core import run

    def make(model_dir: str) -> tuple[str, dict]:
        config = TrainConfig(
            examples_dir=converted[0],
            model_dir=model_dir,
            model_name="codelab_convnet",
            epochs=12,
            per_replica_batch_size=4,
            learning_rate=0.002,
            precision="float32",  # the quality the tests assert is float32's on TensorFlow, on every host
            backend="tensorflow",
        )
        return model_dir, run(config)

    return session_fixture("trained", tmp_path_factory, make, after=("converted",))


@pytest.fixture(scope="session")
def exported(converted, trained, tmp_path_factory) -> tuple[str, dict]:
    """The trained model exported for CPU serving; (output dir with saved_model/ and export.json, report)."""
    from components.export.core import ExportConfig, run

    def make(output: str) -> tuple[str, dict]:
        return output, run(ExportConfig(model_dir=trained[0], examples_dir=converted[0], output_dir=output))

    return session_fixture("exported", tmp_path_factory, make, after=("converted", "trained"))


# the test files that take longest (whole-DAG runs, multi-process training, trained models), run first, longest
# first (their summed test times in a make test on 2 cores): with make test's workers (pytest-xdist, --dist loadfile
# --no-loadscope-reorder, which keeps this order; by default xdist starts with the files of the most tests) the
# longest files start at once, one to a worker, the next go to whichever worker is free, and the short files even
# out the end
LONGEST_FIRST = (
    "tests/components/test_transfer.py",
    "tests/pipeline/test_local_run.py",
    "tests/components/test_train.py",
    "tests/pipeline/test_vertex.py",
    "tests/pipeline/test_model_iteration.py",
    "tests/components/test_train_jax.py",
    "tests/components/test_own_model.py",
    "tests/components/test_serving.py",
    "tests/components/test_evaluate.py",
    "tests/components/test_decoding_parity.py",
    "tests/pipeline/test_cli_mistakes.py",
    "tests/pipeline/test_preflight.py",
    "tests/pipeline/test_tuning.py",
    "tests/components/test_export_raw_files.py",
    "tests/components/test_learning.py",
)


# the session fixtures that convert or train (seconds to a minute each): under make mutants (mutmut sets
# MUTANT_UNDER_TEST) the tests without them run first, so that a mutant a quick test kills stops there (pytest -x)
SLOW_FIXTURES = {"converted", "trained", "exported", "text_examples", "trained_text", "exported_text"}


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Under mutmut's stats run: what setting up each fixture reaches is kept (tests/fixture_cache.py)."""
    if os.environ.get("MUTANT_UNDER_TEST") != "stats":
        return (yield)
    from tests.fixture_cache import fixture_reach

    with fixture_reach(fixturedef.argname):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """Under mutmut's stats run: each test counts as reaching what setting up its fixtures reached, not only the
    first test to use one (tests/fixture_cache.py)."""
    result = yield  # (its fixtures set up)
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        from tests.fixture_cache import count_reach

        count_reach(item.fixturenames)
    return result


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = os.path.relpath(str(item.fspath), REPO_ROOT)
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a file, and of the other files, is kept
    mutant = os.environ.get("MUTANT_UNDER_TEST")
    if mutant:  # the quickest first, by the seconds mutmut measured (its stats, in its working folder)
        seconds = mutmut_durations()
        items.sort(key=lambda item: (bool(SLOW_FIXTURES & set(item.fixturenames)), seconds.get(item.nodeid, 0.0)))
        allowed = mutation_test_files(mutant)
        if allowed is not None:
            dropped = [item for item in items if item.nodeid.split("::")[0] not in allowed]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = [item for item in items if item not in dropped]


def mutmut_durations() -> dict[str, float]:
    """Each test's seconds in mutmut's last stats run (none outside ``make mutants``)."""
    import json

    try:
        with open("mutmut-stats.json") as handle:
            return json.load(handle)["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return {}


def mutation_test_files(mutant: str) -> set[str] | None:
    """The test files a mutant's group runs, where ``tests/mutation.py`` names them for it (its GROUP_TESTS, passed
    in MUTATION_TEST_FILES); None: every test that reaches the mutant's function."""
    import fnmatch
    import json

    for pattern, files in json.loads(os.environ.get("MUTATION_TEST_FILES", "{}")).items():
        if fnmatch.fnmatchcase(mutant, pattern):
            return set(files)
    return None


# the text fixtures' reviews: 2 to 4 words of their class among neutral ones, some dressed in what standardisation
# strips or keeps (case, markup, punctuation, Unicode letters and spaces), so that export's in-graph tokenisation is
# checked against Beam's on more than plain words
POSITIVE = ["good", "great", "fine", "nice", "superb", "lovely"]
NEGATIVE = ["bad", "awful", "poor", "sad", "dull", "boring"]
NEUTRAL = ["the", "a", "movie", "film", "was", "it", "and", "plot", "cast", "really"]
DRESSING = [
    "<BR />",
    "<br/>",
    "Don't!",
    "ÉCOLE",
    "Straße",
    "ΟΔΟΣ",
    "naïve…",
    "\u00a0",
    "\t",
    "\u3000",
    "“quoted”",
    "İstanbul",
    "😀",
    "x\u200by",
    "C'est-à-dire",
    "(1/10)",
]
TEXT_SEQUENCE_LENGTH = 16


def write_reviews(path, count: int = 320, seed: int = 5) -> str:
    """``count`` short reviews as JSONL (``text``, ``label``: pos / neg, alternating)."""
    import json
    import random

    rng = random.Random(seed)
    lines = []
    for n in range(count):
        label, words = ("pos", POSITIVE) if n % 2 else ("neg", NEGATIVE)
        tokens = rng.choices(NEUTRAL, k=rng.randint(3, 14)) + rng.choices(words, k=rng.randint(2, 4))
        tokens += rng.choices(DRESSING, k=rng.randint(0, 3))
        rng.shuffle(tokens)
        text = " ".join(tokens) + f". Review {n}!"
        lines.append(json.dumps({"text": text.title() if n % 5 == 0 else text, "label": label}))
    path.write_text("\n".join(lines))
    return str(path)


@pytest.fixture(scope="session")
def text_examples(tmp_path_factory) -> tuple[str, dict]:
    """320 short reviews converted by the text convert (vocabulary of 64 ids, 16 tokens a text); (dir, stats)."""
    from components.convert.text import TextConvertConfig, run_text

    def make(folder: str) -> tuple[str, dict]:
        source, output = write_reviews(pathlib.Path(folder, "reviews.jsonl")), os.path.join(folder, "examples")
        config = TextConvertConfig(
            source=source,
            output_dir=output,
            vocabulary_size=64,
            sequence_length=TEXT_SEQUENCE_LENGTH,
            pipeline_args=IN_MEMORY,
        )
        return output, run_text(config)

    return session_fixture("text_examples", tmp_path_factory, make)


@pytest.fixture(scope="session")
def trained_text(text_examples, tmp_path_factory) -> tuple[str, dict]:
    """The article's LSTM trained on TensorFlow in float32 for 6 epochs on the reviews; (model dir, result)."""
    from components.train.config import TrainConfig
    from components.train.core import run

    def make(folder: str) -> tuple[str, dict]:
        model_dir = os.path.join(folder, "model")
        config = TrainConfig(
            examples_dir=text_examples[0],
            model_dir=model_dir,
            model_name="lstm",
            epochs=6,
            per_replica_batch_size=16,
            backend="tensorflow",
            precision="float32",
        )
        return model_dir, run(config, env={})

    return session_fixture("trained_text", tmp_path_factory, make, after=("text_examples",))


@pytest.fixture(scope="session")
def exported_text(text_examples, trained_text, tmp_path_factory) -> tuple[str, dict]:
    """The trained LSTM exported; (output dir, export.json)."""
    from components.export.core import ExportConfig, run

    def make(folder: str) -> tuple[str, dict]:
        output = os.path.join(folder, "export")
        return output, run(ExportConfig(model_dir=trained_text[0], examples_dir=text_examples[0], output_dir=output))

    return session_fixture("exported_text", tmp_path_factory, make, after=("text_examples", "trained_text"))


def made_up_export(folder, model_digest: str = "", **facts) -> dict:
    """An ``export.json`` of this format for the export folder ``folder``, of made-up facts (an image model of two
    classes, no files listed), for tests of what reads an export without exporting a model."""
    from components.artifacts.records import EXPORT, FORMAT_KEY

    made_up = {
        FORMAT_KEY: EXPORT.version,
        "modality": "image",
        "class_names": ["a", "b"],
        "image_size": 8,
        "formats": {},
        "saved_model": {"path": f"{folder}/saved_model"},
        "signatures": {},
        "parity": {},
        "backend_parity": {},
        "model_name": "made_up",
        "model": {"ref": "made_up", "kind": "builtin", "function": "build", "sha256": "", "file": ""},
        "hparams": {},
        "trained_precision": "float32",
        "trained_backend": "tensorflow",
        "files": {},
    }
    return {**made_up, "model_digest": model_digest, **facts}


def made_up_evaluation(**figures) -> dict:
    """A ``metrics.json`` of this format, of made-up figures (two classes, 4 test examples, blessed) with
    ``figures`` over them, for tests of what reads an evaluation without evaluating a model."""
    from components.artifacts.records import FORMAT_KEY, METRICS

    made_up = {
        FORMAT_KEY: METRICS.version,
        "accuracy": 0.75,
        "num_examples": 4,
        "class_names": ["a", "b"],
        "per_class": {name: {"precision": 0.75, "recall": 0.75, "f1": 0.75, "support": 2} for name in "ab"},
        "confusion_matrix": [[1, 1], [0, 2]],
        "top_k_accuracy": {"k": 2, "accuracy": 1.0},
        "ranking": {},
        "split": "test",
        "model_name": "made_up",
        "model_dir": "model",
        "examples_dir": "examples",
        "counts": {"test": 4},
        "training": {},
        "blessing": {"blessed": True, "reasons": ["made up"]},
        "report_html": "report.html",
        "small_classes": {},
        "misclassified": [],
    }
    return {**made_up, **figures}


def record_export(folder, model_digest: str = "", **facts):
    """Writes a made-up ``export.json`` (``made_up_export``) for the files already in the local ``folder``, each
    listed with its size and sha256, as the export step writes it last."""
    from components.artifacts.exported import write_export_record

    made_up = made_up_export(folder, model_digest, **facts)
    return write_export_record(str(folder), {k: v for k, v in made_up.items() if k not in ("format_version", "files")})


# the loggers of the Vertex AI registry and endpoint calls (the register and deploy steps, pipeline register / deploy)
VERTEX_LOGGERS = ("components.register.vertex", "components.vertex_resources")


def run_cli(
    *args: str, cwd: str | None = None, timeout: int = 600, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Runs ``python -m ...`` in the project's interpreter, the way a user does: in the environment of this
    process less what importing JAX here set in it (``TF_CPP_MIN_LOG_LEVEL=1``, which a user's shell has not),
    with ``env`` on top (a name given None is left out)."""
    environment = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    environment = {name: value for name, value in {**environment, **(env or {})}.items() if value is not None}
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd or REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )


def at_once(call, items: list) -> dict:
    """``call(item)`` for every item, in threads started together: {item: its result, or the message of the
    ``UsageError`` it raised}."""
    import threading

    from components.cli import UsageError

    outcomes = {}

    def one(item):
        try:
            outcomes[item] = call(item)
        except UsageError as err:
            outcomes[item] = str(err)

    threads = [threading.Thread(target=one, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def emulate_generation_preconditions() -> None:
    """gcp-storage-emulator ignores ``ifGenerationMatch``, which Cloud Storage checks on every object call: here its
    object routes check it, as the service does (412 when the object's generation, 0 for none, is another), one call
    at a time so that of two creations at once one wins."""
    import threading
    from http import HTTPStatus

    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    if getattr(server, "generation_preconditions", False):
        return
    one_at_a_time = threading.Lock()

    def checked(handler):
        def handle(request, response, storage, *args, **kwargs):
            wanted = request.query.get("ifGenerationMatch")
            if not wanted:
                return handler(request, response, storage, *args, **kwargs)
            bucket = request.params["bucket_name"]
            name = request.params.get("object_id") or request.query.get("name", [None])[0]
            if name is None:  # (a multipart upload names its object in its metadata)
                name = request.data["meta"]["name"]
            with one_at_a_time:
                try:
                    generation = str(storage.get_file_obj(bucket, name)["generation"])
                except NotFound:
                    generation = "0"
                if generation != wanted[0]:
                    response.status = HTTPStatus.PRECONDITION_FAILED
                    failed = "At least one of the pre-conditions you specified did not hold."
                    response.json({"error": {"code": 412, "message": failed}})
                    return None
                return handler(request, response, storage, *args, **kwargs)

        return handle

    wrapped = {objects.insert, objects.delete, objects.download, objects.get}
    for _, handlers in server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler in wrapped:
                handlers[method] = checked(handler)
    server.generation_preconditions = True


@pytest.fixture(scope="module")
def gcs():
    """gcp-storage-emulator on 127.0.0.1 with bucket ``BUCKET``, checking generation preconditions as Cloud Storage
    does (``emulate_generation_preconditions``); ``STORAGE_EMULATOR_HOST`` points the real clients at it. Yields the
    bucket (an anonymous ``google.cloud.storage`` client)."""
    from gcp_storage_emulator.server import create_server
    from google.cloud import storage

    emulate_generation_preconditions()

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    # the emulator takes no credentials, and there are none here: Beam would look for Application Default
    # Credentials with four retries (about 24 s per process) before it connects anonymously, as it then does; in
    # this process, let it connect anonymously at once (subprocesses still wait)
    from apache_beam.internal.gcp import auth

    found = auth._Credentials._credentials_init, auth._Credentials._credentials
    auth._Credentials._credentials_init, auth._Credentials._credentials = True, None
    try:
        yield storage.Client.create_anonymous_client().bucket(BUCKET)
    finally:
        auth._Credentials._credentials_init, auth._Credentials._credentials = found
        server.stop()
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


def convert_step(**given):
    """The convert step's KFP function called as the DAG calls it: every input the DAG passes, at its default
    unless ``given`` (the wrapper has no defaults of its own)."""
    from components.convert.component import convert
    from components.decoding import DEFAULT_MAX_PIXELS
    from components.params import CONVERT, TEXT, defaults

    inputs = {
        **defaults(CONVERT),
        **defaults(TEXT),
        "classes": [],
        "beam_args": [],
        "source_fingerprint": "",
        "max_pixels": DEFAULT_MAX_PIXELS,
        "worker_image": "",
    }
    return convert(**{**inputs, **given})


def fingerprint_step(source: str) -> str:
    """The fingerprint step's KFP function called as the DAG calls it, its options at their defaults."""
    from components.convert.component import fingerprint
    from components.params import CONVERT, TEXT

    return fingerprint(
        source,
        classes=[],
        run_id="",
        modality=CONVERT["modality"].default,
        text_column=TEXT["text_column"].default,
        label_column=TEXT["label_column"].default,
    )


@pytest.fixture
def small_disk(tmp_path):
    """A real full disk: a 64 KiB tmpfs mounted at ``tmp_path/disk`` (writes past it fail with ENOSPC, as on a full
    disk); ``grow("8m")`` makes room. (root, as CI's container runs its tests; where mounting is not allowed the
    full-disk tests cannot make their fault, and say so.)"""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"a full disk needs a tmpfs mount, which this machine refuses: {mounted.stderr.strip()}")

    def grow(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)

    yield folder, grow
    subprocess.run(["umount", "-l", str(folder)], check=False)


def truncated_copy(examples_dir: str, split: str, folder) -> tuple[str, str]:
    """A copy of ``examples_dir`` under ``folder`` whose ``split`` shard is cut 100 bytes short (a damaged record);
    (the copy, the shard)."""
    import glob
    import shutil

    copy = os.path.join(str(folder), "examples")
    shutil.copytree(examples_dir, copy)
    (shard,) = glob.glob(f"{copy}/{split}/*.tfrec")
    with open(shard, "r+b") as handle:
        handle.truncate(os.path.getsize(shard) - 100)
    return copy, shard
