"""How far the data checks' near-copy measure separates copies from distinct pictures, on the demo's 1,797 digits:
each digit written as the demo writes it (at ``--digit-size``, the demo's own by default), converted as the conversion
converts it (``encode_image``), then reduced to the check's 16x16 grey thumbnail (``components.check_data.statistics``).
Side by side:

- the closest pair of distinct digits (the cosine similarity of their thumbnails), and how many digits have another
  digit at or above the check's threshold (a false copy);
- each digit against a copy of it re-encoded as a JPEG of quality 95, 75, 50 and 30 before the conversion: the
  lowest similarity, and how many copies fall below the threshold (a copy missed);
- the split's perceptual key (``components.convert.split_keys``), which keeps near-copies in one split: how many
  distinct pictures share one (and the largest such group), and how many copies of each kind keep their original's
  key, and so its split.

``--photos DIR`` measures the same on the photographs in a folder instead (any format the conversion reads),
converted at ``--image-size``: each against copies re-encoded at those qualities and a copy at half the size (a
re-upload), and every photograph against every other. ``docs/data-checks.md`` says where a set of real photographs
nobody here made comes from (scikit-image's, scikit-learn's and matplotlib's sample photographs).

The last line is a JSON object.

    .venv/bin/python bench/near_copies.py [--digit-size 32]
    .venv/bin/python bench/near_copies.py --photos /tmp/photos --image-size 192
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from components.demo_data import DEFAULT_SIZE  # noqa: E402

QUALITIES = (95, 75, 50, 30)


def thumbnail(jpeg: bytes) -> np.ndarray:
    from PIL import Image

    from components.check_data.statistics import thumbnail

    with Image.open(io.BytesIO(jpeg)) as image:
        return thumbnail(image.convert("L"))


def split_keys(sources: list[bytes], copies: dict[str, list[bytes]], image_size: int) -> dict:
    """The split's perceptual key of each picture as converted at ``image_size``: how many distinct keys the
    pictures have (and the largest group that shares one), and per kind of copy the share that keeps its
    original's key."""
    from collections import Counter

    from components.convert.split_keys import image_key
    from components.decoding import conversion_square

    def key(source: bytes) -> bytes:
        return image_key(conversion_square(source, image_size))

    keys = [key(source) for source in sources]
    groups = Counter(keys)
    result = {"distinct_keys": len(groups), "largest_group": max(groups.values()), "same_key": {}}
    print(
        f"the split key: {len(groups)} distinct keys for {len(keys)} pictures (the largest group "
        f"{result['largest_group']})"
    )
    for kind, found in copies.items():
        same = sum(key(copy) == original for copy, original in zip(found, keys, strict=True)) / len(keys)
        result["same_key"][kind] = round(same, 4)
        print(f"the split key, copies ({kind}): {same:.1%} keep their original's key (and split)")
    return result


def measure(label: str, names: list[str], originals: np.ndarray, copies: dict[str, np.ndarray]) -> dict:
    """The figures of one set: ``originals`` (N, 256) thumbnails, ``copies`` the thumbnails of a copy of each, by
    kind. Beside each correlation, what the check's whole rule (``components.check_data.leakage.near_copies``, with
    its default thresholds) makes of the pairs: the copies it misses, the distinct pictures it calls copies."""
    from components.check_data.leakage import FLAT_SIMILARITY as FLAT
    from components.check_data.leakage import near_copies
    from components.check_data.statistics import unit_thumbnails as unit
    from components.check_data.thresholds import THRESHOLDS

    threshold, levels = THRESHOLDS["near_duplicate_similarity"][0], THRESHOLDS["near_duplicate_levels"][0]

    def copy_of(held_out: np.ndarray, train: np.ndarray) -> bool:
        return near_copies(held_out[None], train, threshold, text=False, levels=levels) == 1

    units = unit(originals)
    similarity = units @ units.T
    np.fill_diagonal(similarity, -1.0)
    first, second = np.unravel_index(int(similarity.argmax()), similarity.shape)
    closest = similarity.max(axis=1)
    others = [np.delete(originals, index, axis=0) for index in range(len(originals))]
    false_copies = [names[index] for index in range(len(originals)) if copy_of(originals[index], others[index])]
    result = {
        "images": len(originals),
        "threshold": threshold,
        "levels": levels,
        "distinct_closest": round(float(closest.max()), 4),
        "distinct_closest_pair": [names[first], names[second]],
        "distinct_at_or_above_threshold": int((closest >= threshold).sum()),
        "distinct_called_copies": len(false_copies),
        "copies": {},
    }
    print(
        f"{len(originals)} {label}; copies at a correlation of {threshold}, or of {FLAT} with a difference of at "
        f"most {levels} grey levels"
    )
    print(
        f"distinct {label}: the closest pair {closest.max():.4f} ({names[first]}, {names[second]}); "
        f"{result['distinct_at_or_above_threshold']} with another at or above {threshold}; "
        f"{len(false_copies)} called a copy of another by the rule"
    )
    for kind, found in copies.items():
        pairs = (units * unit(found)).sum(axis=1)
        below = int((pairs < threshold).sum())
        missed = [name for index, name in enumerate(names) if not copy_of(found[index], originals[index : index + 1])]
        result["copies"][kind] = {
            "lowest": round(float(pairs.min()), 4),
            "lowest_of": names[int(pairs.argmin())],
            "below_threshold": below,
            "missed": missed,
        }
        print(
            f"copies ({kind}): the lowest {pairs.min():.4f} ({names[int(pairs.argmin())]}); {below} below "
            f"{threshold}; {len(missed)} missed by the rule{': ' + ', '.join(missed) if missed else ''}"
        )
    return result


