"""The conversion's local worker processes: where they are used, the results in order, an image whose worker dies
quarantined (the others converted), and a user's script without a main guard converting once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from components.convert.core import ConvertConfig, default_pipeline_args, local_processes
from components.convert.items import Converter, ItemSettings, convert_item
from components.convert.listing import ImageListing
from tests.conftest import CLASSES, COLORS, image_bytes, write_image_folder

SETTINGS = ItemSettings(image_size=8, jpeg_quality=95, max_pixels=10**8, class_names=CLASSES)


def dies_on_crash(item, settings):
    """``convert_item``, except that the worker process converting an item named ``crash...`` dies, as it would in a
    decoder's crash (on a thread: an error, rather than this process's end)."""
    import multiprocessing

    if os.path.basename(item[0]).startswith("crash"):
        if multiprocessing.parent_process() is None:
            raise RuntimeError("a crash on a thread")
        os._exit(11)
    return convert_item(item, settings)


def dies_in_any_worker(item, settings):
    """``convert_item`` on a thread; a worker process that runs it dies, as on a machine that starts processes it
    cannot run."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        os._exit(11)
    return convert_item(item, settings)


def worker_pid(item, settings):
    return os.getpid()


def items_of(folder) -> list[tuple[str, int, None]]:
    return [
        (os.path.join(folder, name, file), CLASSES.index(name), None)
        for name in CLASSES
        for file in sorted(os.listdir(os.path.join(folder, name)))
    ]


def test_the_items_of_local_files_are_converted_on_processes_of_their_own(tmp_path):
    items = items_of(write_image_folder(tmp_path / "images", per_class=3))
    converter = Converter(SETTINGS, processes=2, threads=2, work=worker_pid)
    converter.submit(items)
    pids = list(converter.results())
    assert len(pids) == len(items) and os.getpid() not in pids
    converted = Converter(SETTINGS, processes=2, threads=2)
    converted.submit(items)
    assert list(converted.results()) == [convert_item(item, SETTINGS) for item in items]  # in the items' order
    on_threads = Converter(SETTINGS, processes=0, threads=2, work=worker_pid)
    on_threads.submit(items)
    assert set(on_threads.results()) == {os.getpid()}
    on_threads.close()


def test_an_image_whose_worker_process_dies_is_quarantined_and_the_others_converted(tmp_path, caplog):
    folder = write_image_folder(tmp_path / "images", per_class=4)
    crash = os.path.join(folder, CLASSES[1], "crash.jpg")
    with open(crash, "wb") as handle:
        handle.write(image_bytes(COLORS[CLASSES[1]], (20, 20)))
    items = items_of(folder)
    converter = Converter(SETTINGS, processes=2, threads=2, work=dies_on_crash)
    converter.submit(items[:2])  # the workers have converted: a death is then an image's, not the machine's
    results = list(converter.results())
    converter.submit(items[2:])
    results += converter.results()
    assert len(results) == len(items)
    for item, result in zip(items, results, strict=True):
        if item[0] == crash:
            assert result == {
                "path": crash,
                "reason": "its worker process died converting it (a decoder crash, or out of memory)",
            }
        else:
            assert result == convert_item(item, SETTINGS)
    assert "a conversion worker process died" in caplog.text
    after = Converter(SETTINGS, processes=2, threads=2)  # the next conversion gets a working pool
    after.submit(items[:2])
    assert list(after.results()) == [convert_item(item, SETTINGS) for item in items[:2]]


def test_workers_that_die_before_converting_anything_leave_the_conversion_to_threads(tmp_path, caplog):
    items = items_of(write_image_folder(tmp_path / "images", per_class=3))
    converter = Converter(SETTINGS, processes=2, threads=2, work=dies_in_any_worker)
    converter.submit(items)
    assert list(converter.results()) == [convert_item(item, SETTINGS) for item in items]
    assert "worker processes died before converting anything: converting on threads" in caplog.text
    converter.close()


@pytest.mark.parametrize(
    "args, paths, threads, expected",
    [
        ((), ("a/1.jpg", "b/2.jpg"), 2, 2),
        ((), ("a/1.jpg", "b/2.jpg"), 3, 3),
        ((), ("a/1.jpg", "gs://bucket/b/2.jpg"), 2, 0),  # Cloud Storage: I/O-bound, four threads a core
        ((), ("a/1.jpg", "b/2.jpg"), 1, 0),  # one: on a thread, without a process to talk to
        (("--runner=DataflowRunner", "--project=p", "--sdk_container_image=r/beam-worker:t"), ("a/1.jpg",), 2, 0),
        (("--direct_running_mode=multi_processing", "--direct_num_workers=2"), ("a/1.jpg",), 2, 0),
    ],
)
def test_processes_are_used_where_one_local_worker_reads_local_files(args, paths, threads, expected):
    listing = ImageListing(("a", "b"), tuple((path, 0, "") for path in paths), total_bytes=1, fingerprint="f")
    config = ConvertConfig(source="photos", output_dir="out", threads=threads, pipeline_args=args)
    assert local_processes(PipelineOptions(default_pipeline_args(args)), config, listing) == expected


