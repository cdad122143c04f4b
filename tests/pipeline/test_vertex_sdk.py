"""The google-cloud-aiplatform internals of ``components/vertex_sdk.py`` are where it expects them: an upgrade of the
SDK that moves one fails here, by name, before a fake-server test fails on its effect. No other module of the
project uses an internal of the SDK."""

from __future__ import annotations

import ast
import inspect
import os

from tests.conftest import REPO_ROOT

# the private names the module reaches for, as written there
PRIVATE = (
    "_gca_resource",
    "_metadata_context",
    "_get_context",
    "create_client",
    "_to_parameter_spec",
)


def test_each_internal_the_sdk_module_uses_is_still_there():
    from google.cloud import aiplatform
    from google.cloud.aiplatform import base, initializer

    moved = []
    # what the public resource_name reads is what set_resource sets
    if "self._gca_resource.name" not in inspect.getsource(base.VertexAiResourceNoun.resource_name.fget):
        moved.append("VertexAiResourceNoun._gca_resource (set_resource, resource_of)")
    if "self._metadata_context = " not in inspect.getsource(aiplatform.Experiment.__init__):
        moved.append("Experiment._metadata_context (add_run_to_experiment)")
    if not callable(getattr(aiplatform.PipelineJob, "_get_context", None)):
        moved.append("PipelineJob._get_context (add_run_to_experiment)")
    create = getattr(initializer.global_config, "create_client", None)
    if not callable(create) or not {"client_class", "location_override"} <= set(inspect.signature(create).parameters):
        moved.append("initializer.global_config.create_client(client_class, location_override) (model_client)")
    from google.cloud.aiplatform import hyperparameter_tuning

    if not callable(getattr(hyperparameter_tuning.DoubleParameterSpec, "_to_parameter_spec", None)):
        moved.append("hyperparameter_tuning._ParameterSpec._to_parameter_spec (parameter_specs)")
    assert not moved, "google-cloud-aiplatform changed what components/vertex_sdk.py uses: " + "; ".join(moved)


def test_no_other_module_reaches_into_the_sdk():
    found = []
    for top in ("components", "pipeline"):
        for folder, _, names in os.walk(os.path.join(REPO_ROOT, top)):
            for name in (n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                if path.endswith(os.path.join("components", "vertex_sdk.py")):
                    continue
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read())
                used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
                used |= {
                    alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
                }
                found += [f"{os.path.relpath(path, REPO_ROOT)}: {n}" for n in sorted(used & set(PRIVATE))]
    assert not found, "use components/vertex_sdk.py: " + ", ".join(found)


def test_the_tuning_parameters_are_what_gcpc_serialises():
    """``parameter_specs`` stands in for GCPC's ``serialize_parameters`` inside a step: the same specs, field for
    field, but the enums, written by name (GCPC writes their numbers)."""
    from google.cloud.aiplatform import hyperparameter_tuning as hpt
    from google.cloud.aiplatform_v1.types import study
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import serialize_parameters

    from components.vertex_sdk import parameter_specs

    space = {
        "a": hpt.DoubleParameterSpec(min=0.5, max=2.0, scale="log"),
        "b": hpt.IntegerParameterSpec(min=1, max=4, scale="linear"),
        "c": hpt.DiscreteParameterSpec(values=[8, 16], scale="linear"),
        "d": hpt.CategoricalParameterSpec(values=["x", "y"]),
    }
    theirs = serialize_parameters(space)
    for spec in theirs:
        spec["scale_type"] = study.StudySpec.ParameterSpec.ScaleType(spec["scale_type"]).name
    assert parameter_specs(space) == theirs
    assert [spec["scale_type"] for spec in theirs] == [
        "UNIT_LOG_SCALE",
        "UNIT_LINEAR_SCALE",
        "UNIT_LINEAR_SCALE",
        "SCALE_TYPE_UNSPECIFIED",
    ]
