"""A model of one's own, checked before it trains: it builds, takes the pipeline's input, ends in a probability for
each class, runs on the backend that trains it (TensorFlow calls do not run under JAX, which trains on TPUs), and
can be saved and loaded again (its custom layers registered). Each mistake is one line naming the model and the fix;
an error raised in the user's code has its traceback in the log."""

from __future__ import annotations

import contextlib
import math
import re
import sys
import traceback

from components.cli import UsageError, causes
from components.models.source import LoadedModel, first_line, log_user_traceback, user_line
from components.models.spec import ModelSpec

SUM_TOLERANCE = 0.02  # a softmax's row sums to 1 within bfloat16's rounding
SOFTMAX_END = 'end it with keras.layers.Dense(spec.num_classes, activation="softmax", dtype="float32")'
KERAS_OPS = (
    "write it with keras.ops (keras.ops.relu, keras.ops.matmul, ...), which runs on every backend, or train "
    "with --backend tensorflow where no TPU is involved"
)


class TensorFlowUnderJaxError(UsageError):
    """A model of one's own calls TensorFlow, which cannot run under JAX: where JAX does not train it (the CPU with
    TensorFlow), a warning; where it does (TPUs), a mistake."""


def tensorflow_call(err: BaseException) -> str | None:
    """What the user's code called of TensorFlow, when that is what failed: the function its line names
    (``tf.nn.relu``), the line itself, or ``an op`` when only TensorFlow's frames show it."""
    for each in causes(err):
        frames = traceback.extract_tb(each.__traceback__)
        for before, frame in zip([None, *frames], frames, strict=False):
            if "/tensorflow/" in frame.filename.replace("\\", "/"):
                caller = (before.line or "").strip() if before is not None else ""
                named = re.search(r"\btf\.[\w.]+", caller)
                return named.group(0) if named else caller or "an op"
        if type(each).__module__.startswith("tensorflow"):
            return "an op"
    return None


def layer_named(err: BaseException) -> str:
    """The layer whose ``call`` Keras says raised ``err`` (``layer MyLayer``), or ``the model``."""
    for each in causes(err):
        found = re.search(r"when calling (\w+)\.call\(\)", str(each))
        if found:
            return f"layer {found.group(1)}"
    return "the model"


def builder_error(err: Exception, loaded: LoadedModel, spec: ModelSpec, backend: str, doing: str) -> UsageError:
    """The one-line error of an exception raised while building or running the user's model (its traceback logged):
    a TensorFlow call under JAX names the layer and the fix."""
    if isinstance(err, UsageError):
        return err
    place = (
        next(filter(None, (user_line(each, loaded.source_file) for each in reversed(list(causes(err))))), "")
        if (loaded.source_file)
        else ""
    )
    where = f" ({place})" if place else ""
    call = tensorflow_call(err) if backend == "jax" else None
    log_user_traceback(err, f"--model {loaded.ref.text}: {doing}")
    if call:
        return TensorFlowUnderJaxError(
            f"--model {loaded.ref.text}: {layer_named(err)} calls TensorFlow ({call}"
            f"{', ' + place if place else ''}), which "
            f"cannot run under JAX (the backend that trains on TPUs): {KERAS_OPS}"
        )
    message = first_line(err)
    return UsageError(
        f"--model {loaded.ref.text}: {loaded.ref.function} raised {type(err).__name__}{where} "
        f"{doing} ({spec.describe()}, {spec.num_classes} classes): {message}".rstrip(": ")
    )


def call_builder(loaded: LoadedModel, spec: ModelSpec, hparams: dict, backend: str):
    """``loaded.build(spec, **hparams)``: a Keras model, or one line saying why not."""
    import keras

    try:
        model = loaded.build(spec, **hparams)
    except Exception as err:
        raise builder_error(err, loaded, spec, backend, "while building the model") from None
    if not isinstance(model, keras.Model):
        raise UsageError(
            f"--model {loaded.ref.text}: {loaded.ref.function} returned {type(model).__name__}, not a "
            "keras.Model: return keras.Model(inputs, outputs) or a keras.Sequential"
        )
    return model


