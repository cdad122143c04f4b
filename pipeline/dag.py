"""The KFP v2 DAG: convert -> check data -> train (on Vertex AI, with tune_trials > 0: a hyperparameter tuning job and
its best trial) -> evaluate -> (blessed) export -> register. Knows the steps only
through their KFP wrappers."""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, List, NamedTuple, Optional

from kfp import dsl

from components.check_data.component import make_component as check_data_component
from components.convert.component import make_component as convert_component
from components.convert.component import make_fingerprint_component
from components.decoding import DEFAULT_MAX_PIXELS
from components.deploy.component import make_component as deploy_component
from components.evaluate.component import make_component as evaluate_component
from components.evaluate.component import make_not_blessed_component
from components.export.component import make_component as export_component
from components.params import CHECK_DATA, CONVERT, DEPLOY, EVALUATE, EXPORT, TEXT, TRAIN, TUNE, defaults
from components.register.component import make_components as registry_components
from components.train.component import make_component as train_component
from components.train.tuning_component import hyperparameter_tuning_job_op, study_spec_metrics
from components.train.tuning_component import make_components as tuning_components
from pipeline.accelerators import Scheduling
from pipeline.images import BEAM_WORKER_IMAGE, DEFAULT_IMAGES, LIGHT_IMAGE, PIPELINE_IMAGE, Images
from pipeline.training_job import TRAIN_RETRIES, custom_training_job

PIPELINE_NAME = "tpu-image-classifier"


REGISTRIES = ("vertex", "folder")


# the run's own id, which the orchestrator fills in (Vertex AI, KFP's driver; run-local does as KFP's driver does):
# an input that changes on every run keeps a step out of the cache whatever the job-level caching setting
RUN_ID = dsl.PIPELINE_JOB_ID_PLACEHOLDER


