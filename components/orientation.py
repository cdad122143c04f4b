"""The orientation a picture was taken in, read from its encoded bytes in TensorFlow graph ops, and applied: the
serving graph's half of ``ImageOps.exif_transpose``, which the conversion applies (``components.decoding``), so
that a phone photo stands upright in both. It reads what Pillow reads, for the formats the serving graph decodes:

* JPEG: the first APP1 segment starting ``Exif\\0\\0`` (it may follow APP0/JFIF, APP2/ICC, ...), a TIFF header
  (``II`` little- or ``MM`` big-endian), IFD0 scanned for tag 0x0112 (SHORT / LONG, first value, as Pillow);
  if EXIF has no orientation tag, the XMP APP1 (``http://ns.adobe.com/xap/1.0/\\0``) is searched for
  ``tiff:Orientation="N"`` / ``<tiff:Orientation>N`` as Pillow's ``Image.getexif`` does.
* PNG: the ``eXIf`` chunk (a bare TIFF block); XMP in an uncompressed ``iTXt`` ``XML:com.adobe.xmp`` chunk.

Anything missing, truncated or malformed gives 1 (no transform); it never raises. It runs on a scalar string inside
``tf.function`` and ``tf.map_fn``, with ops the serving TensorFlow 2.15 has (``tests/components/test_serving.py``).
"""

from __future__ import annotations

MAX_SEGMENTS = 512  # JPEG marker segments scanned before the image data
MAX_CHUNKS = 65_536  # PNG chunks scanned (eXIf may follow the image data, after thousands of IDAT chunks)


def read_bytes(data, length, pos, n):
    """``n`` (static) bytes of ``data`` (``length`` long) at ``pos`` as int32 [n], zero-padded past the end; never
    raises. The byte reader of every walk over encoded images in the serving graph (here and ``components.imaging``)."""
    import tensorflow as tf

    pos = tf.clip_by_value(pos, 0, length)
    piece = tf.strings.substr(data, pos, n)
    piece = tf.strings.substr(tf.strings.join([piece, b"\0" * n]), 0, n)
    return tf.cast(tf.io.decode_raw(piece, tf.uint8), tf.int32)


def _be16(b, i):
    return b[i] * 256 + b[i + 1]


def _be32(b, i):
    import tensorflow as tf

    return (
        (tf.cast(b[i], tf.int64) * 256 + tf.cast(b[i + 1], tf.int64)) * 256 + tf.cast(b[i + 2], tf.int64)
    ) * 256 + tf.cast(b[i + 3], tf.int64)


def _tiff_orientation(data, length, start, end):
    """Orientation tag of the TIFF block data[start:end]; -1 when the tag is absent (0 = block unusable)."""
    import tensorflow as tf

    start = tf.clip_by_value(start, 0, length)
    size = tf.clip_by_value(end, start, length) - start
    block = tf.cast(tf.io.decode_raw(tf.strings.substr(data, start, size), tf.uint8), tf.int64)
    n = tf.shape(block, out_type=tf.int64)[0]
    block = tf.concat([block, tf.zeros([16], tf.int64)], 0)  # so that every gather below has something to hit

    def at(i):
        return tf.gather(block, tf.clip_by_value(i, 0, n + 15))

    b0, b1 = at(tf.constant(0, tf.int64)), at(tf.constant(1, tf.int64))
    little = tf.logical_and(tf.equal(b0, 0x49), tf.equal(b1, 0x49))
    big = tf.logical_and(tf.equal(b0, 0x4D), tf.equal(b1, 0x4D))

    def u16(i):
        lo, hi = at(i), at(i + 1)
        return tf.where(little, lo + hi * 256, lo * 256 + hi)

    def u32(i):
        a, b, c, d = at(i), at(i + 1), at(i + 2), at(i + 3)
        return tf.where(little, ((d * 256 + c) * 256 + b) * 256 + a, ((a * 256 + b) * 256 + c) * 256 + d)

    header_ok = tf.logical_and(tf.logical_or(little, big), tf.equal(u16(tf.constant(2, tf.int64)), 42))
    header_ok = tf.logical_and(header_ok, n >= 8)
    ifd = u32(tf.constant(4, tf.int64))
    count = u16(ifd)
    ifd_ok = tf.logical_and(header_ok, ifd + 2 <= n)
    count = tf.where(ifd_ok, count, 0)
    entry = ifd + 2 + 12 * tf.range(count, dtype=tf.int64)  # count <= 65535: a vectorised scan of IFD0
    tag = u16(entry)
    hit = tf.logical_and(tf.equal(tag, 0x0112), entry + 12 <= n)
    # index of the first hit, or ``count`` when none (a sentinel, so that argmax never sees an empty tensor)
    first = tf.argmax(tf.cast(tf.concat([hit, [True]], 0), tf.int32), output_type=tf.int64)
    found = first < count
    where = ifd + 2 + 12 * first
    kind = u16(where + 2)
    number = u32(where + 4)
    # Pillow keeps the first value when there are several; the values sit in the entry when they fit its 4 bytes,
    # otherwise at the offset it gives. Pillow skips, as if absent (so XMP may say), a tag of no value, of a type it
    # does not know, or whose values run past the block. The serving graph turns by SHORT (3), LONG (4), SSHORT (8)
    # and SLONG (9), what cameras write; a tag of another type is present but no orientation here (0: no XMP)
    sizes = tf.constant([0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8, 4, 0, 0, 8, 0], tf.int64)  # a value's bytes, by type
    unit = tf.gather(sizes, tf.minimum(kind, 17))
    total = number * unit
    at_value = tf.where(total <= 4, where + 8, u32(where + 8))
    read = tf.logical_and(tf.logical_and(unit > 0, number >= 1), at_value + total <= n)
    short = tf.logical_or(tf.equal(kind, 3), tf.equal(kind, 8))
    long = tf.logical_or(tf.equal(kind, 4), tf.equal(kind, 9))
    value = tf.where(short, u16(at_value), u32(at_value))
    return tf.cast(tf.where(tf.logical_and(found, read), tf.where(short | long, value, 0), -1), tf.int32)


