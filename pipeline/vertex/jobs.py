"""Vertex AI Pipelines jobs: submit the compiled ``pipeline.yaml`` (with its experiment and TensorBoard) and follow it,
through the shared client of ``components.vertex_client`` (settings, credentials, retries, one-line errors).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

from components.cli import UsageError
from components.vertex_client import (
    VertexError,
    VertexSettings,
    call,
    check_reachable,
    check_settings,
    connect,
    credentials_for,
    follow_states,
    run_as,
)
from components.vertex_sdk import add_run_to_experiment, set_resource
from pipeline.model_code import with_model_code

# the states --wait stops at: the run ended, or (PAUSED) it waits for someone to resume it in the console
TERMINAL_STATES = {
    "PIPELINE_STATE_SUCCEEDED",
    "PIPELINE_STATE_FAILED",
    "PIPELINE_STATE_CANCELLED",
    "PIPELINE_STATE_PAUSED",
}


def parse_pairs(pairs: list[str] | None, flag: str) -> dict[str, str] | None:
    """``["k=v", ...]`` from repeated flags; None when the flag was not given."""
    if not pairs:
        return None
    result = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not name:
            raise UsageError(f"{flag} {pair!r} is not NAME=VALUE")
        result[name.strip()] = value
    return result


def pipeline_parameters(template: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides typed by the template's own parameter types; unknown names and missing required ones are errors."""
    from pipeline.images import read_template

    spec = read_template(template)
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    typed = {}
    for name, value in overrides.items():
        if name not in declared:
            raise UsageError(f"pipeline has no parameter {name!r}: use one of {', '.join(sorted(declared))}")
        typed[name] = _typed(name, value, declared[name]["parameterType"])
    missing = sorted(n for n, d in declared.items() if not d.get("isOptional") and n not in typed)
    if missing:
        raise UsageError(f"pipeline parameter {missing[0]} is required: pass --param {missing[0]}=VALUE")
    from pipeline.step_values import check_step_values

    try:
        check_step_values(typed)
    except UsageError as err:  # (the steps name their flags: --image-size 100000 ... is --param image_size=100000)
        from components import params

        tables = (
            params.CONVERT,
            params.TEXT,
            params.TRAIN,
            params.TUNE,
            params.EVALUATE,
            params.EXPORT,
            params.CHECK_DATA,
        )
        flags = {params.flag_of(name, table) + " ": name for table in tables for name in table}
        flag = next((flag for flag in flags if str(err).startswith(flag)), "")
        raise UsageError(f"--param {flags[flag]}={str(err)[len(flag) :]}" if flag else f"--param: {err}") from None
    return typed


def _typed(name: str, value: Any, kind: str) -> Any:
    if not isinstance(value, str):  # from the YAML config: already typed
        return value
    from components.params import auto_value

    if value.strip().lower() == "auto" and (auto := auto_value(name)) is not None:  # (epochs=auto: the DAG's 0)
        return auto
    try:
        if kind == "NUMBER_INTEGER":
            return int(value)
        if kind == "NUMBER_DOUBLE":
            return float(value)
        if kind == "BOOLEAN":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if kind in ("LIST", "STRUCT"):
            parsed = json.loads(value)
            if not isinstance(parsed, list if kind == "LIST" else dict):
                raise ValueError(value)
            return parsed
    except ValueError:
        what = {
            "NUMBER_INTEGER": "an integer, e.g. 20",
            "NUMBER_DOUBLE": "a number, e.g. 0.002",
            "BOOLEAN": "true or false",
            "LIST": 'a JSON list, e.g. ["a","b"]',
            "STRUCT": 'a JSON object, e.g. {"k": 1}',
        }[kind]
        raise UsageError(f"--param {name}={value} is not {what}") from None
    return value


def console_link(settings: VertexSettings, job_name: str) -> str:
    job_id = job_name.rsplit("/", 1)[-1]
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{settings.region}/pipelines/runs/{job_id}"
        f"?project={settings.project}"
    )


def job_display_name(settings: VertexSettings) -> str:
    """The runs' display name: ``--display-name``, else the compiled pipeline's name."""
    return settings.display_name or _pipeline_name(settings.template)


def make_job(settings: VertexSettings, credentials, job_id: str | None = None):
    from google.cloud import aiplatform

    parameters = pipeline_parameters(settings.template, settings.parameters)
    return aiplatform.PipelineJob(
        display_name=job_display_name(settings),
        template_path=settings.template,
        job_id=job_id or None,
        pipeline_root=settings.pipeline_root,
        parameter_values=parameters,
        enable_caching=settings.enable_caching,
        labels=settings.labels or None,
        credentials=credentials,
        project=settings.project,
        location=settings.region,
    )


