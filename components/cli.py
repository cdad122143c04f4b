"""What every ``python -m components.<step>`` shares: logging set-up and the one-line error contract."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable


class UsageError(ValueError):
    """A mistake in the user's input: reported as one line on stderr, exit code 2, no traceback."""


USAGE_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as shells report a Ctrl-C
# set by run-local: a step that dies of an exception appends {"error", "usage"} as a JSON line to this file, so that
# the run can end on the step's own reason instead of the orchestrator's traceback
STEP_FAILURE_ENV = "TPU_PIPELINE_STEP_FAILURES"


class StepFailedError(RuntimeError):
    """A pipeline step failed: one line on stderr, exit code 2 when it was a usage error, else 1. A subclass whose
    message lists reasons a line each sets ``whole_message``: run-local then reports every line."""

    whole_message = False

    def __init__(self, message: str, usage: bool = False):
        super().__init__(message)
        self.exit_code = USAGE_EXIT_CODE if usage else 1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the work; the message says what was stopped and how to go on. Exit code 130."""


def one_line(err: BaseException, with_type: bool = False) -> str:
    """The first line of an exception's message (its type name when the message is empty), for one-line errors and
    quarantine reasons; ``with_type`` prefixes the type name."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    first = text.splitlines()[0]
    return f"{type(err).__name__}: {first}" if with_type else first


def causes(err: BaseException):
    """``err`` and the errors it was raised from or during, outermost first, each once."""
    seen = []
    while err is not None and all(err is not earlier for earlier in seen):
        seen.append(err)
        yield err
        err = err.__cause__ or err.__context__


def disk_full(err: BaseException) -> str | None:
    """One line for a write that failed for want of space (``ENOSPC``, a quota), however it was wrapped on its way
    up (Beam's and TensorFlow's errors keep only its message): what could not be written, the space left on that
    device, and what to do; None for any other error."""
    import errno
    import os
    import re
    import shutil

    for cause in causes(err):
        full = isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT)
        if full or "No space left on device" in str(cause) or "Disk quota exceeded" in str(cause):
            path = getattr(cause, "filename", None)
            if not path:  # (a wrapped error names the file in its message, where it names one)
                named = re.search(r"(/[^\s'\"]+)", str(cause))
                path = named.group(1) if named else None
            where = f" to write {path}" if path else ""
            folder = os.path.dirname(path) if path else ""
            while folder and not os.path.isdir(folder):
                folder = os.path.dirname(folder)
            free = f" ({shutil.disk_usage(folder).free / 2**20:.1f} MiB free there)" if folder else ""
            return (
                f"the disk is full: no space left{where}{free}: free some space or write elsewhere, then run "
                "the same command again"
            )
    return None


# how long one Cloud Storage call is retried (transient errors, an outage) before it fails: google-cloud-storage's
# own deadline unless this variable sets another
STORAGE_DEADLINE_ENV = "TPU_PIPELINE_STORAGE_DEADLINE"
DEFAULT_STORAGE_DEADLINE = 120.0


def storage_deadline() -> float:
    """The seconds a Cloud Storage call is retried (``TPU_PIPELINE_STORAGE_DEADLINE``, else 120)."""
    import os

    text = os.environ.get(STORAGE_DEADLINE_ENV, "")
    try:
        return float(text) if text else DEFAULT_STORAGE_DEADLINE
    except ValueError:
        raise UsageError(f"{STORAGE_DEADLINE_ENV}={text!r} is not a number of seconds") from None


STORAGE_RETRIES_SAID: list[BaseException] = []  # (the first failed call of the process, once said)


def storage_retrying(err: BaseException) -> None:
    """The Cloud Storage client's ``on_error``: the first failed call of the process is said, with how long it is
    retried, so that a wait of up to ``storage_deadline()`` seconds is not silent."""
    if not STORAGE_RETRIES_SAID:
        STORAGE_RETRIES_SAID.append(err)
        logging.getLogger(__name__).warning(
            "Cloud Storage did not answer (%s): retrying for up to %.0f s (%s sets how long)",
            type(err).__name__,
            storage_deadline(),
            STORAGE_DEADLINE_ENV,
        )


def storage_unreachable(err: BaseException) -> str | None:
    """One line for a Cloud Storage call that still failed after its retries (an outage, no network), however it
    was wrapped on its way up: what could not be reached, for how long it was retried, and what to do; None for any
    other error."""
    import re

    chain = list(causes(err))
    texts = [" ".join((*getattr(cause, "__notes__", ()), str(cause))) for cause in chain]
    gave_up = any(type(cause).__name__ == "RetryError" or "RetryError(" in str(cause) for cause in chain)
    storage = [text for text in texts if "gs://" in text or "/storage/v1/" in text]
    if not (gave_up and storage):  # (a Vertex AI call that gave up is not Cloud Storage's)
        return None
    named = next(filter(None, (re.search(r"gs://[^'\"\s]+", text) for text in storage)), None)
    what = named.group(0) if named else "Cloud Storage"
    return (
        f"{what} could not be reached: Cloud Storage did not answer within {storage_deadline():.0f} s of retries; "
        f"check the network and the bucket, then run the same command again ({STORAGE_DEADLINE_ENV} sets how long "
        "to retry)"
    )