def digits(size: int) -> None:
    from PIL import Image
    from sklearn.datasets import load_digits

    from components.convert.items import encode_image

    scans = (255 - np.round(load_digits().images * (255.0 / 16.0))).astype(np.uint8)
    names = [f"digit {index}" for index in range(len(scans))]

    def written(pixels: np.ndarray, quality: int) -> bytes:  # as components.demo_data writes a digit
        buffer = io.BytesIO()
        Image.fromarray(pixels).resize((size, size), Image.Resampling.BICUBIC).save(
            buffer, format="JPEG", quality=quality
        )
        return buffer.getvalue()

    def converted(source: bytes) -> np.ndarray:
        return thumbnail(encode_image(source, size, 95))

    def re_encoded(source: bytes, quality: int) -> bytes:  # a copy: the file opened and saved again
        buffer = io.BytesIO()
        Image.open(io.BytesIO(source)).save(buffer, format="JPEG", quality=quality)
        return buffer.getvalue()

    sources = [written(pixels, 95) for pixels in scans]
    originals = np.stack([converted(source) for source in sources])
    copied = {f"JPEG quality {quality}": [re_encoded(source, quality) for source in sources] for quality in QUALITIES}
    copies = {kind: np.stack([converted(copy) for copy in found]) for kind, found in copied.items()}
    result = measure(f"digits at {size} px", names, originals, copies)
    result["split_key"] = split_keys(sources, copied, size)
    result["image_size"] = size
    print(json.dumps(result))


def photos(folder: str, image_size: int) -> None:
    from PIL import Image

    from components.convert.items import encode_image

    names = sorted(name for name in os.listdir(folder) if not name.startswith("."))
    sources = []
    for name in names:
        with open(os.path.join(folder, name), "rb") as handle:
            sources.append(handle.read())

    def converted(source: bytes) -> np.ndarray:
        return thumbnail(encode_image(source, image_size, 95))

    def saved(source: bytes, quality: int, scale: float = 1.0) -> bytes:  # the file opened, perhaps resized, saved
        buffer = io.BytesIO()
        with Image.open(io.BytesIO(source)) as image:
            image = image.convert("RGB")
            if scale != 1.0:
                size = (round(image.width * scale), round(image.height * scale))
                image = image.resize(size, Image.Resampling.LANCZOS)
            image.save(buffer, format="JPEG", quality=quality)
        return buffer.getvalue()

    kinds = [(f"JPEG quality {quality}", quality, 1.0) for quality in QUALITIES] + [("half size, JPEG 75", 75, 0.5)]
    originals = np.stack([converted(source) for source in sources])
    copied = {kind: [saved(source, quality, scale) for source in sources] for kind, quality, scale in kinds}
    copies = {kind: np.stack([converted(copy) for copy in found]) for kind, found in copied.items()}
    result = measure(f"photographs from {folder} at {image_size} px", names, originals, copies)
    result["split_key"] = split_keys(sources, copied, image_size)
    result["image_size"] = image_size
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", default="", help="a folder of photographs to measure instead of the demo digits")
    parser.add_argument("--image-size", type=int, default=192, help="the conversion's size for --photos (192)")
    parser.add_argument(
        "--digit-size", type=int, default=DEFAULT_SIZE, help=f"the digits' side, written and converted ({DEFAULT_SIZE})"
    )
    args = parser.parse_args()
    if args.photos:
        photos(args.photos, args.image_size)
    else:
        digits(args.digit_size)


if __name__ == "__main__":
    main()
