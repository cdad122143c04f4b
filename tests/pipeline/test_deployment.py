"""Serving on Vertex AI, contract-tested: the real google-cloud-aiplatform client against the fake Vertex AI server
(``tests/fake_vertex.py``) and the emulated Cloud Storage. The DAG's deploy step, online prediction through an
endpoint (answered by the real exported model), and batch prediction jobs; the request bodies as the REST API
documents them, and the faults as for submit."""

from __future__ import annotations

import base64
import io
import json
import os

import pytest

from components.cli import UsageError
from pipeline.__main__ import main
from tests.conftest import BUCKET, made_up_export
from tests.pipeline.test_vertex import PARENT, register_step, upload_export

WHERE = {"project": "demo-project", "location": "europe-west4"}


def posted(fake, suffix: str) -> list[dict]:
    """The bodies of the POST requests whose path ends with ``suffix``."""
    return [r.body for r in fake.requests if r.method == "POST" and r.path.endswith(suffix)]


def deploy_step(model_version: str, endpoint: str) -> tuple[dict, object]:
    """The DAG's deploy step as Vertex AI runs it: (what it did, its google.VertexEndpoint output)."""
    from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint, VertexModel

    from components.deploy.component import deploy

    model = VertexModel(name="vertex_model", uri="https://x", metadata={"resourceName": model_version})
    output = VertexEndpoint(name="vertex_endpoint", uri="gs://x/vertex_endpoint", metadata={})
    from components.params import DEPLOY, defaults

    return json.loads(deploy(model, endpoint, output, **defaults(DEPLOY), **WHERE)), output


def test_the_dag_deploys_each_registered_version_with_all_traffic_and_undeploys_the_last(in_pipeline, gcs):
    first, _ = register_step(gcs, upload_export(gcs, "root/run-1/export", "a" * 64), "flowers", pipeline_run="r1")
    version_1 = f"{first['model']}@{first['version']}"
    done, endpoint = deploy_step(version_1, "flowers-online")
    # no endpoint of that name: made, then the version deployed on it with all of its traffic
    (created,) = posted(in_pipeline, "/endpoints")
    assert created["displayName"] == "flowers-online"
    name = done["endpoint"]
    assert endpoint.metadata == {"resourceName": name} and name.startswith(f"{PARENT}/endpoints/")
    (request,) = posted(in_pipeline, ":deployModel")
    assert request["deployedModel"]["model"] == version_1
    assert request["deployedModel"]["dedicatedResources"]["machineSpec"] == {"machineType": "n1-standard-2"}
    assert request["trafficSplit"] == {"0": 100}
    assert in_pipeline.endpoints[name]["trafficSplit"] == {done["deployed_model_id"]: 100}
    # the same version again (a rerun that registered nothing): nothing to do
    again, _ = deploy_step(version_1, "flowers-online")
    assert again["action"] == "unchanged" and len(posted(in_pipeline, ":deployModel")) == 1
    # a new version takes all the traffic, on the same endpoint (found by its name), and the last one is undeployed
    second, _ = register_step(gcs, upload_export(gcs, "root/run-2/export", "b" * 64), "flowers", pipeline_run="r2")
    done_2, _ = deploy_step(f"{second['model']}@{second['version']}", "flowers-online")
    assert done_2["endpoint"] == name and done_2["undeployed"] == ["1"]
    served = in_pipeline.endpoints[name]
    assert [(d["model"], d["modelVersionId"]) for d in served["deployedModels"]] == [(second["model"], "2")]
    assert served["trafficSplit"] == {done_2["deployed_model_id"]: 100}
    assert len(posted(in_pipeline, "/endpoints")) == 1
    # a rollback by hand: python -m pipeline deploy puts version 1 back the same way
    assert main(["deploy", *in_pipeline.args, "--model", version_1, "--endpoint", "flowers-online"]) == 0
    assert [d["modelVersionId"] for d in in_pipeline.endpoints[name]["deployedModels"]] == ["1"]


