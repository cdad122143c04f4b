"""The deploy step's work: a registered model version deployed to a Vertex AI endpoint (created if needed), with all
of its traffic, and the model's older versions undeployed there.

Every call goes through ``components.vertex_client.call``: 429 / 503 retried, a create that a 503 hid found instead
of made twice, the rest one-line errors.
"""

from __future__ import annotations

import logging

from components.cli import UsageError
from components.params import DEPLOY
from components.vertex_client import VertexSettings, call, check_settings
from components.vertex_resources import MODEL_NAME, find_endpoint

log = logging.getLogger(__name__)

DEFAULT_MACHINE_TYPE = DEPLOY["machine_type"].default


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
