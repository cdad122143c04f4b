"""Hyperparameter tuning: one search space, searched by a Vertex AI hyperparameter tuning job in the DAG, or locally
by ``run-local --tune N`` (and ``python -m components.train --tune-trials N``).

The space (``search_space``) is written with the Vertex AI SDK's parameter specs, which Google Cloud Pipeline
Components' ``serialize_parameters`` turns into the tuning job's ``studySpec.parameters``:

- ``learning_rate``: 1e-4 to 1e-2, on a log scale;
- ``per_replica_batch_size``: 16, 32 or 64;
- ``augment``: ``false`` or ``true``;
- ``fine_tune_blocks``: 1 to 6, with a pretrained backbone only (a model trained from scratch has no such phase);
- ``hparam_<name>``: each range a model of one's own declares for its hyperparameters (its ``SEARCH_SPACE``,
  ``components.models.source.declared_space``): a list of values, or a minimum and maximum on a linear or log scale.

Every other training parameter stays as the run gives it. A trial is a whole training run with its values, compared
on its last epoch's validation accuracy (``val_accuracy``, maximised); on Vertex AI it reports it with
``cloudml-hypertune``, as Vertex AI reads a trial's metric. Vertex AI passes a trial's values as ``--name=value``
flags (``python -m components.train.trial``); the local search draws its trials at random from the same specs
(seeded by ``--seed``), runs them one after the other, and keeps the best trial's model.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
from collections.abc import Mapping

from components.cli import UsageError
from components.modalities import modality_of, named
from components.models import BACKBONES
from components.models.source import split_pairs

log = logging.getLogger(__name__)

METRIC = "val_accuracy"  # the trial metric: the last epoch's validation accuracy
GOAL = "maximize"
TRIALS_FOLDER = "trials"  # the local search's trials, under the model folder until the best one is kept
TRIAL_FILE = "trial.json"  # a finished trial's values and metric (a search started again skips it)
NO_VALIDATION = (
    f"tuning compares trials on {METRIC}, and {{examples}} have no validation split: convert with "
    "--validation-fraction above 0"
)


BATCH_SIZES = (16, 32, 64)
HPARAM_PREFIX = "hparam_"  # a model's own hyperparameter, as the search names it: hparam_units


def search_space(
    model_name: str, weights: str, train_examples: int = 0, declared: Mapping | None = None, modality: str = "image"
) -> dict:
    """The parameters searched, as Vertex AI SDK parameter specs: augmentation only for images; fine-tuning depth
    only for a pretrained backbone (``weights`` other than ``none``); batch sizes up to the train split's
    ``train_examples`` (0: all of them); the ranges a model of one's own ``declared``
    (``components.models.source.declared_space``), as ``hparam_<name>``."""
    from google.cloud.aiplatform import hyperparameter_tuning as hpt

    batches = [size for size in BATCH_SIZES if not train_examples or size <= train_examples] or [BATCH_SIZES[0]]
    space = {
        "learning_rate": hpt.DoubleParameterSpec(min=1e-4, max=1e-2, scale="log"),
        "per_replica_batch_size": hpt.DiscreteParameterSpec(values=batches, scale="linear"),
    }
    if named(modality).augments:
        space["augment"] = hpt.CategoricalParameterSpec(values=["false", "true"])
    if model_name in BACKBONES and weights != "none":
        space["fine_tune_blocks"] = hpt.IntegerParameterSpec(min=1, max=6, scale="linear")
    for name, entry in (declared or {}).items():
        space[HPARAM_PREFIX + name] = parameter_spec(entry)
    return space


def parameter_spec(entry: Mapping):
    """A declared range as a Vertex AI SDK parameter spec: numbers to choose from are discrete, other values
    categorical (as text); a minimum and maximum an integer or a double range on its scale."""
    from google.cloud.aiplatform import hyperparameter_tuning as hpt

    if "values" in entry:
        values = entry["values"]
        if all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values):
            return hpt.DiscreteParameterSpec(values=sorted(set(values)), scale="linear")
        return hpt.CategoricalParameterSpec(values=[trial_text(value) for value in values])
    if isinstance(entry["min"], int) and isinstance(entry["max"], int):
        return hpt.IntegerParameterSpec(min=entry["min"], max=entry["max"], scale=entry["scale"])
    return hpt.DoubleParameterSpec(min=float(entry["min"]), max=float(entry["max"]), scale=entry["scale"])


def trial_text(value) -> str:
    """A value as a trial's flag carries it: ``true``, ``relu``, ``0.5``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def study_spec_parameters(space: Mapping) -> list[dict]:
    """The tuning job's ``study_spec_parameters``: a ``search_space`` as GCPC's ``serialize_parameters`` writes it
    (``components.vertex_sdk.parameter_specs``: the specification step cannot import GCPC), enums by name. (GCPC
    writes their numbers, which a pipeline parameter carries as a JSON number, a double: ``2.0``, which the launcher's
    proto conversion refuses for an enum. A name is a string either way.)"""
    from components.vertex_sdk import parameter_specs

    return parameter_specs(space)


