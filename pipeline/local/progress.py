"""What run-local shows while the DAG runs: each step as it starts and ends, the steps' own progress lines and
warnings; everything else the orchestrator and the steps print goes to ``run.log``."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import time

log = logging.getLogger(__name__)

RUN_LOG = "run.log"

# what the terminal shows without -v: each step starting and ending (or served from the cache), our own steps'
# progress lines, and any warning or error; the rest (KFP's executor input dumps, framework start-up lines, the
# orchestrator's tables) is in run.log
STEP_STARTED = re.compile(r"Executing task '([^']+)'")

STEP_ENDED = re.compile(r"Task '([^']+)' finished with status (\w+)")

STEP_CACHED = re.compile(r"Task '?([\w-]+)'? cache hit")

STEP_LOG = re.compile(r"^\s*\[KFP Executor \S+ \S+ (INFO|WARNING|ERROR)\]: (.+)$")  # a step's logging line

KFP_OWN = ("Looking for component", "Loading KFP component", "Got executor_input", "Wrote executor output")

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Progress(io.TextIOBase):
    """A stream that keeps everything in the run log and echoes the progress lines to the terminal."""

    def __init__(self, log_file, terminal, verbose: bool = False, resumed: bool = False, on_change=None):
        self.log_file, self.terminal, self.pending, self.started = log_file, terminal, "", {}
        self.verbose = verbose  # everything to the terminal too
        self.resumed = resumed  # cache hits are the steps the interrupted run finished
        self.running: list[str] = []  # the steps started and not ended, latest last
        self.on_change = on_change  # called with ``running`` when a step starts or ends

    def write(self, text: str) -> int:
        self.log_file.write(text)
        if self.verbose:
            self.terminal.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.echo(ANSI.sub("", line))
        return len(text)

    def say(self, line: str) -> None:
        if not self.verbose:  # (verbose: the terminal has every line already)
            print(line, file=self.terminal, flush=True)

    def flush(self) -> None:
        self.log_file.flush()
        self.terminal.flush()

    def echo(self, line: str) -> None:
        now = time.monotonic()
        if match := STEP_STARTED.search(line):
            self.started[match.group(1)] = now
            self.running.append(match.group(1))
            self.say(f"  {match.group(1)}: running")
            if self.on_change:
                self.on_change(list(self.running))
        elif match := STEP_ENDED.search(line):
            took = now - self.started.get(match.group(1), now)
            if match.group(1) in self.running:
                self.running.remove(match.group(1))
            self.say(f"  {match.group(1)}: {match.group(2).lower()} ({took:.1f}s)")
            if self.on_change:
                self.on_change(list(self.running))
        elif match := STEP_CACHED.search(line):
            whose = "done before the interruption, or in an earlier run" if self.resumed else "an earlier run's outputs"
            self.say(f"  {match.group(1)}: cached ({whose})")
        elif (match := STEP_LOG.match(line)) and not match.group(2).startswith(KFP_OWN):
            level = "" if match.group(1) == "INFO" else f"{match.group(1)}: "
            self.say(f"    {level}{match.group(2)}")


def steps_environment(verbose: bool) -> dict[str, str]:
    """What ``quiet`` sets for the steps (subprocesses): without ``verbose``, their TensorFlow start-up lines off."""
    return {} if verbose else {"TF_CPP_MIN_LOG_LEVEL": "1"}


@contextlib.contextmanager
def quiet(log_path: str, verbose: bool, resumed: bool = False, on_change=None):
    """The orchestrator's and the steps' output, all of it into ``log_path``; on the terminal, only the progress
    (or everything with ``verbose``). Yields the progress stream (``running``: the steps running now;
    ``on_change(running)`` is called as steps start and end)."""
    import warnings

    with open(log_path, "w", encoding="utf-8") as log_file:
        terminal = sys.stdout
        progress = _Progress(log_file, terminal, verbose, resumed, on_change)
        # kfp.local logs some lines (a task's cache hit) through the root logger's handlers, set up before
        handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
        streams = [h.setStream(progress) for h in handlers]
        previous = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
        os.environ.update(steps_environment(verbose))
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(progress), contextlib.redirect_stderr(progress):
                if not verbose:
                    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
                yield progress
        finally:
            for handler, stream in zip(handlers, streams, strict=True):
                handler.setStream(stream)
            if previous is None:
                os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
            else:
                os.environ["TF_CPP_MIN_LOG_LEVEL"] = previous
            print(f"  the steps' full output: {log_path}", file=terminal, flush=True)
