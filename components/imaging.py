"""Image decoding and preprocessing shared by the conversion and the serving signature: one contract (``DECODING``,
``docs/serving.md``), two implementations that agree.

Decoding: ``components.decoding`` decodes with Pillow in the conversion's workers; ``decode_rgb`` here does the same
in TensorFlow ops for the exported serving graph (the same IDCT and DCT-domain reduction, alpha on white with
Pillow's arithmetic, the EXIF orientation from ``components.orientation``), bit for bit on every case of
``tests/components/test_decoding_parity.py``.

Resize preserving the aspect ratio so that the image fills a ``size`` x ``size`` square, then centre-crop:
``fill_square`` in TensorFlow ops, ``fill_square_pillow`` for the conversion's workers (no TensorFlow there, and
Pillow releases the GIL so that threads share the cores). Both use the antialiased triangle (bilinear) filter and the
same sizes and crop offsets, and agree within 1 level (``tests/components/test_convert.py``).
"""

from __future__ import annotations

import functools


def fill_square(image, size: int):
    """Resizes an ``[H, W, C]`` uint8 image to fill ``size`` x ``size`` and centre-crops it; returns uint8."""
    import tensorflow as tf

    # the same sizes as ``fill_square_pillow``'s, computed in float32 in both
    shape = tf.shape(image)
    height = tf.cast(shape[0], tf.float32)
    width = tf.cast(shape[1], tf.float32)
    scale = tf.cast(size, tf.float32) / tf.minimum(height, width)
    # ceil so that rounding never leaves the short side one pixel short of the crop
    new_height = tf.maximum(size, tf.cast(tf.math.ceil(height * scale - 1e-3), tf.int32))
    new_width = tf.maximum(size, tf.cast(tf.math.ceil(width * scale - 1e-3), tf.int32))
    resized = tf.image.resize(image, [new_height, new_width], method="bilinear", antialias=True)
    top = (new_height - size) // 2
    left = (new_width - size) // 2
    cropped = tf.image.crop_to_bounding_box(resized, top, left, size, size)
    return tf.cast(tf.clip_by_value(tf.round(cropped), 0.0, 255.0), tf.uint8)


def fill_square_pillow(image, size: int):
    """``fill_square`` for an RGB Pillow image: the same resized size, filter and crop; returns a Pillow image."""
    import numpy as np
    from PIL import Image

    width, height = image.size
    scale = np.float32(size) / np.float32(min(height, width))
    new_height = max(size, int(np.ceil(np.float32(height) * scale - np.float32(1e-3))))
    new_width = max(size, int(np.ceil(np.float32(width) * scale - np.float32(1e-3))))
    top = (new_height - size) // 2
    left = (new_width - size) // 2
    if (new_width, new_height) == (width, height):
        return image.crop((left, top, left + size, top + size))
    # resample only the kept square: the source box that maps onto it, with the same filter scale and sample centres
    # as resizing the whole image and cropping afterwards (a quarter less work for a 4:3 photo)
    x_scale, y_scale = width / new_width, height / new_height
    box = (left * x_scale, top * y_scale, (left + size) * x_scale, (top + size) * y_scale)
    return image.resize((size, size), Image.Resampling.BILINEAR, box=box)


# --image-size auto (0 in configs and the DAG's parameter): the source images' typical size, at most this
AUTO_IMAGE_SIZE = 0
MAX_AUTO_IMAGE_SIZE = 192
# the sides an --image-size may give: a 1024x1024 batch of 32 is already 400 MiB as float32, before the model's own
# activations (the largest Keras backbones take 600)
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 8, 1024


def image_size_mistake(size: int) -> str | None:
    """What is wrong with ``size`` as the side of the converted images, or None (a config's ``AUTO_IMAGE_SIZE`` is
    auto, not a size: its caller leaves it out)."""
    if size < MIN_IMAGE_SIZE:
        return f"{size} is too small: use {MIN_IMAGE_SIZE} or more, or auto"
    if size > MAX_IMAGE_SIZE:
        return f"{size} is too large: use {MAX_IMAGE_SIZE} or less, or auto"
    return None


