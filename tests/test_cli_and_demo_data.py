"""Every step runs on its own from the command line; the demo data ships with the install."""

from __future__ import annotations

import os

import pytest
from PIL import Image

from components.demo_data import write_digits
from tests.conftest import REPO_ROOT, record_export, run_cli


@pytest.mark.parametrize("step", ["convert", "train", "evaluate", "export", "convert.fingerprint", "register"])
def test_each_component_has_a_help(step):
    result = run_cli(f"components.{step}", "--help")
    assert result.returncode == 0, result.stderr
    assert f"python -m components.{step}" in result.stdout


def test_pipeline_cli_help_lists_its_commands():
    result = run_cli("pipeline", "--help")
    assert result.returncode == 0
    assert "compile" in result.stdout and "run-local" in result.stdout


def test_missing_required_flag_is_a_usage_error():
    result = run_cli("components.convert")
    assert result.returncode == 2
    assert "--source" in result.stderr


def test_demo_digits_are_written_as_a_folder_of_jpegs_per_class(tmp_path):
    root = tmp_path / "digits"
    assert write_digits(str(root)) == 1797
    assert sorted(os.listdir(root)) == [str(d) for d in range(10)]
    files = [os.path.join(root, d, f) for d in os.listdir(root) for f in os.listdir(root / d)]
    assert len(files) == 1797 and all(f.endswith(".jpg") for f in files)
    with Image.open(files[0]) as image:
        assert image.format == "JPEG" and image.size == (16, 16)  # the 8x8 scans at twice their size
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".digits-")]


def test_the_demo_scans_are_scikit_learns_digits_read_without_importing_it():
    """The digits come from the file scikit-learn ships, read as ``load_digits`` reads it, in a process that never
    imports scikit-learn (its import is most of a first run-local's start)."""
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from components.demo_data import digit_scans

    scans, targets = digit_scans()
    digits = load_digits()
    assert np.array_equal(scans, digits.images) and np.array_equal(targets, digits.target)
    check = "import sys; from components.demo_data import digit_scans; digit_scans(); print('sklearn' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", check], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_rewriting_the_same_digits_keeps_the_files_and_so_their_fingerprint(tmp_path):
    """run-local writes the demo digits on every run: the same images must leave the folder as it was (a new
    modification time would change the fingerprint: no rerun could resume or hit the cache); others replace it."""
    from components.convert.listing import source_fingerprint

    root = tmp_path / "digits"
    write_digits(str(root), per_class_limit=3)
    before = source_fingerprint(str(root))
    os.utime(root / "0" / os.listdir(root / "0")[0], (1, 1))  # as if written long ago: a rewrite would show
    kept = source_fingerprint(str(root))
    assert kept != before
    write_digits(str(root), per_class_limit=3)
    assert source_fingerprint(str(root)) == kept
    write_digits(str(root), per_class_limit=4)
    assert len(os.listdir(root / "0")) == 4 and source_fingerprint(str(root)) != kept
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".digits-")]


def test_digits_written_before_and_untouched_are_not_made_again(tmp_path, monkeypatch):
    """Each run-local writes the demo digits: the folder left as the last write left it is kept without making them
    again; one file gone (or changed) and they are written again."""
    from components import demo_data

    root = tmp_path / "digits"
    assert write_digits(str(root), per_class_limit=3) == 30
    with monkeypatch.context() as patched:
        patched.setattr(demo_data, "digit_scans", lambda: pytest.fail("the digits were made again"))
        assert write_digits(str(root), per_class_limit=3) == 30
    gone = root / "7" / sorted(os.listdir(root / "7"))[0]
    os.remove(gone)
    assert write_digits(str(root), per_class_limit=3) == 30 and gone.exists()
    with monkeypatch.context() as patched:
        patched.setattr(demo_data, "digit_scans", lambda: pytest.fail("the digits were made again"))
        with pytest.raises(pytest.fail.Exception):  # (other arguments: made again)
            write_digits(str(root), per_class_limit=4)


