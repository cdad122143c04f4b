"""Serving on Vertex AI from the command line: online prediction through an endpoint, and batch prediction jobs over
image folders or JSONL files on Cloud Storage (``deploy`` is the deploy step's, in ``components/vertex_resources.py``).

Every call goes through ``components.vertex_client.call``: 429 / 503 retried, a create that a 503 hid found instead
of made twice, the rest one-line errors.
"""

from __future__ import annotations

import base64
import time

from components.artifacts.exported import Exported
from components.artifacts.records import EXPORT
from components.cli import UsageError
from components.decoding import IMAGE_SUFFIXES
from components.vertex_client import VertexError, VertexSettings, call, check_settings, connect, follow_states
from components.vertex_resources import MODEL_NAME, find_endpoint

BATCH_MACHINE_TYPE = "n1-standard-4"
ONLINE_BATCH = 16  # images per online prediction request at most
# Vertex AI takes online requests of 1.5 MB at most: the base64 of the files of one request stays under this, and a
# file larger than ONLINE_FILE_BYTES goes as the square the conversion makes of it (base64 adds a third)
ONLINE_REQUEST_BYTES = 1_400_000
ONLINE_FILE_BYTES = 1_000_000
BATCH_STATES_DONE = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED")


def served_export(settings: VertexSettings, target) -> Exported:
    """The ``export.json`` of the model version that takes most of ``target``'s traffic (its class names and image
    size), read beside the SavedModel the Model Registry holds."""
    from google.cloud import aiplatform

    from components.artifacts.exported import read_export

    split = dict(target.gca_resource.traffic_split)
    serving = max(split, key=split.get) if split else None
    deployed = next((d for d in target.gca_resource.deployed_models if d.id == serving), None)
    if deployed is None:
        raise UsageError(f"endpoint {target.resource_name} serves no model: deploy one first (the endpoint parameter)")
    model = call(
        "look up the served model", lambda: aiplatform.Model(f"{deployed.model}@{deployed.model_version_id}"), settings
    )
    uri = (model.uri or "").rstrip("/")
    report = read_export(uri)
    if report is None:
        raise UsageError(
            f"the served model {model.resource_name} has no {EXPORT.name} beside {uri}: register an "
            "export of this pipeline"
        )
    return report


def online_requests(readable: list, size: int) -> list[list[tuple[str, dict]]]:
    """The image files (``pipeline.predict.read_images``) as online prediction instances, ``{"image_bytes": {"b64":
    ...}}``, in requests under Vertex AI's 1.5 MB: each file as a client sends it (``pipeline.predict.sent_bytes``;
    one too large for a request goes as the square the conversion makes of it), at most ``ONLINE_BATCH`` a request.
    Returns the requests, each a list of (path, instance)."""
    from pipeline.predict import sent_bytes

    requests, current, used = [], [], 0
    for path, content in readable:
        encoded = base64.b64encode(sent_bytes(content, size, ONLINE_FILE_BYTES)).decode("ascii")
        if current and (used + len(encoded) > ONLINE_REQUEST_BYTES or len(current) == ONLINE_BATCH):
            requests.append(current)
            current, used = [], 0
        current.append((path, {"image_bytes": {"b64": encoded}}))
        used += len(encoded)
    return [*requests, current] if current else requests


def predict_endpoint(settings: VertexSettings, endpoint: str, images: list[str], top: int = 3):
    """Top-``top`` labels for each readable image from the model ``endpoint`` serves, and one-line errors for the
    others (as ``pipeline.predict.predict`` answers for a local export)."""
    from pipeline.predict import check_top, read_images, top_labels

    check_top(top)
    check_settings(settings, need_root=False)
    target = find_endpoint(settings, endpoint)
    report = served_export(settings, target)
    if report.modality == "text":
        raise UsageError(
            f"endpoint {endpoint} serves a text model: --endpoint takes images; predict texts with "
            "--model and the export step's output"
        )
    names, size = list(report.class_names), int(report.image_size)
    readable, errors = read_images(images)
    answers = []
    for chunk in online_requests(readable, size):
        instances = [instance for _, instance in chunk]
        response = call("predict", lambda instances=instances: target.predict(instances=instances), settings)
        answers += [
            top_labels(path, prediction["probabilities"], names, top)
            for (path, _), prediction in zip(chunk, response.predictions, strict=True)
        ]
    return answers, errors