def _pipeline_name(template: str) -> str:
    from pipeline.images import read_template

    return read_template(template).get("pipelineInfo", {}).get("name", "pipeline")


def check_experiment(name: str) -> None:
    """A Vertex AI Experiment's name (its metadata context id): lowercase letters, digits and hyphens."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,127}", name):
        raise UsageError(
            f"--experiment {name}: an experiment name is lowercase letters, digits and hyphens (at most 128, "
            "starting with a letter or digit), e.g. flowers-retraining"
        )


def check_tensorboard(tensorboard: str, settings: VertexSettings) -> None:
    """A Vertex AI TensorBoard's resource name, in the region the pipeline runs in (a training job reaches no other)."""
    found = re.fullmatch(r"projects/[^/]+/locations/([^/]+)/tensorboards/[0-9]+", tensorboard)
    if not found:
        raise UsageError(
            f"--tensorboard {tensorboard}: pass a Vertex AI TensorBoard's resource name, "
            "projects/PROJECT/locations/REGION/tensorboards/ID (gcloud ai tensorboards list)"
        )
    if found.group(1) != settings.region:
        raise UsageError(
            f"--tensorboard {tensorboard} is in {found.group(1)}, the pipeline runs in {settings.region}: use a "
            f"TensorBoard of {settings.region}"
        )
    if not settings.service_account:  # Vertex AI refuses a custom job with a TensorBoard and no service account
        raise UsageError(
            "--tensorboard needs --service-account: the training job writes its logs to the TensorBoard as that "
            "account (give it roles/aiplatform.user and roles/storage.admin on the pipeline root's bucket)"
        )


def tensorboard_parameters(settings: VertexSettings, tensorboard: str, job_id: str) -> dict[str, str]:
    """The DAG parameters that send the training job's logs to ``tensorboard``: the TensorBoard, and the job's
    base output directory (Vertex AI sets ``AIP_TENSORBOARD_LOG_DIR`` and ``AIP_CHECKPOINT_DIR`` under it), one per
    run under the pipeline root, so that runs never share their logs or their backups."""
    return {"tensorboard": tensorboard, "base_output_directory": f"{settings.pipeline_root.rstrip('/')}/{job_id}/train"}


def check_run(settings: VertexSettings) -> None:
    """What a run's settings must hold before any call: the parameters the template takes, typed; the template's
    images in a registry of the user's (the placeholder one would fail every step on pulling its image)."""
    from pipeline.images import check_not_placeholder, read_template

    parameters = pipeline_parameters(settings.template, settings.parameters)
    spec = read_template(settings.template)
    check_not_placeholder(settings.template, spec)
    strategy = training_strategy(spec)
    if parameters.get("tune_trials", 0) > 0 and strategy in ("SPOT", "FLEX_START"):
        raise UsageError(
            f"--param tune_trials={parameters['tune_trials']}: the tuning job's trials cannot run as {strategy} "
            "(Google Cloud Pipeline Components' tuning job takes no scheduling strategy, and they would run on "
            "demand): tune with a template compiled --scheduling standard, or train once (tune_trials 0)"
        )


def training_strategy(spec: dict) -> str:
    """How a compiled template's training job gets its machines (its ``strategy`` input: ``STANDARD``, ``SPOT``,
    ``FLEX_START``); "" for a template without one."""
    for component in spec.get("components", {}).values():
        found = component.get("inputDefinitions", {}).get("parameters", {}).get("strategy", {})
        if "defaultValue" in found and "worker_pool_specs" in component["inputDefinitions"]["parameters"]:
            return str(found["defaultValue"])
    return ""


def check_project(settings: VertexSettings, everything: bool = False) -> list:
    """The preflight (``pipeline.vertex.preflight``) for the settings and their template: its report printed (every
    item with ``everything``, else what did not pass), and one line for each missing item, exit 2, before anything is
    created. Returns the findings."""
    from pipeline.images import read_template
    from pipeline.vertex.findings import refuse_missing, report
    from pipeline.vertex.google_apis import GoogleApis
    from pipeline.vertex.preflight import preflight

    apis = GoogleApis(settings, credentials_for(settings))  # (no credentials: one line, before any network)
    check_reachable(settings)
    findings = preflight(settings, read_template(settings.template), apis)
    print(report(findings, everything))
    refuse_missing(findings)
    return findings


