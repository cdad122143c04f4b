"""One decoding contract, two implementations (issue 27): every file a client may send decodes in the serving graph
(``components.imaging.decode_rgb`` + ``fill_square``, TensorFlow ops) to the pixels the conversion trained on
(``components.decoding`` + ``fill_square_pillow``, Pillow), within 1 level: each format and mode, each EXIF
orientation, alpha, 16-bit, CMYK, progressive JPEG, an animated GIF's first frame, very large and very small
images. What the serving graph cannot decode as the conversion does, it refuses in one line."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest

SIZES = (32, 192)
# Pillow's words on the broken or unusual EXIF blocks below, which it reads as far as they go
pytestmark = [
    pytest.mark.filterwarnings("ignore:Corrupt EXIF data"),
    pytest.mark.filterwarnings("ignore:Truncated File Read"),
    pytest.mark.filterwarnings("ignore:Metadata Warning, tag 274 had too many entries"),
]


def blocks(side: int = 480, block: int = 80) -> np.ndarray:
    """Black and white squares of ``block`` pixels: away from their edges, a resize keeps exactly 0 and 255."""
    y, x = np.mgrid[0:side, 0:side]
    return np.repeat((((x // block + y // block) % 2) * 255).astype(np.uint8)[..., None], 3, axis=-1)


def photo(width: int = 200, height: int = 150, seed: int = 0) -> np.ndarray:
    """Photo-like RGB pixels: smooth gradients, noise and a hard edge (what an IDCT or a resize gets wrong shows)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 / width, y * 255 / height, (x + y) * 255 / (width + height)], -1)
    pixels = pixels + rng.normal(0, 12, (height, width, 3))
    pixels[height // 3 : height // 2, width // 4 : width // 2] = (250, 20, 60)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def encoded(image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """A PNG chunk: its length, its type, its data and their CRC."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(pixels: np.ndarray, color_type: int, depth: int, chunks: tuple = ()) -> bytes:
    """A PNG written by hand (Pillow writes no 16-bit colour): ``pixels`` [H, W, C] of the colour type's channels."""
    height, width = pixels.shape[:2]
    dtype = ">u2" if depth == 16 else "u1"
    rows = pixels.astype(dtype).reshape(height, -1)
    raw = b"".join(b"\0" + row.tobytes() for row in rows)
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    extra = b"".join(png_chunk(kind, data) for kind, data in chunks)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", header)
        + extra
        + png_chunk(b"IDAT", zlib.compress(raw))
        + png_chunk(b"IEND", b"")
    )


def exif_bytes(orientation: int, big_endian: bool = False, kind: int = 3, count: int = 1) -> bytes:
    """A TIFF block with IFD0 holding one tag: the orientation, of TIFF type ``kind`` (SHORT 3, LONG 4, SSHORT 8,
    SLONG 9), ``count`` values (the first the orientation, the others 1): in the entry where they fit its 4 bytes,
    otherwise after the directory, at the offset the entry gives."""
    order = ">" if big_endian else "<"
    head = (b"MM" if big_endian else b"II") + struct.pack(order + "HI", 42, 8)
    values = struct.pack(order + ("H" if kind in (3, 8) else "I") * count, orientation, *[1] * (count - 1))
    after = b""
    if len(values) > 4:  # after the header, the count, the entry and the next directory's offset
        values, after = struct.pack(order + "I", 8 + 2 + 12 + 4), values
    entry = struct.pack(order + "HHI", 0x0112, kind, count) + values.ljust(4, b"\0")
    return head + struct.pack(order + "H", 1) + entry + b"\0" * 4 + after


# bytes a value takes, by TIFF type (the TIFF 6.0 specification, and BigTIFF's LONG8, which Pillow reads too)
TIFF_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8}


def exif_of_type(kind: int) -> bytes:
    """A little-endian TIFF block whose orientation tag is of TIFF type ``kind``, with values that turn nothing: as
    many as fill the entry's 4 bytes, each byte 0xFF (read as an offset, it points past the block); one value of 8
    bytes, zero, at the block's very end; for a type Pillow does not know, one value of 0xFF bytes."""
    size = TIFF_SIZES.get(kind, 4)
    count = max(1, 4 // size)
    head = b"II" + struct.pack("<HI", 42, 8) + struct.pack("<H", 1)
    if size > 4:  # after the header, the count, the entry and the next directory's offset
        return head + struct.pack("<HHII", 0x0112, kind, count, 26) + b"\0" * 4 + b"\0" * size
    return head + struct.pack("<HHI", 0x0112, kind, count) + b"\xff" * 4 + b"\0" * 4


def with_app1(jpeg: bytes, tiff: bytes, at: int | None = None, before: bytes = b"") -> bytes:
    """The JPEG with an EXIF APP1 segment holding ``tiff`` after its APP0 (JFIF), where cameras and phones put it
    (or at byte ``at``), after the bytes ``before``."""
    at = 4 + struct.unpack(">H", jpeg[4:6])[0] if at is None else at
    payload = b"Exif\0\0" + tiff
    return jpeg[:at] + before + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[at:]


def bmp_bgra(pixels: np.ndarray) -> bytes:
    """A 32-bit BMP with a V4 header and BGRA colour masks (BITFIELDS): alpha that Pillow reads (it writes none)."""
    height, width = pixels.shape[:2]
    rows = np.ascontiguousarray(pixels[::-1][..., [2, 1, 0, 3]]).tobytes()  # bottom-up, B G R A
    info = struct.pack("<IiiHHIIiiII", 108, width, height, 1, 32, 3, len(rows), 2835, 2835, 0, 0)
    info += struct.pack("<IIII", 0xFF0000, 0xFF00, 0xFF, 0xFF000000) + b"BGRs" + b"\0" * 48
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + len(rows), 0, 0, 14 + len(info)) + info + rows


