"""The training step as a Vertex AI custom job on an accelerator's machines (Google Cloud Pipeline Components'
``create_custom_training_job_from_component``), with its retries, scheduling and deadline."""

from components.train.component import make_component as train_component
from pipeline.accelerators import Scheduling
from pipeline.images import LIGHT_IMAGE, Images

TRAIN_RETRIES = 2  # the training job's launches after a failed one, each resuming from the last backup


def custom_training_job(images: Images, accelerator: str, scheduling: Scheduling):
    """The train component as a Vertex AI custom job on ``accelerator``'s machine, obtained as ``scheduling`` says,
    and the call arguments it needs."""
    import copy

    from google_cloud_pipeline_components._placeholders import (
        ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER,
        NETWORK_PLACEHOLDER,
        SERVICE_ACCOUNT_PLACEHOLDER,
    )
    from google_cloud_pipeline_components.v1.custom_job import create_custom_training_job_from_component

    from pipeline.accelerators import machine_spec

    spec = machine_spec(accelerator)
    job_op = create_custom_training_job_from_component(
        train_component(images.uri(spec.image)),
        display_name=f"train-{accelerator}",
        machine_type=spec.machine_type,
        accelerator_type=spec.accelerator_type,
        accelerator_count=spec.accelerator_count or 1,
        boot_disk_type=spec.boot_disk_type,
        boot_disk_size_gb=spec.boot_disk_size_gb,
        # the job runs as the pipeline does: its service account, in its VPC network, under its encryption key
        # (Vertex AI fills GCPC's placeholders in at run time; unset ones stay empty, as without them)
        service_account=SERVICE_ACCOUNT_PLACEHOLDER,
        network=NETWORK_PLACEHOLDER,
        encryption_spec_key_name=ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER,
        # the hosts of a slice train in lockstep (jax.distributed): one restarted alone could not rejoin, so
        # Vertex AI restarts them all, and they resume together from the last backup
        **({"restart_job_on_worker_restart": True} if spec.hosts > 1 else {}),
        **scheduling.job_arguments(),
    )
    # launched by our launcher, which is GCPC's with a bound on the job's wait for its machines (Vertex AI keeps a job
    # queued, without a word, while the project lacks the quota or the region the capacity)
    container = job_op.component_spec.implementation.container
    container.image = images.uri(LIGHT_IMAGE)
    container.command = ["python3", "-u", "-m", "components.train.job_launcher"]
    container.args = [*container.args, "--max_queued_seconds", str(scheduling.queued_seconds())]
    options = {"hosts": spec.hosts}
    if spec.tpu_topology:  # not an argument of the GCPC helper: set it in the worker pool's machine spec
        worker_pools = copy.deepcopy(job_op.component_spec.inputs["worker_pool_specs"].default)
        worker_pools[0]["machine_spec"] = {**worker_pools[0]["machine_spec"], **spec.as_vertex()}
        options["worker_pool_specs"] = worker_pools
    return job_op, options
