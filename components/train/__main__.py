"""``python -m components.train``: train a model on converted TFRecords (the same code the DAG's step runs)."""

from __future__ import annotations

import argparse
import json

from components.cli import configure_logging, run_main
from components.train.core import PRECISIONS, TrainConfig, run
from components.train.models import MODELS


def build_parser() -> argparse.ArgumentParser:
    defaults = TrainConfig(examples_dir="", model_dir="")
    parser = argparse.ArgumentParser(
        prog="python -m components.train",
        description="Train a Keras model on the convert step's TFRecords under the best available distribution "
        "strategy (TPU, then GPUs, then the CPU).",
    )
    parser.add_argument("--examples", required=True, help="the convert step's output dir")
    parser.add_argument("--model-dir", required=True, help="where the model, weights and history.json go")
    parser.add_argument(
        "--model", default=defaults.model_name, help=f"one of {', '.join(sorted(MODELS))} (default %(default)s)"
    )
    parser.add_argument("--epochs", type=int, default=defaults.epochs, help="default %(default)s")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=defaults.per_replica_batch_size,
        help="per-replica batch size; the global batch is this times the replicas (default %(default)s)",
    )
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate, help="default %(default)s")
    parser.add_argument(
        "--precision", default=defaults.precision, help=f"one of {', '.join(PRECISIONS)} (default %(default)s)"
    )
    parser.add_argument(
        "--tpu",
        default=defaults.tpu,
        help="TPU name or address (default: the TPU_NAME variable, else GPUs, else the CPU)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="default %(default)s")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    result = run(
        TrainConfig(
            examples_dir=args.examples,
            model_dir=args.model_dir,
            model_name=args.model,
            epochs=args.epochs,
            per_replica_batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            precision=args.precision,
            tpu=args.tpu,
            seed=args.seed,
        )
    )
    print(json.dumps({"final": result["final"], "model_dir": args.model_dir}))
    return 0


if __name__ == "__main__":
    run_main(main)
