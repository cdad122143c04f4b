"""The image models side by side, and what a pretrained backbone buys, in one run on this machine's CPU.

1. **The model table**: each image model's parameter count (10 classes), the smallest image it takes, and its
   training throughput on the CPU: ``python -m components.train`` on ``--images`` synthetic photo-like images at
   ``--image-size`` (a warm-up epoch that traces and compiles, then timed epochs; the fastest counts), float32 and
   ``--backend tensorflow`` (auto's choice on CPUs), batch 32.
2. **Transfer**: there is no network here for ImageNet's weights, so a backbone is pretrained (``--weights none``)
   on part of the demo digits and its weights saved; the task is a small set of other digits, ``--fine-tune-data``
   images a class: the backbone fine-tuned from those weights (its head, then its top blocks) against the same
   backbone and the default convnet trained from scratch for ``--scratch-epochs``. ``--upstream halves``: pretrained
   on every other image of each class, the task drawn from the rest (a larger labelled set of the same kind, as
   ImageNet is to photos); ``classes``: pretrained on the digits 0 to 4, the task the digits 5 to 9 (features of
   other classes). Each is evaluated on the task's test split (``python -m components.evaluate``); the first epoch
   whose validation accuracy reaches the from-scratch backbone's final one is reported too. The fine-tuned backbone
   is exported (``python -m components.export``): the test accuracy of the SavedModel, the float TFLite file and the
   int8 one, and their sizes.

The last line is a JSON object.

    .venv/bin/python bench/transfer.py [--image-size 96] [--images 256] [--part models|transfer|both]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)


def cpu_name() -> str:
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def step(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"{args[0]} failed: {result.stderr.strip().splitlines()[-3:]}")
    return result.stdout


def convert(source: str, output: str, size: int) -> None:
    step("components.convert", "--source", source, "--output", output, "--image-size", str(size))


def history(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "history.json")) as handle:
        return json.load(handle)["history"]


def test_accuracy(examples: str, model_dir: str) -> float:
    output = model_dir + "-evaluation"
    step(
        "components.evaluate",
        "--examples",
        examples,
        "--model-dir",
        model_dir,
        "--output",
        output,
        "--min-accuracy",
        "0",
    )
    with open(os.path.join(output, "metrics.json")) as handle:
        return json.load(handle)["accuracy"]


def exported_formats(examples: str, model_dir: str) -> dict:
    """Each exported format's test accuracy and size, as export measured them (``export.json``)."""
    output = model_dir + "-export"
    step("components.export", "--model-dir", model_dir, "--examples", examples, "--output", output)
    with open(os.path.join(output, "export.json")) as handle:
        formats = json.load(handle)["formats"]
    return {
        name: {"test_accuracy": entry["test_accuracy"], "megabytes": round(entry["bytes"] / 1e6, 2)}
        for name, entry in formats.items()
    }


