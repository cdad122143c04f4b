"""The whole DAG under kfp.local's SubprocessRunner, through the CLI a user runs, on the full demo dataset."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from PIL import Image

from components.artifacts.checkpoints import epochs_kept
from tests.components.test_train_jax import jax_env
from tests.conftest import (
    DEMO_ACCURACY_BAR,
    FORMAT_GAP_BOUNDS,
    REPO_ROOT,
    TEXT_SEQUENCE_LENGTH,
    demo_export_agreement_floor,
    run_cli,
    write_reviews,
)

# the demo run, interrupted and resumed, then the side runs: whole DAGs that take longer than the suite's 900 s bound
# a test where a host profile's bfloat16 runs without the instructions for it (make test-profiles, on a host without
# AVX-512: emulated bfloat16 trains the demo in 15+ minutes)
pytestmark = pytest.mark.timeout(2400)
WHOLE_RUN_SECONDS = 1800


def reviews_csv(path) -> str:
    """The text fixtures' reviews as a CSV with its own column names (``review``, ``sentiment``)."""
    import csv

    with open(write_reviews(path.with_suffix(".jsonl"), count=240), encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["review", "sentiment"])
        writer.writerows([row["text"], row["label"]] for row in rows)
    return str(path)


def start_run_local(work_dir, *args: str, env: dict | None = None) -> subprocess.Popen:
    """run-local as a terminal starts it: in its own process group, with Ctrl-C's SIGINT not ignored (a
    non-interactive shell ignores it in background jobs); its output goes to files beside the work dir."""
    out = open(f"{work_dir}.out", "w")  # noqa: SIM115 (read back by finish)
    err = open(f"{work_dir}.err", "w")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run-local", "--work-dir", str(work_dir), *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=err,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def finish(process: subprocess.Popen, work_dir, timeout: int = 900) -> subprocess.CompletedProcess:
    process.wait(timeout=timeout)
    with open(f"{work_dir}.out") as out, open(f"{work_dir}.err") as err:
        return subprocess.CompletedProcess(process.args, process.returncode, out.read(), err.read())


def wait_for_epochs(process: subprocess.Popen, work_dir, epochs: int) -> int:
    """Waits until training has kept ``epochs`` finished epochs in its checkpoints (its backup's count: with
    ``--backup-interval auto`` the epoch log may run ahead of it); returns how many it has."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        checkpoints = glob.glob(f"{work_dir}/resume/*/checkpoints")
        if checkpoints:
            done = epochs_kept(checkpoints[0])
            if done >= epochs:
                return done
        assert process.poll() is None, finish(process, work_dir).stderr[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"training in {work_dir} did not reach epoch {epochs}")


def stop_train_step_once_backed_up(process: subprocess.Popen, work_dir, least: int = 1) -> tuple[int, int]:
    """Stops (SIGSTOP) run-local's train step once its backup keeps ``least`` epochs: its executor process and, where
    run-local's step server runs it, the server's forks (``components.step_server``); returns (the executor's pid,
    the epochs its backup kept). The step is stopped while its backup is read, so that however fast the host trains,
    it is caught mid-way and not after its last epoch."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert process.poll() is None, finish(process, work_dir).stderr[-3000:]
        running = processes_naming(str(work_dir), with_pids=True)
        steps = [
            pid
            for pid, line in running
            if "kfp.dsl.executor_main" in line and "/train/model" in line and not line.startswith("sh ")
        ]
        servers = {pid for pid, line in running if "components.step_server" in line}
        forks = [pid for pid in servers if parent_of(pid) in servers]
        for train in steps:
            try:
                for pid in [train, *forks]:
                    os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue  # it ended: run-local's own end says how, above
            checkpoints = glob.glob(f"{work_dir}/resume/*/checkpoints")
            kept = epochs_kept(checkpoints[0]) if checkpoints else 0
            if kept >= least:
                return train, kept
            for pid in [train, *forks]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"the train step in {work_dir} kept no backup of {least} epochs")


