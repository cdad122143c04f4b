"""Hyperparameter tuning: the Vertex AI tuning job the compiled DAG asks for, sent by Google Cloud Pipeline
Components' own launcher to the fake server, its best trial read back; a trial as Vertex AI runs it; and the local
search of ``run-local --tune N``, for real on the tiny examples."""

import json
import os
import re

import pytest
import yaml

from components.artifacts.records import STATS
from components.cli import UsageError
from components.train import tuning as tune
from tests.conftest import TINY_SIZE

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compiled_tasks() -> dict:
    """The committed pipeline.yaml's tasks by name, from every component's DAG."""
    with open(os.path.join(REPO, "pipeline.yaml")) as handle:
        spec = yaml.safe_load(handle)
    tasks = {}
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return spec, tasks


def resolve_payload(spec: dict, inputs: dict) -> str:
    """The tuning job executor's ``--payload`` as Vertex AI renders it: its Concat, each input placeholder replaced
    by the input's value (a string as it is, anything else as JSON)."""
    args = spec["deploymentSpec"]["executors"]["exec-hyperparameter-tuning-job"]["container"]["args"]
    concat = json.loads(args[args.index("--payload") + 1])["Concat"]
    rendered = []
    for part in concat:
        name = re.fullmatch(r"\{\{\$\.inputs\.parameters\['(\w+)'\]\}\}", part)
        value = inputs[name.group(1)] if name else part
        rendered.append(value if isinstance(value, str) else json.dumps(value))
    return "".join(rendered)


