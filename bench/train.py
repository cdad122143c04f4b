"""Training speed on this machine, side by side in one run: the codelab convnet at 192x192 on both Keras backends
(TensorFlow, JAX), in float32 and mixed_bfloat16, on 1 and 2 devices (virtual CPU devices here: TensorFlow's logical
devices under MirroredStrategy, XLA host devices under JAX's DataParallel), each through our train step
(``components.train.core.run``) and through a bare ``model.fit`` of the same model on the same ``tf.data``
pipeline; and the input pipeline alone (reading, parsing and decoding the TFRecords, no model).

Every measurement runs in its own process (Keras fixes its backend, and JAX and TensorFlow their devices, at
start-up) and is timed on its fastest epoch after a warm-up epoch that traces and compiles; an epoch runs from the end
of the previous epoch's callbacks to the end of its own, so our step's per-epoch work (the backup, the epoch log,
TensorBoard) counts. Each configuration is measured ``--repeats`` times a side, ours and the bare fit in turns (ours,
bare, bare, ours), and the best of each side counts: on a shared machine one process's epochs can run 10% slower than
the next's for no reason of its own. Goals: our step at least
0.95 of the bare fit; ``--backend auto`` (components.train.placement.FASTER_BACKEND) names the faster backend on
this hardware. The last line printed is a JSON object.

    .venv/bin/python bench/train.py [--images 256] [--batch-size 16] [--only tensorflow|jax] [--devices 1,2]
                                    [--epochs 3] [--repeats 2]

``--model lstm`` (or ``bilstm``, ``cnn1d``) measures a text model instead, on synthetic reviews of the IMDB-on-TPU
article's shape: 250 token ids a text, a vocabulary of 15,000 (``--images`` is then the number of texts).

On a GPU machine, ``--only jax --devices 1`` measures JAX on the GPU (the device counts here are virtual CPU devices
on the CPU, real devices elsewhere: a machine with one GPU has one).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("tensorflow", "jax")
PRECISIONS = ("float32", "mixed_bfloat16")
DEVICES = (1, 2)
EPOCHS = 3  # default: the first traces and compiles; the fastest of the others is the steady rate


def write_tfrecords(directory: str, count: int, size: int, num_classes: int, shards: int = 4) -> None:
    """Photo-like JPEGs (smooth random colour fields plus noise) in the codelab schema; all in the train split."""
    import numpy as np
    import tensorflow as tf

    from components.schema import serialize_example
    from components.storage import write_json

    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(directory, "train"))
    writers = [
        tf.io.TFRecordWriter(os.path.join(directory, "train", f"train-{i:05d}-of-{shards:05d}.tfrec"))
        for i in range(shards)
    ]
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
    write_json(
        os.path.join(directory, "stats.json"),
        {
            "class_names": names,
            "num_classes": num_classes,
            "image_size": size,
            "counts": {"train": count, "validation": 0, "test": 0},
        },
    )


def write_text_tfrecords(
    directory: str, count: int, length: int, vocabulary_size: int, num_classes: int, shards: int = 4
) -> None:
    """Token-id examples in the text schema, with ``vocabulary.txt``: Zipf-like ids, texts of 50 to ``length``
    tokens padded at the end (as the conversion writes them); all in the train split."""
    import numpy as np
    import tensorflow as tf

    from components.convert.text import serialize_text_example
    from components.storage import write_json
    from components.tokenizing import OUT_OF_VOCABULARY, PADDING, vocabulary_bytes

    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(directory, "train"))
    writers = [
        tf.io.TFRecordWriter(os.path.join(directory, "train", f"train-{i:05d}-of-{shards:05d}.tfrec"))
        for i in range(shards)
    ]
    for index in range(count):
        used = int(rng.integers(min(50, length), length + 1))
        ids = np.minimum(rng.zipf(1.3, used) + 1, vocabulary_size - 1).tolist() + [0] * (length - used)
        label = index % num_classes
        writers[index % shards].write(serialize_text_example(ids, "", label, str(label), num_classes))
    for writer in writers:
        writer.close()
    with open(os.path.join(directory, "vocabulary.txt"), "wb") as handle:
        handle.write(vocabulary_bytes([PADDING, OUT_OF_VOCABULARY, *(f"w{i}" for i in range(vocabulary_size - 2))]))
    write_json(
        os.path.join(directory, "stats.json"),
        {
            "modality": "text",
            "class_names": [str(i) for i in range(num_classes)],
            "num_classes": num_classes,
            "sequence_length": length,
            "vocabulary_size": vocabulary_size,
            "counts": {"train": count, "validation": 0, "test": 0},
        },
    )


def epoch_timers(wait_for_results: bool = False):
    """Two callbacks, to put first and last. The last times each epoch from the end of the previous epoch's callbacks
    to the end of its own, so the steps and every callback's per-epoch work (a backup, the logs, TensorBoard's
    scalars) count; the first marks where the steps end, so the last also knows how long the callbacks' epoch ends
    took in between, measured inside the process that ran them (no noise from one process to the next).

    ``wait_for_results``: the first reads the epoch's metrics before it marks the end, so that a JAX step still
    running then counts as steps, not as the callbacks' work (our step's epoch log reads them first thing anyway)."""
    import keras

    class StepsEnd(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.ends = []

        def on_epoch_end(self, epoch, logs=None):
            for value in (logs or {}).values() if wait_for_results else ():
                float(value)
            self.ends.append(time.monotonic())

    class EpochTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds, self.after_steps, self.last = [], [], time.monotonic()

        def on_epoch_end(self, epoch, logs=None):
            now = time.monotonic()
            self.seconds.append(now - self.last)
            self.after_steps.append(now - steps_end.ends[-1])
            self.last = now

        def result(self, examples_per_epoch: int) -> dict:
            """The rate of the fastest epoch after the first, and the mean seconds after the steps over those."""
            timed = range(1, len(self.seconds))
            fastest = min(timed, key=lambda i: self.seconds[i])
            return {
                "rate": examples_per_epoch / self.seconds[fastest],
                "epoch_seconds": self.seconds[fastest],
                "after_steps_seconds": sum(self.after_steps[i] for i in timed) / len(timed),
            }

    steps_end = StepsEnd()
    return steps_end, EpochTimer()


def measure_ours(
    examples: str, model_name: str, backend: str, precision: str, devices: int, batch: int, epochs: int
) -> dict:
    """Examples per second of the fastest epoch after the first of our train step, timed by ``epoch_timers`` around
    the step's own callbacks (its ``epoch_seconds`` stop before the backup and TensorBoard)."""
    from components.schema import read_stats
    from components.train import phases
    from components.train.config import TrainConfig
    from components.train.core import run

    timers, own_callbacks = [], phases.training_callbacks

    def timed_callbacks(*args, **kwargs):  # Keras is imported here, once the step has set up its devices
        timers.extend(epoch_timers(wait_for_results=True))
        return [timers[0], *own_callbacks(*args, **kwargs), timers[1]]

    phases.training_callbacks = timed_callbacks  # as the phases call it
    with tempfile.TemporaryDirectory(prefix="bench-model-") as model_dir:
        result = run(
            TrainConfig(
                examples_dir=examples,
                model_dir=model_dir,
                model_name=model_name,
                epochs=epochs,
                per_replica_batch_size=batch,
                precision=precision,
                backend=backend,
                cpu_replicas=devices,
            )
        )
    global_batch = result["global_batch_size"]  # the per-device batch rounded up to a multiple of 8
    return timers[1].result(read_stats(examples)["counts"]["train"] // global_batch * global_batch)


def measure_bare(
    examples: str, model_name: str, backend: str, precision: str, devices: int, batch: int, epochs: int
) -> dict:
    """Examples per second of the fastest epoch after the first of a bare ``model.fit``: the same model, dataset and
    compile settings, the devices set up by hand, nothing else."""
    from components.artifacts.examples import make_dataset
    from components.modalities import reading_of, spec_of
    from components.models import build_model
    from components.schema import read_stats
    from components.train.inputs import round_up_batch

    stats = read_stats(examples)
    batch = round_up_batch(batch)  # as our step does
    steps_per_epoch = stats["counts"]["train"] // (batch * devices)
    if backend == "jax":
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        import keras

        scope = keras.distribution.DataParallel().scope if devices > 1 else contextlib.nullcontext
    else:
        import tensorflow as tf

        if devices > 1:
            (cpu,) = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
        import keras

        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        scope = tf.distribute.MirroredStrategy(cpus).scope if devices > 1 else contextlib.nullcontext
    dataset = make_dataset(examples, "train", reading_of(stats), batch * devices, training=True, cache=True)
    keras.mixed_precision.set_global_policy(precision)
    with scope():
        model = build_model(model_name, spec_of(stats))
        model.compile(
            optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"], jit_compile=backend == "jax"
        )
        steps_end, timer = epoch_timers()
        model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0, callbacks=[steps_end, timer])
    return timer.result(steps_per_epoch * batch * devices)


