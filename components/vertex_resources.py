"""Vertex AI's model versions and endpoints: a SavedModel uploaded as a model version (the register step, ``pipeline
register``), a version deployed to an endpoint (the deploy step, ``pipeline deploy``), and both found by name (also
for the predictions that go through them, ``pipeline predict --endpoint`` and ``pipeline batch-predict``).

Every call goes through ``components.vertex_client.call``: 429 / 503 retried, a create that a 503 hid found instead
of made twice, the rest one-line errors.
"""

from __future__ import annotations

import logging
import re

from components.cli import UsageError
from components.imaging import SERVING_DESCRIPTION
from components.params import DEPLOY
from components.vertex_client import VertexSettings, call, check_settings, connect

log = logging.getLogger(__name__)

# Vertex AI's prebuilt TensorFlow 2 CPU prediction image (serves the SavedModel's serving_default signature)
DEFAULT_SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"

ENDPOINT_NAME = re.compile(r"projects/[^/]+/locations/([^/]+)/endpoints/[^/]+")
MODEL_NAME = re.compile(r"projects/[^/]+/locations/([^/]+)/models/[^/@]+(@[^/]+)?")


def find_endpoint(settings: VertexSettings, endpoint: str, create: bool = False):
    """The endpoint ``endpoint`` (a resource name, or a display name: the most recently made of that name); with
    ``create``, made when there is none of that display name. A one-line error when it cannot be found."""
    from google.cloud import aiplatform

    connect(settings)
    resource = ENDPOINT_NAME.fullmatch(endpoint)
    if resource:
        if resource.group(1) != settings.region:
            raise UsageError(f"endpoint {endpoint} is in {resource.group(1)}, not in --region {settings.region}")
        return call(f"find endpoint {endpoint}", lambda: aiplatform.Endpoint(endpoint), settings)

    def named():
        found = aiplatform.Endpoint.list(filter=f'display_name="{endpoint}"', order_by="create_time desc")
        return found[0] if found else None

    found = call(f"look up endpoint {endpoint}", named, settings)
    if found is not None or not create:
        if found is None:
            raise UsageError(
                f"no endpoint named {endpoint} in {settings.region}: pass its resource name or display name"
            )
        return found
    created = call(
        f"create endpoint {endpoint}",
        lambda: aiplatform.Endpoint.create(display_name=endpoint, labels=dict(settings.labels) or None),
        settings,
        done=named,
    )
    log.info(f"created endpoint {created.resource_name} ({endpoint})")
    return created


def register(
    settings: VertexSettings,
    saved_model_uri: str,
    display_name: str,
    parent_model: str = "",
    pipeline_run: str = "",
    serving_image: str = DEFAULT_SERVING_IMAGE,
    model_code: str = "",
) -> dict:
    """Uploads the SavedModel folder at ``saved_model_uri`` (gs://); returns the model's name and version id.
    ``model_code``: the digest of the model file of one's own it was built from, its version's ``model-code``
    label."""
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    if not saved_model_uri.startswith("gs://"):
        raise UsageError(f"model {saved_model_uri} must be a gs:// folder holding the exported SavedModel")
    labels = dict(settings.labels)
    if pipeline_run:
        labels["pipeline-run"] = re.sub(r"[^a-z0-9_-]", "-", pipeline_run.rsplit("/", 1)[-1].lower())[:63]
    if model_code:
        labels["model-code"] = model_code[:63]
    connect(settings)

    def uploaded_after_all():  # no request id in UploadModelRequest: the new default version names our folder
        found = find_model(settings, display_name)
        return found if found is not None and (found.uri or "").rstrip("/") == saved_model_uri.rstrip("/") else None

    model = call(
        "upload the model",
        lambda: aiplatform.Model.upload(
            display_name=display_name,
            artifact_uri=saved_model_uri,
            serving_container_image_uri=serving_image,
            parent_model=parent_model or None,
            is_default_version=True,
            labels=labels or None,
            description=SERVING_DESCRIPTION,
        ),
        settings,
        done=uploaded_after_all,
    )
    result = {"name": model.resource_name, "version_id": model.version_id, "labels": labels}
    log.info(f"registered {result['name']} version {result['version_id']}")
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


def split_version(model_version: str) -> tuple[str, str]:
    """``projects/.../models/ID@VERSION`` -> (``projects/.../models/ID``, ``VERSION``)."""
    name, _, version = model_version.partition("@")
    return name, version


def deploy(
    settings: VertexSettings,
    model_version: str,
    endpoint: str,
    machine_type: str = DEPLOY["machine_type"].default,
    min_replicas: int = DEPLOY["min_replicas"].default,
    max_replicas: int = DEPLOY["max_replicas"].default,
) -> dict:
    """Deploys ``model_version`` (``projects/.../models/ID@VERSION``, a ``google.VertexModel``'s resource name) to
    ``endpoint`` with all of its traffic, then undeploys the model's other versions there (they no longer get
    traffic, and each deployed model keeps its machines running); the endpoint's other models keep their share.
    Nothing to do when that version already takes all of the traffic. Returns what was done."""
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    if not MODEL_NAME.fullmatch(model_version) or "@" not in model_version:
        raise UsageError(f"model {model_version}: expected a model version, projects/P/locations/L/models/ID@VERSION")
    if not 1 <= min_replicas <= max_replicas:
        raise UsageError(f"replicas {min_replicas} to {max_replicas}: need 1 <= min <= max")
    target = find_endpoint(settings, endpoint, create=True)
    model_name, version = split_version(model_version)

    def serving_this():  # the deployed model of that version if it takes all of the traffic (read afresh)
        current = aiplatform.Endpoint(target.resource_name).gca_resource
        split = dict(current.traffic_split)
        for deployed in current.deployed_models:
            if deployed.model == model_name and deployed.model_version_id == version:
                return deployed if split.get(deployed.id, 0) == 100 else None
        return None

    already = serving_this()
    if already is not None:
        log.info(f"{model_version} already takes all of {target.resource_name}'s traffic")
        return {
            "endpoint": target.resource_name,
            "deployed_model_id": already.id,
            "action": "unchanged",
            "undeployed": [],
        }
    model = aiplatform.Model(model_version)
    call(
        f"deploy {model_version} to {target.resource_name}",
        lambda: target.deploy(
            model=model,
            deployed_model_display_name=f"{model.display_name}-v{version}",
            traffic_percentage=100,
            machine_type=machine_type,
            min_replica_count=min_replicas,
            max_replica_count=max_replicas,
        ),
        settings,
        done=serving_this,
    )
    deployed = serving_this()
    undeployed = []
    for older in list(aiplatform.Endpoint(target.resource_name).gca_resource.deployed_models):
        if older.model == model_name and older.id != deployed.id:
            call(
                f"undeploy version {older.model_version_id} from {target.resource_name}",
                lambda older=older: target.undeploy(older.id),
                settings,
            )
            undeployed.append(older.model_version_id)
    log.info(
        f"deployed {model_version} to {target.resource_name} with all of its traffic"
        + (f"; undeployed version(s) {', '.join(undeployed)}" if undeployed else "")
    )
    return {
        "endpoint": target.resource_name,
        "deployed_model_id": deployed.id,
        "action": "deployed",
        "undeployed": undeployed,
    }
