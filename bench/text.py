"""Text conversion speed, side by side in one run (issue 15): (a) the single-process Keras way, a
``TextVectorization`` layer adapted on the training texts and mapped over a ``tf.data`` pipeline that writes the
TFRecords, and (b) this project's Beam conversion (``components.convert.text``) on the DirectRunner, over the same
aclImdb-shaped folder of reviews (``train|test/pos|neg/*.txt``, about 230 words each, as IMDB's). Both standardise
alike, build a vocabulary from the training split only, and write token ids padded to the same length. The last line
printed is a JSON object.

    .venv/bin/python bench/text.py [--texts 4000] [--vocabulary-size 15000] [--sequence-length 250]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

WORDS = 20_000  # a Zipf-distributed vocabulary, as natural text's word counts are


def write_reviews(root: str, count: int, seed: int = 0) -> int:
    """``count`` reviews in aclImdb's layout (half train, half test; half pos, half neg); returns their bytes."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(WORDS)]
    weights = [1.0 / (rank + 1) for rank in range(WORDS)]
    total = 0
    for index in range(count):
        split, label = ("train", "test")[index % 2], ("pos", "neg")[(index // 2) % 2]
        tokens = rng.choices(words, weights, k=rng.randint(120, 340))
        text = " ".join(tokens).capitalize() + ".<br /><br />The end, " + f"review {index}!"
        folder = os.path.join(root, split, label)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{index}_{rng.randint(1, 10)}.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        total += len(text.encode())
    return total


def keras_baseline(root: str, output: str, vocabulary_size: int, sequence_length: int) -> float:
    """TextVectorization adapted on the train texts, then a tf.data map writing one TFRecord file per split.
    Seconds."""
    import re
    import string

    import tensorflow as tf

    started = time.monotonic()

    def standardize(text):
        text = tf.strings.lower(text)
        text = tf.strings.regex_replace(text, r"<br\s*/?>", " ")
        return tf.strings.regex_replace(text, f"[{re.escape(string.punctuation)}]", " ")

    layer = tf.keras.layers.TextVectorization(
        max_tokens=vocabulary_size, standardize=standardize, output_sequence_length=sequence_length
    )
    files = {split: tf.io.gfile.glob(f"{root}/{split}/*/*.txt") for split in ("train", "test")}
    texts = {
        split: tf.data.Dataset.from_tensor_slices(paths).map(tf.io.read_file, num_parallel_calls=tf.data.AUTOTUNE)
        for split, paths in files.items()
    }
    layer.adapt(texts["train"].batch(256))
    os.makedirs(output, exist_ok=True)
    for split, dataset in texts.items():
        labels = tf.data.Dataset.from_tensor_slices([int("/pos/" in path) for path in files[split]])

        def serialize(tokens, label):
            def encode(ids, y):
                feature = {
                    "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
                    "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[y])),
                }
                return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

            return tf.py_function(lambda i, y: encode(i.numpy(), int(y.numpy())), [tokens, label], tf.string)

        tokens = dataset.batch(256).map(layer, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        records = tf.data.Dataset.zip((tokens, labels)).map(serialize, num_parallel_calls=tf.data.AUTOTUNE)
        with tf.io.TFRecordWriter(os.path.join(output, f"{split}.tfrec")) as writer:
            for record in records:
                writer.write(record.numpy())
    return time.monotonic() - started


def beam_conversion(root: str, output: str, vocabulary_size: int, sequence_length: int) -> float:
    from components.convert.text import TextConvertConfig, run_text

    started = time.monotonic()
    run_text(
        TextConvertConfig(
            source=root,
            output_dir=output,
            vocabulary_size=vocabulary_size,
            sequence_length=sequence_length,
            validation_fraction=0.0,
        )
    )
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=4000)
    from components.params import TEXT

    for name in ("vocabulary_size", "sequence_length"):  # the pipeline's own (the article's) defaults
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=int, default=TEXT[name].default, help=TEXT[name].help_with_default()
        )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-text-") as work:
        root = os.path.join(work, "aclImdb")
        size = write_reviews(root, args.texts)
        figures = {}
        for name, convert in (("keras_text_vectorization", keras_baseline), ("beam", beam_conversion)):
            seconds = convert(root, os.path.join(work, name), args.vocabulary_size, args.sequence_length)
            figures[name] = {"seconds": round(seconds, 2), "texts_per_second": round(args.texts / seconds, 1)}
            print(f"{name:26s} {seconds:7.2f} s  {args.texts / seconds:8.1f} texts/s")
        ratio = figures["keras_text_vectorization"]["seconds"] / figures["beam"]["seconds"]
        print(f"beam / keras throughput: {ratio:.2f}x")
        print(
            json.dumps(
                {
                    "texts": args.texts,
                    "bytes": size,
                    "cores": os.cpu_count(),
                    **figures,
                    "beam_vs_keras": round(ratio, 2),
                }
            )
        )


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
