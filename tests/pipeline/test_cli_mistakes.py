"""The mistakes users make on the command line get one line (or the command's own usage) and exit 2, before any
work starts and without writing anything. In-process: the CLI's own ``main``."""

from __future__ import annotations

import os

import pytest

from components.cli import UsageError
from pipeline.__main__ import main
from tests.conftest import run_cli, write_image_folder


def test_zero_is_refused_not_taken_for_the_default(tmp_path, capsys):
    with pytest.raises(UsageError, match="--demo-per-class 0 is too small: use 1 or more"):
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--demo-per-class", "0"])
    with pytest.raises(SystemExit) as exited:  # (auto is a value of its own)
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--epochs", "0"])
    assert exited.value.code == 2
    assert "argument --epochs: 0 is too small: use 1 or more, or auto" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    "model, hparam, message",
    [
        ([], "width=2", "--hparam width=2: codelab_convnet_bn has no hyperparameter width: it takes none"),
        (["--model", "lstm"], "units=many", "--hparam units=many: units is an int (its default is 32)"),
    ],
)
def test_a_built_in_models_hyperparameter_is_checked_before_any_step(tmp_path, model, hparam, message):
    """(The train step refused it, after the conversion and the data checks.)"""
    source = tmp_path / "texts" if model else tmp_path / "images"
    if model:
        for label in ("pos", "neg"):
            (source / label).mkdir(parents=True)
            (source / label / "1.txt").write_text(f"a {label} text")
    else:
        write_image_folder(source, per_class=2)
    with pytest.raises(UsageError) as raised:
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--source", str(source), *model, "--hparam", hparam])
    assert str(raised.value) == message
    assert not (tmp_path / "work").exists()


IMAGE_SIZE_MISTAKES = [
    ("0", "0 is too small: use 8 or more, or auto"),
    ("100000", "100000 is too large: use 1024 or less, or auto"),  # (30 GB an image, decoded)
    ("big", "'big' is not a size: use auto or a number of pixels"),
]


@pytest.mark.parametrize("value, message", IMAGE_SIZE_MISTAKES)
def test_an_image_size_is_auto_or_8_to_1024_pixels(tmp_path, capsys, value, message):
    with pytest.raises(SystemExit) as exited:
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--image-size", value])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"argument --image-size: {message}")
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    "beam_arg, message",
    [
        ("--image-size=32", "--image-size is not a Beam pipeline option: pass it as an option of its own"),
        ("--direct_num_wrkers=2", "unknown option --direct_num_wrkers, did you mean --direct_num_workers?"),
    ],
)
def test_run_local_passes_only_beam_options_to_beam(tmp_path, beam_arg, message):
    with pytest.raises(UsageError, match=message):
        main(["run-local", "--work-dir", str(tmp_path / "work"), f"--beam-arg={beam_arg}"])
    assert not (tmp_path / "work").exists()