def sample_inputs(spec: ModelSpec, count: int):
    """``count`` examples of what the pipeline feeds: random pixels, or random token ids with padding at the end."""
    import numpy as np

    rng = np.random.default_rng(0)
    if spec.modality == "image":
        return rng.integers(0, 256, (count, *spec.input_shape), dtype=np.uint8)
    ids = rng.integers(2, max(spec.vocabulary_size, 3), (count, *spec.input_shape), dtype=np.int32)
    ids[:, spec.input_shape[0] // 2 :] = 0
    return ids


def check_input(model, loaded: LoadedModel, spec: ModelSpec) -> None:
    """A model with declared inputs (functional, sequential) takes one input of the pipeline's shape."""
    try:
        inputs = list(model.inputs or [])
    except (AttributeError, ValueError):
        return  # a subclassed model: its first call says whether it takes the input
    fix = "start it with spec.inputs(), keras.Input(shape=spec.input_shape, dtype=spec.input_dtype)"
    if len(inputs) != 1:
        raise UsageError(
            f"--model {loaded.ref.text}: the model takes {len(inputs)} inputs, and the pipeline feeds "
            f"one, {spec.describe()}: {fix}"
        )
    shape = tuple(inputs[0].shape[1:])
    fits = len(shape) == len(spec.input_shape) and all(
        have is None or have == want for have, want in zip(shape, spec.input_shape, strict=True)
    )
    if not fits:
        shown = ", ".join("N" if d is None else str(d) for d in shape)
        raise UsageError(
            f"--model {loaded.ref.text}: the model takes {inputs[0].dtype} [N, {shown}], and the "
            f"pipeline feeds {spec.describe()}: {fix}"
        )


def check_outputs(probabilities, loaded: LoadedModel, spec: ModelSpec) -> None:
    """One probability per class for each example: the right width, each row in [0, 1] summing to 1."""
    import numpy as np

    if isinstance(probabilities, (list, tuple, dict)):
        raise UsageError(
            f"--model {loaded.ref.text}: the model has {len(probabilities)} outputs: give it one, the "
            f"class probabilities; {SOFTMAX_END}"
        )
    values = np.asarray(probabilities, dtype=np.float32)
    if values.ndim != 2 or values.shape[1] != spec.num_classes:
        shown = ", ".join(map(str, values.shape[1:]))
        classes = ", ".join(spec.class_names[:5]) + (", ..." if len(spec.class_names) > 5 else "")
        raise UsageError(
            f"--model {loaded.ref.text}: the model outputs [N, {shown}], and the data has "
            f"{spec.num_classes} classes{f' ({classes})' if classes else ''}: {SOFTMAX_END}"
        )
    sums = values.sum(axis=1)
    worst = float(sums[np.argmax(np.abs(sums - 1))])
    if (
        not np.isfinite(values).all()
        or values.min() < -1e-3
        or values.max() > 1 + 1e-3
        or not math.isclose(worst, 1.0, abs_tol=SUM_TOLERANCE)
    ):
        raise UsageError(
            f"--model {loaded.ref.text}: the model's outputs are not probabilities (a row sums to "
            f"{worst:.3g}; they range over {values.min():.3g} to {values.max():.3g}): {SOFTMAX_END}, "
            "not logits"
        )


def check_saving(model, loaded: LoadedModel) -> None:
    """The model serialises and deserialises as ``model.keras`` will (evaluate loads it): its custom layers are
    registered and give their constructor's arguments."""
    import keras

    try:
        with tensorflow_types_skipped():
            keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    except Exception as err:
        chain = list(causes(err))
        found = next(filter(None, (re.search(r"Could not locate class '(\w+)'", str(each)) for each in chain)), None)
        innermost = chain[-1]
        why = (
            f"its layer class {found.group(1)} is not registered"
            if found
            else f"{type(innermost).__name__}: {first_line(innermost)[:160]}"
        )
        raise UsageError(
            f"--model {loaded.ref.text}: the model cannot be saved and loaded again ({why}): "
            "decorate each custom layer with @keras.saving.register_keras_serializable() and give it "
            "get_config() returning its constructor's arguments (docs/your-model.md)"
        ) from None


@contextlib.contextmanager
def tensorflow_types_skipped():
    """Keras's serialisation asks whether TensorFlow is installed, to recognise its shapes and types, and imports
    it to answer: 5 s of a check on JAX. Where TensorFlow is not loaded, no object is of its types, so while this
    lasts Keras is told it is absent."""
    from keras.src.utils.module_utils import tensorflow

    if "tensorflow" in sys.modules or tensorflow._available is not None:
        yield
        return
    tensorflow._available = False
    try:
        yield
    finally:
        tensorflow._available = None


def check_model(model, loaded: LoadedModel, spec: ModelSpec, backend: str, batch_size: int = 2) -> None:
    """Every check of a built model of one's own (nothing for ours, which are known to pass them)."""
    if not loaded.own:
        return
    check_input(model, loaded, spec)
    try:
        probabilities = model.predict(sample_inputs(spec, batch_size), batch_size=batch_size, verbose=0)
    except Exception as err:
        raise builder_error(err, loaded, spec, backend, "on the pipeline's input") from None
    check_outputs(probabilities, loaded, spec)
    check_saving(model, loaded)


def check_code(ref, hparams, spec: ModelSpec | None, backend: str) -> dict:
    """A model's code checked as a run will use it, in this process (Keras imported on ``backend``): it imports, its
    builder takes the hyperparameters given, its declared ranges are well formed, and with a ``spec``, it builds
    and passes ``check_model``. Returns what it found: its name, digest, hyperparameters and parameter count."""
    from components.keras_backend import activate_backend
    from components.models.source import declared_space, load, resolve_hparams

    activate_backend(backend)
    loaded = load(ref)
    values = resolve_hparams(loaded, hparams)
    found = {
        "model": loaded.name,
        "ref": loaded.ref.text,
        "sha256": loaded.sha256,
        "hparams": values,
        "search_space": declared_space(loaded),
        "backend": backend,
    }
    if spec is not None:
        model = call_builder(loaded, spec, values, backend)
        check_model(model, loaded, spec, backend)
        found.update(parameters=int(model.count_params()), input=spec.describe(), classes=spec.num_classes)
    return found