def bmp32(pixels: np.ndarray, header_size: int, compression: int) -> bytes:
    """A 32-bit BMP of ``pixels`` (RGB and a fourth byte, stored B G R and that byte) with an info header of
    ``header_size`` bytes (40, 56 or 108) and ``compression`` (0: BI_RGB, 3: BITFIELDS); the BGRA masks inside the
    header (56, 108: filled in even for BI_RGB, as some writers do), or after it (40 with BITFIELDS: no alpha mask)."""
    height, width = pixels.shape[:2]
    rows = np.ascontiguousarray(pixels[::-1][..., [2, 1, 0, 3]]).tobytes()  # bottom-up
    info = struct.pack("<IiiHHIIiiII", header_size, width, height, 1, 32, compression, len(rows), 2835, 2835, 0, 0)
    if header_size == 40:
        info += struct.pack("<III", 0xFF0000, 0xFF00, 0xFF) if compression == 3 else b""
    else:
        info += struct.pack("<IIII", 0xFF0000, 0xFF00, 0xFF, 0xFF000000) + (b"BGRs" + b"\0" * 48) * (header_size == 108)
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + len(rows), 0, 0, 14 + len(info)) + info + rows


def fourth_bytes(first: tuple[int, int, int, int]) -> np.ndarray:
    """8x8 colours whose fourth bytes vary (0 to 252), the first stored pixel (bottom left) ``first``."""
    pixels = np.zeros((8, 8, 4), np.uint8)
    pixels[..., 0], pixels[..., 1] = np.arange(64).reshape(8, 8) * 4, 200
    pixels[..., 2], pixels[..., 3] = 90, np.arange(64).reshape(8, 8)[::-1] * 4
    pixels[-1, 0] = first
    return pixels


def gif_index_past_its_table() -> bytes:
    """A GIF of 4 colours whose graphic control extension names transparent index 4, just past its colour table
    (real files do): nothing is transparent, and the file must not be edited past its table."""
    from PIL import Image

    small = Image.fromarray(np.repeat(np.arange(4, dtype=np.uint8), 4).reshape(4, 4) * 60, "L").convert("P")
    content = encoded(small.quantize(4), "GIF", transparency=1)
    control = content.index(b"\x21\xf9\x04")
    return content[: control + 6] + b"\x04" + content[control + 7 :]


def gif_last_colour_transparent() -> bytes:
    """A GIF of a 4-colour table whose transparent index is its last entry: in the table, at its very edge."""
    from PIL import Image

    small = Image.fromarray(np.repeat(np.arange(4, dtype=np.uint8), 4).reshape(4, 4), "P")
    small.putpalette([0, 0, 0, 90, 40, 40, 40, 160, 40, 20, 20, 200])
    return encoded(small, "GIF", transparency=3, optimize=False)


def gif_frame_size_bits_without_a_table() -> bytes:
    """``gif_last_colour_transparent`` with its frame's table-size bits set but not the flag that says it has a table
    (as some writers leave them): the frame has no table of its own, and the global table's last colour is the
    transparent one."""
    content = gif_last_colour_transparent()
    descriptor = content.index(b"\x2c\x00\x00\x00\x00", 13 + 3 * 2 ** ((content[10] & 7) + 1))  # the frame's
    assert content[descriptor + 9] == 0  # (Pillow writes no table and no bits for the frame)
    return content[: descriptor + 9] + b"\x01" + content[descriptor + 10 :]


def gif_frame_table_only() -> bytes:
    """A GIF whose colours are its frame's own table, with no global table (the global table's size bits left set,
    as some writers leave them), and one transparent index."""
    from PIL import Image

    small = Image.fromarray(np.repeat(np.arange(4, dtype=np.uint8), 4).reshape(4, 4), "P")
    small.putpalette([0, 0, 0, 90, 40, 40, 40, 160, 40, 250, 250, 250])  # the first byte dark: no flag bit set
    content = encoded(small, "GIF", transparency=1, optimize=False)
    flags = content[10]
    assert flags & 0x80  # (Pillow writes a global table: moved into the frame below)
    table_end = 13 + 3 * 2 ** ((flags & 7) + 1)
    descriptor = content.index(b"\x2c\x00\x00\x00\x00", table_end)  # the frame's, at 0, 0
    frame_flags = bytes([0x80 | (flags & 7)])
    return (
        content[:10]
        + bytes([flags & 0x7F])
        + content[11:13]
        + content[table_end : descriptor + 9]
        + frame_flags
        + content[13:table_end]
        + content[descriptor + 10 :]
    )


def gif_comment_after_control(rgb) -> bytes:
    """A GIF with a comment between the frame's graphic control extension and its image, whose sub-block's size
    byte reads as an extension's introducer (0x21) and its first byte as a graphic control label (0xF9): the block
    walk must step over both, and take the transparent index from the real control extension."""
    content = encoded(rgb.quantize(64), "GIF", transparency=5, comment=b"\xf9" + b"c" * 32)
    comment = content.index(b"\x21\xfe\x21\xf9")
    comment_block = content[comment : comment + 3 + 33 + 1]  # introducer, label, size, 33 bytes, terminator
    without = content[:comment] + content[comment + len(comment_block) :]
    control = without.index(b"\x21\xf9\x04")
    return without[: control + 8] + comment_block + without[control + 8 :]