def space_for(model_name: str, weights: str, examples_dir: str) -> dict:
    """``search_space`` for a run: its model (``auto`` resolved for the examples), its weights choice, the size of its
    train split (the examples' ``stats.json``, local or ``gs://``)."""
    from components.models import load, parse_ref, resolve_auto
    from components.models.source import declared_space
    from components.schema import read_stats
    from components.train.transfer import resolve_weights_choice

    stats = read_stats(examples_dir)
    if not stats.counts.get("validation"):  # before any trial trains: every one of them would end on this
        raise UsageError(NO_VALIDATION.format(examples=examples_dir))
    modality = modality_of(stats).name
    ref = resolve_auto(parse_ref(model_name), modality)
    declared = declared_space(load(ref)) if ref.kind != "builtin" else {}  # (a model of one's own imports Keras)
    weights = resolve_weights_choice(weights, ref.text)
    return search_space(ref.text, weights, stats.counts["train"], declared, modality)


def sample(space: Mapping, count: int, seed: int) -> list[dict]:
    """``count`` trials' values drawn at random from ``space`` (a random search, as Vertex AI's RANDOM_SEARCH):
    a double uniformly on its scale, an integer uniformly, a discrete or categorical value with equal chances."""
    import numpy as np

    rng = np.random.default_rng(seed)
    trials = []
    for _ in range(count):
        values = {}
        for name, spec in space.items():
            kind = type(spec).__name__
            if kind == "DoubleParameterSpec":
                if spec.scale == "log":
                    value = math.exp(rng.uniform(math.log(spec.min), math.log(spec.max)))
                else:
                    value = rng.uniform(spec.min, spec.max)
                values[name] = min(max(float(f"{value:.3g}"), spec.min), spec.max)  # 3 digits, as a user types
            elif kind == "IntegerParameterSpec" and spec.scale == "log":
                values[name] = round(math.exp(rng.uniform(math.log(spec.min), math.log(spec.max))))
            elif kind == "IntegerParameterSpec":
                values[name] = int(rng.integers(spec.min, spec.max, endpoint=True))
            else:  # DiscreteParameterSpec, CategoricalParameterSpec
                values[name] = spec.values[int(rng.integers(len(spec.values)))]
        trials.append(values)
    return trials


