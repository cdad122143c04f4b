"""Conversion speed, side by side in one run: (a) the single-process loop of the "Keras on TPU" codelab notebook
(tf.data decode, resize and crop, re-encode with AUTOTUNE maps, then TFRecordWriter), (a') the same loop doing our
resize and encode (antialiased, quality 95), and (b) this project's Beam conversion on the DirectRunner using every
core, over the same photo-sized JPEGs. Two ratios of (b) to (a): in one process, the conversions alone (the steady
state, as a long conversion runs), and the whole process, each a fresh ``python`` (imports, Beam's or TensorFlow's
start, the work, the exit), as a user runs them. The loops' AUTOTUNE maps already run on every core too. Each is run
``--repeats`` times, taking turns, and the ratios are of the medians: the notebook's AUTOTUNE keeps both cores busy
in some runs and not in others (the same CPU seconds in 1.7 s or 2.6 s here), so one run each can say either. The
CPU seconds of each (every process, from ``/proc/stat``) are printed beside the wall times.

Then the per-image floor: each stage alone, one image at a time on one thread, by each library tried (decode: Pillow,
simplejpeg, OpenCV, TensorFlow; resize to fill the square: Pillow's triangle filter, OpenCV's area and bilinear,
TensorFlow's antialiased bilinear, the serving graph's; encode: Pillow, simplejpeg, OpenCV), with each one's largest
difference from the serving graph's pixels on the same photos (the conversion must stay within 1 level of them), and
the CPU time a photo may take for the goal on this machine's cores. simplejpeg and OpenCV come from the lock's
``bench`` group; without it they are named as not installed.

Goal (issue: production-grade conversion): (b) at least 1.7x (a), whole process, and 1.3x in the steady state, on 2
cores. The last line printed is a JSON object.

``--part startup``: the conversion's fixed cost, on 10 photos, phase by phase, each in a fresh process (median of
``--repeats``): the interpreter's start, the imports, listing the source, building the Beam graph, and running it (the
local runner's start, the conversion of 10 images, the writes); beside it a Beam pipeline that does nothing but write
10 lines (the runner's own floor) and the 10 images' own work, one thread.

    .tools/bin/uv run --group bench python bench/convert.py [--images 2000] [--image-size 192] [--repeats 3]
    .venv/bin/python bench/convert.py --part startup [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

CLASSES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")


def write_photos(root: str, count: int, size=(500, 375)) -> int:
    """Photo-sized JPEGs with varied content (smooth colour fields, edges and noise) in class folders."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    total = 0
    for index in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8))
        picture = np.asarray(coarse.resize(size, Image.Resampling.BICUBIC), dtype=np.int16)
        picture = np.clip(picture + rng.integers(-18, 18, size=picture.shape), 0, 255).astype(np.uint8)
        folder = os.path.join(root, CLASSES[index % len(CLASSES)])
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{index:05d}.jpg")
        Image.fromarray(picture).save(path, quality=90)
        total += os.path.getsize(path)
    return total


