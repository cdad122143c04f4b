"""``python -m pipeline``: compile the DAG, or run it locally under ``kfp.local``."""

from __future__ import annotations

import argparse
import os

from components.cli import UsageError, configure_logging, run_main
from pipeline.images import DEFAULT_REGISTRY, DEFAULT_TAG, Images


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline",
        description="Compile the image-classification DAG to pipeline.yaml, or run it locally under kfp.local.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compile_cmd = commands.add_parser("compile", help="compile the DAG to pipeline.yaml (KFP v2 IR)")
    compile_cmd.add_argument("--output", default="pipeline.yaml", help="where to write (default %(default)s)")
    compile_cmd.add_argument(
        "--registry", default=DEFAULT_REGISTRY, help="registry of the step images (default %(default)s)"
    )
    compile_cmd.add_argument("--tag", default=DEFAULT_TAG, help="tag of the step images (default %(default)s)")

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
        "--source", default="", help="an image folder <root>/<class>/*.jpg or a CSV manifest (default: the demo)"
    )
    local_cmd.add_argument(
        "--image-size",
        type=int,
        default=0,
        help="square side of the converted images (default: 32 for the demo, 192 otherwise)",
    )
    local_cmd.add_argument(
        "--epochs", type=int, default=0, help="training epochs (default: 15 for the demo, 20 otherwise)"
    )
    local_cmd.add_argument("--model", dest="model_name", help="model name (default codelab_convnet)")
    local_cmd.add_argument(
        "--batch-size", dest="per_replica_batch_size", type=int, help="per-replica batch size (default 32)"
    )
    local_cmd.add_argument("--learning-rate", type=float, help="Adam learning rate (default 0.002)")
    local_cmd.add_argument(
        "--precision",
        choices=("auto", "float32", "mixed_bfloat16"),
        help="training precision (default auto: bfloat16 where the hardware has it)",
    )
    local_cmd.add_argument(
        "--lr-schedule", choices=("constant", "rampup_exponential"), help="learning-rate schedule (default constant)"
    )
    local_cmd.add_argument(
        "--demo-per-class",
        type=int,
        default=0,
        help="write at most this many demo images per class, for a quick check (default: all)",
    )
    local_cmd.add_argument(
        "--cache",
        action="store_true",
        help="reuse steps whose inputs did not change (the source's fingerprint is one: new images convert again)",
    )
    local_cmd.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        dest="beam_args",
        metavar="ARG",
        help="a Beam pipeline option for the convert step, e.g. --beam-arg=--direct_num_workers=2",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    if args.command == "compile":
        from pipeline.compile import compile_pipeline

        path = compile_pipeline(args.output, Images(registry=args.registry, tag=args.tag))
        print(f"compiled the pipeline to {path}")
        return 0
    from pipeline.local import SUMMARY_FILE, LocalRunConfig, format_summary, run_local

    for name in ("image_size", "epochs", "demo_per_class"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} must not be negative")
    optional = {
        name: getattr(args, name)
        for name in ("model_name", "per_replica_batch_size", "learning_rate", "precision", "lr_schedule")
        if getattr(args, name) is not None
    }
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
        )
    )
    print(format_summary(summary, os.path.join(args.work_dir, SUMMARY_FILE)))
    return 0


if __name__ == "__main__":
    run_main(main)
