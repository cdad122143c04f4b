"""The google-cloud-aiplatform internals this project uses, in one place: each where the public API has no
equivalent, with why. ``tests/pipeline/test_vertex_sdk.py`` fails, naming the one that moved, when an upgrade of the
SDK changes any of them; the fake-server tests exercise each."""

from __future__ import annotations


def set_resource(wrapper, resource) -> None:
    """Makes an SDK object (a ``PipelineJob``, a ``PipelineJobSchedule``) stand for ``resource``, a created resource
    found after a create call whose answer was lost (a 503): the SDK has no public way to adopt one into the object
    the caller holds. (``_gca_resource``)"""
    wrapper._gca_resource = resource


def resource_of(wrapper):
    """The API resource an SDK object holds: a schedule's ``create_pipeline_job_request``, which the public API
    does not expose and ``schedule update`` sends again. (``_gca_resource``)"""
    return wrapper._gca_resource


def add_run_to_experiment(experiment, job) -> None:
    """What ``PipelineJob.submit(experiment=...)`` does after the job is created, done apart so that it is retried
    and reported on its own: the run's metadata context becomes a child of the experiment's.
    (``Experiment._metadata_context``, ``PipelineJob._get_context``)"""
    experiment._metadata_context.add_context_children([job._get_context()])


def model_client(region: str):
    """The Model Service client of ``aiplatform.init``'s settings (its credentials, API endpoint and transport) for
    ``region``: the import of a model evaluation has no method on the public ``Model``.
    (``initializer.global_config.create_client``)"""
    from google.cloud.aiplatform import initializer, utils

    return initializer.global_config.create_client(client_class=utils.ModelClientWithOverride, location_override=region)


def parameter_specs(space) -> list[dict]:
    """A tuning job's ``studySpec.parameters`` from SDK parameter specs (``hyperparameter_tuning.DoubleParameterSpec``
    ...), enums by name: what Google Cloud Pipeline Components' ``serialize_parameters`` computes, which a pipeline
    step cannot import (GCPC's package imports ``kfp.dsl.ConcatPlaceholder``, which KFP leaves out of ``kfp.dsl``
    inside a running step). (``_ParameterSpec._to_parameter_spec``)"""
    from google.cloud.aiplatform_v1.types import study

    to_dict = study.StudySpec.ParameterSpec.to_dict
    return [
        to_dict(spec._to_parameter_spec(parameter_id=name), use_integers_for_enums=False)
        for name, spec in space.items()
    ]
