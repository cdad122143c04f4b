"""What run-local reports when the DAG is done: the facts of each step's outcome, and the summary printed on the
terminal (``summary.json`` holds the same)."""

from __future__ import annotations

import logging
import os

from components.artifacts.model import ModelConfig
from components.artifacts.served import served_lines

log = logging.getLogger(__name__)

# what the train step recorded in model_config.json that the summary repeats
TRAINING_FACTS = (
    "model_name",
    "model",
    "hparams",
    "backend",
    "backend_reason",
    "strategy",
    "replicas",
    "accelerator",
    "precision",
    "per_replica_batch_size",
    "global_batch_size",
    "weights",
    "head_epochs",
    "fine_tune",
)


def training_run(model_dir: str, model_config: ModelConfig, spec: dict, parameters: dict) -> dict:
    """The epochs, learning rate and schedule the run used (as the train step recorded them in ``model_config``:
    given, or what auto resolved to), and where training ended: the final epoch's validation accuracy; after how many
    epochs it resumed from a checkpoint (0: it did not). The validation accuracy is the saved model's (its batch-norm
    statistics re-estimated), where the curves scored another."""
    from components.artifacts.model import History, Tuning

    used = {name: parameter_used(name, spec, parameters) for name in ("epochs", "learning_rate", "lr_schedule")}
    recorded_values = {name: getattr(model_config, name) for name in ("epochs", "learning_rate")}
    used.update({name: value for name, value in recorded_values.items() if value})
    used["epochs"] = int(used["epochs"])
    recorded = History.read_if_any(model_dir) or History({}, 0, 0.0)
    accuracies = recorded.history.get("val_accuracy") or [None]
    kept = recorded.kept_index  # the epoch whose weights the model has (the best), else the last
    tuning = Tuning.read_if_any(model_dir)
    if tuning:  # a search: the kept trial's values are the run's
        used.update({name: value for name, value in tuning.best["parameters"].items() if name in used})
    return {
        **used,
        "final_validation_accuracy": (recorded.saved_model_validation or {}).get(
            "val_accuracy", accuracies[-1 if kept is None else kept]
        ),
        "kept_epoch": recorded.kept_epoch,
        "epochs_run": len(accuracies) if accuracies != [None] else None,
        "stopped_after_epoch": recorded.stopped_after_epoch,
        "resumed_after_epoch": recorded.resumed_after_epoch,
        "tuning": tuning.to_dict() if tuning else None,
    }


def parameter_used(name: str, spec: dict, parameters: dict):
    """A pipeline parameter's value in this run: as given, or the DAG's default."""
    return parameters.get(name, spec["root"]["inputDefinitions"]["parameters"][name].get("defaultValue"))


def step_outcome(path: str, run_dir: str, interrupted_dirs: tuple[str, ...]) -> str:
    """How a step's output came to be: ``ran`` in this run, ``reused`` from the attempt that was interrupted, or
    ``cached`` from an earlier run."""
    if run_dir and path.startswith(run_dir + os.sep):
        return "ran"
    return "reused" if any(path.startswith(folder + os.sep) for folder in interrupted_dirs) else "cached"


def epochs_done(checkpoints: str, parameters: dict, spec: dict) -> str:
    """ " (after epoch N of M)" when training was interrupted with N epochs finished, and where the same command
    resumes when its last backup is older (backups are taken every --backup-interval); else ""."""
    from components.artifacts.checkpoints import HEAD_WEIGHTS, epochs_kept, epochs_logged
    from components.params import AUTO_TRAINING

    backed_up = epochs_kept(checkpoints)  # (a backbone's fine-tuning counts on from its head's epochs)
    total = int(parameter_used("epochs", spec, parameters))  # 0: auto, which the train step resolves
    if os.path.exists(os.path.join(checkpoints, HEAD_WEIGHTS)):  # a backbone's head kept: fine-tuning goes on from it
        backed_up = max(backed_up, total or AUTO_TRAINING["text model or pretrained head"]["epochs"])
    done = max(epochs_logged(checkpoints), backed_up)
    if total and done > total:
        total += int(parameter_used("fine_tune_epochs", spec, parameters))
    if not done:
        return ""
    said = f"after epoch {done} of {total}" if total else f"after epoch {done}"
    if backed_up < done:
        said += (
            f"; it resumes after epoch {backed_up}, its last backup"
            if backed_up
            else "; no backup yet: training starts over"
        )
    return f" ({said})"


