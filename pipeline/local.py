"""Running the whole DAG on this machine with ``kfp.local.SubprocessRunner``, on the demo digits or a user folder."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

DEFAULT_WORK_DIR = os.path.join("runs", "local")
SUMMARY_FILE = "summary.json"
# the digits are 8x8 scans: 32 pixels keeps every stroke while training in seconds on a laptop
DEMO_IMAGE_SIZE = 32
DEMO_EPOCHS = 15


@dataclass(frozen=True)
class LocalRunConfig:
    """A local run of the DAG.

    Args:
        work_dir: holds ``data/`` (the demo images), ``artifacts/`` (every step's outputs) and ``summary.json``.
        source: an image folder; empty runs the demo (scikit-learn's digits written as JPEGs under ``work_dir``).
        image_size: 0 picks 32 for the demo and 192 (the codelab's size) for a user's folder.
        epochs: 0 picks 15 for the demo and the pipeline's default otherwise.
        demo_per_class: write at most this many demo images per class (0: all 1,797); for quick checks.
        beam_args: Beam pipeline options for the convert step.
        parameters: any other pipeline parameters (``model_name``, ``per_replica_batch_size``, ...).
        cache: reuse the outputs of steps whose inputs did not change (``<work_dir>/cache``); the source's
            fingerprint is one of convert's inputs, so new or changed images always convert again.
    """

    work_dir: str = DEFAULT_WORK_DIR
    source: str = ""
    image_size: int = 0
    epochs: int = 0
    demo_per_class: int = 0
    beam_args: tuple[str, ...] = ()
    parameters: dict = field(default_factory=dict)
    cache: bool = False


def run_local(config: LocalRunConfig) -> dict:
    """Runs the DAG under ``kfp.local`` and writes ``<work_dir>/summary.json``; returns the summary."""
    from kfp import local

    from components.artifacts.model import load_model_config
    from components.schema import read_stats
    from components.storage import read_json, write_json
    from pipeline.dag import PIPELINE_NAME, build_pipeline

    started = time.monotonic()
    work_dir = os.path.abspath(config.work_dir)
    demo = not config.source
    source = resolve_source(config)
    parameters = {
        "source": source,
        "image_size": config.image_size or (DEMO_IMAGE_SIZE if demo else 192),
        **({"epochs": config.epochs or DEMO_EPOCHS} if demo or config.epochs else {}),
        **({"beam_args": list(config.beam_args)} if config.beam_args else {}),
        **config.parameters,
    }
    pipeline_root = os.path.join(work_dir, "artifacts")
    workspace = os.path.join(work_dir, "workspace")
    os.makedirs(workspace, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=pipeline_root,
        workspace_root=workspace,
        enable_caching=config.cache,
        cache_root=os.path.join(work_dir, "cache"),
    )
    log.info("running %s under kfp.local (SubprocessRunner) with %s", PIPELINE_NAME, parameters)
    # the Model Registry steps need Vertex AI: a local run has the rest of the DAG, the blessing gate included
    run = build_pipeline(registry=False)(**parameters)
    outputs = run.outputs
    examples_dir = outputs["examples"].path
    stats = read_stats(examples_dir)
    metrics_json = os.path.join(outputs["evaluation"].path, "metrics.json")
    metrics = read_json(metrics_json)
    blessing = metrics.get("blessing", {})
    exported_dir = outputs["exported_model_uri"]  # empty: not blessed, so not exported
    export_json = os.path.join(exported_dir, "export.json") if exported_dir else None
    export_report = read_json(export_json) if export_json else {}
    model_config = load_model_config(outputs["model"].path)
    summary = {
        "pipeline": PIPELINE_NAME,
        "source": source,
        "parameters": parameters,
        "counts": stats["counts"],
        "class_names": stats["class_names"],
        "quarantined": stats["quarantined"],
        "test_accuracy": outputs["test_accuracy"],
        "blessed": outputs["blessed"],
        "reasons": blessing.get("reasons", []),
        "report_html": metrics.get("report_html"),
        "export_agreement": export_report.get("parity", {}).get("argmax_agreement"),
        "training": {
            name: model_config[name]
            for name in ("backend", "backend_reason", "strategy", "replicas", "accelerator", "precision")
        },
        "backend_parity": export_report.get("backend_parity"),
        "examples_dir": examples_dir,
        "model_dir": outputs["model"].path,
        "metrics_json": metrics_json,
        "saved_model_dir": export_report.get("saved_model", {}).get("path"),
        "formats": {
            name: {"path": entry["path"], "bytes": entry["bytes"], "test_accuracy": entry["test_accuracy"]}
            for name, entry in export_report.get("formats", {}).items()
        },
        "export_json": export_json,
        "registry": "skipped: a local run (the cloud DAG uploads a blessed export to the Vertex AI Model Registry)",
        "pipeline_root": pipeline_root,
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    write_json(os.path.join(work_dir, SUMMARY_FILE), summary)
    return summary


def resolve_source(config: LocalRunConfig) -> str:
    """The source the DAG reads: the user's (absolute), checked as the fingerprint step will check it, so that a wrong
    path fails in one line before anything is written; or the demo digits, written under the work dir."""
    from components.convert.core import source_fingerprint
    from components.demo_data import write_digits

    if not config.source:
        source = os.path.join(os.path.abspath(config.work_dir), "data", "digits")
        write_digits(source, per_class_limit=config.demo_per_class or None)
        return source
    source = os.path.abspath(config.source) if "://" not in config.source else config.source
    source_fingerprint(source)
    return source


def export_parity(summary: dict, crossed: dict) -> str:
    """The export's agreement with the trained model, and with the training backend's own predictions."""
    text = f"{summary['export_agreement']:.4f} argmax agreement with the trained model"
    if crossed.get("num_examples"):
        text += (
            f"; {crossed['argmax_agreement']:.4f} with {crossed['trained_backend']}'s own predictions on "
            f"{crossed['num_examples']} validation images (largest probability difference "
            f"{crossed['max_probability_difference']:.1e})"
        )
    return text


def format_summary(summary: dict, summary_path: str) -> str:
    """The readable summary printed at the end of a local run."""
    counts = " / ".join(f"{split} {count}" for split, count in summary["counts"].items())
    exported = summary.get("export_json") is not None
    not_exported = "- (not blessed: nothing exported)"
    training = summary["training"]
    crossed = summary.get("backend_parity") or {}
    rows = [
        ("examples", f"{counts}  ({len(summary['class_names'])} classes, {summary['quarantined']} quarantined)"),
        (
            "training",
            f"{training['backend']}, {training['strategy']} over {training['replicas']} "
            f"{training['accelerator']} device(s), {training['precision']} ({training['backend_reason']})",
        ),
        ("test accuracy", f"{summary['test_accuracy']:.4f}"),
        ("blessed", f"{'yes' if summary.get('blessed') else 'NO'}: {'; '.join(summary.get('reasons', []))}"),
        ("export parity", export_parity(summary, crossed) if exported else not_exported),
        ("TFRecords", summary["examples_dir"]),
        ("SavedModel", summary["saved_model_dir"] or not_exported),
        *(
            (name, f"{entry['bytes'] / 1e6:.2f} MB, test accuracy {entry['test_accuracy']:.4f}  {entry['path']}")
            for name, entry in summary.get("formats", {}).items()
            if name != "saved_model"
        ),
        ("registry", "skipped (local run)"),
        ("metrics", summary["metrics_json"]),
        ("report", summary.get("report_html") or "-"),
        ("summary", summary_path),
    ]
    width = max(len(name) for name, _ in rows)
    steps = "convert -> train -> evaluate -> " + ("export" if exported else "not blessed, so no export")
    lines = [f"{summary['pipeline']}: {steps}: finished in {summary['wall_seconds']}s"]
    lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines)
