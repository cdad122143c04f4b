"""Deciding whether run-local continues an interrupted run, and finding the steps to stop (the whole-DAG runs that are
interrupted and resumed are in test_local_run.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time

import pytest

from pipeline.local.resume import (
    INTERRUPTED,
    RUNNING,
    Decision,
    RunState,
    begin,
    decide,
    descendants,
    finished,
    interrupted,
    read_state,
    remove_leftovers,
    run_key,
)

KEY = run_key({"source": "/data", "epochs": 3}, "f1", "", False)


def state(**changes) -> RunState:
    values = {
        "run_id": "r1",
        "run_name": "tpu-image-classifier-1",
        "key": KEY,
        "started": "2026-11-22T08:00:00",
        "status": INTERRUPTED,
        "pid": 123,
        "step": "train",
    }
    return RunState(**{**values, **changes})


def test_the_key_changes_with_any_parameter_the_data_or_the_settings():
    keys = {
        KEY,
        run_key({"source": "/data", "epochs": 4}, "f1", "", False),
        run_key({"source": "/data", "epochs": 3}, "f2", "", False),
        run_key({"source": "/data", "epochs": 3}, "f1", "/registry", False),
        run_key({"source": "/data", "epochs": 3}, "f1", "", True),
    }
    assert len(keys) == 5
    assert run_key({"epochs": 3, "source": "/data"}, "f1", "", False) == KEY  # the order of the flags does not count


def test_an_interrupted_run_with_the_same_key_is_resumed_unless_told_not_to():
    assert decide(None, KEY, resume=True, previous_alive=False).action == "start"
    resumed = decide(state(), KEY, resume=True, previous_alive=False)
    assert resumed == Decision(
        "resume", "resuming tpu-image-classifier-1, interrupted during train (started 2026-11-22T08:00:00)"
    )
    # stopped before its first step began: no step to name
    assert decide(state(step=""), KEY, resume=True, previous_alive=False).why == (
        "resuming tpu-image-classifier-1, interrupted (started 2026-11-22T08:00:00)"
    )
    assert decide(state(), KEY, resume=False, previous_alive=False) == Decision(
        "replace", "--no-resume: starting over instead of continuing tpu-image-classifier-1"
    )
    other = decide(state(), run_key({}, "f1", "", False), resume=True, previous_alive=False)
    assert other == Decision("replace", "the unfinished run tpu-image-classifier-1 had other parameters or data")


def test_a_run_whose_process_died_without_a_word_is_resumed_and_a_live_one_refused():
    """A run-local killed outright (SIGKILL, a closed laptop) left its state 'running': its process is gone, so the
    run is resumed. One whose process is alive is running now: a second run-local in the same folder is refused."""
    assert decide(state(status=RUNNING), KEY, resume=True, previous_alive=False).action == "resume"
    refused = decide(state(status=RUNNING), KEY, resume=True, previous_alive=True)
    assert refused == Decision("refuse", "run-local (process 123) has been running there since 2026-11-22T08:00:00")
    assert decide(state(status=INTERRUPTED), KEY, resume=True, previous_alive=True).action == "resume"


def test_begin_keeps_the_run_id_across_attempts_and_finished_leaves_nothing(tmp_path):
    work_dir = str(tmp_path)
    first, previous = begin(work_dir, KEY, "run-a", resume=True)
    assert previous is None and read_state(work_dir) == first
    (tmp_path / "resume" / first.run_id / "checkpoints").mkdir(parents=True)
    interrupted(work_dir, first, "train", [str(tmp_path / "artifacts" / "attempt-1")])
    second, previous = begin(work_dir, KEY, "run-b", resume=True)
    assert (second.run_id, second.run_name, second.attempts) == (first.run_id, "run-a", 2)
    assert previous.step == "train" and second.artifact_dirs == (str(tmp_path / "artifacts" / "attempt-1"),)
    finished(work_dir, second)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_killed_attempts_lose_the_step_folders_no_cache_entry_reuses(tmp_path):
    """What kfp.local's own cache (its writer, here) reuses stays, unicode paths too; the rest of a killed attempt's
    run folder goes, and a run folder left empty with it."""
    from kfp import dsl
    from kfp.local.cache import LocalCache

    work_dir = tmp_path / "wörk dir"
    attempts = [work_dir / "artifacts" / name for name in ("run-1", "run-2")]
    for attempt, steps in zip(attempts, (("convert", "train", "check-data"), ("train",)), strict=True):
        for step in steps:
            (attempt / step / "model").mkdir(parents=True)
            (attempt / step / "model" / "weights").write_bytes(b"w" * 1000)
    cache = tmp_path / "resume" / "r1" / "cache"
    for number, step in enumerate(("convert", "check-data")):
        artifact = dsl.Artifact(uri=str(attempts[0] / step / "model"), name="model")
        LocalCache(str(cache)).put(f"key{number}", {"model": artifact, "count": 3})
    removed = remove_leftovers(str(work_dir), [str(attempt) for attempt in attempts], [str(cache)])
    assert sorted(removed) == [str(attempts[0] / "train"), str(attempts[1] / "train")]
    assert sorted(p.name for p in attempts[0].iterdir()) == ["check-data", "convert"]
    assert not attempts[1].exists()
    left = [str(attempts[0] / name) for name in ("check-data", "convert")]
    assert remove_leftovers(str(work_dir), [str(attempts[0])], []) == left


@pytest.mark.parametrize("step", ["train", "export"])
def test_a_resumed_run_says_training_goes_on_only_when_it_stopped_in_training(tmp_path, caplog, step):
    work_dir = str(tmp_path)
    first, _ = begin(work_dir, KEY, "run-a", resume=True)
    interrupted(work_dir, first, step, [])
    caplog.set_level("INFO", logger="pipeline.local.resume")
    begin(work_dir, KEY, "run-a", resume=True)
    goes_on = " and training goes on from its last backup" if step == "train" else ""
    assert [r.getMessage() for r in caplog.records if r.name == "pipeline.local.resume"] == [
        f"resuming run-a, interrupted during {step} (started {first.started}): its finished steps are reused"
        f"{goes_on} (--no-resume starts over)"
    ]


def test_another_key_discards_the_interrupted_runs_checkpoints(tmp_path):
    work_dir = str(tmp_path)
    first, _ = begin(work_dir, KEY, "run-a", resume=True)
    (tmp_path / "resume" / first.run_id / "checkpoints").mkdir(parents=True)
    interrupted(work_dir, first, "train", [])
    second, previous = begin(work_dir, run_key({}, "f9", "", False), "run-b", resume=True)
    assert previous is None and second.run_id != first.run_id and second.attempts == 1
    assert not (tmp_path / "resume" / first.run_id).exists()


def test_a_live_run_in_the_work_dir_is_a_one_line_usage_error(tmp_path):
    from components.cli import UsageError
    from pipeline.local.resume import write_state

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_state(str(tmp_path), state(status=RUNNING, pid=sleeper.pid))
        with pytest.raises(
            UsageError,
            match=rf"--work-dir {tmp_path}: run-local \(process {sleeper.pid}\) has been "
            r"running there since .*pass another --work-dir",
        ):
            begin(str(tmp_path), KEY, "run-b", resume=True)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_that_took_over_the_number_of_the_run_is_not_the_run(tmp_path):
    """After a restart the number of the interrupted run-local may belong to another process: one that started at
    another time than the run's is not it, and the run resumes instead of being refused as still running."""
    import psutil

    from components.cli import UsageError
    from pipeline.local.resume import write_state

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        created = psutil.Process(other.pid).create_time()
        # a run that never got to record its end (killed outright, the machine restarted): still "running"
        write_state(str(tmp_path), state(status=RUNNING, pid=other.pid, pid_created=created - 3600))
        resumed, previous = begin(str(tmp_path), KEY, "run-b", resume=True)
        assert previous is not None and resumed.attempts == 2 and resumed.pid == os.getpid()
        assert resumed.pid_created == psutil.Process().create_time()
        write_state(str(tmp_path), state(status=RUNNING, pid=other.pid, pid_created=created))  # that very process
        with pytest.raises(UsageError, match=rf"run-local \(process {other.pid}\) has been running there"):
            begin(str(tmp_path), KEY, "run-c", resume=True)
    finally:
        other.kill()
        other.wait()