def parent_of(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


@pytest.fixture(scope="module")
def interrupted_demo_run(tmp_path_factory):
    """The demo run as a user may live it: Ctrl-C (SIGINT to the whole process group, as a terminal sends it) once
    training has finished two epochs, then the same command again. Returns (work dir, the interrupted run's summary
    and result, the resumed run's result)."""
    work_dir = tmp_path_factory.mktemp("run") / "local"
    process = start_run_local(work_dir)
    wait_for_epochs(process, work_dir, 2)
    os.killpg(process.pid, signal.SIGINT)
    stopped = finish(process, work_dir, timeout=120)
    with open(work_dir / "summary.json") as handle:
        stopped_summary = json.load(handle)
    resumed = run_cli("pipeline", "run-local", "--work-dir", str(work_dir), timeout=WHOLE_RUN_SECONDS)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]
    return work_dir, stopped_summary, stopped, resumed


@pytest.fixture(scope="module")
def demo_run(interrupted_demo_run):
    """The demo run, interrupted during training and resumed: it must give what an uninterrupted run gives."""
    work_dir, _, _, result = interrupted_demo_run
    with open(work_dir / "summary.json") as handle:
        return work_dir, json.load(handle), result


def test_ctrl_c_marks_the_run_interrupted_and_says_how_to_go_on(interrupted_demo_run):
    work_dir, summary, stopped, _ = interrupted_demo_run
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    last = stopped.stderr.strip().splitlines()[-1]
    said = re.fullmatch(
        r"error: interrupted during train \(after epoch (\d+) of 15(; it resumes after epoch (\d+), its last backup)?\)"
        ": run the same command again to resume it, or add --no-resume to start over",
        last,
    )
    assert said, last
    with open(work_dir / "summary.json") as handle:  # (the resumed run's): it went on where the line said, or from
        resumed_after = json.load(handle)["training"]["resumed_after_epoch"]  # a backup the dying step finished
    assert int(said.group(3) or said.group(1)) <= resumed_after <= int(said.group(1))
    assert "Traceback" not in stopped.stderr + stopped.stdout
    assert (summary["status"], summary["step"]) == ("interrupted", "train")


def test_the_same_command_resumes_the_interrupted_run(interrupted_demo_run):
    """The same run id; convert's output reused from the interrupted attempt; training from its last finished epoch
    to the 15th, or where it stopped early; nothing left to resume afterwards."""
    work_dir, stopped, _, result = interrupted_demo_run
    with open(work_dir / "summary.json") as handle:
        summary = json.load(handle)
    assert summary["run_id"] == stopped["run_id"] and summary["resumed"]["attempt"] == 2
    assert summary["resumed"]["interrupted_during"] == "train"
    assert summary["steps"]["convert"] == "reused" and summary["steps"]["train"] == "ran"
    assert summary["training"]["resumed_after_epoch"] >= 2
    with open(os.path.join(summary["model_dir"], "history.json")) as handle:
        history = json.load(handle)
    last = history["stopped_after_epoch"] or 15  # (where it stopped early, 5 epochs without a better one, if it did)
    assert len(history["history"]["val_accuracy"]) == last and history["resumed_after_epoch"] >= 2
    assert "  convert: cached (done before the interruption" in result.stdout
    assert f"resuming from the checkpoint in {work_dir}/resume/" in result.stdout
    assert f"(resumed after epoch {summary['training']['resumed_after_epoch']})" in result.stdout
    assert not (work_dir / "run-state.json").exists() and not (work_dir / "resume").exists()