STEP_DEADLINE_ENV = "TPU_PIPELINE_STEP_DEADLINE"  # seconds a DAG step may run (compile --max-step-time)


def start_step() -> None:
    """A DAG step's start: its logging (``configure_logging``), and its deadline. KFP gives Vertex AI's tasks no
    timeout, so a step stuck on storage (a stalled ``/gcs/`` mount) or on a service would hold the run until its
    own end: once ``STEP_DEADLINE_ENV`` seconds have passed, the step ends in one line, exit 1, however it is stuck.
    (A TensorFlow step starts with ``components.step_server.start_step`` instead.)"""
    import os

    configure_logging()
    text = os.environ.get(STEP_DEADLINE_ENV, "")
    if text.isdigit() and int(text) > 0:
        end_past_deadline(int(text))


def end_past_deadline(seconds: int) -> None:
    """Ends this process in one line (``error: the STEP step ran past its deadline ...``, also left for run-local)
    once it has run ``seconds`` more: from a watcher thread, which a main thread blocked in the kernel does not stop."""
    import os
    import threading
    import time

    step = sys.argv[sys.argv.index("--function_to_execute") + 1] if "--function_to_execute" in sys.argv[:-1] else ""

    def watch() -> None:
        time.sleep(seconds)
        line = (
            f"the {step or 'this'} step ran past its deadline of {seconds} s ({STEP_DEADLINE_ENV}, set by compile "
            "--max-step-time): it was stuck (on Cloud Storage, or a service that did not answer) or had more work "
            "than that; see its log above, then run again, with a longer --max-step-time if it was working"
        )
        print(f"error: {line}", file=sys.stderr, flush=True)
        record = os.environ.get(STEP_FAILURE_ENV)
        if record:
            import json

            with open(record, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"error": line, "usage": False}) + "\n")
        os._exit(1)

    threading.Thread(target=watch, name="step-deadline", daemon=True).start()


def configure_logging(verbose: bool = False) -> None:
    """Our progress lines at INFO; library chatter only with ``verbose``."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    quiet_tensorflow(verbose)
    # Beam's local job service relays every worker's INFO lines: keep the user's view to our progress lines
    for noisy in ("apache_beam", "absl", "tensorflow", "jax._src.xla_bridge"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_an_interruption)
    record_step_failures()


QUIET_TF_LOG_LEVEL = "3"  # TF_CPP_MIN_LOG_LEVEL of a step that is not verbose, unless set


def quiet_tensorflow(verbose: bool = False) -> None:
    """TensorFlow's C++ lines (CPU features, absl, graph optimizers) held back, its import quiet
    (``quiet_tensorflow_startup``); ``verbose`` shows them."""
    if not verbose:
        import os

        # its C++ ERROR lines too: on AVX-512 hosts oneDNN logs "supports DT_BOOL only on platforms with AVX-512 ...
        # falling back" as an error on every run of a text model; a real failure raises in Python
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_TF_LOG_LEVEL)
    quiet_tensorflow_startup(hide_noise=not verbose)


def _not_an_interruption(record: logging.LogRecord) -> bool:
    """Beam logs the exception of a step that fails, its traceback included, before raising it again: for Ctrl-C,
    a full disk and a Cloud Storage outage the command's one line (``error: interrupted``, ``error: the disk is full:
    ...``, ``error: gs://... could not be reached: ...``) says it all."""
    if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
        return False
    if record.levelno >= logging.ERROR and record.name.startswith("apache_beam"):
        err = record.exc_info[1] if record.exc_info else Exception(record.getMessage())
        return not (disk_full(err) or storage_unreachable(err))
    return True


# what TensorFlow's native libraries write to stderr while they load, before its logging starts (so that
# TF_CPP_MIN_LOG_LEVEL cannot hold it back): on CPUs where oneDNN is on by default (AVX512-VNNI, AVX512-BF16, AMX),
# "oneDNN custom operations are on ..." and absl's warning before it
STARTUP_NOISE = (
    b"All log messages before absl::InitializeLog() is called",
    b"oneDNN custom operations are on",
    b"cpu_feature_guard.cc",
    b"To enable the following instructions:",
)