def test_convert_refuses_a_mistyped_flag_instead_of_converting_at_the_default(tmp_path, image_folder):
    from components.convert.__main__ import main as convert

    with pytest.raises(UsageError, match="unknown option --image-sise, did you mean --image-size"):
        convert(["--source", image_folder, "--output", str(tmp_path / "out"), "--image-sise", "32"])
    assert not (tmp_path / "out").exists()
    # Beam's own options still pass (here the direct runner's)
    assert (
        convert(
            [
                "--source",
                image_folder,
                "--output",
                str(tmp_path / "ok"),
                "--image-size",
                "8",
                "--direct_num_workers=1",
                "--direct_running_mode=in_memory",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    "argv, usage",
    [
        (["run-local", "--bogus"], "python -m pipeline run-local"),
        (["schedule", "create", "--cron", "0 3 * * 1", "--bogus"], "python -m pipeline schedule create"),
    ],
)
def test_an_unknown_flag_gets_its_subcommands_usage(capsys, argv, usage):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {usage} ")
    assert err.strip().endswith(f"{usage}: error: unknown option --bogus: see --help")


@pytest.mark.parametrize(
    "module, argv, mistake, usage, meant",
    [
        ("pipeline", ["run-local"], ["--epoch", "3"], "python -m pipeline run-local", "--epochs"),
        (
            "pipeline",
            ["schedule", "create", "--cron", "0 3 * * 1"],
            ["--max-run", "2"],
            "python -m pipeline schedule create",
            "--max-runs",
        ),
        ("components.train", ["--examples", "e"], ["--epoch", "3"], "python -m components.train", "--epochs"),
        (
            "components.evaluate",
            ["--model-dir", "m", "--examples", "e", "--output", "o"],
            ["--min-acc", "0.5"],
            "python -m components.evaluate",
            "--min-accuracy",
        ),
        (
            "components.export",
            ["--model-dir", "m", "--examples", "e", "--output", "o"],
            ["--verb"],
            "python -m components.export",
            "--verbose",
        ),
        # named before the missing required flags (argparse would name those first)
        ("pipeline", ["predict", "--modle", "x", "a.jpg"], [], "python -m pipeline predict", "--model"),
        ("components.train", ["--examples=e", "--model-dri=m"], [], "python -m components.train", "--model-dir"),
    ],
)
def test_a_flag_is_spelt_whole_never_taken_for_the_flag_it_begins(capsys, module, argv, mistake, usage, meant):
    """``--epoch 3`` would otherwise run as ``--epochs 3``: argparse takes any unambiguous beginning of a flag.
    The mistake is named, with the flag meant."""
    import importlib

    with pytest.raises(SystemExit) as exited:
        importlib.import_module(f"{module}.__main__").main([*argv, *mistake])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"usage: {usage} ")
    typed = (mistake or [next(a for a in argv[::-1] if a.startswith("--"))])[0].split("=")[0]
    assert err.splitlines()[-1] == f"{usage}: error: unknown option {typed}, did you mean {meant}?"


def test_version_and_verbose_after_the_subcommand(tmp_path, capsys, caplog):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("python -m pipeline 0.")
    assert main(["compile", "--output", str(tmp_path / "p.yaml"), "-v"]) == 0  # -v after the subcommand
    # the placeholder registry is named, with how to choose the real one
    assert any("placeholder registry" in r.getMessage() and "--registry" in r.getMessage() for r in caplog.records)


def test_compile_verbose_says_what_each_step_runs_in(tmp_path):
    quiet = run_cli("pipeline", "compile", "--output", str(tmp_path / "p.yaml"), "--registry", "reg.example/ml")
    loud = run_cli("pipeline", "compile", "--output", str(tmp_path / "p.yaml"), "--registry", "reg.example/ml", "-v")
    assert quiet.returncode == loud.returncode == 0, quiet.stderr + loud.stderr
    assert "runs in" not in quiet.stderr
    assert "DEBUG pipeline.cli.compile: step fingerprint runs in reg.example/ml/light:" in loud.stderr
    assert "DEBUG pipeline.cli.compile: step convert runs in reg.example/ml/pipeline:" in loud.stderr
    launched = "DEBUG pipeline.cli.compile: a job of the train step (train-tpu) runs in reg.example/ml/train-tpu:"
    assert launched in loud.stderr


def test_run_local_help_lists_every_source_form_and_model(capsys):
    with pytest.raises(SystemExit):
        main(["run-local", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert ".npz" in out and "TFRecords" in out and "CSV manifest" in out
    assert "<class>/*.txt" in out and ".jsonl" in out and "--modality {auto,image,text}" in out
    assert "--model auto|NAME|FILE.py[:FUNCTION]|MODULE:FUNCTION" in out and "python -m pipeline models" in out
    assert "--hparam NAME=VALUE" in out


def test_the_top_level_help_names_every_schedule_action(capsys):
    from pipeline.__main__ import build_parser, subcommands

    actions = [name.split()[1] for name in subcommands(build_parser()) if name.startswith("schedule ")]
    assert {"create", "update", "delete"} <= set(actions)
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # as wrapped at any terminal width
    schedule = text[text.index(" schedule ") : text.index("options:")]
    assert [action for action in actions if action not in schedule] == []


def test_predict_names_a_model_that_does_not_exist(tmp_path):
    with pytest.raises(UsageError, match=f"model {tmp_path}/nothing does not exist"):
        main(["predict", "--model", str(tmp_path / "nothing"), "x.jpg"])


def test_a_failed_step_ends_the_run_on_its_own_reason_and_marks_the_summary(tmp_path, image_folder):
    """A step that fails (here convert: a file that is not an image, and no bad file allowed) ends run-local with the
    step's own one-line reason as the last line, exit 1, and a summary.json that says the run failed (the previous
    run's summary does not stay looking current)."""
    import json
    import shutil

    from tests.conftest import run_cli

    source = tmp_path / "photos"
    shutil.copytree(image_folder, source)
    (source / "cat" / "broken.jpg").write_bytes(b"not a jpeg")
    work = tmp_path / "work"
    work.mkdir()
    (work / "summary.json").write_text('{"status": "succeeded", "test_accuracy": 0.99}')
    result = run_cli(
        "pipeline",
        "run-local",
        "--work-dir",
        str(work),
        "--source",
        str(source),
        "--image-size",
        "16",
        "--max-bad-fraction",
        "0",
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: step convert failed: 1 of ") and "--max-bad-fraction" in last
    summary = json.loads((work / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == last[len("error: ") :]
    assert "test_accuracy" not in summary


def test_an_image_size_a_model_cannot_take_is_refused_naming_the_models_that_can(tmp_path):
    with pytest.raises(
        UsageError,
        match=r"--image-size 8 is too small for codelab_convnet_bn, which needs 16 or more; "
        r"cifar_convnet, dense_baseline take 8",
    ):
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--image-size", "8"])
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "--batch-size 0 must be at least 1"),
        (["--learning-rate", "-1"], r"--learning-rate -1.0 must be positive"),
        (["--num-shards", "-1"], r"--num-shards -1 is negative: use 0 \(automatic\) or a positive count"),
        # the conversion's own bounds, [0, 1): a run-local check of [0, 1] let 1.0 through to fail in the convert step
        (["--max-bad-fraction", "1"], r"--max-bad-fraction 1.0 is out of range: use a fraction in \[0, 1\)"),
        (["--test-fraction", "1"], r"--test-fraction 1.0 is out of range: use a fraction in \[0, 1\)"),
        (["--baseline", "{tmp}"], "baseline {tmp} is not a trained or exported model"),
        (["--formats", "tflite_int8"], "--formats tflite_int8: add saved_model: it is always exported"),
        # (the seed reaches NumPy's and the frameworks' generators, which take 0 to 2**32 - 1)
        (["--seed", "-1"], r"--seed -1 is out of range: use 0 to 4294967295"),
        (["--seed", str(2**32)], r"--seed 4294967296 is out of range: use 0 to 4294967295"),
    ],
)
def test_every_parameter_is_checked_before_the_dag_starts(tmp_path, args, message):
    args = [arg.format(tmp=tmp_path) for arg in args]
    with pytest.raises(UsageError, match=message.format(tmp=tmp_path)):
        main(["run-local", "--work-dir", str(tmp_path / "work"), *args])
    assert not (tmp_path / "work").exists()


def test_augment_on_texts_is_refused_in_one_line_before_anything_is_written(tmp_path):
    """--augment changes images only: on a text source, run-local refuses it up front, and so does the train step
    (the DAG's parameter)."""
    from components.modalities import named
    from tests.conftest import write_reviews

    reviews = write_reviews(tmp_path / "reviews.jsonl", count=40)
    with pytest.raises(UsageError) as raised:
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--source", reviews, "--augment"])
    assert str(raised.value) == (
        "--augment applies to images (random flips, brightness and saturation): texts get no augmentation; leave "
        "--augment out"
    )
    assert not (tmp_path / "work").exists()
    named("image").check_augment(True)  # (images take it)
    with pytest.raises(UsageError, match=r"^--augment applies to images"):  # the train step's check
        named("text").check_augment(True)


def test_a_mistyped_model_is_refused_with_the_choices(tmp_path):
    with pytest.raises(
        UsageError,
        match=r"^--model squeezent: not a built-in model, FILE\.py\[:FUNCTION\] \(local or "
        r"gs://\) or MODULE:FUNCTION; the built-in models are bilstm, .*, squeezenet, xception$",
    ):
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--model", "squeezent"])
    assert not (tmp_path / "work").exists()


def test_run_local_has_a_flag_for_every_pipeline_parameter():
    """One declaration: the DAG's signature. Each parameter is a run-local flag, under its own name or (for a few)
    a shorter one, or is set by run-local itself."""
    from pipeline.__main__ import parse
    from pipeline.cli.local import CLOUD_ONLY, LOCAL_OWN, dag_parameters, local_parameters

    args, _ = parse(
        [
            "run-local",
            "--seed",
            "7",
            "--augment",
            "--classes",
            "b, a",
            "--num-shards",
            "2",
            "--jit-compile",
            "--batch-size",
            "16",
            "--model",
            "squeezenet",
        ]
    )
    given = local_parameters(args)
    assert given == {
        "seed": 7,
        "augment": True,
        "classes": ["b", "a"],
        "num_shards": 2,
        "jit_compile": True,
        "per_replica_batch_size": 16,
        "model_name": "squeezenet",
    }
    args, chosen = parse(["run-local"])
    dests = {action.dest for action in chosen._actions}
    assert set(dag_parameters()) - set(LOCAL_OWN) - set(CLOUD_ONLY) <= dests
    assert not set(CLOUD_ONLY) & dests  # kfp.local sends no mail: no flag that would do nothing


@pytest.mark.parametrize(
    "registry, message",
    [
        ("file", "model registry {path} is a file: pass a folder (it may not exist yet)"),
        ("gs://b/models", "--registry gs://b/models: a local run keeps its registry in a local folder; pass a path"),
    ],
)
def test_a_registry_that_cannot_be_used_is_one_line_exit_2_before_anything_runs(
    tmp_path, image_folder, registry, message
):
    path = tmp_path / registry if registry == "file" else registry
    if registry == "file":
        path.write_text("not a registry")
    work = tmp_path / "work"
    args = ["--work-dir", str(work), "--source", image_folder, "--registry", str(path)]
    result = run_cli("pipeline", "run-local", *args)
    assert result.returncode == 2 and result.stderr.strip() == "error: " + message.format(path=path)
    assert not (work / "artifacts").exists()


def test_run_local_in_docker_without_the_docker_extra_is_one_line_naming_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "docker", None)  # the `docker` extra not installed
    with pytest.raises(
        UsageError,
        match=r"^--runner docker needs the Docker client, the project's `docker` extra: `uv "
        r"sync --extra docker`",
    ):
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--runner", "docker"])
    assert not (tmp_path / "work").exists()


def test_run_local_in_docker_without_an_engine_is_one_line_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(UsageError, match=r"--runner docker: no Docker engine answers \(\w+\): start one, or leave "):
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--runner", "docker"])
    assert not (tmp_path / "work").exists()


def test_run_local_in_docker_binds_only_folders_that_exist_a_new_registry_made_first(tmp_path, monkeypatch):
    """Docker refuses to bind a path that does not exist: a --registry folder that its first version would make is
    made before the steps' containers bind it (the engine and the images stand in: only the binding is checked)."""
    from kfp import local

    import pipeline.local.run as run

    bound = []

    def runner(shared, environment):
        bound.extend(path for path in shared if path)
        return local.SubprocessRunner(use_venv=False)

    monkeypatch.setattr(run, "check_docker", lambda *args: None)
    monkeypatch.setattr(run, "docker_runner", runner)
    source = write_image_folder(tmp_path / "images", per_class=2)
    config = run.LocalRunConfig(
        work_dir=str(tmp_path / "work"), source=source, registry=str(tmp_path / "new" / "reg"), runner="docker"
    )
    run.start_run(config)
    assert str(tmp_path / "new" / "reg") in bound and source in bound
    assert all(os.path.isdir(path) for path in bound), bound


def test_a_source_of_one_class_is_refused_before_the_run_starts(tmp_path, image_folder):
    """Up front, as the empty folder is: not a failed convert step with a work dir written."""
    import shutil

    shutil.copytree(os.path.join(image_folder, "cat"), tmp_path / "one" / "cat")
    with pytest.raises(UsageError, match=r"has one class \(cat\): a classifier needs at least 2 classes"):
        main(["run-local", "--work-dir", str(tmp_path / "work"), "--source", str(tmp_path / "one")])
    assert not (tmp_path / "work").exists()


def test_a_work_dir_the_filesystem_cannot_take_is_one_line(tmp_path):
    long = "w" * 300
    with pytest.raises(UsageError) as raised:
        main(["run-local", "--work-dir", str(tmp_path / long / "run")])
    assert str(raised.value) == (
        f"--work-dir {tmp_path / long / 'run'} cannot be made: its part {'w' * 40}... is 300 bytes long, more than "
        "the 255 a file name may take; choose a shorter name"
    )
    deep = tmp_path.joinpath(*["d" * 200] * 17)
    with pytest.raises(
        UsageError,
        match=r"^--work-dir .* is \d+ bytes long: the files written under it would pass "
        "the 4096 a path may take; choose a shorter path$",
    ):
        main(["run-local", "--work-dir", str(deep)])


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist: run python -m pipeline compile first"),
        (
            "a: [1, 2\n",
            "is not YAML (line 2, column 1: did not find expected ',' or ']'): run python -m pipeline compile",
        ),
        ("a: 1\n", "is not a compiled pipeline: run python -m pipeline compile"),
    ],
)
def test_a_template_that_is_no_compiled_pipeline_is_one_line(tmp_path, content, message):
    """What submit, schedule and preflight read first: a missing file, a file that is not YAML (a hand edit gone
    wrong) or YAML that is no pipeline gets one line naming it and the command that makes one."""
    template = tmp_path / "pipeline.yaml"
    if content is not None:
        template.write_text(content)
    args = ["submit", "--template", str(template), "--project", "p", "--region", "europe-west4"]
    with pytest.raises(UsageError) as refused:
        main([*args, "--pipeline-root", "gs://b/root"])
    assert str(refused.value) == f"pipeline template {template} {message}"