def test_descendants_finds_the_steps_under_their_shells():
    """kfp.local starts each step as ``sh -ec ...`` which starts Python: both must be found to be stopped."""
    shell = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(60)' & wait"])
    try:
        for _ in range(100):
            found = descendants(shell.pid)
            if found:
                break
            time.sleep(0.05)
        assert len(found) == 1
        mine = descendants(os.getpid())
        assert shell.pid in mine and found[0] in mine
    finally:
        for pid in [*descendants(shell.pid), shell.pid]:
            os.kill(pid, 9)
        shell.wait()


def test_an_interrupted_run_starts_over_when_an_image_was_added_to_its_source(tmp_path):
    """The key run-local resumes by is built from the data too: the same flags on a source with one more image are
    another run, and never resume on the examples converted before the image was added."""
    from PIL import Image

    from pipeline.local import LocalRunConfig, run_identity
    from tests.conftest import write_image_folder

    source, work_dir = write_image_folder(str(tmp_path / "photos"), per_class=3), str(tmp_path / "work")
    config = LocalRunConfig(work_dir=work_dir, source=source, epochs=2)
    first, _ = begin(work_dir, run_identity(config).key, "run-a", resume=True)
    interrupted(work_dir, first, "train", [])
    assert begin(work_dir, run_identity(config).key, "run-a", resume=True)[0].run_id == first.run_id  # unchanged
    interrupted(work_dir, first, "train", [])
    classes = sorted(os.listdir(source))
    Image.new("RGB", (40, 30), (10, 200, 10)).save(os.path.join(source, classes[0], "added.jpg"))
    second, previous = begin(work_dir, run_identity(config).key, "run-b", resume=True)
    assert previous is None and second.run_id != first.run_id


