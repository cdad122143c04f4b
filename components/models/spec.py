"""What a model builder is given: ``ModelSpec``, the input, the classes and the vocabulary that the data and the run
decided. Every model, ours and yours, is built as ``build(spec, **hparams)`` and returns a Keras 3 model."""

from __future__ import annotations

from dataclasses import dataclass

IMAGE_DTYPE = "uint8"  # pixels as decoded, 0..255: the model scales them itself
TEXT_DTYPE = "int32"  # token ids of the conversion's vocabulary: 0 pads (at the end), 1 is out of vocabulary


@dataclass(frozen=True)
class ModelSpec:
    """What a model builder is given.

    Attributes:
        modality: ``image`` or ``text``.
        input_shape: one example's shape: ``(size, size, 3)`` for images, ``(sequence_length,)`` for texts.
        input_dtype: ``uint8`` pixels in 0..255 (images), or ``int32`` token ids (texts).
        num_classes: the width of the softmax the model ends with.
        class_names: the classes, in the order of the output's columns.
        vocabulary_size: texts: the ids are below it (an ``Embedding``'s ``input_dim``); 0 for images.
        image_size: images: their side in pixels; None for texts.
        sequence_length: texts: the ids a text; None for images.
    """

    modality: str
    input_shape: tuple[int, ...]
    input_dtype: str
    num_classes: int
    class_names: tuple[str, ...] = ()
    vocabulary_size: int = 0
    image_size: int | None = None
    sequence_length: int | None = None

    @classmethod
    def for_images(cls, image_size: int, num_classes: int, class_names=()) -> ModelSpec:
        shape = (image_size, image_size, 3)
        return cls("image", shape, IMAGE_DTYPE, num_classes, tuple(class_names), image_size=image_size)

    @classmethod
    def for_texts(cls, sequence_length: int, vocabulary_size: int, num_classes: int, class_names=()) -> ModelSpec:
        shape = (sequence_length,)
        return cls("text", shape, TEXT_DTYPE, num_classes, tuple(class_names), vocabulary_size, None, sequence_length)

    def inputs(self, name: str | None = None):
        """The model's ``keras.Input``: ``[batch, *input_shape]`` of ``input_dtype``."""
        import keras

        return keras.Input(shape=self.input_shape, dtype=self.input_dtype, name=name)

    def describe(self) -> str:
        """``uint8 [N, 32, 32, 3]``: what the pipeline feeds the model."""
        return f"{self.input_dtype} [N, {', '.join(map(str, self.input_shape))}]"