def test_demo_run_converts_all_digits_and_reaches_the_accuracy_bar(demo_run):
    work_dir, summary, _ = demo_run
    assert sum(summary["counts"].values()) == 1797
    assert summary["class_names"] == [str(d) for d in range(10)]
    assert summary["quarantined"] == 0
    assert summary["test_accuracy"] >= DEMO_ACCURACY_BAR
    # --image-size auto (the default): the demo trains at the side its digits are written at
    with Image.open(glob.glob(f"{work_dir}/data/digits/0/*.jpg")[0]) as digit:
        side = digit.size[0]
    assert summary["image_size"] == side and f"median shorter side is {side} px" in summary["image_size_auto"]
    # export scored the SavedModel on the digits' own files as well, as a client sends them
    raw = summary["raw_files"]
    # (the TFRecords hold the conversion's re-encoded JPEG of each: a borderline digit may go either way)
    assert raw["num_files"] == summary["counts"]["test"]
    assert abs(raw["test_accuracy"] - raw["tfrecord_test_accuracy"]) <= 0.01
    assert summary["blessed"] is True and summary["reasons"][0].startswith("accuracy ")


def test_summary_points_at_real_artifacts(demo_run):
    work_dir, summary, _ = demo_run
    for key in ("counts", "test_accuracy", "examples_dir", "saved_model_dir", "wall_seconds"):
        assert key in summary
    assert os.path.exists(os.path.join(summary["examples_dir"], "stats.json"))
    assert os.path.exists(os.path.join(summary["saved_model_dir"], "saved_model.pb"))
    with open(summary["metrics_json"]) as handle:
        assert json.load(handle)["accuracy"] == summary["test_accuracy"]
    with open(summary["export_json"]) as handle:
        exported = json.load(handle)
    agreement = exported["parity"]["argmax_agreement"]
    with open(summary["metrics_json"]) as handle:  # the export keeps the decision of the evaluation it was given
        assert exported["blessing"] == json.load(handle)["blessing"] and exported["blessing"]["blessed"]
    assert agreement == summary["export_agreement"]
    assert agreement >= demo_export_agreement_floor(summary["training"]["precision"])
    assert summary["examples_dir"].startswith(str(work_dir))


def test_the_summary_says_what_was_trained_and_how(demo_run):
    _, summary, result = demo_run
    training = summary["training"]
    # the demo's 15 epochs, and auto's learning rate for an image model trained from scratch, as model_config.json
    # recorded them (the DAG's parameter is 0, auto)
    assert (training["model_name"], training["epochs"], training["learning_rate"]) == ("codelab_convnet_bn", 15, 0.001)
    assert training["global_batch_size"] == training["per_replica_batch_size"] * training["replicas"] == 32
    assert training["precision"] in ("float32", "mixed_bfloat16") and training["lr_schedule"] == "constant"
    with open(os.path.join(summary["model_dir"], "history.json")) as handle:
        history = json.load(handle)
    kept = history["kept_index"]  # the epoch of the lowest validation loss, whose weights the model has
    losses = history["history"]["val_loss"]
    assert losses[kept] == min(losses) and training["kept_epoch"] == kept + 1 == history["kept_epoch"]
    # (the kept weights' score once their batch-norm statistics are re-estimated: the model as saved)
    assert training["final_validation_accuracy"] == history["saved_model_validation"]["val_accuracy"]
    assert "model          codelab_convnet_bn, 15 epochs, learning rate 0.001 (constant), batch 32" in result.stdout
    assert f"kept epoch {kept + 1} (the best validation loss): validation accuracy " in result.stdout
    with open(summary["report_html"]) as handle:
        page = handle.read()
    assert "Evaluation of codelab_convnet_bn" in page and summary["model_dir"] in page
    assert summary["status"] == "succeeded"


