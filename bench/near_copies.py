"""How far the data checks' near-copy measure separates copies from distinct pictures, on the demo's 1,797 digits:
each digit written as the demo writes it, converted as the conversion converts it (``encode_image``), then reduced to
the check's 16x16 grey thumbnail (``components.check_data.statistics``). Side by side:

- the closest pair of distinct digits (the cosine similarity of their thumbnails), and how many digits have another
  digit at or above the check's threshold (a false copy);
- each digit against a copy of it re-encoded as a JPEG of quality 95, 75, 50 and 30 before the conversion: the
  lowest similarity, and how many copies fall below the threshold (a copy missed);
- beside them, the usual perceptual hash (a 64-bit dHash of the converted image): how many distinct digits share
  their hash with another.

The last line is a JSON object.

    .venv/bin/python bench/near_copies.py
"""

from __future__ import annotations

import io
import json
import os
import sys

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
QUALITIES = (95, 75, 50, 30)


def thumbnail(jpeg: bytes) -> np.ndarray:
    from PIL import Image

    from components.check_data.statistics import thumbnail

    with Image.open(io.BytesIO(jpeg)) as image:
        return thumbnail(image.convert("L"))


def dhash(jpeg: bytes) -> int:
    """A 64-bit difference hash: is each of 8x9 grey pixels brighter than its left neighbour."""
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as image:
        grey = np.asarray(image.convert("L").resize((9, 8), Image.Resampling.BILINEAR), dtype=np.int16)
    return int.from_bytes(np.packbits(grey[:, 1:] > grey[:, :-1]).tobytes(), "big")


def main() -> None:
    from PIL import Image
    from sklearn.datasets import load_digits

    from components.check_data.core import THRESHOLDS
    from components.check_data.statistics import unit_thumbnails as unit
    from components.convert.core import encode_image
    from components.demo_data import DEFAULT_SIZE

    threshold = THRESHOLDS["near_duplicate_similarity"][0]
    scans = (255 - np.round(load_digits().images * (255.0 / 16.0))).astype(np.uint8)

    def written(pixels: np.ndarray, quality: int) -> bytes:  # as components.demo_data writes a digit
        buffer = io.BytesIO()
        Image.fromarray(pixels).resize((DEFAULT_SIZE, DEFAULT_SIZE), Image.Resampling.BICUBIC).save(
            buffer, format="JPEG", quality=quality
        )
        return buffer.getvalue()

    def converted(source: bytes) -> np.ndarray:
        return thumbnail(encode_image(source, DEFAULT_SIZE, 95))

    originals = unit(np.stack([converted(written(pixels, 95)) for pixels in scans]))
    hashes = [dhash(encode_image(written(pixels, 95), DEFAULT_SIZE, 95)) for pixels in scans]
    shared = sum(1 for value in hashes if hashes.count(value) > 1)
    similarity = originals @ originals.T
    np.fill_diagonal(similarity, -1.0)
    closest = similarity.max(axis=1)
    result = {
        "images": len(scans),
        "threshold": threshold,
        "distinct_closest": round(float(closest.max()), 4),
        "distinct_at_or_above_threshold": int((closest >= threshold).sum()),
        "copies": {},
        "dhash_shared": shared,
    }
    print(f"{len(scans)} digits; the threshold {threshold}")
    print(f"distinct digits: the closest pair {closest.max():.4f}; {result['distinct_at_or_above_threshold']} "
          "digits with another at or above the threshold")  # fmt: skip

    def re_encoded(source: bytes, quality: int) -> bytes:  # a copy: the file opened and saved again
        buffer = io.BytesIO()
        Image.open(io.BytesIO(source)).save(buffer, format="JPEG", quality=quality)
        return buffer.getvalue()

    print(f"a 64-bit dHash: {shared} distinct digits ({shared / len(scans):.0%}) share their hash with another")
    for quality in QUALITIES:
        copies = unit(np.stack([converted(re_encoded(written(pixels, 95), quality)) for pixels in scans]))
        pairs = (originals * copies).sum(axis=1)
        missed = int((pairs < threshold).sum())
        result["copies"][quality] = {"lowest": round(float(pairs.min()), 4), "missed": missed}
        print(f"copies re-encoded at JPEG quality {quality}: the lowest {pairs.min():.4f}; {missed} below the "
              "threshold")  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
