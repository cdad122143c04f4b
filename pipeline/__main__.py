"""``python -m pipeline``: compile the DAG, run it locally under ``kfp.local``, submit it to Vertex AI Pipelines, and
schedule it to retrain."""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import sys

from components.cli import UsageError, configure_logging, image_size_flag, run_main
from components.models import DEFAULT_MODELS, MODELS, modality_of
from components.params import CONVERT, DEPLOY, EVALUATE, TRAIN, defaults, flag_of
from components.schema import MODALITIES
from components.train.core import LR_SCHEDULES
from components.train.placement import BACKENDS, PRECISIONS
from pipeline.accelerators import ACCELERATORS, DEFAULT_ACCELERATOR, SCHEDULING_STRATEGIES, is_experimental
from pipeline.images import DEFAULT_REGISTRY, DEFAULT_TAG, Images
from pipeline.local import DEMO_EPOCHS

# the DAG trains on images (issue 15 brings text to it)
IMAGE_MODELS = sorted(name for name in MODELS if modality_of(name) == "image")

log = logging.getLogger(__name__)


def build_parser(dag_parameters: bool = False) -> argparse.ArgumentParser:
    """The CLI. ``dag_parameters``: give run-local a flag for every other pipeline parameter too (that imports the
    DAG, about 2 s, so only when run-local is asked for)."""
    parser = argparse.ArgumentParser(
        prog="python -m pipeline",
        description="Compile the classification DAG (images or texts) to pipeline.yaml, run it locally under "
        "kfp.local, submit it to Vertex AI Pipelines, or schedule it to retrain. Vertex AI settings: flags over "
        "environment variables (TPU_PIPELINE_PROJECT, TPU_PIPELINE_REGION, ...) over a YAML config file (--config) "
        "over defaults.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compile_cmd = commands.add_parser("compile", help="compile the DAG to pipeline.yaml (KFP v2 IR)")
    compile_cmd.add_argument("--output", default="pipeline.yaml", help="where to write (default %(default)s)")
    compile_cmd.add_argument(
        "--registry", default=DEFAULT_REGISTRY, help="registry of the step images (default %(default)s)"
    )
    compile_cmd.add_argument("--tag", default=DEFAULT_TAG, help="tag of the step images (default %(default)s)")
    compile_cmd.add_argument(
        "--accelerator",
        default=DEFAULT_ACCELERATOR,
        metavar="TARGET",
        help=f"what the training step runs on in Vertex AI: {', '.join(ACCELERATORS)} (default %(default)s); "
        f"{' and '.join(n for n in ACCELERATORS if is_experimental(n))} are multi-host slices, experimental: "
        "proven on local processes, not yet on a real slice",
    )
    compile_cmd.add_argument(
        "--scheduling",
        default="standard",
        choices=list(SCHEDULING_STRATEGIES),
        help="how Vertex AI gets the training job's machines: standard (on demand), spot (Spot VMs: cheaper, may be "
        "preempted; training resumes from its last backup; single-host targets) or flex-start (Dynamic Workload "
        "Scheduler: queued until the machines are free; l4 and a100) (default %(default)s)",
    )
    compile_cmd.add_argument(
        "--max-wait",
        default="",
        metavar="DURATION",
        help="with --scheduling flex-start: how long the job may queue for its machines, e.g. 90m, 2h, 1800s, or 0 "
        "for no limit (default: Vertex AI's, 24 h)",
    )
    compile_cmd.add_argument(
        "--reservation",
        default="",
        metavar="RESERVATION",
        help="with --scheduling standard: consume a Compute Engine reservation: any (any matching one of the "
        "project), none, or a reservation's resource name projects/P/zones/Z/reservations/NAME (default: Vertex "
        "AI's)",
    )

    local_cmd = commands.add_parser(
        "run-local",
        help="run the whole DAG on this machine (kfp.local SubprocessRunner)",
        description="Run convert -> train -> evaluate -> export under kfp.local. With no --source, runs the demo: "
        "scikit-learn's 1,797 handwritten digits written as <work-dir>/data/digits/<class>/*.jpg.",
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
        "--image-size", type=image_size_flag, help=CONVERT["image_size"].help + " (default auto; 32 for the demo)"
    )
    local_cmd.add_argument(
        "--epochs", type=int, help=f"{TRAIN['epochs'].help} (default: {DEMO_EPOCHS} for the demo, "
        f"{TRAIN['epochs'].default} otherwise)",
    )  # fmt: skip
    local_cmd.add_argument(
        "--model", dest="model_name", choices=("auto", *MODELS), help=TRAIN["model_name"].help_with_default()
    )
    local_cmd.add_argument("--modality", choices=MODALITIES, help=CONVERT["modality"].help_with_default())
    for name, choices in (("precision", PRECISIONS), ("backend", BACKENDS), ("lr_schedule", LR_SCHEDULES)):
        local_cmd.add_argument(flag_of(name, TRAIN), choices=choices, help=TRAIN[name].help_with_default())
    for name, kind in (("per_replica_batch_size", int), ("learning_rate", float)):
        local_cmd.add_argument(flag_of(name, TRAIN), dest=name, type=kind, help=TRAIN[name].help_with_default())
    for name in ("min_accuracy", "max_accuracy_drop"):
        local_cmd.add_argument(flag_of(name, EVALUATE), type=float, metavar="FRACTION",
                               help=EVALUATE[name].help_with_default())  # fmt: skip
    local_cmd.add_argument(
        "--baseline", dest="baseline_model", metavar="MODEL", help=EVALUATE["baseline"].help_with_default()
    )
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
        default=DEFAULT_REGISTRY,
        help="with --runner docker: registry of the step images (default %(default)s)",
    )
    local_cmd.add_argument(
        "--image-tag", default=DEFAULT_TAG, help="with --runner docker: tag of the step images (default %(default)s)"
    )
    local_cmd.add_argument(
        "--accelerator",
        default=DEFAULT_ACCELERATOR,
        choices=ACCELERATORS,
        metavar="TARGET",
        help="with --runner docker: train in the image this compile target's training job runs in, as a plain "
        "container on this machine (default %(default)s, pipeline.yaml's: the TPU trainer, which trains on the CPU "
        "here)",
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
        "and data; by default that run goes on: its finished steps reused, training from its last finished epoch",
    )
    for name in ("validation_fraction", "test_fraction", "max_bad_fraction"):
        local_cmd.add_argument(flag_of(name, CONVERT), type=float, metavar="FRACTION",
                               help=CONVERT[name].help_with_default())  # fmt: skip
    local_cmd.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        dest="beam_args",
        metavar="ARG",
        help="a Beam pipeline option for the convert step, e.g. --beam-arg=--direct_num_workers=2",
    )
    if dag_parameters:
        add_dag_parameters(local_cmd)
    predict_cmd = commands.add_parser(
        "predict",
        help="top labels for image files or texts, from an exported model on the CPU or a Vertex AI endpoint",
        description="Print the top labels with their probabilities for each image (or, for a text model, each "
        "--text and --text-file), from the export step's "
        "SavedModel (or a TFLite file of it) on this machine, or from the model a Vertex AI endpoint serves "
        '(--endpoint: each image sent as {"image_bytes": {"b64": ...}}). An image that cannot be decoded is '
        "reported on one line; the others are still answered (exit 2 when any could not be).",
    )
    where = predict_cmd.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="the export step's output dir (or its saved_model/, or a .tflite file)")
    where.add_argument("--endpoint", help="a Vertex AI endpoint (resource name or display name) serving an export")
    add_vertex_options(predict_cmd, for_jobs=False)
    predict_cmd.add_argument("images", nargs="*", metavar="IMAGE", help="image files: JPEG, PNG, GIF, BMP, WebP")
    predict_cmd.add_argument(
        "--text",
        action="append",
        default=[],
        metavar="TEXT",
        help="a text for a text model (repeat for more); tokenised as the conversion did",
    )
    predict_cmd.add_argument("--text-file", action="append", default=[], metavar="FILE",
                             help="a UTF-8 file holding one text for a text model (repeat for more)")  # fmt: skip
    predict_cmd.add_argument("--top", type=int, default=3, help="labels per image or text (default %(default)s)")
    predict_cmd.add_argument("--json", action="store_true", help="one JSON object per image or text instead")

    submit_cmd = commands.add_parser(
        "submit",
        help="submit pipeline.yaml to Vertex AI Pipelines",
        description="Create a Vertex AI PipelineJob from the compiled pipeline and submit it; print its resource "
        "name and console link; with --wait, follow its state to the end.",
    )
    add_vertex_options(submit_cmd)
    submit_cmd.add_argument("--job-id", default="", help="the job's id (default: <pipeline name>-<timestamp>)")
    submit_cmd.add_argument(
        "--experiment",
        default="",
        metavar="NAME",
        help="add the run to this Vertex AI Experiment (created if needed): its parameters and metrics side by side "
        "with the other runs'",
    )
    submit_cmd.add_argument(
        "--tensorboard",
        default="",
        metavar="RESOURCE",
        help="send the training job's logs to this Vertex AI TensorBoard (projects/P/locations/REGION/tensorboards/ID)",
    )
    submit_cmd.add_argument("--wait", action="store_true", help="follow the job's state until it ends")
    submit_cmd.add_argument(
        "--poll-interval", type=float, default=30.0, help="seconds between state checks with --wait (default 30)"
    )

    register_cmd = commands.add_parser(
        "register",
        help="upload an exported SavedModel to the Vertex AI Model Registry",
        description="Upload the export step's SavedModel (a gs:// folder) to the Vertex AI Model Registry with the "
        "prebuilt TensorFlow CPU serving container, as a new default version of --parent-model when given.",
    )
    add_vertex_options(register_cmd, for_jobs=False)
    register_cmd.add_argument("--model", required=True, help="gs:// folder of the exported SavedModel")
    register_cmd.add_argument("--display-name", default="tpu-image-classifier", help="default %(default)s")
    register_cmd.add_argument("--parent-model", default="", help="models/ID (or its resource name): add a version")
    register_cmd.add_argument("--pipeline-run", default="", help="the pipeline run to label the model with")
    register_cmd.add_argument("--label", action="append", dest="label_pairs", metavar="KEY=VALUE", help="a label")
    register_cmd.add_argument("--serving-image", default=None, help="serving container (default: Vertex AI's TF2 CPU)")

    deploy_cmd = commands.add_parser(
        "deploy",
        help="deploy a registered model version to a Vertex AI endpoint",
        description="Deploy a Model Registry version to an endpoint (created when none has that display name) with "
        "all of its traffic, then undeploy the model's older versions there; as the DAG's deploy step does.",
    )
    add_vertex_options(deploy_cmd, for_jobs=False)
    deploy_cmd.add_argument("--model", required=True, help="the model version, projects/P/locations/L/models/ID@V")
    deploy_cmd.add_argument("--endpoint", required=True, help="the endpoint's display name or resource name")
    for name, param in DEPLOY.items():
        deploy_cmd.add_argument(flag_of(name, DEPLOY), type=type(param.default), default=param.default,
                                help=param.help_with_default())  # fmt: skip

    batch_cmd = commands.add_parser(
        "batch-predict",
        help="run a Vertex AI batch prediction job over images on Cloud Storage",
        description="Predict with a registered model version over a gs:// folder of images (listed into a file "
        "list, each image sent as it is) or a .jsonl of instances; the predictions go to --output as JSONL.",
    )
    add_vertex_options(batch_cmd, for_jobs=False)
    batch_cmd.add_argument("--model", required=True, help="the model, projects/P/locations/L/models/ID[@VERSION]")
    batch_cmd.add_argument("--source", required=True, help="a gs:// folder of images, or a gs://....jsonl of instances")
    batch_cmd.add_argument("--output", required=True, help="gs:// folder for the predictions")
    batch_cmd.add_argument("--machine-type", default=None, help="prediction machine (default n1-standard-4)")
    batch_cmd.add_argument("--max-replicas", type=int, default=1, help="default %(default)s")
    batch_cmd.add_argument("--wait", action="store_true", help="follow the job until it ends")
    batch_cmd.add_argument("--poll-interval", type=float, default=30.0, help="seconds between checks (default 30)")

    schedule_cmd = commands.add_parser(
        "schedule", help="create, list, pause, resume or delete retraining schedules on Vertex AI"
    )
    schedule_actions = schedule_cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = schedule_actions.add_parser(
        "create",
        help="schedule the pipeline on a cron",
        description="Run the pipeline on a cron schedule. With caching on, a rerun over unchanged data reuses the "
        "conversion and every step after it (the fingerprint step sees no change).",
    )
    add_vertex_options(create)
    create.add_argument(
        "--cron", required=True, help='[TZ=Area/City] MINUTE HOUR DAY MONTH WEEKDAY, e.g. "TZ=Europe/Paris 0 3 * * 1"'
    )
    create.add_argument("--name", default="", help="the schedule's display name (default: <pipeline>-retrain)")
    create.add_argument(
        "--max-concurrent-runs", type=int, default=1, help="runs that may overlap (default %(default)s)"
    )
    create.add_argument("--max-runs", type=int, default=None, help="stop after this many runs (default: no limit)")
    listing = schedule_actions.add_parser("list", help="list the schedules")
    add_vertex_options(listing, for_jobs=False)
    listing.add_argument("--name", default="", help="only schedules with this display name")
    update = schedule_actions.add_parser(
        "update",
        help="point a schedule at the pipeline as it is now (a recompiled pipeline.yaml, new parameters)",
        description="A schedule keeps the pipeline spec, parameters and settings it was created with. update "
        "replaces them with what `schedule create` would send now (--template, --param, --pipeline-root, labels, "
        "service account, network), and the cron and run limits when given. Runs already started are not changed.",
    )
    add_vertex_options(update)
    update.add_argument("schedule", help="the schedule's resource name, id or display name")
    update.add_argument("--cron", default="", help="a new cron (default: keep it)")
    update.add_argument("--max-concurrent-runs", type=int, default=None, help="a new limit (default: keep it)")
    update.add_argument("--max-runs", type=int, default=None, help="a new limit (default: keep it)")
    for action in ("pause", "resume", "delete"):
        changer = schedule_actions.add_parser(action, help=f"{action} a schedule")
        add_vertex_options(changer, for_jobs=False)
        changer.add_argument("schedule", help="the schedule's resource name, id or display name")
        if action == "resume":
            changer.add_argument(
                "--catch-up",
                action="store_true",
                help="also start the runs missed while it was paused (default: resume from the next cron time)",
            )
    for sub in subcommands(parser).values():  # -v after the subcommand too (only when given: never undoes a first -v)
        if "-v" not in sub._option_string_actions:
            sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging")
    return parser


