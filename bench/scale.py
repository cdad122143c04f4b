"""How each step's cost grows with its source: storage calls, time and peak memory at 10^3, 10^4, 10^5 and 3x10^5
files (past the 100,000 examples a split that the data checks read at most), the exponent of their growth, and what
that makes of 10^6 and 10^7 files.

Two kinds of step, each on generated sources (tiny PNGs of noise, in 10 class folders):
- **Before the conversion starts** (one process, outside Beam, on ``gs://``): the DAG's fingerprint step on a folder,
  the convert step's listing of a folder, and of a CSV manifest naming every file. They run in this process against a
  Cloud Storage client held in memory that pages its listings by 1,000 objects as the service does, and counts its
  calls (``tests/counting_storage.py``; the storage emulator answers a listing in one page). Their time, the best of
  3 runs, includes the store's own work and no network: a real listing call takes tens of milliseconds more. Peak
  memory: Python's own allocations during another run (``tracemalloc``), the store's objects excluded.
- **Whole-data steps** on local files, each its own command in a fresh process, as the DAG runs them: the fingerprint
  step, the conversion (Beam's local engine, every core) and the data checks. Peak memory: the largest process's
  resident set (GNU ``time``'s maximum RSS).

The steps before a conversion also run at 10^6 files (``--listing-sizes``). The growth exponent is the slope of
log(cost) against log(files) between a step's two largest sizes (1: linear; a constant cost, 0). Times below 0.05 s
are too short to fit and print no exponent.

    .venv/bin/python bench/scale.py [--sizes 1000,10000,100000,300000] [--listing-sizes 1000000] [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from bench.loop import cpu_name  # noqa: E402 (after the repository joins the path)

CLASSES = 10
REPEATS = 3  # the steps in this process: the fastest of 3 runs (one machine's noise is all slower)
EXTRAPOLATED = (10**6, 10**7)
# a step outside Beam is fine at a size where it takes less than this long and this much memory on one machine
OUTSIDE_BEAM_SECONDS, OUTSIDE_BEAM_BYTES = 3600, 8 * 2**30


def tiny_png(rng: random.Random) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.frombytes("L", (8, 8), bytes(rng.getrandbits(8) for _ in range(64))).save(buffer, format="PNG")
    return buffer.getvalue()


def write_local_source(root: str, files: int) -> None:
    """``files`` distinct 8x8 PNGs of noise in ``CLASSES`` class folders."""
    rng = random.Random(files)
    for c in range(CLASSES):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
    for i in range(files):
        with open(os.path.join(root, f"class{i % CLASSES}", f"{i:08d}.png"), "wb") as handle:
            handle.write(tiny_png(rng))


def cloud_store(files: int):
    """A counting Cloud Storage holding ``files`` objects in ``CLASSES`` class folders under gs://scale/data, and a
    manifest gs://scale/manifest.csv naming each of them."""
    from tests.counting_storage import CountingStorage

    store, rows = CountingStorage(), []
    for i in range(files):
        path = f"gs://scale/data/class{i % CLASSES}/{i:08d}.png"
        store.add(path, size=100 + i % 50)
        rows.append(f"{path},class{i % CLASSES}\n")
    store.add("gs://scale/manifest.csv", payload="".join(rows).encode())
    store.names("scale")  # (sorted before any call is counted)
    return store


def before_conversion(files: int) -> dict[str, dict]:
    """{step: {calls, seconds, peak_bytes}} of the steps that list a ``gs://`` source before a conversion starts."""
    from components import storage
    from components.convert.fingerprint import fingerprint_source
    from components.convert.listing import list_image_folder, list_manifest

    steps = {
        "fingerprint step, folder (gs://)": lambda: fingerprint_source("gs://scale/data"),
        "convert's listing, folder (gs://)": lambda: list_image_folder("gs://scale/data"),
        "convert's listing, manifest (gs://)": lambda: list_manifest("gs://scale/manifest.csv"),
    }
    store = cloud_store(files)
    storage._client = lambda: store
    measured = {}
    for name, call in steps.items():
        times = []
        for _ in range(REPEATS):
            store.calls.clear()
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
        seconds, calls = min(times), store.total()
        tracemalloc.start()  # (again, traced: tracing slows each allocation several times)
        call()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        measured[name] = {"calls": calls, "seconds": seconds, "peak_bytes": peak}
    return measured


def command(args: list[str]) -> tuple[float, int]:
    """(seconds, the largest process's peak resident bytes) of a command run in a fresh Python."""
    handle, report = tempfile.mkstemp(suffix=".time")
    os.close(handle)
    started = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", "-o", report, sys.executable, "-m", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(args[:1])} failed: {done.stderr.strip().splitlines()[-3:]}")
    with open(report) as handle:
        kilobytes = int(handle.read().split()[-1])
    os.remove(report)
    return seconds, kilobytes * 1024


def whole_data(files: int, work_dir: str) -> dict[str, dict]:
    """{step: {seconds, peak_bytes}} of the fingerprint step, the conversion and the data checks on local files."""
    root = os.path.join(work_dir, f"source-{files}")
    examples, checks = os.path.join(work_dir, f"examples-{files}"), os.path.join(work_dir, f"checks-{files}")
    write_local_source(root, files)
    measured = {}
    steps = {
        "fingerprint step, folder (local)": ["components.convert.fingerprint", "--source", root],
        "convert (Beam's local engine)": ["components.convert", "--source", root, "--output", examples],
        "check-data": ["components.check_data", "--examples", examples, "--output", checks],
    }
    steps["convert (Beam's local engine)"] += ["--image-size", "8"]
    for name, args in steps.items():
        seconds, peak = command(args)
        measured[name] = {"seconds": seconds, "peak_bytes": peak}
    for folder in (root, examples, checks):
        shutil.rmtree(folder, ignore_errors=True)
    return measured


