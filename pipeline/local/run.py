"""Running the whole DAG on this machine with ``kfp.local.SubprocessRunner``, on the demo digits or a user folder."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from components.artifacts.evaluation import REPORT_FILE, Evaluation
from components.artifacts.exported import Exported
from components.artifacts.records import EXPORT, METRICS
from components.artifacts.served import served_figure
from pipeline.images import DEFAULT_IMAGES, PIPELINE_IMAGE, Images, load_yaml, mappings
from pipeline.local.config import SUMMARY_FILE, LocalRunConfig
from pipeline.local.docker import check_docker, docker_runner
from pipeline.local.identity import run_identity
from pipeline.local.progress import RUN_LOG, quiet, steps_environment
from pipeline.local.summary import TRAINING_FACTS, epochs_done, registry_outcome, step_outcome, training_run

log = logging.getLogger(__name__)


# the placeholders KFP's backend driver resolves in a task's constant inputs before computing its cache key
# (kubeflow/pipelines backend/src/v2/driver/resolve.go); kfp.local computes the key on the unresolved text
RUN_PLACEHOLDERS = ("{{$.pipeline_job_uuid}}", "{{$.pipeline_job_name}}", "{{$.pipeline_job_resource_name}}")


def local_pipeline_spec(
    registry: bool,
    cache: bool,
    run_name: str,
    run_id: str,
    images: Images = DEFAULT_IMAGES,
    train_image: str = PIPELINE_IMAGE,
) -> dict:
    """The DAG compiled as for Vertex AI, then prepared as the orchestrator would: with ``cache``, every task's cache
    turned on (``cache_every_task``); the run's name and id put into the constant inputs that name them (as KFP's
    driver does), so that they change every run's cache keys."""
    import tempfile

    from kfp import compiler

    from pipeline.dag import build_pipeline

    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "pipeline.yaml")
        pipeline = build_pipeline(images, registry="folder" if registry else None, train_image=train_image)
        compiler.Compiler().compile(pipeline, path)
        with open(path, encoding="utf-8") as handle:
            spec = load_yaml(handle)
    if cache:
        cache_every_task(spec)
    values = dict(zip(RUN_PLACEHOLDERS, (run_id, run_name, run_name), strict=True))

    for node in mappings(spec):
        constant = node.get("runtimeValue", {}).get("constant")
        if isinstance(constant, str) and constant in values:
            node["runtimeValue"]["constant"] = values[constant]
    return spec


def cache_every_task(spec: dict) -> None:
    """Every task's cache on, as Vertex AI's ``PipelineJob(enable_caching=True)`` rewrites a spec before it submits
    it (aiplatform's ``pipeline_jobs._set_enable_caching_value``: ``tests/pipeline/test_compile.py`` holds the two
    equal), without importing aiplatform, which takes seconds."""
    for component in (spec["root"], *spec["components"].values()):
        for task in component.get("dag", {}).get("tasks", {}).values():
            task["cachingOptions"] = {"enableCache": True}


@dataclass
class LocalRun:
    """A run-local run under way: where it writes, what it runs, and the resume state it goes on from."""

    work_dir: str
    source: str
    registry: str
    parameters: dict
    pipeline_root: str
    state: Any
    previous: Any
    spec: dict
    checkpoints: str
    failures: str
    environment: dict
    summary_path: str
    earlier_runs: set


def run_local(config: LocalRunConfig) -> dict:
    """Runs the DAG under ``kfp.local`` and writes ``<work_dir>/summary.json``; returns the summary.

    Raises:
        StepFailedError: a step failed (the summary says so).
        Interrupted: Ctrl-C or SIGTERM stopped the run (the summary and ``run-state.json`` say so; the same call
            resumes it).
    """
    import pipeline.local.resume as resume
    from components.step_server import step_server
    from components.storage import write_json

    started = time.monotonic()
    # (started first: it imports TensorFlow while the run sets up, converts and checks the data)
    warm_steps = None
    if config.runner == "subprocess":
        warm_steps = step_server(steps_environment(config.verbose), os.path.abspath(config.work_dir))
    with warm_steps or contextlib.nullcontext({}) as warm:
        run = start_run(config)
        run.environment.update(warm)
        outputs = run_steps(run, config.verbose)
    resume.finished(run.work_dir, run.state, killed_attempts(run))
    summary = {**succeeded_summary(run, outputs), "wall_seconds": round(time.monotonic() - started, 1)}
    if config.screenshot and summary["report_html"]:  # evaluate's report, in its artifact (the export's is sealed)
        from components.browser import draw_report

        summary["report_screenshot"] = draw_report(os.path.join(os.path.dirname(summary["metrics_json"]), REPORT_FILE))
    write_json(run.summary_path, summary)
    return summary


