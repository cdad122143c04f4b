"""Every image format users have becomes RGB; every kind of bad file gets a reason, in a quarantine record."""

from __future__ import annotations

import io
import json
import os
import random
import re

import numpy as np
import pytest
from PIL import Image

from components.convert.core import ConvertConfig, run
from components.decoding import DEFAULT_MAX_PIXELS, UnusableImageError, decode_rgb_array
from tests.conftest import IN_MEMORY

RED = (200, 30, 30)


def encoded(image: Image.Image, fmt: str, **save_args) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save_args)
    return buffer.getvalue()


def red(mode: str = "RGB", size=(24, 16)) -> Image.Image:
    return Image.new("RGB", size, RED).convert(mode)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("jpeg", encoded(red(), "JPEG", quality=95)),
        ("png", encoded(red(), "PNG")),
        ("gif", encoded(red("P"), "GIF")),
        ("bmp", encoded(red(), "BMP")),
        ("webp", encoded(red(), "WEBP", lossless=True)),
        ("cmyk jpeg", encoded(red("CMYK"), "JPEG", quality=95)),
        ("palette png", encoded(red("P"), "PNG")),
    ],
)
def test_colour_formats_become_rgb(name, content):
    pixels = decode_rgb_array(content)
    assert pixels.shape == (16, 24, 3) and pixels.dtype == np.uint8
    assert np.abs(pixels.reshape(-1, 3).mean(axis=0) - RED).max() < 12, name


def test_grayscale_and_16_bit_become_rgb_grey():
    gray = decode_rgb_array(encoded(Image.new("L", (8, 8), 100), "PNG"))
    assert gray.shape == (8, 8, 3) and (gray == 100).all()
    deep = Image.fromarray(np.full((8, 8), 40000, dtype=np.uint16))
    pixels = decode_rgb_array(encoded(deep, "PNG"))
    assert pixels.shape == (8, 8, 3) and abs(int(pixels[0, 0, 0]) - round(40000 * 255 / 65535)) <= 1


def test_a_grey_pngs_transparent_level_stays_that_grey_as_the_serving_graph_reads_it():
    # (TensorFlow's PNG decoder ignores a grey PNG's tRNS level; a grey GIF's transparent index is alpha in both)
    levels = np.array([[0, 128], [255, 0]], np.uint8)
    content = encoded(Image.fromarray(levels, "L"), "PNG", transparency=0)
    assert Image.open(io.BytesIO(content)).info["transparency"] == 0
    assert np.array_equal(decode_rgb_array(content)[..., 0], levels)


def test_a_jpeg_cut_short_in_its_scan_is_refused_with_pillows_words():
    content = encoded(red(size=(64, 64)), "JPEG")
    with pytest.raises(UnusableImageError) as refused:
        decode_rgb_array(content[: len(content) - 10])  # its header is whole: it opens, and fails as it loads
    assert re.fullmatch(r"truncated image: image file is truncated \(\d+ bytes not processed\)", str(refused.value))


def test_transparency_is_composited_on_white():
    clear = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    assert (decode_rgb_array(encoded(clear, "PNG")) == 255).all()
    half = Image.new("RGBA", (4, 4), (0, 0, 0, 128))
    assert abs(int(decode_rgb_array(encoded(half, "PNG"))[0, 0, 0]) - 127) <= 1


def corrupt_png() -> bytes:
    """A PNG's header and the start of its first chunk, then 200 bytes of noise: fixed noise, as random bytes can
    happen to read as a short stream ("truncated image") instead (seen once in make test)."""
    return encoded(red(size=(64, 64)), "PNG")[:60] + random.Random(0).randbytes(200)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file (0 bytes)"),
        (b"just some text, not a picture", "not an image"),
        (encoded(red(size=(64, 64)), "JPEG")[:200], "truncated image"),
        (corrupt_png(), "corrupt image"),
    ],
)
def test_bad_bytes_are_rejected_with_a_reason(content, reason):
    with pytest.raises(UnusableImageError, match=re.escape(reason)):
        decode_rgb_array(content)


