"""The evaluation report as a browser draws it: a headless Chromium saves ``report.png`` beside ``report.html`` and
says whether every picture loaded (``make test-browser``, which installs Debian's chromium when it is missing)."""

from __future__ import annotations

import os

import pytest

from components.browser import check_page, drawn, find_browser, screenshot_report
from components.evaluate.core import EvaluateConfig, run

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> str:
    found = find_browser()
    assert found, (
        "no headless browser: run make test-browser (it installs Debian's chromium), or set TPU_PIPELINE_BROWSER"
    )
    return found


def test_evaluate_draws_the_report_beside_it_with_every_picture_loaded(converted, trained, tmp_path, browser):
    examples_dir, _ = converted
    model_dir, _ = trained
    output = tmp_path / "evaluation"
    metrics = run(EvaluateConfig(examples_dir, model_dir, str(output), baseline=model_dir, screenshot=True))
    shot = metrics["report_screenshot"]
    assert shot["path"] == str(output / "report.png") and os.path.isfile(shot["path"])  # beside report.html
    with open(shot["path"], "rb") as handle:
        picture = drawn(handle.read())
    assert not picture["blank"] and picture["width"] >= 1000 and picture["height"] >= 1000
    wrong = sum(sum(row) - row[i] for i, row in enumerate(metrics["confusion_matrix"]))
    # the confusion matrix and each misclassified image, all loaded; the loss and accuracy curves drawn
    assert shot["images"] == shot["loaded"] == 1 + min(wrong, 24)
    assert shot["svgs"] == 2


def test_the_page_check_sees_a_picture_that_does_not_load_and_a_blank_page(tmp_path, browser):
    """The checks can fail: a picture whose data is not an image, and a page with nothing on it."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, format="PNG")
    good = "data:image/png;base64," + __import__("base64").b64encode(buffer.getvalue()).decode()
    page = tmp_path / "report.html"
    page.write_text(
        f'<!DOCTYPE html><html><body><img src="{good}" alt="fine">'
        '<img src="data:image/png;base64,bm90IGEgcGljdHVyZQ==" alt="broken"></body></html>'
    )
    check = check_page(str(page), browser)
    assert (check["images"], check["loaded"], check["broken"]) == (2, 1, ["broken"])
    page.write_text("<!DOCTYPE html><html><body></body></html>")
    assert screenshot_report(str(page), browser)["blank"] is True


def test_run_local_draws_the_report_into_the_evaluate_steps_artifact(tmp_path, browser):
    """``run-local --screenshot``: once the DAG is done, report.png lies beside report.html in the evaluate step's
    KFP artifact, drawn, every picture loaded; the summary names it."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    work = tmp_path / "work"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run-local",
            "--work-dir",
            str(work),
            "--demo-per-class",
            "20",
            "--image-size",
            "16",
            "--epochs",
            "2",
            "--min-accuracy",
            "0",
            "--screenshot",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    with open(work / "summary.json") as handle:
        summary = json.load(handle)
    shot = summary["report_screenshot"]
    # evaluate's report, drawn in its own artifact (a blessed run's summary names the export's copy, which is sealed)
    report = os.path.join(os.path.dirname(summary["metrics_json"]), "report.html")
    assert shot["path"] == os.path.join(os.path.dirname(report), "report.png")
    assert report.startswith(summary["pipeline_root"]) and report.endswith("/evaluate/evaluation/report.html")
    assert not shot["blank"] and shot["images"] == shot["loaded"] >= 1
    with open(shot["path"], "rb") as handle:
        assert not drawn(handle.read())["blank"]
    line = next(line for line in result.stdout.splitlines() if line.strip().startswith("screenshot"))
    assert line.split(None, 1)[1] == f"{shot['path']} ({shot['loaded']} of {shot['images']} pictures loaded)"