def xmp_packet(orientation: int | None, element: bool) -> bytes:
    """An XMP packet with the orientation as cameras and editors write it: as an attribute or as an element; with
    ``None``, a packet that says nothing of it (an editor's name only)."""
    value = (
        f"><tiff:Orientation>{orientation}</tiff:Orientation></rdf:Description>"
        if element
        else f' tiff:Orientation="{orientation}"/>'
    )
    if orientation is None:
        value = ' xmlns:xmp="http://ns.adobe.com/xap/1.0/" xmp:CreatorTool="Adobe Photoshop 25.0"/>'
    rdf, tiff = "http://www.w3.org/1999/02/22-rdf-syntax-ns#", "http://ns.adobe.com/tiff/1.0/"
    return (
        f'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="{rdf}">'
        f'<rdf:Description xmlns:tiff="{tiff}"{value}</rdf:RDF></x:xmpmeta>'
    ).encode()


def long_text():
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("note", "x" * 70_000)
    return info


def corpus() -> dict[str, bytes]:
    from PIL import Image

    pixels = photo()
    rgb = Image.fromarray(pixels)
    height, width = pixels.shape[:2]
    ramp = (np.mgrid[0:height, 0:width][1] * 255 // width).astype(np.uint8)
    cases = {
        "jpeg 4:2:0": encoded(rgb, "JPEG", quality=90),
        "jpeg 4:4:4": encoded(rgb, "JPEG", quality=90, subsampling=0),
        "jpeg progressive": encoded(rgb, "JPEG", quality=85, progressive=True),
        "jpeg grey": encoded(rgb.convert("L"), "JPEG"),
        "jpeg cmyk": encoded(rgb.convert("CMYK"), "JPEG"),
        "png rgb": encoded(rgb, "PNG"),
        "png rgba": encoded(Image.fromarray(np.dstack([pixels, ramp])), "PNG"),
        "png grey + alpha": encoded(Image.fromarray(np.dstack([pixels[..., 0], ramp]), "LA"), "PNG"),
        "png grey": encoded(rgb.convert("L"), "PNG"),
        "png 1-bit": encoded(rgb.convert("1"), "PNG"),
        "png palette": encoded(rgb.quantize(64), "PNG"),
        "png palette, one transparent index": encoded(rgb.quantize(64), "PNG", transparency=3),
        "png palette, alpha per entry": encoded(rgb.quantize(16), "PNG", transparency=bytes(range(0, 256, 16))),
        "png 16-bit grey": png_bytes((ramp.astype(np.uint32) * 257 + 91)[..., None].clip(0, 65535), 0, 16),
        # every value once: each rounding edge of the scaling to 8 bits (v * 255 / 65535 near a half)
        "png 16-bit grey, every value": png_bytes(np.arange(65536, dtype=np.uint32).reshape(256, 256, 1), 0, 16),
        "png 16-bit rgb": png_bytes(pixels.astype(np.uint32) * 257 + 129, 2, 16),
        "png 16-bit rgba": png_bytes(np.dstack([pixels, ramp]).astype(np.uint32) * 257 + 77, 6, 16),
        "png 16-bit grey + alpha": png_bytes(np.dstack([pixels[..., 1], ramp]).astype(np.uint32) * 257, 4, 16),
        "png rgb with a colour key": encoded(rgb, "PNG", transparency=tuple(int(v) for v in pixels[0, 0])),
        "gif": encoded(rgb.quantize(64), "GIF"),
        "gif, one transparent index": encoded(rgb.quantize(64), "GIF", transparency=5),
        "gif animated (first frame)": encoded(
            rgb.quantize(64),
            "GIF",
            save_all=True,
            duration=100,
            append_images=[Image.fromarray(pixels[::-1]).quantize(64)],
        ),
        "bmp": encoded(rgb, "BMP"),
        "bmp palette": encoded(rgb.quantize(64), "BMP"),
        "bmp rgba": encoded(Image.fromarray(np.dstack([pixels, ramp])), "BMP"),
        "bmp 32-bit with an alpha mask": bmp_bgra(np.dstack([pixels, ramp])),
        # headers no writer above makes: where a V4 header keeps its alpha mask (bytes 66-69), a 40-byte header with
        # BITFIELDS has its first pixel, here once the bytes of an alpha mask and once a blue one (no alpha either
        # way); a 56-byte V3 header with an alpha mask (alpha); BI_RGB with the masks filled in (no alpha)
        "bmp 32-bit BITFIELDS, 40-byte header, first pixel 0 0 0 255": bmp32(fourth_bytes((0, 0, 0, 255)), 40, 3),
        "bmp 32-bit BITFIELDS, 40-byte header, first pixel blue": bmp32(fourth_bytes((0, 0, 64, 0)), 40, 3),
        "bmp 32-bit BITFIELDS, 56-byte header, alpha mask": bmp32(fourth_bytes((0, 0, 0, 255)), 56, 3),
        "bmp 32-bit BI_RGB, V4 header with masks": bmp32(fourth_bytes((0, 0, 0, 255)), 108, 0),
        "gif grey, one transparent index": encoded(
            Image.fromarray(np.arange(256, dtype=np.uint8).reshape(16, 16), "L"), "GIF", transparency=0, optimize=False
        ),
        "gif, transparent index past its colour table": gif_index_past_its_table(),
        "gif, a colour table in the frame alone, one transparent index": gif_frame_table_only(),
        "gif, its table's last colour transparent": gif_last_colour_transparent(),
        "gif, its frame's table-size bits set without a table": gif_frame_size_bits_without_a_table(),
        "gif with a comment after its graphic control, one transparent index": gif_comment_after_control(rgb),
        # chunks of 256 bytes and more before its tRNS (a 70,005-byte tEXt, a 768-byte PLTE): every byte of a
        # chunk's length counts in the walk to tRNS
        "png palette of 256 colours after a long text, one transparent index": encoded(
            rgb.quantize(256), "PNG", transparency=3, pnginfo=long_text()
        ),
        "gif animated, one transparent index": encoded(
            rgb.quantize(64),
            "GIF",
            save_all=True,
            transparency=7,
            duration=100,
            append_images=[Image.fromarray(pixels[::-1]).quantize(64)],
        ),
        "png palette, 4-bit": encoded(rgb.quantize(16), "PNG", bits=4),
        "png palette, 4-bit, one transparent index": encoded(rgb.quantize(16), "PNG", bits=4, transparency=2),
        "jpeg cmyk with black": encoded(Image.fromarray(np.dstack([pixels, ramp]), "CMYK"), "JPEG"),
        "jpeg 3000x2000": encoded(Image.fromarray(photo(3000, 2000, seed=1)), "JPEG", quality=92),
        "jpeg 1x1": encoded(Image.fromarray(pixels[:1, :1]), "JPEG"),
        "png 2x3": encoded(Image.fromarray(pixels[:3, :2]), "PNG"),
        "jpeg 401x33": encoded(Image.fromarray(photo(401, 33, seed=2)), "JPEG"),
        "png 60x500, taller than wide": encoded(Image.fromarray(photo(60, 500, seed=3)), "PNG"),
        "png black and white blocks": encoded(Image.fromarray(blocks()), "PNG"),  # 0 and 255 kept at the ends
    }
    upright = rgb.crop((0, 0, 180, 150))  # not square, so that a wrong turn changes the shape too
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        cases[f"jpeg exif orientation {orientation}"] = encoded(upright, "JPEG", exif=exif.tobytes())
        cases[f"jpeg exif orientation {orientation}, big-endian, after APP0"] = with_app1(
            encoded(upright, "JPEG"), exif_bytes(orientation, big_endian=True)
        )
        # Pillow writes EXIF big-endian (MM), as iPhones do; many Android phones write it little-endian (II)
        cases[f"jpeg exif orientation {orientation}, little-endian, after APP0"] = with_app1(
            encoded(upright, "JPEG"), exif_bytes(orientation)
        )
        cases[f"png exif orientation {orientation}"] = encoded(upright, "PNG", exif=exif.tobytes())
    # the orientation as each integer type Pillow turns by (SHORT the usual one), and two SHORTs (the first counts)
    for kind, name in ((4, "LONG"), (8, "SSHORT"), (9, "SLONG")):
        cases[f"jpeg exif orientation 6 as a {name}"] = with_app1(encoded(upright, "JPEG"), exif_bytes(6, kind=kind))
    cases["jpeg exif orientation 6, two SHORTs"] = with_app1(encoded(upright, "JPEG"), exif_bytes(6, count=2))
    cases["jpeg exif orientation 6, two SSHORTs"] = with_app1(encoded(upright, "JPEG"), exif_bytes(6, 0, 8, 2))
    cases["jpeg exif orientation 6, three SHORTs, after the directory"] = with_app1(
        encoded(upright, "JPEG"), exif_bytes(6, count=3)
    )
    # tags Pillow skips as if absent, so that it takes XMP's orientation (8 here): values that run past the block, no
    # value, a type it does not know; and one it keeps, so that XMP is not read: a text "6", which turns nothing
    skipped_or_kept = {
        "three SHORTs after the directory, cut short": exif_bytes(6, count=3)[:-4],
        "no value": exif_bytes(6)[:14] + struct.pack("<I", 0) + exif_bytes(6)[18:],
        "the text 6": exif_bytes(6)[:12] + struct.pack("<HI", 2, 2) + b"6\0\0\0" + exif_bytes(6)[22:],
    }
    # every type but the four the serving graph turns by: Pillow keeps a tag of a type it knows (its value turns
    # nothing here), and skips one of a type it does not (0, 14, 15, 17 and up)
    kinds = [kind for kind in (*range(19), 255) if kind not in (3, 4, 8, 9)]
    skipped_or_kept.update({f"of type {kind}": exif_of_type(kind) for kind in kinds})
    # five BYTEs do not fit the entry: they are at its offset, here past the block, and Pillow skips the tag
    skipped_or_kept["five BYTEs past the block"] = exif_of_type(1)[:14] + struct.pack("<I", 5) + exif_of_type(1)[18:]
    for name, tiff in skipped_or_kept.items():
        cases[f"jpeg exif orientation {name}, xmp orientation 8"] = encoded(
            upright, "JPEG", exif=b"Exif\0\0" + tiff, xmp=xmp_packet(8, element=False)
        )
    # as a camera writes it: the orientation the third entry of its directory, after the make and model
    camera = Image.Exif()
    camera[0x010F], camera[0x0110], camera[0x0112] = "Phone maker", "Phone model 12", 6
    cases["jpeg exif orientation 6 after the make and model"] = encoded(upright, "JPEG", exif=camera.tobytes())
    # an EXIF directory without the orientation: Pillow takes XMP's; a short first entry is no orientation
    del camera[0x0112]
    camera[0x0100] = 3  # the width, a SHORT of 3, first in the directory
    cases["jpeg exif without orientation, xmp orientation 6"] = encoded(
        upright, "JPEG", exif=camera.tobytes(), xmp=xmp_packet(6, element=False)
    )
    # bytes after a PNG's IEND are not the PNG: an eXIf there turns nothing in either decoder
    tiff = exif_bytes(6)
    cases["png, an exif orientation 6 after its IEND"] = encoded(upright, "PNG") + png_chunk(b"eXIf", tiff)
    # a block with neither byte-order mark, or whose directory lies past its end, is no orientation in either decoder
    cases["jpeg exif orientation 6, byte-order mark IM"] = with_app1(
        encoded(upright, "JPEG"), b"IM" + exif_bytes(6, big_endian=True)[2:]
    )
    cases["jpeg exif orientation 6, its directory past the block"] = with_app1(
        encoded(upright, "JPEG"), exif_bytes(6)[:4] + struct.pack("<I", 1000) + exif_bytes(6)[8:]
    )
    return cases


CORPUS = corpus()


@pytest.fixture(scope="module")
def serving_decode():
    """The serving graph's decode and resize, traced once per size as the SavedModel traces it; one file at a time."""
    from components.imaging import serving_decoder

    decoders = {size: serving_decoder(size) for size in SIZES}
    for decoder in decoders.values():  # traced here, in the fixture's setup (make mutants maps each test using it)
        decoder.get_concrete_function()
    return {size: (lambda content, size=size: decoders[size]([content])[0]) for size in SIZES}


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_serving_graph_decodes_every_case_as_the_conversion_does(name, serving_decode):
    from components.decoding import conversion_square

    content = CORPUS[name]
    for size in SIZES:  # what the conversion does to a file, less the JPEG it writes (lossy, and no decoder's)
        converted = np.asarray(conversion_square(content, size), dtype=int)
        served = serving_decode[size](content).numpy().astype(int)
        assert served.shape == converted.shape == (size, size, 3)
        assert np.abs(served - converted).max() <= 1, f"{name} at {size}: {np.abs(served - converted).max()} levels"
        if name == "png black and white blocks":  # the ends themselves, in both: nothing clipped inside 0-255
            assert served.min() == converted.min() == 0 and served.max() == converted.max() == 255


def test_the_decoders_agree_before_the_resize_too(traced_decode):
    """Without the resize (which rounds), the decoders give the same pixels, bit for bit, for every case."""
    import tensorflow as tf

    from components.decoding import decode_rgb_array, decode_rgb_image

    for name, content in CORPUS.items():
        for at_least in (0, 64):
            converted = np.asarray(decode_rgb_image(content, at_least=at_least))
            served = traced_decode(tf.constant(content), at_least).numpy()
            assert served.shape == converted.shape, f"{name}, at_least {at_least}"
            assert np.array_equal(served, converted), f"{name}, at_least {at_least}"
        assert decode_rgb_array(content).shape[2] == 3


def test_an_exif_orientation_turns_the_picture_as_the_phone_meant():
    """The contract itself, not only the agreement: orientation 6 (the phone held upright) stores the pixels turned
    90 degrees counter-clockwise, and both decoders turn them back."""
    import tensorflow as tf
    from PIL import Image

    from components.decoding import decode_rgb_image
    from components.imaging import decode_rgb

    upright = np.zeros((60, 40, 3), np.uint8)
    upright[:10] = (255, 255, 255)  # a white band at the top of the upright picture
    stored = np.rot90(upright, 1)  # as the sensor wrote it: the top turned to the left
    exif = Image.Exif()
    exif[0x0112] = 6
    content = encoded(Image.fromarray(np.ascontiguousarray(stored)), "PNG", exif=exif.tobytes())
    for decoded in (np.asarray(decode_rgb_image(content)), decode_rgb(tf.constant(content)).numpy()):
        assert decoded.shape == (60, 40, 3)
        assert decoded[:10].min() == 255 and decoded[10:].max() == 0


# EXIF orientation n: how to turn the picture as stored to show it upright. Each entry is the inverse, written from
# the EXIF specification with numpy alone: what a camera stores for an upright picture ``a`` (height x width x 3)
STORED_FOR_UPRIGHT = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],  # mirrored left to right
    3: lambda a: np.rot90(a, 2),  # upside down
    4: lambda a: a[::-1],  # mirrored top to bottom
    5: lambda a: a.transpose(1, 0, 2),  # mirrored along the main diagonal
    6: lambda a: np.rot90(a, 1),  # turned a quarter counter-clockwise (a phone held upright)
    7: lambda a: np.rot90(a, 2).transpose(1, 0, 2),  # mirrored along the other diagonal
    8: lambda a: np.rot90(a, -1),  # turned a quarter clockwise
}
QUADRANTS = ((220, 30, 30), (30, 200, 30), (30, 30, 220), (240, 220, 40))  # top left, top right, bottom left, right