def submit(
    settings: VertexSettings,
    job_id: str = "",
    wait: bool = False,
    poll_seconds: float = 30.0,
    experiment: str = "",
    tensorboard: str = "",
    preflight: bool = True,
) -> dict:
    """Creates the PipelineJob; with ``wait``, follows its state to the end. Returns name, link and state.

    ``experiment``: the run joins that Vertex AI Experiment (created if needed), where its parameters and metrics
    (the evaluate step's) line up with the other runs'. ``tensorboard``: the training job's logs go to that Vertex
    AI TensorBoard. ``preflight``: check the project first (``check_project``)."""
    from dataclasses import replace

    check_settings(settings)
    if experiment:
        check_experiment(experiment)
    if tensorboard:
        check_tensorboard(tensorboard, settings)
        # the run's own output directory needs the job's id before the job exists: fixed here, as the client would
        job_id = job_id or f"{_pipeline_name(settings.template)}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"
        settings = replace(
            settings, parameters={**settings.parameters, **tensorboard_parameters(settings, tensorboard, job_id)}
        )
    check_run(settings)  # the user's mistakes first, before any network
    if preflight:
        check_project(settings)
    settings = with_model_code(settings)
    credentials = connect(settings)
    found = join_experiment(settings, experiment, credentials) if experiment else None
    job = make_job(settings, credentials, job_id)  # the client names the job <pipeline>-<timestamp> when no id
    call(
        "submit the pipeline",
        lambda: job.submit(service_account=settings.service_account or None, network=settings.network or None),
        settings,
        done=lambda: _adopt_created_job(job),
    )
    result = {"name": job.resource_name, "link": console_link(settings, job.resource_name), "state": _state(job)}
    print(f"submitted {result['name']}\n  {result['link']}\n  its steps and its training job run as {run_as(settings)}")
    if found is not None:
        # the SDK's own steps of submit(experiment=...), apart so that each is retried and reported on its own:
        # the run's metadata context (which Vertex AI makes once the job runs) becomes a child of the experiment's
        call(f"add the run to experiment {experiment}", lambda: add_run_to_experiment(found, job), settings)
        result["experiment"] = found.dashboard_url
        print(f"  in experiment {experiment}: {found.dashboard_url}")
    if wait:
        result["state"] = follow(job, settings, poll_seconds)
    return result


def join_experiment(settings: VertexSettings, experiment: str, credentials):
    """The Vertex AI Experiment ``experiment``, created if it does not exist."""
    from google.cloud import aiplatform

    return call(
        f"find or create experiment {experiment}",
        lambda: aiplatform.Experiment.get_or_create(
            experiment, project=settings.project, location=settings.region, credentials=credentials
        ),
        settings,
    )


def job_parent(job) -> str:
    """``projects/P/locations/L`` of a job, created or not."""
    return f"projects/{job.project}/locations/{job.location}"


def _adopt_created_job(job):
    """After a failed create: the job with this id if the server made it after all (it becomes ``job``'s resource),
    else None. The id is fixed before the first attempt, so a retry can never make a second job."""
    from google.api_core import exceptions

    try:
        set_resource(job, job.api_client.get_pipeline_job(name=f"{job_parent(job)}/pipelineJobs/{job.job_id}"))
    except exceptions.NotFound:
        return None
    return job


def follow(job, settings: VertexSettings, poll_seconds: float) -> str:
    """Polls the job until it ends, printing each state change; raises ``VertexError`` unless it succeeded."""
    resource = follow_states(
        "follow the pipeline job",
        lambda: job.api_client.get_pipeline_job(name=job.resource_name),
        settings,
        TERMINAL_STATES,
        poll_seconds,
    )
    state = resource.state.name
    if state == "PIPELINE_STATE_PAUSED":
        raise VertexError(
            f"pipeline job {job.resource_name} is {state}: it waits for someone to resume it in the console "
            f"({console_link(settings, job.resource_name)}); --wait stops here"
        )
    if state != "PIPELINE_STATE_SUCCEEDED":
        detail = resource.error.message if resource.error and resource.error.message else "see the console link"
        raise VertexError(f"pipeline job {job.resource_name} ended {state}: {detail}")
    return state


def _state(job) -> str:
    try:
        return job.state.name
    except Exception:
        return "PIPELINE_STATE_UNSPECIFIED"