def codelab_loop(root: str, output: str, size: int, shards: int = 16, faithful: bool = True) -> float:
    """The codelab notebook's conversion: tf.data maps with AUTOTUNE, then TFRecordWriter per shard. Seconds.

    ``faithful``: the notebook's own resize (bilinear, no antialiasing) and re-encode (``optimize_size=True``,
    ``chroma_downsampling=False``); otherwise the same work as ours (antialiased ``fill_square``, plain quality 95).
    """
    import tensorflow as tf

    from components.imaging import fill_square
    from components.schema import serialize_example

    started = time.perf_counter()
    files = tf.data.Dataset.list_files(f"{root}/*/*.jpg", shuffle=False)

    def decode(path):
        label = tf.strings.split(path, os.sep)[-2]
        return tf.io.decode_jpeg(tf.io.read_file(path), channels=3), label

    def resize_and_crop(image, label):  # the notebook's resize_and_crop_image
        height, width = tf.cast(tf.shape(image)[0], tf.float32), tf.cast(tf.shape(image)[1], tf.float32)
        scale = size / tf.minimum(height, width)
        image = tf.image.resize(image, [tf.math.ceil(height * scale), tf.math.ceil(width * scale)])
        new_height, new_width = tf.shape(image)[0], tf.shape(image)[1]
        image = tf.image.crop_to_bounding_box(image, (new_height - size) // 2, (new_width - size) // 2, size, size)
        return image, label

    def recompress(image, label):
        if faithful:
            return tf.io.encode_jpeg(tf.cast(image, tf.uint8), optimize_size=True, chroma_downsampling=False), label
        return tf.io.encode_jpeg(fill_square(image, size), quality=95), label

    autotune = tf.data.AUTOTUNE
    dataset = files.map(decode, num_parallel_calls=autotune)
    if faithful:
        dataset = dataset.map(resize_and_crop, num_parallel_calls=autotune)
    dataset = dataset.map(recompress, num_parallel_calls=autotune)
    count = sum(1 for _ in tf.io.gfile.glob(f"{root}/*/*.jpg"))
    shard_size = -(-count // shards)
    os.makedirs(output, exist_ok=True)
    for shard, batch in enumerate(dataset.batch(shard_size)):
        jpegs, labels = batch
        with tf.io.TFRecordWriter(os.path.join(output, f"{shard:02d}-{len(jpegs)}.tfrec")) as writer:
            for jpeg, label in zip(jpegs.numpy(), labels.numpy(), strict=True):
                name = label.decode()
                writer.write(serialize_example(jpeg, CLASSES.index(name), name, (size, size), len(CLASSES)))
    return time.perf_counter() - started


def per_item_ms(function, inputs: list) -> tuple[list, float]:
    """``function`` over ``inputs`` one at a time, after one call to warm it: (outputs, milliseconds per input)."""
    function(inputs[0])
    started = time.perf_counter()
    outputs = [function(item) for item in inputs]
    return outputs, (time.perf_counter() - started) * 1000 / len(inputs)


def stage_costs(root: str, size: int, samples: int = 200) -> dict:
    """Milliseconds per image for each stage alone, one image at a time on one thread: what this conversion does
    (Pillow decode, triangle-filter resize and crop, encode) and, for comparison, TensorFlow's decode and resize."""
    import glob
    import io

    import tensorflow as tf

    from components.convert.items import encode_image
    from components.decoding import decode_rgb_image
    from components.imaging import decoded_at_least, fill_square, fill_square_pillow

    paths = sorted(glob.glob(f"{root}/*/*.jpg"))[:samples]
    contents = [open(path, "rb").read() for path in paths]  # noqa: SIM115 (a bench: read once, up front)
    tf_resize = tf.function(lambda image: fill_square(image, size))

    def encode(image):
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=95)
        return buffer.getvalue()

    worker = {
        f"decode_resize_encode_in_a_worker_{name}_ms": in_a_worker_ms(paths, size, keep)
        for name, keep in (("glibc_defaults", False), ("freed_memory_kept", True))
    }
    images, decode_ms = per_item_ms(lambda c: decode_rgb_image(c, at_least=decoded_at_least(size)), contents)
    resized, resize_ms = per_item_ms(lambda image: fill_square_pillow(image, size), images)
    _, encode_ms = per_item_ms(encode, resized)
    _, whole_ms = per_item_ms(lambda c: encode_image(c, size, 95), contents)
    decoded, tf_decode_ms = per_item_ms(lambda c: tf.io.decode_jpeg(c, channels=3), contents)
    _, tf_resize_ms = per_item_ms(tf_resize, decoded)
    return {
        "decode_ms": decode_ms,
        "resize_crop_ms": resize_ms,
        "encode_ms": encode_ms,
        "decode_resize_encode_ms": whole_ms,
        **worker,
        "tf_decode_ms": tf_decode_ms,
        "tf_resize_crop_ms": tf_resize_ms,
    }


def in_a_worker_ms(paths: list[str], size: int, keep_freed_memory: bool) -> float:
    """Milliseconds per image of the conversion's decode, resize and encode, one image at a time in a worker process
    of its own: with glibc's malloc defaults, or as the conversion's workers run (freed memory kept)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from components.convert.items import _keep_freed_memory

    spawn, initializer = multiprocessing.get_context("spawn"), _keep_freed_memory if keep_freed_memory else None
    with ProcessPoolExecutor(1, mp_context=spawn, initializer=initializer) as pool:
        return pool.submit(_encodes_ms, paths, size).result()


def _encodes_ms(paths: list[str], size: int) -> float:
    from components.convert.items import encode_image

    contents = [open(path, "rb").read() for path in paths]  # noqa: SIM115 (a bench: read once, up front)
    return per_item_ms(lambda c: encode_image(c, size, 95), contents)[1]


def library_floors(root: str, size: int, samples: int = 200) -> dict:
    """Each stage alone by each library tried, one image at a time on one thread (milliseconds per image), and how
    far the square it leads to is from the serving graph's (levels of 255, the largest over the photos): a decoder
    followed by the conversion's resize, a resizer after the conversion's decode."""
    import glob
    import io

    import numpy as np
    import tensorflow as tf
    from PIL import Image

    from components.decoding import decode_rgb_image
    from components.imaging import fill_square, fill_square_pillow, serving_decoder

    paths = sorted(glob.glob(f"{root}/*/*.jpg"))[:samples]
    contents = [open(path, "rb").read() for path in paths]  # noqa: SIM115 (a bench: read once, up front)
    serving = tf.function(lambda image: fill_square(image, size))
    # a decoder's output as the next stage takes it: the conversion's own Pillow image, or an array
    decoders = {
        "pillow (the conversion's, orientation and modes included)": decode_rgb_image,
        # (libjpeg-turbo's accurate integer IDCT, as Pillow's and the serving graph's; TensorFlow's default is the
        # fast one, a few levels off in single pixels)
        "tensorflow": lambda content: tf.io.decode_jpeg(content, channels=3, dct_method="INTEGER_ACCURATE").numpy(),
    }

    def as_image(decoded):
        return decoded if isinstance(decoded, Image.Image) else Image.fromarray(decoded)

    resizers = {
        "pillow triangle (the conversion's)": lambda decoded: np.asarray(fill_square_pillow(as_image(decoded), size)),
        "tensorflow antialiased (the serving graph's)": lambda decoded: serving(np.asarray(decoded)).numpy(),
    }

    def pillow_encode(pixels):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=95)
        return buffer.getvalue()

    encoders = {"pillow": pillow_encode}
    missing = []
    try:
        import simplejpeg
    except ImportError:
        missing.append("simplejpeg")
    else:
        decoders["simplejpeg"] = lambda content: simplejpeg.decode_jpeg(content, colorspace="RGB")
        # libjpeg-turbo's DCT-domain scaling in eighths (5/8 for a 500x375 photo at 192): the least that covers it
        decoders["simplejpeg, DCT-scaled to cover the square"] = lambda content: simplejpeg.decode_jpeg(
            content, colorspace="RGB", min_height=size, min_width=size
        )
        encoders["simplejpeg"] = lambda pixels: simplejpeg.encode_jpeg(pixels, quality=95, colorspace="RGB")
    try:
        import cv2
    except ImportError:
        missing.append("opencv")
    else:
        cv2.setNumThreads(1)

        def cv2_fill(interpolation):
            def fill(decoded):  # the same resized size and crop as fill_square_pillow's
                pixels = np.asarray(decoded)
                height, width = pixels.shape[:2]
                scale = np.float32(size) / np.float32(min(height, width))
                new_height = max(size, int(np.ceil(np.float32(height) * scale - np.float32(1e-3))))
                new_width = max(size, int(np.ceil(np.float32(width) * scale - np.float32(1e-3))))
                resized = cv2.resize(pixels, (new_width, new_height), interpolation=interpolation)
                top, left = (new_height - size) // 2, (new_width - size) // 2
                return resized[top : top + size, left : left + size]

            return fill

        decoders["opencv"] = lambda content: cv2.cvtColor(
            cv2.imdecode(np.frombuffer(content, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB
        )
        resizers["opencv area"] = cv2_fill(cv2.INTER_AREA)
        resizers["opencv bilinear, no antialiasing"] = cv2_fill(cv2.INTER_LINEAR)
        encoders["opencv"] = lambda pixels: cv2.imencode(".jpg", pixels[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])[1]

    def farthest(outputs: list, references: list) -> int:
        pairs = zip(outputs, references, strict=True)
        return max(int(np.abs(out.astype(np.int16) - ref.astype(np.int16)).max()) for out, ref in pairs)

    # the serving graph's pixels: its own decode and resize, a file at a time
    serving_decode = serving_decoder(size)
    served = [serving_decode([content])[0].numpy() for content in contents]
    found: dict = {
        "decode_ms": {},
        "decode_levels_from_serving": {},
        "resize_crop_ms": {},
        "resize_levels_from_serving": {},
        "encode_ms": {},
        "not_installed": missing,
    }
    conversion_resize = resizers["pillow triangle (the conversion's)"]
    for name, decode in decoders.items():  # each decoder followed by the conversion's resize
        outputs, found["decode_ms"][name] = per_item_ms(decode, contents)
        if name.startswith("pillow"):
            decoded = outputs
        found["decode_levels_from_serving"][name] = farthest([conversion_resize(out) for out in outputs], served)
    arrays = [np.asarray(image) for image in decoded]
    for name, resize in resizers.items():  # each resizer on the conversion's decode (an array, but for Pillow)
        outputs, found["resize_crop_ms"][name] = per_item_ms(resize, decoded if name.startswith("pillow") else arrays)
        found["resize_levels_from_serving"][name] = farthest(outputs, served)
    for name, encode in encoders.items():
        found["encode_ms"][name] = per_item_ms(encode, served)[1]
    # the least a photo can cost with every quality check kept: the fastest decode that reads the same pixels, the
    # fastest resize within 1 level of the serving graph, the fastest encode
    decoders_within = [name for name, levels in found["decode_levels_from_serving"].items() if levels <= 1]
    within = [name for name, levels in found["resize_levels_from_serving"].items() if levels <= 1]
    found["floor_ms"] = (
        min(found["decode_ms"][name] for name in decoders_within)
        + min(found["resize_crop_ms"][name] for name in within)
        + min(found["encode_ms"].values())
    )
    rounded = {
        key: {name: round(ms, 3) for name, ms in found[key].items()}
        for key in ("decode_ms", "resize_crop_ms", "encode_ms")
    }
    return {**found, **rounded, "floor_ms": round(found["floor_ms"], 3)}


def cpu_seconds() -> float:
    """The seconds every core of this machine has been busy so far (``/proc/stat``; 0 where there is none): the CPU
    of a run in every process it starts, on an otherwise quiet machine."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(value) for value in handle.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def measured(function, *args, **kwargs) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``function(*args, **kwargs)``."""
    cpu, started = cpu_seconds(), time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - started, cpu_seconds() - cpu


def fresh_process(*args: str) -> tuple[float, str]:
    """``python *args`` in a fresh process, from the repository's root: (its seconds, the last line it printed)."""
    import subprocess
    import sys

    begun = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    return time.perf_counter() - begun, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def whole_processes(root: str, directory: str, size: int, attempt: int) -> dict:
    """Seconds (wall, CPU) of each conversion as a user runs it, a fresh ``python`` each: the notebook's loop and
    ``python -m components.convert``."""
    loop = measured(fresh_process, "-c", NOTEBOOK, root, os.path.join(directory, f"loop-process-{attempt}"), str(size))
    beam = measured(
        fresh_process,
        "-m",
        "components.convert",
        "--source",
        root,
        "--output",
        os.path.join(directory, f"beam-process-{attempt}"),
        "--image-size",
        str(size),
    )
    return {"codelab_loop_process": loop, "beam_process": beam}


# the notebook's loop (codelab_loop) as a program of its own
NOTEBOOK = r"""
import sys
sys.path.insert(0, "bench")
from convert import codelab_loop
codelab_loop(sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""


# one conversion in a fresh process, with a clock around each phase: the phases are run()'s own calls, timed from
# outside by wrapping them (the conversion itself is not changed)
PHASES = r"""
import json, sys, time
started = time.perf_counter()
from components.convert import core
imported = time.perf_counter()
marks = {}
def timed(name, function):
    def wrapper(*args, **kwargs):
        begun = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            marks[name] = marks.get(name, 0.0) + time.perf_counter() - begun
    return wrapper
core.list_source = timed("list", core.list_source)
core.conversion_graph = timed("build_graph", core.conversion_graph)
core.run(core.ConvertConfig(source=sys.argv[1], output_dir=sys.argv[2], image_size=int(sys.argv[3])))
done = time.perf_counter()
print(json.dumps({"imports_s": imported - started, "list_s": marks["list"], "build_graph_s": marks["build_graph"],
                  "run_s": done - imported - marks["list"] - marks["build_graph"], "in_process_s": done - started}))
"""
FLOOR = r"""
import sys, time
started = time.perf_counter()
import apache_beam as beam
with beam.Pipeline() as pipeline:
    _ = pipeline | beam.Create([str(n) for n in range(10)]) | beam.io.WriteToText(sys.argv[1])
print(time.perf_counter() - started)
"""


def startup(repeats: int, image_size: int) -> dict:
    """The phases of converting 10 photos, each the median of ``repeats`` fresh processes (seconds)."""
    import statistics

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as directory:
        root = os.path.join(directory, "photos")
        write_photos(root, 10)
        runs, starts, floors, wholes = [], [], [], []
        for attempt in range(repeats):
            starts.append(fresh_process("-c", "pass")[0])
            wall, line = fresh_process("-c", PHASES, root, os.path.join(directory, f"out-{attempt}"), str(image_size))
            runs.append({**json.loads(line), "process_s": wall})
            floors.append(float(fresh_process("-c", FLOOR, os.path.join(directory, f"floor-{attempt}", "lines"))[1]))
            output = os.path.join(directory, f"cli-{attempt}")
            wholes.append(
                fresh_process(
                    "-m", "components.convert", "--source", root, "--output", output, "--image-size", str(image_size)
                )[0]
            )
        costs = stage_costs(root, image_size, samples=10)
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    return {
        "interpreter_start_s": statistics.median(starts),
        **median,
        "command_line_s": statistics.median(wholes),
        "beam_floor_s": statistics.median(floors),
        "ten_images_work_s": 10 * costs["decode_resize_encode_ms"] / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000, help="photo-sized JPEGs to generate (default 2000)")
    parser.add_argument("--image-size", type=int, default=192, help="default 192 (the codelab's)")
    parser.add_argument(
        "--part",
        choices=("speed", "startup"),
        default="speed",
        help="speed (default): the 2,000-photo comparison; startup: the fixed cost",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs of each side, taking turns (default 3); startup: fresh processes per phase (default 5)",
    )
    args = parser.parse_args()
    if args.repeats is None:
        args.repeats = 5 if args.part == "startup" else 3
    if args.part == "startup":
        found = startup(args.repeats, args.image_size)
        for key, value in found.items():
            print(f"{key:24s} {value:6.2f}")
        print(
            json.dumps(
                {
                    "cpu_cores": os.cpu_count(),
                    "repeats": args.repeats,
                    "image_size": args.image_size,
                    **{key: round(value, 3) for key, value in found.items()},
                }
            )
        )
        return
    import statistics

    from components.convert.core import ConvertConfig, run

    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as directory:
        root = os.path.join(directory, "photos")
        input_bytes = write_photos(root, args.images)
        print(
            f"{args.images} JPEGs of 500x375, {input_bytes / 1e6:.0f} MB, in {len(CLASSES)} classes, {cores} cores, "
            f"{args.repeats} runs each, taking turns"
        )
        # each side's one-time costs (TensorFlow's and tf.data's start, Beam's, the worker processes') paid before
        # the clocks: the steady state, as a long conversion runs
        warm = os.path.join(directory, "warm")
        write_photos(warm, 20)
        codelab_loop(warm, os.path.join(directory, "warm-loop"), args.image_size)
        run(ConvertConfig(source=warm, output_dir=os.path.join(directory, "warm-beam"), image_size=args.image_size))
        runs: dict[str, list[tuple[float, float]]] = {
            "loop": [],
            "same": [],
            "beam": [],
            "loop_process": [],
            "beam_process": [],
        }
        for attempt in range(args.repeats):
            out = os.path.join(directory, f"run-{attempt}")
            runs["loop"].append(measured(codelab_loop, root, f"{out}-loop", args.image_size))
            runs["same"].append(measured(codelab_loop, root, f"{out}-same", args.image_size, faithful=False))
            config = ConvertConfig(source=root, output_dir=f"{out}-beam", image_size=args.image_size)
            runs["beam"].append(measured(run, config))
        for attempt in range(args.repeats):
            processes = whole_processes(root, directory, args.image_size, attempt)
            runs["loop_process"].append(processes["codelab_loop_process"])
            runs["beam_process"].append(processes["beam_process"])
        wall = {name: statistics.median(w for w, _ in found) for name, found in runs.items()}
        cpu = {name: statistics.median(c for _, c in found) for name, found in runs.items()}

        def spread(name: str) -> str:
            times = sorted(w for w, _ in runs[name])
            return f"{times[0]:.2f}-{times[-1]:.2f}s" if len(times) > 1 else f"{times[0]:.2f}s"

        loop_rate, same_rate, beam_rate = (args.images / wall[name] for name in ("loop", "same", "beam"))
        ratio, ratio_same = wall["loop"] / wall["beam"], wall["same"] / wall["beam"]
        whole_ratio = wall["loop_process"] / wall["beam_process"]
        print(
            f"(a) codelab notebook's tf.data loop     {loop_rate:7.1f} images/s  (median {wall['loop']:.2f}s of "
            f"{spread('loop')}, {cpu['loop']:.1f} CPU s)"
        )
        print(
            f"(a') same loop, our resize and encode   {same_rate:7.1f} images/s  (median {wall['same']:.2f}s of "
            f"{spread('same')}, {cpu['same']:.1f} CPU s)"
        )
        print(
            f"(b) Beam, local runner, every core     {beam_rate:7.1f} images/s  (median {wall['beam']:.2f}s of "
            f"{spread('beam')}, {cpu['beam']:.1f} CPU s)"
        )
        print(f"steady-state ratio {ratio:.2f} (goal 1.3), {ratio_same:.2f} against (a')")
        print(
            f"whole process: (a) median {wall['loop_process']:.2f}s of {spread('loop_process')} "
            f"({cpu['loop_process']:.1f} CPU s), (b) python -m components.convert median "
            f"{wall['beam_process']:.2f}s of {spread('beam_process')} ({cpu['beam_process']:.1f} CPU s)  ratio "
            f"{whole_ratio:.2f} (goal 1.7)"
        )
        costs = stage_costs(root, args.image_size)
        print("ms per image, one thread: " + ", ".join(f"{k} {v:.2f}" for k, v in costs.items()))
        floors = library_floors(root, args.image_size)
    # the CPU a photo may take for the steady-state goal, every core busy and nothing else done
    budget_ms = cores * 1000 / (1.3 * loop_rate)
    print("per-image floor by library, one thread (ms; levels from the serving graph's pixels):")
    for stage, levels in (
        ("decode", "decode_levels_from_serving"),
        ("resize_crop", "resize_levels_from_serving"),
        ("encode", None),
    ):
        for name, ms in floors[f"{stage}_ms"].items():
            far = f"  {floors[levels][name]} levels" if levels else ""
            print(f"  {stage:12s} {name:46s} {ms:6.2f}{far}")
    if floors["not_installed"]:
        print(f"  not installed: {', '.join(floors['not_installed'])} (.tools/bin/uv run --group bench ...)")
    print(
        f"floor with every check kept: {floors['floor_ms']:.2f} ms a photo; the steady-state goal allows "
        f"{budget_ms:.2f} ms of CPU a photo on {cores} cores"
    )
    print(
        json.dumps(
            {
                "images": args.images,
                "image_size": args.image_size,
                "cpu_cores": cores,
                "repeats": args.repeats,
                "codelab_loop_images_per_second": round(loop_rate, 1),
                "same_work_loop_images_per_second": round(same_rate, 1),
                "beam_images_per_second": round(beam_rate, 1),
                "ratio": round(ratio, 2),
                "ratio_same_work": round(ratio_same, 2),
                "median_seconds": {name: round(value, 2) for name, value in wall.items()},
                "median_cpu_seconds": {name: round(value, 2) for name, value in cpu.items()},
                "runs_seconds": {name: [round(w, 2) for w, _ in found] for name, found in runs.items()},
                "ratio_whole_process": round(whole_ratio, 2),
                **{k: round(v, 3) for k, v in costs.items()},
                "library_floors": floors,
                "budget_ms": round(budget_ms, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
