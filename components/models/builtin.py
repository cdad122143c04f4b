"""The built-in models, built as every model is: ``build(spec, **hparams)`` (``components.models.spec.ModelSpec``),
returning a Keras 3 model. Each builder makes the same network whether it runs in a TPU strategy's scope or on a CPU,
so weights trained on one load into the other. Under mixed precision the output layer stays float32 (a numerically
sound softmax and loss).

Every image model takes uint8 pixels, ``[N, size, size, 3]`` in 0..255, and scales them to [0, 1] itself (a
``Rescaling(1/255)`` layer, as keras-io's image examples do): the SavedModel, the TFLite files and any runtime feed
it pixels as they are decoded, and the input pipeline moves a quarter of the bytes to the devices. Every text model
takes the conversion's token ids, ``[N, sequence_length]`` int32 (0 pads, at the end)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def pixels_in(spec) -> list:
    """The first layers of every image model: uint8 pixels in, scaled to [0, 1] (no weights: the trained weights of
    a network without them load as they are)."""
    from keras import layers

    return [spec.inputs(), layers.Rescaling(1.0 / 255)]


def softmax(num_classes: int):
    """The output layer: float32 under mixed precision, for a numerically sound softmax and loss."""
    from keras import layers

    return layers.Dense(num_classes, activation="softmax", dtype="float32")


# the codelab convnet's stack: convolutions as (filters, kernel), "pool" a 2x2 max pooling
CODELAB_STACK = ((16, 3), (30, 3), "pool", (60, 3), "pool", (90, 3), "pool", (110, 3), "pool", (130, 3), (40, 1))


def convnet(spec, batch_norm: bool, name: str):
    """The codelab's stack, then global average pooling and softmax. With ``batch_norm`` each convolution (without
    its bias, which batch norm's offset replaces) is normalised before its ReLU; the moving statistics follow the
    batches with momentum 0.9, as the codelab's SqueezeNet does (a short run's last steps are what it serves with)."""
    import keras
    from keras import layers

    stack: list = pixels_in(spec)
    for item in CODELAB_STACK:
        if item == "pool":
            stack.append(layers.MaxPooling2D(2))
        elif batch_norm:
            stack += [
                layers.Conv2D(*item, padding="same", use_bias=False),
                layers.BatchNormalization(momentum=0.9),
                layers.Activation("relu"),
            ]
        else:
            stack.append(layers.Conv2D(*item, padding="same", activation="relu"))
    stack += [layers.GlobalAveragePooling2D(), softmax(spec.num_classes)]
    return keras.Sequential(stack, name=name)


def codelab_convnet(spec):
    """The "Keras on TPU" codelab's convnet: stacked 3x3 / 1x1 convolutions, max pooling, global average pooling,
    softmax (293,233 parameters for 5 classes at 192x192). Without batch norm its ReLUs can all go dark on smooth,
    upscaled images (the demo digits at 192: bench/RESULTS.md), and training stays at chance."""
    return convnet(spec, batch_norm=False, name="codelab_convnet")


def codelab_convnet_bn(spec):
    """The codelab convnet with batch norm before each ReLU: the default image model, which learns where the plain
    one stalls (bench/RESULTS.md)."""
    return convnet(spec, batch_norm=True, name="codelab_convnet_bn")


def squeezenet(spec):
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

    inputs, scale = pixels_in(spec)
    y = conv_bn(scale(inputs), 32, 3)
    for squeeze, expand in ((24, 48), (48, 96), (64, 128), (48, 96)):
        y = layers.MaxPooling2D(2)(fire(y, squeeze, expand))
    y = layers.GlobalAveragePooling2D()(fire(y, 24, 48))
    outputs = softmax(spec.num_classes)(y)
    return keras.Model(inputs, outputs, name="squeezenet")


CIFAR_BLOCKS = (32, 64, 128)
CIFAR_DENSE = 128


def cifar_convnet(spec):
    """Three blocks of two 3x3 convolutions with batch norm, max pooling and dropout, for 32x32 inputs (CIFAR-10)."""
    import keras
    from keras import layers

    stack: list = pixels_in(spec)
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
        softmax(spec.num_classes),
    ]
    return keras.Sequential(stack, name="cifar_convnet")


def dense_baseline(spec):
    """The codelab's first model: flatten the pixels, one softmax layer. A floor to compare convnets against."""
    import keras
    from keras import layers

    return keras.Sequential([*pixels_in(spec), layers.Flatten(), softmax(spec.num_classes)], name="dense_baseline")


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
MOBILENET_V3_BLOCK = r"(expanded_conv(?:_\d+)?|conv_1)(?:_|$)"
# the fine-tuned backbones (the codelab series' "modern convnets" lab, and keras-io's transfer-learning examples)
BACKBONES = {
    "mobilenet_v3_small": Backbone(
        "MobileNetV3Small",
        "0..255",
        MOBILENET_V3_BLOCK,
        (
            f"{KERAS_APPLICATIONS}mobilenet_v3/weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5",
            "d3e8ec802a04aa4fc771ee12a9a9b836",
        ),
    ),
    "mobilenet_v3_large": Backbone(
        "MobileNetV3Large",
        "0..255",
        MOBILENET_V3_BLOCK,
        (
            f"{KERAS_APPLICATIONS}mobilenet_v3/weights_mobilenet_v3_large_224_1.0_float_no_top_v2.h5",
            "07fb09a5933dd0c8eaafa16978110389",
        ),
    ),
    "efficientnet_v2_b0": Backbone(
        "EfficientNetV2B0",
        "0..255",
        r"(block\d+[a-z]|top)_",
        (f"{KERAS_APPLICATIONS}efficientnet_v2/efficientnetv2-b0_notop.h5", "893217f2bb855e2983157299931e43ff"),
    ),
    "xception": Backbone(
        "Xception",
        "-1..1",
        r"(block\d+)_",
        (
            f"{KERAS_APPLICATIONS}xception/xception_weights_tf_dim_ordering_tf_kernels_notop.h5",
            "b0042744bf5b25fce3cb969f33bebb97",
        ),
        min_size=71,
    ),
}
HEAD_DROPOUT = 0.2  # before the classifier, as keras-io's fine-tuning examples have it
BATCH_NORM_MOMENTUM = 0.9