def registry_outcome(registry: str, outputs) -> dict:
    """What became of the model in the registry: registered as a version, or skipped and why."""
    import json

    if not registry:
        return {"action": "skipped", "reason": "a local run without --registry (the cloud DAG registers on Vertex AI)"}
    decided = outputs["registration"]
    if not decided:
        return {"action": "skipped", "reason": "not blessed", "registry": registry}
    return {**json.loads(decided), "registry": registry}


def export_parity(summary: dict, crossed: dict) -> str:
    """The export's agreement with the trained model, and with the training backend's own predictions."""
    text = f"{summary['export_agreement']:.4f} argmax agreement with the trained model"
    if crossed.get("num_examples"):
        text += (
            f"; {crossed['argmax_agreement']:.4f} with {crossed['trained_backend']}'s own predictions on "
            f"{crossed['num_examples']} validation examples (largest probability difference "
            f"{crossed['max_probability_difference']:.1e})"
        )
    return text


def registry_line(outcome: dict) -> str:
    if outcome["action"] == "registered":
        return f"version {outcome['version']} is the default  {outcome['uri']}"
    if "registry" not in outcome:
        return "skipped (local run; --registry DIR keeps each blessed export as a version)"
    return f"unchanged: {outcome['reason']}  ({outcome['registry']})"


def model_line(training: dict) -> str:
    """What was trained and how: the model (its code's digest and its hyperparameters), epochs, learning rate,
    batch, and where validation ended."""
    from components.models.source import described

    line = (
        f"{described(training.get('model_name'), training.get('model'), training.get('hparams'))}, "
        f"{training.get('epochs')} epochs, learning rate {training.get('learning_rate')} "
        f"({training.get('lr_schedule')}), batch {training.get('global_batch_size')}"
    )
    if training.get("weights") not in (None, "none"):  # a pretrained backbone: its weights, then its two phases
        tuned = training.get("fine_tune")
        phases = f"{training.get('head_epochs')} epochs of its head" + (
            f" then {tuned['epochs']} fine-tuning its top {tuned['blocks']} blocks" if tuned else ""
        )
        line = line.replace(f", {training.get('epochs')} epochs,", f" from {training['weights']} weights, {phases},", 1)
    final = training.get("final_validation_accuracy")
    kept, stopped = training.get("kept_epoch"), training.get("stopped_after_epoch")
    if stopped:
        line += f", stopped after epoch {stopped}"
    if final is not None and kept:
        line += f", kept epoch {kept} (the best validation loss): validation accuracy {final:.4f}"
    elif final is not None:
        line += f", final validation accuracy {final:.4f}"
    resumed = training.get("resumed_after_epoch")
    return f"{line} (resumed after epoch {resumed})" if resumed else line


def screenshot_line(drawn: dict | None) -> str:
    if not drawn:
        return "the browser could not draw the report (see the log)"
    blank = ", BLANK" if drawn["blank"] else ""
    return f"{drawn['path']} ({drawn['loaded']} of {drawn['images']} pictures loaded{blank})"


def image_size_line(summary: dict) -> str:
    size = summary["image_size"]
    return f"{size}x{size}" + (f" (auto: {summary['image_size_auto']})" if summary.get("image_size_auto") else "")


def served_rows(summary: dict) -> list[tuple[str, str]]:
    """The test accuracy's lines: the served model's figure, the near-copies that may flatter it, and the other
    figures only where they differ from it by more than the test split's noise."""
    first, *others = served_lines(summary)
    return [("test accuracy", first), *(("", line) for line in others)]