def test_the_terminal_shows_progress_and_results_and_the_run_log_everything(interrupted_demo_run):
    """Without -v: each step starting and ending, the steps' own progress lines, warnings, the summary; KFP's
    executor dumps and the frameworks' start-up lines are only in run.log."""
    work_dir, _, stopped, result = interrupted_demo_run
    shown = result.stdout + result.stderr
    assert len(shown.splitlines()) < 100, shown[-3000:]  # (an epoch's line each among them)
    for step in ("fingerprint", "train", "evaluate", "export"):
        assert f"  {step}: running" in shown and f"  {step}: success (" in shown
    assert "  convert: success (" in stopped.stdout and "converted 1797 images" in stopped.stdout
    # what finished before the interruption is reused, the data checks too
    assert "  check-data: success (" in stopped.stdout and "  check-data: cached (" in result.stdout
    # training's progress: each epoch's line as it ends, with the time left
    assert re.search(
        r"\n    epoch 1 of 15: loss \d\.\d{4}, accuracy \d\.\d{4}, val_loss \d+\.\d{4}, "
        r"val_accuracy \d\.\d{4} \(\d+\.\ds; about \d+s left\)\n",
        stopped.stdout,
    ), stopped.stdout[-3000:]
    with open(work_dir / "summary.json") as handle:
        model_dir = json.load(handle)["model_dir"]
    with open(os.path.join(model_dir, "history.json")) as handle:
        last = json.load(handle)["stopped_after_epoch"] or 15  # (it may stop early)
    assert re.search(rf"\n    epoch {last} of 15: loss .*\(\d+\.\ds(; about \d+s left)?\)\n", shown), shown[-3000:]
    assert "test accuracy 0." in shown
    assert "Got executor_input" not in shown and "non-Python base image" not in shown
    log = (work_dir / "run.log").read_text()
    assert "Got executor_input" in log and f"the steps' full output: {work_dir / 'run.log'}" in shown
    # the TensorFlow steps (train, evaluate, export) forked from run-local's step server, TensorFlow imported once
    assert log.count("step server: this step runs in a copy of the server") == 3, log[-3000:]
    assert "starts cold" not in log


def test_run_prints_a_readable_summary(demo_run):
    _, summary, result = demo_run
    assert "convert -> check data -> train -> evaluate -> export: finished" in result.stdout
    assert "registry       skipped (local run; --registry DIR keeps each blessed export" in result.stdout
    assert f"{summary['test_accuracy']:.4f}" in result.stdout


def test_exported_model_classifies_a_demo_image(demo_run):
    import tensorflow as tf

    work_dir, summary, _ = demo_run
    serving = tf.saved_model.load(summary["saved_model_dir"]).signatures["serving_default"]
    digits = work_dir / "data" / "digits"
    batch = tf.constant([(digits / d / sorted(os.listdir(digits / d))[0]).read_bytes() for d in ("3", "7")])
    labels = [label.decode() for label in serving(image_bytes=batch)["label"].numpy()]
    assert labels == ["3", "7"]


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--source", "data path {path} does not exist: pass a folder of class subfolders of images"),
        (
            "--baseline",
            "baseline {path} does not exist: pass the last blessed model (a train or export step output, "
            "or the SavedModel the Model Registry holds) or leave --baseline out to judge on --min-accuracy "
            "alone",
        ),
    ],
)
def test_a_path_that_does_not_exist_is_one_line_exit_2_and_writes_nothing(tmp_path, flag, message):
    work_dir, missing = tmp_path / "work", tmp_path / "missing"
    result = run_cli("pipeline", "run-local", flag, str(missing), "--work-dir", str(work_dir))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: " + message.format(path=missing)]
    assert not work_dir.exists()


def test_tflite_exports_of_the_demo_model_are_small_and_accurate(demo_run):
    _, summary, result = demo_run
    formats = summary["formats"]
    assert sorted(formats) == ["saved_model", "tflite_float", "tflite_int8"]
    with open(summary["export_json"]) as handle:
        report = json.load(handle)
    assert report["int8_size_vs_float_weights"] <= 0.30  # the goal: int8 at most 30% of the float weights
    for name, gap in FORMAT_GAP_BOUNDS.items():
        assert formats[name]["test_accuracy"] >= formats["saved_model"]["test_accuracy"] - gap, name
    assert formats["saved_model"]["test_accuracy"] >= DEMO_ACCURACY_BAR
    assert "tflite_int8" in result.stdout


