"""The split of an example: a hash of its split key, so that the same example lands in the same split on every
rerun and machine, and near-copies, which share the key, never straddle splits. Each example's key is computed on
its own (no pair of examples is ever compared), so the split scales as the conversion does.

- An image's key is a perceptual hash of the picture as converted (the square the model sees, before its JPEG
  encoding): its grey 32x32 box-filtered thumbnail, the 6x6 lowest frequencies of its DCT less the mean, each
  above or below their median (24 bits). Re-encoded, resized and recompressed copies share it:
  ``bench/near_copies.py`` measures how often, and how many distinct pictures share one. Like the data checks'
  near-copy search, it sees grey levels: a picture recoloured is a copy. A flat picture (its thumbnail's grey
  levels spread by less than ``FLAT_LEVELS``) has no shape to hash: its key is its pixels' digest, so that flat
  pictures of different colours are not one group.
- A text's key is its words once lowercased, with markup and ASCII punctuation removed
  (``components.tokenizing.text_key``), joined by spaces: texts with the same key are copies of one text
  (``e-mail`` and ``email`` alike), so the conversion keeps one.

Copies the key misses (two drawings of one icon, a crop) are what the data checks' near-copy search still finds
across splits; the summary counts them beside the test accuracy.

``components.schema.SPLIT_METHOD`` is recorded in each conversion's stats. A conversion without it was split by a
hash of each file's bytes (method 1): comparing a version split by one method with one split by another moves
examples between splits, so the data checks warn then, never block.
"""

from __future__ import annotations

import hashlib

import numpy as np

THUMBNAIL = 32  # the side of the grey thumbnail transformed
FLAT_LEVELS = 1.0  # the standard deviation of the thumbnail's grey levels below which a picture is flat
FREQUENCIES = 5  # the lowest frequencies kept per axis (the mean, [0, 0], left out: 24 bits)

_n = np.arange(THUMBNAIL)
_DCT = np.cos(np.pi * (2 * _n[None, :] + 1) * np.arange(FREQUENCIES)[:, None] / (2 * THUMBNAIL))


def image_key(image) -> bytes:
    """A Pillow image's perceptual key (3 bytes; a flat picture's, its pixels' digest)."""
    from PIL import Image

    grey = np.asarray(image.convert("L").resize((THUMBNAIL, THUMBNAIL), Image.Resampling.BOX), np.float64)
    if grey.std() < FLAT_LEVELS:
        return b"flat:" + hashlib.sha256(image.convert("RGB").tobytes()).digest()
    # rounded, so that floating point's last bits (which differ between hosts' instructions) never decide a bit: a
    # symmetric picture's odd frequencies are exactly 0, and the median can be 0 too
    frequencies = np.round((_DCT @ grey @ _DCT.T).reshape(-1)[1:], 3)
    return np.packbits(frequencies > np.median(frequencies)).tobytes()


def split_digest(key: bytes) -> bytes:
    """The SHA-256 of a split key: its first 8 bytes pick the split (``split_for_digest``), the next 8 the shard."""
    return hashlib.sha256(key).digest()
