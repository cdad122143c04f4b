"""``python -m pipeline compile``: the DAG to ``pipeline.yaml`` for a compile target."""

from __future__ import annotations

import argparse
import logging

from pipeline.accelerators import ACCELERATORS, DEFAULT_ACCELERATOR, SCHEDULING_STRATEGIES, is_experimental
from pipeline.images import DEFAULT_REGISTRY, DEFAULT_TAG, Images

log = logging.getLogger(__name__)


def add_command(commands) -> None:
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
        "--max-queue",
        default="",
        metavar="DURATION",
        help="how long the training job may wait for its machines (a project without quota for them, a region "
        "without capacity) before the train step cancels it and fails saying so, e.g. 30m, 2h, or 0 for no limit "
        "(default 1h; with --scheduling flex-start, --max-wait bounds it)",
    )
    compile_cmd.add_argument(
        "--max-train-time",
        default="",
        metavar="DURATION",
        help="how long the training job may run before Vertex AI cancels it (a hung job stops costing), e.g. 6h, "
        "90m (default 7 days, Google Cloud Pipeline Components')",
    )
    compile_cmd.add_argument(
        "--max-step-time",
        default="",
        metavar="DURATION",
        help="how long each other step may run before it ends itself in one line (one stuck on Cloud Storage or a "
        "service stops holding the run; KFP gives Vertex AI's tasks no timeout), e.g. 2h, 90m, or 0 for no limit "
        "(default 12h)",
    )
    compile_cmd.add_argument(
        "--notify-email",
        dest="notify_emails",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="mail each run's outcome (succeeded, failed, cancelled) to this address; repeat for up to 3 (default: no "
        "mail step)",
    )
    compile_cmd.add_argument(
        "--reservation",
        default="",
        metavar="RESERVATION",
        help="with --scheduling standard: consume a Compute Engine reservation: any (any matching one of the "
        "project), none, or a reservation's resource name projects/P/zones/Z/reservations/NAME (default: Vertex "
        "AI's)",
    )


def run(args: argparse.Namespace) -> int:
    from pipeline.accelerators import Scheduling
    from pipeline.compile import compile_pipeline

    scheduling = Scheduling(
        args.scheduling, args.max_wait, args.reservation, args.max_queue, args.max_train_time, args.max_step_time
    )
    path = compile_pipeline(
        args.output,
        Images(registry=args.registry, tag=args.tag),
        args.accelerator,
        scheduling,
        tuple(args.notify_emails),
    )
    print(f"compiled the pipeline for {args.accelerator} to {path}")
    if is_experimental(args.accelerator):
        log.warning(
            "--accelerator %s is a multi-host slice, experimental: its launch is proven on local "
            "processes only (docs/limits.md)",
            args.accelerator,
        )
    if args.registry == DEFAULT_REGISTRY:
        log.warning(
            "the step images are named in the placeholder registry %s: pass --registry (your Artifact Registry "
            "repository, where make images PUSH=1 pushed them) before submitting this pipeline",
            DEFAULT_REGISTRY,
        )
    if log.isEnabledFor(logging.DEBUG):
        for line in step_images(path):
            log.debug(line)
    return 0


def step_images(path: str) -> list[str]:
    """What each step of a compiled pipeline runs in: its container image, and the image of the jobs it launches
    (the train step's, on the accelerator's machines)."""
    from pipeline.images import read_template, template_images

    return [f"{what} runs in {image}" for what, image in template_images(read_template(path)).items()]
