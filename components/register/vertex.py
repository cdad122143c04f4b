"""The Vertex AI Model Registry: a blessed export uploaded as a new version of its parent model, served by Vertex
AI's prebuilt TensorFlow CPU container, and labelled with the pipeline run that made it."""

from __future__ import annotations

import logging

from components.artifacts.evaluation import Evaluation
from components.artifacts.exported import SAVED_MODEL_DIR
from components.vertex_client import VertexSettings, call
from components.vertex_resources import find_model, register

log = logging.getLogger(__name__)

SLICES_PER_IMPORT = 50  # the most one BatchImportModelEvaluationSlices request takes (as GCPC's import step batches)


def baseline_uri(settings: VertexSettings, display_name: str) -> str:
    """The SavedModel folder of the default version of ``display_name``: the last blessed model; "" if none."""
    model = find_model(settings, display_name)
    if model is None:
        log.info(
            f"no model named {display_name} in the registry: the first run is judged on its value thresholds alone"
        )
        return ""
    uri = model.uri or ""
    log.info(f"baseline: {model.resource_name} version {model.version_id} ({uri})")
    return uri


def register_blessed(
    settings: VertexSettings,
    export_uri: str,
    display_name: str,
    pipeline_run: str = "",
    metrics: Evaluation | None = None,
) -> dict:
    """Uploads the export at ``export_uri`` (its ``saved_model/`` folder; the DAG passes the stable copy under
    ``model_root``, not the run's output) as a new version of the model named ``display_name``, or as that model's
    first version; then imports evaluate's ``metrics`` (if any) as that version's evaluation."""
    from components.register.core import model_code_record

    parent = find_model(settings, display_name)
    saved_model_uri = export_uri.rstrip("/") + "/" + SAVED_MODEL_DIR
    code = model_code_record(export_uri).get("model_sha256", "")[:16]
    result = register(
        settings, saved_model_uri, display_name, parent.resource_name if parent else "", pipeline_run, model_code=code
    )
    if metrics is not None:
        version = f"{result['name']}@{result['version_id']}"
        result["evaluation"] = import_evaluation(settings, version, metrics, pipeline_run or f"{display_name} test")
    return result


def import_evaluation(settings: VertexSettings, model_version: str, metrics: Evaluation, display_name: str) -> str:
    """Imports evaluate's ``metrics`` into the Model Registry as the evaluation of ``model_version``
    (``projects/.../models/ID@VERSION``), with a slice per class; returns the evaluation's name. Retried safely: a
    503 that hid the import is found by the evaluation's display name before importing again."""
    import json

    from google.cloud.aiplatform.compat.types import model_evaluation_slice_v1, model_evaluation_v1

    from components.artifacts.evaluation import vertex_evaluation
    from components.vertex_sdk import model_client

    evaluation, slices = vertex_evaluation(metrics)
    evaluation["displayName"] = display_name
    client = model_client(settings.region)

    def imported_after_all():
        found = [e for e in client.list_model_evaluations(parent=model_version) if e.display_name == display_name]
        return found[0] if found else None

    message = model_evaluation_v1.ModelEvaluation.from_json(json.dumps(evaluation))
    imported = call(
        "import the evaluation",
        lambda: client.import_model_evaluation(parent=model_version, model_evaluation=message),
        settings,
        done=imported_after_all,
    )

    Slice = model_evaluation_slice_v1.ModelEvaluationSlice  # noqa: N806 (a message class)

    def slices_at_least(count: int):
        return lambda: True if len(list(client.list_model_evaluation_slices(parent=imported.name))) >= count else None

    for start in range(0, len(slices), SLICES_PER_IMPORT):
        chunk = [Slice.from_json(json.dumps(one)) for one in slices[start : start + SLICES_PER_IMPORT]]
        call(
            "import the evaluation's per-class figures",
            lambda chunk=chunk: client.batch_import_model_evaluation_slices(
                parent=imported.name, model_evaluation_slices=chunk
            ),
            settings,
            done=slices_at_least(start + len(chunk)),
        )
    log.info(f"imported the evaluation into {model_version}: {imported.name}")
    return imported.name