def _xmp_orientation(data, length, start, end):
    """First ``tiff:Orientation="N"`` / ``tiff:Orientation>N`` digit in data[start:end]; -1 when none."""
    import tensorflow as tf

    start = tf.clip_by_value(start, 0, length)
    size = tf.clip_by_value(end, start, length) - start
    text = tf.strings.substr(data, start, size)
    pattern = r'(?s)^.*?tiff:Orientation(?:="|>)([0-9]).*$'
    matched = tf.strings.regex_full_match(text, pattern)
    digit = tf.strings.regex_replace(text, pattern, r"\1", replace_global=False)
    digit = tf.strings.to_number(tf.where(matched, digit, "-1"), tf.int32)
    return tf.where(tf.greater(size, 0), digit, -1)


def _jpeg_orientation(data, length):
    import tensorflow as tf

    def cond(i, pos, exif_start, exif_end, xmp_start, xmp_end, done):
        return tf.logical_not(done)

    def body(i, pos, exif_start, exif_end, xmp_start, xmp_end, done):
        head = read_bytes(data, length, pos, 4)
        marker = head[1]
        seg_len = _be16(head, 2)
        bad = tf.logical_or(tf.not_equal(head[0], 0xFF), pos + 2 > length)
        fill = tf.equal(marker, 0xFF)  # fill byte before a marker
        standalone = tf.logical_or(tf.equal(marker, 0x01), tf.logical_and(marker >= 0xD0, marker <= 0xD7))
        stop = tf.logical_or(bad, tf.logical_or(tf.equal(marker, 0xDA), tf.equal(marker, 0xD9)))  # SOS / EOI
        stop = tf.logical_or(stop, tf.logical_and(tf.logical_not(fill | standalone), seg_len < 2))
        ident = tf.strings.substr(
            tf.strings.join([tf.strings.substr(data, tf.minimum(pos + 4, length), 29), b"\0" * 29]), 0, 29
        )
        app1 = tf.logical_and(tf.equal(marker, 0xE1), tf.logical_not(stop))
        is_exif = tf.logical_and(app1, tf.equal(tf.strings.substr(ident, 0, 6), b"Exif\0\0"))
        is_xmp = tf.logical_and(app1, tf.equal(ident, b"http://ns.adobe.com/xap/1.0/\0"))
        first_exif = tf.logical_and(is_exif, exif_start < 0)
        exif_start = tf.where(first_exif, pos + 10, exif_start)
        exif_end = tf.where(first_exif, pos + 2 + seg_len, exif_end)
        xmp_start = tf.where(is_xmp, pos + 4 + 29, xmp_start)  # Pillow keeps the last XMP segment
        xmp_end = tf.where(is_xmp, pos + 2 + seg_len, xmp_end)
        step = tf.where(fill, 1, tf.where(standalone, 2, 2 + seg_len))
        i = i + 1
        done = tf.logical_or(stop, i >= MAX_SEGMENTS)
        return i, pos + step, exif_start, exif_end, xmp_start, xmp_end, done

    minus = tf.constant(-1, tf.int32)
    init = (tf.constant(0), tf.constant(2), minus, minus, minus, minus, tf.constant(False))
    _, _, exif_start, exif_end, xmp_start, xmp_end, _ = tf.while_loop(cond, body, init)
    return exif_start, exif_end, xmp_start, xmp_end


