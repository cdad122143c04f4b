"""Vertex AI Pipelines: submit the compiled ``pipeline.yaml``, follow it, and schedule it to retrain, through the
shared client of ``components.vertex_client`` (settings, credentials, retries, one-line errors).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from components.cli import UsageError
from components.vertex_client import VertexError, VertexSettings, call, check_settings, connect, run_as

# the states --wait stops at: the run ended, or (PAUSED) it waits for someone to resume it in the console
TERMINAL_STATES = {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED",
                   "PIPELINE_STATE_PAUSED"}  # fmt: skip
CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


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
    import yaml

    if not os.path.isfile(template):
        raise UsageError(f"pipeline template {template} does not exist: run python -m pipeline compile first")
    with open(template, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    typed = {}
    for name, value in overrides.items():
        if name not in declared:
            raise UsageError(f"pipeline has no parameter {name!r}: use one of {', '.join(sorted(declared))}")
        typed[name] = _typed(name, value, declared[name]["parameterType"])
    for address in typed.get("notify_emails", []):  # the exit task would fail after the whole run otherwise
        if not isinstance(address, str) or not re.fullmatch(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+", address):
            raise UsageError(
                f"--param notify_emails: {address!r} is not an email address: pass a JSON list of addresses, e.g. "
                "'[\"ml-team@example.com\"]'"
            )
    missing = sorted(n for n, d in declared.items() if not d.get("isOptional") and n not in typed)
    if missing:
        raise UsageError(f"pipeline parameter {missing[0]} is required: pass --param {missing[0]}=VALUE")
    return typed


def _typed(name: str, value: Any, kind: str) -> Any:
    if not isinstance(value, str):  # from the YAML config: already typed
        return value
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
        example = {"NUMBER_INTEGER": "20", "NUMBER_DOUBLE": "0.002", "BOOLEAN": "true", "LIST": '["a","b"]',
                   "STRUCT": '{"k": 1}'}[kind]  # fmt: skip
        raise UsageError(f"--param {name}={value} is not a {kind.lower().replace('_', ' ')}, e.g. {example}") from None
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
    import yaml

    with open(template, encoding="utf-8") as handle:
        return yaml.safe_load(handle).get("pipelineInfo", {}).get("name", "pipeline")


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


def submit(
    settings: VertexSettings,
    job_id: str = "",
    wait: bool = False,
    poll_seconds: float = 30.0,
    experiment: str = "",
    tensorboard: str = "",
) -> dict:
    """Creates the PipelineJob; with ``wait``, follows its state to the end. Returns name, link and state.

    ``experiment``: the run joins that Vertex AI Experiment (created if needed), where its parameters and metrics
    (the evaluate step's) line up with the other runs'. ``tensorboard``: the training job's logs go to that Vertex
    AI TensorBoard."""
    from dataclasses import replace

    check_settings(settings)
    if experiment:
        check_experiment(experiment)
    if tensorboard:
        check_tensorboard(tensorboard, settings)
        # the run's own output directory needs the job's id before the job exists: fixed here, as the client would
        job_id = job_id or f"{_pipeline_name(settings.template)}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"
        settings = replace(settings, parameters={**settings.parameters,
                                                 **tensorboard_parameters(settings, tensorboard, job_id)})  # fmt: skip
    pipeline_parameters(settings.template, settings.parameters)  # the user's mistakes first, before any network
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
        call(f"add the run to experiment {experiment}",
             lambda: found._metadata_context.add_context_children([job._get_context()]), settings)  # fmt: skip
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


def _adopt_created_job(job):
    """After a failed create: the job with this id if the server made it after all (it becomes ``job``'s resource),
    else None. The id is fixed before the first attempt, so a retry can never make a second job."""
    from google.api_core import exceptions

    try:
        job._gca_resource = job.api_client.get_pipeline_job(name=f"{job._parent}/pipelineJobs/{job.job_id}")
    except exceptions.NotFound:
        return None
    return job


def follow(job, settings: VertexSettings, poll_seconds: float) -> str:
    """Polls the job until it ends, printing each state change; raises ``VertexError`` unless it succeeded."""
    state, started = "", time.monotonic()
    while True:
        resource = call("follow the pipeline job", lambda: job.api_client.get_pipeline_job(name=job.resource_name),
                        settings)  # fmt: skip
        new_state = resource.state.name
        if new_state != state:
            state = new_state
            print(f"  {time.monotonic() - started:6.0f}s  {state}")
        if state in TERMINAL_STATES:
            break
        time.sleep(poll_seconds)
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


def check_cron(cron: str) -> None:
    """``[TZ=Area/City ]m h dom mon dow``: a one-line error otherwise."""
    parts = cron.split()
    if parts and re.match(r"^(CRON_)?TZ=", parts[0]):
        zone = parts[0].split("=", 1)[1]
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise UsageError(f"--cron {cron!r}: unknown time zone {zone!r}, e.g. TZ=Europe/Paris") from None
        parts = parts[1:]
    if len(parts) != 5 or not all(CRON_FIELD.match(part) for part in parts):
        raise UsageError(
            f"--cron {cron!r} is not a cron schedule: expected [TZ=Area/City] MINUTE HOUR DAY MONTH WEEKDAY, "
            'e.g. "TZ=Europe/Paris 0 3 * * 1"'
        )


def check_schedule_limits(cron: str, max_concurrent_runs: int | None, max_runs: int | None) -> None:
    """One-line errors for a wrong cron (when given) or run limit (None: not given)."""
    if cron:
        check_cron(cron)
    if max_concurrent_runs is not None and max_concurrent_runs < 1:
        raise UsageError(f"--max-concurrent-runs {max_concurrent_runs} must be at least 1")
    if max_runs is not None and max_runs < 1:
        raise UsageError(f"--max-runs {max_runs} must be at least 1 (leave it out for no limit)")


def create_schedule(
    settings: VertexSettings, cron: str, name: str, max_concurrent_runs: int = 1, max_runs: int | None = None
) -> dict:
    from google.cloud import aiplatform

    check_schedule_limits(cron, max_concurrent_runs, max_runs)
    check_settings(settings)
    pipeline_parameters(settings.template, settings.parameters)  # the user's mistakes first, before any network
    credentials = connect(settings)
    job = make_job(settings, credentials)
    display_name = name or f"{job_display_name(settings)}-retrain"  # the job is not created: it has no name to read
    schedule = aiplatform.PipelineJobSchedule(pipeline_job=job, display_name=display_name, credentials=credentials)
    existing = {s.resource_name for s in schedules_named(settings, display_name)}
    if existing:
        raise UsageError(
            f"a schedule named {display_name!r} exists ({', '.join(sorted(existing))}): change it with python -m "
            f"pipeline schedule update {display_name!r}, or pass another --name"
        )

    def created_after_all():  # a schedule has no id of ours: a new one of this name is the one a 503 hid
        new = [s for s in schedules_named(settings, display_name) if s.resource_name not in existing]
        if new:
            schedule._gca_resource = new[0]._gca_resource
            return schedule
        return None

    call(
        "create the schedule",
        lambda: schedule.create(
            cron=cron,
            max_concurrent_run_count=max_concurrent_runs,
            max_run_count=max_runs,
            service_account=settings.service_account or None,
            network=settings.network or None,
        ),
        settings,
        done=created_after_all,
    )
    print(f"scheduled {schedule.resource_name} ({display_name}): {cron}\n  its runs, steps and training jobs run as "
          f"{run_as(settings)}")  # fmt: skip
    return {"name": schedule.resource_name, "display_name": display_name, "cron": cron}


def schedules_named(settings: VertexSettings, display_name: str, what: str = "list the schedules") -> list:
    from google.cloud import aiplatform

    return call(
        what,
        lambda: aiplatform.PipelineJobSchedule.list(filter=f'display_name="{display_name}"'),
        settings,
    )


def update_schedule(
    settings: VertexSettings,
    schedule: str,
    cron: str = "",
    max_concurrent_runs: int | None = None,
    max_runs: int | None = None,
) -> dict:
    """Points an existing schedule at the pipeline as ``schedule create`` would build it now: the template (a
    recompiled ``pipeline.yaml``), parameters, pipeline root, labels, service account and network; and, when given,
    a new cron and run limits. A schedule otherwise keeps the pipeline spec it was created with."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform.compat.types import schedule as gca_schedule
    from google.protobuf import field_mask_pb2

    check_schedule_limits(cron, max_concurrent_runs, max_runs)
    check_settings(settings)
    pipeline_parameters(settings.template, settings.parameters)  # the user's mistakes first, before any network
    credentials = connect(settings)
    resource = resolve_schedule(settings, schedule)
    current = call("find the schedule", lambda: aiplatform.PipelineJobSchedule.get(schedule_id=resource), settings)
    # the request create would send, from the settings as they are now
    built = aiplatform.PipelineJobSchedule(
        pipeline_job=make_job(settings, credentials), display_name=current.display_name, credentials=credentials
    )._gca_resource.create_pipeline_job_request
    # the identity and network the schedule runs with stay as they are unless given again
    running = current._gca_resource.create_pipeline_job_request.pipeline_job
    built.pipeline_job.service_account = settings.service_account or running.service_account
    built.pipeline_job.network = settings.network or running.network
    update = gca_schedule.Schedule(name=resource, create_pipeline_job_request=built)
    paths = ["create_pipeline_job_request"]
    for path, value in (("cron", cron), ("max_concurrent_run_count", max_concurrent_runs),
                        ("max_run_count", max_runs)):  # fmt: skip
        if value:
            setattr(update, path, value)
            paths.append(path)
    updated = call(
        "update the schedule",
        lambda: current.api_client.update_schedule(schedule=update, update_mask=field_mask_pb2.FieldMask(paths=paths)),
        settings,
    )
    print(f"updated {resource} ({updated.display_name}): {', '.join(paths)}; next runs use {settings.template}")
    return {"name": resource, "updated": paths, "cron": updated.cron}


def list_schedules(settings: VertexSettings, name: str = "") -> list[dict]:
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    connect(settings)
    found = call(
        "list the schedules",
        lambda: aiplatform.PipelineJobSchedule.list(filter=f'display_name="{name}"' if name else None),
        settings,
    )
    rows = [
        {"name": s.resource_name, "display_name": s.display_name, "state": s.state.name, "cron": s.cron} for s in found
    ]
    for row in rows:
        print(f"{row['name']}  {row['display_name']}  {row['state']}  {row['cron']}")
    if not rows:
        print(f"no schedules in projects/{settings.project}/locations/{settings.region}")
    return rows


def change_schedule(settings: VertexSettings, action: str, schedule: str, catch_up: bool = False) -> str:
    """``pause``, ``resume`` or ``delete`` a schedule given by resource name, id or display name.

    ``catch_up`` (resume only): start the runs missed while paused. The aiplatform SDK's ``resume(catch_up=...)``
    never sends it, so the request goes through the API client directly."""
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    connect(settings)
    resource = resolve_schedule(settings, schedule)
    handle = call("find the schedule", lambda: aiplatform.PipelineJobSchedule.get(schedule_id=resource), settings)
    if action == "resume" and catch_up:
        call("resume the schedule", lambda: handle.api_client.resume_schedule(name=resource, catch_up=True), settings)
    else:
        call(f"{action} the schedule", getattr(handle, action), settings)
    print(f"{action}d {resource}" if action != "resume" else f"resumed {resource}")
    return resource


def resolve_schedule(settings: VertexSettings, schedule: str) -> str:
    if schedule.startswith("projects/"):
        return schedule
    if schedule.isdigit():
        return f"projects/{settings.project}/locations/{settings.region}/schedules/{schedule}"
    found = schedules_named(settings, schedule, "find the schedule")
    if not found:
        raise UsageError(
            f"no schedule named {schedule!r} in projects/{settings.project}/locations/{settings.region}: "
            "see python -m pipeline schedule list"
        )
    if len(found) > 1:
        names = ", ".join(s.resource_name for s in found)
        raise UsageError(f"{len(found)} schedules are named {schedule!r}: pass one resource name ({names})")
    return found[0].resource_name
