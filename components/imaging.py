"""Image preprocessing shared by the conversion and the serving signature, so that both resize the same way.

Resize preserving the aspect ratio so that the image fills a ``size`` x ``size`` square, then centre-crop.
Written with TensorFlow ops so that it runs eagerly in the Beam workers and inside the exported serving graph.
"""

from __future__ import annotations


def fill_square(image, size: int):
    """Resizes an ``[H, W, C]`` uint8 image to fill ``size`` x ``size`` and centre-crops it; returns uint8."""
    import tensorflow as tf

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


def decode_rgb(encoded):
    """Decodes JPEG / PNG (/ GIF / BMP) bytes into an ``[H, W, 3]`` uint8 tensor (first frame of animations)."""
    import tensorflow as tf

    image = tf.io.decode_image(encoded, channels=3, expand_animations=False, dtype=tf.uint8)
    image.set_shape([None, None, 3])
    return image


def to_model_input(image):
    """uint8 pixels to the float32 ``[0, 1]`` range the models are trained on."""
    import tensorflow as tf

    return tf.cast(image, tf.float32) / 255.0
