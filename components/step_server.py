"""Warm starts for run-local's TensorFlow steps: a process that has imported TensorFlow once forks each step.

kfp.local starts every step as a fresh Python, and a TensorFlow step spends 6 to 9 s of its start importing
TensorFlow: train, evaluate and export, a quarter of ``make run``. run-local starts this server as the run begins,
and it imports TensorFlow while convert and check data run. A TensorFlow step's component starts with
``start_step`` from here: it sends the server its command line, environment, working folder and standard streams,
and waits. The server forks a copy of itself that runs the same step, writing to the step's own streams, and the
step's process ends as that copy ends, with its exit code (or signal).

- The step's process stands for the copy: killing it (SIGKILL, say) kills the copy, SIGTERM is passed on, and
  SIGTSTP / SIGCONT stop and continue both. A terminal's Ctrl-C reaches the copy itself (it is in run-local's process
  group), as run-local's SIGTERM to its descendants does.
- A step is started cold (as before) when the server is not there or not running, or when the step's environment
  differs from the server's in a variable that TensorFlow, Keras, JAX or the libraries below them read as they load.
- A copy that needs Keras on another backend (a JAX training) replaces itself by a fresh Python running the same
  step (``restart_cold``).
- ``TPU_PIPELINE_WARM_STEPS=0`` turns it off: every step is a fresh Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

from components.cli import QUIET_TF_LOG_LEVEL

# set by run-local for its steps: the server's socket (a step without it starts cold)
SOCKET_ENV = "TPU_PIPELINE_STEP_SERVER"
# the user's switch: 0 starts every step of run-local as a fresh Python
WARM_ENV = "TPU_PIPELINE_WARM_STEPS"
# the variables read as TensorFlow, Keras, JAX and their native libraries load: a step whose values differ from the
# server's starts cold (the others, run-local's and the task's own, are the copy's from its start)
IMPORT_TIME_PREFIXES = (
    "TF_",
    "KERAS_",
    "JAX_",
    "XLA_",
    "ONEDNN_",
    "DNNL_",
    "CUDA_",
    "NVIDIA_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "PYTHON",
    "LD_",
    "HOME",
    "XDG_",
)
# imported by the server once it has forked a step's copy, while that copy runs (its first, a training, runs for
# seconds): what the steps after it import first, so that their copies find it loaded (scikit-learn's metrics are
# 1.5 s of each evaluate's start)
LATER_IMPORTS = ("sklearn.metrics", "components.evaluate.core", "components.export.core")
MESSAGE_BYTES = 1 << 20
# how long a step waits for the server's answer (it answers once TensorFlow is imported) before it starts cold
ANSWER_SECONDS = 180


def import_time_environment(env) -> dict[str, str]:
    """Those of ``env``'s variables that TensorFlow and the rest read as they load, with the default a step's
    logging gives (``components.cli.quiet_tensorflow``)."""
    found = {name: value for name, value in env.items() if name.startswith(IMPORT_TIME_PREFIXES)}
    found.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_TF_LOG_LEVEL)
    return found


def start_step(warm=True) -> None:
    """A TensorFlow step's start (``components.cli.start_step``), in a copy of run-local's step server where it can
    be. ``warm``: whether the step will run on the Keras backend the server loaded, TensorFlow (a function that says
    so, called only under the server)."""
    from components.cli import start_step as start

    if os.environ.get(SOCKET_ENV) and (warm() if callable(warm) else warm):
        hand_off()
    start()


# what this process was started as, when it is a copy the server forked (its own ``sys.orig_argv`` is the server's)
_started_as: list[str] | None = None


def hand_off() -> None:
    """Under run-local's step server: has the server run this step (a process started as ``python -m MODULE ...``)
    and ends this process as that run ends; returns at once (the step runs here, cold) where it cannot."""
    path = os.environ.get(SOCKET_ENV, "")
    argv = list(getattr(sys, "orig_argv", ()))
    if not path or len(argv) < 3 or argv[1] != "-m" or "tensorflow" in sys.modules:
        return
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        connection.connect(path)
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
    except OSError:  # not (or no longer) listening: the step runs here
        connection.close()
        return
    connection.settimeout(ANSWER_SECONDS)
    try:
        answer = json.loads(connection.recv(MESSAGE_BYTES) or b'{"cold": "the step server ended"}')
    except TimeoutError:  # (the server then finds this end closed, and forks nothing)
        answer = {"cold": f"the step server did not answer in {ANSWER_SECONDS} s"}
    except OSError as err:
        answer = {"cold": f"the step server ended ({err})"}
    connection.settimeout(None)
    if "pid" not in answer:
        connection.close()
        print(f"step server: this step starts cold: {answer.get('cold')}", file=sys.stderr, flush=True)
        return
    wait_for(connection, answer["pid"])


def wait_for(connection: socket.socket, pid: int) -> None:
    """Stands for the copy ``pid`` until it ends, then ends the same way."""
    forwarded = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)

    def forward(number, frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)

    def stop(number, frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)

    for number in forwarded:
        signal.signal(number, forward)
    signal.signal(signal.SIGTSTP, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the terminal's Ctrl-C reaches the copy itself)
    message = b""
    with contextlib.suppress(OSError):
        message = connection.recv(MESSAGE_BYTES)
    code = json.loads(message).get("exit", 1) if message else None
    flush_streams()
    if code is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        print("error: run-local's step server ended before this step did; run the same command again", file=sys.stderr)
        os._exit(1)
    if code < 0:  # killed by a signal: the same, for whoever waits on this process
        end_by_signal(-code)
    os._exit(code if code >= 0 else 128 - code)


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def end_by_signal(number: int) -> None:
    """Ends this process by signal ``number``, as its default action does."""
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


def restart_cold() -> None:
    """In a copy the server forked, replaces it by a fresh Python that runs the same step from its start (for a
    backend other than the one loaded); elsewhere, nothing."""
    if _started_as is None:
        return
    flush_streams()
    os.execv(sys.executable, _started_as)


def serve(path: str, listening: int) -> None:
    """Imports TensorFlow, then forks a copy for each step that asks on ``listening`` (the socket at ``path``), until
    SIGTERM (or its parent's end) with no copy left running."""
    listener = socket.socket(fileno=listening)
    imported = import_time_environment(os.environ)  # (before preload's own)
    preload()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    stopping = []
    signal.signal(signal.SIGCHLD, lambda number, frame: None)
    signal.signal(signal.SIGTERM, lambda number, frame: stopping.append(number))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the steps; run-local ends the server
    parent = os.getppid()
    copies: dict[int, socket.socket] = {}
    try:
        loop(listener, copies, imported, (wake_read, wake_write), stopping, parent)
    finally:  # (its socket, when run-local could not remove it: killed outright)
        with contextlib.suppress(OSError):
            os.remove(path)
            os.rmdir(os.path.dirname(path))


def loop(listener, copies: dict, imported: dict, wake: tuple[int, int], stopping: list, parent: int) -> None:
    """Serves until SIGTERM (or the parent's end), then until no copy is left running."""
    import select

    wake_read = wake[0]
    later = list(LATER_IMPORTS)
    while True:
        serving = not (stopping or os.getppid() != parent)
        if not (serving or copies):
            return
        watched = [wake_read, *copies.values(), *([listener] if serving else [])]
        ready, _, _ = select.select(watched, [], [], 1.0)
        if wake_read in ready:
            os.read(wake_read, 4096)
        for pid, connection in list(copies.items()):
            if connection in ready and step_gone(connection):
                with contextlib.suppress(ProcessLookupError):  # the step's process is gone: so is its copy
                    os.kill(pid, signal.SIGKILL)
        reap(copies)
        if listener in ready:
            try:
                connection, _ = listener.accept()
            except OSError:  # (a step that gave up between the two)
                continue
            pid = start_copy(connection, imported, [listener, *copies.values()], wake)
            if pid:
                copies[pid] = connection
        if copies and later:
            import_later(later)


def import_later(modules: list[str]) -> None:
    """Imports ``modules`` (emptying the list); one that fails to import is left to the step that needs it."""
    import importlib

    while modules:
        with contextlib.suppress(Exception):
            importlib.import_module(modules.pop(0))


def step_gone(connection: socket.socket) -> bool:
    """Whether the step's end of ``connection`` closed (it sends nothing after its request)."""
    try:
        return not connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True


def preload() -> None:
    """What the TensorFlow steps import first, as they import it (``components.cli.configure_logging``)."""
    from components.cli import quiet_tensorflow

    quiet_tensorflow()
    import kfp.dsl.executor  # noqa: F401
    import tensorflow  # noqa: F401

    flush_streams()


def reap(copies: dict[int, socket.socket]) -> None:
    """Tells each ended copy's step how it ended."""
    while copies:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        connection = copies.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
            connection.close()


def start_copy(connection: socket.socket, imported: dict, inherited: list, wake: tuple[int, int]) -> int:
    """Forks the copy that runs the step asking on ``connection``; its pid, or 0 when the step is to start cold."""
    try:
        data, fds, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, 3)
        request = json.loads(data)
    except (OSError, ValueError):
        connection.close()
        return 0
    why = "the step gave up waiting" if step_gone(connection) else cold_because(request, imported)
    if why:
        return answer_cold(connection, fds, why)
    try:
        pid = os.fork()
    except OSError as err:  # (out of memory, or of processes: the step runs cold)
        return answer_cold(connection, fds, f"the step server could not fork ({err})")
    if pid == 0:
        code = 1
        try:
            for other in inherited:
                other.close()
            connection.close()
            signal.set_wakeup_fd(-1)
            for fd in wake:
                os.close(fd)
            code = run_copy(request, fds)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # (a step gone since: the loop finds its end closed and ends the copy)
        connection.send(json.dumps({"pid": pid}).encode())
    return pid


