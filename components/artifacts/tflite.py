"""The export artifact's TFLite files, run and read: class probabilities from a file for uint8 pixels or token
ids, one example at a time (an integer output dequantized), and the files packed in it (``labels.txt``,
``vocabulary.txt``). The export step checks its files with them; ``pipeline predict`` serves them."""

from __future__ import annotations

import io
import zipfile

LABELS_FILE = "labels.txt"


def tflite_run(content: bytes, rows, prepare):
    """A TFLite model's float outputs for each of ``rows``, one at a time: ``prepare(row, input details)`` gives the
    input tensor; an integer output is dequantized."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    (source,), (target,) = interpreter.get_input_details(), interpreter.get_output_details()
    outputs = []
    for row in rows:
        interpreter.set_tensor(source["index"], prepare(row, source))
        interpreter.invoke()
        result = interpreter.get_tensor(target["index"])[0]
        if target["dtype"] != np.float32:
            scale, zero_point = target["quantization"]
            result = (result.astype(np.float32) - zero_point) * scale
        outputs.append(result)
    return np.stack(outputs)


def tflite_predict(content: bytes, images):
    """Class probabilities for uint8 pixels ``[N, size, size, 3]`` from an image TFLite file of this pipeline, one
    image at a time, the pixels as they are (the float file scales them itself; the int8 file's input quantization,
    scale 1/255, is that scaling); the output dequantized when it is integer. A one-line error for a file that takes
    something else (an export of an older version of the pipeline took [0, 1] floats)."""
    import numpy as np

    from components.cli import UsageError

    def prepare(image, source):
        if source["dtype"] != np.uint8:
            raise UsageError(
                f"this TFLite file takes {np.dtype(source['dtype']).name} pixels, not uint8 ones: it was not exported "
                "by this version of the pipeline: export it again"
            )
        return image[np.newaxis]

    return tflite_run(content, np.asarray(images, dtype=np.uint8), prepare)


def tflite_token_predict(content: bytes, tokens):
    """Class probabilities from a text TFLite model for int32 ids ``[N, sequence_length]``, one text at a time; the
    output dequantized when it is integer."""
    import numpy as np

    return tflite_run(content, np.asarray(tokens), lambda row, source: row[np.newaxis].astype(source["dtype"]))


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