def build_pipeline(
    images: Images = DEFAULT_IMAGES,
    accelerator: Optional[str] = None,
    registry: Optional[str] = "vertex",
    train_image: str = PIPELINE_IMAGE,
    scheduling: Optional[Scheduling] = None,
    notify_emails: Sequence[str] = (),
):
    """Returns the pipeline function, its steps running in ``images``.

    ``accelerator`` (a name in ``pipeline.accelerators.ACCELERATORS``): the training step becomes a Vertex AI custom
    job on that machine, in its image (Google Cloud Pipeline Components' ``create_custom_training_job_from_component``).
    None: every step is a plain container step, as ``kfp.local`` runs them; the training step in ``train_image``
    (``run-local --runner docker`` trains in the image a compile target gives its training job). ``scheduling``: how
    that job gets its machines (``pipeline.accelerators.Scheduling``; on demand when None).

    ``registry``: where the model in service is found before evaluate (the baseline) and where a blessed export
    becomes a new version: ``"vertex"``, the Vertex AI Model Registry (its versions stored under ``model_root``);
    ``"folder"``, numbered folders under ``model_root`` alone (``run-local --registry DIR``); None, no registry
    (``run-local`` without ``--registry``).

    The fingerprint step and the baseline lookup take the run's id as an input, so that neither is ever a cache
    hit (Vertex AI's ``enable_caching=True`` turns every task's cache on); the other steps stay cacheable, and
    are cache hits when the fingerprint and the baseline did not change.

    Export (and registration) run only when evaluate blesses the model (``dsl.If``); otherwise the ``not-blessed``
    branch says why and the run still succeeds.

    ``notify_emails``: on Vertex AI, each run's outcome is mailed to these addresses (at most three, as Vertex AI
    takes them), whatever happens to the steps; none: no mail step at all.
    """
    if registry not in (None, *REGISTRIES):
        raise ValueError(f"registry {registry!r} is not one of {REGISTRIES} or None")
    check_notify_emails(notify_emails)
    ops = step_ops(images, accelerator, registry, train_image, scheduling or Scheduling())
    outputs = outputs_type(registry)

    def steps(**p):
        """The steps, as the pipeline's parameters' channels (``p``, by name) flow into them."""
        baseline, found = find_baseline(ops, p, registry)
        converted, checked, model = convert_check_and_train(ops, p, baseline, accelerator)
        results = evaluate_and_gate(ops, p, converted, checked, model, baseline, registry, accelerator)
        if registry:
            results["baseline"] = found.output
        return outputs(**results)

    def image_classifier(
        source: str,
        image_size: int = CONVERT["image_size"].default,
        validation_fraction: float = CONVERT["validation_fraction"].default,
        test_fraction: float = CONVERT["test_fraction"].default,
        num_shards: int = CONVERT["num_shards"].default,
        max_bad_fraction: float = CONVERT["max_bad_fraction"].default,
        classes: List[str] = list(CONVERT["classes"].default),  # noqa: B006 (KFP reads it; nothing mutates it)
        model_name: str = TRAIN["model_name"].default,
        hparams: List[str] = list(TRAIN["hparams"].default),  # noqa: B006 (KFP reads it; nothing mutates it)
        epochs: int = TRAIN["epochs"].default,
        weights: str = TRAIN["weights"].default,
        fine_tune_epochs: int = TRAIN["fine_tune_epochs"].default,
        fine_tune_blocks: int = TRAIN["fine_tune_blocks"].default,
        fine_tune_learning_rate: float = TRAIN["fine_tune_learning_rate"].default,
        per_replica_batch_size: int = TRAIN["per_replica_batch_size"].default,
        learning_rate: float = TRAIN["learning_rate"].default,
        lr_schedule: str = TRAIN["lr_schedule"].default,
        precision: str = TRAIN["precision"].default,
        backend: str = TRAIN["backend"].default,
        jit_compile: bool = TRAIN["jit_compile"].default,
        steps_per_execution: int = TRAIN["steps_per_execution"].default,
        augment: bool = TRAIN["augment"].default,
        seed: int = TRAIN["seed"].default,
        tune_trials: int = TUNE["tune_trials"].default,
        tune_parallel_trials: int = TUNE["tune_parallel_trials"].default,
        beam_args: List[str] = [],  # noqa: B006 (KFP reads the default; nothing mutates it)
        accept_data_change: bool = CHECK_DATA["accept_data_change"].default,
        data_thresholds: List[str] = list(CHECK_DATA["data_thresholds"].default),  # noqa: B006 (KFP reads it)
        min_accuracy: float = EVALUATE["min_accuracy"].default,
        max_accuracy_drop: float = EVALUATE["max_accuracy_drop"].default,
        baseline_model: str = EVALUATE["baseline"].default,
        export_formats: List[str] = list(EXPORT["export_formats"].default),  # noqa: B006 (KFP reads it)
        model_display_name: str = PIPELINE_NAME,
        model_root: str = "",
        tensorboard: str = "",
        base_output_directory: str = "",
        endpoint: str = "",
        modality: str = CONVERT["modality"].default,
        vocabulary_size: int = TEXT["vocabulary_size"].default,
        sequence_length: int = TEXT["sequence_length"].default,
        text_column: str = TEXT["text_column"].default,
        label_column: str = TEXT["label_column"].default,
    ):
        if accelerator is None:  # kfp.local: no Vertex AI to send mail
            return steps(**locals())
        if not notify_emails:
            steps(**locals())
            return None
        from google_cloud_pipeline_components.v1.vertex_notification_email import VertexNotificationEmailOp

        # the run's outcome (succeeded, failed, cancelled) by email, whatever happens to the steps; KFP returns no
        # pipeline outputs from inside an exit handler: on Vertex AI, the tasks' outputs stand alone
        notify = VertexNotificationEmailOp(recipients=list(notify_emails)).set_display_name("notify by email")
        notify.set_caching_options(enable_caching=False)  # every run mails its own outcome
        with dsl.ExitHandler(notify, name="steps"):
            steps(**locals())
        return None

    if accelerator is None:  # the outputs run-local reports
        image_classifier.__annotations__["return"] = outputs
    return dsl.pipeline(
        name=PIPELINE_NAME,
        description="Image folder or texts -> TFRecords (Beam) -> Keras training (JAX on TPUs; GPU, CPU) -> "
        "evaluation, blessing -> CPU SavedModel and TFLite export -> Vertex AI Model Registry.",
    )(image_classifier)


MAX_NOTIFY_EMAILS = 3  # Vertex AI's email notifications take up to three recipients