def test_the_tuning_job_request_is_what_the_rest_reference_documents(
    in_pipeline, gcs, converted, tmp_path, monkeypatch
):
    """pipeline.yaml's tuning branch, run as Vertex AI would: the specification step's code on the converted
    examples, GCPC's launcher with the payload the IR renders, sending to the fake server; the body checked against
    the REST reference's HyperparameterTuningJob (field names, enum names), by hand. Then the best-trial step reads
    the job's trials back and points its model at the best one's folder."""
    from kfp.dsl import Model

    from components.train.tuning_vertex import keep_best_trial, trial_job
    from components.vertex_client import vertex_settings_in_pipeline

    spec, tasks = compiled_tasks()
    job_task, spec_task = tasks["hyperparameter-tuning-job"], tasks["tuning-spec"]
    # the job's inputs: which come from the pipeline's parameters, which from the specification step
    job_inputs = job_task["inputs"]["parameters"]
    assert job_inputs["max_trial_count"]["componentInputParameter"] == "pipelinechannel--tune_trials"
    assert job_inputs["parallel_trial_count"]["componentInputParameter"] == "pipelinechannel--tune_parallel_trials"
    for name in ("worker_pool_specs", "study_spec_parameters", "base_output_directory"):
        assert job_inputs[name]["taskOutputParameter"] == {"outputParameterKey": name, "producerTask": "tuning-spec"}
    constant = {
        name: value["runtimeValue"]["constant"]
        for name, value in spec_task["inputs"]["parameters"].items()
        if "runtimeValue" in value
    }
    assert constant["machine"] == {"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "2x2"}  # v5e-4
    assert constant["image"].endswith("/train-tpu:0.1.0")
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    # a pipeline parameter's default as the step receives it (the IR keeps every number as a double)
    typed = {"NUMBER_INTEGER": int, "NUMBER_DOUBLE": float, "BOOLEAN": bool, "STRING": str, "LIST": list}
    training = {
        name: typed[defaults[name]["parameterType"]](defaults[name]["defaultValue"])
        for name in spec_task["inputs"]["parameters"]
        if name not in constant and name in defaults
    }

    _, stats = converted
    train = stats["counts"]["train"]
    assert 16 <= train < 64  # the tiny examples: 64 (and below 32 examples, 32 too) is no batch size for them
    examples_uri, trials_uri = upload_examples(gcs, converted[0]), f"gs://{gcs.name}/run/tuning-spec/trials"
    specs, parameters, base = trial_job(
        examples_uri,
        trials_uri,
        constant["image"],
        constant["machine"],
        constant["boot_disk"],
        {**training, "hosts": constant["hosts"]},
    )
    in_pipeline.trial_results = [
        ({"learning_rate": 0.004, "per_replica_batch_size": 16, "augment": "false"}, 0.81),
        ({"learning_rate": 0.0009, "per_replica_batch_size": 32, "augment": "true"}, 0.93),
        ({"learning_rate": 0.009, "per_replica_batch_size": 16, "augment": "true"}, None),  # failed
        ({"learning_rate": 0.0002, "per_replica_batch_size": 32, "augment": "false"}, 0.93),  # a tie: the earlier
    ]
    resources = tmp_path / "gcp_resources"
    body = send_tuning_job(in_pipeline, monkeypatch, spec, job_inputs, specs, parameters, base, resources)
    assert body["displayName"] == "tpu-image-classifier-tuning"
    assert body["maxTrialCount"] == 4 and body["parallelTrialCount"] == 2
    study = body["studySpec"]
    assert study["metrics"] == [{"metricId": "val_accuracy", "goal": "MAXIMIZE"}]
    assert study["parameters"] == [  # the default model trains from scratch: no fine-tuning depth
        {
            "parameterId": "learning_rate",
            "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.01},
            "scaleType": "UNIT_LOG_SCALE",
        },
        # batch sizes above the tiny examples' train split are left out
        {
            "parameterId": "per_replica_batch_size",
            "discreteValueSpec": {"values": [16.0, 32.0] if train >= 32 else [16.0]},
            "scaleType": "UNIT_LINEAR_SCALE",
        },
        {"parameterId": "augment", "categoricalValueSpec": {"values": ["false", "true"]}},
    ]
    assert study["measurementSelectionType"] == "BEST_MEASUREMENT"
    trial_spec = body["trialJobSpec"]
    assert trial_spec["baseOutputDirectory"] == {"outputUriPrefix": trials_uri}
    (pool,) = trial_spec["workerPoolSpecs"]
    assert pool["machineSpec"] == {"machineType": "ct5lp-hightpu-4t", "tpuTopology": "2x2"}
    assert pool["diskSpec"] == {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}  # (v5e's; v6e's is Hyperdisk)
    assert pool["replicaCount"] == "1"  # int64, a string in JSON
    container = pool["containerSpec"]
    assert container["imageUri"] == constant["image"]
    assert container["command"] == ["python", "-m", "components.train.trial"]
    args = container["args"]
    assert args[:2] == ["--examples", examples_uri]
    assert args[args.index("--epochs") + 1] == "0" and args[args.index("--model") + 1] == "auto"  # the defaults (auto)
    assert args[args.index("--weights-cache") + 1] == f"gs://{gcs.name}/keras-weights"
    assert "--augment" not in args  # a switch, off by default: the trials' own --augment=... decides
    assert json.loads(resources.read_text())["resources"][0]["resourceType"] == "HyperparameterTuningJob"

    model = Model(uri=f"gs://{gcs.name}/run/best-trial/model")
    best = json.loads(
        keep_best_trial(resources.read_text(), base, model, vertex_settings_in_pipeline("proj", "europe-west4"))
    )
    assert best == {"trial": "2", "parameters": in_pipeline.trial_results[1][0], "val_accuracy": 0.93}
    assert model.uri == f"{trials_uri}/2/model"  # where Vertex AI's AIP_MODEL_DIR pointed trial 2
    assert model.metadata["trial"] == "2" and model.metadata["learning_rate"] == 0.0009


def send_tuning_job(fake, monkeypatch, spec: dict, job_inputs: dict, specs, parameters, base, resources) -> dict:
    """GCPC's launcher of the tuning job, given the payload the compiled IR renders from the specification step's
    outputs (``specs``, ``parameters``, ``base``), sending to the fake server; the body it sent, read as the service
    reads it: the REST schema's HyperparameterTuningJob (an unknown field fails here), enums by name (the client
    sends their numbers, which JSON allows)."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob
    from google.protobuf import json_format
    from google_cloud_pipeline_components.container.v1.hyperparameter_tuning_job import launcher

    job_constants = {
        name: value["runtimeValue"]["constant"] for name, value in job_inputs.items() if "runtimeValue" in value
    }
    component = spec["components"]["comp-hyperparameter-tuning-job"]["inputDefinitions"]["parameters"]
    payload = resolve_payload(
        spec,
        {
            **{name: value["defaultValue"] for name, value in component.items() if "defaultValue" in value},
            **job_constants,
            "worker_pool_specs": specs,
            "study_spec_parameters": parameters,
            "base_output_directory": base,
            "max_trial_count": 4,
            "parallel_trial_count": 2,
            "service_account": "",
            "network": "",
            "encryption_spec_key_name": "",
        },
    )
    real_client = aiplatform.gapic.JobServiceClient

    def to_the_fake(client_options, client_info):  # the one edge: GCPC reaches {location}-aiplatform over gRPC
        assert client_options.api_endpoint == "europe-west4-aiplatform.googleapis.com"
        return real_client(
            credentials=AnonymousCredentials(), transport="rest", client_options=ClientOptions(api_endpoint=fake.url)
        )

    monkeypatch.setattr(aiplatform.gapic, "JobServiceClient", to_the_fake)
    launcher.main(
        [
            "--type",
            "HyperparameterTuningJob",
            "--payload",
            payload,
            "--project",
            "proj",
            "--location",
            "europe-west4",
            "--gcp_resources",
            str(resources),
        ]
    )
    sent = fake.bodies("POST", "/hyperparameterTuningJobs")[-1]
    return json_format.MessageToDict(json_format.ParseDict(sent, HyperparameterTuningJob()._pb))


def upload_examples(gcs, examples: str) -> str:
    """The examples as the convert step left them, in the bucket; their gs:// folder."""
    for name in os.listdir(examples):
        if os.path.isfile(os.path.join(examples, name)):
            gcs.blob(f"run/examples/{name}").upload_from_filename(os.path.join(examples, name))
    return f"gs://{gcs.name}/run/examples"


def test_the_tuning_job_of_a_model_of_ones_own_searches_the_ranges_it_declares(
    in_pipeline, gcs, converted, tmp_path, monkeypatch
):
    """The specification step, given the model file submit uploaded and a hyperparameter of its own: the study
    searches the file's SEARCH_SPACE beside ours (``hparam_width``), and each trial trains that file with the run's
    hyperparameters, Vertex AI appending the trial's own. Checked in the step's output and the job's body."""
    from components.models import parse_ref
    from components.models.source import pin
    from components.train.tuning_vertex import trial_job

    spec, tasks = compiled_tasks()
    constant = {
        name: value["runtimeValue"]["constant"]
        for name, value in tasks["tuning-spec"]["inputs"]["parameters"].items()
        if "runtimeValue" in value
    }
    examples_uri = upload_examples(gcs, converted[0])
    model = pin(parse_ref(os.path.join(REPO, "examples", "models", "codelab_convnet.py")), f"gs://{gcs.name}/root")
    assert model.startswith(f"gs://{gcs.name}/root/models/") and model.endswith("/codelab_convnet.py:build")
    params = {
        "model_name": model,
        "hparams": ["batch_norm=false"],
        "epochs": 3,
        "weights": "auto",
        "hosts": constant["hosts"],
    }
    trials_uri = f"gs://{gcs.name}/run/tuning-spec/trials"
    specs, parameters, base = trial_job(
        examples_uri, trials_uri, constant["image"], constant["machine"], constant["boot_disk"], params
    )
    assert parameters[-1] == {
        "parameter_id": "hparam_width",
        "discrete_value_spec": {"values": [0.5, 1.0, 1.5]},
        "scale_type": "UNIT_LINEAR_SCALE",
        "conditional_parameter_specs": [],
    }
    args = specs[0]["container_spec"]["args"]
    assert args[args.index("--model") + 1] == model and args[args.index("--hparam") + 1] == "batch_norm=false"
    in_pipeline.trial_results = [({"learning_rate": 0.004, "hparam_width": 1.5}, 0.8)]
    body = send_tuning_job(
        in_pipeline,
        monkeypatch,
        spec,
        tasks["hyperparameter-tuning-job"]["inputs"]["parameters"],
        specs,
        parameters,
        base,
        tmp_path / "gcp_resources",
    )
    assert body["studySpec"]["parameters"][-1] == {
        "parameterId": "hparam_width",
        "discreteValueSpec": {"values": [0.5, 1.0, 1.5]},
        "scaleType": "UNIT_LINEAR_SCALE",
    }
    sent_args = body["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    assert sent_args[sent_args.index("--model") + 1] == model


def test_a_tuning_job_without_a_succeeded_trial_is_one_line():
    failed = [{"id": "1", "state": "FAILED"}, {"id": "2", "state": "SUCCEEDED", "finalMeasurement": {"metrics": []}}]
    with pytest.raises(RuntimeError, match=r"^no trial of the tuning job succeeded with a val_accuracy"):
        tune.best_trial(failed)


def test_a_trial_metric_is_written_as_vertex_ai_reads_it(tmp_path, monkeypatch):
    """cloudml-hypertune's file: one JSON line per report, the metric under its tag, as strings."""
    path = tmp_path / "hypertune" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "7")
    assert tune.report({"final": {"loss": 0.3, "val_accuracy": 0.875}, "epochs_trained": 3}) == 0.875
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert record["val_accuracy"] == "0.875" and record["global_step"] == "3" and record["trial"] == "7"
    with pytest.raises(UsageError, match="no validation split: convert with --validation-fraction above 0"):
        tune.report({"final": {"accuracy": 0.9}, "epochs_trained": 3})


def test_examples_without_a_validation_split_are_refused_before_any_trial(tmp_path):
    counts = {"train": 90, "validation": 0, "test": 10}
    facts = {"modality": "image", "image_size": 16, "class_names": ["a", "b"], "num_classes": 2, "num_examples": 100}
    STATS.write(str(tmp_path), {"counts": counts, **facts})
    with pytest.raises(
        UsageError,
        match=rf"^tuning compares trials on val_accuracy, and {tmp_path} have no "
        r"validation split: convert with --validation-fraction above 0$",
    ):
        tune.space_for("auto", "auto", str(tmp_path))


def test_the_search_space_follows_the_model_and_the_data():
    from components.models import BACKBONES

    scratch = tune.search_space("codelab_convnet_bn", "none")
    assert list(scratch) == ["learning_rate", "per_replica_batch_size", "augment"]
    backbone = next(iter(BACKBONES))
    assert "fine_tune_blocks" in tune.search_space(backbone, "imagenet")
    assert "fine_tune_blocks" not in tune.search_space(backbone, "none")  # trained from scratch: one phase
    assert tune.search_space("lstm", "none", train_examples=20)["per_replica_batch_size"].values == [16]
    assert tune.search_space("lstm", "none", train_examples=10)["per_replica_batch_size"].values == [16]  # the least
    assert "augment" not in tune.search_space("lstm", "none", modality="text")  # (it changes images only)


def test_random_draws_stay_in_the_space_and_follow_the_seed():
    space = tune.search_space("mobilenet_v3_small", "imagenet")
    draws = tune.sample(space, 200, seed=3)
    assert draws == tune.sample(space, 200, seed=3) and draws != tune.sample(space, 200, seed=4)
    rates = [d["learning_rate"] for d in draws]
    assert min(rates) >= 1e-4 and max(rates) <= 1e-2
    below = sum(rate < 1e-3 for rate in rates)  # log scale: 1e-3 is the middle, so about half lie below it
    assert 60 < below < 140
    assert {d["per_replica_batch_size"] for d in draws} == {16, 32, 64}
    assert {d["augment"] for d in draws} == {"false", "true"}
    assert {d["fine_tune_blocks"] for d in draws} == {1, 2, 3, 4, 5, 6}


def test_trial_flags_are_read_as_vertex_ai_writes_them():
    from components.train.config import TrainConfig

    values, rest = tune.split_trial_flags(
        [
            "--examples",
            "gs://b/x",
            "--learning-rate",
            "0.002",
            "--learning_rate=0.0005",
            "--per_replica_batch_size=32.0",
            "--augment=true",
            "--fine_tune_blocks=4",
        ]
    )
    assert rest == ["--examples", "gs://b/x", "--learning-rate", "0.002"]
    config = tune.apply(TrainConfig(examples_dir="x", learning_rate=0.002), values)
    assert (config.learning_rate, config.per_replica_batch_size, config.augment, config.fine_tune_blocks) == (
        0.0005,
        32,
        True,
        4,
    )
    assert tune.apply(config, {"augment": "False"}).augment is False
    values, rest = tune.split_trial_flags(["--hparam", "units=8", "--hparam_units=64.0", "--hparam_act=gelu"])
    assert rest == ["--hparam", "units=8"] and values == {"hparam_units": "64.0", "hparam_act": "gelu"}
    assert tune.apply(TrainConfig(examples_dir="x", hparams=("units=8", "depth=2")), values).hparams == (
        "units=64.0",
        "depth=2",
        "act=gelu",
    )
    with pytest.raises(UsageError, match=r"--augment=maybe: a trial's augment is true or false"):
        tune.apply(config, {"augment": "maybe"})


def test_a_vertex_ai_trial_trains_with_its_values_and_reports_its_metric(converted, tmp_path, monkeypatch):
    """``python -m components.train.trial`` as a trial's container runs it: AIP_MODEL_DIR set by Vertex AI, the
    trial's values appended to the training flags."""
    from components.train.trial import main

    examples, _ = converted
    metrics = tmp_path / "output.metrics"
    monkeypatch.setenv("AIP_MODEL_DIR", str(tmp_path / "trial-3" / "model"))
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metrics))
    main(
        [
            "--examples",
            examples,
            "--model",
            "codelab_convnet",
            "--epochs",
            "2",
            "--backend",
            "tensorflow",
            "--precision",
            "float32",
            "--learning-rate",
            "0.002",
            "--learning_rate=0.0007",
            "--per_replica_batch_size=16.0",
            "--augment=true",
        ]
    )
    with open(tmp_path / "trial-3" / "model" / "model_config.json") as handle:
        config = json.load(handle)
    assert config["learning_rate"] == 0.0007 and config["per_replica_batch_size"] == 16 and config["augment"] is True
    with open(tmp_path / "trial-3" / "model" / "history.json") as handle:
        last = json.load(handle)["history"]["val_accuracy"][-1]
    assert json.loads(metrics.read_text())["val_accuracy"] == str(last)


