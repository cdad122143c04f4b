"""The steps of the light image (``pipeline.images.LIGHT_STEPS``), run as the DAG runs them on Vertex AI (the
Cloud Storage emulator, the fake Vertex AI server) in a process where every package the light image lacks cannot be
imported: what the lock's ``light`` group does not pull in. ``make test-images`` runs them in the built image."""

import json
import os
import subprocess
import sys
import tomllib

from pipeline.images import LIGHT_STEPS
from tests.conftest import BUCKET, REPO_ROOT, image_bytes, write_image_folder
from tests.pipeline.test_vertex import upload_evaluation, upload_export


def left_out() -> set[str]:
    """What the light image leaves out of its group (containers/light/not-installed.txt)."""
    with open(os.path.join(REPO_ROOT, "containers", "light", "not-installed.txt")) as handle:
        return {line.strip() for line in handle if line.strip() and not line.startswith("#")}


def light_packages() -> set[str]:
    """The distributions the light image installs: the lock's ``light`` group and what they need, but those it
    leaves out."""
    with open(os.path.join(REPO_ROOT, "uv.lock"), "rb") as handle:
        packages: dict[str, list[dict]] = {}
        for package in tomllib.load(handle)["package"]:  # (a name locked at two versions, for the serving stack)
            packages.setdefault(package["name"], []).append(package)
    (project,) = packages["tpu-image-pipeline"]
    wanted = [entry["name"] for entry in project["dev-dependencies"]["light"]]
    found: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name not in found:
            found.add(name)
            wanted += [entry["name"] for package in packages[name] for entry in package.get("dependencies", [])]
    return found - left_out()


