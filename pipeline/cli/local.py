"""``python -m pipeline run-local``: the whole DAG on this machine under ``kfp.local``."""

from __future__ import annotations

import argparse
import inspect
import os

from components.cli import UsageError
from components.flags import auto_or, comma_separated, image_size_flag
from components.params import CONVERT, EVALUATE, TRAIN, TUNE, flag_of
from components.schema import MODALITIES
from components.train.config import BACKENDS, LR_SCHEDULES, PRECISIONS
from pipeline.accelerators import ACCELERATORS, DEFAULT_ACCELERATOR
from pipeline.images import DEFAULT_REGISTRY, DEFAULT_TAG, Images
from pipeline.local import DEMO_EPOCHS

# pipeline parameters run-local sets itself, or through a flag of another name
LOCAL_OWN = ("source", "image_size", "epochs", "beam_args", "model_display_name", "model_root")
# parameters only Vertex AI acts on (kfp.local has no mail to send): run-local has no flag for them
CLOUD_ONLY = ("tensorboard", "base_output_directory", "endpoint", "tune_parallel_trials")


def add_command(commands, with_dag_parameters: bool) -> None:
    """run-local's parser. ``with_dag_parameters``: a flag for every other pipeline parameter too (that imports the
    DAG, about 2 s, so only when run-local is asked for)."""
    local_cmd = commands.add_parser(
        "run-local",
        help="run the whole DAG on this machine (kfp.local SubprocessRunner)",
        description="Run convert -> check data -> train -> evaluate -> export under kfp.local. With no --source, runs "
        "the demo: scikit-learn's 1,797 handwritten digits written as <work-dir>/data/digits/<class>/*.jpg.",
    )
    local_cmd.add_argument(
        "--work-dir",
        default=os.path.join("runs", "local"),
        help="demo data, step artifacts and summary.json (default %(default)s)",
    )
    local_cmd.add_argument(
        "--source",
        default="",
        help="an image folder <root>/<class>/*.jpg, a CSV manifest, a NumPy .npz (arrays x and y) or a glob of "
        "TFRecords in the codelab schema; or texts: a folder of <class>/*.txt (aclImdb's train|test/<class>/ too), a "
        ".jsonl, or a .csv with --modality text; local or gs:// (default: the demo digits)",
    )
    local_cmd.add_argument(
        "--image-size",
        type=image_size_flag,
        help=CONVERT["image_size"].help + " (default auto; the demo: 16, or the least a built-in model takes)",
    )
    local_cmd.add_argument(
        "--epochs",
        type=auto_or(int, TRAIN["epochs"].default, least=1),  # (0 typed is refused: not the demo's default)
        help=f"{TRAIN['epochs'].help} (default: {DEMO_EPOCHS} for the demo, auto otherwise)",
    )
    add_training_flags(local_cmd)
    add_run_flags(local_cmd)
    if with_dag_parameters:
        add_dag_parameters(local_cmd)


def add_training_flags(local_cmd) -> None:
    local_cmd.add_argument(
        "--model",
        dest="model_name",
        metavar="auto|NAME|FILE.py[:FUNCTION]|MODULE:FUNCTION",
        help=TRAIN["model_name"].help_with_default(),
    )
    local_cmd.add_argument(
        "--hparam",
        dest="hparams",
        action="append",
        metavar="NAME=VALUE",
        help=TRAIN["hparams"].help + "; repeat it for each",
    )
    local_cmd.add_argument("--modality", choices=MODALITIES, help=CONVERT["modality"].help_with_default())
    for name, choices in (("precision", PRECISIONS), ("backend", BACKENDS), ("lr_schedule", LR_SCHEDULES)):
        local_cmd.add_argument(flag_of(name, TRAIN), choices=choices, help=TRAIN[name].help_with_default())
    for name, kind in (
        ("per_replica_batch_size", int),
        ("learning_rate", auto_or(float, TRAIN["learning_rate"].default)),
    ):
        local_cmd.add_argument(flag_of(name, TRAIN), dest=name, type=kind, help=TRAIN[name].help_with_default())
    local_cmd.add_argument(
        "--tune",
        dest="tune_trials",
        type=int,
        metavar="N",
        help=TUNE["tune_trials"].help_with_default() + "; here the trials run one after the other, and the run's "
        "summary says what each scored",
    )
    for name in ("min_accuracy", "max_accuracy_drop"):
        local_cmd.add_argument(
            flag_of(name, EVALUATE), type=float, metavar="FRACTION", help=EVALUATE[name].help_with_default()
        )
    local_cmd.add_argument(
        "--baseline", dest="baseline_model", metavar="MODEL", help=EVALUATE["baseline"].help_with_default()
    )


