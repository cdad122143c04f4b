"""The models, by name. Each builder makes the same network whether it runs in a TPU strategy's scope or on a CPU,
so weights trained on one load into the other. Under mixed precision the output layer stays float32 (a numerically
sound softmax and loss).

Every image model takes uint8 pixels, ``[N, size, size, 3]`` in 0..255, and scales them to [0, 1] itself (a
``Rescaling(1/255)`` layer, as keras-io's image examples do): the SavedModel, the TFLite files and any runtime feed
it pixels as they are decoded, and the input pipeline moves a quarter of the bytes to the devices."""

from __future__ import annotations

from collections.abc import Callable

# what a model takes, recorded with the model and its export: a model or export without it (made before the scaling
# moved inside) takes float pixels in [0, 1]
INPUT_PIXELS = "uint8"


def pixels_in(image_size: int) -> list:
    """The first layers of every model: uint8 pixels in, scaled to [0, 1] (no weights: the trained weights of a
    network without them load as they are)."""
    import keras
    from keras import layers

    return [keras.Input(shape=(image_size, image_size, 3), dtype="uint8"), layers.Rescaling(1.0 / 255)]


def softmax(num_classes: int):
    """The output layer: float32 under mixed precision, for a numerically sound softmax and loss."""
    from keras import layers

    return layers.Dense(num_classes, activation="softmax", dtype="float32")


# the codelab convnet's stack: convolutions as (filters, kernel), "pool" a 2x2 max pooling
CODELAB_STACK = ((16, 3), (30, 3), "pool", (60, 3), "pool", (90, 3), "pool", (110, 3), "pool", (130, 3), (40, 1))


def convnet(image_size: int, num_classes: int, batch_norm: bool, name: str):
    """The codelab's stack, then global average pooling and softmax. With ``batch_norm`` each convolution (without
    its bias, which batch norm's offset replaces) is normalised before its ReLU; the moving statistics follow the
    batches with momentum 0.9, as the codelab's SqueezeNet does (a short run's last steps are what it serves with)."""
    import keras
    from keras import layers

    stack: list = pixels_in(image_size)
    for item in CODELAB_STACK:
        if item == "pool":
            stack.append(layers.MaxPooling2D(2))
        elif batch_norm:
            stack += [layers.Conv2D(*item, padding="same", use_bias=False), layers.BatchNormalization(momentum=0.9),
                      layers.Activation("relu")]  # fmt: skip
        else:
            stack.append(layers.Conv2D(*item, padding="same", activation="relu"))
    stack += [layers.GlobalAveragePooling2D(), softmax(num_classes)]
    return keras.Sequential(stack, name=name)


def codelab_convnet(image_size: int, num_classes: int):
    """The "Keras on TPU" codelab's convnet: stacked 3x3 / 1x1 convolutions, max pooling, global average pooling,
    softmax (293,233 parameters for 5 classes at 192x192). Without batch norm its ReLUs can all go dark on smooth,
    upscaled images (the demo digits at 192: bench/RESULTS.md), and training stays at chance."""
    return convnet(image_size, num_classes, batch_norm=False, name="codelab_convnet")


def codelab_convnet_bn(image_size: int, num_classes: int):
    """The codelab convnet with batch norm before each ReLU: the default image model, which learns where the plain
    one stalls (bench/RESULTS.md)."""
    return convnet(image_size, num_classes, batch_norm=True, name="codelab_convnet_bn")