def answer_cold(connection: socket.socket, fds: list[int], why: str) -> int:
    """Tells the step on ``connection`` to run cold, and why; 0 (no copy)."""
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        connection.send(json.dumps({"cold": why}).encode())
    connection.close()
    return 0


def cold_because(request: dict, imported: dict) -> str:
    """Why the step of ``request`` cannot run in a copy of this process (empty: it can)."""
    if request["argv"][0] != sys.orig_argv[0]:
        return f"another Python ({request['argv'][0]})"
    if request["cwd"] != sys.path[0]:  # (``python -m`` puts its folder first on the path: the server's imports)
        return f"another working folder ({request['cwd']})"
    asked = import_time_environment(request["env"])
    differing = sorted(name for name in {*imported, *asked} if imported.get(name) != asked.get(name))
    if not differing:
        return ""
    name = differing[0]
    return f"{name}={asked.get(name, '')!r}, where the server has {imported.get(name, '')!r}"


def run_copy(request: dict, fds: list[int]) -> int:
    """In the forked copy: becomes the step's process (its streams, folder, environment and command line) and runs
    its module as ``python -m`` would; returns its exit code."""
    import runpy

    global _started_as
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGTSTP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # (as Python opens them: stdout line-buffered on a terminal, stderr always; its encoding, the server's)
    sys.stdin = open(0, closefd=False, encoding=sys.stdin.encoding)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False, encoding=sys.stdout.encoding)  # noqa: SIM115
    sys.stderr = open(2, "w", 1, closefd=False, encoding=sys.stderr.encoding, errors="backslashreplace")  # noqa: SIM115
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({name: value for name, value in request["env"].items() if name != SOCKET_ENV})
    argv = request["argv"]
    _started_as = argv
    print("step server: this step runs in a copy of the server, with TensorFlow imported", file=sys.stderr)
    sys.argv = [argv[2], *argv[3:]]
    code = 0
    try:
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
        if end.code is not None and not isinstance(end.code, int):
            print(end.code, file=sys.stderr)
    except BaseException as err:  # as Python ends on an uncaught exception (run-local's hook records it)
        sys.excepthook(type(err), err, err.__traceback__)
        code = 1
        if isinstance(err, KeyboardInterrupt):
            code = -signal.SIGINT
    import atexit
    import threading

    threading._shutdown()  # (as Python's end: its threads joined, then the exit functions)
    atexit._run_exitfuncs()
    flush_streams()
    if code < 0:
        end_by_signal(-code)
    return code


