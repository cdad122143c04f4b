"""Image preprocessing shared by the conversion and the serving signature, so that both resize the same way.

Resize preserving the aspect ratio so that the image fills a ``size`` x ``size`` square, then centre-crop. Two
implementations of the same arithmetic: ``fill_square`` in TensorFlow ops for the exported serving graph, and
``fill_square_pillow`` for the conversion's workers (no TensorFlow there, and Pillow releases the GIL so that threads
share the cores). Both use the antialiased triangle (bilinear) filter and the same sizes and crop offsets;
``tests/components/test_convert.py`` checks that they agree to within rounding.
"""

from __future__ import annotations


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


def decode_rgb(encoded):
    """Decodes JPEG / PNG (/ GIF / BMP) bytes into an ``[H, W, 3]`` uint8 tensor (first frame of animations)."""
    import tensorflow as tf

    image = tf.io.decode_image(encoded, channels=3, expand_animations=False, dtype=tf.uint8)
    image.set_shape([None, None, 3])
    return image
