"""Vertex AI's endpoints and model versions found by name, for the deploy step and for the predictions that go
through them (``pipeline predict --endpoint``, ``pipeline batch-predict``)."""

from __future__ import annotations

import logging
import re

from components.cli import UsageError
from components.vertex_client import VertexSettings, call, connect

log = logging.getLogger(__name__)

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