def test_a_deploy_that_a_503_hid_is_not_repeated_and_a_refusal_is_one_line(in_pipeline, gcs):
    from components.vertex_client import VertexError

    first, _ = register_step(gcs, upload_export(gcs, "root/run-1/export", "a" * 64), "tulips")
    version = f"{first['model']}@{first['version']}"
    in_pipeline.fail("POST", ":deployModel", [503], after=True)
    done, _ = deploy_step(version, "tulips-online")
    assert len(in_pipeline.endpoints[done["endpoint"]]["deployedModels"]) == 1
    assert len(posted(in_pipeline, ":deployModel")) == 1
    in_pipeline.fail("POST", ":deployModel", [403])
    second, _ = register_step(gcs, upload_export(gcs, "root/run-2/export", "b" * 64), "tulips")
    with pytest.raises(VertexError, match=r"deploy .*@2 to .*aiplatform\.endpoints\.deploy"):
        deploy_step(f"{second['model']}@{second['version']}", "tulips-online")


@pytest.fixture
def served(in_pipeline, gcs, exported):
    """A registered export of the tiny trained model deployed to an endpoint whose answers come from that exported
    SavedModel itself (the fake server runs it on the instances it is sent)."""
    import tensorflow as tf

    export_dir, _ = exported
    for root, _, files in os.walk(export_dir):
        for file in files:
            path = os.path.join(root, file)
            gcs.blob(f"root/served/export/{os.path.relpath(path, export_dir)}").upload_from_filename(path)
    decided, _ = register_step(gcs, f"gs://{BUCKET}/root/served/export", "tiny", pipeline_run="r1")
    serving = tf.saved_model.load(os.path.join(export_dir, "saved_model")).signatures["serving_default"]

    def predictor(deployed, instances):
        encoded = tf.constant([base64.b64decode(i["image_bytes"]["b64"]) for i in instances])
        answers = serving(image_bytes=encoded)
        columns = (answers[k].numpy() for k in ("probabilities", "class_id", "label"))
        return [
            {"probabilities": p.tolist(), "class_id": int(c), "label": label.decode()}
            for p, c, label in zip(*columns, strict=True)
        ]

    in_pipeline.predictor = predictor
    deploy_step(f"{decided['model']}@{decided['version']}", "tiny-online")
    # the fake answers with this export whatever it is sent: what ties the endpoint to it is the requests, the deploy
    # naming the version registered from this export, and that version's upload pointing at a copy of its graph
    (deployed,) = posted(in_pipeline, ":deployModel")
    assert deployed["deployedModel"]["model"] == f"{decided['model']}@{decided['version']}"
    (upload,) = posted(in_pipeline, "models:upload")
    bucket, _, prefix = upload["model"]["artifactUri"].removeprefix("gs://").partition("/")
    copied = gcs.blob(f"{prefix.rstrip('/')}/saved_model.pb").download_as_bytes()
    with open(os.path.join(export_dir, "saved_model", "saved_model.pb"), "rb") as handle:
        assert bucket == BUCKET and copied == handle.read()
    return export_dir


