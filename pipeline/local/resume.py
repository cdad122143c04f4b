"""Resuming an interrupted local run.

While ``run-local`` runs, ``<work_dir>/run-state.json`` names the run (its id, the key of its parameters and data,
its process). Ctrl-C or a SIGTERM stops the steps, marks the run ``interrupted`` there and in ``summary.json``, and
keeps ``<work_dir>/resume/<run id>/``: the cache of the steps that finished and the training checkpoints
(``AIP_CHECKPOINT_DIR``, as a Vertex AI custom job gets it). The same command run again continues that run, as Vertex
AI resumes a failed pipeline run: the same run id, the finished steps reused, training from its last backup.
Other parameters or other data start a new run; so does ``--no-resume``.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace

log = logging.getLogger(__name__)

STATE_FILE = "run-state.json"
RESUME_DIR = "resume"
RUNNING, INTERRUPTED, FAILED = "running", "interrupted", "failed"


@dataclass(frozen=True)
class RunState:
    """A local run that has not finished: running now, or interrupted.

    Args:
        run_id: the run's id (the DAG's ``run_id`` inputs); a resumed run keeps it: its finished steps are cache hits.
        run_name: the run's name (``pipeline_run``, the register step's label).
        key: ``run_key`` of its parameters and data; only a run with the same key resumes it.
        started: when its first attempt started (local time, ISO 8601).
        status: ``running`` or ``interrupted``.
        pid: the process of its latest attempt.
        pid_created: when that process started (psutil's create time; 0: not recorded): a process holding the same
            number that started at another time is another process (the number was reused, after a restart).
        attempts: how many times it was started.
        artifact_dirs: the kfp.local run folders of its interrupted attempts (the outputs a resumed run reuses).
        step: the step that was running when it was interrupted.
    """

    run_id: str
    run_name: str
    key: str
    started: str
    status: str = RUNNING
    pid: int = 0
    pid_created: float = 0.0
    attempts: int = 1
    artifact_dirs: tuple[str, ...] = field(default_factory=tuple)
    step: str = ""


def run_key(parameters: dict, fingerprint: str, registry: str, cache: bool) -> str:
    """What makes two runs the same run: every pipeline parameter, the data's fingerprint and the run's settings."""
    text = json.dumps(
        {"parameters": parameters, "fingerprint": fingerprint, "registry": registry, "cache": cache},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Decision:
    """What to do with the unfinished run found in the work dir: ``resume`` it, ``replace`` it (start a new run and
    discard its state), or ``refuse`` (it is running now); ``start`` when there is none. ``why`` says it to the user."""

    action: str
    why: str = ""


def decide(previous: RunState | None, key: str, resume: bool, previous_alive: bool) -> Decision:
    """Whether this run continues ``previous``, the unfinished run recorded in the work dir."""
    if previous is None:
        return Decision("start")
    if previous.status == RUNNING and previous_alive:
        return Decision("refuse", f"run-local (process {previous.pid}) has been running there since {previous.started}")
    if previous.key != key:
        return Decision("replace", f"the unfinished run {previous.run_name} had other parameters or data")
    if not resume:
        return Decision("replace", f"--no-resume: starting over instead of continuing {previous.run_name}")
    during = f" during {previous.step}" if previous.step else ""
    how = "which failed" if previous.status == FAILED else "interrupted"
    return Decision("resume", f"resuming {previous.run_name}, {how}{during} (started {previous.started})")


def read_state(work_dir: str) -> RunState | None:
    path = os.path.join(work_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        values = json.load(handle)
    return RunState(**{**values, "artifact_dirs": tuple(values.get("artifact_dirs", ()))})


def write_state(work_dir: str, state: RunState) -> None:
    from components.storage import write_json

    write_json(os.path.join(work_dir, STATE_FILE), asdict(state))


def resume_dir(work_dir: str, state: RunState) -> str:
    """The run's cache of finished steps (``cache/``) and its training checkpoints (``checkpoints/``)."""
    return os.path.join(work_dir, RESUME_DIR, state.run_id)


def process_alive(pid: int, created: float = 0.0) -> bool:
    """Whether process ``pid``, started at ``created`` (0: unknown), still runs."""
    import psutil

    if pid <= 0 or pid == os.getpid():
        return False
    try:
        return not created or abs(psutil.Process(pid).create_time() - created) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # someone else's process holds that number
        return True


def check_free(work_dir: str) -> RunState | None:
    """A one-line error while a run-local runs in the work dir, or a step of a killed one (a run-local killed
    outright, by the out-of-memory killer say, leaves its running step behind); made before anything is read or
    written, and again as the run begins. Returns the state of the run that was there (None: none)."""
    from components.cli import UsageError

    previous = read_state(work_dir)
    alive = previous is not None and process_alive(previous.pid, previous.pid_created)
    decision = decide(previous, "", True, alive)
    if decision.action == "refuse":
        raise UsageError(f"--work-dir {work_dir}: {decision.why}; wait for it to end, or pass another --work-dir")
    left = steps_left_running(work_dir) if previous is not None else []
    if left:
        pid, step = left[0]
        raise UsageError(
            f"--work-dir {work_dir}: the {step} step of the run-local that was killed there is still "
            f"running (process {pid}); wait for it to end, or end it (kill {pid}), then run the same "
            "command again"
        )
    return previous


def steps_left_running(work_dir: str) -> list[tuple[int, str]]:
    """(process, step) of each step process (kfp.local's executor) still working on the work dir's files, but this
    process's own."""
    import psutil

    inside = os.path.join(os.path.abspath(work_dir), "")
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        executor = "kfp.dsl.executor_main" in line and os.path.basename(line[0]) not in ("sh", "bash")
        if executor and process.pid != os.getpid() and any(inside in part for part in line):
            step = line[line.index("--function_to_execute") + 1] if "--function_to_execute" in line[:-1] else "a"
            found.append((process.pid, step))
    return sorted(found)


def this_process_created() -> float:
    import psutil

    return psutil.Process().create_time()


def begin(work_dir: str, key: str, run_name: str, resume: bool) -> tuple[RunState, RunState | None]:
    """This run's state, written to the work dir, and the interrupted run it continues (None: a new run).

    Raises:
        UsageError: another run-local is running in this work dir now.
    """
    import shutil
    import uuid

    previous = check_free(work_dir)
    decision = decide(previous, key, resume, previous_alive=False)  # (checked just now)
    if decision.action == "resume":
        training = " and training goes on from its last backup" if previous.step == "train" else ""
        log.info("%s: its finished steps are reused%s (--no-resume starts over)", decision.why, training)
        state = replace(
            previous,
            status=RUNNING,
            pid=os.getpid(),
            pid_created=this_process_created(),
            attempts=previous.attempts + 1,
            step="",
        )
        write_state(work_dir, state)
        return state, previous
    if decision.action == "replace":
        log.info("%s: starting a new run", decision.why)
        shutil.rmtree(resume_dir(work_dir, previous), ignore_errors=True)
        remove_leftovers(work_dir, list(previous.artifact_dirs), [])
    state = RunState(
        run_id=uuid.uuid4().hex,
        run_name=run_name,
        key=key,
        started=time.strftime("%Y-%m-%dT%H:%M:%S"),
        pid=os.getpid(),
        pid_created=this_process_created(),
    )
    write_state(work_dir, state)
    return state, None


def progressed(work_dir: str, state: RunState, step: str, artifact_dirs: list[str]) -> RunState:
    """Records, as the run goes, the step it is in and its attempt's outputs so far: a run killed outright
    (SIGKILL, a lost machine) never gets to say what it was doing, and the next attempt reads it from here."""
    return _record(work_dir, state, step, artifact_dirs, state.status)


def interrupted(work_dir: str, state: RunState, step: str, artifact_dirs: list[str], failed: bool = False) -> RunState:
    """Records the run as interrupted during ``step`` (or, ``failed``, as failed there: a step that crashed or was
    killed, which the same command resumes as it would an interruption), its attempt's outputs in
    ``artifact_dirs``."""
    return _record(work_dir, state, step, artifact_dirs, FAILED if failed else INTERRUPTED)


def _record(work_dir: str, state: RunState, step: str, artifact_dirs: list[str], status: str) -> RunState:
    dirs = tuple(dict.fromkeys((*state.artifact_dirs, *artifact_dirs)))  # each folder once, in order
    state = replace(state, status=status, step=step, artifact_dirs=dirs)
    write_state(work_dir, state)
    return state


def finished(work_dir: str, state: RunState, killed_attempts: list[str] = ()) -> None:
    """The run ended (succeeded, or failed on its own error): nothing is left to resume. The step folders that its
    killed attempts (their kfp.local run folders, ``killed_attempts``) left and that no cache entry reuses go."""
    import shutil

    remove_leftovers(work_dir, killed_attempts, [os.path.join(resume_dir(work_dir, state), "cache")])
    shutil.rmtree(resume_dir(work_dir, state), ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(work_dir, STATE_FILE))
    with contextlib.suppress(OSError):  # only when no other run's folder is left in it
        os.rmdir(os.path.join(work_dir, RESUME_DIR))


def remove_leftovers(work_dir: str, run_folders: list[str], caches: list[str]) -> list[str]:
    """Removes the step folders under ``run_folders`` (kfp.local run folders of killed attempts) that no kfp.local
    cache entry reuses, in ``caches`` or the work dir's shared ``cache/``: the outputs of steps that were killed before
    they finished, or that ran again. Returns the folders removed; logs their count and size."""
    import shutil

    from pipeline.images import mappings

    used = set()
    for cache in {*caches, os.path.join(work_dir, "cache")}:
        for entry in glob.glob(os.path.join(cache, "*.json")):
            with contextlib.suppress(OSError, ValueError), open(entry, encoding="utf-8") as handle:
                entry = mappings(json.load(handle))  # (every artifact's ``uri`` in it)
                used.update(n["uri"].removeprefix("file://") for n in entry if isinstance(n.get("uri"), str))
    removed, size = [], 0
    for run_folder in run_folders:
        steps = sorted(glob.glob(os.path.join(run_folder, "*", "")))
        for step in steps:
            if any(uri.startswith(step) for uri in used):
                continue
            size += sum(os.path.getsize(os.path.join(top, name)) for top, _, names in os.walk(step) for name in names)
            shutil.rmtree(step, ignore_errors=True)
            removed.append(step.rstrip("/"))
        with contextlib.suppress(OSError):  # (when nothing in it is reused)
            os.rmdir(run_folder)
    if removed:
        where = os.path.dirname(run_folders[0])
        plural = "" if len(removed) == 1 else "s"
        log.info(
            "removed %d step folder%s (%.1f MiB) that killed attempts left in %s",
            len(removed),
            plural,
            size / 2**20,
            where,
        )
    return removed


def descendants(pid: int) -> list[int]:
    """Every process started under ``pid`` (the steps and their shells)."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@contextlib.contextmanager
def steps_stop_on_interrupt() -> Iterator[None]:
    """Ctrl-C or SIGTERM stops the running steps too, then raises ``KeyboardInterrupt`` here.

    A terminal's Ctrl-C reaches the steps itself (they are in its process group); a SIGTERM to run-local alone (a
    ``kill``, a CI job's timeout, ``docker stop``) would leave them training on, orphaned, without this.
    """
    import threading

    if os.name != "posix" or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