def test_a_script_without_a_main_guard_converts_once(tmp_path):
    """A spawned worker imports its parent's main script first: a script calling the conversion at its top level
    (no ``if __name__ == "__main__":``) must not run again in each worker."""
    source = write_image_folder(tmp_path / "images", per_class=3)
    runs = tmp_path / "runs.txt"
    script = tmp_path / "convert_my_photos.py"
    script.write_text(
        "from components.convert.core import ConvertConfig, run\n"
        f"open({str(runs)!r}, 'a').write('ran\\n')\n"
        f"stats = run(ConvertConfig(source={source!r}, output_dir={str(tmp_path / 'out')!r}, image_size=8, "
        "threads=2))\n"
        "print(stats['num_examples'], stats['quarantined'])\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(3 * len(CLASSES)), "0"]
    assert runs.read_text() == "ran\n"
    with open(tmp_path / "out" / "stats.json") as handle:
        assert json.load(handle)["num_examples"] == 3 * len(CLASSES)


def test_the_workers_module_imports_neither_beam_nor_tensorflow():
    """Each worker process imports it first: Pillow and NumPy, not Beam's 0.7 s (nor TensorFlow)."""
    code = "import sys, components.convert.items; print(sorted({'apache_beam', 'tensorflow'} & set(sys.modules)))"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert done.stdout.strip() == "[]"


def test_the_local_engine_samples_a_bundles_state_often_and_a_remote_runner_is_left_as_beam_has_it():
    """Beam ends a bundle by joining its state sampler's thread, asleep for up to a sampling period (200 ms once a
    bundle has run a second): on the local engine the period is 20 ms. This checks that the lock's Beam still takes
    it where ``sample_often`` sets it."""
    from apache_beam.runners.worker import statesampler
    from apache_beam.utils.counters import CounterFactory

    from components.convert.staging import LOCAL_SAMPLING_PERIOD_MS, sample_often

    init = statesampler.StateSampler.__init__
    saved = init.__defaults__
    try:
        init.__defaults__ = (statesampler.DEFAULT_SAMPLING_PERIOD_MS,)
        sample_often(PipelineOptions(default_pipeline_args(["--runner=DataflowRunner", "--project=p"])))
        assert statesampler.StateSampler("step", CounterFactory()).sampling_period_ms == 200
        sample_often(PipelineOptions(default_pipeline_args([])))
        assert statesampler.StateSampler("step", CounterFactory()).sampling_period_ms == LOCAL_SAMPLING_PERIOD_MS == 20
    finally:
        init.__defaults__ = saved


def test_ctrl_c_during_a_conversion_is_an_interruption_not_a_traceback(tmp_path):
    """Beam re-raises a KeyboardInterrupt raised in a step (Ctrl-C arriving while images convert) as a RuntimeError;
    the command says "interrupted" (exit 130), and a folder it wrote into is marked as a failed conversion's."""
    source = write_image_folder(tmp_path / "images", per_class=3)
    output = tmp_path / "out"
    program = f"""
import os
from components.convert import core
from components.convert.__main__ import main
from components.cli import run_main

def interrupted(self, batch):
    os.makedirs({str(output)!r}, exist_ok=True)
    open({str(output / "partial.tfrec")!r}, "wb").close()  # something written before the interruption
    raise KeyboardInterrupt
    yield

core.ConvertImages.process = interrupted
run_main(main, ["--source", {source!r}, "--output", {str(output)!r}, "--image-size", "8"], at_once=True)
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=root, timeout=300)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip().splitlines()[-1] == "error: interrupted"
    with open(output / "conversion-failed.json") as handle:
        assert json.load(handle)["reason"].startswith("RuntimeError: KeyboardInterrupt")


def test_the_workers_end_with_the_process_that_started_them_however_it_ends():
    """A conversion killed outright (the memory killer, ``kill -9``) leaves no worker processes behind."""
    import time

    program = """
import os, signal
from components.convert.items import convert_chunk, worker_processes
pool = worker_processes(2)
pool.submit(convert_chunk, [], None).result()
print(" ".join(str(pid) for pid in pool._processes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=root, timeout=120)
    workers = [int(pid) for pid in done.stdout.split()]
    assert len(workers) == 2, done.stderr

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as handle:  # a zombie awaits only its reaper
            return handle.read().split(")")[1].split()[0] != "Z"

    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)
