"""The check-data step as a lightweight KFP component: a thin wrapper over ``components.check_data.core``."""

from typing import List

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output


def check_data(
    examples: Input[Dataset],
    statistics: Output[Artifact],
    metrics: Output[Metrics],
    baseline: str,
    accept_data_change: bool,
    data_thresholds: List[str],
) -> str:
    """Compares the new version's statistics with those kept with the model in service (``baseline``: its
    registered folder; "" for none); writes ``data_checks.json`` and the version's statistics into ``statistics``
    (the register step keeps them with the model), each check's value as a KFP metric. A blocking check fails the
    step, so that nothing trains, with every reason on a line of its own; returns the outcome as a JSON line."""
    import json

    from components.check_data.config import CheckDataConfig
    from components.check_data.core import run
    from components.check_data.thresholds import parse_thresholds
    from components.cli import start_step
    from components.storage import write_json

    start_step()
    result = run(
        CheckDataConfig(
            examples_dir=examples.path,
            output_dir=statistics.path,
            baseline=baseline,
            accept_data_change=accept_data_change,
            thresholds=parse_thresholds(data_thresholds),
        )
    )
    for found in result.checks:
        if found["value"] is not None:
            name = found["check"].replace(" ", "_").replace("-", "_")
            metrics.log_metric(f"{name}_{found['split']}" if found.get("split") else name, found["value"])
    metrics.log_metric("data_warnings", len(result.warnings))
    metrics.log_metric("data_accepted_blocks", len(result.blocking) if result.accepted_data_change else 0)
    write_json(metrics.path, metrics.metadata)  # (kfp.local's cache takes an output without a file for a lost one)
    statistics.metadata.update(
        {"blocking": result.blocking, "warnings": result.warnings, "accepted_data_change": result.accepted_data_change}
    )
    outcome = "accepted" if result.accepted_data_change else "warned" if result.warnings else "passed"
    return json.dumps({"outcome": outcome, "warnings": result.warnings, "blocking": result.blocking})


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(check_data, base_image=base_image, install_kfp_package=False)
