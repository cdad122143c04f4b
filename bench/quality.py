"""The pipeline's defaults beside classical baselines, on the same split, in one run: ``run-local`` with no flags on
``--source`` (the bundled demo digits without it), then scikit-learn baselines trained on that run's train split and
scored on its test split, as the TFRecords hold them:

- images: HOG (8x8-pixel cells, 9 orientations) with a colour histogram, into an RBF SVC; PCA (50 components) into
  a logistic regression;
- texts: TF-IDF of words and word pairs into a logistic regression.

Prints the pipeline's figures (its test accuracy, and the SavedModel's on the test files or texts as clients send
them), each baseline's, and the pipeline against the best baseline; the last line is a JSON object.

    .venv/bin/python bench/quality.py [--source PATH] [--work-dir DIR] [-- run-local flags...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)


def run_pipeline(source: str, work_dir: str, extra: list[str]) -> tuple[dict, float]:
    """``run-local`` with its defaults (and ``extra``): its summary and its seconds."""
    command = [sys.executable, "-m", "pipeline", "run-local", "--work-dir", work_dir, "--no-resume", *extra]
    if source:
        command += ["--source", source]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"run-local failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    with open(os.path.join(work_dir, "summary.json"), encoding="utf-8") as handle:
        return json.load(handle), time.monotonic() - started


def split_arrays(examples_dir: str, split: str) -> tuple[list, np.ndarray, str]:
    """(images uint8 [n, h, w, 3] or raw texts, class ids, modality) of one split, as the TFRecords hold them."""
    from components.artifacts.examples import make_dataset
    from components.modalities import modality_of
    from components.schema import read_stats

    stats = read_stats(examples_dir)
    reading = modality_of(stats).reading(stats)
    text = not reading.pictures  # (a text's own words, as a client sends them)
    dataset = make_dataset(examples_dir, split, reading, 256, training=False, sources=text)
    inputs, labels = [], []
    for batch in dataset.as_numpy_iterator():
        inputs.extend(batch[2] if text else batch[0])
        labels.extend(batch[1].argmax(-1))
    if text:
        inputs = [value.decode("utf-8") if isinstance(value, bytes) else str(value) for value in inputs]
    return inputs, np.array(labels), "text" if text else "image"


def hog(images: np.ndarray, cell: int = 8, bins: int = 9) -> np.ndarray:
    """Histograms of oriented gradients of grey images (unsigned orientations, magnitude-weighted, each cell's
    histogram L2-normalised), beside an 8-bin histogram of each colour channel."""
    grey = images.astype(np.float32).mean(axis=-1)
    gy, gx = np.gradient(grey, axis=(1, 2))
    magnitude, angle = np.hypot(gx, gy), np.rad2deg(np.arctan2(gy, gx)) % 180
    n, height, width = grey.shape
    cells_y, cells_x = max(height // cell, 1), max(width // cell, 1)
    step_y, step_x = height // cells_y, width // cells_x
    features = np.zeros((n, cells_y, cells_x, bins), np.float32)
    which = np.minimum((angle / (180 / bins)).astype(int), bins - 1)
    for y in range(cells_y):
        for x in range(cells_x):
            window = (slice(None), slice(y * step_y, (y + 1) * step_y), slice(x * step_x, (x + 1) * step_x))
            for b in range(bins):
                features[:, y, x, b] = np.where(which[window] == b, magnitude[window], 0).sum(axis=(1, 2))
    features /= np.linalg.norm(features, axis=-1, keepdims=True) + 1e-6
    colours = np.stack(
        [np.histogram(image[..., c], bins=8, range=(0, 256))[0] for image in images for c in range(3)]
    ).reshape(n, 24) / (height * width)
    return np.concatenate([features.reshape(n, -1), colours], axis=1)


def baselines(train: tuple, test: tuple, modality: str) -> dict[str, float]:
    """Each baseline's test accuracy, trained on ``train`` ((inputs, labels))."""
    from sklearn.decomposition import PCA
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    (x_train, y_train), (x_test, y_test) = train, test
    if modality == "text":
        models = {
            "TF-IDF 1-2 grams + LogReg": (
                make_pipeline(
                    TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1),
                    LogisticRegression(C=10, max_iter=2000),
                ),
                x_train,
                x_test,
            )
        }
    else:
        pixels_train = np.asarray(x_train).reshape(len(x_train), -1) / 255.0
        pixels_test = np.asarray(x_test).reshape(len(x_test), -1) / 255.0
        components = min(50, len(x_train) - 1, pixels_train.shape[1])
        models = {
            "HOG + colour histogram + SVC": (
                make_pipeline(StandardScaler(), SVC(C=10)),
                hog(np.asarray(x_train)),
                hog(np.asarray(x_test)),
            ),
            "PCA + LogReg": (
                make_pipeline(StandardScaler(), PCA(components, random_state=0), LogisticRegression(max_iter=2000)),
                pixels_train,
                pixels_test,
            ),
        }
    scores = {}
    for name, (model, features_train, features_test) in models.items():
        model.fit(features_train, y_train)
        scores[name] = float((model.predict(features_test) == y_test).mean())
    return scores


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default="", help="an image folder per class or a text source (default: demo)")
    parser.add_argument("--work-dir", default="", help="run-local's work dir (default: a temporary folder)")
    args, extra = parser.parse_known_args()
    extra = [arg for arg in extra if arg != "--"]
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="quality-")
    summary, seconds = run_pipeline(args.source, work_dir, extra)
    examples_dir = summary["examples_dir"]
    x_train, y_train, modality = split_arrays(examples_dir, "train")
    x_test, y_test, _ = split_arrays(examples_dir, "test")
    started = time.monotonic()
    scores = baselines((x_train, y_train), (x_test, y_test), modality)
    baseline_seconds = time.monotonic() - started
    served = (summary.get("raw_files") or summary.get("raw_texts") or {}).get("test_accuracy")
    ours = served if served is not None else summary["test_accuracy"]
    best_name = max(scores, key=scores.get)
    print(
        f"source: {args.source or 'the demo digits'} ({modality}s; train {len(y_train)}, test {len(y_test)}, "
        f"{len(summary['class_names'])} classes); CPU: {cpu_name()}"
    )
    print(
        f"pipeline, defaults ({summary['training']['model_name']}): test accuracy {summary['test_accuracy']:.4f}"
        + (f", {served:.4f} on the test {modality}s as clients send them" if served is not None else "")
        + f"; blessed {summary['blessed']}; {seconds:.0f} s"
    )
    for name, score in scores.items():
        print(f"{name}: {score:.4f}")
    print(
        f"pipeline / best baseline ({best_name}): {ours / scores[best_name]:.3f} ({baseline_seconds:.0f} s for "
        "the baselines)"
    )
    print(
        json.dumps(
            {
                "source": args.source or "demo",
                "modality": modality,
                "train": len(y_train),
                "test": len(y_test),
                "classes": len(summary["class_names"]),
                "pipeline": {
                    "model": summary["training"]["model_name"],
                    "test_accuracy": summary["test_accuracy"],
                    "served_accuracy": served,
                    "blessed": summary["blessed"],
                    "seconds": round(seconds, 1),
                },
                "baselines": scores,
                "best_baseline": best_name,
                "ratio_to_best": round(ours / scores[best_name], 4),
                "cpu": cpu_name(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
