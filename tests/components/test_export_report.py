"""The export publishes evaluate's report led by the served model's figure: the accuracy clients get from the
exported SavedModel, measured by the export, above the evaluation's own verdict and figures."""

from __future__ import annotations

import os

from components.artifacts.evaluation import REPORT_FILE
from components.artifacts.records import METRICS
from components.artifacts.served import SERVED_MARKER
from components.export.common import ExportConfig, served_report
from tests.conftest import made_up_evaluation, run_cli

EVALUATED = f"<html><body><h1>Evaluation of m on the test split</h1>{SERVED_MARKER}<p class=verdict>Blessed</p>"


def evaluation(folder, accuracy: float, copies: dict | None = None, split: str = "test") -> str:
    os.makedirs(folder)
    checks = {"checks": [{"check": "leakage across splits", "test_copies": copies}]} if copies else None
    figures = made_up_evaluation(accuracy=accuracy, num_examples=200, data_checks=checks, split=split)
    METRICS.write(str(folder), figures)
    with open(os.path.join(folder, REPORT_FILE), "w") as handle:
        handle.write(EVALUATED)
    return str(folder)


def test_the_report_leads_with_the_savedmodel_on_the_files_as_sent(tmp_path):
    config = ExportConfig(
        "m", "e", str(tmp_path), evaluation_dir=evaluation(tmp_path / "ev", 0.99, {"found": 3, "compared": 200})
    )
    record = {
        "raw_files": {"num_files": 200, "test_accuracy": 0.94, "tfrecord_test_accuracy": 0.94},
        "formats": {"saved_model": {"test_accuracy": 0.99}, "tflite_int8": {"test_accuracy": 0.945}},
    }
    written = served_report(config, record)
    with open(written["report_html"], encoding="utf-8") as handle:
        page = handle.read()
    served = page.index(
        "Served model: test accuracy 0.9400: the SavedModel on the 200 test files as clients send "
        "them; 3 of the 200 test examples have a near-copy in train, which flatters it"
    )
    assert served < page.index("Blessed") and SERVED_MARKER not in page
    # by hand: sqrt(0.94 * 0.06 / 200) = 0.0168; the trained model's 0.99 and the SavedModel on its TFRecords differ
    # by more, TFLite int8's 0.945 does not
    assert (
        "beyond the test split's noise (±0.0168): the trained model 0.9900, the SavedModel on the TFRecords 0.9900</p>"
    ) in page
    assert served_report(ExportConfig("m", "e", str(tmp_path / "o")), record) == {}  # no evaluation, no report


def test_what_the_export_measured_is_shown_as_text_not_markup(tmp_path):
    config = ExportConfig("m", "e", str(tmp_path), evaluation_dir=evaluation(tmp_path / "ev", 0.9))
    record = {"raw_files": {"num_files": 200, "test_accuracy": 0.9, "refused_formats": {"<b>webp</b>": 2}}}
    with open(served_report(config, record)["report_html"], encoding="utf-8") as handle:
        page = handle.read()
    assert "(2 &lt;b&gt;webp&lt;/b&gt; refused)" in page and "<b>webp</b>" not in page


def test_an_evaluation_folder_without_its_files_is_a_one_line_error(tmp_path, converted, trained):
    result = run_cli(
        "components.export",
        "--model-dir",
        trained[0],
        "--examples",
        converted[0],
        "--output",
        str(tmp_path / "o"),
        "--evaluation",
        str(tmp_path),
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: evaluation {tmp_path} has no {METRICS.name}: pass the evaluate step's output"
    ]
    assert not os.path.exists(tmp_path / "o" / "export.json")
    validation = evaluation(tmp_path / "validation", 0.9, split="validation")
    result = run_cli(
        "components.export",
        "--model-dir",
        trained[0],
        "--examples",
        converted[0],
        "--output",
        str(tmp_path / "o"),
        "--evaluation",
        validation,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --evaluation {validation} evaluated the validation split: pass an evaluation of the test split "
        "(python -m components.evaluate without --split)"
    ]
