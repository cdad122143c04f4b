"""The Vertex AI Model Registry: a blessed export uploaded as a new version of its parent model, served by Vertex
AI's prebuilt TensorFlow CPU container, and labelled with the pipeline run that made it."""

from __future__ import annotations

import re

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