def pretrained(name: str, spec):
    """A ``BACKBONES`` network (its weights as built: train loads the pretrained ones) under a new classifier:
    uint8 pixels, scaled to [0, 1] as every model here does, then to the range the backbone takes (its own
    preprocessing, inside the model: the SavedModel and TFLite files still take pixels as decoded), the backbone
    with global average pooling, dropout, softmax. Frozen batch norm layers run in inference mode (Keras 3): fine-tuning
    keeps them frozen, so the backbone keeps the statistics it learned. Trained from scratch, they follow the batches
    with momentum 0.9, as the codelab's models do (the applications' 0.99 to 0.999 leave a short run's statistics
    near their initial values, and its validation at chance)."""
    import keras
    from keras import layers

    backbone_spec = BACKBONES[name]
    inputs, scale = pixels_in(spec)
    to_range = layers.Rescaling(255.0) if backbone_spec.takes == "0..255" else layers.Rescaling(2.0, offset=-1.0)
    backbone = getattr(keras.applications, backbone_spec.application)(
        include_top=False, weights=None, input_shape=spec.input_shape, pooling="avg"
    )
    for layer in backbone.layers:  # (used only where they learn: trained from scratch, --weights none)
        if isinstance(layer, layers.BatchNormalization):
            layer.momentum = BATCH_NORM_MOMENTUM
    features = backbone(to_range(scale(inputs)))
    outputs = softmax(spec.num_classes)(layers.Dropout(HEAD_DROPOUT)(features))
    return keras.Model(inputs, outputs, name=name)


def backbone_builder(name: str) -> Callable:
    """The builder of the ``BACKBONES`` model ``name``: ``pretrained`` with its name."""

    def build(spec):
        return pretrained(name, spec)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = (
        f"{BACKBONES[name].application} (keras.applications, ImageNet weights) under a new classifier, "
        "fine-tuned in two phases."
    )
    return build


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


# the text models (the IMDB-on-TPU article's): token ids in, then an Embedding; the LSTMs skip the padding
# (mask_zero), the convolution sees it
TEXT_EMBEDDING = 32  # the article's embedding width
TEXT_UNITS = 32


def tokens_in(spec, embedding_dim: int, mask: bool) -> list:
    from keras import layers

    return [spec.inputs(), layers.Embedding(spec.vocabulary_size, embedding_dim, mask_zero=mask)]


def lstm(spec, units: int = TEXT_UNITS, embedding_dim: int = TEXT_EMBEDDING):
    """The IMDB-on-TPU article's model: Embedding(vocabulary, 32) -> LSTM(32) -> softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [*tokens_in(spec, embedding_dim, mask=True), layers.LSTM(units), softmax(spec.num_classes)], name="lstm"
    )


def bilstm(spec, units: int = TEXT_UNITS, embedding_dim: int = TEXT_EMBEDDING):
    """The LSTM read both ways: Embedding -> Bidirectional(LSTM) -> softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            *tokens_in(spec, embedding_dim, mask=True),
            layers.Bidirectional(layers.LSTM(units)),
            softmax(spec.num_classes),
        ],
        name="bilstm",
    )