def test_the_run_identity_names_each_flag_that_makes_another_run(tmp_path):
    """The DAG parameters run-local keys a run by, written out by hand: auto image size is 0, the epochs are keyed when
    given (the demo's 15 when not), Beam's options and the registry (as model_root) when given; each makes another
    key, and the same flags give the same key."""
    from pipeline.local import LocalRunConfig, run_identity
    from tests.conftest import write_image_folder

    source = write_image_folder(str(tmp_path / "photos"), per_class=2)
    work_dir, registry = str(tmp_path / "work"), str(tmp_path / "registry")
    plain = run_identity(LocalRunConfig(work_dir=work_dir, source=source))
    assert plain.source == source and plain.registry == ""
    assert plain.parameters == {"source": source, "image_size": 0}
    demo = run_identity(LocalRunConfig(work_dir=work_dir, demo_per_class=1))
    assert demo.parameters == {"source": os.path.join(work_dir, "data", "digits"), "image_size": 0, "epochs": 15}
    flagged = run_identity(
        LocalRunConfig(
            work_dir=work_dir,
            source=source,
            image_size=24,
            epochs=3,
            beam_args=("--direct_num_workers=1",),
            registry=registry,
            parameters={"model_name": "squeezenet"},
        )
    )
    assert flagged.registry == registry
    assert flagged.parameters == {
        "source": source,
        "image_size": 24,
        "epochs": 3,
        "beam_args": ["--direct_num_workers=1"],
        "model_root": registry,
        "model_name": "squeezenet",
    }
    assert flagged.fingerprint == plain.fingerprint and len(plain.fingerprint) == 64
    changes = (
        {},
        {"image_size": 24},
        {"epochs": 3},
        {"beam_args": ("--direct_num_workers=1",)},
        {"registry": registry},
        {"cache": True},
        {"parameters": {"model_name": "squeezenet"}},
    )
    keys = {run_identity(LocalRunConfig(work_dir=work_dir, source=source, **change)).key for change in changes}
    assert len(keys) == 7
    assert run_identity(LocalRunConfig(work_dir=work_dir, source=source)).key == plain.key