# pipeline parameters run-local sets itself, or through a flag of another name
LOCAL_OWN = ("source", "image_size", "epochs", "beam_args", "model_display_name", "model_root")
# parameters only Vertex AI acts on (kfp.local has no mail to send): run-local has no flag for them
CLOUD_ONLY = ("notify_emails", "tensorboard", "base_output_directory", "endpoint")


def dag_parameters() -> dict[str, inspect.Parameter]:
    """The pipeline's parameters, as the DAG declares them: the one declaration run-local's flags follow."""
    from pipeline.dag import build_pipeline

    return dict(inspect.signature(build_pipeline(registry=None).pipeline_func).parameters)


def add_dag_parameters(parser: argparse.ArgumentParser) -> None:
    """A flag for each pipeline parameter run-local has no flag for yet, typed and documented from the DAG."""
    taken = {action.dest for action in parser._actions}
    for name, parameter in dag_parameters().items():
        if name in taken or name in LOCAL_OWN or name in CLOUD_ONLY:
            continue
        flag, default = f"--{name.replace('_', '-')}", parameter.default
        help_text = f"pipeline parameter {name} (default {default!r})"
        if parameter.annotation is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif getattr(parameter.annotation, "__origin__", None) is list:
            parser.add_argument(flag, dest=name, default=None, metavar="A,B,...", help=help_text + ", comma-separated",
                                type=comma_separated)  # fmt: skip
        else:
            parser.add_argument(flag, dest=name, type=parameter.annotation, default=None, help=help_text)