# the first bytes of each format the serving graph decodes (WebP, which Pillow decodes for the conversion, has no
# decoder in the serving TensorFlow 2.15: the serving graph refuses it in one line)
SIGNATURES = {"JPEG": b"\xff\xd8\xff", "PNG": b"\x89PNG\r\n\x1a\n", "GIF": b"GIF8", "BMP": b"BM"}
DRAFT_SCALES = (8, 4, 2, 1)
# the decoding contract both implementations keep, recorded in export.json: what a client that decodes for itself
# (the TFLite files and serving_images take pixels) must do to send what the model learned from
DECODING = {
    "served_formats": list(SIGNATURES),
    "refused_formats": ["WebP"],
    "alpha_background": "white",
    "exif_orientation": "applied",
    "jpeg_idct": "accurate integer (libjpeg JDCT_ISLOW)",
    "animations": "first frame",
    "pixels": "8-bit RGB; 16-bit grey scaled with rounding, 16-bit colour cut to its high byte",
}
# the Model Registry's description of a version: what its serving_default does to the files it is sent
SERVING_DESCRIPTION = (
    "An image classifier. serving_default takes image files as clients have them (image_bytes: "
    "JPEG, PNG, GIF or BMP) and decodes them as the training data was: the EXIF orientation "
    "applied, alpha composited on white, then resized to fill the model's square and "
    "centre-cropped. A client compositing on another background sends other pixels."
)
TFLITE_INPUT = (
    "decoded, upright (the EXIF orientation applied), 8-bit RGB pixels with any alpha composited on "
    "white, resized to fill the square and centre-cropped: the caller does this work"
)


def decoded_at_least(image_size: int) -> int:
    """The smallest side a JPEG is decoded at, in the conversion and the serving graph alike, on its way to
    ``image_size``: twice it, so that the antialiased resize still has pixels to average."""
    return 2 * image_size


def unserved_reason(content: bytes) -> str | None:
    """Why the serving graph refuses these bytes (it fails the request in one line), or None when it decodes them as
    the conversion does: the same rules as ``decode_rgb``'s, in Python, for the clients that choose what to send and
    for export's count of the test files it could not score."""
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "WebP"
    if not any(content.startswith(signature) for signature in SIGNATURES.values()):
        return "not JPEG, PNG, GIF or BMP"
    if content.startswith(SIGNATURES["BMP"]) and not bmp_served(content[:74].ljust(74, b"\0")):
        return "a BMP other than 8, 24 or 32 bits uncompressed (or 32 bits with BGRA masks)"
    return None


def bmp_served(header: bytes) -> bool:
    """Whether TensorFlow's ``decode_bmp`` reads this BMP as Pillow does: 8, 24 or 32 bits uncompressed, or 32 bits
    with the BGRA colour masks (BITFIELDS); ``header``: the file's first 74 bytes."""
    bits, compression = int.from_bytes(header[28:30], "little"), int.from_bytes(header[30:34], "little")
    masks = [int.from_bytes(header[at : at + 4], "little") for at in (54, 58, 62)]
    return (compression == 0 and bits in (8, 24, 32)) or (
        compression == 3 and bits == 32 and masks == [0xFF0000, 0xFF00, 0xFF]
    )