def find_baseline(display_name: str, baseline: str, model_root: str, settings: VertexSettings | None) -> str:
    """The DAG's baseline: ``baseline`` when given; else the model in service: the default version of the Vertex AI
    Model Registry's ``display_name`` (``settings``), or of the folder registry ``model_root`` (``settings`` None);
    else "" (the first run is judged on its value thresholds alone)."""
    from components.artifacts.registry import FolderRegistry

    if baseline or not display_name:
        log.info(f"baseline: {baseline or 'none'} (as given)")
        return baseline
    if settings is not None:
        return baseline_uri(settings, display_name)
    found = FolderRegistry(model_root).default()
    if found is None:
        log.info(f"no model in {model_root} yet: the first run is judged on its value thresholds alone")
        return ""
    log.info(f"baseline: version {found.number} of {model_root} ({found.uri})")
    return found.uri


def register_version(
    export_uri: str,
    display_name: str,
    baseline: str,
    model_root: str,
    pipeline_run: str,
    settings: VertexSettings | None,
    evaluation: str = "",
    data_statistics: str = "",
    judged: bool = True,
) -> str:
    """The DAG's registration of a blessed export; returns the decision as a JSON line (``action`` registered or
    skipped, and the version or the reason). ``data_statistics`` (a check-data output): the statistics of the data
    the model learned from, kept in the version's folder for later runs' data checks ("": none); ``evaluation``
    (an evaluate output): its ``metrics.json``, kept there too, for later runs' prediction mix ("": none).

    Unless the candidate is the baseline itself (the same trained weights: a cached train step over unchanged data),
    the export is copied to the next numbered version under ``model_root`` (default, on Cloud Storage,
    ``gs://<the export's bucket>/models/<display_name>``) and becomes its default; with ``settings``, that copy is
    uploaded to the Vertex AI Model Registry as the new default version of ``display_name``, and evaluate's
    ``metrics.json`` in the ``evaluation`` folder (if given) is imported as that version's evaluation. The decision
    names the model version in service afterwards (``model``, ``version``) when the Model Registry holds it.

    ``judged``: ``baseline`` is the model evaluate judged the candidate against ("": none), so the registry's default
    must still be it (``FolderRegistry.check_default_is``); False for a registration by hand with no baseline."""
    from components.artifacts.exported import check_blessed, check_export
    from components.artifacts.registry import FolderRegistry, check_still_default
    from components.register.core import (
        decision,
        default_model_root,
        model_code_record,
        same_as_baseline,
    )

    if not display_name:
        log.info("model_display_name is empty: the blessed export is not registered")
        return decision("skipped", reason="registration is off (model_display_name is empty)")
    exported = check_export(export_uri)  # never a half-written or damaged export
    if evaluation:
        check_blessed(Evaluation.read(evaluation).blessing, f"--evaluation {evaluation}")
    else:  # (an export made anyway, of a model evaluate did not bless, says so itself)
        check_blessed(exported.blessing, f"export {export_uri} was exported anyway")
    same = same_as_baseline(export_uri, baseline)
    if same:
        log.info(f"{same}: not registered again")
        serving = find_model(settings, display_name) if settings is not None else None
        if serving is not None and (serving.uri or "").rstrip("/") == baseline.rstrip("/"):
            return decision(
                "skipped", reason=same, baseline=baseline, model=serving.resource_name, version=serving.version_id
            )
        return decision("skipped", reason=same, baseline=baseline)
    root = model_root or default_model_root(export_uri, display_name)
    registry = FolderRegistry(root)
    record = {"display_name": display_name, "pipeline_run": pipeline_run, **model_code_record(export_uri)}
    with registry.turn():
        if judged and settings is None:
            registry.check_default_is(baseline)
        elif judged:  # the Model Registry's default version is what the DAG judged against
            serving = find_model(settings, display_name)
            name = f"{serving.resource_name} version {serving.version_id}" if serving else "no version"
            check_still_default(registry.root, baseline, (serving.uri or "") if serving else "", name)
        version = registry.push(
            export_uri, record, make_default=settings is None, data_statistics=data_statistics, evaluation=evaluation
        )
        if settings is None:
            log.info(f"registered {export_uri} as version {version.number} of {root}")
            return decision("registered", version=version.number, uri=version.uri)
        # (in its turn too: the next registration checks the Model Registry's default after this one set it)
        metrics = Evaluation.read(evaluation) if evaluation else None
        result = register_blessed(settings, version.uri, display_name, pipeline_run, metrics)
        registry.set_default(version.number)  # once the Model Registry serves it: the two agree on the default
    return decision(
        "registered", version=result["version_id"], model=result["name"], uri=version.uri, stored_as=version.number
    )
