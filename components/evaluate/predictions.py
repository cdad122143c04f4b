"""A model's answers on a split: on its TFRecords in order (and the first examples it got wrong), and on the split's
own source files, as clients send them."""

from __future__ import annotations

from components.artifacts.examples import Reading, make_dataset

EVAL_BATCH_SIZE = 256


def predict_split(model, examples_dir: str, split: str, reading: Reading, keep_wrong: int = 0):
    """Runs ``model`` over a split in order (read as ``reading`` says); returns (true class ids, predicted
    probabilities) as NumPy arrays, and the first ``keep_wrong`` misclassified examples as (uint8 pixels, true id,
    predicted id, its probability, source: the image's file, "" when the records do not say). Texts: the pixels
    are None and the source is the text."""
    import numpy as np

    dataset = make_dataset(examples_dir, split, reading, EVAL_BATCH_SIZE, training=False, sources=True)
    true_ids, probabilities, wrong = [], [], []
    for images, one_hot, sources in dataset:
        # (an exported text baseline takes the raw texts: it tokenises them with its own vocabulary)
        batch_probabilities = model(sources if getattr(model, "takes_text", False) else images, training=False).numpy()
        batch_true = np.argmax(one_hot.numpy(), axis=-1)
        probabilities.append(batch_probabilities)
        true_ids.append(batch_true)
        for index in np.flatnonzero(batch_probabilities.argmax(axis=-1) != batch_true)[: keep_wrong - len(wrong)]:
            predicted = int(batch_probabilities[index].argmax())
            pixels = images[index].numpy() if reading.pictures else None  # the uint8 pixels the model saw
            source = sources[index].numpy().decode("utf-8", errors="replace")
            wrong.append(
                (pixels, int(batch_true[index]), predicted, float(batch_probabilities[index][predicted]), source)
            )
    return np.concatenate(true_ids), np.concatenate(probabilities), wrong


def client_file_accuracy(model, examples_dir: str, split: str, image_size: int, num_classes: int) -> dict:
    """The model's accuracy on the split's own source files, beside the TFRecords' figure (whose JPEGs were encoded
    again at the model's size); what is left out is counted (``components.artifacts.examples.client_files``).

    Each file is decoded as the conversion decoded it before that encoding (``components.decoding.conversion_square``,
    Pillow, a thread a core), which the exported SavedModel's serving graph matches within one level
    (``components.imaging.serving_pixels``, docs/serving.md); export then scores the SavedModel itself on the same
    files. Not the serving graph here: tracing and starting it takes seconds, decoding a test split a fraction."""
    import os
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from components.artifacts.examples import client_files
    from components.decoding import conversion_square

    def pixels(row) -> np.ndarray:  # (the file passed the conversion's --max-pixels: no bound here)
        return np.asarray(conversion_square(row[1], image_size, max_pixels=sys.maxsize), dtype=np.uint8)

    counts, correct, total = {}, 0, 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for rows in client_files(examples_dir, split, num_classes, counts, EVAL_BATCH_SIZE):
            predicted = np.asarray(model(np.stack(list(pool.map(pixels, rows))), training=False)).argmax(axis=-1)
            correct += int((predicted == np.array([truth for _, _, _, truth in rows])).sum())
            total += len(rows)
    return {"num_files": total, "accuracy": correct / total if total else None, **counts}