def decode_rgb(encoded, at_least: int = 0):
    """Decodes one encoded image (a scalar string tensor) into ``[H, W, 3]`` uint8, in TensorFlow ops, exactly as
    ``components.decoding`` does with Pillow for the conversion: JPEG with the accurate integer IDCT, reduced in the
    DCT domain by 2, 4 or 8 while both sides stay at least ``at_least`` (Pillow's draft rule), the EXIF orientation
    applied; PNG of every colour type and depth, alpha (and palette transparency) composited on white with Pillow's
    own arithmetic, 16-bit grey scaled with rounding, 16-bit colour cut to its high byte as Pillow does; GIF's first
    frame; BMP of 8, 24 or 32 bits. Any other bytes (``unserved_reason``: WebP among them) fail the request in one
    line that names the formats it takes."""
    import tensorflow as tf

    from components.orientation import apply_orientation, exif_orientation

    encoded = tf.convert_to_tensor(encoded, tf.string)

    def starts_with(signature: bytes):
        return tf.equal(tf.strings.substr(encoded, 0, len(signature)), signature)

    def jpeg():
        shape = tf.io.extract_jpeg_shape(encoded)
        height, width, components = shape[0], shape[1], shape[2]
        # Pillow drafts only RGB and greyscale JPEGs (not CMYK), as the conversion asks
        reduction = tf.minimum(width // max(at_least, 1), height // max(at_least, 1))
        index = tf.constant(len(DRAFT_SCALES) - 1)
        for position, scale in reversed(list(enumerate(DRAFT_SCALES[:-1]))):
            index = tf.where(reduction >= scale, position, index)
        if not at_least:
            index = tf.constant(len(DRAFT_SCALES) - 1)
        index = tf.where(tf.equal(components, 4), len(DRAFT_SCALES) - 1, index)
        branches = [
            lambda scale=scale: tf.io.decode_jpeg(encoded, channels=3, ratio=scale, dct_method="INTEGER_ACCURATE")
            for scale in DRAFT_SCALES
        ]
        return tf.switch_case(index, branches)

    def png():
        header = tf.cast(tf.io.decode_raw(tf.strings.substr(encoded, 24, 2), tf.uint8), tf.int32)
        depth, color_type = header[0], header[1]

        def wide(channels: int):  # 8-bit sources come back as v * 257, so that the high byte is v
            return tf.cast(tf.io.decode_png(encoded, channels=channels, dtype=tf.uint16), tf.int32)

        def opaque():  # grey and RGB (Pillow ignores a tRNS colour key there); 16-bit grey rounded as to_rgb does
            pixels = wide(3)
            rounded = tf.cast(tf.round(tf.cast(pixels, tf.float64) * (255.0 / 65535.0)), tf.int32)
            grey16 = tf.logical_and(tf.equal(depth, 16), tf.equal(color_type, 0))
            return tf.where(grey16, rounded, tf.bitwise.right_shift(pixels, 8))

        def translucent():  # grey + alpha, RGBA, palette with tRNS: on white
            return composite_pillow(tf.bitwise.right_shift(wide(4), 8))

        def palette():  # TensorFlow's own alpha is wrong below 8 bits (1, 3 or 15): never read it without tRNS
            return tf.bitwise.right_shift(wide(4)[..., :3], 8)

        alpha = tf.logical_or(tf.equal(color_type, 4), tf.equal(color_type, 6))
        pixels = tf.case(
            [
                (alpha, translucent),
                (tf.equal(color_type, 3), lambda: tf.cond(png_has_transparency(encoded), translucent, palette)),
            ],
            default=opaque,
        )
        return tf.cast(pixels, tf.uint8)

    def gif():
        return tf.io.decode_gif(gif_first_frame_on_white(encoded))[0]

    def bmp():
        return bmp_rgb(encoded, refused)

    def refused():
        message = (
            "image_bytes holds an image this model does not decode: send JPEG, PNG, GIF, or BMP of 8, 24 or "
            "32 bits (WebP and other formats: convert them to PNG first)"
        )
        check = tf.debugging.Assert(False, [message])
        with tf.control_dependencies([check]):
            return tf.zeros([1, 1, 3], tf.uint8)

    kinds = [starts_with(signature) for signature in SIGNATURES.values()]
    index = tf.constant(len(kinds))
    for position in reversed(range(len(kinds))):
        index = tf.where(kinds[position], position, index)
    image = tf.switch_case(index, [jpeg, png, gif, bmp, refused])
    image.set_shape([None, None, 3])
    # the orientation is read here, once for the formats that carry one (1 for the others): read in the JPEG and the
    # PNG branch, each would hold its own copy of the walk over segments and chunks, half of the whole graph
    return apply_orientation(image, exif_orientation(encoded))


def serving_pixels(image_bytes, image_size: int):
    """A batch of encoded images (``[N]`` strings) as the SavedModel's ``serving_default`` feeds its model: each
    decoded by ``decode_rgb`` and filled into the ``image_size`` square, ``[N, size, size, 3]`` uint8. Trace it as
    the SavedModel does, in one ``tf.function`` with autograph off (``serving_decoder``)."""
    import tensorflow as tf

    return tf.map_fn(
        lambda encoded: fill_square(decode_rgb(encoded, decoded_at_least(image_size)), image_size),
        image_bytes,
        fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.uint8),
    )


