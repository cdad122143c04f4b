"""How large the conversion's outputs are: ``--image-size auto`` (the source images' typical shorter side, read
from a sample of their headers) and the number of shards (about 150 MB each, as TPUs read them best)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from apache_beam.io.filesystems import FileSystems

from components.imaging import MAX_AUTO_IMAGE_SIZE

# TPU guidance: shards of roughly 100-200 MB, so that many can be read in parallel without tiny-file overhead.
TARGET_SHARD_BYTES = 150 * 1024 * 1024


# A re-encoded JPEG at quality 95 takes roughly this many bytes per pixel (measured on photos; digits are smaller).
ESTIMATED_JPEG_BYTES_PER_PIXEL = 0.5


AUTO_SAMPLE = 200  # images whose headers --image-size auto reads, spread over the listing


def typical_shorter_side(paths: Sequence[str], sample: int = AUTO_SAMPLE) -> int | None:
    """The median shorter side of up to ``sample`` of the images (spread evenly over ``paths``, so over every
    class), read from their headers alone, on 16 threads (a ``gs://`` source answers each read in tens of
    milliseconds); None when none of them can be read. Also what the train step's advice compares its size with."""
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    def shorter_side(path: str) -> int | None:
        try:
            with open_header(path) as handle, Image.open(handle) as image:
                return min(image.size)
        except Exception:  # a bad file is the conversion's to quarantine, with its reason
            return None

    picked = [paths[index * len(paths) // sample] for index in range(sample)] if len(paths) > sample else list(paths)
    with ThreadPoolExecutor(16) as pool:
        sides = [side for side in pool.map(shorter_side, picked) if side]
    return int(statistics.median(sides)) if sides else None


def open_header(path: str):
    """A file opened for reading its header: on ``gs://`` with a 64 KiB read buffer (Beam's GCS reader fetches 16 MiB
    at a time by default, a whole photo for a few bytes)."""
    if path.startswith("gs://"):
        from apache_beam.io.gcp.gcsio import GcsIO

        return GcsIO().open(path, read_buffer_size=64 << 10)
    return FileSystems.open(path)


def auto_image_size(source_side: int | None) -> tuple[int, str]:
    """(size, why) for ``--image-size auto``: the source images' typical shorter side, at most 192 (the codelab's
    size: larger costs time and memory for little) and at least what every model trained from scratch takes (a
    pretrained backbone needs more, 32 or 71 px: the train step says so, and ``--image-size`` gives it)."""
    from components.models import BACKBONES, BUILTINS

    least = max(
        model.min_image_size for name, model in BUILTINS.items() if model.modality == "image" and name not in BACKBONES
    )
    if source_side is None:
        return MAX_AUTO_IMAGE_SIZE, f"no image size could be read: the codelab's {MAX_AUTO_IMAGE_SIZE}"
    size = min(MAX_AUTO_IMAGE_SIZE, max(least, source_side))
    return size, (
        f"the source images' median shorter side is {source_side} px; auto takes it, at most "
        f"{MAX_AUTO_IMAGE_SIZE} and at least {least}"
    )


def auto_num_shards(expected_examples: float, image_size: int) -> int:
    """Shards for one split so that each is about ``TARGET_SHARD_BYTES``."""
    estimated_bytes = expected_examples * image_size * image_size * ESTIMATED_JPEG_BYTES_PER_PIXEL
    return max(1, math.ceil(estimated_bytes / TARGET_SHARD_BYTES))