def test_the_report_of_the_demo_run_shows_its_misclassified_digits(demo_run):
    _, summary, result = demo_run
    with open(summary["report_html"], encoding="utf-8") as handle:
        text = handle.read()
    with open(summary["metrics_json"]) as handle:
        matrix = json.load(handle)["confusion_matrix"]
    wrong = sum(sum(row) - row[i] for i, row in enumerate(matrix))
    assert text.count('alt="misclassified"') == min(wrong, 24)
    with open(summary["metrics_json"]) as handle:
        listed = json.load(handle)["misclassified"]
    assert len(listed) == min(wrong, 24)
    for entry in listed:  # each names the file it came from, under its true class's folder
        assert os.path.isfile(entry["source"]) and f"/digits/{entry['label']}/" in entry["source"]
        assert f"<span class=source>{entry['source']}</span>" in text
    assert text.count("data:image/png;base64,") == 1 and "Blessed" in text
    assert summary["report_html"] in result.stdout
    # the export's copy of the report, led by the figure clients get: the one the summary leads with
    assert os.path.dirname(summary["report_html"]) == os.path.dirname(summary["export_json"])
    served = summary["served"]
    lead = f"Served model: test accuracy {served['accuracy']:.4f}: the SavedModel on the {served['examples']} test"
    assert text.index(lead) < text.index('class="verdict"') and text.index(lead) < text.index("<table")
    with open(os.path.join(os.path.dirname(summary["metrics_json"]), "report.html"), encoding="utf-8") as handle:
        assert "Served model" not in handle.read()  # evaluate's own, written before the export measured it


