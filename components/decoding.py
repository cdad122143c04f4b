"""Turning whatever image bytes users have into RGB pixels, or a one-line reason why not.

JPEG, PNG, GIF (first frame), BMP and WebP; grayscale, RGBA and LA (composited on white), palette, CMYK and 16-bit
all become 8-bit RGB, and the EXIF orientation is applied, so a phone photo stands the right way up. Pillow decodes
here; the serving graph decodes the same bytes to the same pixels in TensorFlow (``components.imaging.decode_rgb``,
the contract in ``docs/serving.md``), and the resize that follows is ``components.imaging``'s in both.
"""

from __future__ import annotations

import io

from components.cli import one_line

# well above any photo (a 100-megapixel camera), well below what exhausts a worker's memory
DEFAULT_MAX_PIXELS = 178_956_970
FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WEBP", "MPO")
# the files taken for images by their names (in any case): what the conversion lists in a folder, and what predict
# and batch-predict send of one
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
IMAGE_FILES = f"images are JPEG, PNG, GIF, BMP or WebP files ({', '.join(IMAGE_SUFFIXES)})"
# the quarantine record of a file an image folder holds that is named as no image (notes.txt): left out, not a bad image
NO_IMAGE = f"not an image file: left out ({IMAGE_FILES})"


class UnusableImageError(ValueError):
    """This file cannot become a training image; ``str()`` is the one-line reason for the quarantine report."""


def decode_rgb_array(content: bytes, max_pixels: int = DEFAULT_MAX_PIXELS):
    """Decodes image bytes into an ``[H, W, 3]`` uint8 NumPy array; raises ``UnusableImageError`` with the reason."""
    import numpy as np

    return np.asarray(decode_rgb_image(content, max_pixels), dtype=np.uint8)


def decode_rgb_image(content: bytes, max_pixels: int = DEFAULT_MAX_PIXELS, at_least: int = 0):
    """Decodes image bytes into an RGB Pillow image; raises ``UnusableImageError`` with the reason.

    ``at_least``: a JPEG may be decoded at 1/2, 1/4 or 1/8 scale (in the DCT domain, far cheaper) as long as both
    sides stay at least this many pixels; 0 decodes at full size.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not content:
        raise UnusableImageError("empty file (0 bytes)")
    Image.MAX_IMAGE_PIXELS = None  # our own limit below, with a reason that names it
    try:
        image = Image.open(io.BytesIO(content))
    except UnidentifiedImageError:
        raise UnusableImageError("not an image (no known image format)") from None
    except (OSError, SyntaxError, ValueError) as err:  # a header cut short or mangled
        raise _broken(err) from None
    if image.format not in FORMATS:
        raise UnusableImageError(f"unsupported image format {image.format}: use one of {', '.join(FORMATS[:-1])}")
    width, height = image.size
    if width * height > max_pixels:
        raise UnusableImageError(
            f"decompression bomb: {width}x{height} = {width * height:,} pixels is over --max-pixels {max_pixels:,}"
        )
    try:
        if at_least and image.format in ("JPEG", "MPO") and image.mode in ("RGB", "L"):
            image.draft(image.mode, (at_least, at_least))
        image.load()
        if image.format == "GIF" and image.mode == "L" and "transparency" in image.info:
            image = image.convert("RGBA")  # a grey GIF's transparent index is alpha too (a PNG's grey tRNS is not)
        image = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError) as err:
        raise _broken(err) from None
    return to_rgb(image)


def _broken(err: Exception) -> UnusableImageError:
    message = one_line(err)
    kind = "truncated image" if "truncated" in message.lower() else "corrupt image"
    return UnusableImageError(f"{kind}: {message}")


def to_rgb(image):
    """Any Pillow mode -> an 8-bit RGB Pillow image (alpha composited on white, 16-bit scaled down, CMYK converted as
    the serving graph's TensorFlow does it)."""
    import numpy as np
    from PIL import Image

    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        pixels = np.asarray(image, dtype=np.float64)
        peak = 65535.0 if image.mode.startswith("I;16") or pixels.max() > 255 else 255.0
        gray = np.clip(np.round(pixels * (255.0 / peak)), 0, 255).astype(np.uint8)
        return Image.fromarray(gray).convert("RGB")
    if image.mode == "CMYK":  # TensorFlow's arithmetic (its JPEG decoder truncates where Pillow's convert rounds)
        cmyk = np.asarray(image, dtype=np.int32)
        return Image.fromarray(((255 - cmyk[..., 3:]) * (255 - cmyk[..., :3]) // 255).astype(np.uint8))
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode == "La":  # (premultiplied grey: Pillow converts it to LA alone)
        image = image.convert("LA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    return image if image.mode == "RGB" else image.convert("RGB")


def conversion_square(content: bytes, size: int, max_pixels: int = DEFAULT_MAX_PIXELS):
    """The ``size`` x ``size`` RGB Pillow image the conversion makes of an image file (before its JPEG encoding):
    decoded as ``decode_rgb_image`` does, JPEGs reduced in the DCT domain to at least twice ``size``, then resized to
    fill the square and centre-cropped (``components.imaging``)."""
    from components.imaging import decoded_at_least, fill_square_pillow

    return fill_square_pillow(decode_rgb_image(content, max_pixels, decoded_at_least(size)), size)
