"""Metadata in the TFLite files, so that MediaPipe's and LiteRT's task libraries (an ``ImageClassifier``) run them as
they are: the input image (RGB, its size, its normalisation, its pixel range), the output's meaning (a probability
per class) and the labels, packed in the file. A text model's files take token ids and carry their vocabulary.

The layout is tflite-support's and MediaPipe's metadata schema (``metadata_schema.fbs``, file identifier ``M001``): a
``ModelMetadata`` flatbuffer in a model buffer named ``TFLITE_METADATA``, and the associated files (``labels.txt``)
appended to the model as a zip archive, as their ``MetadataPopulator`` writes them. Their writers cannot be used here:
tflite-support 0.4.4 pins protobuf<4 against TensorFlow's >=6.31, and MediaPipe's Python package no longer ships the
writer's native part. So the tables are built with ``flatbuffers`` (TensorFlow's dependency) from the schema's field
order, and the tests read them back with MediaPipe's generated reader and run the files in MediaPipe's classifier.
"""

from __future__ import annotations

import io
import zipfile

METADATA_BUFFER_NAME = "TFLITE_METADATA"
METADATA_IDENTIFIER = b"M001"
MODEL_IDENTIFIER = b"TFL3"
LABELS_FILE = "labels.txt"
# the schema's history (metadata_schema.fbs): nothing written here is newer than 1.0.0
MIN_PARSER_VERSION = "1.0.0"

# metadata_schema.fbs's enums and unions (a union's members count from 1, NONE being 0)
FEATURE_PROPERTIES, IMAGE_PROPERTIES = 1, 2  # union ContentProperties
NORMALIZATION_OPTIONS = 1  # union ProcessUnitOptions
RGB = 1  # enum ColorSpaceType
TENSOR_AXIS_LABELS, VOCABULARY = 2, 5  # enum AssociatedFileType
VOCABULARY_FILE = "vocabulary.txt"  # components.tokenizing's


class _Writer:
    """Tables, strings and vectors on one flatbuffers builder. A table's fields are given by their slot, the order
    the schema declares them (a union takes two: its type, then its value)."""

    def __init__(self):
        import flatbuffers

        self.builder = flatbuffers.Builder(1024)

    def string(self, text: str | None):
        return None if text is None else self.builder.CreateString(text)

    def offsets(self, items: list):
        builder = self.builder
        builder.StartVector(4, len(items), 4)
        for item in reversed(items):
            builder.PrependUOffsetTRelative(item)
        return builder.EndVector()

    def floats(self, values: list[float]):
        builder = self.builder
        builder.StartVector(4, len(values), 4)
        for value in reversed(values):
            builder.PrependFloat32(float(value))
        return builder.EndVector()

    def table(self, *, offsets: dict | None = None, bytes_: dict | None = None, uints: dict | None = None):
        """A table: ``offsets`` (strings, vectors, tables), ``bytes_`` (enums, union types) and ``uints`` by slot."""
        builder = self.builder
        fields = {**(offsets or {}), **(bytes_ or {}), **(uints or {})}
        builder.StartObject(max(fields, default=-1) + 1)
        for slot, value in (offsets or {}).items():
            if value is not None:
                builder.PrependUOffsetTRelativeSlot(slot, value, 0)
        for slot, value in (uints or {}).items():
            builder.PrependUint32Slot(slot, value, 0)
        for slot, value in (bytes_ or {}).items():
            builder.PrependUint8Slot(slot, value, 0)
        return builder.EndObject()

    def finish(self, root) -> bytes:
        self.builder.Finish(root, METADATA_IDENTIFIER)
        return bytes(self.builder.Output())


def _classifier_output(w: _Writer, num_classes: int):
    """The output tensor's metadata: one probability per class (FeatureProperties, Stats 0..1), labelled by
    ``labels.txt`` on its class axis."""
    labels = w.table(offsets={0: w.string(LABELS_FILE),
                              1: w.string(f"The {num_classes} class names, one a line, in the order of the outputs.")},
                     bytes_={2: TENSOR_AXIS_LABELS})  # fmt: skip
    output_content = w.table(offsets={1: w.table()}, bytes_={0: FEATURE_PROPERTIES})
    return w.table(offsets={
        0: w.string("probability"),
        1: w.string(f"Probabilities of the {num_classes} classes (softmax)."),
        3: output_content,
        5: w.table(offsets={0: w.floats([1.0]), 1: w.floats([0.0])}),  # Stats: max, min
        6: w.offsets([labels]),
    })  # fmt: skip


def _model_metadata(w: _Writer, *, name: str, description: str, version: str, tensor_in, tensor_out) -> bytes:
    subgraph = w.table(offsets={2: w.offsets([tensor_in]), 3: w.offsets([tensor_out])})
    root = w.table(offsets={
        0: w.string(name),
        1: w.string(description),
        2: w.string(version),
        3: w.offsets([subgraph]),
        4: w.string("tpu-image-pipeline"),
        7: w.string(MIN_PARSER_VERSION),
    })  # fmt: skip
    return w.finish(root)


