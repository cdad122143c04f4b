"""The registry steps of the DAG, as lightweight KFP components: ``find_baseline`` (the model in service, for
evaluate to compare against) and ``register`` (the blessed export as a new version), in two flavours:

- on Vertex AI (the cloud DAG): the Vertex AI Model Registry. The blessed export is first copied to a stable,
  numbered folder under ``model_root`` (``components.register.core``), then uploaded as a new default version of
  the model ``display_name``. Vertex AI fills in the project and location placeholders (the defaults, as Google
  Cloud Pipeline Components' own steps have them);
- in a folder (``run-local --registry DIR``): the numbered folders and their ``default`` pointer alone.

The logic is in ``vertex.py`` (the Model Registry) and ``core.py`` (the folder registry); these are thin wrappers.
(``python -m pipeline register`` uploads a SavedModel folder by hand, as it is: no copy, no baseline check.) Both
lookups take ``run_id`` (the run's own id, which the orchestrator fills in) so that they are never a cache hit,
whatever the job's caching setting: the model in service changes between runs, not their other inputs. The
placeholders stay out of the folder flavour's source: ``kfp.local`` would try to resolve them there.
"""

from google_cloud_pipeline_components.types.artifact_types import VertexModel
from kfp import dsl
from kfp.dsl import Artifact, Input, Model, Output

# resolved by Vertex AI Pipelines at run time to the project and location the pipeline runs in (written out as
# literals in the signatures below: KFP ships each function's source on its own)
PROJECT_ID_PLACEHOLDER = "{{$.pipeline_google_cloud_project_id}}"
LOCATION_PLACEHOLDER = "{{$.pipeline_google_cloud_location}}"


def find_baseline(
    display_name: str,
    baseline: str,
    model_root: str,
    run_id: str,
    project: str = "{{$.pipeline_google_cloud_project_id}}",
    location: str = "{{$.pipeline_google_cloud_location}}",
) -> str:
    """The baseline for the blessing: ``baseline`` when given; else the SavedModel of the default version of the
    Model Registry's model ``display_name`` (the last blessed one); else "" (judged on the value thresholds)."""
    from components.cli import start_step
    from components.register.vertex import find_baseline
    from components.vertex_client import vertex_settings_in_pipeline

    start_step()
    return find_baseline(display_name, baseline, model_root, vertex_settings_in_pipeline(project, location))


def register(
    exported_model: Input[Model],
    evaluation: Input[Artifact],
    data_statistics: Input[Artifact],
    vertex_model: Output[VertexModel],
    display_name: str,
    baseline: str,
    model_root: str,
    pipeline_run: str,
    project: str = "{{$.pipeline_google_cloud_project_id}}",
    location: str = "{{$.pipeline_google_cloud_location}}",
) -> str:
    """Copies the blessed export to the next numbered version under ``model_root`` (default ``gs://<the pipeline
    root's bucket>/models/<display_name>``) and uploads that copy's SavedModel to the Vertex AI Model Registry
    (TensorFlow CPU serving container) as the new default version of ``display_name``, labelled with the pipeline
    run, with ``evaluation`` imported as its evaluation (the console's Evaluate tab) and kept in its folder, beside
    ``data_statistics`` (the check-data step's output), for later runs' data checks; nothing when the candidate is the
    baseline itself. ``vertex_model``: the version in service afterwards, as Google Cloud Pipeline Components'
    own steps take it (its ``resourceName``: ``projects/.../models/ID@VERSION``). Returns the decision as a JSON
    line."""
    import json

    from components.cli import start_step
    from components.register.vertex import register_version
    from components.vertex_client import name_vertex_resource, vertex_settings_in_pipeline

    start_step()
    settings = vertex_settings_in_pipeline(project, location)
    decided = register_version(
        exported_model.uri,
        display_name,
        baseline,
        model_root,
        pipeline_run,
        settings,
        evaluation.uri,
        data_statistics.uri,
    )
    serving = json.loads(decided)
    if serving.get("model"):
        name_vertex_resource(vertex_model, settings, f"{serving['model']}@{serving['version']}")
    return decided


def find_baseline_in_folder(display_name: str, model_root: str, baseline: str, run_id: str) -> str:
    """The baseline for the blessing: ``baseline`` when given; else the default version of the folder registry
    ``model_root``; else "" (judged on the value thresholds)."""
    from components.cli import start_step
    from components.register.vertex import find_baseline

    start_step()
    return find_baseline(display_name, baseline, model_root, None)


def register_in_folder(
    exported_model: Input[Model],
    evaluation: Input[Artifact],
    data_statistics: Input[Artifact],
    display_name: str,
    model_root: str,
    baseline: str,
    pipeline_run: str,
) -> str:
    """Copies the blessed export, with the statistics of the data it learned from (the check-data step's output)
    and its evaluation (evaluate's ``metrics.json``), to the next numbered version of the folder registry
    ``model_root`` and makes it the default; nothing when the candidate is the baseline itself. Returns the
    decision as a JSON line."""
    from components.cli import start_step
    from components.register.vertex import register_version

    start_step()
    return register_version(
        exported_model.uri,
        display_name,
        baseline,
        model_root,
        pipeline_run,
        None,
        evaluation=evaluation.uri,
        data_statistics=data_statistics.uri,
    )


def make_components(base_image: str, vertex: bool = True):
    """(find_baseline, register) as KFP components running in ``base_image``: on Vertex AI, or in a folder."""
    functions = (find_baseline, register) if vertex else (find_baseline_in_folder, register_in_folder)
    return tuple(dsl.component(f, base_image=base_image, install_kfp_package=False) for f in functions)
