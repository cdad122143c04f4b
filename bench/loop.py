"""The iteration loop: what ``make run``'s DAG costs step by step, beside the same work in one process.

Three figures a step, in one run on this machine:
1. **In the DAG**: ``python -m pipeline run-local`` on the demo digits (``make run``), each step's time as run-local
   prints it: a fresh Python a step (kfp.local's SubprocessRunner), its imports, its work and what it writes.
2. **The step in one process**: each step's own command (``python -m components.<step>``'s ``main``) called in
   this one Python on the DAG run's inputs, TensorFlow imported once before: the step's work without a process and
   its imports.
3. **Bare Keras**: the work itself, as a user would write it, in the same process: ``model.fit`` of the same model
   on the same examples (epochs, batch, learning rate and the weights' moving average of the DAG run), one
   ``model.evaluate`` on the test split, one SavedModel (``model.export``) and one float TFLite conversion of it. The
   fingerprint, the conversion and the data checks have no bare counterpart.

The DAG run has ``--cache`` on (its cache starts empty: the same work as ``make run``). Then comes the iteration
loop: a second run-local in the same work dir with another seed (a hyperparameter changed) and ``--formats
saved_model``, whose conversion and data checks are cache hits.

It prints a table and the ratios (the DAG to the steps in one process, and to bare Keras), the export of the
SavedModel alone, the iteration's time, then the cost of a fresh Python that imports TensorFlow and Keras. The last
line is a JSON object.

    .venv/bin/python bench/loop.py [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

STEPS = ("fingerprint", "convert", "check-data", "train", "evaluate", "export")
STEP_TIME = re.compile(r"^  ([a-z -]+): success \(([\d.]+)s\)$")


def cpu_name() -> str:
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def dag_run(work_dir: str, *flags: str) -> tuple[dict, dict, float]:
    """(each step's seconds, the summary, the whole run's seconds) of run-local on the demo digits, with ``flags``."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run-local", "--work-dir", work_dir, "--cache", *flags],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"run-local failed: {result.stderr.strip().splitlines()[-3:]}")
    seconds = {m.group(1): float(m.group(2)) for line in result.stdout.splitlines() if (m := STEP_TIME.match(line))}
    with open(os.path.join(work_dir, "summary.json")) as handle:
        return seconds, json.load(handle), took


def timed(call) -> float:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # (each step prints its JSON line)
        code = call()
    if code:
        raise SystemExit(f"{call} exited {code}")
    return time.perf_counter() - started


def steps_in_process(summary: dict, scratch: str) -> dict:
    """Each step's own command, called in this process on the DAG run's source and outputs."""
    from components.check_data.__main__ import main as check_data
    from components.convert.__main__ import main as convert
    from components.convert.fingerprint import main as fingerprint
    from components.evaluate.__main__ import main as evaluate
    from components.export.__main__ import main as export
    from components.train.__main__ import main as train

    examples, model = os.path.join(scratch, "examples"), os.path.join(scratch, "model")
    size = str(summary["image_size"])
    saved_model_alone = ["--model-dir", model, "--examples", examples, "--output", os.path.join(scratch, "xs")]
    saved_model_alone += ["--formats", "saved_model"]
    return {
        "fingerprint": timed(lambda: fingerprint(["--source", summary["source"]])),
        "convert": timed(lambda: convert(["--source", summary["source"], "--output", examples, "--image-size", size])),
        "check-data": timed(lambda: check_data(["--examples", examples, "--output", os.path.join(scratch, "checks")])),
        "train": timed(lambda: train(["--examples", examples, "--model-dir", model, *same_training(summary)])),
        "evaluate": timed(
            lambda: evaluate(["--examples", examples, "--model-dir", model, "--output", os.path.join(scratch, "e")])
        ),
        "export": timed(
            lambda: export(["--model-dir", model, "--examples", examples, "--output", os.path.join(scratch, "x")])
        ),
        "export-saved-model": timed(lambda: export(saved_model_alone)),
    }


def same_training(summary: dict) -> list[str]:
    """The train step's flags for what the DAG run trained: its model, epochs, batch, rate, backend and precision."""
    from components.artifacts.records import MODEL_CONFIG

    config = MODEL_CONFIG.read(summary["model_dir"])
    return [
        *("--model", config["model_name"], "--epochs", str(config["epochs"])),
        *("--batch-size", str(config["per_replica_batch_size"]), "--learning-rate", str(config["learning_rate"])),
        *("--backend", config["backend"], "--precision", config["precision"]),
    ]