def input_rate(examples: str, batch: int, batches: int) -> float:
    """Examples per second of the uncached input pipeline alone: read, parse, decode, shuffle, batch."""
    from components.artifacts.examples import make_dataset
    from components.modalities import reading_of
    from components.schema import read_stats

    dataset = make_dataset(examples, "train", reading_of(read_stats(examples)), batch, training=True)
    iterator = iter(dataset)
    next(iterator)  # start the threads
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch / (time.perf_counter() - started)


def run_one(
    examples: str, model_name: str, mode: str, backend: str, precision: str, devices: int, batch: int, epochs: int
) -> dict:
    """One configuration in a fresh process, as the train step runs: its examples per second (``rate``), its fastest
    epoch (``epoch_seconds``) and the seconds an epoch spent in the callbacks' epoch ends (``after_steps_seconds``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "KERAS_BACKEND")}
    env["KERAS_BACKEND"] = backend
    command = [
        sys.executable,
        __file__,
        "--worker",
        mode,
        backend,
        precision,
        str(devices),
        examples,
        "--batch-size",
        str(batch),
        "--epochs",
        str(epochs),
        "--model",
        model_name,
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"{mode} {backend} {precision} x{devices} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def alternating(repeats: int) -> list[str]:
    """The order of the measured processes: ours and the bare fit in turns, the pair reversed every other repeat
    (ours, bare, bare, ours, ...), so that a machine growing slower or faster over the run favours neither."""
    return [mode for r in range(repeats) for mode in (("ours", "bare") if r % 2 == 0 else ("bare", "ours"))]


def listed(rates: list[float]) -> str:
    return ", ".join(f"{rate:.1f}" for rate in rates)


def device_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give device counts as whole numbers, e.g. 1,2")
    return counts


def epoch_count(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: give 2 or more epochs (the first is a warm-up, never timed)")
    return int(text)


def gpu_models() -> list[str]:
    """The NVIDIA GPUs the driver lists (no framework imported)."""
    models = []
    for path in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        with contextlib.suppress(OSError), open(path) as handle:
            models += [line.split(":", 1)[1].strip() for line in handle if line.startswith("Model:")]
    return models


def parse_args() -> argparse.Namespace:
    from components.models import BUILTINS
    from components.params import TEXT

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256, help="synthetic JPEGs (or texts) to write (default 256)")
    parser.add_argument(
        "--model",
        default="codelab_convnet",
        choices=sorted(BUILTINS),
        help="the model to train (default %(default)s); a text model trains on synthetic token ids",
    )
    for name in ("sequence_length", "vocabulary_size"):  # the pipeline's own (the article's) defaults
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=TEXT[name].default,
            help=f"text models: {TEXT[name].help_with_default()}",
        )
    parser.add_argument("--batch-size", type=int, default=16, help="per-device batch (default 16)")
    parser.add_argument("--image-size", type=int, default=192, help="default 192 (the codelab's)")
    parser.add_argument("--only", choices=BACKENDS, help="measure one backend")
    parser.add_argument(
        "--epochs",
        type=epoch_count,
        default=EPOCHS,
        help="per configuration, the first a warm-up (default %(default)s; more give a steadier best on short epochs)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        choices=range(1, 10),
        metavar="N",
        help="processes per configuration and side, in turns; the best of each side counts (default %(default)s)",
    )
    parser.add_argument(
        "--devices",
        type=device_counts,
        default=DEVICES,
        metavar="N[,N...]",
        help="device counts to measure (default 1,2)",
    )
    parser.add_argument(
        "--worker", nargs=5, metavar=("MODE", "BACKEND", "PRECISION", "DEVICES", "EXAMPLES"), help=argparse.SUPPRESS
    )
    return parser.parse_args()


def measure_configuration(examples: str, args, backend: str, precision: str, devices: int, unit: str) -> dict:
    """One configuration's row: our step against a bare ``fit``, ``args.repeats`` processes a side in turns."""
    runs = {"ours": [], "bare": []}
    for mode in alternating(args.repeats):
        runs[mode].append(
            run_one(examples, args.model, mode, backend, precision, devices, args.batch_size, args.epochs)
        )
    rates = {mode: [run["rate"] for run in measured] for mode, measured in runs.items()}
    ours, bare = max(rates["ours"]), max(rates["bare"])
    # the callbacks' epoch ends, as a share of an epoch: what our step adds to the steps, free of the noise
    # between processes that the rates carry
    after = {mode: sum(r["after_steps_seconds"] for r in measured) / len(measured) for mode, measured in runs.items()}
    share = (after["ours"] - after["bare"]) / min(run["epoch_seconds"] for run in runs["ours"])
    each = f" (each: ours {listed(rates['ours'])}; bare {listed(rates['bare'])})" if args.repeats > 1 else ""
    print(
        f"{backend:10s} {precision:15s} {devices} device(s): ours {ours:7.1f} {unit}/s, bare fit "
        f"{bare:7.1f} ({ours / bare:.2f}x; goal 0.95){each}; our epoch ends {1000 * after['ours']:.0f} ms "
        f"(bare {1000 * after['bare']:.0f} ms), {100 * share:.1f}% of an epoch",
        flush=True,
    )
    return {
        "ours": round(ours, 1),
        "bare_fit": round(bare, 1),
        "ours_vs_bare": round(ours / bare, 3),
        "ours_runs": [round(r, 1) for r in rates["ours"]],
        "bare_fit_runs": [round(r, 1) for r in rates["bare"]],
        "ours_after_steps_ms": round(1000 * after["ours"], 1),
        "bare_fit_after_steps_ms": round(1000 * after["bare"], 1),
        "ours_epoch_work_share": round(share, 4),
    }