def add_run_flags(local_cmd) -> None:
    local_cmd.add_argument(
        "--demo-per-class",
        type=int,
        help="write at most this many demo images per class, for a quick check (default: all)",
    )
    local_cmd.add_argument(
        "--cache",
        action="store_true",
        help="as Vertex AI's enable_caching: every step's cache on; the fingerprint and baseline steps still run "
        "each time, so new images convert and train again and unchanged ones are cache hits",
    )
    local_cmd.add_argument(
        "--registry",
        default="",
        metavar="DIR",
        help="a model registry folder: each blessed export becomes its next numbered version and the default one, "
        "and the default version is the next run's baseline (a run whose model is the baseline adds nothing)",
    )
    local_cmd.add_argument(
        "--runner",
        choices=("subprocess", "docker"),
        default="subprocess",
        help="subprocess: each step in this Python (kfp.local's SubprocessRunner); docker: each step in the image the "
        "DAG gives it, as you (DockerRunner; build them with `make images`) (default %(default)s)",
    )
    local_cmd.add_argument(
        "--image-registry",
        help=f"with --runner docker: registry of the step images (default {DEFAULT_REGISTRY})",
    )
    local_cmd.add_argument("--image-tag", help=f"with --runner docker: tag of the step images (default {DEFAULT_TAG})")
    local_cmd.add_argument(
        "--accelerator",
        choices=ACCELERATORS,
        metavar="TARGET",
        help="with --runner docker: train in the image this compile target's training job runs in, as a plain "
        f"container on this machine (default {DEFAULT_ACCELERATOR}, pipeline.yaml's: the TPU trainer, which trains on "
        "the CPU here)",
    )
    local_cmd.add_argument(
        "--screenshot",
        action="store_true",
        help="when the run is done, draw the evaluation report with a headless Chromium into report.png beside it, "
        "in the evaluate step's artifact, and say whether every picture loaded",
    )
    local_cmd.add_argument(
        "--no-resume",
        dest="resume",
        action="store_false",
        help="start a new run even when the run interrupted in --work-dir (Ctrl-C, SIGTERM) had the same parameters "
        "and data; by default that run goes on: its finished steps reused, training from its last backup",
    )
    for name in ("validation_fraction", "test_fraction", "max_bad_fraction"):
        local_cmd.add_argument(
            flag_of(name, CONVERT), type=float, metavar="FRACTION", help=CONVERT[name].help_with_default()
        )
    local_cmd.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        dest="beam_args",
        metavar="ARG",
        help="a Beam pipeline option for the convert step, e.g. --beam-arg=--direct_num_workers=2",
    )


def dag_parameters() -> dict[str, inspect.Parameter]:
    """The pipeline's parameters, as the DAG declares them: the one declaration run-local's flags follow."""
    from pipeline.dag import build_pipeline

    return dict(inspect.signature(build_pipeline(registry=None).pipeline_func).parameters)


