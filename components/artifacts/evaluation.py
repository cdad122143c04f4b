"""The evaluation artifact: the evaluate step's output folder, which the register step, run-local's summary and the
Model Registry's imported evaluation read.

It holds ``metrics.json`` (accuracy, top-k accuracy, per-class figures, the confusion matrix, ``ranking``, the
blessing and its reasons) and ``report.html`` (with ``--screenshot``, ``report.png``).
"""

from __future__ import annotations

METRICS_FILE = "metrics.json"
REPORT_FILE = "report.html"
SCREENSHOT_FILE = "report.png"


def metrics_path(folder: str) -> str:
    """The ``metrics.json`` of an evaluation folder (a local path or a ``gs://`` URI)."""
    return folder.rstrip("/") + "/" + METRICS_FILE