@pytest.fixture(scope="module")
def side_runs(demo_run, tmp_path_factory):
    """Four more whole-DAG runs, side by side (their steps mostly start processes and import frameworks): a weak
    model judged against the demo run's export, the train step on JAX over two virtual CPU devices, a text source
    (a CSV of reviews, ``--modality text``) into a folder registry, and a run stopped by a SIGTERM to run-local alone
    during training ("term"). Returns {name: (work dir, summary, result)}."""
    _, blessed, _ = demo_run
    root = tmp_path_factory.mktemp("side")
    baseline = os.path.dirname(blessed["export_json"])
    reviews = reviews_csv(root / "reviews.csv")
    runs = {
        "weak": (
            [
                "--demo-per-class",
                "20",
                "--epochs",
                "1",
                "--learning-rate",
                "0.00001",
                "--min-accuracy",
                "0.9",
                "--baseline",
                baseline,
            ],
            {},
        ),  # (one epoch that barely moves the weights: a weak model)
        "jax": (
            [
                "--demo-per-class",
                "40",
                "--image-size",
                "16",
                "--epochs",
                "15",
                "--backend",
                "jax",
                "--precision",
                "float32",  # the quality asserted is float32's, on every host
                "--model",
                os.path.join(REPO_ROOT, "examples", "models", "codelab_convnet.py:build"),
                "--formats",
                "saved_model",  # (the TFLite files: the demo run's)
            ],
            jax_env(XLA_FLAGS="--xla_force_host_platform_device_count=2"),
        ),
        "text": (
            [
                "--source",
                reviews,
                "--modality",
                "text",
                "--text-column",
                "review",
                "--label-column",
                "sentiment",
                "--sequence-length",
                str(TEXT_SEQUENCE_LENGTH),
                "--vocabulary-size",
                "64",
                "--epochs",
                "6",
                "--batch-size",
                "16",
                "--min-accuracy",
                "0.8",
                "--registry",
                str(root / "text-registry"),
            ],
            {},
        ),
    }
    started = {
        name: subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run-local", "--work-dir", str(root / name), *args],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (args, env) in runs.items()
    }
    terminated = root / "term"
    term = start_run_local(terminated, "--demo-per-class", "10", "--epochs", "500")
    wait_for_epochs(term, terminated, 1)
    term.send_signal(signal.SIGTERM)
    stopped = finish(term, terminated, timeout=120)
    with open(terminated / "summary.json") as handle:
        results = {"term": (terminated, json.load(handle), stopped)}
    # the train step alone killed (out of memory, say) once its first backup is kept; the same command again, and
    # this time run-local alone killed, its train step left running; the same command (refused while that step
    # runs), and once it is gone, again (a rate too small to learn: the run ends not blessed, without an export)
    crashed = root / "crash"
    again = ("--demo-per-class", "10", "--epochs", "40", "--image-size", "16", "--learning-rate", "0.000001")
    crash = start_run_local(crashed, *again)
    train, kept = stop_train_step_once_backed_up(crash, crashed)
    os.kill(train, signal.SIGKILL)
    failed = finish(crash, crashed, timeout=120)
    second = start_run_local(crashed, *again)
    orphan, kept_again = stop_train_step_once_backed_up(second, crashed, least=kept + 1)
    os.kill(second.pid, signal.SIGKILL)  # run-local alone: its step goes on (here stopped)
    second.wait(timeout=60)
    refused = run_cli("pipeline", "run-local", "--work-dir", str(crashed), *again, timeout=300)
    os.kill(orphan, signal.SIGKILL)
    with open(crashed / "run-state.json") as handle:  # the step folders the killed attempts left
        left = [os.path.join(run, step) for run in json.load(handle)["artifact_dirs"] for step in os.listdir(run)]
    resumed = run_cli("pipeline", "run-local", "--work-dir", str(crashed), *again, timeout=WHOLE_RUN_SECONDS)
    with open(crashed / "summary.json") as handle:
        results["crash"] = (crashed, json.load(handle), (failed, refused, resumed, orphan, kept_again, left))
    for name, process in started.items():
        stdout, stderr = process.communicate(timeout=WHOLE_RUN_SECONDS)
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        assert result.returncode == 0, name + ": " + stdout[-3000:] + stderr[-5000:]
        with open(root / name / "summary.json") as handle:
            results[name] = (root / name, json.load(handle), result)
    return results


def test_a_run_that_is_not_blessed_succeeds_says_why_and_exports_nothing(demo_run, side_runs):
    """The gate (dsl.If on evaluate's blessing) under kfp.local: a weak model against the demo run's export as the
    baseline takes the not-blessed branch; export never runs, and the run still succeeds."""
    _, blessed, _ = demo_run
    baseline = os.path.dirname(blessed["export_json"])
    _, summary, result = side_runs["weak"]
    assert summary["blessed"] is False
    reasons = " ".join(summary["reasons"])
    assert "is below the minimum 0.9000" in reasons and "below the baseline's" in reasons
    assert summary["export_json"] is None and summary["formats"] == {} and summary["saved_model_dir"] is None
    with open(summary["metrics_json"]) as handle:
        assert json.load(handle)["blessing"]["baseline"] == baseline
    run_dir = os.path.dirname(os.path.dirname(summary["examples_dir"]))
    assert sorted(os.listdir(run_dir)) == ["check-data", "convert", "evaluate", "fingerprint", "not-blessed", "train"]
    assert "    WARNING: NOT blessed: accuracy" in result.stdout  # the step's own word, on the terminal
    # an export step's output as the baseline carries no statistics of its data (a registered version does): the
    # data checks say so, and compare nothing
    assert summary["data_checks"]["note"].startswith(f"the baseline {baseline} holds no data_stats.json")
    assert "not blessed, so no export" in result.stdout and "blessed        NO: " in result.stdout
    evaluation = os.path.dirname(summary["metrics_json"])  # the exported model gets the report, led by what it serves
    anyway = (
        f"python -m components.export --model-dir {summary['model_dir']} --examples {summary['examples_dir']} "
        f"--output {os.path.dirname(evaluation)}/exported-anyway --evaluation {evaluation}"
    )
    assert "To export this model all the same: " + anyway in result.stdout  # the step's log and the summary: one
    assert f"  export anyway  {anyway}\n" in result.stdout  # command


