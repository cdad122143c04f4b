"""run-local's step server (``components.step_server``): a step that asks runs in a fork of a process that has
imported TensorFlow, with the step's own streams, folder, environment and arguments, and its process ends as that
copy ends; killing the step's process ends the copy; a step whose environment differs starts cold, as one whose
Keras backend differs does (``restart_cold``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from components.step_server import SOCKET_ENV, step_server
from tests.conftest import REPO_ROOT

PROBE = "tests.components.step_probe"


@pytest.fixture(scope="module")
def server():
    """One step server for the module's tests (TensorFlow imported once); yields the steps' variables."""
    with step_server({"PROBE_SERVER": "1"}) as env:
        assert set(env) == {SOCKET_ENV}
        yield env


def start(env: dict, *args: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", PROBE, *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PROBE_SERVER": "1", **env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def reports(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_step_runs_in_a_copy_with_its_own_streams_arguments_environment_and_exit_code(server):
    step = start(server, "exit", "3", PROBE_MARKER="mine")
    stdout, stderr = step.communicate(timeout=120)
    assert step.returncode == 3, stderr
    [report] = reports(stdout)
    assert report["pid"] != step.pid  # another process ...
    assert report["tensorflow"]  # ... that had imported TensorFlow before the step's code ran
    assert report["argv"] == ["exit", "3"]
    assert report["cwd"] == REPO_ROOT
    assert report["marker"] == "mine"
    assert "a line on stderr" in stderr
    assert "step server: this step runs in a copy of the server" in stderr


def test_the_first_step_starts_at_once_and_the_next_find_what_they_import_first_loaded():
    """The server imports what evaluate and export import first (scikit-learn's metrics, their modules) once it has
    forked a step, while that step runs: the first step does not wait for it, the steps after it find it loaded."""
    from components.step_server import LATER_IMPORTS

    with step_server({"PROBE_SERVER": "1"}) as env:
        runs = []
        for _ in range(2):
            step = start(env, "exit", "0")
            stdout, stderr = step.communicate(timeout=120)
            assert step.returncode == 0, stderr
            runs.append(reports(stdout)[0])
    assert "sklearn.metrics" in LATER_IMPORTS
    assert runs[0]["tensorflow"] and runs[0]["loaded"] == []
    assert runs[1]["loaded"] == list(LATER_IMPORTS)


def test_a_failing_step_ends_as_python_does_its_traceback_on_its_stderr(server):
    step = start(server, "raise")
    stdout, stderr = step.communicate(timeout=120)
    assert step.returncode == 1
    assert reports(stdout)[0]["tensorflow"]
    assert "ValueError: the probe failed" in stderr.splitlines()[-1]


def test_a_copy_ends_as_python_does_its_threads_joined_its_exit_functions_run_ctrl_c_its_signal(server):
    step = start(server, "thread")
    stdout, stderr = step.communicate(timeout=120)
    assert step.returncode == 0, stderr
    assert reports(stdout)[0]["tensorflow"]
    assert stdout.splitlines()[-2:] == ["thread finished", "exit function ran"]
    step = start(server, "interrupt")
    stdout, stderr = step.communicate(timeout=120)
    assert reports(stdout)[0]["tensorflow"]
    assert step.returncode == -signal.SIGINT and "KeyboardInterrupt" in stderr


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_steps_process_ends_its_copy(server, number):
    step = start(server, "sleep")
    [report] = reports(step.stdout.readline())
    assert report["pid"] != step.pid and alive(report["pid"])
    os.kill(step.pid, number)
    step.wait(timeout=60)
    assert step.returncode == -number
    assert wait_gone(report["pid"]), f"the copy of a step killed by {signal.Signals(number).name} runs on"


def test_a_stopped_step_stops_its_copy_and_continues_it(server):
    import psutil

    step = start(server, "sleep")
    [report] = reports(step.stdout.readline())
    copy, process = psutil.Process(report["pid"]), psutil.Process(step.pid)

    def becomes(who, stopped: bool) -> bool:
        deadline = time.monotonic() + 30
        while (who.status() == psutil.STATUS_STOPPED) != stopped and time.monotonic() < deadline:
            time.sleep(0.02)
        return (who.status() == psutil.STATUS_STOPPED) == stopped

    os.kill(step.pid, signal.SIGTSTP)  # (as a terminal's Ctrl-Z)
    assert becomes(process, True) and becomes(copy, True)
    os.kill(step.pid, signal.SIGCONT)
    assert becomes(process, False) and becomes(copy, False)
    step.kill()
    step.wait(timeout=60)
    assert wait_gone(report["pid"])


def test_a_step_whose_import_time_environment_differs_starts_cold_and_says_why(server):
    step = start(server, "exit", "0", KERAS_BACKEND="jax")
    stdout, stderr = step.communicate(timeout=120)
    assert step.returncode == 0, stderr
    [report] = reports(stdout)
    assert report["pid"] == step.pid and not report["tensorflow"]
    assert "step server: this step starts cold: KERAS_BACKEND='jax', where the server has ''" in stderr


def test_a_copy_that_needs_another_keras_backend_runs_again_cold(server):
    step = start(server, "jax")
    stdout, stderr = step.communicate(timeout=180)
    assert step.returncode == 0, stderr
    warm, cold, backend = reports(stdout)
    assert warm["tensorflow"] and not cold["tensorflow"]  # the step from its start, in a fresh Python ...
    assert cold["pid"] == warm["pid"] != step.pid  # ... in the copy's place
    assert backend == {"backend": "jax", "pid": warm["pid"]}


def test_without_the_server_a_step_runs_cold_silently(tmp_path):
    step = start({SOCKET_ENV: str(tmp_path / "no-socket")}, "exit", "0")
    stdout, stderr = step.communicate(timeout=120)
    assert step.returncode == 0
    assert reports(stdout)[0]["pid"] == step.pid
    assert "step server" not in stderr


def test_warm_steps_0_turns_the_server_off(monkeypatch):
    monkeypatch.setenv("TPU_PIPELINE_WARM_STEPS", "0")
    with step_server({}) as env:
        assert env == {}


def test_a_server_that_ends_without_an_answer_leaves_the_step_cold_with_a_note(tmp_path):
    import socket
    import threading

    path = str(tmp_path / "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(1)

    def end_at_once():  # the request read, no answer
        connection, _ = listener.accept()
        _, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        for fd in fds:
            os.close(fd)
        connection.close()

    threading.Thread(target=end_at_once, daemon=True).start()
    step = start({SOCKET_ENV: path}, "exit", "0")
    stdout, stderr = step.communicate(timeout=120)
    listener.close()
    assert step.returncode == 0
    assert reports(stdout)[0]["pid"] == step.pid
    assert "step server: this step starts cold: the step server ended" in stderr