def exponent(sizes: list[int], values: list[float], floor: float = 0.0) -> float | None:
    """The slope of log(value) against log(size) between the two largest sizes; None where a value is at or under
    ``floor`` (too small to fit)."""
    (n1, v1), (n2, v2) = list(zip(sizes, values, strict=True))[-2:]
    if min(v1, v2) <= floor:
        return None
    return math.log(v2 / v1) / math.log(n2 / n1)


def extrapolate(size: int, value: float, slope: float | None, target: int) -> float | None:
    """``value`` at ``size`` grown to ``target`` at ``slope`` (a falling figure is taken as flat)."""
    return None if slope is None else value * (target / size) ** max(0.0, slope)


def human_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def human_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 3600:.1f} h" if value >= 3600 else f"{value / 60:.1f} min" if value >= 60 else f"{value:.2f} s"


def analysed(sizes: list[int], runs: dict[int, dict]) -> dict[str, dict]:
    """Each step's figures at each size, their growth exponents and what they make of ``EXTRAPOLATED``."""
    steps = {}
    for name in runs[sizes[0]]:
        figures = {size: runs[size][name] for size in sizes if name in runs[size]}
        measured = sorted(figures)
        last = figures[measured[-1]]
        found = {"at": figures, "exponent": {}, "extrapolated": {}}
        for metric, floor in (("calls", 0), ("seconds", 0.05), ("peak_bytes", 0)):
            if metric not in last:
                continue
            slope = exponent(measured, [figures[size][metric] for size in measured], floor)
            found["exponent"][metric] = slope
            found["extrapolated"][metric] = {
                target: extrapolate(measured[-1], last[metric], slope, target) for target in EXTRAPOLATED
            }
        steps[name] = found
    return steps


def verdict(name: str, found: dict) -> str:
    """What the extrapolation says of a step at 10^7 files."""
    seconds = found["extrapolated"]["seconds"].get(EXTRAPOLATED[-1])
    memory = found["extrapolated"]["peak_bytes"].get(EXTRAPOLATED[-1])
    if name.startswith("convert ("):  # (the files it would convert in an hour at its growth)
        (size, at), slope = max(found["at"].items()), found["exponent"]["seconds"] or 1.0
        hour = size * (OUTSIDE_BEAM_SECONDS / at["seconds"]) ** (1 / max(slope, 1.0))
        return f"about {hour:,.0f} files an hour here; Dataflow beyond"
    if (seconds or 0) > OUTSIDE_BEAM_SECONDS or (memory or 0) > OUTSIDE_BEAM_BYTES:
        return "too slow or too large for one machine at 10^7"
    return "one machine at 10^7"


def table(sizes: list[int], steps: dict[str, dict]) -> str:
    head = ["step", *(f"{size:,} files" for size in sizes), "exponent (calls, time, memory)"]
    head += [*(f"at 10^{round(math.log10(target))} files" for target in EXTRAPOLATED), "at 10^7"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, found in steps.items():
        cells = [name]
        for size in sizes:
            at = found["at"].get(size)
            if at is None:
                cells.append("-")
                continue
            calls = f"{at['calls']:,} calls, " if "calls" in at else ""
            cells.append(f"{calls}{human_seconds(at['seconds'])}, {human_bytes(at['peak_bytes'])}")
        slopes = [found["exponent"].get(metric) for metric in ("calls", "seconds", "peak_bytes")]
        cells.append(", ".join("-" if slope is None else f"{slope:.2f}" for slope in slopes))
        for target in EXTRAPOLATED:
            extra = found["extrapolated"]
            calls = extra.get("calls", {}).get(target)
            cells.append(
                (f"{calls:,.0f} calls, " if calls is not None else "")
                + f"{human_seconds(extra['seconds'][target])}, {human_bytes(extra['peak_bytes'][target])}"
            )
        cells.append(verdict(name, found))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,300000", help="the sources' file counts, comma-separated")
    parser.add_argument(
        "--listing-sizes",
        default="1000000",
        help="larger sizes for the steps before a conversion alone (in this process, in seconds), comma-separated",
    )
    parser.add_argument("--work-dir", default=None, help="where the local sources go (default: a temporary folder)")
    args = parser.parse_args(argv)
    sizes = sorted(int(size) for size in args.sizes.split(","))
    if len(sizes) < 2:
        parser.error("--sizes needs two sizes at least, to fit an exponent")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="scale-")
    runs = {}
    for size in sizes:
        print(f"{size:,} files ...", file=sys.stderr, flush=True)
        runs[size] = {**before_conversion(size), **whole_data(size, work_dir)}
    for size in sorted(int(size) for size in args.listing_sizes.split(",") if size and int(size) not in runs):
        print(f"{size:,} files, the steps before a conversion ...", file=sys.stderr, flush=True)
        runs[size] = before_conversion(size)
    sizes = sorted(runs)
    steps = analysed(sizes, runs)
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores")
    print(table(sizes, steps))
    print(json.dumps({"cpu": cpu_name(), "cores": os.cpu_count(), "sizes": sizes, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