def bare_keras(summary: dict, scratch: str) -> dict:
    """The work itself in Keras, on the DAG run's examples, with its model and settings."""
    import keras
    import tensorflow as tf

    from components.artifacts.examples import make_dataset
    from components.artifacts.records import MODEL_CONFIG
    from components.modalities import reading_of
    from components.models import ModelSpec, build_model
    from components.train.averaging import averaging_momentum
    from components.train.inputs import without_autotuning

    config = MODEL_CONFIG.read(summary["model_dir"])
    reading, batch = reading_of(config), config["per_replica_batch_size"]
    model = build_model(config["model_name"], ModelSpec.for_images(config["image_size"], config["num_classes"]))
    steps = summary["counts"]["train"] // batch  # (the training split repeats: an epoch is one pass)
    # the same settings as the train step's: Adam keeping the weights' moving average over the run's steps
    adam = keras.optimizers.Adam(
        config["learning_rate"], use_ema=True, ema_momentum=averaging_momentum(steps * config["epochs"])
    )
    model.compile(optimizer=adam, loss="categorical_crossentropy", metrics=["accuracy"])
    # (without tf.data's autotuning, as the train step reads them on a CPU: with it, fit's end waits out the tuner's
    # period now and then, 9 to 18 s here)
    train = without_autotuning(make_dataset(summary["examples_dir"], "train", reading, batch, training=True))
    validation = without_autotuning(make_dataset(summary["examples_dir"], "validation", reading, batch, training=False))
    test = make_dataset(summary["examples_dir"], "test", reading, batch, training=False)
    seconds = {}
    started = time.perf_counter()
    model.fit(train, validation_data=validation, epochs=config["epochs"], steps_per_epoch=steps, verbose=0)
    seconds["train"] = time.perf_counter() - started
    started = time.perf_counter()
    model.evaluate(test, verbose=0)
    seconds["evaluate"] = time.perf_counter() - started
    started = time.perf_counter()
    saved = os.path.join(scratch, "bare_saved_model")
    model.export(saved, format="tf_saved_model", verbose=False)
    tf.lite.TFLiteConverter.from_saved_model(saved).convert()
    seconds["export"] = time.perf_counter() - started
    return seconds


def fresh_python_import() -> float:
    """Seconds a fresh Python takes to import TensorFlow and Keras as a step does (``components`` first): what each
    TensorFlow step pays before its work."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import components, tensorflow, keras"], cwd=REPO_ROOT, check=True, capture_output=True
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default="", help="run-local's work dir (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as scratch:
        work_dir = args.work_dir or os.path.join(scratch, "run")
        dag, summary, whole = dag_run(work_dir)
        from components.params import TRAIN

        seed = str(summary["parameters"].get("seed", TRAIN["seed"].default) + 1)
        again, iterated, iteration = dag_run(work_dir, "--seed", seed, "--formats", "saved_model")
        importing = fresh_python_import()
        import tensorflow  # noqa: F401  (once, before the steps in this process: what a long-lived worker pays once)

        steps = steps_in_process(summary, os.path.join(scratch, "steps"))
        bare = bare_keras(summary, scratch)
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; make run's DAG on the demo digits ({summary['image_size']} px)")
    print(f"{'step':<11} {'in the DAG':>11} {'one process':>12} {'bare Keras':>11}")
    for step in STEPS:
        bare_text = f"{bare[step]:10.1f}s" if step in bare else f"{'-':>11}"
        print(f"{step:<11} {dag.get(step, 0.0):10.1f}s {steps[step]:11.1f}s {bare_text}")
    totals = {"dag": sum(dag.get(step, 0.0) for step in STEPS), "steps": sum(steps[step] for step in STEPS)}
    totals["bare"] = sum(bare.values())
    print(f"{'total':<11} {totals['dag']:10.1f}s {totals['steps']:11.1f}s {totals['bare']:10.1f}s")
    print(f"the whole run-local: {whole:.1f}s; a fresh Python importing TensorFlow and Keras: {importing:.1f}s")
    print(f"DAG / steps in one process: {totals['dag'] / totals['steps']:.2f}x")
    trained = ("train", "evaluate", "export")
    ratio = sum(dag[step] for step in trained) / totals["bare"]
    print(f"DAG / bare Keras (train, evaluate, export): {ratio:.2f}x")
    alone = steps["export-saved-model"]
    print(f"export with --formats saved_model, one process: {alone:.1f}s ({alone / steps['export']:.2f}x the full one)")
    reused = ", ".join(f"{step} {how}" for step, how in iterated["steps"].items())
    print(f"the iteration (--seed {seed} --formats saved_model, --cache): {iteration:.1f}s ({reused})")
    print(
        json.dumps(
            {
                "cpu": cpu_name(),
                "dag_seconds": dag,
                "steps_in_one_process_seconds": {k: round(v, 2) for k, v in steps.items()},
                "bare_keras_seconds": {k: round(v, 2) for k, v in bare.items()},
                "run_local_seconds": round(whole, 1),
                "iteration_seconds": round(iteration, 1),
                "iteration_dag_seconds": again,
                "iteration_steps": iterated["steps"],
                "fresh_python_tensorflow_import_seconds": round(importing, 2),
                "dag_to_steps": round(totals["dag"] / totals["steps"], 2),
                "dag_to_bare_keras": round(ratio, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