@pytest.mark.parametrize("kind", ["TIFF", "ICO", "PPM"])
def test_a_format_pillow_reads_but_the_serving_graph_does_not_is_refused_with_the_formats_to_use(kind):
    with pytest.raises(UnusableImageError) as refused:
        decode_rgb_array(encoded(red(size=(32, 32)), kind))
    # (MPO, a camera's JPEG with more frames, is read as a JPEG: not a format to ask users for)
    assert str(refused.value) == f"unsupported image format {kind}: use one of JPEG, PNG, GIF, BMP, WEBP"


def test_decompression_bomb_is_rejected_before_decoding():
    with pytest.raises(UnusableImageError, match=r"decompression bomb: 300x200 = 60,000 pixels is over --max-pixels"):
        decode_rgb_array(encoded(Image.new("RGB", (300, 200)), "PNG"), max_pixels=10_000)


@pytest.mark.parametrize(
    ("mode", "clear", "opaque"),
    [
        ("RGBA", (200, 0, 0, 0), (200, 0, 0, 255)),
        ("RGBa", (200, 0, 0, 0), (200, 0, 0, 255)),  # premultiplied
        ("LA", (90, 0), (90, 255)),
        ("La", (90, 0), (90, 255)),  # premultiplied grey: it used to fail ("conversion from La to RGBA not supported")
        ("PA", (1, 0), (1, 255)),
    ],
)
def test_every_mode_with_alpha_is_composited_on_white(mode, clear, opaque):
    from components.decoding import to_rgb

    assert np.all(np.asarray(to_rgb(Image.new(mode, (4, 3), clear))) == 255)
    shown = np.asarray(to_rgb(Image.new(mode, (4, 3), opaque)))
    expected = Image.new(mode, (1, 1), opaque).convert("LA" if mode == "La" else mode).convert("RGBA").getpixel((0, 0))
    assert shown.shape == (3, 4, 3) and tuple(shown[0, 0]) == expected[:3] and expected[:3] != (255, 255, 255)


def test_an_image_of_exactly_max_pixels_is_decoded():
    assert decode_rgb_array(encoded(red(size=(100, 50)), "PNG"), max_pixels=5_000).shape == (50, 100, 3)
    with pytest.raises(UnusableImageError, match="100x50 = 5,000 pixels is over --max-pixels 4,999"):
        decode_rgb_array(encoded(red(size=(100, 50)), "PNG"), max_pixels=4_999)


@pytest.mark.parametrize("kind", ["JPEG", "MPO"])
def test_a_large_jpeg_or_a_cameras_mpo_is_decoded_at_a_reduced_scale_that_keeps_at_least_what_is_asked(kind):
    from components.decoding import decode_rgb_image

    extra = {"save_all": True, "append_images": [red(size=(800, 600))]} if kind == "MPO" else {}
    content = encoded(red(size=(800, 600)), kind, **extra)
    assert Image.open(io.BytesIO(content)).format == kind
    # 1/4 keeps 200x150, both sides at least 128; 1/8 (100x75) would not
    assert decode_rgb_image(content, at_least=128).size == (200, 150)
    assert decode_rgb_image(content).size == (800, 600)  # at_least 0: full size


def test_every_kind_of_bad_file_lands_in_quarantine_with_its_reason(tmp_path):
    root = tmp_path / "images"
    for name, colour in (("cat", RED), ("dog", (30, 30, 200))):
        (root / name).mkdir(parents=True)
        for n in range(6):
            (root / name / f"{n}.jpg").write_bytes(encoded(Image.new("RGB", (30 + n, 20), colour), "JPEG"))
    (root / "cat" / "photo.webp").write_bytes(encoded(red(), "WEBP"))
    (root / "cat" / "empty.jpg").write_bytes(b"")
    (root / "cat" / "notes.txt").write_text("not a picture")
    (root / "dog" / "cut.jpg").write_bytes(encoded(red(size=(64, 64)), "JPEG")[:200])
    (root / "dog" / "huge.png").write_bytes(encoded(Image.new("RGB", (400, 400)), "PNG"))
    (root / "dog" / "garbage.png").write_bytes(corrupt_png())
    output = tmp_path / "out"
    stats = run(
        ConvertConfig(
            source=str(root),
            output_dir=str(output),
            image_size=8,
            max_bad_fraction=0.5,
            max_pixels=100_000,
            pipeline_args=IN_MEMORY,
        )
    )
    assert stats["num_examples"] == 13 and stats["quarantined"] == 5
    with open(output / "quarantine.jsonl") as handle:
        reasons = {os.path.basename(r["path"]): r["reason"] for r in map(json.loads, handle)}
    assert reasons["empty.jpg"] == "empty file (0 bytes)"
    assert reasons["notes.txt"].startswith("not an image")
    assert reasons["cut.jpg"].startswith("truncated image")
    assert reasons["huge.png"].startswith("decompression bomb: 400x400")
    assert reasons["garbage.png"].startswith("corrupt image")