EMAIL = re.compile(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+")


def check_notify_emails(addresses: Sequence[str]) -> None:
    """At most three addresses, each an address: a one-line error at compile time (the mail step would fail after
    the whole run otherwise)."""
    from components.cli import UsageError

    if len(addresses) > MAX_NOTIFY_EMAILS:
        raise UsageError(
            f"--notify-email given {len(addresses)} times: Vertex AI mails at most {MAX_NOTIFY_EMAILS} "
            "addresses; use a group's address for more"
        )
    for address in addresses:
        if not EMAIL.fullmatch(address):
            raise UsageError(f"--notify-email {address!r} is not an email address, e.g. ml-team@example.com")


@dataclass(frozen=True)
class StepOps:
    """The DAG's step components, in their images, and the training job's own call arguments."""

    fingerprint: Any
    convert: Any
    worker_image: str  # Dataflow's workers: the beam-worker image of the registry and tag compiled for
    check_data: Any
    train: Any
    train_options: dict
    tuning_spec: Any  # on Vertex AI (an accelerator given): the tuning job's specification, and its best trial
    best_trial: Any
    tuning_options: dict
    evaluate: Any
    not_blessed: Any
    export: Any
    find_baseline: Any
    register: Any
    deploy: Any


def step_ops(
    images: Images, accelerator: Optional[str], registry: Optional[str], train_image: str, scheduling: Scheduling
) -> StepOps:
    """Each step's component: the training step a Vertex AI custom job on ``accelerator``'s machine, or (None) a
    container step in ``train_image``; the registry steps of ``registry``'s flavour. The steps that only list files
    and call APIs run in the light image (``pipeline.images.LIGHT_STEPS``), the others in the pipeline image."""
    image, light = images.uri(PIPELINE_IMAGE), images.uri(LIGHT_IMAGE)
    train_op, train_options = train_component(images.uri(train_image)), {"hosts": 1}
    tuning_spec_op, best_trial_op = tuning_components(image)
    tuning_options = {}
    if accelerator is not None:
        from pipeline.accelerators import machine_spec

        train_op, train_options = custom_training_job(images, accelerator, scheduling)
        spec = machine_spec(accelerator)
        # the trials run on the training job's machine, in its reservation (GCPC's tuning job takes no scheduling
        # strategy: submit refuses tuning with a Spot or flex-start template, pipeline.vertex.jobs.check_run)
        tuning_options = {
            "image": images.uri(spec.image),
            "machine": {**spec.as_vertex(), **scheduling.reservation_affinity()},
            "hosts": spec.hosts,
            "boot_disk": spec.boot_disk(),
        }
    find_baseline_op, register_op = registry_components(light, vertex=registry == "vertex")
    bounded = with_deadline(scheduling.step_seconds())
    return StepOps(
        fingerprint=bounded(make_fingerprint_component(light)),
        convert=bounded(convert_component(image)),
        worker_image=images.uri(BEAM_WORKER_IMAGE),
        check_data=bounded(check_data_component(image)),
        train=train_op,
        train_options=train_options,
        tuning_spec=bounded(tuning_spec_op),
        best_trial=bounded(best_trial_op),
        tuning_options=tuning_options,
        evaluate=bounded(evaluate_component(image)),
        not_blessed=bounded(make_not_blessed_component(light)),
        export=bounded(export_component(image)),
        find_baseline=bounded(find_baseline_op),
        register=bounded(register_op),
        deploy=bounded(deploy_component(light)),
    )


def with_deadline(seconds: int):
    """Wraps a component so that its tasks end themselves past ``seconds`` (0: never): KFP gives Vertex AI's tasks no
    timeout, so each step reads its own from ``STEP_DEADLINE_ENV`` (``components.cli.start_step``). The training
    job's is Vertex AI's (``--max-train-time``)."""
    from components.cli import STEP_DEADLINE_ENV

    def bounded(component):
        if not seconds or component is None:
            return component

        def task(*args, **kwargs):
            return component(*args, **kwargs).set_env_variable(STEP_DEADLINE_ENV, str(seconds))

        return task

    return bounded


def outputs_type(registry: Optional[str]):
    """The pipeline's outputs, whose fields depend on the registry."""
    outputs = [
        ("test_accuracy", float),
        ("blessed", bool),
        ("exported_model_uri", str),  # empty when the model was not blessed
        ("examples", dsl.Dataset),
        ("data_checks", dsl.Artifact),  # data_checks.json and the version's statistics
        ("model", dsl.Model),
        ("evaluation", dsl.Artifact),
    ]
    if registry:  # the model in service that evaluate compared against ("" for none), and the register decision
        outputs += [("baseline", str), ("registration", str)]  # (JSON; "" when not blessed)
    return NamedTuple("Outputs", outputs)


# the pipeline parameters the fingerprint step takes (convert takes every one of CONVERT and TEXT)
FINGERPRINT_INPUTS = ("source", "classes", "modality", "text_column", "label_column")


def find_baseline(ops: StepOps, p: dict, registry: Optional[str]):
    """(the baseline's channel, the lookup task or None): the registry's model in service unless one is given,
    looked up on every run; without a registry, the ``baseline_model`` parameter."""
    if not registry:
        return p["baseline_model"], None
    found = ops.find_baseline(
        display_name=p["model_display_name"], baseline=p["baseline_model"], model_root=p["model_root"], run_id=RUN_ID
    )
    found.set_display_name("find the baseline").set_caching_options(enable_caching=False)
    return found.output, found


def convert_check_and_train(ops: StepOps, p: dict, baseline, accelerator: Optional[str]):
    """fingerprint -> convert -> check data -> train, fed the pipeline parameters' channels ``p``. The fingerprint is
    always recomputed (the run's id is an input); an unchanged one makes convert, and all after it, a cache hit on
    reruns. The data checks compare the new version with the statistics kept with the ``baseline``; a blocking one
    fails the run there, before training."""
    fingerprinted = ops.fingerprint(run_id=RUN_ID, **{name: p[name] for name in FINGERPRINT_INPUTS})
    fingerprinted.set_display_name("fingerprint the source").set_caching_options(enable_caching=False)
    converted = ops.convert(
        source=p["source"],
        source_fingerprint=fingerprinted.output,
        max_pixels=DEFAULT_MAX_PIXELS,
        worker_image=ops.worker_image,
        beam_args=p["beam_args"],
        **{name: p[name] for name in (*CONVERT, *TEXT)},
    ).set_display_name("convert to TFRecords")
    checked = ops.check_data(
        examples=converted.outputs["examples"],
        baseline=baseline,
        accept_data_change=p["accept_data_change"],
        data_thresholds=p["data_thresholds"],
    ).set_display_name("check the data")
    training = {name: p[name] for name in TRAIN}
    if accelerator is None:  # kfp.local: the train step searches itself when tune_trials > 0 (run-local --tune N)
        trained = ops.train(
            **ops.train_options, examples=converted.outputs["examples"], **training, tune_trials=p["tune_trials"]
        ).set_display_name("train")
        trained.after(checked)  # the gate: a blocked version fails check-data, and nothing trains
        return converted, checked, trained.outputs["model"]
    with dsl.If(p["tune_trials"] > 0, name="tune"):  # a Vertex AI tuning job; its best trial's model goes on
        best = tuning_job(ops, p, converted, checked, training)
    with dsl.Else(name="train-once"):
        # the training job's logs to a Vertex AI TensorBoard (submit --tensorboard)
        job_options = {"tensorboard": p["tensorboard"], "base_output_directory": p["base_output_directory"]}
        trained = ops.train(
            **ops.train_options,
            **job_options,
            examples=converted.outputs["examples"],
            **training,
            tune_trials=p["tune_trials"],
        ).set_display_name("train")
        trained.after(checked)
        # a job failed (preempted past a restart in place, out of capacity) is launched again, and resumes from the
        # backup its inputs name (components.train.config.lasting_checkpoint_dir)
        trained.set_retry(num_retries=TRAIN_RETRIES, backoff_duration="120s", backoff_factor=2.0)
    return converted, checked, dsl.OneOf(best.outputs["model"], trained.outputs["model"])


def tuning_job(ops: StepOps, p: dict, converted, checked, training: dict):
    """The tuning job (Google Cloud Pipeline Components' HyperparameterTuningJobRunOp) between its specification and
    its best trial; returns the best-trial task, whose ``model`` is the best trial's model. Its trials run as the
    training job does: in its image, on its machine, as the pipeline's service account, in its network."""
    from google_cloud_pipeline_components._placeholders import (
        ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER,
        LOCATION_PLACEHOLDER,
        NETWORK_PLACEHOLDER,
        SERVICE_ACCOUNT_PLACEHOLDER,
    )

    spec = ops.tuning_spec(examples=converted.outputs["examples"], **ops.tuning_options, **training)
    spec.set_display_name("specify the tuning job").after(checked)
    job = hyperparameter_tuning_job_op()(
        display_name=f"{PIPELINE_NAME}-tuning",
        base_output_directory=spec.outputs["base_output_directory"],
        worker_pool_specs=spec.outputs["worker_pool_specs"],
        study_spec_metrics=study_spec_metrics(),
        study_spec_parameters=spec.outputs["study_spec_parameters"],
        max_trial_count=p["tune_trials"],
        parallel_trial_count=p["tune_parallel_trials"],
        location=LOCATION_PLACEHOLDER,
        service_account=SERVICE_ACCOUNT_PLACEHOLDER,
        network=NETWORK_PLACEHOLDER,
        encryption_spec_key_name=ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER,
    ).set_display_name("hyperparameter tuning job")
    best = ops.best_trial(
        gcp_resources=job.outputs["gcp_resources"], base_output_directory=spec.outputs["base_output_directory"]
    )
    return best.set_display_name("the best trial")


def evaluate_and_gate(
    ops: StepOps, p: dict, converted, checked, model, baseline, registry: Optional[str], accelerator: Optional[str]
) -> dict:
    """evaluate and bless -> (blessed) export -> register, with the data statistics -> deploy, or
    (not blessed) the step that says why; returns the pipeline's outputs (but the baseline)."""
    evaluated = ops.evaluate(
        examples=converted.outputs["examples"],
        model=model,
        min_accuracy=p["min_accuracy"],
        max_accuracy_drop=p["max_accuracy_drop"],
        baseline=baseline,
        data_checks=checked.outputs["statistics"],
    ).set_display_name("evaluate and bless")
    with dsl.If(evaluated.outputs["Output"] == True, name="blessed"):  # noqa: E712 (a KFP condition)
        exported = ops.export(
            model=model,
            examples=converted.outputs["examples"],
            evaluation=evaluated.outputs["evaluation"],
            export_formats=p["export_formats"],
        ).set_display_name("export for CPU serving")
        if registry:
            registered = register_and_deploy(ops, p, evaluated, exported, checked, baseline, registry, accelerator)
    with dsl.Else(name="not-blessed"):
        skipped = ops.not_blessed(evaluation=evaluated.outputs["evaluation"]).set_display_name("not blessed")
    results = {
        "test_accuracy": evaluated.outputs["test_accuracy"],
        "blessed": evaluated.outputs["Output"],
        "exported_model_uri": dsl.OneOf(exported.outputs["Output"], skipped.output),
        "examples": converted.outputs["examples"],
        "data_checks": checked.outputs["statistics"],
        "model": model,
        "evaluation": evaluated.outputs["evaluation"],
    }
    if registry:
        results["registration"] = dsl.OneOf(registered.outputs["Output"], skipped.output)
    return results


def register_and_deploy(
    ops: StepOps, p: dict, evaluated, exported, checked, baseline, registry: str, accelerator: Optional[str]
):
    """The blessed export as the registry's next version, with the statistics of the data it learned from (the
    next runs' data baseline) and its evaluation; on Vertex AI, with that evaluation imported into it, and deployed to
    ``endpoint`` when one is given. Returns the register task. (Export itself does not take the statistics: it
    stays a cache hit when only the data checks ran again, against a new baseline.)"""
    # the evaluation goes with the new version (later runs' prediction mix; on Vertex AI, the Evaluate tab too), and
    # on Vertex AI the step outputs a google.VertexModel for GCPC's operators to chain after
    registered = ops.register(
        exported_model=exported.outputs["exported_model"],
        evaluation=evaluated.outputs["evaluation"],
        data_statistics=checked.outputs["statistics"],
        display_name=p["model_display_name"],
        baseline=baseline,
        model_root=p["model_root"],
        pipeline_run=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
    )
    registered.set_display_name(
        "register in the Model Registry" if registry == "vertex" else "register in the model folder"
    ).set_caching_options(enable_caching=False)
    # (off in pipeline.yaml; with the job's caching forced on, pipeline_run, the run's name, still keeps each run's
    # decision its own)
    if registry == "vertex" and accelerator is not None:  # serve the version in service, if asked
        with dsl.If(p["endpoint"] != "", name="deploy-to-endpoint"):
            deployed = ops.deploy(
                vertex_model=registered.outputs["vertex_model"], endpoint=p["endpoint"], **defaults(DEPLOY)
            )
            deployed.set_display_name("deploy to the endpoint").set_caching_options(enable_caching=False)
    return registered