def test_a_local_search_of_two_trials_keeps_the_best_model(converted, tmp_path):
    """``run-local --tune 2``'s train step: two trials drawn from the space, each trained for real; the model left in
    the model folder is the better one's, and tuning.json says what each trial scored."""
    from components.train.__main__ import main

    examples, stats = converted
    model_dir = tmp_path / "model"
    main(
        [
            "--examples",
            examples,
            "--model-dir",
            str(model_dir),
            "--model",
            "codelab_convnet",
            "--epochs",
            "3",
            "--backend",
            "tensorflow",
            "--precision",
            "float32",
            "--tune-trials",
            "2",
            "--seed",
            "5",
        ]
    )
    with open(model_dir / "tuning.json") as handle:
        tuning = json.load(handle)
    drawn = tune.sample(tune.search_space("codelab_convnet", "none", stats["counts"]["train"]), 2, 5)
    assert [trial["parameters"] for trial in tuning["trials"]] == drawn
    scores = [trial["val_accuracy"] for trial in tuning["trials"]]
    best = 1 if scores[1] > scores[0] else 0
    assert tuning["best"] == tuning["trials"][best]
    with open(model_dir / "model_config.json") as handle:
        config = json.load(handle)
    assert config["learning_rate"] == drawn[best]["learning_rate"]
    assert config["image_size"] == TINY_SIZE
    with open(model_dir / "history.json") as handle:
        assert json.load(handle)["history"]["val_accuracy"][-1] == scores[best]
    kept = os.listdir(model_dir)
    assert "trials" not in kept and {"model.keras", "model.weights.h5", "tuning.json"} <= set(kept)


