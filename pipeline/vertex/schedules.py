"""Vertex AI schedules: the pipeline run on a cron to retrain, listed, updated, paused, resumed and deleted."""

from __future__ import annotations

import re

from components.cli import UsageError
from components.vertex_client import VertexSettings, call, check_settings, connect, run_as
from components.vertex_sdk import resource_of, set_resource
from pipeline.model_code import with_model_code
from pipeline.vertex.jobs import check_project, check_run, job_display_name, make_job

CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


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
    settings: VertexSettings,
    cron: str,
    name: str,
    max_concurrent_runs: int = 1,
    max_runs: int | None = None,
    preflight: bool = True,
) -> dict:
    check_schedule_limits(cron, max_concurrent_runs, max_runs)
    check_settings(settings)
    check_run(settings)  # the user's mistakes first, before any network (and the client's seconds of import)
    from google.cloud import aiplatform

    if preflight:
        check_project(settings)
    settings = with_model_code(settings)
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
            set_resource(schedule, resource_of(new[0]))
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
    print(
        f"scheduled {schedule.resource_name} ({display_name}): {cron}\n  its runs, steps and training jobs run as "
        f"{run_as(settings)}"
    )
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
    preflight: bool = True,
) -> dict:
    """Points an existing schedule at the pipeline as ``schedule create`` would build it now: the template (a
    recompiled ``pipeline.yaml``), parameters, pipeline root, labels, service account and network; and, when given,
    a new cron and run limits. A schedule otherwise keeps the pipeline spec it was created with."""
    check_schedule_limits(cron, max_concurrent_runs, max_runs)
    check_settings(settings)
    check_run(settings)  # the user's mistakes first, before any network (and the client's seconds of import)
    from google.cloud import aiplatform
    from google.cloud.aiplatform.compat.types import schedule as gca_schedule
    from google.protobuf import field_mask_pb2

    if preflight:
        check_project(settings)
    settings = with_model_code(settings)
    credentials = connect(settings)
    resource = resolve_schedule(settings, schedule)
    current = call("find the schedule", lambda: aiplatform.PipelineJobSchedule.get(schedule_id=resource), settings)
    # the request create would send, from the settings as they are now
    built = resource_of(
        aiplatform.PipelineJobSchedule(
            pipeline_job=make_job(settings, credentials), display_name=current.display_name, credentials=credentials
        )
    ).create_pipeline_job_request
    # the identity and network the schedule runs with stay as they are unless given again
    running = resource_of(current).create_pipeline_job_request.pipeline_job
    built.pipeline_job.service_account = settings.service_account or running.service_account
    built.pipeline_job.network = settings.network or running.network
    update = gca_schedule.Schedule(name=resource, create_pipeline_job_request=built)
    paths = ["create_pipeline_job_request"]
    for path, value in (("cron", cron), ("max_concurrent_run_count", max_concurrent_runs), ("max_run_count", max_runs)):
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
    check_settings(settings, need_root=False)  # (before the client's seconds of import)
    from google.cloud import aiplatform

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
    check_settings(settings, need_root=False)  # (before the client's seconds of import)
    from google.cloud import aiplatform

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
