"""Every step runs on its own from the command line; the demo data ships with the install."""

from __future__ import annotations

import os

import pytest
from PIL import Image

from components.demo_data import write_digits
from tests.conftest import run_cli


@pytest.mark.parametrize("step", ["convert", "train", "evaluate", "export"])
def test_each_component_has_a_help(step):
    result = run_cli(f"components.{step}", "--help")
    assert result.returncode == 0, result.stderr
    assert f"python -m components.{step}" in result.stdout


def test_pipeline_cli_help_lists_its_commands():
    result = run_cli("pipeline", "--help")
    assert result.returncode == 0
    assert "compile" in result.stdout and "run-local" in result.stdout


def test_missing_required_flag_is_a_usage_error():
    result = run_cli("components.convert")
    assert result.returncode == 2
    assert "--source" in result.stderr


def test_demo_digits_are_written_as_a_folder_of_jpegs_per_class(tmp_path):
    root = tmp_path / "digits"
    assert write_digits(str(root)) == 1797
    assert sorted(os.listdir(root)) == [str(d) for d in range(10)]
    files = [os.path.join(root, d, f) for d in os.listdir(root) for f in os.listdir(root / d)]
    assert len(files) == 1797 and all(f.endswith(".jpg") for f in files)
    with Image.open(files[0]) as image:
        assert image.format == "JPEG" and image.size == (32, 32)
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".digits-")]
