"""The tuning steps of the DAG on Vertex AI, around Google Cloud Pipeline Components' HyperparameterTuningJobRunOp:
the job's specification before it (the trials' worker pool, the search space), the best trial's model after it."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output


def tuning_spec(
    examples: Input[Dataset],
    trials: Output[Artifact],
    image: str,
    machine: dict,
    boot_disk: dict,
    hosts: int,
    model_name: str,
    hparams: list,
    epochs: int,
    weights: str,
    fine_tune_epochs: int,
    fine_tune_blocks: int,
    fine_tune_learning_rate: float,
    per_replica_batch_size: int,
    learning_rate: float,
    lr_schedule: str,
    precision: str,
    backend: str,
    jit_compile: bool,
    steps_per_execution: int,
    augment: bool,
    seed: int,
) -> NamedTuple(
    "TuningSpec", [("worker_pool_specs", list), ("study_spec_parameters", list), ("base_output_directory", str)]
):
    """The tuning job's trials: each runs ``python -m components.train.trial`` in ``image`` on ``machine`` (a
    ``machine_spec``, with ``boot_disk`` its ``disk_spec``) with the run's training parameters, its own values
    appended by Vertex AI; their models go under this step's ``trials`` folder (``<trial id>/model``). The search
    space follows the model: fine-tuning depth only for a pretrained backbone, and the ranges a model of one's own
    declares."""
    given = dict(locals())  # (the parameters, read before anything else is named here)
    from components.cli import start_step
    from components.keras_backend import activate_backend
    from components.params import TRAIN
    from components.train.tuning_vertex import trial_job

    start_step()
    activate_backend("jax")  # a model of one's own, read for the ranges it declares, imports Keras: JAX's is quick

    class TuningSpec(NamedTuple):
        worker_pool_specs: list
        study_spec_parameters: list
        base_output_directory: str

    return TuningSpec(
        *trial_job(
            examples.uri,
            trials.uri,
            image,
            machine,
            boot_disk,
            {**{name: given[name] for name in TRAIN}, "hparams": list(hparams), "hosts": hosts},
        )
    )


def best_trial(
    gcp_resources: str,
    base_output_directory: str,
    model: Output[Model],
    project: str = "{{$.pipeline_google_cloud_project_id}}",
    location: str = "{{$.pipeline_google_cloud_location}}",
) -> str:
    """The tuning job's best trial (highest ``val_accuracy``): its model becomes this step's ``model`` output (the
    trial's own folder, not a copy), which evaluate and export take; returns its values as JSON."""
    from components.cli import start_step
    from components.train.tuning_vertex import keep_best_trial
    from components.vertex_client import vertex_settings_in_pipeline

    start_step()
    return keep_best_trial(gcp_resources, base_output_directory, model, vertex_settings_in_pipeline(project, location))


def make_components(base_image: str):
    """(the specification step, the best-trial step), running in ``base_image``."""
    return (
        dsl.component(tuning_spec, base_image=base_image, install_kfp_package=False),
        dsl.component(best_trial, base_image=base_image, install_kfp_package=False),
    )


def study_spec_metrics() -> list[dict]:
    """The tuning job's ``study_spec_metrics``: ``val_accuracy``, maximised, as GCPC's ``serialize_metrics`` gives
    them with the goal by name (as ``study_spec_parameters`` says why). Written here: that function's module imports
    the Vertex AI client, seconds of every compile."""
    from components.train.tuning import GOAL, METRIC

    return [{"metric_id": METRIC, "goal": GOAL.upper()}]


def hyperparameter_tuning_job_op():
    """GCPC's ``HyperparameterTuningJobRunOp``, read from its component's own module: its package's ``__init__`` also
    imports the package's serialisers, and with them the Vertex AI client (4 to 5 s of every compile), which
    building the DAG does not use."""
    import importlib.util
    import os

    import google_cloud_pipeline_components

    package = os.path.dirname(google_cloud_pipeline_components.__file__)
    path = os.path.join(package, "v1", "hyperparameter_tuning_job", "component.py")
    spec = importlib.util.spec_from_file_location("gcpc_hyperparameter_tuning_job", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.hyperparameter_tuning_job
