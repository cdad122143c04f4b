"""Metadata in the TFLite files, so that MediaPipe's and LiteRT's task libraries (an ``ImageClassifier``) run them as
they are: the input image (RGB, its size, its normalisation, its pixel range), the output's meaning (a probability
per class) and the labels, packed in the file. A text model's files take token ids and carry their vocabulary.

The layout is tflite-support's and MediaPipe's metadata schema (``metadata_schema.fbs``, file identifier ``M001``): a
``ModelMetadata`` flatbuffer in a model buffer named ``TFLITE_METADATA``, and the associated files (``labels.txt``)
appended to the model as a zip archive, as their ``MetadataPopulator`` writes them. Their writers cannot be used here:
tflite-support 0.4.4 pins protobuf<4 against TensorFlow's >=6.31, and MediaPipe's Python package no longer ships the
writer's native part. So the metadata is the schema's typed objects (``ModelMetadataT``, ...), from its generated
Python module (vendored from MediaPipe in ``third_party/tflite_metadata``), packed with ``flatbuffers``; the tests
read the files back with MediaPipe's reader and run them in MediaPipe's classifier.
"""

from __future__ import annotations

import io
import zipfile

from components.artifacts.tflite import LABELS_FILE
from components.tokenizing import PUNCTUATION_TO, STANDARDIZATION_FILE, VOCABULARY_FILE
from third_party.tflite_metadata import metadata_schema_py_generated as schema

METADATA_BUFFER_NAME = "TFLITE_METADATA"
METADATA_IDENTIFIER = b"M001"
MODEL_IDENTIFIER = b"TFL3"
# the schema's history (metadata_schema.fbs): nothing written here is newer than 1.0.0
MIN_PARSER_VERSION = "1.0.0"


def _stats(low: float, high: float) -> schema.StatsT:
    return schema.StatsT(max=[float(high)], min=[float(low)])


def _features() -> schema.ContentT:
    """A tensor of plain features (probabilities, token ids)."""
    return schema.ContentT(
        contentPropertiesType=schema.ContentProperties.FeatureProperties, contentProperties=schema.FeaturePropertiesT()
    )


def _model_metadata(name: str, description: str, version: str, tensor_in: schema.TensorMetadataT, classes: int):
    """The ``ModelMetadata`` flatbuffer of a classifier: ``tensor_in`` in, and one probability per class out
    (FeatureProperties, Stats 0..1), labelled by ``labels.txt`` on its class axis."""
    import flatbuffers

    labels = schema.AssociatedFileT(
        name=LABELS_FILE,
        description=f"The {classes} class names, one a line, in the order of the outputs.",
        type=schema.AssociatedFileType.TENSOR_AXIS_LABELS,
    )
    tensor_out = schema.TensorMetadataT(
        name="probability",
        description=f"Probabilities of the {classes} classes (softmax).",
        content=_features(),
        stats=_stats(0.0, 1.0),
        associatedFiles=[labels],
    )
    subgraph = schema.SubGraphMetadataT(inputTensorMetadata=[tensor_in], outputTensorMetadata=[tensor_out])
    model = schema.ModelMetadataT(
        name=name,
        description=description,
        version=version,
        subgraphMetadata=[subgraph],
        author="tpu-image-pipeline",
        minParserVersion=MIN_PARSER_VERSION,
    )
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), METADATA_IDENTIFIER)
    return bytes(builder.Output())


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
    existing = [
        entry for entry in tflite.metadata if entry.name in (METADATA_BUFFER_NAME, METADATA_BUFFER_NAME.encode())
    ]
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


def _labels(class_names: list[str]) -> bytes:
    return "".join(f"{label}\n" for label in class_names).encode()


def classifier_files(
    model: bytes, *, name: str, description: str, version: str, image_size: int, class_names: list[str]
) -> bytes:
    """``model`` with an image classifier's metadata and its ``labels.txt`` (``class_names``, one a line): one RGB
    image ``image_size`` square in, pixels 0..255 as decoded (normalised with mean 0 and std 1: the model scales them
    itself), and one probability per class out."""
    size = schema.ImageSizeT(width=image_size, height=image_size)
    properties = schema.ImagePropertiesT(colorSpace=schema.ColorSpaceType.RGB, defaultSize=size)
    normalize = schema.ProcessUnitT(
        optionsType=schema.ProcessUnitOptions.NormalizationOptions,
        options=schema.NormalizationOptionsT(mean=[0.0], std=[1.0]),
    )
    image = schema.TensorMetadataT(
        name="image",
        description=f"An RGB image, {image_size}x{image_size}, pixels 0..255 as decoded (the model scales them).",
        content=schema.ContentT(
            contentPropertiesType=schema.ContentProperties.ImageProperties, contentProperties=properties
        ),
        processUnits=[normalize],
        stats=_stats(0.0, 255.0),
    )
    metadata = _model_metadata(name, description, version, image, len(class_names))
    return with_metadata(model, metadata, {LABELS_FILE: _labels(class_names)})


def text_classifier_files(
    model: bytes,
    *,
    name: str,
    description: str,
    version: str,
    sequence_length: int,
    class_names: list[str],
    vocabulary: bytes,
    standardization: str,
) -> bytes:
    """``model`` with a token-id text classifier's metadata, its ``labels.txt``, ``vocabulary.txt`` and
    ``standardization.txt`` (``standardization``'s name): ``[1, sequence_length]`` int32 ids of ``vocabulary.txt``
    (attached to the input as its vocabulary) in, and one probability per class out."""
    punctuation = "to spaces" if PUNCTUATION_TO[standardization] else "removed"
    vocabulary_file = schema.AssociatedFileT(
        name=VOCABULARY_FILE,
        description="The tokens, one a line, in id order: id 0 pads (an empty line), id 1 is out of vocabulary "
        "([UNK]).",
        type=schema.AssociatedFileType.VOCABULARY,
    )
    tokens = schema.TensorMetadataT(
        name="tokens",
        description=f"{sequence_length} token ids of the text: lowercased, HTML line breaks to spaces, ASCII "
        f"punctuation {punctuation} (standardization.txt), split on whitespace, looked up in vocabulary.txt (1 when "
        "absent), padded with 0 at the end.",
        content=_features(),
        stats=_stats(0.0, vocabulary.count(b"\n") - 1.0),  # ids 0 to the vocabulary's size - 1 (a token a line)
        associatedFiles=[vocabulary_file],
    )
    metadata = _model_metadata(name, description, version, tokens, len(class_names))
    files = {
        LABELS_FILE: _labels(class_names),
        VOCABULARY_FILE: vocabulary,
        STANDARDIZATION_FILE: standardization.encode(),
    }
    return with_metadata(model, metadata, files)
