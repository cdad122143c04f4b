"""Fixtures of the Vertex AI contract tests: the fake Vertex AI server, and a DAG step's environment pointed at it."""

from __future__ import annotations

import os

import pytest

from tests.conftest import BUCKET
from tests.fake_vertex import FakeVertex, start

SOURCE = "gs://data/flower_photos"
# where the tests' pipeline finds its images: pushed there, as far as the fake Artifact Registry knows
REGISTRY, TAG = "europe-docker.pkg.dev/demo-project/images", "t1"


@pytest.fixture(scope="session")
def template(tmp_path_factory) -> str:
    """The pipeline compiled for the tests' registry and tag (v5e-4, as pipeline.yaml), as a user compiles it after
    ``make images REGISTRY=... TAG=... PUSH=1``."""
    from pipeline.compile import compile_pipeline
    from pipeline.images import Images

    return compile_pipeline(str(tmp_path_factory.mktemp("template") / "pipeline.yaml"), Images(REGISTRY, TAG))


@pytest.fixture
def vertex(gcs, template, monkeypatch, tmp_path):
    """A fresh fake server, its project ready for a first run (the template's images pushed, the bucket in the
    region); the environment cleared of settings; a config file that makes retries quick."""
    for name in list(os.environ):
        if name.startswith("TPU_PIPELINE_") or name in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_REGION"):
            monkeypatch.delenv(name)
    # the one edge the fake cannot stand in for: before submitting, the client asks Cloud Resource Manager (over
    # gRPC) for the project's number, to check that the pipeline root's bucket belongs to it
    from gcp_storage_emulator import settings as emulator_settings
    from google.cloud.aiplatform.utils import resource_manager_utils

    monkeypatch.setattr(
        resource_manager_utils, "get_project_number", lambda *a, **k: emulator_settings.DEFAULT_PROJECT_NUMBER
    )
    from pipeline.images import read_template, template_images

    fake = FakeVertex()
    fake.template = template
    fake.google.images = set(template_images(read_template(template)).values())
    if gcs.location != "EUROPE-WEST4":  # (the emulator makes its buckets in US; a user's is in the region)
        gcs.location = "EUROPE-WEST4"
        gcs.patch()
    server = start(fake)
    config = tmp_path / "vertex.yaml"
    config.write_text("retry_initial: 0.05\nretry_timeout: 2\n")
    fake.args = [
        "--config",
        str(config),
        "--project",
        "demo-project",
        "--region",
        "europe-west4",
        "--api-endpoint",
        fake.url,
        "--anonymous",
    ]
    fake.job_args = [
        *fake.args,
        "--template",
        template,
        "--pipeline-root",
        f"gs://{BUCKET}/root",
        "--param",
        f"source={SOURCE}",
    ]
    yield fake
    server.shutdown()


@pytest.fixture
def in_pipeline(vertex, monkeypatch, tmp_path):
    """The environment of a DAG step on Vertex AI, pointed at the fake server."""
    monkeypatch.setenv("TPU_PIPELINE_API_ENDPOINT", vertex.url)
    monkeypatch.setenv("TPU_PIPELINE_ANONYMOUS", "1")
    monkeypatch.setenv("TPU_PIPELINE_CONFIG", vertex.args[1])  # quick retries
    return vertex