def squeezenet(image_size: int, num_classes: int):
    """The codelab's SqueezeNet: fire modules (1x1 squeeze, then 1x1 and 3x3 expands) with batch norm
    (120,613 parameters for 5 classes)."""
    import keras
    from keras import layers

    def conv_bn(x, filters: int, kernel: int):
        x = layers.Conv2D(filters, kernel, padding="same", activation="relu")(x)
        return layers.BatchNormalization(momentum=0.9)(x)

    def fire(x, squeeze: int, expand: int):
        x = conv_bn(x, squeeze, 1)
        return layers.concatenate([conv_bn(x, expand // 2, 1), conv_bn(x, expand // 2, 3)])

    inputs, scale = pixels_in(image_size)
    y = conv_bn(scale(inputs), 32, 3)
    for squeeze, expand in ((24, 48), (48, 96), (64, 128), (48, 96)):
        y = layers.MaxPooling2D(2)(fire(y, squeeze, expand))
    y = layers.GlobalAveragePooling2D()(fire(y, 24, 48))
    outputs = softmax(num_classes)(y)
    return keras.Model(inputs, outputs, name="squeezenet")


CIFAR_BLOCKS = (32, 64, 128)
CIFAR_DENSE = 128


def cifar_convnet(image_size: int, num_classes: int):
    """Three blocks of two 3x3 convolutions with batch norm, max pooling and dropout, for 32x32 inputs (CIFAR-10)."""
    import keras
    from keras import layers

    stack: list = pixels_in(image_size)
    for index, filters in enumerate(CIFAR_BLOCKS):
        for _ in range(2):
            stack += [
                layers.Conv2D(filters, 3, padding="same", use_bias=False),
                layers.BatchNormalization(),
                layers.Activation("relu"),
            ]
        stack += [layers.MaxPooling2D(2), layers.Dropout(0.2 + 0.1 * index)]
    stack += [
        layers.GlobalAveragePooling2D(),
        layers.Dense(CIFAR_DENSE, activation="relu"),
        layers.Dropout(0.5),
        softmax(num_classes),
    ]
    return keras.Sequential(stack, name="cifar_convnet")


def dense_baseline(image_size: int, num_classes: int):
    """The codelab's first model: flatten the pixels, one softmax layer. A floor to compare convnets against."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            *pixels_in(image_size),
            layers.Flatten(),
            softmax(num_classes),
        ],
        name="dense_baseline",
    )


# the text models (the IMDB-on-TPU article's): token ids in, ``[N, sequence_length]`` int32 (0 pads, at the end, as
# the convert step writes them), then an Embedding; the LSTMs skip the padding (mask_zero), the convolution sees it
TEXT_EMBEDDING = 32  # the article's embedding width
TEXT_UNITS = 32


def tokens_in(sequence_length: int, vocabulary_size: int, mask: bool) -> list:
    import keras
    from keras import layers

    return [keras.Input(shape=(sequence_length,), dtype="int32"),
            layers.Embedding(vocabulary_size, TEXT_EMBEDDING, mask_zero=mask)]  # fmt: skip


def lstm(sequence_length: int, num_classes: int, vocabulary_size: int):
    """The article's model: Embedding(vocabulary, 32) -> LSTM -> softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [*tokens_in(sequence_length, vocabulary_size, mask=True), layers.LSTM(TEXT_UNITS), softmax(num_classes)],
        name="lstm",
    )


def bilstm(sequence_length: int, num_classes: int, vocabulary_size: int):
    """The LSTM read both ways: Embedding -> Bidirectional(LSTM) -> softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [*tokens_in(sequence_length, vocabulary_size, mask=True), layers.Bidirectional(layers.LSTM(TEXT_UNITS)),
         softmax(num_classes)],
        name="bilstm",
    )  # fmt: skip


def cnn1d(sequence_length: int, num_classes: int, vocabulary_size: int):
    """A fast baseline: Embedding -> Conv1D(64, 5) -> global max pooling -> softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [*tokens_in(sequence_length, vocabulary_size, mask=False),
         layers.Conv1D(64, 5, padding="same", activation="relu"), layers.GlobalMaxPooling1D(), softmax(num_classes)],
        name="cnn1d",
    )  # fmt: skip


MODELS: dict[str, Callable] = {
    "codelab_convnet_bn": codelab_convnet_bn,
    "codelab_convnet": codelab_convnet,
    "squeezenet": squeezenet,
    "cifar_convnet": cifar_convnet,
    "dense_baseline": dense_baseline,
    "lstm": lstm,
    "bilstm": bilstm,
    "cnn1d": cnn1d,
}
TEXT_MODELS = ("lstm", "bilstm", "cnn1d")
AUTO_MODEL = "auto"  # the default model of the examples' modality
DEFAULT_MODELS = {"image": "codelab_convnet_bn", "text": "lstm"}
# the image models that normalise their activations with batch norm (what to try when a run does not learn)
BATCH_NORM_MODELS = ("codelab_convnet_bn", "squeezenet", "cifar_convnet")


def modality_of(name: str) -> str:
    return "text" if name in TEXT_MODELS else "image"


# the smallest square input each model builds for (its pooling and strides would reach a size of zero below it);
# measured by building each at every size, and checked in tests/components/test_train.py
MIN_IMAGE_SIZE = {"codelab_convnet_bn": 16, "codelab_convnet": 16, "squeezenet": 16, "cifar_convnet": 8,
                  "dense_baseline": 8}  # fmt: skip


def check_image_size(name: str, image_size: int, flag: str = "--image-size") -> None:
    """A one-line error when ``name`` cannot take ``image_size`` pixels (instead of Keras's "Computed output size
    would be zero or negative" deep in the model)."""
    from components.cli import UsageError

    least = MIN_IMAGE_SIZE.get(name, 8)
    if image_size < least:
        fits = ", ".join(model for model, size in sorted(MIN_IMAGE_SIZE.items()) if size <= image_size)
        raise UsageError(
            f"{flag} {image_size} is too small for {name}, which needs {least} or more"
            + (f"; {fits} take {image_size}" if fits else "")
        )


def build_model(name: str, size: int, num_classes: int, vocabulary_size: int = 0):
    """Builds the named model under the current Keras dtype policy: ``size`` is an image model's image side, a text
    model's sequence length (and ``vocabulary_size`` its embedding's rows); ``KeyError`` names the valid choices."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}: choose one of {', '.join(sorted(MODELS))}")
    if name in TEXT_MODELS:
        return MODELS[name](size, num_classes, vocabulary_size)
    return MODELS[name](size, num_classes)