@functools.cache
def serving_decoder(image_size: int):
    """``serving_pixels`` traced once, as the SavedModel traces it (autograph off): call it a batch at a time. One
    per size and process: its graph takes a second to trace and another to start. Export's ``serving_default`` calls
    it; the tests and benches that decode as the SavedModel does share it."""
    import tensorflow as tf

    return tf.function(
        lambda image_bytes: serving_pixels(image_bytes, image_size),
        input_signature=[tf.TensorSpec([None], tf.string)],
        autograph=False,
    )


def composite_pillow(rgba):
    """RGBA (int32, 0..255) composited on opaque white with Pillow's ``alpha_composite`` integer arithmetic
    (``AlphaComposite.c``, 7 bits of precision), so that the serving graph gives the conversion's pixels exactly;
    returns RGB int32."""
    import tensorflow as tf

    rgb, alpha = rgba[..., :3], rgba[..., 3:]
    coefficient = alpha * 128  # src.a * 255 * 255 * 128 / (255 * 255) over an opaque background
    blended = rgb * coefficient + 255 * (255 * 128 - coefficient) + (0x80 << 7)
    shifted = tf.bitwise.right_shift(tf.bitwise.right_shift(blended, 8) + blended, 8)
    return tf.bitwise.right_shift(shifted, 7)


def gif_first_frame_on_white(encoded):
    """The GIF's first frame alone, with its transparent colour made opaque white, as bytes ``decode_gif`` reads.

    TensorFlow's ``decode_gif`` gives transparent pixels no colour of their own (the conversion composites them on
    white), and the serving TensorFlow 2.15 fails on some later frames that 2.21 and Pillow read (a transparent index
    past the frame's colour table). So the blocks are walked to the end of the first image's data, and the file cut
    there (with the trailer); the transparency flag of the graphic control extension before that image is cleared,
    and that index of the colour table the image uses set to white. Unchanged when the blocks cannot be walked."""
    import tensorflow as tf

    from components.orientation import read_bytes

    length = tf.strings.length(encoded)

    def byte(position):  # (past the end: 0)
        return read_bytes(encoded, length, position, 1)[0]

    def table_bytes(flags):  # a colour table's size, from the packed flags before it (0: none)
        present = tf.bitwise.bitwise_and(flags, 0x80) > 0
        return tf.where(present, 3 * tf.bitwise.left_shift(2, tf.bitwise.bitwise_and(flags, 7)), 0)

    start = 13 + table_bytes(byte(10))  # after the header, the screen descriptor and the global colour table

    def step(position, in_blocks, in_image, control, image, end, done):
        value = byte(position)
        at_block = tf.logical_not(in_blocks)
        extension = at_block & tf.equal(value, 0x21)
        found = at_block & tf.equal(value, 0x2C)
        control = tf.where(extension & tf.equal(byte(position + 1), 0xF9), position, control)
        image = tf.where(found, position, image)
        # an extension's or an image's data: sub-blocks, each its size and its bytes, ended by a zero size; an
        # image's data follows its descriptor (10 bytes), its own colour table and the LZW code size (1 byte)
        moved = tf.where(extension, position + 2, position + value + 1)
        moved = tf.where(found, position + 11 + table_bytes(byte(position + 9)), moved)
        ended = in_blocks & tf.equal(value, 0)
        end = tf.where(ended & in_image, position + 1, end)
        stuck = at_block & tf.logical_not(extension | found)  # neither an extension nor an image: give up
        in_image = in_image | found
        in_blocks = extension | found | (in_blocks & tf.logical_not(ended))
        return moved, in_blocks, in_image, control, image, end, stuck | (end >= 0) | (moved >= length)

    none, no = tf.constant(-1), tf.constant(False)
    _, _, _, control, image, end, _ = tf.while_loop(
        lambda *state: tf.logical_not(state[-1]),
        step,
        (start, no, no, none, none, none, no),
        maximum_iterations=1 << 20,
    )
    flags = byte(control + 3)
    transparent = (control >= 0) & (image >= 0) & (tf.bitwise.bitwise_and(flags, 1) > 0)
    local = tf.bitwise.bitwise_and(byte(image + 9), 0x80) > 0
    entry = tf.where(local, image + 10, 13) + 3 * byte(control + 6)
    # the index must lie in the table the image uses (a file may name one past it: then nothing is whitened)
    table = tf.where(local, table_bytes(byte(image + 9)), table_bytes(byte(10)))
    usable = transparent & (3 * byte(control + 6) + 3 <= table) & (entry + 3 <= length)

    def on_white():
        characters = tf.constant([bytes([value]) for value in range(256)])
        cleared = tf.gather(characters, tf.bitwise.bitwise_and(flags, 0xFE))
        edited = tf.strings.join(
            [tf.strings.substr(encoded, 0, control + 3), cleared, tf.strings.substr(encoded, control + 4, length)]
        )
        return tf.strings.join(
            [tf.strings.substr(edited, 0, entry), b"\xff\xff\xff", tf.strings.substr(edited, entry + 3, length)]
        )

    whitened = tf.cond(usable, on_white, lambda: encoded)
    return tf.cond(end > 0, lambda: tf.strings.join([tf.strings.substr(whitened, 0, end), b";"]), lambda: whitened)


