"""A model of one's own before a run starts: checked up front (built for the run's input and classes, in a process of
its own, as ``python -m pipeline models check`` does) and pinned, so that the run trains the code as it was when it
started (``components.models.source.pin``). run-local does both before converting anything; submit and schedule
before creating anything, the file uploaded under the pipeline root."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from components.cli import UsageError
from components.modalities import named
from components.models import AUTO_MODEL, ModelSpec, load, parse_ref, resolve_auto, resolve_hparams
from components.models.source import pin

log = logging.getLogger(__name__)

CHECK_SECONDS = 600  # a check builds the model once and runs it on two examples
CHECKS_PASSED_FILE = "model-checks-passed.json"  # beside the check's log: the checks passed, not made again


def check_backend(parameters: dict) -> str:
    """The backend a run's check builds on: TensorFlow where the run asks for it, else JAX (the TPUs')."""
    return "tensorflow" if parameters.get("backend") == "tensorflow" else "jax"


def check_up_front(
    ref: str, hparams, spec: ModelSpec | None, backend: str, log_path: str, remember: bool = False
) -> dict:
    """``python -m pipeline models check`` in a process of its own (Keras imported there, on ``backend``, on the
    CPU): what it found, or its one-line error (its traceback in ``log_path``). ``remember``: a check passed is kept
    beside ``log_path`` (a work dir's), and not made again for the same file, input and frameworks."""
    command = [sys.executable, "-m", "pipeline", "models", "check", ref, "--json", "--backend", backend]
    for pair in hparams or ():
        command += ["--hparam", str(pair)]
    if spec is None:
        command.append("--no-build")
    else:
        command += named(spec.modality).check_arguments(spec)
    if spec is not None:
        command += ["--classes", ",".join(spec.class_names) if spec.class_names else str(spec.num_classes)]
    memo_path = os.path.join(os.path.dirname(os.path.abspath(log_path)), CHECKS_PASSED_FILE)
    key = passed_check_key(ref, command) if remember else ""
    passed = _read_json(memo_path) if key else {}
    if key in passed:  # (the same file, built for the same input, classes and backend, passed before)
        log.info("model %s: unchanged since it passed its check for this input; not checked again", ref)
        return passed[key]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as errors:
        try:
            done = subprocess.run(
                command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env, timeout=CHECK_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            raise UsageError(f"--model {ref}: building it took more than {CHECK_SECONDS} s (see {log_path})") from None
    lines = done.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise UsageError(
            f"--model {ref}: the model check ended with exit code {done.returncode} (see {log_path})"
        ) from None
    if key and "error" not in found and not found.get("tensorflow_under_jax"):
        from components.storage import write_json

        write_json(memo_path, {**passed, key: found})
    return found


def passed_check_key(ref: str, command: list[str]) -> str:
    """What makes two checks of a model file the same check: its bytes, everything the check is told (input,
    classes, backend, hyperparameters), this Python and Keras; "" for a module or a ``gs://`` file (not read here)."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return ""

    parsed = parse_ref(ref)
    path = parsed.text.rsplit(":", 1)[0] if parsed.kind == "file" else ""
    if not path or "://" in path or not os.path.isfile(path):
        return ""
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    frameworks = [installed(name) for name in ("keras", "jax", "tensorflow", "tensorflow-cpu")]
    told = json.dumps([command[3:], digest, sys.version, *frameworks])
    return hashlib.sha256(told.encode()).hexdigest()


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def checked_and_pinned(
    parameters: dict,
    root: str,
    spec: ModelSpec | None,
    log_path: str,
    pin_modules: bool = True,
    remember: bool = True,
) -> dict:
    """``parameters`` with a model of one's own checked up front and pinned under ``root`` (a file copied there; a
    module's digest added where ``pin_modules``); ours as they are. A mistake is one line, before anything runs. A
    model that calls TensorFlow is refused where JAX trains it (``--backend jax``), and trains here on TensorFlow
    with a warning otherwise (on TPUs, JAX trains: it would fail there)."""
    ref = parse_ref(parameters.get("model_name", "auto"))
    hparams = parameters.get("hparams") or []
    if ref.kind == "builtin":
        if hparams and (spec is not None or ref.text != AUTO_MODEL):  # (auto: the spec's modality says which)
            resolve_hparams(load(resolve_auto(ref, spec.modality if spec else "").text), hparams)
        return parameters
    backend = check_backend(parameters)
    found = check_up_front(ref.text, hparams, spec, backend, log_path, remember)
    if found.get("tensorflow_under_jax") and parameters.get("backend") != "jax":
        log.warning(
            "%s: on TPUs, where JAX trains, it would fail; here it trains on TensorFlow",
            found["error"].removeprefix(f"--model {ref.text}: "),
        )
        found = check_up_front(ref.text, hparams, spec, "tensorflow", log_path, remember)
    if "error" in found:
        raise UsageError(found["error"] + (f" (its traceback: {log_path})" if "raised" in found["error"] else ""))
    pinned = pin(ref, root) if ref.kind == "file" or pin_modules else ref.text
    built = (
        f", {found['parameters']:,} parameters for {found['input']} and {found['classes']} classes"
        if "parameters" in found
        else ""
    )
    log.info(
        "model %s (sha256 %s)%s; hyperparameters %s",
        found["model"],
        found["sha256"][:16],
        built,
        ", ".join(f"{name}={value}" for name, value in found["hparams"].items()) or "none",
    )
    return {**parameters, "model_name": pinned}


def with_model_code(settings):
    """Vertex AI settings whose ``model_name`` is a local model file: the file checked here (it imports, its
    builder takes the hyperparameters given) and uploaded under the pipeline root, once per content
    (``<root>/models/<digest>/<file>``), the parameter naming the upload. A module is left to the image (build on
    ours with it: docs/your-model.md); a ``gs://`` file is used as it is."""
    import dataclasses
    import tempfile

    ref = parse_ref(settings.parameters.get("model_name", "auto"))
    if ref.kind != "file" or "://" in ref.location:
        return settings
    log_path = os.path.join(tempfile.gettempdir(), "tpu-pipeline-model-check.log")
    parameters = checked_and_pinned(
        settings.parameters, settings.pipeline_root, None, log_path, pin_modules=False, remember=False
    )  # (a temporary folder: nothing kept there)
    print(f"model file {ref.location} is at {parameters['model_name']}")
    return dataclasses.replace(settings, parameters=parameters)
