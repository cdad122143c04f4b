"""Each step's own checks of the values a run gives the DAG's parameters, made before anything runs: by run-local on
its flags, and by submit and schedule on ``--param`` (on Vertex AI, a step would make them minutes into the run)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from components.cli import UsageError


def check_step_values(values: Mapping[str, Any]) -> None:
    """One line (``UsageError``) for the first value a step would refuse; a step's config checks them on creation.
    ``values``: parameter names as the DAG and ``components.params`` spell them; None or absent: the default."""
    from components.check_data.config import CheckDataConfig, parse_thresholds
    from components.convert.config import check_split_options, check_text_options
    from components.evaluate.config import EvaluateConfig
    from components.imaging import AUTO_IMAGE_SIZE, image_size_mistake
    from components.params import CONVERT, EVALUATE, TEXT, TRAIN, defaults
    from components.train.config import TrainConfig

    def given(names) -> dict:
        return {name: values[name] for name in names if values.get(name) is not None}

    size = int(values.get("image_size") or AUTO_IMAGE_SIZE)
    if size != AUTO_IMAGE_SIZE and (mistake := image_size_mistake(size)):
        raise UsageError(f"--image-size {mistake}")
    split = ("validation_fraction", "test_fraction", "max_bad_fraction", "num_shards")
    check_split_options(argparse.Namespace(**{**defaults({n: CONVERT[n] for n in split}), **given(split)}), "examples")
    check_text_options(argparse.Namespace(**{**defaults(TEXT), **given(TEXT)}))
    TrainConfig(examples_dir="", **given(TRAIN))
    EvaluateConfig(examples_dir="", model_dir="", output_dir="", **given(set(EVALUATE) - {"baseline"}))
    if values.get("export_formats") is not None:
        from components.artifacts.exported import check_formats

        check_formats(values["export_formats"])
    if values.get("data_thresholds"):  # (each name and value, as the step will take them)
        CheckDataConfig(examples_dir="", output_dir="", thresholds=parse_thresholds(values["data_thresholds"]))
