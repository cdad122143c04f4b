"""The Vertex AI Model Registry: a blessed export uploaded as a new version of its parent model, served by Vertex
AI's prebuilt TensorFlow CPU container, and labelled with the pipeline run that made it."""

from __future__ import annotations

import re

from components.artifacts.exported import SAVED_MODEL_DIR
from components.cli import UsageError
from pipeline.vertex import VertexSettings, call, check_settings, connect

# Vertex AI's prebuilt TensorFlow 2 CPU prediction image (serves the SavedModel's serving_default signature)
DEFAULT_SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"


def register(
    settings: VertexSettings,
    saved_model_uri: str,
    display_name: str,
    parent_model: str = "",
    pipeline_run: str = "",
    serving_image: str = DEFAULT_SERVING_IMAGE,
) -> dict:
    """Uploads the SavedModel folder at ``saved_model_uri`` (gs://); returns the model's name and version id."""
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    if not saved_model_uri.startswith("gs://"):
        raise UsageError(f"model {saved_model_uri} must be a gs:// folder holding the exported SavedModel")
    labels = dict(settings.labels)
    if pipeline_run:
        labels["pipeline-run"] = re.sub(r"[^a-z0-9_-]", "-", pipeline_run.rsplit("/", 1)[-1].lower())[:63]
    connect(settings)
    model = call(
        "upload the model",
        lambda: aiplatform.Model.upload(
            display_name=display_name,
            artifact_uri=saved_model_uri,
            serving_container_image_uri=serving_image,
            parent_model=parent_model or None,
            is_default_version=True,
            labels=labels or None,
        ),
        settings,
    )
    result = {"name": model.resource_name, "version_id": model.version_id, "labels": labels}
    print(f"registered {result['name']} version {result['version_id']}")
    return result


def find_model(settings: VertexSettings, display_name: str):
    """The registry's model named ``display_name`` (its default version), most recently updated first; None if none."""
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    connect(settings)
    models = call(
        "look up the model",
        lambda: aiplatform.Model.list(filter=f'display_name="{display_name}"', order_by="update_time desc"),
        settings,
    )
    return models[0] if models else None


def baseline_uri(settings: VertexSettings, display_name: str) -> str:
    """The SavedModel folder of the default version of ``display_name``: the last blessed model; "" if none."""
    model = find_model(settings, display_name)
    if model is None:
        print(f"no model named {display_name} in the registry: the first run is judged on its value thresholds alone")
        return ""
    uri = model.uri or ""
    print(f"baseline: {model.resource_name} version {model.version_id} ({uri})")
    return uri


def register_blessed(settings: VertexSettings, export_uri: str, display_name: str, pipeline_run: str = "") -> dict:
    """Uploads the export at ``export_uri`` (its ``saved_model/`` folder) as a new version of the model named
    ``display_name``, or as that model's first version."""
    parent = find_model(settings, display_name)
    saved_model_uri = export_uri.rstrip("/") + "/" + SAVED_MODEL_DIR
    return register(settings, saved_model_uri, display_name, parent.resource_name if parent else "", pipeline_run)


def vertex_settings_in_pipeline(project: str, location: str) -> VertexSettings:
    """Settings for a step running on Vertex AI Pipelines: its project and location (Vertex AI fills them in), the
    ``TPU_PIPELINE_*`` environment for the rest (an API endpoint, say)."""
    from pipeline.vertex import load_settings

    return load_settings({"project": project, "region": location})
