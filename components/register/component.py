"""The Model Registry steps of the cloud DAG, as lightweight KFP components: ``find_baseline`` (the last blessed
model, for evaluate to compare against) and ``register`` (the blessed export as a new version of its model).

Both run only on Vertex AI Pipelines, which fills in the project and location placeholders (the defaults, as Google
Cloud Pipeline Components' own steps have them); ``python -m pipeline run-local`` builds the DAG without them. The
logic, and the command-line twin ``python -m pipeline register``, is in ``pipeline/registry.py``.
"""

from kfp import dsl
from kfp.dsl import Input, Model

# resolved by Vertex AI Pipelines at run time to the project and location the pipeline runs in (written out as
# literals in the signatures below: KFP ships each function's source on its own)
PROJECT_ID_PLACEHOLDER = "{{$.pipeline_google_cloud_project_id}}"
LOCATION_PLACEHOLDER = "{{$.pipeline_google_cloud_location}}"


def find_baseline(
    display_name: str,
    baseline: str = "",
    project: str = "{{$.pipeline_google_cloud_project_id}}",
    location: str = "{{$.pipeline_google_cloud_location}}",
) -> str:
    """The baseline for the blessing: ``baseline`` when given, else the SavedModel of the default version of the
    registry's model ``display_name`` (the last blessed one), else "" (the run is judged on value thresholds)."""
    from components.cli import configure_logging

    configure_logging()
    if baseline or not display_name:
        print(f"baseline: {baseline or 'none'} (as given)")
        return baseline
    from pipeline.registry import baseline_uri, vertex_settings_in_pipeline

    return baseline_uri(vertex_settings_in_pipeline(project, location), display_name)


def register(
    exported_model: Input[Model],
    display_name: str,
    pipeline_run: str = "",
    project: str = "{{$.pipeline_google_cloud_project_id}}",
    location: str = "{{$.pipeline_google_cloud_location}}",
) -> str:
    """Uploads the blessed export to the Vertex AI Model Registry (TensorFlow CPU serving container) as a new
    version of the model ``display_name``, labelled with the pipeline run; returns ``MODEL@VERSION`` ("" when
    ``display_name`` is empty: registration is off)."""
    from components.cli import configure_logging

    configure_logging()
    if not display_name:
        print("model_display_name is empty: the blessed export is not registered")
        return ""
    from pipeline.registry import register_blessed, vertex_settings_in_pipeline

    result = register_blessed(
        vertex_settings_in_pipeline(project, location), exported_model.uri, display_name, pipeline_run
    )
    return f"{result['name']}@{result['version_id']}"


def make_components(base_image: str):
    """(find_baseline, register) as KFP components running in ``base_image``."""
    return tuple(dsl.component(f, base_image=base_image, install_kfp_package=False) for f in (find_baseline, register))