def test_the_fingerprint_and_registry_steps_run_on_their_own(tmp_path):
    """The fingerprint step prints what convert's cache keys on, changed by a new file; the folder registry's
    steps find no baseline, register an export as version 1, find it, and skip it when it is the baseline."""
    import json

    source = tmp_path / "digits"
    write_digits(str(source), per_class_limit=2)
    first = run_cli("components.convert.fingerprint", "--source", str(source))
    assert first.returncode == 0, first.stderr
    Image.new("RGB", (8, 8)).save(source / "3" / "new.jpg")
    again = run_cli("components.convert.fingerprint", "--source", str(source))
    found = [json.loads(result.stdout.strip().splitlines()[-1]) for result in (first, again)]
    assert found[0]["source"] == str(source) and len(found[0]["fingerprint"]) == 64
    assert found[0]["fingerprint"] != found[1]["fingerprint"]

    export, registry = tmp_path / "export", tmp_path / "registry"
    (export / "saved_model").mkdir(parents=True)
    (export / "saved_model" / "saved_model.pb").write_bytes(b"graph")
    record_export(export, "ab" * 32)

    def last_line(*args: str) -> dict:
        result = run_cli("components.register", *args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    assert last_line("baseline", "--registry", str(registry)) == {"baseline": ""}
    added = last_line("add", "--export", str(export), "--registry", str(registry), "--run", "r1")
    assert (added["action"], added["version"], added["uri"]) == ("registered", 1, f"{registry}/1")
    assert (registry / "1" / "saved_model" / "saved_model.pb").read_bytes() == b"graph"
    assert last_line("baseline", "--registry", str(registry)) == {"baseline": f"{registry}/1"}
    again = last_line("add", "--export", str(export), "--registry", str(registry), "--baseline", f"{registry}/1")
    assert again["action"] == "skipped" and not (registry / "2").exists()


def console_scripts() -> dict[str, str]:
    import tomllib

    from tests.conftest import REPO_ROOT

    with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]["scripts"]


@pytest.mark.parametrize("name", sorted(console_scripts()))
def test_each_console_script_is_installed_and_runs_its_command(name):
    """pyproject.toml's [project.scripts], as the environment's install made them: each runs its module's command
    (its help names the python -m form, which keeps working)."""
    import subprocess
    import sys

    module = console_scripts()[name].split(":")[0].removesuffix(".__main__")
    script = os.path.join(os.path.dirname(sys.executable), name)
    result = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m {module} ")


def test_tensorflows_native_start_up_lines_stay_off_the_terminal_and_the_rest_of_stderr_stays():
    """On CPUs where TensorFlow turns oneDNN on by default, its native libraries write "oneDNN custom operations
    are on" (and absl's warning before it) while they load, before TF_CPP_MIN_LOG_LEVEL applies: the steps'
    logging set-up keeps those lines, and only those, off stderr; -v shows everything."""
    import subprocess
    import sys

    script = (
        "import sys; from components.cli import configure_logging; configure_logging('-v' in sys.argv); "
        "import tensorflow as tf; print('after', file=sys.stderr); "
        "print(type(tf.__loader__).__name__)"
    )
    quiet = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.splitlines() == ["after"] and quiet.stdout.strip() == "SourceFileLoader"
    from components.cli import STARTUP_NOISE

    verbose = subprocess.run([sys.executable, "-c", script, "-v"], cwd=REPO_ROOT, capture_output=True, timeout=120)
    assert verbose.returncode == 0
    shown = [line for line in verbose.stderr.splitlines() if any(noise in line for noise in STARTUP_NOISE)]
    with open("/proc/cpuinfo") as handle:  # (TensorFlow's own choice: oneDNN on by default on these CPUs)
        flags = set(next(line for line in handle if line.startswith("flags")).split())
    # ... unless TF_ENABLE_ONEDNN_OPTS says otherwise (make test PROFILE=noavx512 turns it off, as such a host does)
    onednn = flags & {"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile"}
    if onednn and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0":
        assert shown, verbose.stderr  # there is something to hide on this host, and -v shows it


def test_a_step_imports_tensorflow_without_jax_and_jax_still_imports_afterwards():
    """TFLite imports JAX where it is installed, for a converter nothing here calls: a step's TensorFlow comes without
    it, and a process that wants JAX (the JAX backend's) still gets it, whole."""
    import subprocess
    import sys

    script = (
        "import sys; from components.cli import configure_logging; configure_logging(); import tensorflow; "
        "print('jax' in sys.modules); import jax.numpy as jnp; print(float(jnp.ones(2).sum()))"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "2.0"]


@pytest.mark.parametrize("failing", [False, True])
def test_a_command_that_exits_at_once_still_joins_its_threads_runs_its_exit_handlers_and_flushes(tmp_path, failing):
    """``exit_at_once`` (the convert command's) skips only the interpreter's teardown of its modules."""
    import subprocess
    import sys

    marks = tmp_path / "marks.txt"
    program = f"""
import atexit, logging, sys, threading, time
from components.cli import UsageError, run_main

def main(argv):
    def late():
        time.sleep(0.3)
        open({str(marks)!r}, "a").write("thread\\n")
    threading.Thread(target=late).start()
    atexit.register(lambda: open({str(marks)!r}, "a").write("atexit\\n"))
    logging.basicConfig(stream=sys.stderr)
    logging.getLogger("x").warning("a log line")
    sys.stdout.write("no newline")
    if {failing}:
        raise UsageError("a usage error")
    return 3

run_main(main, [], at_once=True)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == (2 if failing else 3)
    assert done.stdout == "no newline"
    assert "a log line" in done.stderr and ("error: a usage error" in done.stderr) == failing
    assert marks.read_text() == "thread\natexit\n"