def data_check_rows(checks: dict | None) -> list[tuple[str, str]]:
    """The data checks' lines: passed, or each warning (and each blocking reason accepted) on a line of its own."""
    if not checks:
        return []
    found = [f"accepted: {reason}" for reason in checks["accepted"]] + [f"warn: {line}" for line in checks["warnings"]]
    plural = "" if checks["checks"] == 1 else "s"
    skipped = checks["skipped"]
    if found:
        head = f"{checks['checks']} check{plural}, {len(found)} to read" + (f", {skipped} skipped" if skipped else "")
    else:
        passed = f": {checks['checks'] - skipped} passed, {skipped} skipped" if skipped else ", all passed"
        head = f"{checks['checks']} check{plural}{passed}"
    head += f" ({checks['note']})" if checks["note"] else ""
    return [("data checks", f"{head}  {checks['path']}"), *(("", line) for line in found)]


def tuning_line(tuning: dict) -> str:
    """The search: its trials' scores, and the values of the one kept."""
    best = tuning["best"]
    scores = ", ".join(f"{trial[tuning['metric']]:.4f}" for trial in tuning["trials"])
    values = " ".join(f"{name} {value}" for name, value in best["parameters"].items())
    return f"{len(tuning['trials'])} trials ({tuning['metric']} {scores}): trial {best['trial']} kept, {values}"


def format_summary(summary: dict, summary_path: str) -> str:
    """The readable summary printed at the end of a local run."""
    from components.artifacts.evaluation import export_anyway

    counts = " / ".join(f"{split} {count}" for split, count in summary["counts"].items())
    exported = summary.get("export_json") is not None
    evaluation_dir = os.path.dirname(summary["metrics_json"])
    anyway = "" if exported else export_anyway(summary["model_dir"], summary["examples_dir"], evaluation_dir)
    not_exported = "- (not blessed: nothing exported)"
    training = summary["training"]
    crossed = summary.get("backend_parity") or {}
    rows = [
        ("examples", f"{counts}  ({len(summary['class_names'])} classes, {summary['quarantined']} quarantined)"),
        *([("image size", image_size_line(summary))] if summary.get("image_size") else []),
        ("model", model_line(training)),
        *([("tuning", tuning_line(training["tuning"]))] if training.get("tuning") else []),
        (
            "training",
            f"{training['backend']}, {training['strategy']} over {training['replicas']} "
            f"{training['accelerator']} device(s), {training['precision']} ({training['backend_reason']})",
        ),
        ("steps", ", ".join(f"{step} {how}" for step, how in summary.get("steps", {}).items())),
        *data_check_rows(summary.get("data_checks")),
        *served_rows(summary),
        ("baseline", summary.get("baseline") or "none"),
        ("blessed", f"{'yes' if summary.get('blessed') else 'NO'}: {'; '.join(summary.get('reasons', []))}"),
        ("export parity", export_parity(summary, crossed) if exported else not_exported),
        ("TFRecords", summary["examples_dir"]),
        ("SavedModel", summary["saved_model_dir"] or not_exported),
        *([] if exported else [("export anyway", anyway)]),
        *(
            (name, f"{entry['bytes'] / 1e6:.2f} MB  {entry['path']}")
            for name, entry in summary.get("formats", {}).items()
            if name != "saved_model"
        ),
        ("registry", registry_line(summary["registry"])),
        ("metrics", summary["metrics_json"]),
        ("report", summary.get("report_html") or "-"),
        *([("screenshot", screenshot_line(summary["report_screenshot"]))] if "report_screenshot" in summary else []),
        ("summary", summary_path),
    ]
    width = max(len(name) for name, _ in rows)
    steps = "convert -> check data -> train -> evaluate -> " + ("export" if exported else "not blessed, so no export")
    lines = [f"{summary['pipeline']}: {steps}: finished in {summary['wall_seconds']}s"]
    lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines)