class _QuietLoader:
    """Runs TensorFlow's import without JAX, and with ``hide_noise`` with stderr (file descriptor 2, which native code
    writes to) held in a file, then writes back every line but ``STARTUP_NOISE``'s.

    (TFLite's ``util`` module imports JAX, where it is installed, for a converter from JAX functions that nothing here
    calls: 0.5 to 0.8 s of every TensorFlow process that does not train on JAX. A process that does imports JAX
    itself, before or after.)"""

    def __init__(self, loader, hide_noise: bool):
        self.loader = loader
        self.hide_noise = hide_noise

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        without_jax = "jax" not in sys.modules
        if without_jax:
            sys.modules["jax"] = None  # an import of it raises ImportError, which TFLite's util takes as no JAX
        try:
            if self.hide_noise:
                self._exec_quietly(module)
            else:
                self.loader.exec_module(module)
        finally:
            module.__loader__ = module.__spec__.loader = self.loader  # the module as a plain import leaves it
            if without_jax and sys.modules.get("jax", False) is None:
                del sys.modules["jax"]

    def _exec_quietly(self, module):
        import os
        import tempfile

        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                self.loader.exec_module(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                held.seek(0)
                kept = b"".join(line for line in held if not any(noise in line for noise in STARTUP_NOISE))
                if kept:
                    sys.stderr.write(kept.decode("utf-8", "replace"))
                    sys.stderr.flush()


class _QuietTensorFlowStartup:
    """A ``sys.meta_path`` finder that imports ``tensorflow``, the first time, through ``_QuietLoader``."""

    def __init__(self, hide_noise: bool):
        self.hide_noise = hide_noise

    def find_spec(self, name, path=None, target=None):
        import importlib.util

        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader, self.hide_noise)
        return spec


def quiet_tensorflow_startup(hide_noise: bool = True) -> None:
    """TensorFlow's first import without JAX's, and with ``hide_noise`` its native start-up lines kept off the
    terminal (``STARTUP_NOISE``; everything else it writes is kept); nothing once it is imported, or with the hook
    already in place."""
    if "tensorflow" in sys.modules or any(isinstance(f, _QuietTensorFlowStartup) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietTensorFlowStartup(hide_noise))


def record_step_failures() -> None:
    """Under run-local (``STEP_FAILURE_ENV`` set), an uncaught exception also leaves its one line in that file."""
    import os

    path = os.environ.get(STEP_FAILURE_ENV)
    if not path or getattr(sys.excepthook, "records_step_failures", False):
        return
    original = sys.excepthook

    def hook(kind, err, trace):
        import json

        try:
            with open(path, "a", encoding="utf-8") as handle:
                text = (
                    str(err).strip()
                    if getattr(err, "whole_message", False)
                    else disk_full(err) or storage_unreachable(err) or one_line(err)
                )
                handle.write(json.dumps({"error": text, "usage": isinstance(err, UsageError)}) + "\n")
        finally:
            original(kind, err, trace)

    hook.records_step_failures = True
    sys.excepthook = hook


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None, at_once: bool = False) -> None:
    """Runs ``main`` and turns a ``UsageError`` into ``error: ...`` on stderr with exit code 2. ``at_once``: then
    exits without the interpreter's teardown (``exit_at_once``)."""
    try:
        code = main(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        code = USAGE_EXIT_CODE
    except StepFailedError as err:
        print(f"error: {err}", file=sys.stderr)
        code = err.exit_code
    except KeyboardInterrupt as err:
        print(f"error: {str(err) or 'interrupted'}", file=sys.stderr)
        code = INTERRUPTED_EXIT_CODE
    except Exception as err:
        line = disk_full(err) or storage_unreachable(err)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        code = 1
    if at_once:
        exit_at_once(code)
    sys.exit(code)


def exit_at_once(code: int) -> None:
    """Exits with ``code`` as ``sys.exit`` would, the interpreter's own first steps taken (the other threads joined,
    the exit handlers run, the logs and the output flushed), but without its teardown of every module it imported:
    after a Beam pipeline (about 1,900 modules) that teardown alone takes a quarter of a second here, with nothing
    left to write. Where this Python lacks those steps' functions, ``sys.exit``."""
    import atexit
    import logging
    import os
    import threading

    join_threads, run_exit_handlers = getattr(threading, "_shutdown", None), getattr(atexit, "_run_exitfuncs", None)
    if join_threads is None or run_exit_handlers is None:
        sys.exit(code)
    join_threads()  # (what the interpreter does first: executors' threads are woken and joined)
    run_exit_handlers()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def console_script(main: Callable[[list[str] | None], int], at_once: bool = False) -> Callable[[], None]:
    """A command's console-script entry point (pyproject.toml's ``[project.scripts]``): ``main`` run as
    ``run_main`` runs it, one-line errors and exit codes included (``at_once``: ``exit_at_once``)."""
    import functools

    return functools.partial(run_main, main, at_once=at_once)
