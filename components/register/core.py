"""The register step's decisions, free of KFP and of Vertex AI: whether a blessed export is registered (not the
baseline itself again), where versions go when no ``model_root`` is given, what a version records of the code its
model was built from, and the step's one-line answer. The versions' storage is ``components.artifacts.registry``:

- ``run-local --registry DIR`` uses it alone: the default version is the next run's baseline;
- the cloud DAG copies into it (``model_root``) before uploading to the Vertex AI Model Registry, so the version in
  service does not live in a run's pipeline root, where a bucket's lifecycle rule would delete it.

A candidate whose trained weights are the baseline's (a cached train step over unchanged data) is not pushed again,
and one judged against a model that is no longer the default (another run registered meanwhile) is refused.
"""

from __future__ import annotations

import json

from components.artifacts.exported import Exported, export_folder
from components.cli import UsageError

MODELS_FOLDER = "models"  # under the pipeline root's bucket when no model_root is given


def export_record(uri: str) -> Exported | None:
    """The ``export.json`` of an export folder or of its ``saved_model/`` folder (None when there is none, and, with
    a warning, when another version of the pipeline made it or it lacks a field: a baseline's is left aside)."""
    return Exported.read_current(export_folder(uri))


def model_code_record(export_uri: str) -> dict:
    """What a version records of the code its model was built from (from the export's ``export.json``): the model's
    name, its file's sha256 (a model of one's own: the file itself is in the version, beside the export) and its
    hyperparameters."""
    export = export_record(export_uri)
    if export is None:
        return {"model_name": None, "model_sha256": "", "hparams": {}}
    return {"model_name": export.model_name, "model_sha256": export.model["sha256"], "hparams": export.hparams}


def same_as_baseline(candidate_export: str, baseline: str) -> str:
    """Why the candidate must not be registered again ("" when it may): its trained weights are the baseline's."""
    if not baseline:
        return ""
    candidate, served = export_record(candidate_export), export_record(baseline)
    digest = candidate.model_digest if candidate else ""
    if digest and served and digest == served.model_digest:
        return f"the candidate is the baseline itself (the same trained weights, sha256 {digest[:12]})"
    return ""


def default_model_root(export_uri: str, display_name: str) -> str:
    """Where versions go when no ``model_root`` is given: ``gs://<the pipeline root's bucket>/models/<name>``, outside
    the pipeline root's prefix (a lifecycle rule on the runs must then spare ``models/``)."""
    if not export_uri.startswith("gs://"):
        raise UsageError(f"export {export_uri} is not on Cloud Storage: pass model_root, a gs:// folder for the models")
    bucket = export_uri[len("gs://") :].split("/", 1)[0]
    return f"gs://{bucket}/{MODELS_FOLDER}/{display_name}"


def decision(action: str, **fields) -> str:
    """The register step's answer, one JSON line: ``{"action": "registered" | "skipped", ...}``, the action first."""
    return json.dumps({"action": action, **fields})