def test_predict_through_an_endpoint_answers_as_the_export_does_here(vertex, served, image_folder, tmp_path, capsys):
    """Each file goes to the endpoint as a client sends it (its own bytes), but for a WebP, which the serving graph
    refuses, and a photo too large for one request: those go as the square the conversion makes of them."""
    import numpy as np
    from PIL import Image

    from pipeline.deployment import ONLINE_FILE_BYTES

    images = sorted(os.path.join(root, f) for root, _, files in os.walk(image_folder) for f in files)[:3]
    Image.open(images[0]).save(tmp_path / "phone.webp", quality=90)
    photo = np.asarray(Image.open(images[1]).convert("RGB").resize((1200, 1300)), dtype=int)  # a class's colours
    photo = photo + np.random.default_rng(0).integers(-60, 60, photo.shape)  # grain, so that it is a large file
    Image.fromarray(photo.clip(0, 255).astype(np.uint8)).save(tmp_path / "large.jpg", quality=95)
    assert os.path.getsize(tmp_path / "large.jpg") > ONLINE_FILE_BYTES
    images += [str(tmp_path / "phone.webp"), str(tmp_path / "large.jpg")]
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    assert main(["predict", "--model", served, "--json", *images]) == 0
    local = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    code = main(["predict", "--endpoint", "tiny-online", *vertex.args, "--json", *images, str(broken)])
    assert code == 2  # one image could not be used; the others were answered
    captured = capsys.readouterr()
    online = [json.loads(line) for line in captured.out.splitlines()]
    assert [a["path"] for a in online] == images
    for here, there in zip(local, online, strict=True):
        assert [t["label"] for t in here["top"]] == [t["label"] for t in there["top"]]
        # (the large photo is sent whole here, as the conversion's square there: the two resizes differ by a level)
        tolerance = 1e-5 if here["path"] != str(tmp_path / "large.jpg") else 1e-3
        assert [t["probability"] for t in here["top"]] == pytest.approx(
            [t["probability"] for t in there["top"]], abs=tolerance
        )
    assert f"image {broken} cannot be used" in captured.err
    # the requests as the REST API documents them: {"instances": [{"image_bytes": {"b64": ...}}]}, under 1.5 MB each
    requests = [r for r in vertex.requests if r.path.endswith(":predict")]
    assert all(len(json.dumps(r.body)) < 1_500_000 for r in requests)
    sent = [base64.b64decode(i["image_bytes"]["b64"]) for r in requests for i in r.body["instances"]]
    assert len(sent) == 5 and all(list(i) == ["image_bytes"] for r in requests for i in r.body["instances"])
    for path, content in zip(images[:3], sent[:3], strict=True):
        with open(path, "rb") as handle:
            assert content == handle.read()  # the file itself
    with open(os.path.join(served, "export.json")) as handle:
        size = json.load(handle)["image_size"]
    for content in sent[3:]:  # the WebP and the large photo: the conversion's square, lossless
        square = Image.open(io.BytesIO(content))
        assert square.format == "PNG" and square.size == (size, size)


def test_predict_through_an_endpoint_that_serves_nothing_is_one_line(vertex, image_folder):
    from google.cloud import aiplatform

    from components.vertex_client import connect, load_settings

    connect(
        load_settings(
            {"project": "demo-project", "region": "europe-west4", "api_endpoint": vertex.url, "anonymous": True}
        )
    )
    aiplatform.Endpoint.create(display_name="empty")
    image = next(os.path.join(root, f) for root, _, files in os.walk(image_folder) for f in files)
    with pytest.raises(UsageError, match=r"endpoint .* serves no model: deploy one first"):
        main(["predict", "--endpoint", "empty", *vertex.args, image])
    with pytest.raises(UsageError, match=r"no endpoint named nowhere in europe-west4"):
        main(["predict", "--endpoint", "nowhere", *vertex.args, image])


def test_batch_predict_over_a_folder_of_images_lists_them_and_follows_the_job(vertex, gcs, capsys):
    for name in ("daisy/1.jpg", "daisy/2.png", "rose/3.JPG", "notes.txt"):
        gcs.blob(f"incoming/{name}").upload_from_string(b"x")
    model = f"{PARENT}/models/42@3"
    args = [
        "batch-predict",
        *vertex.args,
        "--model",
        model,
        "--source",
        f"gs://{BUCKET}/incoming",
        "--output",
        f"gs://{BUCKET}/predictions",
        "--wait",
        "--poll-interval",
        "0",
    ]
    assert main(args) == 0
    listing = gcs.blob("predictions/instances.txt").download_as_text().split()
    assert listing == [f"gs://{BUCKET}/incoming/{n}" for n in ("daisy/1.jpg", "daisy/2.png", "rose/3.JPG")]
    (body,) = posted(vertex, "/batchPredictionJobs")
    assert body["model"] == model
    assert body["inputConfig"] == {
        "instancesFormat": "file-list",
        "gcsSource": {"uris": [f"gs://{BUCKET}/predictions/instances.txt"]},
    }
    assert body["outputConfig"] == {
        "predictionsFormat": "jsonl",
        "gcsDestination": {"outputUriPrefix": f"gs://{BUCKET}/predictions"},
    }
    resources = body["dedicatedResources"]
    assert resources["machineSpec"] == {"machineType": "n1-standard-4"} and resources["maxReplicaCount"] == 1
    out = capsys.readouterr().out
    assert "JOB_STATE_RUNNING" in out and "JOB_STATE_SUCCEEDED" in out and "predictions in gs://" in out