def apply(config, values: Mapping):
    """The training config with a trial's values (as Vertex AI passes them, strings, or as ``sample`` draws them); a
    model's own hyperparameters among them join its ``hparams`` (over the run's own values of them)."""
    changes: dict = {}
    hparams = split_pairs(config.hparams)
    for name, value in values.items():
        if name.startswith(HPARAM_PREFIX):
            hparams[name[len(HPARAM_PREFIX) :]] = trial_text(value)
            changes["hparams"] = tuple(f"{key}={text}" for key, text in hparams.items())
        elif name == "augment":
            text = str(value).strip().lower()
            if text not in ("true", "false"):
                raise UsageError(f"--augment={value}: a trial's augment is true or false")
            changes[name] = text == "true"
        elif name in ("per_replica_batch_size", "fine_tune_blocks"):
            changes[name] = int(float(value))  # a discrete value arrives as a double: 32.0
        elif name == "learning_rate":
            changes[name] = float(value)
        else:
            raise UsageError(
                f"--{name}={value}: not a tuned parameter (those are {', '.join(TUNED)} and {HPARAM_PREFIX}<name>)"
            )
    return dataclasses.replace(config, **changes)


TUNED = ("learning_rate", "per_replica_batch_size", "augment", "fine_tune_blocks")


def trial_flags(values: Mapping) -> list[str]:
    """A trial's values as Vertex AI appends them to the trial's command: ``--learning_rate=0.003``."""
    return [f"--{name}={trial_text(value)}" for name, value in values.items()]