def test_a_local_search_searches_the_ranges_a_model_of_ones_own_declares(converted, tmp_path):
    """``--tune 2`` with the example file: each trial draws its width from the file's SEARCH_SPACE too, trains
    with it (a trial's value over the run's own), and the model kept was built with the best trial's width."""
    from components.train.__main__ import main

    examples, _ = converted
    model_dir = tmp_path / "model"
    main(
        [
            "--examples",
            examples,
            "--model-dir",
            str(model_dir),
            "--model",
            os.path.join(REPO, "examples", "models", "codelab_convnet.py"),
            "--hparam",
            "width=2",
            "--epochs",
            "2",
            "--backend",
            "tensorflow",
            "--precision",
            "float32",
            "--tune-trials",
            "2",
            "--seed",
            "3",
        ]
    )
    with open(model_dir / "tuning.json") as handle:
        tuning = json.load(handle)
    assert {
        "parameter_id": "hparam_width",
        "discrete_value_spec": {"values": [0.5, 1.0, 1.5]},
        "scale_type": "UNIT_LINEAR_SCALE",
        "conditional_parameter_specs": [],
    } in tuning["space"]
    widths = [trial["parameters"]["hparam_width"] for trial in tuning["trials"]]
    assert set(widths) <= {0.5, 1.0, 1.5}
    with open(model_dir / "model_config.json") as handle:
        config = json.load(handle)
    assert config["hparams"] == {"batch_norm": True, "width": tuning["best"]["parameters"]["hparam_width"]}


def test_the_run_summary_shows_each_trial_and_the_one_kept():
    from pipeline.local.summary import tuning_line

    tuning = {
        "metric": "val_accuracy",
        "trials": [{"trial": 1, "val_accuracy": 0.91}, {"trial": 2, "val_accuracy": 0.957}],
        "best": {"trial": 2, "parameters": {"learning_rate": 0.0009, "augment": "true"}, "val_accuracy": 0.957},
    }
    assert tuning_line(tuning) == (
        "2 trials (val_accuracy 0.9100, 0.9570): trial 2 kept, learning_rate 0.0009 augment true"
    )
