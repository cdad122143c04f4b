"""The deploy step of the DAG, as a lightweight KFP component: the blessed, registered model version (the register
step's ``google.VertexModel``) deployed to the endpoint the ``endpoint`` parameter names, created if needed, with
all of its traffic. The logic is ``components.vertex_resources.deploy``; this is a thin wrapper."""

from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint, VertexModel
from kfp import dsl
from kfp.dsl import Input, Output


def deploy(
    vertex_model: Input[VertexModel],
    endpoint: str,
    vertex_endpoint: Output[VertexEndpoint],
    machine_type: str,
    min_replicas: int,
    max_replicas: int,
    project: str = "{{$.pipeline_google_cloud_project_id}}",
    location: str = "{{$.pipeline_google_cloud_location}}",
) -> str:
    """Deploys ``vertex_model`` (its ``resourceName``, ``projects/.../models/ID@VERSION``) to ``endpoint`` (a
    display name or resource name; made when no endpoint has that display name) with all of the traffic, and
    undeploys the model's older versions there. ``vertex_endpoint``: the endpoint, as GCPC's steps take it. Returns
    what was done as a JSON line."""
    import json

    from components.cli import start_step
    from components.vertex_client import name_vertex_resource, vertex_settings_in_pipeline
    from components.vertex_resources import deploy

    start_step()
    settings = vertex_settings_in_pipeline(project, location)
    resource_name = vertex_model.metadata.get("resourceName", "")
    if not resource_name:
        import logging

        logging.getLogger(__name__).info(
            "the register step named no model version (registration is off): nothing to deploy"
        )
        return json.dumps({"action": "skipped", "reason": "no registered model version"})
    done = deploy(settings, resource_name, endpoint, machine_type, min_replicas, max_replicas)
    name_vertex_resource(vertex_endpoint, settings, done["endpoint"])
    return json.dumps(done, sort_keys=True)


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(deploy, base_image=base_image, install_kfp_package=False)
