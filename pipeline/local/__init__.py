"""``run-local``: the whole DAG on this machine under ``kfp.local``. ``run.py`` runs it (and resumes an interrupted
run, with ``resume.py``'s keys), ``progress.py`` shows it, ``summary.py`` reports it, ``docker.py`` runs the steps
in their images."""

from pipeline.local.config import DEFAULT_WORK_DIR, DEMO_EPOCHS, SUMMARY_FILE, LocalRunConfig
from pipeline.local.identity import resolve_source, run_identity
from pipeline.local.run import run_local
from pipeline.local.summary import format_summary

__all__ = [
    "DEFAULT_WORK_DIR",
    "DEMO_EPOCHS",
    "SUMMARY_FILE",
    "LocalRunConfig",
    "format_summary",
    "resolve_source",
    "run_identity",
    "run_local",
]
