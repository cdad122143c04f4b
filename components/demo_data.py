"""The demo dataset that ships with the install: scikit-learn's handwritten digits as a folder of JPEGs per class.

1,797 real 8x8 scans, 10 classes, written out as ``<root>/<digit>/<index>.jpg`` (upscaled to ``size`` pixels) so that
the demo runs through the same folder-loading code as a user's ``flower_photos/<class>/*.jpg``. No network.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

log = logging.getLogger(__name__)

CLASS_NAMES = tuple(str(digit) for digit in range(10))
DEFAULT_SIZE = 16  # the 8x8 scans upscaled twice: every stroke kept, a quarter of the pixels of 32


def write_digits(root: str, size: int = DEFAULT_SIZE, per_class_limit: int | None = None) -> int:
    """Writes the digits under ``root`` (replacing it whole, through a temporary folder); returns the image count.
    A ``root`` that already holds the same images byte for byte is kept as it is, so that its fingerprint (paths,
    sizes, modification times) stays the same: a rerun resumes an interrupted run or hits the cache.

    Args:
        root: the folder to create: ``<root>/<class_name>/<index>.jpg``.
        size: side of the written JPEGs (the 8x8 scans are upscaled with bicubic interpolation).
        per_class_limit: at most this many images per class (for quick tests); None writes all 1,797.
    """
    unchanged = recorded_count(root, size, per_class_limit)
    if unchanged:  # (without making them again: 1,797 JPEGs, half a second of each run-local)
        log.info("kept the same %d digit images in %d classes under %s", unchanged, len(CLASS_NAMES), root)
        return unchanged
    import numpy as np
    from PIL import Image

    scans, targets = digit_scans()
    # pixel values are 0..16 ink intensity: map to dark ink on white paper, like a scan
    pixels = (255 - np.round(scans * (255.0 / 16.0))).astype(np.uint8)
    parent = os.path.dirname(os.path.abspath(root)) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".digits-", dir=parent)
    written = {name: 0 for name in CLASS_NAMES}
    try:
        for index, (image, target) in enumerate(zip(pixels, targets, strict=True)):
            name = CLASS_NAMES[target]
            if per_class_limit is not None and written[name] >= per_class_limit:
                continue
            os.makedirs(os.path.join(staging, name), exist_ok=True)
            picture = Image.fromarray(image, mode="L").resize((size, size), Image.Resampling.BICUBIC)
            picture.save(os.path.join(staging, name, f"{index:04d}.jpg"), quality=95)
            written[name] += 1
        kept = same_files(staging, root)
        if kept:
            shutil.rmtree(staging)
        else:
            if os.path.exists(root):
                shutil.rmtree(root)
            os.replace(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    total = sum(written.values())
    record(root, size, per_class_limit)
    log.info(
        "%s %d digit images in %d classes under %s", "kept the same" if kept else "wrote", total, len(CLASS_NAMES), root
    )
    return total


def digit_scans():
    """The 1,797 scans (``[N, 8, 8]``, ink 0..16) and their digits, as ``sklearn.datasets.load_digits`` gives them:
    read from the file scikit-learn ships, without importing scikit-learn (1.6 s of a first run-local)."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz") if spec else ""
    if not os.path.exists(path):  # (another layout of scikit-learn's files: its own reader)
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.images, digits.target
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)


def record_path(root: str) -> str:
    """Where ``write_digits`` records what it wrote under ``root``: beside it, hidden, so that it is no source file."""
    root = os.path.abspath(root)
    return os.path.join(os.path.dirname(root), f".{os.path.basename(root)}.json")


def relative_files(root: str) -> list[str]:
    """The files under ``root``, as paths there."""
    return [os.path.relpath(os.path.join(folder, name), root) for folder, _, names in os.walk(root) for name in names]


def file_stats(root: str) -> dict[str, list[int]]:
    """Each file under ``root`` (its path there) -> [bytes, modification time in ns]."""
    stats = {name: os.stat(os.path.join(root, name)) for name in relative_files(root)}
    return {name: [stat.st_size, stat.st_mtime_ns] for name, stat in stats.items()}


def record(root: str, size: int, per_class_limit: int | None) -> None:
    import json

    with open(record_path(root), "w", encoding="utf-8") as handle:
        json.dump({"size": size, "per_class_limit": per_class_limit, "files": file_stats(root)}, handle)


def recorded_count(root: str, size: int, per_class_limit: int | None) -> int:
    """The number of images under ``root`` when they are those ``write_digits`` wrote there with these arguments,
    untouched since (the same files, sizes and modification times); 0 otherwise."""
    import json

    try:
        with open(record_path(root), encoding="utf-8") as handle:
            recorded = json.load(handle)
    except (OSError, ValueError):
        return 0
    if (recorded.get("size"), recorded.get("per_class_limit")) != (size, per_class_limit) or not os.path.isdir(root):
        return 0
    files = recorded.get("files") or {}
    return len(files) if file_stats(root) == files else 0


def same_files(written: str, existing: str) -> bool:
    """Whether ``existing`` holds exactly the files of ``written``, byte for byte."""
    import filecmp

    if not os.path.isdir(existing):
        return False
    names = sorted(relative_files(written))
    if names != sorted(relative_files(existing)):
        return False
    _, mismatch, errors = filecmp.cmpfiles(written, existing, names, shallow=False)
    return not mismatch and not errors