def test_the_demo_trains_a_pretrained_backbone_at_the_least_it_takes_and_the_rest_at_the_digits_own_size(tmp_path):
    """Auto (0) converts the digits at their own side, which a pretrained backbone refuses: with one, the demo is
    converted at the 32 px MobileNet takes, as a user would have to ask for; a size given stays as given."""
    import keras
    from PIL import Image

    from pipeline.local import LocalRunConfig, run_identity

    work_dir = str(tmp_path / "local")

    def size(**config) -> int:
        return run_identity(LocalRunConfig(work_dir=work_dir, demo_per_class=1, **config)).parameters["image_size"]

    backbone = {"parameters": {"model_name": "mobilenet_v3_small"}}
    assert size() == size(parameters={"model_name": "squeezenet"}) == 0
    with Image.open(os.path.join(work_dir, "data", "digits", "0", os.listdir(f"{work_dir}/data/digits/0")[0])) as digit:
        assert digit.size[0] < 32  # the digits' own size is too small for the backbone
    assert size(**backbone) == 32 and size(image_size=48, **backbone) == 48
    with pytest.raises(ValueError):  # (what Keras says of a MobileNet input under 32 px)
        keras.applications.MobileNetV3Small(input_shape=(digit.size[0], digit.size[0], 3), weights=None)


@pytest.mark.parametrize("verbose", [False, True])
def test_a_run_killed_outright_is_resumed_knowing_its_step_and_reusing_its_outputs(tmp_path, monkeypatch, verbose):
    """SIGKILL (or a lost machine) gives run-local no chance to say what it was doing: as each step starts and ends,
    it writes down the step it is in and its attempt's output folders, so that the next attempt says "interrupted
    during train" and counts the killed attempt's steps as reused, not cached. The run's own ``run_steps``, with
    kfp.local's DAG run stood in by its log lines (-v shows every line; the steps are followed all the same)."""
    import pipeline.local.run as local_run
    from pipeline.local.summary import step_outcome

    work_dir = str(tmp_path / "work")
    pipeline_root = os.path.join(work_dir, "artifacts")
    os.makedirs(os.path.join(pipeline_root, "an-earlier-run"))
    first, _ = begin(work_dir, KEY, "run-1", resume=True)
    attempt = os.path.join(pipeline_root, "tpu-image-classifier-1")

    def dag_until_killed(*_):
        os.makedirs(attempt)  # kfp.local's folder of this run, then its log lines
        print("12:00:00.1 - INFO - Executing task \x1b[96m'convert'\x1b[0m\nnoise from a step")
        print("12:00:09.2 - INFO - Task \x1b[96m'convert'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m")
        print("12:00:09.3 - INFO - Executing task 'train'")
        with open(os.path.join(work_dir, "run-state.json")) as handle:
            return json.load(handle)  # as the kill found it

    monkeypatch.setattr(local_run, "run_dag", dag_until_killed)
    run = local_run.LocalRun(
        work_dir,
        "/data",
        "",
        {},
        pipeline_root,
        first,
        None,
        {},
        "",
        "",
        {},
        os.path.join(work_dir, "summary.json"),
        {"an-earlier-run"},
    )
    with contextlib.redirect_stdout(io.StringIO()):
        recorded = local_run.run_steps(run, verbose)
    assert (recorded["status"], recorded["step"], recorded["artifact_dirs"]) == (RUNNING, "train", [attempt])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # killed: its state says running, its process is gone
    dead.wait()
    with open(os.path.join(work_dir, "run-state.json"), "w") as handle:
        json.dump({**recorded, "pid": dead.pid}, handle)
    second, previous = begin(work_dir, KEY, "run-2", resume=True)
    assert previous is not None and previous.step == "train"
    assert second.run_id == first.run_id and second.artifact_dirs == (attempt,)
    later = os.path.join(pipeline_root, "tpu-image-classifier-2")
    assert step_outcome(os.path.join(attempt, "convert", "examples"), later, second.artifact_dirs) == "reused"