@contextlib.contextmanager
def step_server(env: dict[str, str], owner: str = ""):
    """Runs the server for the steps of the ``with`` block, which will see ``env`` too: yields the variables that
    send them to it (none when ``TPU_PIPELINE_WARM_STEPS=0``, or where it cannot run). ``owner`` (run-local's work
    dir) ends the server's command line, and so its copies': ``ps`` shows whose steps they are."""
    import shutil
    import subprocess
    import tempfile

    if os.environ.get(WARM_ENV, "1") == "0" or not hasattr(socket, "send_fds") or os.name != "posix":
        yield {}
        return
    folder = tempfile.mkdtemp(prefix="tpu-pipeline-steps-")  # (a socket's path is at most 107 bytes)
    path = os.path.join(folder, "socket")
    # listening from here on: a step that asks while the server loads TensorFlow waits for it (less than its own
    # import would take)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind(path)
        listener.listen(8)
        server = subprocess.Popen(
            [sys.executable, "-m", __name__, path, str(listener.fileno()), owner],
            env={**os.environ, **env},
            # (nothing of run-local's: a server that outlives it, killed outright, holds none of its pipes)
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=[listener.fileno()],
        )
    try:
        yield {SOCKET_ENV: path}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":  # (through the module's own name: the copies' state is read there, not in __main__)
    from components.step_server import serve as run_server

    run_server(sys.argv[1], int(sys.argv[2]))
