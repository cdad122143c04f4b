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
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    # pixel values are 0..16 ink intensity: map to dark ink on white paper, like a scan
    pixels = (255 - np.round(digits.images * (255.0 / 16.0))).astype(np.uint8)
    parent = os.path.dirname(os.path.abspath(root)) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".digits-", dir=parent)
    written = {name: 0 for name in CLASS_NAMES}
    try:
        for index, (image, target) in enumerate(zip(pixels, digits.target, strict=True)):
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
    log.info(
        "%s %d digit images in %d classes under %s", "kept the same" if kept else "wrote", total, len(CLASS_NAMES), root
    )
    return total


def same_files(written: str, existing: str) -> bool:
    """Whether ``existing`` holds exactly the files of ``written``, byte for byte."""
    import filecmp

    def listing(root: str) -> list[str]:
        return sorted(
            os.path.relpath(os.path.join(folder, name), root) for folder, _, names in os.walk(root) for name in names
        )

    if not os.path.isdir(existing):
        return False
    names = listing(written)
    if names != listing(existing):
        return False
    _, mismatch, errors = filecmp.cmpfiles(written, existing, names, shallow=False)
    return not mismatch and not errors