def image_classifier_metadata(*, name: str, description: str, version: str, image_size: int, num_classes: int,
                              normalization: tuple[float, float] = (0.0, 1.0)) -> bytes:  # fmt: skip
    """The ``ModelMetadata`` flatbuffer of an image classifier: one RGB image ``image_size`` square in, pixels 0..255
    normalised as ``(pixel - mean) / std`` by the caller (0 and 1: the model takes them as decoded and scales them
    itself), and one probability per class out, labelled by ``labels.txt``."""
    w = _Writer()
    output = _classifier_output(w, num_classes)
    # the input: ImageProperties (RGB, its size), a NormalizationOptions process unit, the pixels' range as Stats
    size = w.table(uints={0: image_size, 1: image_size})  # ImageSize: width, height
    image_properties = w.table(offsets={1: size}, bytes_={0: RGB})
    input_content = w.table(offsets={1: image_properties}, bytes_={0: IMAGE_PROPERTIES})
    mean, std = normalization
    normalize = w.table(offsets={0: w.floats([mean]), 1: w.floats([std])})  # NormalizationOptions: mean, std
    process_unit = w.table(offsets={1: normalize}, bytes_={0: NORMALIZATION_OPTIONS})
    image = w.table(offsets={
        0: w.string("image"),
        1: w.string(f"An RGB image, {image_size}x{image_size}, pixels 0..255 as decoded (the model scales them)."),
        3: input_content,
        4: w.offsets([process_unit]),
        5: w.table(offsets={0: w.floats([255.0]), 1: w.floats([0.0])}),  # Stats: max, min
    })  # fmt: skip
    return _model_metadata(w, name=name, description=description, version=version, tensor_in=image,
                           tensor_out=output)  # fmt: skip


def text_classifier_metadata(*, name: str, description: str, version: str, sequence_length: int,
                             vocabulary_size: int, num_classes: int) -> bytes:  # fmt: skip
    """The ``ModelMetadata`` flatbuffer of a text classifier that takes token ids: ``[1, sequence_length]`` int32
    ids of ``vocabulary.txt`` (attached to the input as its vocabulary), and one probability per class out."""
    w = _Writer()
    output = _classifier_output(w, num_classes)
    vocabulary = w.table(offsets={0: w.string(VOCABULARY_FILE),
                                  1: w.string("The tokens, one a line, in id order: id 0 pads (an empty line), "
                                              "id 1 is out of vocabulary ([UNK]).")},
                         bytes_={2: VOCABULARY})  # fmt: skip
    tokens = w.table(offsets={
        0: w.string("tokens"),
        1: w.string(f"{sequence_length} token ids of the text: lowercased, HTML line breaks and ASCII punctuation "
                    "removed, split on whitespace, looked up in vocabulary.txt (1 when absent), padded with 0 at "
                    "the end."),
        3: w.table(offsets={1: w.table()}, bytes_={0: FEATURE_PROPERTIES}),
        5: w.table(offsets={0: w.floats([vocabulary_size - 1.0]), 1: w.floats([0.0])}),  # Stats: max, min
        6: w.offsets([vocabulary]),
    })  # fmt: skip
    return _model_metadata(w, name=name, description=description, version=version, tensor_in=tokens,
                           tensor_out=output)  # fmt: skip


def with_metadata(model: bytes, metadata: bytes, files: dict[str, bytes]) -> bytes:
    """``model`` (a TFLite flatbuffer) with ``metadata`` in a buffer named ``TFLITE_METADATA`` (replacing one it
    has), and ``files`` appended as a zip archive: the layout tflite-support's ``MetadataPopulator`` writes, which
    interpreters read as the plain model (they ignore what follows the flatbuffer)."""
    import flatbuffers
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema

    tflite = schema.ModelT.InitFromPackedBuf(model, 0)
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(metadata, dtype=np.uint8)
    tflite.buffers = list(tflite.buffers or [])
    tflite.metadata = list(tflite.metadata or [])
    existing = [entry for entry in tflite.metadata if _text(entry.name) == METADATA_BUFFER_NAME]
    if existing:
        tflite.buffers[existing[0].buffer] = buffer
    else:
        tflite.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name = METADATA_BUFFER_NAME
        entry.buffer = len(tflite.buffers) - 1
        tflite.metadata.append(entry)
    builder = flatbuffers.Builder(len(model) + len(metadata) + 1024)
    builder.Finish(tflite.Pack(builder), MODEL_IDENTIFIER)
    packed = io.BytesIO(bytes(builder.Output()))
    packed.seek(0, io.SEEK_END)
    with zipfile.ZipFile(packed, "a") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return packed.getvalue()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def classifier_files(model: bytes, *, name: str, description: str, version: str, image_size: int,
                     class_names: list[str]) -> bytes:  # fmt: skip
    """``model`` with an image classifier's metadata and its ``labels.txt`` (``class_names``, one a line)."""
    metadata = image_classifier_metadata(name=name, description=description, version=version,
                                         image_size=image_size, num_classes=len(class_names))  # fmt: skip
    labels = "".join(f"{label}\n" for label in class_names).encode()
    return with_metadata(model, metadata, {LABELS_FILE: labels})


def text_classifier_files(model: bytes, *, name: str, description: str, version: str, sequence_length: int,
                          class_names: list[str], vocabulary: bytes) -> bytes:  # fmt: skip
    """``model`` with a token-id text classifier's metadata, its ``labels.txt`` and ``vocabulary.txt``."""
    metadata = text_classifier_metadata(name=name, description=description, version=version,
                                        sequence_length=sequence_length,
                                        vocabulary_size=len(vocabulary.decode("utf-8").split("\n")) - 1,
                                        num_classes=len(class_names))  # fmt: skip
    labels = "".join(f"{label}\n" for label in class_names).encode()
    return with_metadata(model, metadata, {LABELS_FILE: labels, VOCABULARY_FILE: vocabulary})


def packed_file(content: bytes, name: str) -> bytes | None:
    """A file packed in a TFLite file (``labels.txt``, ``vocabulary.txt``), or None."""
    try:
        with zipfile.ZipFile(io.BytesIO(content)) as packed:
            return packed.read(name)
    except (zipfile.BadZipFile, KeyError):
        return None


def packed_labels(content: bytes) -> list[str]:
    """The class names packed in a TFLite file (its ``labels.txt``), or [] for a file without them."""
    labels = packed_file(content, LABELS_FILE)
    return labels.decode("utf-8").splitlines() if labels is not None else []
