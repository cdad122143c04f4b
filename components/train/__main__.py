"""``python -m components.train``: train a model on converted TFRecords (the same code the DAG's step runs)."""

from __future__ import annotations

import argparse
import json

from components.cli import UsageError, configure_logging, console_script
from components.flags import ArgumentParser, add_param, config_from_args
from components.params import TRAIN, TUNE
from components.train.config import LR_SCHEDULES, TrainConfig
from components.train.core import run
from components.train.placement import BACKENDS, PRECISIONS


def build_parser() -> argparse.ArgumentParser:
    defaults = TrainConfig(examples_dir="")
    parser = ArgumentParser(
        prog="python -m components.train",
        description="Train a Keras model on the convert step's TFRecords on the backend that reaches the hardware "
        "(Keras on JAX on TPUs; TensorFlow or JAX on GPUs and the CPU) over every device. Vertex AI's "
        "AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR are used when the matching flag is not given. "
        "A run killed mid-way resumes after its last backed-up epoch when started again with the same checkpoint dir.",
    )
    parser.add_argument("--examples", dest="examples_dir", required=True, help="the convert step's output dir")
    parser.add_argument(
        "--model-dir", default="", help="where the model, weights and history.json go (default: $AIP_MODEL_DIR)"
    )
    add_param(parser, TRAIN, "model_name", metavar="auto|NAME|FILE.py[:FUNCTION]|MODULE:FUNCTION")
    add_param(parser, TRAIN, "hparams", action="append", metavar="NAME=VALUE", type=str)
    for name in ("epochs", "per_replica_batch_size", "learning_rate"):
        add_param(parser, TRAIN, name)
    add_param(parser, TRAIN, "weights", metavar="auto|imagenet|none|PATH")
    parser.add_argument(
        "--weights-cache",
        default="",
        help="where --weights imagenet downloads the weights to, and "
        "finds them again (local or gs://; default: Keras's cache, ~/.keras)",
    )
    for name in ("fine_tune_epochs", "fine_tune_blocks", "fine_tune_learning_rate"):
        add_param(parser, TRAIN, name)
    add_param(parser, TRAIN, "lr_schedule", listed=LR_SCHEDULES)
    parser.add_argument(
        "--rampup-epochs",
        type=int,
        default=defaults.rampup_epochs,
        help="rampup_exponential: epochs of linear ramp-up (default %(default)s)",
    )
    parser.add_argument(
        "--lr-decay",
        type=float,
        default=defaults.lr_decay,
        help="rampup_exponential: decay per epoch after the ramp (default %(default)s)",
    )
    add_param(parser, TRAIN, "precision", listed=PRECISIONS)
    add_param(parser, TRAIN, "backend", listed=BACKENDS)
    parser.add_argument(
        "--cpu-replicas",
        type=int,
        default=defaults.cpu_replicas,
        help="train on N virtual CPU devices: TensorFlow's logical devices under MirroredStrategy, XLA host devices "
        "under JAX's DataParallel (default %(default)s)",
    )
    parser.add_argument(
        "--hosts",
        type=int,
        default=defaults.hosts,
        help="hosts of a multi-host TPU slice: more than 1 connects them with jax.distributed, and each reads its "
        "share of the files; several local processes: set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and "
        "JAX_PROCESS_ID in each (default %(default)s)",
    )
    for name in ("jit_compile", "steps_per_execution", "augment"):
        add_param(parser, TRAIN, name)
    parser.add_argument(
        "--checkpoint-dir",
        default="",
        help="preemption checkpoints (default: $AIP_CHECKPOINT_DIR, else <model-dir>/checkpoints)",
    )
    parser.add_argument(
        "--patience",
        default="auto",
        metavar="auto|EPOCHS",
        help="stop after this many epochs without a better validation loss; 0: never early (default auto: a third "
        "of the epochs, at least 5); the best epoch's weights are kept either way",
    )
    parser.add_argument(
        "--backup-interval",
        default="auto",
        metavar="auto|SECONDS",
        help="seconds of training between two preemption backups at least, each at an epoch's end; 0: every epoch; "
        "auto (default): 19 times the last backup's duration, so that backups take at most 5%% of the time",
    )
    parser.add_argument(
        "--tensorboard-dir",
        default="",
        help="TensorBoard logs (default: $AIP_TENSORBOARD_LOG_DIR, else <model-dir>/logs)",
    )
    add_param(parser, TRAIN, "seed")
    add_param(parser, TUNE, "tune_trials")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def backup_interval(text: str) -> float | None:
    """``--backup-interval``: None for auto, else the seconds (a one-line usage error for anything else)."""
    if text == "auto":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise UsageError(f"--backup-interval {text!r}: give auto or a number of seconds >= 0")
    return seconds


def patience(text: str) -> int | None:
    """``--patience``: None for auto, else the epochs (a one-line usage error for anything else)."""
    if text == "auto":
        return None
    if not text.isdigit():
        raise UsageError(f"--patience {text!r}: give auto or a number of epochs >= 0")
    return int(text)


def train_config(args) -> TrainConfig:
    """The training config of the parsed flags (``build_parser``'s)."""
    overrides = {"backup_interval": backup_interval(args.backup_interval), "patience": patience(args.patience)}
    return config_from_args(TrainConfig, args, **overrides)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    config = train_config(args)
    if args.tune_trials:  # a local search: the best trial's model in --model-dir, tuning.json beside it
        from components.train.tuning import search

        result = search(config, args.tune_trials)
    else:
        result = run(config)
    print(
        json.dumps(
            {
                "final": result["final"],
                "model_dir": result["model_dir"],
                "precision": result["precision"],
                "backend": result["backend"],
                "replicas": result["replicas"],
                "processes": result["processes"],
                "resumed_after_epoch": result["resumed_after_epoch"],
                "epochs_trained": result["epochs_trained"],
            }
        )
    )
    return 0


cli = console_script(main)  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()