def test_a_sigterm_to_run_local_stops_its_steps_and_marks_the_run_interrupted(side_runs):
    """A ``kill``, a CI job's timeout or ``docker stop`` signals run-local alone: its steps must not train on as
    orphans, and the run is left as Ctrl-C leaves it, ready to resume."""
    work_dir, summary, result = side_runs["term"]
    assert result.returncode == 130, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: interrupted during train (after epoch ")
    assert (summary["status"], summary["step"]) == ("interrupted", "train")
    with open(work_dir / "run-state.json") as handle:
        assert json.load(handle)["status"] == "interrupted"
    deadline = time.monotonic() + 30
    while (left := processes_naming(str(work_dir))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, left


def processes_naming(text: str, with_pids: bool = False) -> list:
    """The command lines of the processes whose arguments contain ``text`` (a step names its work dir); with
    ``with_pids``, (pid, whole command line) each."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                line = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append((int(pid), line) if with_pids else line[:200])
    return found


def test_a_train_step_that_dies_is_resumed_by_the_same_command_from_its_last_epoch(side_runs):
    """A step killed outright (the kernel's out-of-memory killer, a lost machine): run-local fails in one line that
    says how to go on. A run-local killed outright leaves its running step behind: the same command is refused in
    one line naming it while it runs (two trainings into one backup), and once it is gone, resumes the run: its
    conversion reused, training after the epochs its backup kept, to the end."""
    crashed, summary, (failed, refused, resumed, orphan, kept_again, left) = side_runs["crash"]
    assert failed.returncode == 1, failed.stderr[-3000:]
    (line,) = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: step train failed: ") and line.endswith(
        ": run the same command again to resume it from there, or add --no-resume to start over"
    )
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: --work-dir {crashed}: the train step of the run-local that was killed there is still running "
        f"(process {orphan}); wait for it to end, or end it (kill {orphan}), then run the same command again"
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert summary["status"] == "succeeded" and summary["resumed"]["interrupted_during"] == "train"
    assert summary["steps"]["convert"] == "reused" and summary["steps"]["train"] == "ran"
    assert kept_again >= 2 and summary["training"]["resumed_after_epoch"] == kept_again
    assert summary["training"]["epochs"] == 40
    assert "interrupted during train" in resumed.stdout + resumed.stderr
    # the killed attempts' train folders are gone; their conversion, which the resumed run reused, is kept
    gone = [folder for folder in left if not os.path.exists(folder)]
    assert [os.path.basename(folder) for folder in gone].count("train") == 2, left
    assert not any(folder in json.dumps(summary) for folder in gone)
    assert "convert" in [os.path.basename(folder) for folder in left if os.path.exists(folder)], left
    assert f"removed {len(gone)} step folders (" in resumed.stdout + resumed.stderr


def test_the_whole_dag_trains_a_model_of_ones_own_on_jax_over_two_devices_and_exports_through_tensorflow(side_runs):
    """The TPU path through the whole DAG under kfp.local, with a model of one's own (the example file, as a user
    writes it): the train step on Keras/JAX with DataParallel over two virtual CPU devices, then evaluate and export
    on TensorFlow (the SavedModel alone: ``--formats``), with the cross-backend parity in the summary; the file
    pinned in the work dir under its digest, and a copy of it beside the export."""
    work_dir, summary, result = side_runs["jax"]
    training = summary["training"]
    assert (training["backend"], training["strategy"], training["replicas"]) == ("jax", "DataParallel", 2)
    assert training["model_name"] == "codelab_convnet.py:build" and training["hparams"] == {
        "batch_norm": True,
        "width": 1.0,
    }
    digest = training["model"]["sha256"]
    pinned = os.path.join(work_dir, "models", digest[:16], "codelab_convnet.py")
    assert summary["parameters"]["model_name"] == f"{pinned}:build"
    with (
        open(pinned, "rb") as copy,
        open(os.path.join(REPO_ROOT, "examples", "models", "codelab_convnet.py"), "rb") as original,
    ):
        assert copy.read() == original.read()
    exported = os.path.dirname(summary["export_json"])
    assert os.path.isfile(os.path.join(exported, "model_source", "codelab_convnet.py"))
    # --formats saved_model: the DAG's export step built no TFLite file, and the summary lists none
    assert not [name for name in os.listdir(exported) if name.endswith(".tflite")]
    assert list(summary["formats"]) == ["saved_model"] and "tflite_float" not in result.stdout
    assert (
        f"model          codelab_convnet.py:build (sha256 {digest[:16]}), batch_norm=True, width=1.0" in result.stdout
    )
    assert summary["parameters"]["backend"] == "jax"
    # blessed: beyond chance and every class recalled (41 test digits at 16x16: 0.78 to 0.9 on the hosts'
    # instruction sets, make test PROFILE=...)
    assert summary["blessed"] is True and summary["test_accuracy"] >= 0.75
    crossed = summary["backend_parity"]
    assert (crossed["trained_backend"], crossed["export_backend"]) == ("jax", "tensorflow")
    assert crossed["num_examples"] > 0 and crossed["argmax_agreement"] >= 0.97
    assert "training       jax, DataParallel over 2 cpu device(s)" in result.stdout
    assert f"{crossed['argmax_agreement']:.4f} with jax's own predictions" in result.stdout


def test_the_same_dag_classifies_texts_from_a_csv_into_the_registry(side_runs):
    """A text source through the whole DAG (issue 15): ``--modality text`` reads the CSV's columns, the default
    model is ngrams, evaluate quotes misclassified texts, export serves raw strings, and the blessed
    export is the registry's first version."""
    import tensorflow as tf

    work_dir, summary, result = side_runs["text"]
    assert summary["blessed"] is True and summary["test_accuracy"] >= 0.8, result.stdout[-3000:]
    assert summary["parameters"]["modality"] == "text"
    assert summary["training"]["model_name"] == "ngrams"  # --model auto
    with open(os.path.join(summary["examples_dir"], "stats.json")) as handle:
        stats = json.load(handle)
    assert stats["modality"] == "text" and stats["sequence_length"] == TEXT_SEQUENCE_LENGTH
    assert sum(stats["counts"].values()) == 240
    with open(summary["report_html"], encoding="utf-8") as handle:
        page = handle.read()
    assert "Misclassified test texts" in page
    assert "test texts as clients send them (raw strings)" in page.split('class="verdict"')[0]
    registry = os.path.join(os.path.dirname(work_dir), "text-registry")
    assert summary["registry"]["action"] == "registered" and summary["registry"]["version"] == 1
    serving = tf.saved_model.load(os.path.join(registry, "1", "saved_model")).signatures["serving_default"]
    labels = serving(text=tf.constant(["Superb and lovely, a GREAT film!", "Awful, dull and boring."]))["label"]
    assert [label.decode() for label in labels.numpy()] == ["pos", "neg"]
    with open(os.path.join(registry, "1", "export.json")) as handle:
        assert json.load(handle)["formats"]["tflite_int8"]["test_accuracy"] >= 0.8
    texts = summary["raw_texts"]  # what clients get, on the test texts as they send them
    assert texts["num_texts"] == stats["counts"]["test"] and texts["test_accuracy"] >= 0.8
    assert re.search(  # the summary leads with what the served model gives
        rf"test accuracy +{texts['test_accuracy']:.4f}: the SavedModel on the {texts['num_texts']} test texts as "
        "clients send them",
        result.stdout,
    ), result.stdout