def test_the_dag_passes_the_library_pixel_limit_to_the_convert_step():
    from pipeline.dag import build_pipeline

    spec = build_pipeline().pipeline_spec
    (task,) = [t for name, t in spec.root.dag.tasks.items() if name == "convert"]
    assert task.inputs.parameters["max_pixels"].runtime_value.constant.number_value == DEFAULT_MAX_PIXELS


def bmp_header(bits: int, compression: int, masks: tuple[int, int, int] = (0, 0, 0)) -> bytes:
    """A BMP's first 74 bytes, by hand: BITMAPFILEHEADER, then the info header's bit count (offset 28) and compression
    (offset 30), then the red, green and blue masks (offsets 54, 58, 62)."""
    import struct

    header = b"BM" + struct.pack("<IHHI", 74, 0, 0, 74) + struct.pack("<IiiHHI", 56, 2, 2, 1, bits, compression)
    header = header.ljust(54, b"\0") + struct.pack("<III", *masks)
    return header.ljust(74, b"\0")


BGRA = (0xFF0000, 0xFF00, 0xFF)


@pytest.mark.parametrize(
    "bits, compression, masks, served",
    [
        (24, 0, (0, 0, 0), True),
        (8, 0, (0, 0, 0), True),
        (16, 0, (0, 0, 0), False),  # 16-bit: TensorFlow's decoder refuses it
        (16, 0, BGRA, False),  # masks alone do not make it served
        (32, 3, BGRA, True),  # BITFIELDS with the BGRA masks
        (32, 3, (0xFF, 0xFF00, 0xFF0000), False),  # other masks: TensorFlow would read the channels wrong
        (24, 3, BGRA, False),  # BITFIELDS is for 16 and 32 bits
        (24, 1, (0, 0, 0), False),  # run-length encoded
    ],
)
def test_which_bmps_the_serving_graph_reads_is_decided_from_the_header(bits, compression, masks, served):
    from components.imaging import bmp_served, unserved_reason

    header = bmp_header(bits, compression, masks)
    assert bmp_served(header) is served
    reason = unserved_reason(header)
    assert reason == (None if served else "a BMP other than 8, 24 or 32 bits uncompressed (or 32 bits with BGRA masks)")


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"RIFF\x24\0\0\0WEBPVP8 " + bytes(20), "WebP"),
        (b"RIFF\x24\0\0\0WAVEfmt " + bytes(20), "not JPEG, PNG, GIF or BMP"),  # another RIFF file
        (b"RIFX\x24\0\0\0WEBPVP8 " + bytes(20), "not JPEG, PNG, GIF or BMP"),
        (b"\xff\xd8\xff\xe0" + bytes(20), None),  # a JPEG's start
        (b"\x89PNG\r\n\x1a\n" + bytes(20), None),
        (b"GIF89a" + bytes(20), None),
    ],
)
def test_the_reason_a_file_is_refused_names_its_format(content, reason):
    from components.imaging import unserved_reason

    assert unserved_reason(content) == reason


def test_a_bmp_shorter_than_its_mask_fields_is_served():
    """A 1x1 24-bit BMP is 58 bytes, shorter than the 74 that ``bmp_served`` reads: the rest counts as zeros, after
    the header, never before it."""
    from components.imaging import unserved_reason

    buffer = io.BytesIO()
    Image.new("RGB", (1, 1), (10, 20, 30)).save(buffer, format="BMP")
    content = buffer.getvalue()
    assert len(content) == 58
    assert unserved_reason(content) is None


