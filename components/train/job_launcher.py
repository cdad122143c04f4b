"""``python -m components.train.job_launcher``: the training step's launcher on Vertex AI. It takes Google Cloud
Pipeline Components' custom-job launcher's arguments (``--type CustomJob --payload ... --project --location
--gcp_resources``) and does what it does, through its own code: create the job (or find the one an earlier attempt of
the task created), follow it to its end, cancel it when the run is cancelled. One thing more: a job still waiting for
its machines (``JOB_STATE_QUEUED`` or ``PENDING``, which Vertex AI keeps a job in while the project lacks quota for
them, or the region lacks capacity) after ``--max_queued_seconds`` is cancelled, and the step fails with one line
naming the machine and what to do, instead of a run that looks hung until its timeout.

It runs in the light image (Google Cloud Pipeline Components and the Vertex AI SDK, no TensorFlow)."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUED_SECONDS = 3600  # an hour for a job to get its machines; 0: no bound (Vertex AI's own behaviour)
WAITING = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING")


class StillQueuedError(RuntimeError):
    """The job waited longer than its bound for its machines, and was cancelled."""


def waited_too_long(job, max_seconds: float, now: datetime.datetime) -> float | None:
    """How long ``job`` (a CustomJob) has waited for its machines when that is over ``max_seconds`` (from its
    creation, as the service records it), else None (it runs, it ended, or it may wait on)."""
    if not max_seconds or job.state.name not in WAITING or not job.create_time:
        return None
    waited = (now - job.create_time).total_seconds()
    return waited if waited > max_seconds else None


def machine_words(job) -> str:
    """``4 TPU chips (ct5lp-hightpu-4t, 2x2)``, ``1 NVIDIA_L4 (g2-standard-8)``: what the job waits for."""
    pools = list(job.job_spec.worker_pool_specs)
    if not pools:
        return "its machines"
    machine = pools[0].machine_spec
    if machine.tpu_topology:
        chips = 1
        for side in machine.tpu_topology.split("x"):
            chips *= int(side)
        return f"{chips} TPU chips ({machine.machine_type}, {machine.tpu_topology})"
    if machine.accelerator_count:
        return f"{machine.accelerator_count} {machine.accelerator_type.name} ({machine.machine_type})"
    return f"a {machine.machine_type} machine"


def queued_message(job, location: str, waited: float) -> str:
    return (
        f"training job {job.name} waited {waited / 60:.0f} min for {machine_words(job)} in {location} without "
        "starting, and was cancelled: the project's Vertex AI custom training quota for that machine in the region "
        "(python -m pipeline check reads it; request more in the console's Quotas page), or the region's capacity "
        "(submit to another --region, compile for another --accelerator, or raise --max-queue)"
    )


def launch(type: str, project: str, location: str, payload: str, gcp_resources: str, max_queued_seconds: float):
    """Creates the job (or finds the one ``gcp_resources`` names), follows it to its end, cancels it past the bound."""
    from google_cloud_pipeline_components.container.v1.custom_job import remote_runner as custom_job
    from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner

    runner = job_remote_runner.JobRemoteRunner(type, project, location, gcp_resources)
    job_name = runner.check_if_job_exists()
    if job_name is None:
        job_name = runner.create_job(
            custom_job.create_custom_job_with_client, custom_job.insert_system_labels_into_payload(payload)
        )

    def get_job(client, name):
        job = custom_job.get_custom_job_with_client(client, name)
        waited = waited_too_long(job, max_queued_seconds, datetime.datetime.now(datetime.UTC))
        if waited is not None:
            client.cancel_custom_job(name=name)
            raise StillQueuedError(queued_message(job, location, waited))
        return job

    return runner.poll_job(get_job, job_name)


def main(argv: list[str] | None = None) -> int:
    from google_cloud_pipeline_components.container.v1.gcp_launcher.utils import parser_util

    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--max_queued_seconds", type=float, default=DEFAULT_MAX_QUEUED_SECONDS)
    mine, rest = own.parse_known_args(sys.argv[1:] if argv is None else argv)
    _, parsed = parser_util.parse_default_args(rest)
    arguments = vars(parsed)
    if arguments["type"] != "CustomJob":
        raise ValueError(f"job type {arguments['type']}: this launcher launches CustomJob")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        launch(**arguments, max_queued_seconds=mine.max_queued_seconds)
    except StillQueuedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    log.info("training job finished: %s", json.dumps({"gcp_resources": arguments["gcp_resources"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