def add_dag_parameters(parser: argparse.ArgumentParser) -> None:
    """A flag for each pipeline parameter run-local has no flag for yet, typed and documented from the DAG."""
    from components.params import CHECK_DATA, EXPORT, TEXT, auto_value

    declared = {**CONVERT, **TEXT, **TRAIN, **EVALUATE, **CHECK_DATA, **EXPORT}  # (the DAG's baseline: baseline_model)
    taken = {action.dest for action in parser._actions}
    for name, parameter in dag_parameters().items():
        if name in taken or name in LOCAL_OWN or name in CLOUD_ONLY:
            continue
        flag, default = flag_of(name, declared), parameter.default
        help_text = (
            declared[name].help_with_default()
            if name in declared
            else f"pipeline parameter {name} (default {default!r})"
        )
        if parameter.annotation is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif getattr(parameter.annotation, "__origin__", None) is list:
            parser.add_argument(
                flag,
                dest=name,
                default=None,
                metavar="A,B,...",
                help=help_text + ", comma-separated",
                type=comma_separated,
            )
        else:
            auto = auto_value(name)
            kind = parameter.annotation if auto is None else auto_or(parameter.annotation, auto)
            parser.add_argument(flag, dest=name, type=kind, default=None, help=help_text)


def local_parameters(args: argparse.Namespace) -> dict:
    """The pipeline parameters run-local's flags set (the others keep the DAG's defaults)."""
    return {
        name: getattr(args, name)
        for name in dag_parameters()
        if name not in LOCAL_OWN and name not in CLOUD_ONLY and getattr(args, name, None) is not None
    }


def check(args: argparse.Namespace, chosen: argparse.ArgumentParser) -> None:
    """Every value given, checked before anything runs: one line and exit 2 for a mistake."""
    if args.tune_trials is not None and args.tune_trials < 0:
        raise UsageError(f"--tune {args.tune_trials}: give a number of trials (0: no search)")
    if args.runner != "docker":  # (the steps run in this Python: there is no image to take them from)
        given = {
            "--accelerator": args.accelerator,
            "--image-registry": args.image_registry,
            "--image-tag": args.image_tag,
        }
        for flag, value in given.items():
            if value is not None:
                raise UsageError(f"{flag} {value} takes effect with --runner docker only: add it, or leave {flag} out")
    if args.demo_per_class is not None and args.demo_per_class < 1:  # never 0 for "the default"
        raise UsageError(
            f"--demo-per-class {args.demo_per_class} is too small: use 1 or more, or leave it out for the default"
        )
    from components.convert.config import check_beam_args

    check_beam_args(args.beam_args, list(chosen._option_string_actions))
    from components.models import DEFAULT_MODELS, check_image_size, load, parse_ref

    ref = parse_ref(args.model_name or "auto")
    if ref.kind == "builtin" and args.image_size:  # (auto takes what every model takes)
        check_image_size(load(DEFAULT_MODELS["image"] if ref.text == "auto" else ref.text), args.image_size)
    from pipeline.step_values import check_step_values

    check_step_values(vars(args))
    if args.baseline_model is not None:  # checked before anything is written, as evaluate will check it
        from components.evaluate.config import check_baseline_model

        args.baseline_model = check_baseline_model(args.baseline_model)
    if args.screenshot:  # before the run, not after it
        from components.browser import find_browser

        if not find_browser():
            raise UsageError(
                "--screenshot: no headless browser here: install Chromium (apt-get install chromium), "
                "or set TPU_PIPELINE_BROWSER to one"
            )


def run(args: argparse.Namespace, chosen: argparse.ArgumentParser) -> int:
    from pipeline.local import SUMMARY_FILE, LocalRunConfig, format_summary, run_local

    check(args, chosen)
    optional = local_parameters(args)
    summary = run_local(
        LocalRunConfig(
            work_dir=args.work_dir,
            source=args.source,
            image_size=args.image_size,
            epochs=args.epochs,
            demo_per_class=args.demo_per_class,
            beam_args=tuple(args.beam_args),
            parameters=optional,
            cache=args.cache,
            registry=args.registry,
            verbose=args.verbose,
            resume=args.resume,
            runner=args.runner,
            images=Images(registry=args.image_registry or DEFAULT_REGISTRY, tag=args.image_tag or DEFAULT_TAG),
            accelerator=args.accelerator or DEFAULT_ACCELERATOR,
            screenshot=args.screenshot,
        )
    )
    print(format_summary(summary, os.path.join(args.work_dir, SUMMARY_FILE)))
    return 0