def _png_orientation(data, length):
    import tensorflow as tf

    def cond(i, pos, exif_start, exif_end, xmp_start, xmp_end, done):
        return tf.logical_not(done)

    def body(i, pos, exif_start, exif_end, xmp_start, xmp_end, done):
        head = read_bytes(data, length, pos, 8)
        size = tf.cast(tf.minimum(_be32(head, 0), 2**30), tf.int32)
        kind = tf.strings.substr(
            tf.strings.join([tf.strings.substr(data, tf.minimum(pos + 4, length), 4), b"\0" * 4]), 0, 4
        )
        bad = pos + 8 > length
        is_exif = tf.logical_and(tf.logical_not(bad), tf.equal(kind, b"eXIf"))
        first_exif = tf.logical_and(is_exif, exif_start < 0)
        exif_start = tf.where(first_exif, pos + 8, exif_start)
        exif_end = tf.where(first_exif, pos + 8 + size, exif_end)
        key = b"XML:com.adobe.xmp\0\0\0\0\0"  # keyword, NUL, compression flag 0, method 0, empty language, empty key
        head22 = tf.strings.substr(
            tf.strings.join([tf.strings.substr(data, tf.minimum(pos + 8, length), len(key)), b"\0" * len(key)]),
            0,
            len(key),
        )
        is_xmp = tf.logical_and(tf.logical_not(bad), tf.logical_and(tf.equal(kind, b"iTXt"), tf.equal(head22, key)))
        xmp_start = tf.where(is_xmp, pos + 8 + len(key), xmp_start)
        xmp_end = tf.where(is_xmp, pos + 8 + size, xmp_end)
        i = i + 1
        done = tf.logical_or(tf.logical_or(bad, tf.equal(kind, b"IEND")), i >= MAX_CHUNKS)
        return i, pos + 12 + size, exif_start, exif_end, xmp_start, xmp_end, done

    minus = tf.constant(-1, tf.int32)
    init = (tf.constant(0), tf.constant(8), minus, minus, minus, minus, tf.constant(False))
    _, _, exif_start, exif_end, xmp_start, xmp_end, _ = tf.while_loop(cond, body, init)
    return exif_start, exif_end, xmp_start, xmp_end


def exif_orientation(contents):
    """EXIF orientation (1..8) of one encoded image (scalar string tensor); 1 when absent or unusable."""
    import tensorflow as tf

    data = tf.convert_to_tensor(contents, tf.string)
    length = tf.strings.length(data)
    sig = tf.strings.substr(data, 0, 8)
    is_jpeg = tf.equal(tf.strings.substr(sig, 0, 2), b"\xff\xd8")
    is_png = tf.equal(sig, b"\x89PNG\r\n\x1a\n")
    minus = tf.constant(-1, tf.int32)

    def none():
        return minus, minus, minus, minus

    # where each format keeps its EXIF (TIFF) block and its XMP; the block is read once, after the walks, not in each
    # of them (a copy of the reader is 450 of the serving graph's nodes)
    exif_start, exif_end, xmp_start, xmp_end = tf.case(
        [(is_jpeg, lambda: _jpeg_orientation(data, length)), (is_png, lambda: _png_orientation(data, length))],
        default=none,
    )
    exif = tf.where(exif_start >= 0, _tiff_orientation(data, length, exif_start, exif_end), -1)
    # XMP only when EXIF has no orientation tag at all (Pillow's Image.getexif)
    orientation = tf.cond(
        tf.logical_and(tf.equal(exif, -1), xmp_start >= 0),
        lambda: _xmp_orientation(data, length, xmp_start, xmp_end),
        lambda: exif,
    )
    return tf.where(tf.logical_and(orientation >= 1, orientation <= 8), orientation, 1)


def apply_orientation(image, orientation):
    """``ImageOps.exif_transpose`` for an [H, W, C] tensor and an orientation 1..8 (anything else: unchanged)."""
    import tensorflow as tf

    # reversals and transposes as tf.image's flips and rotations make them, without their checks of the shape (a
    # decoded image is [H, W, C]), which would be 400 of the serving graph's nodes
    def swapped(pixels):
        return tf.transpose(pixels, [1, 0, 2])

    branches = [
        lambda: image,  # 1 (and anything invalid)
        lambda: tf.reverse(image, [1]),  # 2 FLIP_LEFT_RIGHT
        lambda: tf.reverse(image, [0, 1]),  # 3 ROTATE_180
        lambda: tf.reverse(image, [0]),  # 4 FLIP_TOP_BOTTOM
        lambda: swapped(image),  # 5 TRANSPOSE
        lambda: tf.reverse(swapped(image), [1]),  # 6 ROTATE_270 (90 degrees clockwise)
        lambda: tf.reverse(swapped(image), [0, 1]),  # 7 TRANSVERSE
        lambda: swapped(tf.reverse(image, [1])),  # 8 ROTATE_90 (90 degrees counter-clockwise)
    ]
    index = tf.where(tf.logical_and(orientation >= 1, orientation <= 8), orientation - 1, 0)
    out = tf.switch_case(index, branches)
    out.set_shape([None, None, image.shape[-1]])
    return out
