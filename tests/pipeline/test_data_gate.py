"""The data checks as the DAG's gate, under kfp.local: a run whose data the checks block stops before training, with
its reasons, and the registry keeps its version in service. The registry's version 1 is made by hand here (the
statistics of a three-class conversion beside a stand-in export), so that no model trains: the run ends at the
check-data step."""

from __future__ import annotations

import json
import os
import shutil

from tests.conftest import CLASSES, IN_MEMORY, run_cli, write_image_folder


def test_a_blocked_run_stops_before_training_and_registers_nothing(tmp_path):
    from components.artifacts.registry import FolderRegistry
    from components.check_data.core import CheckDataConfig, run
    from components.convert.core import ConvertConfig
    from components.convert.core import run as convert

    source = write_image_folder(tmp_path / "photos", per_class=20)
    examples_dir = str(tmp_path / "served-examples")  # the data the model in service learned from: every class
    convert(ConvertConfig(source=source, output_dir=examples_dir, image_size=16, pipeline_args=IN_MEMORY))
    served = tmp_path / "served-export"
    run(CheckDataConfig(examples_dir=examples_dir, output_dir=str(served)))  # its statistics, as export keeps them
    registry = FolderRegistry(str(tmp_path / "registry"))
    registry.push(str(served), {"note": "a stand-in for a blessed export"})
    before = sorted(os.listdir(registry.root)), registry.default().number
    shutil.rmtree(os.path.join(source, CLASSES[-1]))  # a class the model in service knows is gone
    work = tmp_path / "work"
    result = run_cli(
        "pipeline",
        "run-local",
        "--source",
        source,
        "--registry",
        registry.root,
        "--work-dir",
        str(work),
        "--image-size",
        "16",
        "--epochs",
        "1",
    )
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    reasons = lines[lines.index("error: step check-data failed: the new data is blocked before training:") + 1 :]
    assert reasons[0].startswith(f"  label set: gone {CLASSES[-1]}: the model in service cannot be compared")
    assert (
        reasons[1].startswith(f"  class mix (train): class {CLASSES[-1]} ")
        and "% -> 0.0%; Jensen-Shannon " in reasons[1]
    )
    assert reasons[2].startswith("  (pass --accept-data-change") and len(reasons) == 3
    assert "Traceback" not in result.stderr
    assert "  check-data: failure (" in result.stdout and "  train: running" not in result.stdout
    summary = json.loads((work / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("step check-data failed:")
    (run_dir,) = os.listdir(work / "artifacts")
    assert "train" not in os.listdir(work / "artifacts" / run_dir)
    assert (sorted(os.listdir(registry.root)), registry.default().number) == before
