"""Training speed on this machine, side by side in one run: the codelab convnet at 192x192 in float32 and in
mixed_bfloat16, and the input pipeline alone (reading, parsing and decoding the TFRecords, no model).

Goals (issue: TPU-grade training): bfloat16 at least 2.5x float32; the input pipeline at least 3x the faster training
rate, so that training is never input-bound. The last line printed is a JSON object.

    .venv/bin/python bench/train.py [--images 512] [--steps 12] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def write_tfrecords(directory: str, count: int, size: int, num_classes: int, shards: int = 4) -> None:
    """Photo-like 192x192 JPEGs (smooth random colour fields plus noise) in the codelab schema."""
    import numpy as np
    import tensorflow as tf

    from components.schema import serialize_example
    from components.storage import write_json

    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(directory, "train"))
    writers = [tf.io.TFRecordWriter(os.path.join(directory, "train", f"train-{i:05d}-of-{shards:05d}.tfrec"))
               for i in range(shards)]  # fmt: skip
    for index in range(count):
        coarse = rng.integers(0, 256, size=(6, 6, 3)).astype(np.float32)
        image = tf.image.resize(coarse[np.newaxis], [size, size], method="bicubic")[0].numpy()
        image = np.clip(image + rng.normal(0, 12, image.shape), 0, 255).astype(np.uint8)
        jpeg = tf.io.encode_jpeg(image, quality=90).numpy()
        label = index % num_classes
        writers[index % shards].write(serialize_example(jpeg, label, str(label), (size, size), num_classes))
    for writer in writers:
        writer.close()
    names = [str(i) for i in range(num_classes)]
    write_json(os.path.join(directory, "stats.json"), {
        "class_names": names, "num_classes": num_classes, "image_size": size,
        "counts": {"train": count, "validation": 0, "test": 0},
    })  # fmt: skip


def training_rate(
    examples_dir: str, precision: str, size: int, num_classes: int, batch: int, steps: int, jit_compile: bool = False
) -> float:
    """Images per second over ``steps`` training steps, after one warm-up epoch (tracing, compilation)."""
    import keras

    from components.artifacts.examples import make_dataset
    from components.models import build_model

    dataset = make_dataset(examples_dir, "train", size, num_classes, batch, training=True, cache=True)
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = build_model("codelab_convnet", size, num_classes)
        model.compile(optimizer="adam", loss="categorical_crossentropy", jit_compile=jit_compile)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    times = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            times.append(time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            times[-1] = time.perf_counter() - times[-1]

    model.fit(dataset, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[EpochTimer()])
    return steps * batch / times[-1]


def input_rate(examples_dir: str, size: int, num_classes: int, batch: int, batches: int) -> float:
    """Images per second of the uncached input pipeline alone: read, parse, decode, shuffle, batch."""
    from components.artifacts.examples import make_dataset

    dataset = make_dataset(examples_dir, "train", size, num_classes, batch, training=True, cache=False)
    iterator = iter(dataset)
    next(iterator)  # start the threads
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=512, help="synthetic 192x192 JPEGs to write (default 512)")
    parser.add_argument("--steps", type=int, default=12, help="timed training steps per precision (default 12)")
    parser.add_argument("--batch-size", type=int, default=32, help="default 32")
    parser.add_argument("--image-size", type=int, default=192, help="default 192 (the codelab's)")
    parser.add_argument("--jit-compile", action="store_true", help="compile the training steps with XLA")
    args = parser.parse_args()
    from components.train.placement import read_cpu_flags

    size, classes, batch = args.image_size, 5, args.batch_size
    with tempfile.TemporaryDirectory(prefix="bench-train-") as directory:
        write_tfrecords(directory, args.images, size, classes)
        fp32 = training_rate(directory, "float32", size, classes, batch, args.steps, args.jit_compile)
        print(f"train float32         {fp32:8.1f} images/s")
        bf16 = training_rate(directory, "mixed_bfloat16", size, classes, batch, args.steps, args.jit_compile)
        print(f"train mixed_bfloat16  {bf16:8.1f} images/s   ({bf16 / fp32:.2f}x float32; goal 2.5x)")
        feed = input_rate(directory, size, classes, batch, batches=max(8, args.images // batch))
        print(f"input pipeline alone  {feed:8.1f} images/s   ({feed / max(fp32, bf16):.1f}x the faster training; "
              "goal 3x)")  # fmt: skip
    flags = read_cpu_flags()
    print(json.dumps({
        "model": "codelab_convnet", "image_size": size, "batch_size": batch, "cpu_cores": os.cpu_count(),
        "jit_compile": args.jit_compile,
        "cpu_bf16": sorted(flags & {"amx_bf16", "avx512_bf16"}),
        "float32_images_per_second": round(fp32, 1), "bf16_images_per_second": round(bf16, 1),
        "input_images_per_second": round(feed, 1),
        "bf16_speedup": round(bf16 / fp32, 2), "input_headroom": round(feed / max(fp32, bf16), 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