def local_parameters(args: argparse.Namespace) -> dict:
    """The pipeline parameters run-local's flags set (the others keep the DAG's defaults)."""
    return {
        name: getattr(args, name)
        for name in dag_parameters()
        if name not in LOCAL_OWN and name not in CLOUD_ONLY and getattr(args, name, None) is not None
    }


def comma_separated(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpu-image-pipeline")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "unknown"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its name path, "run-local" or "schedule create"."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {inner}": p for inner, p in subcommands(sub).items()})
    return found


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The arguments, and the parser of the (sub)command they chose: an unknown flag gets that command's usage."""
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(dag_parameters="run-local" in words)
    args, unknown = parser.parse_known_args(argv)
    chosen = subcommands(parser)[" ".join(filter(None, (args.command, getattr(args, "action", None))))]
    if unknown:
        chosen.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args, chosen


def add_vertex_options(parser: argparse.ArgumentParser, for_jobs: bool = True) -> None:
    """The Vertex AI settings; each defaults to None so that environment variables and the config file can fill it."""
    group = parser.add_argument_group("Vertex AI (flags over TPU_PIPELINE_* variables over --config over defaults)")
    group.add_argument("--config", help="YAML config file of settings (see pipeline/vertex.example.yaml)")
    group.add_argument("--project", help="Google Cloud project (TPU_PIPELINE_PROJECT, GOOGLE_CLOUD_PROJECT)")
    group.add_argument("--region", help="Vertex AI region, e.g. europe-west4 (TPU_PIPELINE_REGION)")
    group.add_argument("--api-endpoint", help="API endpoint, e.g. a private one (default: <region>-aiplatform...)")
    group.add_argument("--anonymous", action="store_true", default=None, help="send no credentials (local endpoints)")
    group.add_argument(
        "--retry-timeout", type=float, help="seconds to keep retrying calls answered 429 or 503 (default 120)"
    )
    if not for_jobs:
        return
    group.add_argument("--template", help="compiled pipeline (default pipeline.yaml)")
    group.add_argument("--pipeline-root", help="gs:// folder for the run's artifacts (TPU_PIPELINE_PIPELINE_ROOT)")
    group.add_argument("--service-account", help="service account the run uses (TPU_PIPELINE_SERVICE_ACCOUNT)")
    group.add_argument("--network", help="VPC network to peer, projects/N/global/networks/NAME")
    group.add_argument("--display-name", help="display name (default: the pipeline's name)")
    group.add_argument("--label", action="append", dest="label_pairs", metavar="KEY=VALUE", help="a label; repeat")
    group.add_argument(
        "--param", action="append", dest="param_pairs", metavar="NAME=VALUE", help="a pipeline parameter; repeat"
    )
    caching = group.add_mutually_exclusive_group()
    caching.add_argument("--cache", dest="enable_caching", action="store_true", default=None, help="reuse cached steps")
    caching.add_argument("--no-cache", dest="enable_caching", action="store_false", help="run every step again")


def vertex_settings(args: argparse.Namespace):
    from components.vertex_client import SETTING_NAMES, load_settings
    from pipeline.vertex import parse_pairs

    flags = {name: getattr(args, name) for name in SETTING_NAMES if hasattr(args, name)}
    flags["labels"] = parse_pairs(getattr(args, "label_pairs", None), "--label")
    flags["parameters"] = parse_pairs(getattr(args, "param_pairs", None), "--param")
    return load_settings(flags, config_path=args.config)


def run_predict(args: argparse.Namespace) -> int:
    import json

    texts = bool(args.text or args.text_file)
    if texts == bool(args.images):
        raise UsageError("pass either images or --text/--text-file (a text model's inputs)" if texts
                         else "pass image files, or --text/--text-file for a text model")  # fmt: skip
    if texts and args.endpoint:
        raise UsageError("--endpoint takes images; predict texts with --model (the export step's output)")
    if texts:
        from pipeline.predict import predict_texts

        answers, errors = predict_texts(args.model, args.text, args.text_file, args.top)
    elif args.endpoint:
        from components.vertex_client import VertexError
        from pipeline.deployment import predict_endpoint

        try:
            answers, errors = predict_endpoint(vertex_settings(args), args.endpoint, args.images, args.top)
        except VertexError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    else:
        from pipeline.predict import predict

        answers, errors = predict(args.model, args.images, args.top)
    for answer in answers:
        if args.json:
            where = {"text": answer.text} if answer.text is not None else {"path": answer.path}
            print(json.dumps({**where, "top": [{"label": n, "probability": p} for n, p in answer.top]}))
        else:
            print(answer.line())
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 2 if errors else 0


def run_vertex(args: argparse.Namespace) -> int:
    from components.vertex_client import VertexError
    from pipeline import vertex

    settings = vertex_settings(args)
    try:
        if args.command == "register":
            from components.register.vertex import DEFAULT_SERVING_IMAGE, register

            register(settings, args.model, args.display_name, args.parent_model, args.pipeline_run,
                     args.serving_image or DEFAULT_SERVING_IMAGE)  # fmt: skip
        elif args.command == "deploy":
            from components.deploy.core import deploy

            deploy(settings, args.model, args.endpoint, args.machine_type, args.min_replicas, args.max_replicas)
        elif args.command == "batch-predict":
            from pipeline.deployment import BATCH_MACHINE_TYPE, batch_predict

            batch_predict(settings, args.model, args.source, args.output, args.machine_type or BATCH_MACHINE_TYPE,
                          args.max_replicas, args.wait, args.poll_interval)  # fmt: skip
        elif args.command == "submit":
            vertex.submit(settings, job_id=args.job_id, wait=args.wait, poll_seconds=args.poll_interval,
                          experiment=args.experiment, tensorboard=args.tensorboard)  # fmt: skip
        elif args.action == "create":
            vertex.create_schedule(settings, args.cron, args.name, args.max_concurrent_runs, args.max_runs)
        elif args.action == "list":
            vertex.list_schedules(settings, args.name)
        elif args.action == "update":
            vertex.update_schedule(settings, args.schedule, args.cron, args.max_concurrent_runs, args.max_runs)
        else:
            vertex.change_schedule(settings, args.action, args.schedule, getattr(args, "catch_up", False))
    except VertexError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args, chosen = parse(argv)
    configure_logging(args.verbose)
    if args.command in ("submit", "schedule", "register", "deploy", "batch-predict"):
        return run_vertex(args)
    if args.command == "predict":
        return run_predict(args)
    if args.command == "compile":
        from pipeline.accelerators import Scheduling
        from pipeline.compile import compile_pipeline

        scheduling = Scheduling(args.scheduling, args.max_wait, args.reservation)
        path = compile_pipeline(args.output, Images(registry=args.registry, tag=args.tag), args.accelerator, scheduling)
        print(f"compiled the pipeline for {args.accelerator} to {path}")
        if is_experimental(args.accelerator):
            log.warning("--accelerator %s is a multi-host slice, experimental: its launch is proven on local "
                        "processes only (docs/limits.md)", args.accelerator)  # fmt: skip
        if args.registry == DEFAULT_REGISTRY:
            log.warning(
                "the step images are named in the placeholder registry %s: pass --registry (your Artifact Registry "
                "repository, where make images PUSH=1 pushed them) before submitting this pipeline", DEFAULT_REGISTRY
            )  # fmt: skip
        return 0
    from pipeline.local import SUMMARY_FILE, LocalRunConfig, format_summary, run_local

    for name, least in (("epochs", 1), ("demo_per_class", 1)):  # never 0 for "the default"
        if getattr(args, name) is not None and getattr(args, name) < least:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} is too small: use {least} or more, "
                             "or leave it out for the default")  # fmt: skip
    from components.convert.core import check_beam_args

    check_beam_args(args.beam_args, list(chosen._option_string_actions))
    from components.models import check_image_size

    if args.model_name in (None, "auto", *IMAGE_MODELS) and args.image_size:  # (auto takes what every model takes)
        check_image_size(DEFAULT_MODELS["image"] if args.model_name in (None, "auto") else args.model_name,
                         args.image_size)  # fmt: skip
    # each step's own checks of the values given, before anything runs (its config checks them on creation)
    from components.convert.core import check_split_options
    from components.evaluate.core import EvaluateConfig, baseline_path
    from components.train.core import TrainConfig

    def given(params) -> dict:
        return {name: getattr(args, name) for name in params if getattr(args, name, None) is not None}

    split_options = {name: CONVERT[name] for name in ("validation_fraction", "test_fraction", "max_bad_fraction",
                                                      "num_shards")}  # fmt: skip
    check_split_options(argparse.Namespace(**{**defaults(split_options), **given(split_options)}), "examples")
    TrainConfig(examples_dir="", **given(TRAIN))
    EvaluateConfig(examples_dir="", model_dir="", output_dir="", **given(EVALUATE))  # (--baseline: below)
    if args.baseline_model is not None:  # checked before anything is written, as evaluate will check it
        from components.evaluate.core import check_baseline

        args.baseline_model = os.path.abspath(baseline_path(args.baseline_model))
        check_baseline(args.baseline_model)
    if args.screenshot:  # before the run, not after it
        from components.evaluate.browser import find_browser

        if not find_browser():
            raise UsageError("--screenshot: no headless browser here: install Chromium (apt-get install chromium), "
                             "or set TPU_PIPELINE_BROWSER to one")  # fmt: skip
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
            images=Images(registry=args.image_registry, tag=args.image_tag),
            accelerator=args.accelerator,
            screenshot=args.screenshot,
        )
    )
    print(format_summary(summary, os.path.join(args.work_dir, SUMMARY_FILE)))
    return 0


if __name__ == "__main__":
    run_main(main)