def missing_modules() -> set[str]:
    """The packages (dotted) of the installed distributions outside the light image: each distribution's outermost
    regular packages and modules, so that a namespace shared with one inside (``google.cloud``) stays importable
    while ``google.cloud.bigquery`` does not."""
    import importlib.metadata as metadata

    light = {name.replace("_", "-").lower() for name in light_packages()}
    owners: dict[str, set[str]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"].replace("_", "-").lower()
        files = {str(file) for file in dist.files or ()}
        for file in files:
            parts = file.split("/")
            if not parts[-1].endswith((".py", ".so")) or parts[0].endswith((".dist-info", ".data")) or ".." in parts:
                continue
            for depth in range(1, len(parts) + 1):  # the first level that is a package of its own, or the module
                if depth == len(parts) or "/".join(parts[:depth]) + "/__init__.py" in files:
                    owners.setdefault(".".join(parts[:depth]).split(".cpython")[0].removesuffix(".py"), set()).add(name)
                    break
    return {package for package, found in owners.items() if not found & light} - {"components", "pipeline", "tests"}


GUARD = """
import importlib.abc, sys
MISSING = set({missing!r})
class NotInTheLightImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == package or name.startswith(package + ".") for package in MISSING):
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in the light image)", name=name)
        return None
sys.meta_path.insert(0, NotInTheLightImage())
AT_START = set(sys.modules)  # (what site's .pth files loaded: setuptools' hooks)
"""

STEPS = """
import json
from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint, VertexModel
from kfp.dsl import Artifact, Model
from components.convert.component import fingerprint
from components.deploy.component import deploy
from components.evaluate.component import not_blessed
from components.params import CONVERT, DEPLOY, TEXT, defaults
from components.register import component as register

given = json.loads(sys.argv[1])
where = {"project": "demo-project", "location": "europe-west4"}
done = {}
options = {"classes": [], "modality": "auto", "text_column": TEXT["text_column"].default,
           "label_column": TEXT["label_column"].default}
done["fingerprint"] = {source: fingerprint(source=source, run_id="run-1", **options) for source in given["sources"]}
done["find_baseline"] = register.find_baseline("flowers", "", "", "", **where)
model = VertexModel(name="vertex_model", uri="gs://x/vertex_model", metadata={})
done["register"] = json.loads(register.register(Model(uri=given["export"]), Artifact(uri=given["evaluation"]),
                              Artifact(uri=given["statistics"]), model, "flowers", "", "", "run-1", **where))
endpoint = VertexEndpoint(name="vertex_endpoint", uri="gs://x/vertex_endpoint", metadata={})
done["deploy"] = json.loads(deploy(model, "flowers-online", endpoint, **defaults(DEPLOY), **where))
folder = given["folder_registry"]
done["find_baseline_in_folder"] = register.find_baseline_in_folder("flowers", folder, "", "run-1")
done["register_in_folder"] = json.loads(register.register_in_folder(
    Model(uri=given["export"]), Artifact(uri=given["evaluation"]), Artifact(uri=given["statistics"]), "flowers", folder,
    "", "run-1"))
done["not_blessed"] = not_blessed(Artifact(uri=given["local_evaluation"]))  # (read through /gcs on Vertex AI)
print(json.dumps(done))
print(json.dumps(sorted(name for name in set(sys.modules) - AT_START
                        if any(name == package or name.startswith(package + ".") for package in MISSING))))
"""


def test_the_light_steps_run_without_what_the_light_image_leaves_out(in_pipeline, gcs, tmp_path):
    import numpy as np

    from components.convert.fingerprint import fingerprint_source

    missing = missing_modules()
    # what the other steps need, and the light image must not carry
    assert {
        "apache_beam",
        "tensorflow",
        "jax",
        "jaxlib",
        "keras",
        "numpy",
        "PIL",
        "sklearn",
        "scipy",
        "google.genai",
        "google.cloud.bigquery",
        "pydantic",
    } <= missing
    assert {
        "kfp",
        "google_cloud_pipeline_components",
        "yaml",
        "google.cloud.aiplatform",
        "google.cloud.storage",
        "google.protobuf",
        "google.auth",
    }.isdisjoint(missing)
    local = write_image_folder(tmp_path / "photos", per_class=2)
    red, green = image_bytes((200, 30, 30)), image_bytes((30, 200, 30), fmt="PNG")
    for name, content in {
        "photos/daisy/1.jpg": red,
        "photos/rose/1.png": green,
        "import.csv": b"photos/daisy/1.jpg,daisy\nphotos/rose/1.png,rose\n",
        "reviews.jsonl": b'{"text": "fine", "label": "pos"}\n',
        "records/train-0.tfrec": b"not read: listed only",
    }.items():
        gcs.blob(f"src/{name}").upload_from_string(content)
    buffer = __import__("io").BytesIO()
    np.savez(buffer, x=np.zeros((2, 4, 4), np.uint8), y=np.array([0, 1]))
    gcs.blob("src/digits.npz").upload_from_string(buffer.getvalue())
    sources = [
        local,
        *(
            f"gs://{BUCKET}/src/{name}"
            for name in ("photos", "import.csv", "reviews.jsonl", "records/*.tfrec", "digits.npz")
        ),
    ]
    export = upload_export(gcs, "root/run-1/export", "a" * 64)
    evaluation = upload_evaluation(gcs, "root/run-1/evaluation")  # (blessed: register takes nothing else)
    blessing = {"blessed": False, "reasons": ["test accuracy 0.5 is below the minimum 0.9"]}  # (the branch's)
    metrics = json.loads(gcs.blob("root/run-1/evaluation/metrics.json").download_as_bytes())
    for name in ("data_stats.json", "near_duplicates.npz"):  # the check-data step's output, copied as it is
        gcs.blob(f"root/run-1/statistics/{name}").upload_from_string(name.encode())
    local_evaluation = tmp_path / "evaluation"
    local_evaluation.mkdir()
    judged = {"model_dir": "/gcs/b/root/run-1/train/model", "examples_dir": "/gcs/b/root/run-1/convert/examples"}
    (local_evaluation / "metrics.json").write_text(json.dumps({**metrics, **judged, "blessing": blessing}))
    given = {
        "local_evaluation": str(local_evaluation),
        "sources": sources,
        "export": export,
        "evaluation": evaluation,
        "folder_registry": f"gs://{BUCKET}/registry",
        "statistics": f"gs://{BUCKET}/root/run-1/statistics",
    }
    script = GUARD.format(missing=sorted(missing)) + STEPS
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(given)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": REPO_ROOT},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    done, imported = (json.loads(line) for line in result.stdout.strip().splitlines()[-2:])
    assert imported == []
    assert set(done) == set(LIGHT_STEPS)
    assert done["fingerprint"] == {source: fingerprint_source(source) for source in sources}
    assert done["find_baseline"] == "" and done["register"]["action"] == "registered"
    assert done["deploy"]["action"] == "deployed"
    assert done["find_baseline_in_folder"] == "" and done["register_in_folder"]["version"] == 1
    assert done["not_blessed"] == ""
    assert (  # how to export the model that was not blessed, all the same
        "To export this model all the same: python -m components.export --model-dir /gcs/b/root/run-1/train/model "
        f"--examples /gcs/b/root/run-1/convert/examples --output {tmp_path}/exported-anyway --evaluation "
        f"{tmp_path}/evaluation\n"
    ) in result.stderr
