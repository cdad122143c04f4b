"""Vertex AI Pipelines from the command line: ``jobs.py`` submits and follows a run, ``schedules.py`` runs it on a
cron to retrain; both go through the client the steps share (``components.vertex_client``)."""

from pipeline.vertex.jobs import check_project, check_run, parse_pairs, pipeline_parameters, submit
from pipeline.vertex.schedules import change_schedule, create_schedule, list_schedules, update_schedule

__all__ = [
    "change_schedule",
    "check_project",
    "check_run",
    "create_schedule",
    "list_schedules",
    "parse_pairs",
    "pipeline_parameters",
    "submit",
    "update_schedule",
]
