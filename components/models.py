"""The models, by name. Each builder makes the same network whether it runs in a TPU strategy's scope or on a CPU,
so weights trained on one load into the other. Under mixed precision the output layer stays float32 (a numerically
sound softmax and loss).

Every image model takes uint8 pixels, ``[N, size, size, 3]`` in 0..255, and scales them to [0, 1] itself (a
``Rescaling(1/255)`` layer, as keras-io's image examples do): the SavedModel, the TFLite files and any runtime feed
it pixels as they are decoded, and the input pipeline moves a quarter of the bytes to the devices."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Backbone:
    """A pretrained image network of ``keras.applications``, without its classifier, and what fine-tuning it needs.

    ``application``: its builder's name in ``keras.applications``; ``takes``: the range its first layer takes, 0..255
    (it normalises them itself: ``include_preprocessing``) or -1..1 (Xception); ``block``: the pattern of its layer
    names that gives a layer's block (a layer that matches none belongs to the block before it); ``imagenet``: its
    ImageNet weights without the classifier in the keras-applications bucket, with their MD5 hash (as
    ``keras.applications`` downloads them); ``min_size``: the smallest square input it builds for."""

    application: str
    takes: str
    block: str
    imagenet: tuple[str, str]
    min_size: int = 32


KERAS_APPLICATIONS = "https://storage.googleapis.com/tensorflow/keras-applications/"
# the fine-tuned backbones (the codelab series' "modern convnets" lab, and keras-io's transfer-learning examples)
BACKBONES = {
    "mobilenet_v3_small": Backbone(
        "MobileNetV3Small", "0..255", r"(expanded_conv(?:_\d+)?|conv_1)(?:_|$)",
        (f"{KERAS_APPLICATIONS}mobilenet_v3/weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5",
         "d3e8ec802a04aa4fc771ee12a9a9b836"),
    ),
    "mobilenet_v3_large": Backbone(
        "MobileNetV3Large", "0..255", r"(expanded_conv(?:_\d+)?|conv_1)(?:_|$)",
        (f"{KERAS_APPLICATIONS}mobilenet_v3/weights_mobilenet_v3_large_224_1.0_float_no_top_v2.h5",
         "07fb09a5933dd0c8eaafa16978110389"),
    ),
    "efficientnet_v2_b0": Backbone(
        "EfficientNetV2B0", "0..255", r"(block\d+[a-z]|top)_",
        (f"{KERAS_APPLICATIONS}efficientnet_v2/efficientnetv2-b0_notop.h5", "893217f2bb855e2983157299931e43ff"),
    ),
    "xception": Backbone(
        "Xception", "-1..1", r"(block\d+)_",
        (f"{KERAS_APPLICATIONS}xception/xception_weights_tf_dim_ordering_tf_kernels_notop.h5",
         "b0042744bf5b25fce3cb969f33bebb97"),
        min_size=71,
    ),
}  # fmt: skip
HEAD_DROPOUT = 0.2  # before the classifier, as keras-io's fine-tuning examples have it
BATCH_NORM_MOMENTUM = 0.9


def pretrained(name: str, image_size: int, num_classes: int):
    """A ``BACKBONES`` network (its weights as built: train loads the pretrained ones) under a new classifier:
    uint8 pixels, scaled to [0, 1] as every model here does, then to the range the backbone takes (its own
    preprocessing, inside the model: the SavedModel and TFLite files still take pixels as decoded), the backbone
    with global average pooling, dropout, softmax. Frozen batch norm layers run in inference mode (Keras 3): fine-tuning
    keeps them frozen, so the backbone keeps the statistics it learned. Trained from scratch, they follow the batches
    with momentum 0.9, as the codelab's models do (the applications' 0.99 to 0.999 leave a short run's statistics
    near their initial values, and its validation at chance)."""
    import keras
    from keras import layers

    spec = BACKBONES[name]
    inputs, scale = pixels_in(image_size)
    to_range = layers.Rescaling(255.0) if spec.takes == "0..255" else layers.Rescaling(2.0, offset=-1.0)
    backbone = getattr(keras.applications, spec.application)(
        include_top=False, weights=None, input_shape=(image_size, image_size, 3), pooling="avg"
    )
    for layer in backbone.layers:  # (used only where they learn: trained from scratch, --weights none)
        if isinstance(layer, layers.BatchNormalization):
            layer.momentum = BATCH_NORM_MOMENTUM
    features = backbone(to_range(scale(inputs)))
    outputs = softmax(num_classes)(layers.Dropout(HEAD_DROPOUT)(features))
    return keras.Model(inputs, outputs, name=name)


def backbone_of(model):
    """The pretrained network inside a ``pretrained`` model (its one layer that is a model itself)."""
    import keras

    return next(layer for layer in model.layers if isinstance(layer, keras.Model))


def backbone_blocks(model) -> list[list]:
    """The layers of ``model``'s backbone by block, bottom to top: the stem (before the first block) first."""
    import re

    backbone = backbone_of(model)
    pattern = re.compile(BACKBONES[model.name].block)
    blocks: list[list] = [[]]
    current = None
    for layer in backbone.layers:
        found = pattern.match(layer.name)
        if found and found.group(1) != current:
            current = found.group(1)
            blocks.append([])
        blocks[-1].append(layer)
    return blocks


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
    **dict.fromkeys(BACKBONES, pretrained),
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
                  "dense_baseline": 8, **{name: spec.min_size for name, spec in BACKBONES.items()}}  # fmt: skip


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
    if name in BACKBONES:
        return pretrained(name, size, num_classes)
    return MODELS[name](size, num_classes)