def main() -> None:
    from components.models import BUILTINS

    args = parse_args()
    if args.worker:
        mode, backend, precision, devices, examples = args.worker
        measure = measure_ours if mode == "ours" else measure_bare
        measured = measure(examples, args.model, backend, precision, int(devices), args.batch_size, args.epochs)
        print(json.dumps(measured))
        return
    from components.train.placement import choose_backend, detect_hardware, read_cpu_flags

    size, batch, text = args.image_size, args.batch_size, BUILTINS[args.model].modality == "text"
    unit = "texts" if text else "images"
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as examples:
        if text:
            write_text_tfrecords(examples, args.images, args.sequence_length, args.vocabulary_size, num_classes=2)
        else:
            write_tfrecords(examples, args.images, size, num_classes=5)
        feed = input_rate(examples, batch, batches=max(8, args.images // batch))
        print(f"input pipeline alone: {feed:.1f} {unit}/s")
        backends = (args.only,) if args.only else BACKENDS
        for backend, precision, devices in itertools.product(backends, PRECISIONS, args.devices):
            rows[f"{backend}/{precision}/x{devices}"] = measure_configuration(
                examples, args, backend, precision, devices, unit
            )
    summary = {}
    if not args.only:
        for precision, devices in itertools.product(PRECISIONS, args.devices):
            tf_rate = rows[f"tensorflow/{precision}/x{devices}"]["ours"]
            jax_rate = rows[f"jax/{precision}/x{devices}"]["ours"]
            summary[f"{precision}/x{devices}"] = {
                "faster": "tensorflow" if tf_rate >= jax_rate else "jax",
                "tensorflow_vs_jax": round(tf_rate / jax_rate, 2),
            }
            print(f"{precision:15s} {devices} device(s): TensorFlow {tf_rate / jax_rate:.2f}x JAX")
    hardware = detect_hardware()
    print(
        json.dumps(
            {
                "model": args.model,
                "unit": unit,
                **(
                    {"sequence_length": args.sequence_length, "vocabulary_size": args.vocabulary_size}
                    if text
                    else {"image_size": size}
                ),
                "per_device_batch": batch,
                "epochs": args.epochs,
                "repeats": args.repeats,
                "cpu_cores": os.cpu_count(),
                "hardware": hardware,
                "gpus": gpu_models(),
                "cpu_bf16": sorted(read_cpu_flags() & {"amx_bf16", "avx512_bf16"}),
                f"input_{unit}_per_second": round(feed, 1),
                "configurations": rows,
                "backends": summary,
                "auto_picks": choose_backend("auto", hardware, {}, modality=BUILTINS[args.model].modality)[0],
                "min_ours_vs_bare": min(row["ours_vs_bare"] for row in rows.values()),
                "max_ours_epoch_work_share": max(row["ours_epoch_work_share"] for row in rows.values()),
            }
        )
    )


if __name__ == "__main__":
    sys.path.insert(0, REPO_ROOT)
    main()
