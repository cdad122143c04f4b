"""Where a model's builder comes from, and the hyperparameters it takes.

``--model`` (the DAG's ``model_name``) names one of three things:

- a built-in model: ``codelab_convnet_bn`` (``components.models.builtin.BUILTINS``), or ``auto``;
- a Python file and its builder: ``examples/models/codelab_convnet.py:build`` (``:build`` may be left out), local or
  ``gs://``;
- an importable module and its builder: ``my_package.models:build``.

A builder is ``build(spec, **hparams)``: ``spec`` is a ``ModelSpec``; every other parameter is a hyperparameter, with
a default, that ``--hparam NAME=VALUE`` sets (typed as its default is). A file or module may declare a search space
for its hyperparameters (``SEARCH_SPACE``, or the builder's ``search_space`` attribute), which tuning searches beside
the learning rate and the batch size.

A run pins the code it trains: a file is copied under its content's sha256 (``pin``: the DAG's parameter names the
copy, so that an edited file is another run and an unchanged one a cache hit), a module's ref carries its file's
digest (``my_package.models:build@<digest>``). The trained model keeps a copy of the file beside it
(``SOURCE_DIR``), so that evaluate and export load the code that made it, and the export carries it on to the
registry.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from components.cli import UsageError
from components.models.builtin import BUILTINS
from components.storage import read_bytes

log = logging.getLogger(__name__)

AUTO_MODEL = "auto"  # the default model of the examples' modality
DEFAULT_FUNCTION = "build"
SOURCE_DIR = "model_source"  # in a model artifact and an export: a copy of the file the model was built from
PINNED_FOLDER = "models"  # run-local's work dir and the pipeline root keep pinned copies under models/<digest>/
DIGEST_LENGTH = 16  # hex digits of the sha256 that name a pinned copy
USER_MODULES = "tpu_pipeline_user_models"  # the package name user files are imported under
SEARCH_SPACE_NAME = "SEARCH_SPACE"
IDENTIFIER = r"[A-Za-z_]\w*"
REF_FORMS = "a built-in model, FILE.py[:FUNCTION] (local or gs://) or MODULE:FUNCTION"


@dataclass(frozen=True)
class ModelRef:
    """A ``--model`` value, parsed: ``kind`` is ``builtin`` (``location`` its name), ``file`` (``location`` the
    file's path, local or ``gs://``) or ``module`` (``location`` its dotted name); ``pinned``: the digest a module's
    ref carries (``MODULE:FUNCTION@DIGEST``)."""

    text: str
    kind: str
    location: str
    function: str = DEFAULT_FUNCTION
    pinned: str = ""

    @property
    def name(self) -> str:
        """What the summary and the reports call it: the built-in's name, ``file.py:build``, ``module:build``."""
        if self.kind == "builtin":
            return self.location
        where = self.location.rstrip("/").rsplit("/", 1)[-1] if self.kind == "file" else self.location
        return f"{where}:{self.function}"


def builtin_names() -> str:
    return ", ".join(sorted(BUILTINS))


def parse_ref(text: str, flag: str = "--model") -> ModelRef:
    """``text`` parsed as a model ref, without reading anything; a one-line error for a malformed one."""
    text = str(text).strip()
    if text in BUILTINS or text == AUTO_MODEL:
        return ModelRef(text, "builtin", text)
    location, colon, function = text.rpartition(":")
    if not colon or "/" in function or "\\" in function:  # no function given (gs://bucket/m.py keeps its colon)
        location, function = text, DEFAULT_FUNCTION
    function, at, pinned = function.partition("@")
    if location.lower().endswith(".py") and not at:
        if not re.fullmatch(IDENTIFIER, function):
            raise UsageError(f"{flag} {text}: {function!r} is not a function name: FILE.py:FUNCTION")
        return ModelRef(text, "file", location, function)
    if colon and re.fullmatch(rf"{IDENTIFIER}(\.{IDENTIFIER})*", location) and re.fullmatch(IDENTIFIER, function):
        if at and not re.fullmatch(r"[0-9a-f]{8,64}", pinned):
            raise UsageError(f"{flag} {text}: {pinned!r} is not a digest: MODULE:FUNCTION[@DIGEST]")
        return ModelRef(text, "module", location, function, pinned)
    raise UsageError(f"{flag} {text}: not {REF_FORMS}; the built-in models are {builtin_names()}")


@dataclass(frozen=True)
class LoadedModel:
    """A model's builder, loaded: ``build(spec, **hparams)``, where it came from, and what it takes.

    ``sha256``: the digest of the file it was read from (empty for a built-in); ``source_file``: that file here (a
    local copy of a ``gs://`` one); ``modality``: a built-in's (None: a model of one's own takes what its data is);
    ``min_image_size``: the smallest image a built-in builds for; ``search_space``: its declared ranges."""

    ref: ModelRef
    build: Callable
    sha256: str = ""
    source_file: str = ""
    modality: str | None = None
    min_image_size: int = 0
    search_space: Mapping | None = None

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def own(self) -> bool:
        """A model of the user's own (a file or a module), not one of ours."""
        return self.ref.kind != "builtin"

    def record(self, model_dir_file: str = "") -> dict:
        """What ``model_config.json`` and ``export.json`` say of where the model came from."""
        return {
            "ref": self.ref.text,
            "kind": self.ref.kind,
            "function": self.ref.function,
            "sha256": self.sha256,
            "file": model_dir_file,
        }


def file_digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def load(ref: ModelRef | str, fetch_dir: str = "") -> LoadedModel:
    """The builder ``ref`` names, imported (a ``gs://`` file copied into ``fetch_dir`` first, or a temporary folder).
    One-line errors for a missing file, module or function, and for a file that fails to import (its traceback goes
    to the log: it is the user's code)."""
    ref = parse_ref(ref) if isinstance(ref, str) else ref
    if ref.kind == "builtin":
        if ref.location == AUTO_MODEL:
            raise ValueError("resolve --model auto for the examples' modality before loading it")
        builtin = BUILTINS[ref.location]
        return LoadedModel(ref, builtin.build, modality=builtin.modality, min_image_size=builtin.min_image_size)
    if ref.kind == "file":
        path, content = local_copy(ref, fetch_dir)
        module = import_file(path, file_digest(content), ref)
        return loaded_from(ref, module, file_digest(content), path)
    module = import_module(ref)
    path = getattr(module, "__file__", None) or ""
    digest = file_digest(read_bytes(path)) if path else ""
    if ref.pinned and not digest.startswith(ref.pinned):
        raise UsageError(
            f"--model {ref.text}: module {ref.location} has changed since the run was started (its file "
            f"{path} has the digest {digest[:DIGEST_LENGTH]}): start the run again"
        )
    return loaded_from(ref, module, digest, path)


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


def local_copy(ref: ModelRef, fetch_dir: str) -> tuple[str, bytes]:
    """(a local path of the file ``ref`` names, its bytes): the file itself, or a ``gs://`` file copied under
    ``fetch_dir`` (a temporary folder when empty)."""
    from components.storage import exists, read_bytes

    if "://" not in ref.location:
        if not os.path.isfile(ref.location):
            raise UsageError(
                f"--model {ref.text}: model file {ref.location} does not exist: pass the path of a Python "
                f"file that defines {ref.function}(spec, ...), or {REF_FORMS}"
            )
        return os.path.abspath(ref.location), read_bytes(ref.location)
    if not exists(ref.location):
        raise UsageError(
            f"--model {ref.text}: model file {ref.location} does not exist: upload it, or let submit "
            "upload it (submit --model FILE.py:FUNCTION)"
        )
    content = read_bytes(ref.location)
    if not fetch_dir:
        import tempfile

        fetch_dir = tempfile.mkdtemp(prefix="model-source-")
    path = os.path.join(fetch_dir, file_digest(content)[:DIGEST_LENGTH], ref.location.rsplit("/", 1)[-1])
    if not os.path.exists(path):
        from components.storage import write_atomically

        write_atomically(path, content)
    return path, content


def user_line(err: BaseException, path: str) -> str:
    """``FILE line N``: the innermost place in ``path`` that the error passed through, or nothing."""
    frames = [frame for frame in traceback.extract_tb(err.__traceback__) if os.path.abspath(frame.filename) == path]
    if isinstance(err, SyntaxError) and err.filename and os.path.abspath(err.filename) == path:
        return f"{os.path.basename(path)} line {err.lineno}"
    return f"{os.path.basename(path)} line {frames[-1].lineno}" if frames else ""


def log_user_traceback(err: BaseException, what: str) -> None:
    """The whole traceback of an error in the user's code, to the step's log (the one-line error names its place)."""
    log.error("%s: the traceback:\n%s", what, "".join(traceback.format_exception(err)).rstrip())


def import_file(path: str, digest: str, ref: ModelRef):
    """The module of the file at ``path``, imported once per digest (under ``USER_MODULES``: two versions of one
    file, a model and its baseline, can be loaded side by side)."""
    import importlib.util

    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    name = f"{USER_MODULES}.{stem}_{digest[:DIGEST_LENGTH]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise import_error(err, ref, path) from None
    return module


def import_module(ref: ModelRef):
    import importlib

    try:
        return importlib.import_module(ref.location)
    except ModuleNotFoundError as err:
        if err.name and ref.location.startswith(err.name):
            raise UsageError(
                f"--model {ref.text}: module {ref.location} is not importable here: install its package, or pass "
                "a file (FILE.py:FUNCTION); on Vertex AI, build an image on ours with it (docs/your-model.md)"
            ) from None
        raise import_error(err, ref, "") from None
    except Exception as err:
        raise import_error(err, ref, "") from None


def import_error(err: Exception, ref: ModelRef, path: str) -> UsageError:
    """The one-line error of a model file or module that fails to import, its traceback logged."""
    where = f" ({user_line(err, path)})" if path and user_line(err, path) else ""
    what = f"model file {ref.location}" if ref.kind == "file" else f"module {ref.location}"
    if isinstance(err, SyntaxError):
        return UsageError(f"--model {ref.text}: {what}{where}: SyntaxError: {err.msg}")
    log_user_traceback(err, f"importing {what}")
    if isinstance(err, ModuleNotFoundError):
        return UsageError(
            f"--model {ref.text}: {what}{where} imports {err.name}, which is not installed here: "
            "install it, or on Vertex AI build an image on ours with it (docs/your-model.md)"
        )
    return UsageError(
        f"--model {ref.text}: importing {what} raised {type(err).__name__}{where}: {first_line(err)}".rstrip(": ")
    )


def loaded_from(ref: ModelRef, module, digest: str, path: str) -> LoadedModel:
    """The builder ``ref.function`` of the imported ``module``; a one-line error naming what it has when it is
    missing or is not a function."""
    build = getattr(module, ref.function, None)
    where = f"model file {ref.location}" if ref.kind == "file" else f"module {ref.location}"
    if not callable(build):
        found = sorted(
            name
            for name, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
        )
        has = f"; it defines {', '.join(found)}" if found else ""
        raise UsageError(
            f"--model {ref.text}: {where} has no function {ref.function}: define "
            f"def {ref.function}(spec, ...) there, or name another one (FILE.py:FUNCTION){has}"
        )
    space = getattr(build, "search_space", None) or getattr(module, SEARCH_SPACE_NAME, None)
    loaded = LoadedModel(ref, build, digest, path, search_space=space)
    hparam_defaults(loaded)  # (its signature checked now: a builder that takes no spec is a mistake up front)
    return loaded


def hparam_defaults(loaded: LoadedModel) -> tuple[dict, bool]:
    """(the builder's hyperparameters and their defaults, whether it takes any other name too: ``**kwargs``); a
    one-line error for a builder that does not take the spec first, or a hyperparameter without a default."""
    try:
        parameters = list(inspect.signature(loaded.build).parameters.values())
    except (TypeError, ValueError):
        return {}, True
    positional = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    if not parameters or parameters[0].kind not in positional:
        raise UsageError(
            f"--model {loaded.ref.text}: {loaded.ref.function} takes no spec: define it as "
            f"def {loaded.ref.function}(spec, ...), spec first (docs/your-model.md)"
        )
    declared, open_ended = {}, False
    for parameter in parameters[1:]:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            open_ended = True
        elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
            if parameter.default is inspect.Parameter.empty:
                raise UsageError(
                    f"--model {loaded.ref.text}: the hyperparameter {parameter.name} of "
                    f"{loaded.ref.function} has no default: give it one (the value a run takes when "
                    f"--hparam {parameter.name}=... does not set it)"
                )
            declared[parameter.name] = parameter.default
    return declared, open_ended


def split_pairs(pairs: Sequence[str], flag: str = "--hparam") -> dict[str, str]:
    """``["units=64", ...]`` as ``{"units": "64"}`` (the last one of a name wins)."""
    values = {}
    for pair in pairs:
        name, equals, value = str(pair).partition("=")
        if not equals or not re.fullmatch(IDENTIFIER, name.strip()):
            raise UsageError(f"{flag} {pair!r} is not NAME=VALUE, e.g. {flag} units=64")
        values[name.strip()] = value.strip()
    return values


def typed(name: str, value, default, flag: str = "--hparam"):
    """``value`` (text as typed, or a number a search drew) as the type of the hyperparameter's ``default``."""
    text = str(value).strip()
    try:
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            number = float(text)
            if number != int(number):
                raise ValueError(text)
            return int(number)
        if isinstance(default, float):
            return float(text)
        if isinstance(default, str):
            return text
    except ValueError:
        kind = type(default).__name__
        raise UsageError(
            f"{flag} {name}={value}: {name} is {'an' if kind == 'int' else 'a'} {kind} (its default is {default!r})"
        ) from None
    if not isinstance(value, str):
        return value
    try:  # None, a list, a tuple, a dict: JSON, else the text itself
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def resolve_hparams(loaded: LoadedModel, pairs: Sequence[str] | Mapping, flag: str = "--hparam") -> dict:
    """Every hyperparameter of the builder: its default, or the value ``pairs`` gives it, typed as its default is;
    one line for a name the builder does not take."""
    given = split_pairs(pairs, flag) if not isinstance(pairs, Mapping) else dict(pairs)
    declared, open_ended = hparam_defaults(loaded)
    values = dict(declared)
    for name, value in given.items():
        if name not in declared and not open_ended:
            takes = f"it takes {', '.join(declared)}" if declared else "it takes none"
            raise UsageError(f"{flag} {name}={value}: {loaded.name} has no hyperparameter {name}: {takes}")
        values[name] = typed(name, value, declared.get(name), flag)
    return values


def declared_space(loaded: LoadedModel) -> dict[str, dict]:
    """The ranges the model declares for its hyperparameters, checked against its builder: each a list of values
    (``{"values": [...]}``), or ``{"min": a, "max": b, "scale": "linear" | "log"}``, an integer range when the
    hyperparameter's default is an integer."""
    space = loaded.search_space or {}
    if not isinstance(space, Mapping):
        raise UsageError(
            f"--model {loaded.ref.text}: its {SEARCH_SPACE_NAME} is not a dict of NAME: [values] or "
            "NAME: {'min': ..., 'max': ...}"
        )
    declared, open_ended = hparam_defaults(loaded)
    ranges = {}
    for name, entry in space.items():
        where = f"--model {loaded.ref.text}: {SEARCH_SPACE_NAME}[{name!r}]"
        if name not in declared and not open_ended:
            raise UsageError(
                f"{where}: {loaded.ref.function} has no hyperparameter {name} (it takes "
                f"{', '.join(declared) or 'none'})"
            )
        default = declared.get(name)
        if isinstance(entry, (list, tuple)) and entry:
            ranges[name] = {"values": [typed(name, value, default, where) for value in entry]}
        elif isinstance(entry, Mapping) and {"min", "max"} <= set(entry):
            low, high = (typed(name, entry[key], default, where) for key in ("min", "max"))
            scale = entry.get("scale", "linear")
            if not low < high or scale not in ("linear", "log") or (scale == "log" and low <= 0):
                raise UsageError(f"{where}: give min < max (both above 0 on a log scale) and a scale of linear or log")
            ranges[name] = {"min": low, "max": high, "scale": scale}
        else:
            raise UsageError(f"{where}: give a list of values, or {{'min': ..., 'max': ...}} (and 'scale': 'log')")
    return ranges


def module_digest(ref: ModelRef) -> str:
    """The digest of the file of module ``ref.location``, found without running it (its parent packages are
    imported)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(ref.location)
    except ModuleNotFoundError:
        found = None
    if found is None or not found.origin or not os.path.isfile(found.origin):
        raise UsageError(
            f"--model {ref.text}: module {ref.location} is not importable here: install its package, or pass a file "
            "(FILE.py:FUNCTION)"
        )
    return file_digest(read_bytes(found.origin))


def pin(ref: ModelRef, root: str) -> str:
    """The ref the DAG runs, for code that must not change under it: a file copied to
    ``<root>/models/<digest>/<file>`` (local or ``gs://``, written once), the copy's ref returned; a module's ref
    with its file's digest (``MODULE:FUNCTION@DIGEST``); a built-in's as it is."""
    from components.storage import exists, write_atomically

    if ref.kind == "builtin":
        return ref.text
    if ref.kind == "module":
        return f"{ref.location}:{ref.function}@{module_digest(ref)[:DIGEST_LENGTH]}"
    _, content = local_copy(ref, "")
    digest = file_digest(content)[:DIGEST_LENGTH]
    target = f"{root.rstrip('/')}/{PINNED_FOLDER}/{digest}/{ref.location.rstrip('/').rsplit('/', 1)[-1]}"
    if not exists(target):
        write_atomically(target, content)
        log.info("model file %s kept as %s", ref.location, target)
    return f"{target}:{ref.function}"


def described(model_name: str, record: Mapping | None, hparams: Mapping | None) -> str:
    """What the summary and the report call a trained model: its name, its file's digest (a model of one's own),
    and its hyperparameters: ``codelab_convnet.py:build (sha256 1a2b3c4d5e6f7a8b), units=64, dropout=0.3``."""
    digest = (record or {}).get("sha256", "")
    text = f"{model_name} (sha256 {digest[:DIGEST_LENGTH]})" if digest else str(model_name)
    values = ", ".join(f"{name}={value}" for name, value in (hparams or {}).items())
    return f"{text}, {values}" if values else text
