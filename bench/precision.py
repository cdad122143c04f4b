"""Which models learn the demo, and what bfloat16 costs in accuracy on the CPU, side by side in one run: the demo
digits converted once at ``--image-size``, then the demo's training (``auto``'s learning rate, the default batch,
``--epochs`` epochs) of each of ``--models`` in float32 and in mixed_bfloat16, each with ``--seeds`` seeds, every run a
fresh ``python -m components.train`` then ``python -m components.evaluate``. Prints each run's test accuracy, the first
epoch whose validation accuracy passes 0.5 and its training seconds; then, per model, the mean per precision and the
bfloat16 - float32 difference in points, and each model's training time as a ratio of the first model's. The last
line is a JSON object.

    .venv/bin/python bench/precision.py [--image-size 32] [--epochs 15] [--batch-size 32] [--seeds 3]
        [--backend tensorflow]
        [--models codelab_convnet_bn,codelab_convnet,squeezenet]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRECISIONS = ("float32", "mixed_bfloat16")


def step(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"{' '.join(args[:1])} failed: {result.stderr.strip().splitlines()[-1:]}")


def first_epoch_over(history: dict, level: float = 0.5):
    """The first epoch (1-based) whose validation accuracy passes ``level``, or None."""
    for epoch, accuracy in enumerate(history.get("val_accuracy", []), start=1):
        if accuracy > level:
            return epoch
    return None


def train_and_evaluate(examples: str, root: str, model: str, precision: str, seed: int, args) -> dict:
    name = f"{model}-{precision}-{seed}"
    model_dir, evaluation = os.path.join(root, name), os.path.join(root, f"eval-{name}")
    started = time.monotonic()
    step(
        "components.train",
        "--examples",
        examples,
        "--model-dir",
        model_dir,
        "--epochs",
        str(args.epochs),
        "--precision",
        precision,
        "--backend",
        args.backend,
        "--seed",
        str(seed),
        "--model",
        model,
        "--batch-size",
        str(args.batch_size),
    )
    seconds = time.monotonic() - started
    step(
        "components.evaluate",
        "--examples",
        examples,
        "--model-dir",
        model_dir,
        "--output",
        evaluation,
        "--min-accuracy",
        "0",
    )
    with open(os.path.join(evaluation, "metrics.json")) as handle:
        accuracy = json.load(handle)["accuracy"]
    with open(os.path.join(model_dir, "history.json")) as handle:
        history = json.load(handle)["history"]
    return {
        "model": model,
        "precision": precision,
        "seed": seed,
        "test_accuracy": accuracy,
        "train_seconds": round(seconds, 1),
        "first_epoch_val_over_half": first_epoch_over(history),
        "final_loss": round(history["loss"][-1], 4),
    }


def summarise(runs: list[dict], models: list[str]) -> dict:
    """Per model: the mean test accuracy per precision, the points bfloat16 loses, the mean training seconds and
    their ratio to the first model's."""
    summary = {}
    for model in models:
        mine = [r for r in runs if r["model"] == model]
        means = {p: statistics.mean(r["test_accuracy"] for r in mine if r["precision"] == p) for p in PRECISIONS}
        seconds = statistics.mean(r["train_seconds"] for r in mine)
        summary[model] = {
            "mean_test_accuracy": {p: round(m, 4) for p, m in means.items()},
            "bfloat16_points_lost": round((means["float32"] - means["mixed_bfloat16"]) * 100, 2),
            "mean_train_seconds": round(seconds, 1),
        }
    first = summary[models[0]]["mean_train_seconds"]
    for model in models:
        summary[model]["train_time_ratio"] = round(summary[model]["mean_train_seconds"] / first, 2)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32, help="per-device batch (default 32, the demo's)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--backend", default="tensorflow", choices=("tensorflow", "jax"))
    parser.add_argument(
        "--models",
        default="codelab_convnet_bn,codelab_convnet,squeezenet",
        help="image models, comma-separated; ratios to the first (default %(default)s)",
    )
    args = parser.parse_args()
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    sys.path.insert(0, REPO_ROOT)
    from components.train.placement import read_cpu_flags

    with tempfile.TemporaryDirectory(prefix="bench-precision-") as root:
        from components.demo_data import write_digits

        source, examples = os.path.join(root, "digits"), os.path.join(root, "examples")
        write_digits(source, args.image_size)
        step("components.convert", "--source", source, "--output", examples, "--image-size", str(args.image_size))
        runs = []
        for seed in range(args.seeds):
            for model in models:  # in turns, so that a busy spell of the machine falls on every model and precision
                for precision in PRECISIONS:
                    run = train_and_evaluate(examples, root, model, precision, seed, args)
                    runs.append(run)
                    print(
                        f"{model:16s} {precision:15s} seed {seed}: test accuracy {run['test_accuracy']:.4f}, "
                        f"validation over 0.5 at epoch {run['first_epoch_val_over_half']}, final loss "
                        f"{run['final_loss']}, {run['train_seconds']} s",
                        flush=True,
                    )
    summary = summarise(runs, models)
    for model, line in summary.items():
        means = line["mean_test_accuracy"]
        print(
            f"{model}: mean test accuracy float32 {means['float32']:.4f}, mixed_bfloat16 "
            f"{means['mixed_bfloat16']:.4f} (bfloat16 loses {line['bfloat16_points_lost']:.2f} points); training "
            f"{line['mean_train_seconds']} s, {line['train_time_ratio']}x {models[0]}'s"
        )
    print(
        json.dumps(
            {
                "image_size": args.image_size,
                "epochs": args.epochs,
                "batch_size": args.batch_size,
                "backend": args.backend,
                "cpu": platform.processor() or platform.machine(),
                "cpu_bf16": sorted(read_cpu_flags() & {"amx_bf16", "avx512_bf16"}),
                "runs": runs,
                "models": summary,
            }
        )
    )


if __name__ == "__main__":
    main()