def cnn1d(spec, filters: int = 64, kernel_size: int = 5, embedding_dim: int = TEXT_EMBEDDING):
    """A fast baseline: Embedding -> Conv1D(64, 5) -> global max pooling -> softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            *tokens_in(spec, embedding_dim, mask=False),
            layers.Conv1D(filters, kernel_size, padding="same", activation="relu"),
            layers.GlobalMaxPooling1D(),
            softmax(spec.num_classes),
        ],
        name="cnn1d",
    )


# the bag of words and word pairs (fastText's classifier): word pairs hashed into buckets beside the vocabulary;
# a prime below 46,341, so that a bucket times a bucket stays within int32
NGRAM_BUCKETS = 40_009
NGRAM_DIM = 64
CHAR_BUCKETS = 40_009  # the words' character n-grams: each its own id up to 40,008 of them, then shared by hash


def ngrams(
    spec,
    embedding_dim: int = NGRAM_DIM,
    buckets: int = NGRAM_BUCKETS,
    dropout: float = 0.0,
    char_buckets: int = CHAR_BUCKETS,
):
    """fastText's classifier on TF-IDF's weights: the words and hashed word pairs of a text, embedded, each weighted by
    its inverse document frequency over the training texts (``NGramBag``) and the sum L2-normalised (``dropout``
    after it) -> the classes' scores; plus the same of the words' character 3- to 5-grams (``CharGrams``; none with
    ``char_buckets=0``) -> softmax. Training sets the idfs and the words' grams first (``text_layers.adapt``)."""
    import keras
    from keras import layers

    if not 2 <= buckets <= 46_340:
        raise ValueError(f"buckets must be from 2 to 46340 (a bucket times a bucket fits int32), not {buckets}")
    if char_buckets == 1 or char_buckets < 0:
        raise ValueError(f"char_buckets must be 0 (no character n-grams) or 2 or more, not {char_buckets}")
    from components.models.text_layers import CharGrams, NGramBag, WordPairs

    ids = spec.inputs()
    grams = WordPairs(spec.vocabulary_size, buckets)(ids)
    vectors = layers.Embedding(spec.vocabulary_size + buckets, embedding_dim, name="grams")(grams)
    bag = NGramBag(spec.vocabulary_size + buckets)([grams, vectors])
    if dropout:
        bag = layers.Dropout(dropout)(bag)
    if not char_buckets:
        return keras.Model(ids, softmax(spec.num_classes)(bag), name="ngrams")
    scores = layers.Dense(spec.num_classes, dtype="float32", name="word_scores")(bag)
    # float32 under mixed precision too: its sums run over every gram of a text
    characters = CharGrams(
        spec.vocabulary_size, char_buckets, embedding_dim, spec.num_classes, dtype="float32", name="char_grams"
    )(ids)
    summed = layers.Add(dtype="float32")([scores, characters])
    return keras.Model(ids, layers.Activation("softmax", dtype="float32")(summed), name="ngrams")


@dataclass(frozen=True)
class Builtin:
    """A built-in model: its builder, what it is (a line), the modality it takes and, for images, the smallest square
    input it builds for (its pooling and strides would reach a size of zero below it; measured by building each at
    every size, and checked in tests/components/test_train.py)."""

    build: Callable
    about: str
    modality: str = "image"
    min_image_size: int = 8


BUILTINS: dict[str, Builtin] = {
    "codelab_convnet_bn": Builtin(codelab_convnet_bn, "the codelab's convnet with batch norm", min_image_size=16),
    "codelab_convnet": Builtin(codelab_convnet, "the Keras-on-TPU codelab's convnet", min_image_size=16),
    "squeezenet": Builtin(squeezenet, "the codelab's SqueezeNet: fire modules with batch norm", min_image_size=16),
    "cifar_convnet": Builtin(cifar_convnet, "CIFAR-10's three blocks of convolutions, batch norm and dropout"),
    "dense_baseline": Builtin(dense_baseline, "the codelab's first model: one softmax layer over the pixels"),
    **{
        name: Builtin(
            backbone_builder(name), f"{spec.application}, ImageNet weights, fine-tuned", min_image_size=spec.min_size
        )
        for name, spec in BACKBONES.items()
    },
    "lstm": Builtin(lstm, "the IMDB-on-TPU article's LSTM", "text"),
    "bilstm": Builtin(bilstm, "the LSTM read both ways", "text"),
    "cnn1d": Builtin(cnn1d, "a fast baseline: a convolution over the embeddings", "text"),
    "ngrams": Builtin(ngrams, "fastText's classifier: a bag of words, word pairs and subwords", "text"),
}
DEFAULT_MODELS = {"image": "codelab_convnet_bn", "text": "ngrams"}
# the image models that normalise their activations with batch norm (what to try when a run does not learn)
BATCH_NORM_MODELS = ("codelab_convnet_bn", "squeezenet", "cifar_convnet")