def quadrant_picture(height: int = 48, width: int = 32) -> np.ndarray:
    """An upright picture, a different colour in each quadrant: any turn or mirror moves a colour to another corner."""
    picture = np.zeros((height, width, 3), np.uint8)
    for index, colour in enumerate(QUADRANTS):
        top, left = divmod(index, 2)
        picture[top * height // 2 : (top + 1) * height // 2, left * width // 2 : (left + 1) * width // 2] = colour
    return picture


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
@pytest.mark.parametrize("orientation", sorted(STORED_FOR_UPRIGHT))
def test_every_exif_orientation_shows_the_picture_upright(orientation, fmt):
    """All 8 orientations, in both decoders, against the upright picture itself (not against each other): the
    stored pixels are the upright quadrants turned or mirrored by numpy as a camera would store them."""
    import tensorflow as tf
    from PIL import Image

    from components.decoding import decode_rgb_image
    from components.imaging import decode_rgb

    upright = quadrant_picture()
    exif = Image.Exif()
    exif[0x0112] = orientation
    stored = np.ascontiguousarray(STORED_FOR_UPRIGHT[orientation](upright))
    content = encoded(Image.fromarray(stored), fmt, exif=exif.tobytes(), **({"quality": 95} if fmt == "JPEG" else {}))
    for decoder, decoded in (
        ("conversion", np.asarray(decode_rgb_image(content))),
        ("serving", decode_rgb(tf.constant(content)).numpy()),
    ):
        assert decoded.shape == upright.shape, decoder
        if fmt == "PNG":
            np.testing.assert_array_equal(decoded, upright, err_msg=decoder)
        else:  # JPEG blurs the edges between quadrants: compare each quadrant's middle
            for index, colour in enumerate(QUADRANTS):
                rows, columns = divmod(index, 2)
                middle = decoded[12 + rows * 24, 8 + columns * 16].astype(int)
                assert np.abs(middle - colour).max() <= 12, (decoder, index, middle, colour)


def test_transparent_pixels_are_white_in_both():
    import tensorflow as tf
    from PIL import Image

    from components.decoding import decode_rgb_image
    from components.imaging import decode_rgb

    pixels = np.zeros((8, 8, 4), np.uint8)  # black, fully transparent
    content = encoded(Image.fromarray(pixels), "PNG")
    for decoded in (np.asarray(decode_rgb_image(content)), decode_rgb(tf.constant(content)).numpy()):
        assert decoded.min() == 255


def test_a_format_the_serving_graph_cannot_decode_is_refused_in_one_line(serving_decode):
    """WebP, a BMP TensorFlow cannot read as Pillow does (1 bit a pixel), and bytes of no image: the request fails
    with one line; ``unserved_reason``, which clients and export use to choose, says the same of each."""
    import tensorflow as tf
    from PIL import Image

    from components.imaging import unserved_reason

    pixels = Image.fromarray(photo())
    refused = [encoded(pixels, "WEBP"), encoded(pixels.convert("1"), "BMP"), b"not an image at all"]
    for content in refused:
        assert unserved_reason(content)
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            serving_decode[32](content)
        message = raised.value.message.splitlines()[0]
        advice = "send JPEG, PNG, GIF, or BMP of 8, 24 or 32 bits (WebP and other formats: convert them to PNG first)"
        assert advice in message, message
    assert [name for name, content in CORPUS.items() if unserved_reason(content)] == []


def test_the_serving_graphs_pixels_have_a_static_shape():
    # what the SavedModel's signature and the TFLite converter read: [N, size, size, 3] uint8, known before any file
    import tensorflow as tf

    from components.imaging import serving_decoder

    traced = serving_decoder(24).get_concrete_function()
    assert traced.structured_outputs.shape.as_list() == [None, 24, 24, 3]
    assert traced.structured_outputs.dtype == tf.uint8


def with_xmp(stored, fmt: str, packet: bytes) -> bytes:
    """``stored`` encoded as ``fmt`` with the XMP ``packet``: in a JPEG's APP1 segment, or a PNG's iTXt chunk."""
    from PIL import PngImagePlugin

    if fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        info.add_itxt("XML:com.adobe.xmp", packet.decode())
        return encoded(stored, "PNG", pnginfo=info)
    return encoded(stored, "JPEG", xmp=packet, quality=95)


def assert_upright(content: bytes, upright: np.ndarray, as_stored: tuple = (), serving=None) -> None:
    """Both decoders give ``upright``: each of its quadrants where it is. The decoders named in ``as_stored`` keep
    instead the picture as stored for orientation 6: turned back by numpy, it is upright. ``serving``: the serving
    graph's decode traced (default: run eagerly)."""
    import tensorflow as tf

    from components.decoding import decode_rgb_image
    from components.imaging import decode_rgb

    for decoder, decoded in (
        ("conversion", np.asarray(decode_rgb_image(content))),
        ("serving", (serving or decode_rgb)(tf.constant(content)).numpy()),
    ):
        decoded = np.rot90(decoded, -1) if decoder in as_stored else decoded  # undoes STORED_FOR_UPRIGHT[6]
        assert decoded.shape == upright.shape, decoder
        for index, colour in enumerate(QUADRANTS):  # each quadrant's middle (JPEG blurs the edges between them)
            rows, columns = divmod(index, 2)
            middle = decoded[12 + rows * 24, 8 + columns * 16].astype(int)
            assert np.abs(middle - colour).max() <= 12, (decoder, index, middle, colour)


def test_a_pngs_orientation_after_a_long_text_chunk_shows_the_picture_upright():
    """The serving graph walks a PNG's chunks by their lengths to its eXIf: a 70 KB text chunk before it (an
    editor's history, a prompt) has a length of three significant bytes, each of which must weigh right."""
    from PIL import Image

    upright = quadrant_picture()
    exif = Image.Exif()
    exif[0x0112] = 6
    content = encoded(Image.fromarray(np.ascontiguousarray(STORED_FOR_UPRIGHT[6](upright))), "PNG", exif=exif.tobytes())
    text = b"history\0" + bytes(range(32, 127)) * 750  # 71,258 bytes: 0x01 0x16 0x5A in its length
    ihdr_end = 8 + 8 + 13 + 4  # the signature, then IHDR: its length and type, 13 bytes, its CRC
    content = content[:ihdr_end] + png_chunk(b"tEXt", text) + content[ihdr_end:]
    assert content.index(b"tEXt") < content.index(b"eXIf") and len(text) >> 16 and len(text) >> 8 & 0xFF
    assert_upright(content, upright)


@pytest.mark.parametrize("element", [False, True], ids=["attribute", "element"])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_an_orientation_written_in_xmp_alone_shows_the_picture_upright(orientation, fmt, element):
    """No EXIF: the orientation is in the XMP packet only (a JPEG's APP1 segment, a PNG's iTXt chunk), as some
    editors write it. Both decoders turn the picture upright."""
    from PIL import Image

    upright = quadrant_picture()
    stored = Image.fromarray(np.ascontiguousarray(STORED_FOR_UPRIGHT[orientation](upright)))
    content = with_xmp(stored, fmt, xmp_packet(orientation, element))
    assert b"tiff:Orientation" in content and b"Exif" not in content
    assert_upright(content, upright)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_an_xmp_packet_without_an_orientation_leaves_the_picture_as_it_is_stored(fmt):
    """Most XMP packets (an editor's, a phone's) say nothing of the orientation: both decoders keep the picture."""
    from PIL import Image

    upright = quadrant_picture()
    content = with_xmp(Image.fromarray(upright), fmt, xmp_packet(None, False))
    assert b"xmp:CreatorTool" in content and b"tiff:Orientation" not in content and b"Exif" not in content
    assert_upright(content, upright)


def jpeg_with_exif_after(before: bytes, after_quantisation: bool = False, orientation: int = 6, cut: int = 0) -> tuple:
    """A JPEG of the quadrant picture stored for ``orientation``, its EXIF APP1 segment after the bytes ``before``
    (where the APP0 ends, or past the first quantisation table's segment), its TIFF block's last ``cut`` bytes left
    out; and the upright picture."""
    from PIL import Image

    upright = quadrant_picture()
    jpeg = encoded(Image.fromarray(np.ascontiguousarray(STORED_FOR_UPRIGHT[orientation](upright))), "JPEG", quality=95)
    at = None
    if after_quantisation:  # past the whole DQT segment: its marker, then its length
        at = jpeg.index(b"\xff\xdb")
        at += 2 + struct.unpack(">H", jpeg[at + 2 : at + 4])[0]
    tiff = exif_bytes(orientation)
    return with_app1(jpeg, tiff[: len(tiff) - cut], at, before), upright


@pytest.mark.parametrize(
    "before, after_quantisation",
    [
        (b"\xff\xff\xff", False),  # fill bytes: a marker may be preceded by any number of 0xFF
        (b"\xff\xd0", False),  # RST0 and RST7, markers without a length (the first and last of the eight)
        (b"\xff\xd7", False),
        (b"\xff\xfe\x00\x02", False),  # an empty comment: a segment of length 2, its length field alone
        (b"", True),  # the EXIF segment after the quantisation table, not before it: any order is allowed
    ],
    ids=["fill bytes", "RST0", "RST7", "empty segment", "after DQT"],
)
def test_the_jpeg_walk_steps_over_what_may_come_before_the_exif_segment(before, after_quantisation):
    """The serving graph walks a JPEG's markers to its APP1 as libjpeg and Pillow do: fill bytes are one byte each,
    RSTn markers have no length, a segment's length counts its own 2 bytes (so 2 is an empty segment), and the walk
    ends at the scan (SOS), not at the first table."""
    content, upright = jpeg_with_exif_after(before, after_quantisation=after_quantisation)
    assert_upright(content, upright)


def test_a_tem_marker_before_the_exif_segment_is_stepped_over_by_the_serving_graph():
    """TEM (0xFF01) has no length either. libjpeg, which TensorFlow decodes with, steps over it; Pillow refuses the
    file (so the conversion quarantines it), and the serving graph still reads its orientation as libjpeg would."""
    import tensorflow as tf

    from components.decoding import UnusableImageError, decode_rgb_image
    from components.imaging import decode_rgb

    content, upright = jpeg_with_exif_after(b"\xff\x01")
    with pytest.raises(UnusableImageError, match="no known image format"):
        decode_rgb_image(content)
    served = decode_rgb(tf.constant(content)).numpy()
    assert served.shape == upright.shape
    for index, colour in enumerate(QUADRANTS):
        rows, columns = divmod(index, 2)
        assert np.abs(served[12 + rows * 24, 8 + columns * 16].astype(int) - colour).max() <= 12, index


def test_an_exif_segment_cut_short_is_read_up_to_its_end_as_pillow_reads_it():
    """The TIFF block is the APP1 segment's bytes, no more and no fewer. Without its last 4 bytes (the pointer to a
    next directory, which many writers leave out), the orientation entry is whole: the picture is turned. One byte
    shorter, the entry is cut: no orientation, the picture stays as stored, in Pillow and in the serving graph."""
    content, upright = jpeg_with_exif_after(b"", cut=4)
    assert_upright(content, upright)
    content, upright = jpeg_with_exif_after(b"", cut=5)
    assert_upright(content, upright, as_stored=("conversion", "serving"))


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_an_xmp_packet_that_begins_with_the_orientation_is_read_from_its_first_byte(fmt):
    """The XMP reader searches the packet from its first byte, where Pillow searches it: a packet of the orientation
    alone, with no XML around it, still turns the picture."""
    from PIL import Image

    upright = quadrant_picture()
    stored = Image.fromarray(np.ascontiguousarray(STORED_FOR_UPRIGHT[6](upright)))
    assert_upright(with_xmp(stored, fmt, b'tiff:Orientation="6"'), upright)


@pytest.fixture(scope="module")
def traced_decode():
    """The serving graph's decode traced once (once more for each ``at_least`` given), as the SavedModel runs it
    (autograph off): a walk of thousands of steps takes seconds eagerly."""
    import tensorflow as tf

    from components.imaging import decode_rgb

    traced = tf.function(decode_rgb, autograph=False)
    traced.get_concrete_function(tf.TensorSpec([], tf.string))  # traced here, as serving_decoder is
    return traced


def test_the_jpeg_walk_looks_for_the_orientation_in_the_first_512_segments(traced_decode):
    """The serving graph walks at most 512 marker segments (``MAX_SEGMENTS``), so that a hostile file cannot keep it
    long; Pillow walks them all. With the APP0 and 510 empty comments before it, the EXIF segment is the 512th: both
    turn the picture. One comment more, and the serving graph keeps the picture as stored (a known limit)."""
    empty_comment = b"\xff\xfe\x00\x02"
    content, upright = jpeg_with_exif_after(empty_comment * 510)
    assert_upright(content, upright, serving=traced_decode)
    content, upright = jpeg_with_exif_after(empty_comment * 511)
    assert_upright(content, upright, as_stored=("serving",), serving=traced_decode)


def test_the_png_walk_looks_for_transparency_in_the_first_4096_chunks(traced_decode):
    """The serving graph walks at most 4,096 chunks to a palette PNG's tRNS, so that a hostile file cannot keep it
    long; Pillow reads them all. With IHDR, 4,093 empty chunks and the PLTE before it, the tRNS is the 4,096th: both
    whiten the transparent index. One chunk more, and the serving graph shows that index's colour (a known limit)."""
    import tensorflow as tf

    from components.decoding import decode_rgb_image

    indices = np.zeros((8, 8, 1), np.uint8)
    indices[:4] = 1  # the top half index 1, transparent; the bottom half index 0, opaque blue
    table = (b"PLTE", bytes([0, 0, 200, 10, 10, 10])), (b"tRNS", b"\xff\x00")
    for before, top in ((4093, 255), (4094, 10)):
        content = png_bytes(indices, 3, 8, chunks=((b"teSt", b""),) * before + table)  # ancillary, private
        for decoder, decoded in (
            ("conversion", np.asarray(decode_rgb_image(content))),
            ("serving", traced_decode(tf.constant(content)).numpy()),
        ):
            expected = 255 if decoder == "conversion" else top
            assert (decoded[:4] == expected).all() and (decoded[4:] == (0, 0, 200)).all(), (before, decoder)


def png_with_exif_after(empty_chunks: int = 0, cut: int = 0, orientation: int = 6) -> tuple[bytes, np.ndarray]:
    """A PNG of the quadrant picture stored for ``orientation``, its eXIf chunk after ``empty_chunks`` empty chunks
    (ancillary, private), the TIFF block's last ``cut`` bytes left out; and the upright picture."""
    upright = quadrant_picture()
    tiff = exif_bytes(orientation)
    chunks = ((b"teSt", b""),) * empty_chunks + ((b"eXIf", tiff[: len(tiff) - cut]),)
    return png_bytes(np.ascontiguousarray(STORED_FOR_UPRIGHT[orientation](upright)), 2, 8, chunks), upright


def test_a_png_exif_chunk_cut_short_is_read_up_to_its_end_as_pillow_reads_it():
    """As for a JPEG's APP1: the TIFF block is the eXIf chunk's data, not its CRC after it."""
    content, upright = png_with_exif_after(cut=4)
    assert_upright(content, upright)
    content, upright = png_with_exif_after(cut=5)
    assert_upright(content, upright, as_stored=("conversion", "serving"))


def test_the_png_walk_looks_for_the_orientation_in_the_first_65536_chunks(traced_decode):
    """The orientation walk goes on past the image data (an eXIf may follow thousands of IDAT chunks), up to 65,536
    chunks (``MAX_CHUNKS``); Pillow reads them all. After IHDR and 65,534 empty chunks the eXIf is the 65,536th: both
    turn the picture. One chunk more, and the serving graph keeps it as stored (a known limit)."""
    content, upright = png_with_exif_after(empty_chunks=65_534)
    assert_upright(content, upright, serving=traced_decode)
    content, upright = png_with_exif_after(empty_chunks=65_535)
    assert_upright(content, upright, as_stored=("serving",), serving=traced_decode)


@pytest.mark.parametrize("width, height", [(12, 40), (40, 12)])
def test_a_jpeg_asked_for_at_least_one_pixel_is_drafted_at_an_eighth(width, height):
    """At its smallest ask the draft rule reduces by 8 whenever the shorter side allows it (12 // 8 >= 1): both
    decoders give ceil(side / 8) pixels a side, the same pixels."""
    import tensorflow as tf
    from PIL import Image

    from components.decoding import decode_rgb_image
    from components.imaging import decode_rgb

    content = encoded(Image.fromarray(photo(width, height)), "JPEG", quality=90)
    converted = np.asarray(decode_rgb_image(content, at_least=1))
    served = decode_rgb(tf.constant(content), 1).numpy()
    assert converted.shape == served.shape == (-(-height // 8), -(-width // 8), 3)
    np.testing.assert_array_equal(served, converted)


@pytest.mark.parametrize("big_endian", [False, True], ids=["II", "MM"])
def test_an_exif_directory_far_into_a_large_block_is_found(big_endian):
    """A PNG's eXIf chunk has no 64 KB cap as a JPEG segment has: with its first directory 66,051 bytes in (offset
    0x010203, three significant bytes), each byte of the offset must weigh right, in either byte order."""
    order = ">" if big_endian else "<"
    offset = 0x010203
    directory = struct.pack(order + "H", 1) + struct.pack(order + "HHIHH", 0x0112, 3, 1, 6, 0) + b"\0" * 4
    tiff = (b"MM" if big_endian else b"II") + struct.pack(order + "HI", 42, offset)
    tiff += b"\0" * (offset - len(tiff)) + directory
    upright = quadrant_picture()
    stored = np.ascontiguousarray(STORED_FOR_UPRIGHT[6](upright))
    assert_upright(png_bytes(stored, 2, 8, chunks=((b"eXIf", tiff),)), upright)
