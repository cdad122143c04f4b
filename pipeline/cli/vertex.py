"""``python -m pipeline submit | register | deploy | batch-predict | schedule``: the Vertex AI commands."""

from __future__ import annotations

import argparse
import sys

from components.params import DEPLOY, flag_of


def add_commands(commands) -> None:
    add_check(commands)
    add_submit(commands)
    add_register(commands)
    add_deploy(commands)
    add_batch_predict(commands)
    add_schedule(commands)


def add_submit(commands) -> None:
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
    add_no_preflight(submit_cmd)
    submit_cmd.add_argument(
        "--poll-interval", type=float, default=30.0, help="seconds between state checks with --wait (default 30)"
    )


def add_check(commands) -> None:
    check_cmd = commands.add_parser(
        "check",
        help="check a Google Cloud project for a first run: APIs, images, accounts, roles, bucket, machine, quota",
        description="The preflight that submit and schedule run first: each item ok, MISSING (with the command that "
        "fixes it; exit 2) or unknown (what could not be read, and why). Nothing is created.",
    )
    add_vertex_options(check_cmd)


def add_no_preflight(parser) -> None:
    parser.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="do not check the project first (python -m pipeline check runs it alone)",
    )


def add_register(commands) -> None:
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


def add_deploy(commands) -> None:
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
        deploy_cmd.add_argument(
            flag_of(name, DEPLOY), type=type(param.default), default=param.default, help=param.help_with_default()
        )


def add_batch_predict(commands) -> None:
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


def add_schedule(commands) -> None:
    schedule_cmd = commands.add_parser(
        "schedule", help="create, list, update, pause, resume or delete retraining schedules on Vertex AI"
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
    add_no_preflight(create)
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
    add_no_preflight(update)
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


def add_vertex_options(parser: argparse.ArgumentParser, for_jobs: bool = True) -> None:
    """The Vertex AI settings; each defaults to None so that environment variables and the config file can fill it."""
    group = parser.add_argument_group("Vertex AI (flags over TPU_PIPELINE_* variables over --config over defaults)")
    group.add_argument("--config", help="YAML config file of settings (see pipeline/vertex.example.yaml)")
    group.add_argument(
        "--project",
        help="Google Cloud project (TPU_PIPELINE_PROJECT, GOOGLE_CLOUD_PROJECT; else the "
        "one your credentials name: gcloud config set project)",
    )
    group.add_argument(
        "--region",
        help="Vertex AI region, e.g. europe-west4 (TPU_PIPELINE_REGION, GOOGLE_CLOUD_REGION, GOOGLE_CLOUD_LOCATION)",
    )
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
    group.add_argument(
        "--model",
        dest="model_ref",
        metavar="NAME|FILE.py[:FUNCTION]|MODULE:FUNCTION",
        help="the model to train (the model_name parameter): a built-in one, or your own; a local file is checked "
        "here and uploaded under the pipeline root, once per content (models/<sha256>/), and the run trains that "
        "copy; a module must be in the step images (docs/your-model.md)",
    )
    group.add_argument(
        "--hparam",
        action="append",
        dest="hparam_pairs",
        metavar="NAME=VALUE",
        help="a hyperparameter of the model (the hparams parameter); repeat",
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
    model = {"model_name": getattr(args, "model_ref", None), "hparams": getattr(args, "hparam_pairs", None)}
    if any(model.values()):
        flags["parameters"] = {**(flags["parameters"] or {}), **{k: v for k, v in model.items() if v}}
    return load_settings(flags, config_path=args.config)


def run(args: argparse.Namespace) -> int:
    from components.vertex_client import VertexError
    from pipeline import vertex

    settings = vertex_settings(args)
    try:
        if args.command == "register":
            from components.artifacts.exported import check_blessed, kept_blessing
            from components.vertex_resources import DEFAULT_SERVING_IMAGE, register

            export = args.model.rstrip("/").rsplit("/", 1)[0]  # (its export.json, beside saved_model/)
            check_blessed(kept_blessing(export), f"--model {args.model} was exported anyway")
            register(
                settings,
                args.model,
                args.display_name,
                args.parent_model,
                args.pipeline_run,
                args.serving_image or DEFAULT_SERVING_IMAGE,
            )
        elif args.command == "deploy":
            from components.vertex_resources import deploy

            deploy(settings, args.model, args.endpoint, args.machine_type, args.min_replicas, args.max_replicas)
        elif args.command == "batch-predict":
            from pipeline.deployment import BATCH_MACHINE_TYPE, batch_predict

            batch_predict(
                settings,
                args.model,
                args.source,
                args.output,
                args.machine_type or BATCH_MACHINE_TYPE,
                args.max_replicas,
                args.wait,
                args.poll_interval,
            )
        elif args.command == "check":
            from components.vertex_client import check_settings

            check_settings(settings)
            vertex.check_run(settings)
            vertex.check_project(settings, everything=True)
        elif args.command == "submit":
            vertex.submit(
                settings,
                job_id=args.job_id,
                wait=args.wait,
                poll_seconds=args.poll_interval,
                experiment=args.experiment,
                tensorboard=args.tensorboard,
                preflight=args.preflight,
            )
        elif args.action == "create":
            vertex.create_schedule(
                settings, args.cron, args.name, args.max_concurrent_runs, args.max_runs, args.preflight
            )
        elif args.action == "list":
            vertex.list_schedules(settings, args.name)
        elif args.action == "update":
            vertex.update_schedule(
                settings, args.schedule, args.cron, args.max_concurrent_runs, args.max_runs, args.preflight
            )
        else:
            vertex.change_schedule(settings, args.action, args.schedule, getattr(args, "catch_up", False))
    except VertexError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0