def batch_predict(
    settings: VertexSettings,
    model_version: str,
    source: str,
    output: str,
    machine_type: str = BATCH_MACHINE_TYPE,
    max_replicas: int = 1,
    wait: bool = False,
    poll_seconds: float = 30.0,
) -> dict:
    """A Vertex AI batch prediction job of ``model_version`` over ``source``: a ``gs://`` folder of images (listed
    into a file list under ``output``, each file sent as it is) or a ``.jsonl`` of instances; predictions as JSONL
    under ``output``. With ``wait``, follows the job to its end. Returns its name, state and output folder."""
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    if not MODEL_NAME.fullmatch(model_version):
        raise UsageError(f"--model {model_version}: expected projects/P/locations/L/models/ID[@VERSION]")
    for flag, uri in (("--source", source), ("--output", output)):
        if not uri.startswith("gs://"):
            raise UsageError(
                f"{flag} {uri} must be on Cloud Storage (gs://...): batch prediction reads and writes there"
            )
    connect(settings)
    if source.endswith(".jsonl"):
        instances_format, sources = "jsonl", source
    else:
        sources, instances_format = write_file_list(source, output), "file-list"
    name = f"batch-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"

    def created_after_all():
        found = aiplatform.BatchPredictionJob.list(filter=f'display_name="{name}"')
        return found[0] if found else None

    job = call(
        "create the batch prediction job",
        lambda: aiplatform.BatchPredictionJob.submit(  # creates the job; does not wait for it
            job_display_name=name,
            model_name=model_version,
            instances_format=instances_format,
            predictions_format="jsonl",
            gcs_source=sources,
            gcs_destination_prefix=output,
            machine_type=machine_type,
            starting_replica_count=1,
            max_replica_count=max_replicas,
            labels=dict(settings.labels) or None,
        ),
        settings,
        done=created_after_all,
    )
    print(f"created {job.resource_name} over {sources} ({instances_format}) -> {output}")
    state = job.state.name
    if wait:
        state = follow_batch(job, settings, poll_seconds)
    return {"name": job.resource_name, "state": state, "output": output}


def write_file_list(folder: str, output: str) -> str:
    """Lists the images under ``folder`` into ``<output>/instances.txt`` (one ``gs://`` URI a line, the batch
    prediction's ``file-list`` format: each file is sent as its base64 bytes); returns its URI."""
    from components.storage import glob

    found = [path for path in glob(folder.rstrip("/") + "/**") if path.lower().endswith(IMAGE_SUFFIXES)]
    if not found:
        raise UsageError(
            f"--source {folder} holds no images ({', '.join(IMAGE_SUFFIXES)}): pass a folder of images "
            "or a .jsonl of instances"
        )
    listing = output.rstrip("/") + "/instances.txt"
    from components.storage import write_atomically

    write_atomically(listing, ("\n".join(found) + "\n").encode())
    print(f"listed {len(found)} images of {folder} in {listing}")
    return listing


def follow_batch(job, settings: VertexSettings, poll_seconds: float) -> str:
    """Polls the batch prediction job until it ends; raises ``VertexError`` unless it succeeded."""
    resource = follow_states(
        "follow the batch prediction job",
        lambda: job.api_client.get_batch_prediction_job(name=job.resource_name),
        settings,
        BATCH_STATES_DONE,
        poll_seconds,
    )
    state = resource.state.name
    if state != "JOB_STATE_SUCCEEDED":
        detail = resource.error.message if resource.error and resource.error.message else "see the console"
        raise VertexError(f"batch prediction job {job.resource_name} ended {state}: {detail}")
    print(f"predictions in {resource.output_info.gcs_output_directory}")
    return state