@pytest.mark.parametrize(
    "mode, layout", [("I;16", "<u2"), ("I;16L", "<u2"), ("I;16B", ">u2"), ("I", "<i4"), ("F", "<f4")]
)
def test_sixteen_bit_grey_is_scaled_to_eight_bits_in_each_mode_pillow_reads_it_as(mode, layout):
    """16-bit grey in every mode Pillow gives it (a PNG's I;16, a big-endian TIFF's I;16B, a 32-bit I, a float F):
    scaled by 255/65535, which is 1/257, with rounding, by hand: 257 -> 1, 32896 -> 128, 33025 -> 129 (128.502),
    65535 -> 255. Converted as Pillow converts, they would be clipped at 255."""
    from components.decoding import to_rgb

    values = np.array([[0, 257, 32896, 33025, 65535]], dtype=layout)
    image = Image.frombytes(mode, (5, 1), values.tobytes())
    assert image.mode == mode
    rgb = np.asarray(to_rgb(image))
    assert rgb.shape == (1, 5, 3) and rgb.dtype == np.uint8
    assert rgb[0, :, 0].tolist() == [0, 1, 128, 129, 255] and (rgb[..., 0] == rgb[..., 2]).all()


@pytest.mark.parametrize("mode, layout", [("I", "<i4"), ("F", "<f4")])
def test_a_32_bit_or_float_grey_within_eight_bits_keeps_its_values(mode, layout):
    """An I or F image whose values stay within 0-255 is 8-bit grey already: not scaled down."""
    from components.decoding import to_rgb

    image = Image.frombytes(mode, (4, 1), np.array([[0, 1, 128, 255]], dtype=layout).tobytes())
    assert np.asarray(to_rgb(image))[0, :, 1].tolist() == [0, 1, 128, 255]


@pytest.mark.parametrize("mode, layout", [("I;16", "<u2"), ("I;16B", ">u2")])
def test_a_dark_sixteen_bit_grey_stays_dark(mode, layout):
    """A 16-bit image whose values all stay under 256 is nearly black (255 is 1/257 of white), not 8-bit grey."""
    from components.decoding import to_rgb

    image = Image.frombytes(mode, (3, 1), np.array([[0, 128, 255]], dtype=layout).tobytes())
    assert np.asarray(to_rgb(image))[0, :, 0].tolist() == [0, 0, 1]


def test_32_bit_grey_past_sixteen_bits_is_clipped_never_wrapped():
    """A 32-bit I image: values outside 0-65535 clip to black and white (as uint8 they would wrap around), and one
    value of 256 is enough to make it 16-bit (256/257 -> 1, not 256 clipped to white)."""
    from components.decoding import to_rgb

    wide = Image.frombytes("I", (4, 1), np.array([[-1000, 0, 256, 70000]], dtype="<i4").tobytes())
    assert np.asarray(to_rgb(wide))[0, :, 0].tolist() == [0, 0, 1, 255]
    barely = Image.frombytes("I", (2, 1), np.array([[0, 256]], dtype="<i4").tobytes())
    assert np.asarray(to_rgb(barely))[0, :, 0].tolist() == [0, 1]


def test_the_conversion_decodes_a_large_jpeg_at_the_smallest_scale_that_keeps_twice_its_size(monkeypatch):
    """1600x1536 to 192: twice 192 is 384, so the JPEG is reduced by 4 in the DCT domain (400x384), not by 8 (under
    384) nor only by 2 (a slower decode for the same square)."""
    import components.imaging
    from components.decoding import conversion_square

    seen = []
    resize = components.imaging.fill_square_pillow
    monkeypatch.setattr(
        components.imaging, "fill_square_pillow", lambda image, size: seen.append(image.size) or resize(image, size)
    )
    rng = np.random.default_rng(0)
    content = encoded(Image.fromarray(rng.integers(0, 255, (1536, 1600, 3), dtype=np.uint8)), "JPEG")
    assert conversion_square(content, 192).size == (192, 192)
    assert seen == [(400, 384)]