def start_run(config: LocalRunConfig) -> LocalRun:
    """Checks the work dir (and Docker), settles which run this is (a new one, or the interrupted one it resumes),
    and sets kfp.local up for it."""
    from kfp import local

    import pipeline.local.resume as resume
    from components.storage import check_writable
    from pipeline.dag import PIPELINE_NAME

    work_dir = os.path.abspath(config.work_dir)
    check_writable(work_dir, "--work-dir")
    train_image = PIPELINE_IMAGE
    if config.runner == "docker":
        from pipeline.accelerators import machine_spec

        train_image = machine_spec(config.accelerator).image
        check_docker(config.images, train_image)
    resume.check_free(work_dir)  # (before the source is read and the model checked)
    identity = run_identity(config)
    source, registry, parameters = identity.source, identity.registry, identity.parameters
    pipeline_root = os.path.join(work_dir, "artifacts")
    workspace = os.path.join(work_dir, "workspace")
    os.makedirs(workspace, exist_ok=True)
    os.makedirs(pipeline_root, exist_ok=True)
    state, previous = resume.begin(
        work_dir, identity.key, f"{PIPELINE_NAME}-{time.strftime('%Y%m%d%H%M%S')}", config.resume
    )
    kept = resume.resume_dir(work_dir, state)
    spec = local_pipeline_spec(bool(registry), config.cache, state.run_name, state.run_id, config.images, train_image)
    checkpoints = os.path.join(kept, "checkpoints")  # as a Vertex AI custom job's: training resumes from it
    failures = os.path.join(work_dir, ".step-failures.jsonl")
    environment = {"AIP_CHECKPOINT_DIR": checkpoints}
    if config.runner == "docker":
        from components.cli import STEP_FAILURE_ENV

        if registry:  # (bound into the steps' containers, so it must exist: a new registry is made by its first
            # version otherwise)
            os.makedirs(registry, exist_ok=True)
        shared = [work_dir, registry, *(p for p in (source, parameters.get("baseline_model", "")) if "://" not in p)]
        runner = docker_runner(shared, {**environment, STEP_FAILURE_ENV: failures})
    else:
        runner = local.SubprocessRunner(use_venv=False)
    # the cache is always on: without --cache it is the run's own (empty at its start), which a resumed run's
    # finished steps hit
    local.init(
        runner=runner,
        pipeline_root=pipeline_root,
        workspace_root=workspace,
        enable_caching=True,
        cache_root=os.path.join(work_dir, "cache") if config.cache else os.path.join(kept, "cache"),
    )
    log.info("running %s under kfp.local (%s) with %s", PIPELINE_NAME, type(runner).__name__, parameters)
    summary_path = os.path.join(work_dir, SUMMARY_FILE)
    if os.path.exists(summary_path):  # never left looking current after a failure
        os.remove(summary_path)
    return LocalRun(
        work_dir,
        source,
        registry,
        parameters,
        pipeline_root,
        state,
        previous,
        spec,
        checkpoints,
        failures,
        environment,
        summary_path,
        set(os.listdir(pipeline_root)),
    )