def test_batch_predict_over_jsonl_and_its_mistakes(vertex, gcs):
    model = f"{PARENT}/models/42"
    vertex.fail("POST", "/batchPredictionJobs", [503], after=True)  # made, then 503: found, not made twice
    args = ["batch-predict", *vertex.args, "--model", model, "--output", f"gs://{BUCKET}/out"]
    assert main([*args, "--source", f"gs://{BUCKET}/requests.jsonl"]) == 0
    (body,) = posted(vertex, "/batchPredictionJobs")
    assert body["inputConfig"]["instancesFormat"] == "jsonl" and len(vertex.batch_jobs) == 1
    with pytest.raises(UsageError, match=r"--source /tmp/images must be on Cloud Storage"):
        main([*args, "--source", "/tmp/images"])
    with pytest.raises(UsageError, match=r"--source gs://.*/empty holds no images"):
        main([*args, "--source", f"gs://{BUCKET}/empty"])
    with pytest.raises(UsageError, match=r"--model 42: expected projects/P/locations/L/models/ID"):
        main(["batch-predict", *vertex.args, "--model", "42", "--source", "gs://b/x.jsonl", "--output", "gs://b/o"])


def test_online_requests_for_a_256_pixel_model_stay_under_vertex_ais_limit(in_pipeline, gcs, tmp_path, capsys):
    """Lossless PNGs of grain, the largest files of their size a client sends: 16 a request would be 4 MB of base64
    at 256 px. Each request is split by its encoded size; a photo over 1 MB goes as the conversion's 256 px square."""
    import numpy as np
    from PIL import Image

    report = made_up_export(f"gs://{BUCKET}/root/big/export", "c" * 64, class_names=["daisy", "rose"], image_size=256)
    gcs.blob("root/big/export/export.json").upload_from_string(json.dumps(report))
    gcs.blob("root/big/export/saved_model/saved_model.pb").upload_from_string(b"graph")
    decided, _ = register_step(gcs, f"gs://{BUCKET}/root/big/export", "big", pipeline_run="r1")
    deploy_step(f"{decided['model']}@{decided['version']}", "big-online")
    in_pipeline.predictor = lambda deployed, instances: [{"probabilities": [0.25, 0.75]} for _ in instances]
    rng = np.random.default_rng(7)
    images = []
    for n in range(20):
        side = 900 if n == 5 else 256  # one photo over 1 MB
        path = tmp_path / f"grain-{n:02d}.png"
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(path)
        images.append(str(path))
    assert os.path.getsize(images[5]) > 1_000_000 and all(os.path.getsize(p) > 190_000 for p in images)
    capsys.readouterr()  # (the register and deploy steps' lines)
    assert main(["predict", "--endpoint", "big-online", *in_pipeline.args, "--json", *images]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a["path"] for a in answers] == images and answers[0]["top"][0] == {"label": "rose", "probability": 0.75}
    requests = [r for r in in_pipeline.requests if r.path.endswith(":predict")]
    sizes = [len(json.dumps(r.body)) for r in requests]
    assert max(sizes) < 1_500_000 and len(requests) >= 4, sizes  # Vertex AI's limit: 1.5 MB a request
    sent = [base64.b64decode(i["image_bytes"]["b64"]) for r in requests for i in r.body["instances"]]
    assert len(sent) == 20 and Image.open(io.BytesIO(sent[5])).size == (256, 256)
    for path, content in zip(images[:5], sent[:5], strict=True):
        with open(path, "rb") as handle:
            assert content == handle.read()  # a file that fits goes as it is