def split_trial_flags(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(the tuned values among ``argv``'s ``--name=value`` flags, the other arguments)."""
    values, rest = {}, []
    for arg in argv:
        name, equals, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if equals and (name in TUNED or name.startswith(HPARAM_PREFIX)):
            values[name] = value
        else:
            rest.append(arg)
    return values, rest


def trial_metric(result: Mapping) -> float:
    """A finished training run's trial metric: its last epoch's validation accuracy."""
    final = result["final"]
    if METRIC not in final:
        raise UsageError(NO_VALIDATION.format(examples="these examples"))
    return float(final[METRIC])


def report(result: Mapping) -> float:
    """Reports a trial's metric as Vertex AI reads it (``cloudml-hypertune``: a JSON line in
    ``$CLOUD_ML_HP_METRIC_FILE``, by default ``/tmp/hypertune/output.metrics``); returns it."""
    import hypertune

    value = trial_metric(result)
    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag=METRIC, metric_value=value, global_step=result["epochs_trained"]
    )
    return value


def search(config, trials: int, env: Mapping[str, str] | None = None) -> dict:
    """The local search: ``trials`` training runs with values drawn from ``search_space``, one after the other;
    the best one's model (highest ``val_accuracy``; the earlier trial on a tie) becomes the model in
    ``config.model_dir``, with ``tuning.json`` beside it. A finished trial is not run again when the search is
    started again (each trial's own checkpoints resume an interrupted one). Returns the best run's result, with
    ``tuning`` (what ``tuning.json`` holds)."""
    from components.artifacts.model import Tuning
    from components.schema import read_stats
    from components.storage import write_json
    from components.train.config import resolve_output_dirs
    from components.train.core import activated_backend, run

    env = os.environ if env is None else env
    if trials < 1:
        raise UsageError(f"--tune-trials {trials}: give 1 or more trials (0: no search)")
    dirs = resolve_output_dirs(config, env)
    # the backend first: a model of one's own, imported for the ranges it declares, imports Keras
    activated_backend(config, env, modality_of(read_stats(config.examples_dir)).name)
    space = space_for(config.model_name, config.weights, config.examples_dir)
    drawn = sample(space, trials, config.seed)
    done = []
    for number, values in enumerate(drawn, 1):
        folder = os.path.join(dirs.model_dir, TRIALS_FOLDER, str(number))
        kept = os.path.join(folder, TRIAL_FILE)
        if os.path.exists(kept):
            with open(kept) as handle:
                done.append(json.load(handle))
            log.info("trial %d of %d finished before: %s %.4f", number, trials, METRIC, done[-1][METRIC])
            continue
        log.info("trial %d of %d: %s", number, trials, " ".join(trial_flags(values)))
        trial_config = dataclasses.replace(
            apply(config, values),
            model_dir=os.path.join(folder, "model"),
            checkpoint_dir=os.path.join(dirs.checkpoint_dir, f"trial-{number}"),
            tensorboard_dir=os.path.join(dirs.tensorboard_dir, f"trial-{number}"),
        )
        result = run(trial_config, env)
        entry = {"trial": number, "parameters": values, METRIC: trial_metric(result), "result": _facts(result)}
        write_json(kept, entry)
        done.append(entry)
        log.info("trial %d of %d: %s %.4f", number, trials, METRIC, entry[METRIC])
    best = max(done, key=lambda entry: (entry[METRIC], -entry["trial"]))
    best_model = os.path.join(dirs.model_dir, TRIALS_FOLDER, str(best["trial"]), "model")
    for name in os.listdir(best_model):  # the best trial's files become the model's
        target = os.path.join(dirs.model_dir, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(os.path.join(best_model, name), target)
    shutil.rmtree(os.path.join(dirs.model_dir, TRIALS_FOLDER))
    tuning = Tuning(
        metric=METRIC,
        goal=GOAL,
        space=study_spec_parameters(space),
        trials=[{key: entry[key] for key in ("trial", "parameters", METRIC)} for entry in done],
        best={key: best[key] for key in ("trial", "parameters", METRIC)},
    )
    tuning.write(dirs.model_dir)
    log.info(
        "tuning: trial %d of %d kept (%s %.4f): %s",
        best["trial"],
        trials,
        METRIC,
        best[METRIC],
        " ".join(trial_flags(best["parameters"])),
    )
    return {**best["result"], "model_dir": dirs.model_dir, "tuning": tuning.to_dict()}


def _facts(result: Mapping) -> dict:
    """What a trial's run result keeps (JSON values only)."""
    return json.loads(json.dumps({key: value for key, value in result.items() if key != "distribution"}, default=str))


def best_trial(trials: list[dict]) -> dict:
    """The best of a Vertex AI tuning job's trials (REST form: ``id``, ``state``, ``parameters``,
    ``finalMeasurement.metrics``): the succeeded one with the highest ``val_accuracy``, the lower id on a tie."""
    scored = []
    for trial in trials:
        metrics = {m.get("metricId"): m.get("value") for m in trial.get("finalMeasurement", {}).get("metrics", [])}
        if trial.get("state") == "SUCCEEDED" and metrics.get(METRIC) is not None:
            scored.append((float(metrics[METRIC]), -int(trial["id"]), trial))
    if not scored:
        raise RuntimeError(f"no trial of the tuning job succeeded with a {METRIC}: see its trials' logs")
    return max(scored, key=lambda item: item[:2])[2]


def trial_parameters(trial: dict) -> dict:
    """A Vertex AI trial's values: ``{parameterId: value}``."""
    return {p["parameterId"]: p["value"] for p in trial.get("parameters", [])}


def worker_pool_specs(
    image: str, machine: Mapping, boot_disk: Mapping, examples_uri: str, flags: list[str]
) -> list[dict]:
    """The trial job's one worker pool: ``machine`` (a ``machine_spec``) with ``boot_disk`` (a ``disk_spec``: the
    one its machine takes), our image running
    ``python -m components.train.trial`` on the examples with the run's fixed training ``flags``; Vertex AI appends
    each trial's ``--name=value`` flags and sets ``AIP_MODEL_DIR`` to ``<base_output_directory>/<trial id>/model``."""
    return [
        {
            "machine_spec": dict(machine),
            # (a pipeline constant's numbers arrive as doubles, which the job's protos refuse for a count)
            "disk_spec": {**boot_disk, "boot_disk_size_gb": int(boot_disk["boot_disk_size_gb"])},
            "replica_count": 1,
            "container_spec": {
                "image_uri": image,
                "command": ["python", "-m", "components.train.trial"],
                "args": ["--examples", examples_uri, *flags],
            },
        }
    ]
