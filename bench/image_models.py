"""The default image model against classical baselines over several random splits of one image folder (a folder per
class), in one process: a small set's single test split moves a figure by a point or more an image, too coarse to tell
two training settings apart. Each split holds out 30% for test and 10% for validation, and keeps the images that share
the conversion's perceptual split key (near-copies) in one part, as the conversion does. The images are decoded and
resized as the conversion does (``--image-size``, the source's median shorter side by default, as ``auto``). The
built-in model (``--model``, ``auto``'s by default) is trained as ``run-local`` trains it: Adam keeping the weights'
moving average, batch 32, stopped and the weights of the best validation loss kept, the batch-norm statistics
re-estimated; once with
``auto``'s epochs and learning rate (``components.params.AUTO_TRAINING``), and once with each ``--also
EPOCHS:RATE``. Beside it, scikit-learn's HOG + colour histogram into an RBF SVC and PCA into a logistic regression
(``bench/quality.py``), trained on the same train part. Prints each split's figures (and the epochs each setting
trained) and their means; the last line is a JSON object.

    .venv/bin/python bench/image_models.py --source FOLDER [--splits 3] [--also 20:0.002]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)


def read_folder(root: str, size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(pixels uint8 [N, size, size, 3] as the conversion makes them, class ids, the side used)."""
    from PIL import Image

    from components.decoding import conversion_square

    names = sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)))
    files = [
        (index, os.path.join(root, name, file))
        for index, name in enumerate(names)
        for file in sorted(os.listdir(os.path.join(root, name)))
    ]
    if not size:  # auto: the median shorter side, as the conversion picks it
        from components.convert.sizing import auto_image_size

        size, _ = auto_image_size(int(statistics.median(min(Image.open(path).size) for _, path in files)))
    pixels = []
    for _, path in files:
        with open(path, "rb") as handle:
            pixels.append(np.asarray(conversion_square(handle.read(), size)))
    return np.stack(pixels), np.array([index for index, _ in files]), size


def grouped_parts(pixels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, validation, test) indices: 60%, 10% and 30% of the images, with the images that share the conversion's
    perceptual split key in one part, as the conversion splits them (a random split puts near-copies on both sides,
    and its test figure rewards a model that remembers them)."""
    from PIL import Image

    from components.convert.split_keys import image_key

    keys = [image_key(Image.fromarray(image)) for image in pixels]
    groups: dict[bytes, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    order = [groups[key] for key in sorted(groups)]
    np.random.RandomState(seed).shuffle(order)
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    for members in order:  # each group to the first part still short of its share: test, then validation
        n = len(pixels)
        part = 2 if len(parts[2]) < 0.3 * n else 1 if len(parts[1]) < 0.1 * n else 0
        parts[part].extend(members)
    return tuple(np.array(part) for part in parts)


def fit_as_training_does(model, rate: float, epochs: int, train: tuple, validation: tuple) -> int:
    """Trains ``model`` as the train step does: Adam keeping the weights' moving average, validation on the average,
    stopped and the best epoch's weights kept (``components.train.averaging``, ``keep_best``), batch 32; returns the
    epochs it trained."""
    import tempfile

    import keras

    from components.train.averaging import averaging_adam, validation_on_average
    from components.train.keep_best import auto_patience, keep_best_callback
    from components.train.placement import Placement

    model.compile(averaging_adam(rate, epochs * -(-len(train[0]) // 32)), "categorical_crossentropy")
    with tempfile.TemporaryDirectory() as folder:
        placement = Placement(keras.backend.backend(), "cpu", 1, "OneDevice")
        keep = keep_best_callback(folder, placement, auto_patience(epochs), 0)
        history = model.fit(
            *train,
            batch_size=32,
            epochs=epochs,
            verbose=0,
            shuffle=True,
            validation_data=validation,
            callbacks=[validation_on_average(), keep],
        )
    return len(history.history["loss"])


def model_accuracy(name: str, epochs: int, rate: float, data, parts, seed: int) -> tuple[float, int]:
    """(the test accuracy, the epochs trained before the early stop)."""
    import keras
    import tensorflow as tf

    from components.models import load
    from components.models.spec import ModelSpec
    from components.train.batch_norm import reestimate

    (pixels, labels), (train, validation, test) = data, parts
    keras.utils.set_random_seed(seed)
    classes = int(labels.max()) + 1
    model = load(name).build(ModelSpec.for_images(pixels.shape[1], classes))
    one_hot = keras.utils.to_categorical(labels, classes)
    trained = fit_as_training_does(
        model, rate, epochs, (pixels[train], one_hot[train]), (pixels[validation], one_hot[validation])
    )
    reestimate(model, tf.data.Dataset.from_tensor_slices((pixels[train], one_hot[train])).batch(32), "tensorflow")
    accuracy = float((model.predict(pixels[test], verbose=0).argmax(-1) == labels[test]).mean())
    return accuracy, trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="a folder of images, a folder per class")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--model", default="auto")
    parser.add_argument("--image-size", type=int, default=0, help="0: the median shorter side, as auto")
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="EPOCHS:RATE",
        help="other training settings to set beside auto's",
    )
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from bench.quality import baselines
    from components.modalities import auto_training

    _, auto = auto_training("image", pretrained=False)
    settings = {f"auto ({auto['epochs']} epochs at {auto['learning_rate']:g})": (auto["epochs"], auto["learning_rate"])}
    for also in args.also:
        epochs, rate = also.split(":")
        settings[f"{int(epochs)} epochs at {float(rate):g}"] = (int(epochs), float(rate))
    from components.models import resolve_auto
    from components.models.source import parse_ref

    model = resolve_auto(parse_ref(args.model), "image").text
    pixels, labels, size = read_folder(args.source, args.image_size)
    figures: dict[str, list[float]] = {}
    epochs_run: dict[str, list[int]] = {}  # the epochs each setting trained before its early stop
    started = time.monotonic()
    for seed in range(args.splits):
        parts = grouped_parts(pixels, seed)
        train, _, test = parts
        trained: dict[str, int] = {}
        for name, value in baselines((pixels[train], labels[train]), (pixels[test], labels[test]), "image").items():
            figures.setdefault(name, []).append(value)
        for name, (epochs, rate) in settings.items():
            accuracy, trained[name] = model_accuracy(model, epochs, rate, (pixels, labels), parts, seed)
            figures.setdefault(f"{model}, {name}", []).append(accuracy)
            epochs_run.setdefault(name, []).append(trained[name])
        shown = ", ".join(f"{name} {values[-1]:.4f}" for name, values in figures.items())
        counts = ", ".join(f"{name} {count}" for name, count in trained.items())
        print(f"split {seed} ({len(train)} train, {len(test)} test): {shown}; epochs trained: {counts}", flush=True)
    means = {name: float(np.mean(values)) for name, values in figures.items()}
    best = max(("HOG + colour histogram + SVC", "PCA + LogReg"), key=means.get)
    for name, mean in means.items():
        print(f"{name}: mean {mean:.4f} over {args.splits} splits ({mean / means[best]:.3f}x {best})")
    print(
        json.dumps(
            {
                "source": args.source,
                "splits": args.splits,
                "images": len(labels),
                "image_size": size,
                "settings": settings,
                "means": means,
                "best_baseline": best,
                "ratios": {name: mean / means[best] for name, mean in means.items()},
                "per_split": figures,
                "epochs_run": epochs_run,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
