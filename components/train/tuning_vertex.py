"""The Vertex AI side of tuning: the trial job a HyperparameterTuningJob runs, and its best trial read back."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from components.params import TRAIN, flag_of
from components.train.tuning import (
    METRIC,
    best_trial,
    space_for,
    study_spec_parameters,
    trial_parameters,
    worker_pool_specs,
)

log = logging.getLogger(__name__)


def training_flags(params: Mapping) -> list[str]:
    """The training command's flags for ``params`` (TRAIN's names): a switch when true, a list as the flag repeated
    (``--hparam units=64 --hparam dropout=0.3``), else ``--flag value``."""
    flags = []
    for name, value in params.items():
        if isinstance(value, bool):
            flags += [flag_of(name, TRAIN)] if value else []
        elif isinstance(value, (list, tuple)):
            flags += [part for item in value for part in (flag_of(name, TRAIN), str(item))]
        else:
            flags += [flag_of(name, TRAIN), str(value)]
    return flags


def trial_job(
    examples_uri: str, trials_uri: str, image: str, machine: Mapping, boot_disk: Mapping, params: Mapping
) -> tuple:
    """(the worker pool specs, the study's parameters, the base output directory) of the tuning job for a run whose
    training parameters are ``params``: ImageNet weights kept in the bucket as the train step keeps them."""
    from components.train.transfer import weights_cache_for

    cache = weights_cache_for(trials_uri)
    flags = [*training_flags(params), *(["--weights-cache", cache] if cache else [])]
    specs = worker_pool_specs(image, machine, boot_disk, examples_uri, flags)
    parameters = study_spec_parameters(space_for(params["model_name"], params["weights"], examples_uri))
    log.info(
        "tuning job: trials of %s over %s, in %s",
        params["model_name"],
        ", ".join(p["parameter_id"] for p in parameters),
        trials_uri,
    )
    return specs, parameters, trials_uri


def job_name(gcp_resources: str) -> str:
    """The tuning job's resource name (``projects/.../hyperparameterTuningJobs/ID``) in GCPC's ``gcp_resources``."""
    resources = json.loads(gcp_resources).get("resources", [])
    uris = [r["resourceUri"] for r in resources if r.get("resourceType") == "HyperparameterTuningJob"]
    if not uris or "/v1/" not in uris[0]:
        raise ValueError(f"no HyperparameterTuningJob in gcp_resources: {gcp_resources}")
    return uris[0].split("/v1/", 1)[1]


def keep_best_trial(gcp_resources: str, base_output_directory: str, model, settings) -> str:
    """Reads the tuning job's trials, and makes ``model`` (a KFP Model output) the best trial's model folder
    (``<base_output_directory>/<trial id>/model``, as Vertex AI's ``AIP_MODEL_DIR`` for it); returns the best trial's
    values and metric as JSON."""
    from google.cloud import aiplatform

    from components.vertex_client import call, connect

    connect(settings)
    name = job_name(gcp_resources)
    job = call("read the tuning job", lambda: aiplatform.HyperparameterTuningJob.get(resource_name=name), settings)
    trials = [json.loads(type(t).to_json(t, use_integers_for_enums=False)) for t in job.trials]
    best = best_trial(trials)
    scored = sum(1 for t in trials if t.get("state") == "SUCCEEDED")
    model.uri = f"{base_output_directory.rstrip('/')}/{best['id']}/model"
    values = trial_parameters(best)
    metric = next(m["value"] for m in best["finalMeasurement"]["metrics"] if m["metricId"] == METRIC)
    model.metadata.update({"framework": "keras", "tuning_job": name, "trial": best["id"], METRIC: metric, **values})
    log.info(
        "tuning job %s: trial %s of %d succeeded (%d tried) is the best, %s %.4f: %s",
        name,
        best["id"],
        scored,
        len(trials),
        METRIC,
        metric,
        json.dumps(values),
    )
    return json.dumps({"trial": best["id"], "parameters": values, METRIC: metric})