def run_steps(run: LocalRun, verbose: bool) -> dict:
    """The DAG's outputs; a failed step or an interruption is written to the summary (and, interrupted, to the
    resume state) before it is raised."""
    import pipeline.local.resume as resume
    from components.cli import Interrupted, StepFailedError
    from components.storage import write_json
    from pipeline.dag import PIPELINE_NAME

    facts = {"pipeline": PIPELINE_NAME, "run_id": run.state.run_id}
    progress = None

    def summarize(status: str, resumable: bool, **found) -> None:  # what the summary says of a run that stopped
        resume_it = {"resume": "run the same command again"} if resumable else {}
        said = {**facts, "status": status, **found, "source": run.source, "parameters": run.parameters}
        write_json(run.summary_path, {**said, **resume_it})

    def attempt_dirs() -> list[str]:  # this attempt's kfp.local run folders
        return [
            os.path.join(run.pipeline_root, name)
            for name in sorted(set(os.listdir(run.pipeline_root)) - run.earlier_runs)
        ]

    def note(running: list[str]) -> None:  # what a killed attempt leaves for the next one to read
        run.state = resume.progressed(
            run.work_dir, run.state, running[-1] if running else run.state.step, attempt_dirs()
        )

    try:
        with (
            quiet(os.path.join(run.work_dir, RUN_LOG), verbose, run.previous is not None, note) as progress,
            resume.steps_stop_on_interrupt(),
        ):
            return run_dag(run.spec, run.parameters, run.failures, run.environment)
    except StepFailedError as err:
        step = getattr(err, "died", "")
        if not step:  # the step's own reason (a mistake, bad data): the same command would fail again
            resume.finished(run.work_dir, run.state, killed_attempts(run))
            summarize("failed", False, error=str(err))
            raise
        # a step killed without a word (out of memory, a lost machine): the same command goes on from there, its
        # finished steps reused and training from its last backed-up epoch, as after an interruption
        run.state = resume.interrupted(run.work_dir, run.state, step, attempt_dirs(), failed=True)
        summarize("failed", True, step=step, error=str(err))
        raise StepFailedError(
            f"{err}: run the same command again to resume it from there, or add --no-resume to start over"
        ) from None
    except KeyboardInterrupt:
        step = progress.running[-1] if progress and progress.running else ""
        run.state = resume.interrupted(run.work_dir, run.state, step, attempt_dirs())
        where = f" during {step}" + epochs_done(run.checkpoints, run.parameters, run.spec) if step else ""
        summarize("interrupted", True, step=step)
        raise Interrupted(
            f"interrupted{where}: run the same command again to resume it, or add --no-resume to start over"
        ) from None


def killed_attempts(run: LocalRun) -> list[str]:
    """The kfp.local run folders of the run's earlier, killed attempts (not this one's)."""
    return [folder for folder in run.state.artifact_dirs if os.path.basename(folder) in run.earlier_runs]