def synthetic_photos(root: str, count: int, size: int) -> None:
    """``count`` noisy gradient photos in 4 classes, JPEG, larger than ``size`` (so conversion resizes them)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(count):
        label = index % 4
        folder = os.path.join(root, f"class{label}")
        os.makedirs(folder, exist_ok=True)
        ramp = np.linspace(0, 255, size * 2, dtype=np.float32)
        base = np.stack([np.add.outer(ramp, ramp) / 2] * 3, axis=-1) * (0.4 + 0.2 * label)
        noisy = np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(noisy).save(os.path.join(folder, f"{index}.jpg"), quality=90)


def model_table(args, root: str) -> list[dict]:
    from components.models import BUILTINS, ModelSpec, build_model

    source, examples = os.path.join(root, "photos"), os.path.join(root, "photos-examples")
    synthetic_photos(source, args.images, args.image_size)
    convert(source, examples, args.image_size)
    rows = []
    for name in [name for name, builtin in BUILTINS.items() if builtin.modality == "image"]:
        least = BUILTINS[name].min_image_size
        params = build_model(name, ModelSpec.for_images(max(least, 32), 10)).count_params()
        model_dir = os.path.join(root, f"speed-{name}")
        step(
            "components.train",
            "--examples",
            examples,
            "--model-dir",
            model_dir,
            "--model",
            name,
            "--weights",
            "none",
            "--epochs",
            str(args.speed_epochs),
            "--batch-size",
            "32",
            "--precision",
            "float32",
            "--backend",
            "tensorflow",
        )
        with open(os.path.join(model_dir, "model_config.json")) as handle:
            config = json.load(handle)
        seconds = min(history(model_dir)["epoch_seconds"][1:])  # after the warm-up epoch
        steps = 0
        with open(os.path.join(examples, "stats.json")) as handle:
            steps = json.load(handle)["counts"]["train"] // config["global_batch_size"]
        rate = steps * config["global_batch_size"] / seconds
        rows.append({"model": name, "parameters": params, "min_image_size": least, "images_per_second": round(rate, 1)})
        print(
            f"{name:20s} {params:>12,d} params  min {least:>3d} px  {rate:8.1f} images/s at {args.image_size} px",
            flush=True,
        )
        shutil.rmtree(model_dir, ignore_errors=True)
    return rows


def first_epoch_reaching(curve: list[float], level: float):
    return next((epoch for epoch, value in enumerate(curve, start=1) if value >= level), None)


def transfer(args, root: str) -> dict:
    from components.demo_data import write_digits

    digits = os.path.join(root, "digits")
    write_digits(digits, args.digit_size)
    upstream, task = os.path.join(root, f"upstream-{args.upstream}"), os.path.join(root, f"task-{args.upstream}")
    for name in sorted(os.listdir(digits)):
        files = sorted(os.listdir(os.path.join(digits, name)))
        if args.upstream == "halves":
            parts = {upstream: files[0::2], task: files[1::2][: args.fine_tune_data]}
        else:
            parts = {upstream: files} if int(name) < 5 else {task: files[: args.fine_tune_data]}
        for folder, chosen in parts.items():
            os.makedirs(os.path.join(folder, name))
            for file in chosen:
                shutil.copy(os.path.join(digits, name, file), os.path.join(folder, name, file))
    upstream_examples, task_examples = upstream + "-examples", task + "-examples"
    convert(upstream, upstream_examples, args.digit_size)
    convert(task, task_examples, args.digit_size)

    import keras

    from components.models import backbone_of

    common = ("--batch-size", "32", "--precision", "float32", "--backend", "tensorflow")
    pretrained_dir = os.path.join(root, "pretrained")
    step(
        "components.train",
        "--examples",
        upstream_examples,
        "--model-dir",
        pretrained_dir,
        "--model",
        args.model,
        "--weights",
        "none",
        "--epochs",
        str(args.pretrain_epochs),
        *common,
    )
    weights = os.path.join(root, "backbone.weights.h5")
    trained = keras.models.load_model(os.path.join(pretrained_dir, "model.keras"), compile=False)
    backbone_of(trained).save_weights(weights)

    runs = {}
    plans = {
        f"{args.model} fine-tuned ({args.upstream})": (
            "--model",
            args.model,
            "--weights",
            weights,
            "--epochs",
            str(args.head_epochs),
            "--fine-tune-epochs",
            str(args.fine_tune_epochs),
        ),
        f"{args.model} from scratch": (
            "--model",
            args.model,
            "--weights",
            "none",
            "--epochs",
            str(args.scratch_epochs),
        ),
        "codelab_convnet_bn from scratch": ("--model", "codelab_convnet_bn", "--epochs", str(args.scratch_epochs)),
    }
    for name, options in plans.items():
        model_dir = os.path.join(root, name.replace(" ", "_"))
        started = time.monotonic()
        step("components.train", "--examples", task_examples, "--model-dir", model_dir, *options, *common)
        seconds = time.monotonic() - started
        curve = history(model_dir)["val_accuracy"]
        runs[name] = {
            "epochs": len(curve),
            "test_accuracy": test_accuracy(task_examples, model_dir),
            "final_val_accuracy": round(curve[-1], 4),
            "train_seconds": round(seconds, 1),
            "curve": curve,
        }
    tuned = f"{args.model} fine-tuned ({args.upstream})"
    runs[tuned]["exported"] = exported_formats(task_examples, os.path.join(root, tuned.replace(" ", "_")))
    shown = [
        f"{name} test {entry['test_accuracy']:.4f} ({entry['megabytes']} MB)"
        for name, entry in runs[tuned]["exported"].items()
    ]
    print(f"{tuned} exported: " + ", ".join(shown), flush=True)
    scratch = runs[f"{args.model} from scratch"]["curve"][-1]
    for name, run in runs.items():
        run["first_epoch_at_scratch_final"] = first_epoch_reaching(run.pop("curve"), scratch)
        print(
            f"{name:40s} {run['epochs']:>3d} epochs  test {run['test_accuracy']:.4f}  val "
            f"{run['final_val_accuracy']:.4f}  at the scratch model's final val from epoch "
            f"{run['first_epoch_at_scratch_final']}  {run['train_seconds']:.0f}s",
            flush=True,
        )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--part", choices=("models", "transfer", "both"), default="both")
    parser.add_argument("--image-size", type=int, default=96, help="the model table's images (default 96)")
    parser.add_argument("--images", type=int, default=256, help="the model table's images (default 256)")
    parser.add_argument("--speed-epochs", type=int, default=3, help="a warm-up epoch, then timed ones (default 3)")
    parser.add_argument("--model", default="mobilenet_v3_small", help="the backbone of the transfer part")
    parser.add_argument("--digit-size", type=int, default=32, help="the transfer part's image size (default 32)")
    parser.add_argument("--pretrain-epochs", type=int, default=15)
    parser.add_argument("--upstream", choices=("halves", "classes"), default="halves")
    parser.add_argument("--fine-tune-data", type=int, default=40, help="the task's images a class (default 40)")
    parser.add_argument("--head-epochs", type=int, default=5)
    parser.add_argument("--fine-tune-epochs", type=int, default=5)
    parser.add_argument("--scratch-epochs", type=int, default=15)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-transfer-")
    result: dict = {"cpu": cpu_name(), "cores": os.cpu_count(), "args": vars(args)}
    try:
        if args.part in ("models", "both"):
            result["models"] = model_table(args, root)
        if args.part in ("transfer", "both"):
            result["transfer"] = transfer(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