def test_auto_is_a_value_of_the_flags_whose_default_is_auto(tmp_path, template):
    """The help says ``(default auto)`` for the epochs and the learning rate: ``auto`` typed is taken, on the train
    step's command line, on run-local's (for the demo too: auto's epochs, not the demo's 15) and in submit's
    ``--param``; the DAG's value for it is 0."""
    from components.train.__main__ import build_parser
    from pipeline.__main__ import parse
    from pipeline.local import LocalRunConfig, run_identity
    from pipeline.vertex import pipeline_parameters

    parsed = build_parser().parse_args(["--examples", "x", "--epochs", "auto", "--learning-rate", "AUTO"])
    assert (parsed.epochs, parsed.learning_rate) == (0, 0.0)
    given = {"source": "gs://b/photos", "epochs": "auto", "learning_rate": "auto", "image_size": "auto"}
    taken = pipeline_parameters(template, given)
    assert (taken["epochs"], taken["learning_rate"], taken["image_size"]) == (0, 0.0, 0)
    args, _ = parse(["run-local", "--epochs", "auto", "--learning-rate", "auto"])
    assert (args.epochs, args.learning_rate) == (0, 0.0)
    work_dir = str(tmp_path / "work")
    auto = run_identity(LocalRunConfig(work_dir=work_dir, demo_per_class=1, epochs=args.epochs))
    assert auto.parameters["epochs"] == 0
    assert run_identity(LocalRunConfig(work_dir=work_dir, demo_per_class=1)).parameters["epochs"] == 15