def succeeded_summary(run: LocalRun, outputs: dict) -> dict:
    """The summary of a run that finished: what each step made, the verdict, the formats, the registry."""
    from components.artifacts.model import load_model_config
    from components.schema import read_stats
    from pipeline.dag import PIPELINE_NAME

    this_run = sorted(set(os.listdir(run.pipeline_root)) - run.earlier_runs)
    run_dir = os.path.join(run.pipeline_root, this_run[-1]) if this_run else ""
    examples_dir = outputs["examples"].path
    stats = read_stats(examples_dir)
    metrics_json = METRICS.path(outputs["evaluation"].path)
    metrics = Evaluation.read(outputs["evaluation"].path)
    exported_dir = outputs["exported_model_uri"]  # empty: not blessed, so not exported
    export_json = EXPORT.path(exported_dir) if exported_dir else None
    exported = Exported.read(exported_dir) if exported_dir else None
    model_config = load_model_config(outputs["model"].path)
    checks_dir = outputs["data_checks"].path
    produced = {
        "convert": examples_dir,
        "check data": checks_dir,
        "train": outputs["model"].path,
        "evaluate": outputs["evaluation"].path,
    }
    if exported_dir:
        produced["export"] = exported_dir
    previous = run.previous
    summary = {
        "pipeline": PIPELINE_NAME,
        "run_id": run.state.run_id,
        "status": "succeeded",
        "resumed": {"attempt": run.state.attempts, "interrupted_during": previous.step, "started": previous.started}
        if previous
        else None,
        "source": run.source,
        "parameters": run.parameters,
        "counts": stats.counts,
        "class_names": stats.class_names,
        "quarantined": stats.quarantined,
        "small_classes": stats.small_classes,
        "image_size": stats.image_size,
        "image_size_auto": stats.image_size_auto,
        "fingerprint": stats.fingerprint,
        "steps": {step: step_outcome(path, run_dir, run.state.artifact_dirs) for step, path in produced.items()},
        "data_checks": data_checks_outcome(checks_dir),
        "test_accuracy": outputs["test_accuracy"],
        "blessed": outputs["blessed"],
        "reasons": metrics.blessing["reasons"],
        "baseline": (outputs["baseline"] if run.registry else run.parameters.get("baseline_model")) or None,
        # the export's report leads with the served model's figure; evaluate's, with nothing exported
        "report_html": (exported.report_html if exported else None) or metrics.report_html,
        "export_agreement": exported.parity["argmax_agreement"] if exported else None,
        "raw_files": exported.raw_files if exported else None,
        "raw_texts": exported.raw_texts if exported else None,
        "training": {
            **{name: getattr(model_config, name) for name in TRAINING_FACTS},
            **training_run(outputs["model"].path, model_config, run.spec, run.parameters),
        },
        "backend_parity": exported.backend_parity if exported else None,
        "examples_dir": examples_dir,
        "model_dir": outputs["model"].path,
        "metrics_json": metrics_json,
        "saved_model_dir": exported.saved_model["path"] if exported else None,
        "formats": {
            name: {"path": entry["path"], "bytes": entry["bytes"], "test_accuracy": entry["test_accuracy"]}
            for name, entry in (exported.formats if exported else {}).items()
        },
        "export_json": export_json,
        "registry": registry_outcome(run.registry, outputs),
        "pipeline_root": run.pipeline_root,
    }
    summary["served"] = served_figure(summary)
    return summary


def data_checks_outcome(checks_dir: str) -> dict:
    """The check-data step's outcome, from its ``data_checks.json``: the warnings, the blocking reasons accepted
    (``--accept-data-change``), the baseline's note and where the file is."""
    from components.artifacts.data_statistics import read_checks, test_copies
    from components.artifacts.records import CHECKS

    found = read_checks(checks_dir)
    return {
        "test_copies": test_copies(found.checks),
        "checks": len(found.checks),
        "skipped": sum(check["verdict"] == "skipped" for check in found.checks),
        "warnings": found.warnings,
        "accepted": found.blocking if found.accepted_data_change else [],
        "note": found.baseline_note,
        "path": CHECKS.path(checks_dir),
    }


def run_dag(spec: dict, parameters: dict, failures: str, environment: dict[str, str]):
    """Runs the compiled DAG under kfp.local, the steps (subprocesses) seeing ``environment`` too; returns its
    outputs. A failed step raises ``StepFailedError`` with the step's name and its own one-line error (which the step
    leaves in ``failures``), not kfp.local's traceback."""
    import json

    import yaml
    from kfp import components

    from components.cli import STEP_FAILURE_ENV, StepFailedError

    os.makedirs(os.path.dirname(failures), exist_ok=True)
    if os.path.exists(failures):
        os.remove(failures)
    environment = {**environment, STEP_FAILURE_ENV: failures}  # the steps are subprocesses: they inherit it
    previous = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        return components.load_component_from_text(yaml.safe_dump(spec))(**parameters).outputs
    except RuntimeError as err:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
        failed = re.search(r"Inner task failed: '([^']+)'", text)
        if failed is None:
            raise
        records = []
        if os.path.exists(failures):
            with open(failures, encoding="utf-8") as handle:
                records = [json.loads(line) for line in handle if line.strip()]
        last = (
            records[-1]
            if records
            else {"error": f"see its log in {os.path.dirname(failures)}/{RUN_LOG}", "usage": False}
        )
        error = StepFailedError(f"step {failed.group(1)} failed: {last['error']}", usage=last["usage"])
        error.died = "" if records else failed.group(1)  # killed or crashed without a word: which step
        raise error from None
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