def png_has_transparency(encoded):
    """Whether a PNG has a tRNS chunk before its image data (walking the chunks)."""
    import tensorflow as tf

    length = tf.strings.length(encoded)
    padded = tf.strings.join([encoded, b"\0" * 8])

    def step(position, found, done):
        size = tf.io.decode_raw(tf.strings.substr(padded, tf.minimum(position, length), 4), tf.uint8)
        size = tf.reduce_sum(tf.cast(size, tf.int64) * tf.constant([1 << 24, 1 << 16, 1 << 8, 1], tf.int64))
        kind = tf.strings.substr(padded, tf.minimum(position + 4, length), 4)
        found = found | tf.equal(kind, b"tRNS")
        ended = tf.equal(kind, b"IDAT") | tf.equal(kind, b"IEND") | (position + 8 > length)
        moved = position + 12 + tf.cast(tf.minimum(size, 1 << 30), tf.int32)
        return moved, found, ended | (moved >= length)

    _, found, _ = tf.while_loop(
        lambda *state: tf.logical_not(state[-1]),
        step,
        (tf.constant(8), tf.constant(False), tf.constant(False)),
        maximum_iterations=4096,
    )
    return found


def bmp_rgb(encoded, refused):
    """A BMP as Pillow reads it, where ``bmp_served`` (in TensorFlow ops) says TensorFlow's decoder can: 8-bit
    palette indices through the colour table (TensorFlow returns the indices), 32-bit BITFIELDS with an alpha mask
    composited on white (BI_RGB's fourth byte ignored), 24-bit as it is; any other BMP goes to ``refused``."""
    import tensorflow as tf

    from components.orientation import read_bytes

    length = tf.strings.length(encoded)
    header = tf.cast(read_bytes(encoded, length, 0, 74), tf.int64)

    def little(at: int, size: int):  # an unsigned little-endian field of the file
        return sum(header[at + i] * (1 << (8 * i)) for i in range(size))

    info_size, bits, compression = little(14, 4), little(28, 2), little(30, 4)
    bgr_masks = tf.equal(little(54, 4), 0xFF0000) & tf.equal(little(58, 4), 0xFF00) & tf.equal(little(62, 4), 0xFF)
    plain = tf.equal(compression, 0) & (tf.equal(bits, 8) | tf.equal(bits, 24) | tf.equal(bits, 32))
    masked = tf.equal(compression, 3) & tf.equal(bits, 32) & bgr_masks

    def decoded():
        pixels = tf.io.decode_bmp(encoded)  # 1 (palette indices), 3 or 4 channels

        def indexed():
            table = tf.cast(read_bytes(encoded, length, 14 + tf.cast(info_size, tf.int32), 1024), tf.uint8)
            rgb = tf.reverse(tf.reshape(table, [256, 4])[:, :3], [1])  # stored B, G, R, 0
            return tf.gather(rgb, tf.cast(pixels[..., 0], tf.int32))

        def four():
            alpha = masked & (info_size >= 56) & tf.equal(little(66, 4), 0xFF000000)
            return tf.cond(
                alpha, lambda: tf.cast(composite_pillow(tf.cast(pixels, tf.int32)), tf.uint8), lambda: pixels[..., :3]
            )

        channels = tf.shape(pixels)[-1]
        return tf.case(
            [(tf.equal(channels, 1), indexed), (tf.equal(channels, 4), four)], default=lambda: pixels[..., :3]
        )

    return tf.cond(plain | masked, decoded, refused)