@pytest.mark.parametrize(
    "command, flag, value, message",
    [
        (["run-local"], "--epochs", "ten", "argument --epochs: 'ten' is neither auto nor a whole number, e.g. 20"),
        (["run-local"], "--learning-rate", "fast", "'fast' is neither auto nor a number, e.g. 0.002"),
    ],
)
def test_a_number_that_may_be_auto_says_both_when_it_is_neither(tmp_path, capsys, command, flag, value, message):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--work-dir", str(tmp_path / "work"), flag, value])
    assert exited.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--accelerator", "v6e-8"),
        ("--accelerator", "v5e-4"),  # (the default, typed)
        ("--image-registry", "europe-docker.pkg.dev/p/r"),
        ("--image-tag", "v2"),
    ],
)
def test_a_flag_for_the_docker_runner_alone_is_refused_without_it(tmp_path, flag, value):
    """(It was taken and ignored: the steps ran in this Python, the training on no image of that target.)"""
    with pytest.raises(UsageError) as raised:
        main(["run-local", "--work-dir", str(tmp_path / "work"), flag, value])
    assert str(raised.value) == f"{flag} {value} takes effect with --runner docker only: add it, or leave {flag} out"
    assert not (tmp_path / "work").exists()


def test_a_value_that_begins_with_dashes_is_a_value_not_an_unknown_flag():
    """(``--text "--- what a film"`` was refused as an unknown option.)"""
    from pipeline.__main__ import parse

    args, _ = parse(["predict", "--model", "m", "--text", "--- what a film, really", "--text", "--x=1 y"])
    assert args.text == ["--- what a film, really", "--x=1 y"]
