"""`make images` and Cloud Build build the same Dockerfiles with the same arguments (the pipeline image before the
trainers built on it), and push only when asked: checked
with a stand-in `docker` that records its calls (the real builds are `make test-images`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO_ROOT

DOCKERFILES = sorted(
    name
    for name in os.listdir(os.path.join(REPO_ROOT, "containers"))
    if os.path.isfile(os.path.join(REPO_ROOT, "containers", name, "Dockerfile"))
)


@pytest.fixture
def fake_docker(tmp_path):
    """A `docker` on PATH that answers `info` and records every other call, one line each."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f'#!/bin/sh\n[ "$1" = info ] && exit 0\necho "$@" >> {calls}\n')
    (bin_dir / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def recorded() -> list[str]:
        return calls.read_text().splitlines() if calls.exists() else []

    return env, recorded


def make_images(env, *variables: str) -> None:
    result = subprocess.run(
        ["make", "-s", "images", "REGISTRY=reg.example/ml", "TAG=t1", *variables],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def cloud_build(env, dockerfile: str, image: str, base: str) -> None:
    """What Cloud Build runs for containers/cloudbuild.yaml: its substitutions, then each step's bash command."""
    with open(os.path.join(REPO_ROOT, "containers", "cloudbuild.yaml")) as handle:
        config = yaml.safe_load(handle)
    values = {**config.get("substitutions", {}), "_DOCKERFILE": dockerfile, "_IMAGE": image, "_BASE_IMAGE": base}

    def substitute(text: str) -> str:
        for name, value in values.items():
            text = text.replace("${" + name + "}", value)
        return text.replace("$$", "$")

    for step in config["steps"]:
        step_env = dict(item.split("=", 1) for item in map(substitute, step.get("env", [])))
        command = [substitute(arg) for arg in step["args"]]
        assert step["entrypoint"] == "bash" and command[0] == "-c"
        subprocess.run(["bash", "-c", command[1]], cwd=REPO_ROOT, env={**env, **step_env}, check=True)
    assert config["images"] == ["${_IMAGE}"]  # Cloud Build pushes what it built


def base_of(name: str, python_base: str, beam_base: str) -> str:
    """The base image each build is given: the TPU trainer is the pipeline image of the same registry and tag, plus
    its extra; the GPU trainer is built on Python, as the pipeline image (another TensorFlow build)."""
    if name == "train-tpu":
        return "reg.example/ml/pipeline:t1"
    return beam_base if name == "beam-worker" else python_base


@pytest.mark.parametrize("bases", [("", ""), ("mirror.example/python:3.11", "mirror.example/beam:2.77.0")])
def test_make_images_and_cloud_build_give_docker_the_same_build(fake_docker, bases):
    env, recorded = fake_docker
    python_base, beam_base = bases
    make_images(env, f"PYTHON_BASE={python_base}", f"BEAM_BASE={beam_base}")
    by_make = [call.replace("--network host ", "") for call in recorded()]
    assert [call.split()[0] for call in by_make] == ["build"] * len(DOCKERFILES)  # nothing pushed
    for name in DOCKERFILES:
        cloud_build(env, f"containers/{name}/Dockerfile", f"reg.example/ml/{name}:t1", base_of(name, *bases))
    by_cloud_build = recorded()[len(by_make) :]
    assert by_make == by_cloud_build
    for name, call in zip(DOCKERFILES, by_make, strict=True):
        base = base_of(name, *bases)
        assert f"-f containers/{name}/Dockerfile" in call and f"-t reg.example/ml/{name}:t1" in call
        assert ("--build-arg BASE_IMAGE=" in call) is bool(base) and (not base or f"BASE_IMAGE={base}" in call)


def test_make_images_pushes_only_when_asked_and_skips_what_it_is_told(fake_docker):
    env, recorded = fake_docker
    make_images(env, "PUSH=1", "SKIP_IMAGES=beam-worker")
    calls = recorded()
    built = [name for name in DOCKERFILES if name != "beam-worker"]
    assert [call.split()[0] for call in calls] == ["build", "push"] * len(built)
    assert [call for call in calls if call.startswith("push")] == [f"push reg.example/ml/{n}:t1" for n in built]


def test_every_dockerfile_takes_its_base_image_as_an_argument_pinned_by_digest_where_one_is_known():
    for name in DOCKERFILES:
        with open(os.path.join(REPO_ROOT, "containers", name, "Dockerfile")) as handle:
            lines = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
        assert lines[0].startswith("ARG BASE_IMAGE=") and lines[1].startswith("FROM ${BASE_IMAGE}"), name
        # every stage of a multi-stage build on the same base (the light image's build stage, then its own)
        assert {line.split()[1] for line in lines if line.startswith("FROM ")} == {"${BASE_IMAGE}"}, name
        default = lines[0].split("=", 1)[1]
        if name == "train-tpu":  # the pipeline image plus an extra: `make images` names its build
            assert default.endswith("/pipeline:0.1.0"), name
        elif name != "beam-worker":  # (Beam's digest could not be read here: README, Images)
            assert "@sha256:" in default and len(default.split("@sha256:")[1]) == 64, name


def test_make_help_shows_the_values_the_targets_will_use():
    result = subprocess.run(
        ["make", "-s", "help", "REGISTRY=reg.example/ml", "TAG=t1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "$(" not in result.stdout
    assert "as reg.example/ml/<name>:t1 " in result.stdout


def test_make_mutants_names_what_a_stopped_run_left_or_what_survived_and_scores_the_rest(capsys):
    from tests.mutation import report, to_try

    groups = {"one": ["m.x_f__mutmut_*"], "two": ["m.x_g__mutmut_*"]}
    codes = {
        "m.x_f__mutmut_1": 1,
        "m.x_f__mutmut_2": 0,
        "m.x_f__mutmut_3": None,
        "m.x_f__mutmut_4": -24,
        "m.x_f__mutmut_5": -11,
        "m.x_g__mutmut_1": 0,
        "m.x_g__mutmut_2": None,
        "m.x_h__mutmut_1": 0,
    }
    assert to_try(groups, "all", codes) == ["m.x_f__mutmut_*", "m.x_g__mutmut_*"]
    assert to_try(groups, "untried", codes) == ["m.x_f__mutmut_3", "m.x_g__mutmut_2"]
    # a function changed since the last run: every mutant of it, those tried before too (their results are stale)
    assert to_try(groups, "untried", codes, {"m.x_f", "m.x_h"}) == ["m.x_f__mutmut_*", "m.x_g__mutmut_2"]
    # a function of a group that mutmut has no mutant of yet (moved to a file not mutated before): all of it
    moved = {**groups, "three": ["n.x_k__mutmut_*"]}
    assert to_try(moved, "untried", codes) == ["m.x_f__mutmut_3", "m.x_g__mutmut_2", "n.x_k__mutmut_*"]
    # a timeout is not a kill; a crash (another signal) is
    assert to_try(groups, "survivors", codes) == ["m.x_f__mutmut_2", "m.x_f__mutmut_4", "m.x_g__mutmut_1"]
    summary = report(codes, groups)
    assert (summary["groups"]["one"]["tried"], summary["groups"]["one"]["killed"]) == (4, 2)
    assert summary["groups"]["one"]["not_killed"] == ["m.x_f__mutmut_2", "m.x_f__mutmut_4"]
    assert (summary["tried"], summary["killed"], summary["score"]) == (5, 2, 0.4)
    assert "one: 2 of 4 killed (50.0%), 1 not tried yet" in capsys.readouterr().out


def test_make_mutants_runs_a_groups_mutants_against_its_own_test_files_only():
    # what tests/mutation.py passes for GROUP_TESTS: the resume keys' mutants run test_resume.py alone
    import json

    files = ["tests/pipeline/test_resume.py", "tests/components/test_tokenizing.py"]
    restricted = json.dumps({"pipeline.local.resume.*": ["tests/pipeline/test_resume.py"]})

    def collected(mutant: str) -> set[str]:
        environment = {**os.environ, "MUTANT_UNDER_TEST": mutant, "MUTATION_TEST_FILES": restricted}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                "-o",
                "addopts=",
                *files,
            ],
            cwd=REPO_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )
        return {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}

    assert collected("pipeline.local.resume.x_run_key__mutmut_3") == {"tests/pipeline/test_resume.py"}
    assert collected("components.tokenizing.x_standardize__mutmut_1") == set(files)  # no group of its own: all


def test_make_mutants_runs_a_mutants_quickest_tests_first(tmp_path):
    # mutmut runs in its own folder, where its stats say how long each test took: pytest -x stops at the first
    # that fails, so the quickest go first
    import json

    path = os.path.join(REPO_ROOT, "tests", "pipeline", "test_resume.py")

    def collected() -> list[str]:
        environment = {**os.environ, "MUTANT_UNDER_TEST": "pipeline.local.resume.x_run_key__mutmut_3"}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                "-o",
                "addopts=",
                f"--rootdir={REPO_ROOT}",
                path,
            ],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )
        return [line for line in result.stdout.splitlines() if "::" in line]

    in_file_order = collected()  # (no stats here: the file's order)
    assert len(in_file_order) >= 3
    seconds = {name: float(len(in_file_order) - index) for index, name in enumerate(in_file_order)}
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": seconds}))
    assert collected() == in_file_order[::-1]


def test_make_mutants_makes_a_slow_fixture_once_and_again_for_a_mutant_of_code_it_ran(tmp_path, monkeypatch):
    # mutmut runs each mutant's tests in a new process: a fixture that converts or trains is made once for the run,
    # in its cache, with the mutated functions its making reached recorded (here by a stand-in for mutmut's stats)
    import contextlib
    import itertools

    from tests import fixture_cache

    made: list[str] = []
    numbers = itertools.count()
    reached_by = {"examples": {"m.x_convert"}, "model": {"m.x_train"}}

    def maker(name: str):
        def make(folder: str) -> tuple[str, int]:
            made.append(f"{name} in {os.path.relpath(folder, tmp_path)}")
            with open(os.path.join(folder, "data"), "w") as handle:
                handle.write(name)
            return folder, len(made)

        return make

    def reach(name: str):
        @contextlib.contextmanager
        def recorded():
            found: set[str] = set()
            yield found
            found.update(reached_by[name])

        return recorded

    def fixtures(mutant: str, cache: bool = True) -> list:
        """A new process's session: the examples, then the model made from them."""
        monkeypatch.setattr(fixture_cache, "_made_fresh", set())
        monkeypatch.setattr(fixture_cache, "_reached", {})
        monkeypatch.setenv("MUTANT_UNDER_TEST", mutant)
        if cache:
            monkeypatch.setenv(fixture_cache.CACHE_ENV, str(tmp_path / "cache"))
        else:
            monkeypatch.delenv(fixture_cache.CACHE_ENV, raising=False)

        def fresh_folder() -> str:
            folder = str(tmp_path / f"fresh-{next(numbers)}")
            os.makedirs(folder)
            return folder

        examples = fixture_cache.made_once("examples", maker("examples"), fresh_folder, (), reach("examples"))
        model = fixture_cache.made_once("model", maker("model"), fresh_folder, ("examples",), reach("model"))
        return [examples, model]

    # outside make mutants, and in mutmut's own runs (no mutant, or its stats), each session makes its own (fresh-0
    # to fresh-3)
    assert fixtures("m.x_other__mutmut_1", cache=False)[0][0].startswith(str(tmp_path / "fresh"))
    assert fixtures("stats")[0][0].startswith(str(tmp_path / "fresh"))
    # mutmut's stats run: every test that uses the model counts as reaching what making it (and its examples) reached
    counted: set[str] = set()
    fixture_cache.count_reach(["tmp_path", "model"], counted)
    assert counted == {"m.x_convert", "m.x_train"}
    made.clear()
    # the first mutant's session makes them in the cache; the next mutant's, of other code, takes them as they are
    first = fixtures("m.x_other__mutmut_1")
    assert made == ["examples in cache/examples/files", "model in cache/model/files"]
    assert fixtures("m.x_other__mutmut_2") == first and len(made) == 2
    # a mutant of the training: the model is made again with it, outside the cache; the examples are taken
    examples, model = fixtures("m.x_train__mutmut_7")
    assert examples == first[0] and made[2:] == ["model in fresh-4"] and model != first[1]
    # a mutant of the conversion: the examples are made again, and so the model made from them
    fixtures("m.x_convert__mutmut_3")
    assert made[3:] == ["examples in fresh-5", "model in fresh-6"]
    assert fixtures("m.x_other__mutmut_3") == first and len(made) == 5  # the cache untouched by them
    # a test that changed a cached fixture's files: it is made again for the next mutant
    with open(os.path.join(first[1][0], "data"), "a") as handle:
        handle.write("changed by a test")
    fixtures("m.x_other__mutmut_4")
    assert made[5:] == ["model in cache/model/files"]


def test_make_tests_workers_make_a_slow_fixture_once_and_a_changed_one_each_their_own(tmp_path, monkeypatch):
    # pytest-xdist's workers are processes side by side: the first to need a fixture that trains makes it in the
    # run's shared folder, the others read it there; one whose files a test changed is not made again under the
    # others' feet: the worker that finds it changed makes its own
    from tests import fixture_cache

    made: list[str] = []
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    monkeypatch.delenv(fixture_cache.CACHE_ENV, raising=False)

    def make(folder: str) -> str:
        made.append(os.path.relpath(folder, tmp_path))
        (tmp_path / made[-1] / "data").write_text("model")
        return folder

    def worker(number: int) -> str:
        """A worker's session fixture: a new process, so nothing made in this one yet."""
        monkeypatch.setattr(fixture_cache, "_made_fresh", set())
        fresh = tmp_path / f"gw{number}"
        return fixture_cache.made_once("model", make, lambda: (fresh.mkdir(), str(fresh))[1], shared=str(tmp_path))

    first = worker(0)
    assert worker(1) == worker(2) == first and made == ["model/files"]
    (tmp_path / "model" / "files" / "data").write_text("changed by a test")
    assert worker(3) == str(tmp_path / "gw3") and made[1:] == ["gw3"]
    assert (tmp_path / "model" / "files" / "data").read_text() == "changed by a test"  # (the others' left alone)
    monkeypatch.setattr(fixture_cache, "_made_fresh", set())
    assert fixture_cache.made_once("model", make, lambda: str(tmp_path), shared="") == str(tmp_path)  # alone: its own


def test_make_mutants_clears_what_a_mutant_wrote_into_mutmuts_folder(tmp_path):
    # a mutant that exported to a relative path left a SavedModel there, which a later mutant reading that path
    # found and passed with
    from tests.mutation import MUTMUT_FILES, remove_strays

    for name in ("components", "tests", "fixture-cache", "pixels", "gs:"):
        (tmp_path / name / "inside").mkdir(parents=True)
    (tmp_path / "mutmut-stats.json").write_text("{}")
    (tmp_path / "stray.txt").write_text("x")
    assert remove_strays(str(tmp_path)) == ["fixture-cache", "gs:", "pixels", "stray.txt"]
    assert sorted(os.listdir(tmp_path)) == ["components", "mutmut-stats.json", "tests"]
    assert {"components", "tests", "mutmut-stats.json"} <= MUTMUT_FILES


def test_in_mutmuts_stats_run_every_test_that_uses_a_traced_fixture_reaches_what_tracing_reached(tmp_path):
    # a module's fixture traces the serving graph once; the tests that then run the traced graph call no Python
    # function of it, so mutmut alone would map a mutant of the decoder to the first of them only
    (tmp_path / "mutmut").mkdir()
    (tmp_path / "mutmut" / "__init__.py").write_text("")
    (tmp_path / "mutmut" / "state.py").write_text(  # a stand-in for mutmut's record of the running test's reach
        "class _State:\n    _stats = set()\n\n\ndef state():\n    return _State\n"
    )
    (tmp_path / "test_traced.py").write_text(
        "import pytest\nfrom mutmut.state import state\n\n\n"
        "@pytest.fixture(scope='module')\ndef traced():\n    state()._stats.add('m.x_decode')  # the tracing\n\n\n"
        "def test_first(traced):\n    assert 'm.x_decode' in state()._stats\n"
        "    state()._stats.clear()  # as mutmut clears its record between tests\n\n\n"
        "def test_second(traced):\n    assert 'm.x_decode' in state()._stats\n"
    )
    environment = {**os.environ, "MUTANT_UNDER_TEST": "stats", "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-o",
        "addopts=",
        "-p",
        "tests.conftest",
        "test_traced.py",
    ]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout + result.stderr


def test_make_mutants_finds_the_functions_changed_since_mutmuts_last_run(tmp_path):
    # mutmut keeps each mutated function's original in its folder (x_f__mutmut_orig) beside a trampoline of the
    # function's own name, and a function it does not mutate as it is
    from tests.mutation import changed_functions

    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nonly_mutate = ["pkg/m.py"]\n')
    (tmp_path / "pkg").mkdir()
    (tmp_path / "mutants" / "pkg").mkdir(parents=True)
    (tmp_path / "pkg" / "m.py").write_text(
        "def f(a):\n    return a + 1\n\n\ndef g(a):\n    return a * 3\n\n\ndef h():\n    return 0\n\n\n"
        "def k():\n    return 1\n\n\nclass C:\n    def run(self):\n        return 2\n"
    )
    (tmp_path / "mutants" / "pkg" / "m.py").write_text(
        "def f(a):\n    return trampoline()\n\n\ndef x_f__mutmut_orig(a):\n    return a + 1\n\n\n"
        "def g(a):\n    return trampoline()\n\n\ndef x_g__mutmut_orig(a):\n    return a * 2\n\n\n"
        "def k():\n    return 1\n\n\nclass C:\n    def run(self):\n        return trampoline()\n\n"
        "    def xǁCǁrun__mutmut_orig(self):\n        return 2\n"
    )
    # g's body changed; h is new; f, k (not mutated) and C.run are as mutmut holds them
    assert changed_functions(str(tmp_path)) == {"pkg.m.x_g", "pkg.m.x_h"}
