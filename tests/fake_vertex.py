"""A local stand-in for the Vertex AI REST API (v1), enough for pipeline jobs, schedules, model uploads and the
evaluations imported into model versions; and for the other Google Cloud APIs the preflight asks
(``tests/fake_google.py``).

The real ``google-cloud-aiplatform`` client talks to it (``api_endpoint="http://127.0.0.1:PORT"``,
``api_transport="rest"``). It records every request (method, path, query, JSON body) for the tests to check, moves a
job from PENDING to RUNNING to its final state as it is polled, and injects faults: ``fail(method, fragment,
[503, 503])`` answers the next matching requests with those status codes, in Google's JSON error format;
``after=True`` does what was asked first, then answers the error (a 503 that hides a success); a code may be
``(409, "ABORTED")`` to name the status.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from tests.fake_google import FakeGoogle

TYPES = "type.googleapis.com/google.cloud.aiplatform.v1"
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# (most specific first: an evaluation's path holds "/models" too)
PERMISSIONS = {
    "evaluations": "aiplatform.modelEvaluations.import",
    "contexts": "aiplatform.contexts.create",
    "deployModel": "aiplatform.endpoints.deploy",
    "predict": "aiplatform.endpoints.predict",
    "endpoints": "aiplatform.endpoints.create",
    "batchPredictionJobs": "aiplatform.batchPredictionJobs.create",
    "pipelineJobs": "aiplatform.pipelineJobs.create",
    "schedules": "aiplatform.schedules.create",
    "models": "aiplatform.models.upload",
}


@dataclass
class Request:
    method: str
    path: str
    query: dict
    body: dict | None


@dataclass
class FakeVertex:
    """State and fault plan; ``url`` once started."""

    final_state: str = "PIPELINE_STATE_SUCCEEDED"
    requests: list[Request] = field(default_factory=list)
    jobs: dict[str, dict] = field(default_factory=dict)
    schedules: dict[str, dict] = field(default_factory=dict)
    models: dict[str, dict] = field(default_factory=dict)
    evaluations: dict[str, list] = field(default_factory=dict)  # by model version (projects/.../models/ID@VERSION)
    slices: dict[str, list] = field(default_factory=dict)  # by evaluation name
    contexts: dict[str, dict] = field(default_factory=dict)  # the metadata store's (experiments), by name
    endpoints: dict[str, dict] = field(default_factory=dict)
    batch_jobs: dict[str, dict] = field(default_factory=dict)
    tuning_jobs: dict[str, dict] = field(default_factory=dict)
    custom_jobs: dict[str, dict] = field(default_factory=dict)
    # whether a custom job gets its machines: True, it runs and succeeds over a few reads; False, it stays queued (a
    # project without quota for them), until cancelled
    capacity: bool = True
    # what a tuning job's trials end with: [(values, val_accuracy or None for a failed trial)]; a test sets it
    trial_results: list = field(default_factory=list)
    # what an endpoint's deployed model answers: (deployed model, instances) -> predictions; a test sets it
    predictor: object = None
    faults: list[tuple[str, str, list, bool]] = field(default_factory=list)
    # the other Google Cloud APIs the preflight asks (tests/fake_google.py), under /<service>/
    google: FakeGoogle = field(default_factory=FakeGoogle)
    url: str = ""
    ids: itertools.count = field(default_factory=lambda: itertools.count(1000))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, method: str, fragment: str, codes: list, after: bool = False) -> None:
        """The next ``len(codes)`` requests whose path contains ``fragment`` get those status codes (``after``: once
        the request has been carried out)."""
        self.faults.append((method, fragment, list(codes), after))

    def bodies(self, method: str, fragment: str) -> list[dict]:
        return [r.body for r in self.requests if r.method == method and fragment in r.path]

    # -- request handling ----------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict]:
        with self.lock:
            self.requests.append(Request(method, path, query, body))
            for fault in self.faults:
                fault_method, fragment, codes, after = fault
                if fault_method == method and fragment in path and codes:
                    code, status, message = codes.pop(0), None, None
                    if isinstance(code, tuple):  # (code, status) or (code, status, the server's message)
                        code, status, message = (*code, None)[:3]
                    if after:
                        self.route(method, path, query, body or {})
                    return code, self.error(code, path, status, message)
            return self.route(method, path, query, body or {})

    def error(self, code: int, path: str, status: str | None = None, given: str | None = None) -> dict:
        collection = next((name for name in PERMISSIONS if f"/{name}" in path or f":{name}" in path), "pipelineJobs")
        message = {
            403: f"Permission '{PERMISSIONS[collection]}' denied on resource '{path}' (or it may not exist).",
            409: "A resource with this name already exists.",
            429: "Quota exceeded for aiplatform.googleapis.com/pipeline_job_create_requests.",
            503: "The service is currently unavailable.",
        }.get(code, "fault injected by the test")
        if status == "ABORTED":
            message = "The operation was aborted: a concurrent update to the same resource."
        message = given or message
        return {"error": {"code": code, "message": message, "status": status or STATUS_NAMES.get(code, "UNKNOWN")}}

    def route(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict]:
        answer = self.google.route(method, path, query, body)
        if answer is not None:
            return answer
        match = re.match(r"^/v1/(projects/[^/]+/locations/[^/]+)/(.*)$", path)
        if not match:
            return 404, self.error(404, path)
        parent, rest = match.groups()
        if rest == "pipelineJobs" and method == "POST":
            job_id = query.get("pipelineJobId", [f"job-{next(self.ids)}"])[0]
            name = f"{parent}/pipelineJobs/{job_id}"
            if name in self.jobs:
                return 409, self.error(409, path)
            job = {**body, "name": name, "state": "PIPELINE_STATE_PENDING", "createTime": "2026-11-21T00:00:00Z"}
            self.jobs[name] = job
            return 200, job
        if rest.startswith("pipelineJobs/") and method == "GET":
            name = f"{parent}/{rest}"
            if name not in self.jobs:
                return 404, self.error(404, path)
            job = self.jobs[name]
            # each read moves the job on: PENDING, RUNNING for three reads, then the final state
            job["_reads"] = job.get("_reads", 0) + 1
            order = ["PIPELINE_STATE_PENDING", *["PIPELINE_STATE_RUNNING"] * 3, self.final_state]
            job["state"] = order[min(job["_reads"], len(order) - 1)]
            if job["state"] != "PIPELINE_STATE_PENDING":  # a running job has its run's metadata context
                context = f"{parent}/metadataStores/default/contexts/{name.rsplit('/', 1)[1]}"
                job["jobDetail"] = {"pipelineRunContext": {"name": context, "schemaTitle": "system.PipelineRun"}}
            if job["state"] == "PIPELINE_STATE_FAILED":
                job["error"] = {"code": 9, "message": "The DAG failed because some tasks failed: train."}
            return 200, job
        if rest == "schedules" and method == "POST":
            name = f"{parent}/schedules/{next(self.ids)}"
            schedule = {**body, "name": name, "state": "ACTIVE", "createTime": "2026-11-21T00:00:00Z"}
            self.schedules[name] = schedule
            return 200, schedule
        if rest == "schedules" and method == "GET":
            wanted = re.search(r'display_name="([^"]*)"', query.get("filter", [""])[0])
            found = [s for s in self.schedules.values() if not wanted or s.get("displayName") == wanted.group(1)]
            return 200, {"schedules": found}
        schedule_match = re.match(r"^(schedules/[^/:]+)(?::(pause|resume))?$", rest)
        if schedule_match:
            name = f"{parent}/{schedule_match.group(1)}"
            if name not in self.schedules:
                return 404, self.error(404, path)
            action = schedule_match.group(2)
            if method == "POST" and action:
                self.schedules[name]["state"] = "PAUSED" if action == "pause" else "ACTIVE"
                return 200, {}
            if method == "PATCH":  # the fields the update mask names, replaced whole
                for path_name in query.get("updateMask", [""])[0].split(","):
                    key = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), path_name)
                    if key in body:
                        self.schedules[name][key] = body[key]
                return 200, self.schedules[name]
            if method == "GET":
                return 200, self.schedules[name]
            if method == "DELETE":
                del self.schedules[name]
                return 200, self.operation(parent, {"@type": "type.googleapis.com/google.protobuf.Empty"})
        if rest.startswith("endpoints"):
            return self.route_endpoint(method, parent, rest, query, body)
        if rest.startswith("batchPredictionJobs"):
            return self.route_batch(method, parent, rest, query, body)
        if rest.startswith("hyperparameterTuningJobs"):
            return self.route_tuning(method, parent, rest, body)
        if rest.startswith("customJobs"):
            return self.route_custom_job(method, parent, rest, body)
        if rest.startswith("metadataStores/"):
            return self.route_metadata(method, parent, rest, query, body)
        evaluation_match = re.match(r"^(models/[^/]+)/evaluations(?::import|/([^/:]+)/slices(:batchImport)?)?$", rest)
        if evaluation_match:
            return self.route_evaluation(method, parent, rest, evaluation_match, body)
        if rest == "models:upload" and method == "POST":
            model_id = str(next(self.ids))
            parent_model = body.get("parentModel", "")
            name = parent_model or f"{parent}/models/{model_id}"
            versions = self.models.setdefault(name, {"versions": []})["versions"]
            versions.append(body.get("model", {}))
            response = {
                "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
                "model": name,
                "modelVersionId": str(len(versions)),
            }
            return 200, self.operation(parent, response)
        if rest == "models" and method == "GET":  # list, newest first, the default (latest) version of each
            wanted = re.search(r'display_name="([^"]*)"', query.get("filter", [""])[0])
            found = [
                {**model["versions"][-1], "name": name, "versionId": str(len(model["versions"]))}
                for name, model in reversed(self.models.items())
                if not wanted or model["versions"][-1].get("displayName") == wanted.group(1)
            ]
            return 200, {"models": found}
        if rest.startswith("models/") and method == "GET":  # a version (models/ID@V), else the latest
            model_id, _, version = rest.partition("@")
            name = f"{parent}/{model_id}"
            versions = self.models.get(name, {}).get("versions", [])
            number = int(version) if version.isdigit() else len(versions)
            if not 1 <= number <= len(versions):
                return 404, self.error(404, path)
            # a model in a prebuilt serving container deploys on dedicated machines only (an output field)
            return 200, {
                **versions[number - 1],
                "name": name,
                "versionId": str(number),
                "supportedDeploymentResourcesTypes": ["DEDICATED_RESOURCES"],
            }
        return 404, self.error(404, path)

    def route_evaluation(self, method: str, parent: str, rest: str, match: re.Match, body: dict) -> tuple[int, dict]:
        """A model version's evaluations (import, list) and an evaluation's slices (batch import, list)."""
        model, evaluation_id, batch = match.groups()
        version = f"{parent}/{model}"
        if version.split("@")[0] not in self.models:
            return 404, self.error(404, rest)
        if evaluation_id is None and rest.endswith(":import") and method == "POST":
            name = f"{version}/evaluations/{next(self.ids)}"
            evaluation = {**body.get("modelEvaluation", {}), "name": name, "createTime": "2026-11-21T00:00:00Z"}
            self.evaluations.setdefault(version, []).append(evaluation)
            return 200, evaluation
        if evaluation_id is None and method == "GET":
            return 200, {"modelEvaluations": self.evaluations.get(version, [])}
        name = f"{version}/evaluations/{evaluation_id}"
        if not any(e["name"] == name for e in self.evaluations.get(version, [])):
            return 404, self.error(404, rest)
        if batch and method == "POST":
            made = [{**one, "name": f"{name}/slices/{next(self.ids)}"} for one in body.get("modelEvaluationSlices", [])]
            self.slices.setdefault(name, []).extend(made)
            return 200, {"importedModelEvaluationSlices": [one["name"] for one in made]}
        if not batch and method == "GET":
            return 200, {"modelEvaluationSlices": self.slices.get(name, [])}
        return 404, self.error(404, rest)

    def route_metadata(self, method: str, parent: str, rest: str, query: dict, body: dict) -> tuple[int, dict]:
        """The default metadata store and its contexts (a Vertex AI Experiment is a ``system.Experiment`` context;
        a pipeline run joins it as a child context)."""
        store = f"{parent}/metadataStores/default"
        if rest == "metadataStores/default" and method == "GET":
            return 200, {"name": store}
        if rest == "metadataStores/default/contexts" and method == "POST":
            name = f"{store}/contexts/{query.get('contextId', [str(next(self.ids))])[0]}"
            if name in self.contexts:
                return 409, self.error(409, rest)
            self.contexts[name] = {**body, "name": name, "createTime": "2026-11-21T00:00:00Z", "childContexts": []}
            return 200, self.contexts[name]
        match = re.match(r"^metadataStores/default/contexts/([^/:]+)(:addContextChildren)?$", rest)
        if not match:
            return 404, self.error(404, rest)
        name = f"{store}/contexts/{match.group(1)}"
        if name not in self.contexts:
            return 404, self.error(404, rest)
        if match.group(2) and method == "POST":  # adding a child twice keeps one
            children = self.contexts[name]["childContexts"]
            children += [child for child in body.get("childContexts", []) if child not in children]
            return 200, {}
        if method == "GET":
            return 200, {k: v for k, v in self.contexts[name].items() if k != "childContexts"}
        return 404, self.error(404, rest)

    def route_endpoint(self, method: str, parent: str, rest: str, query: dict, body: dict) -> tuple[int, dict]:
        """Endpoints: create, list (by display name), get, deploy and undeploy a model (the traffic split as asked,
        the new model's "0" key replaced by its id), and online prediction through ``predictor``."""
        if rest == "endpoints" and method == "POST":
            name = f"{parent}/endpoints/{query.get('endpointId', [str(next(self.ids))])[0]}"
            endpoint = {
                **body,
                "name": name,
                "deployedModels": [],
                "trafficSplit": {},
                "createTime": "2026-11-21T00:00:00Z",
            }
            self.endpoints[name] = endpoint
            return 200, self.operation(parent, {"@type": f"{TYPES}.Endpoint", **endpoint})
        if rest == "endpoints" and method == "GET":
            wanted = re.search(r'display_name="([^"]*)"', query.get("filter", [""])[0])
            found = [e for e in self.endpoints.values() if not wanted or e.get("displayName") == wanted.group(1)]
            return 200, {"endpoints": found}
        match = re.match(r"^endpoints/([^/:]+)(?::(deployModel|undeployModel|predict))?$", rest)
        name = f"{parent}/endpoints/{match.group(1)}" if match else ""
        if name not in self.endpoints:
            return 404, self.error(404, rest)
        endpoint, action = self.endpoints[name], match.group(2)
        if method == "GET" and not action:
            return 200, endpoint
        if action == "deployModel":
            deployed = {**body["deployedModel"], "id": str(next(self.ids)), "createTime": "2026-11-21T00:00:00Z"}
            # the service answers the model and its version apart: "models/ID@2" -> model "models/ID", version "2"
            model, _, version = deployed["model"].partition("@")
            deployed["model"] = model
            deployed["modelVersionId"] = version or str(len(self.models.get(model, {}).get("versions", [])) or 1)
            endpoint["deployedModels"].append(deployed)
            split = body.get("trafficSplit") or {"0": 100}
            endpoint["trafficSplit"] = {(deployed["id"] if key == "0" else key): value for key, value in split.items()}
            return 200, self.operation(parent, {"@type": f"{TYPES}.DeployModelResponse", "deployedModel": deployed})
        if action == "undeployModel":
            endpoint["deployedModels"] = [d for d in endpoint["deployedModels"] if d["id"] != body["deployedModelId"]]
            split = body.get("trafficSplit") or endpoint["trafficSplit"]
            endpoint["trafficSplit"] = {k: v for k, v in split.items() if k != body["deployedModelId"]}
            return 200, self.operation(parent, {"@type": f"{TYPES}.UndeployModelResponse"})
        if action == "predict":
            serving = max(endpoint["trafficSplit"].items(), key=lambda item: item[1], default=(None, 0))[0]
            deployed = next((d for d in endpoint["deployedModels"] if d["id"] == serving), None)
            if deployed is None or self.predictor is None:
                return 400, {
                    "error": {
                        "code": 400,
                        "message": "Endpoint has no deployed model.",
                        "status": "FAILED_PRECONDITION",
                    }
                }
            return 200, {"predictions": self.predictor(deployed, body["instances"]), "deployedModelId": serving}
        return 404, self.error(404, rest)

    def route_batch(self, method: str, parent: str, rest: str, query: dict, body: dict) -> tuple[int, dict]:
        """Batch prediction jobs: created PENDING, then RUNNING for five reads, then SUCCEEDED."""
        if rest == "batchPredictionJobs" and method == "POST":
            name = f"{parent}/batchPredictionJobs/{next(self.ids)}"
            self.batch_jobs[name] = {
                **body,
                "name": name,
                "state": "JOB_STATE_PENDING",
                "createTime": "2026-11-21T00:00:00Z",
            }
            return 200, self.batch_jobs[name]
        if rest == "batchPredictionJobs" and method == "GET":
            wanted = re.search(r'display_name="([^"]*)"', query.get("filter", [""])[0])
            found = [j for j in self.batch_jobs.values() if not wanted or j.get("displayName") == wanted.group(1)]
            return 200, {"batchPredictionJobs": [{k: v for k, v in j.items() if not k.startswith("_")} for j in found]}
        name = f"{parent}/{rest}"
        if name not in self.batch_jobs or method != "GET":
            return 404, self.error(404, rest)
        job = self.batch_jobs[name]
        job["_reads"] = job.get("_reads", 0) + 1
        order = ["JOB_STATE_PENDING", *["JOB_STATE_RUNNING"] * 5, "JOB_STATE_SUCCEEDED"]
        job["state"] = order[min(job["_reads"], len(order) - 1)]
        if job["state"] == "JOB_STATE_SUCCEEDED":
            prefix = job["outputConfig"]["gcsDestination"]["outputUriPrefix"].rstrip("/")
            job["outputInfo"] = {"gcsOutputDirectory": f"{prefix}/prediction-{name.rsplit('/', 1)[1]}"}
        return 200, {k: v for k, v in job.items() if not k.startswith("_")}

    def route_tuning(self, method: str, parent: str, rest: str, body: dict) -> tuple[int, dict]:
        """Hyperparameter tuning jobs: created PENDING; the next read finds them SUCCEEDED, with one trial per
        ``trial_results`` entry (its values, and its final ``val_accuracy``, or FAILED for None)."""
        if rest == "hyperparameterTuningJobs" and method == "POST":
            name = f"{parent}/hyperparameterTuningJobs/{next(self.ids)}"
            self.tuning_jobs[name] = {
                **body,
                "name": name,
                "state": "JOB_STATE_PENDING",
                "createTime": "2026-11-21T00:00:00Z",
            }
            return 200, self.tuning_jobs[name]
        name = f"{parent}/{rest}"
        if name not in self.tuning_jobs or method != "GET":
            return 404, self.error(404, rest)
        job = self.tuning_jobs[name]
        job["state"] = "JOB_STATE_SUCCEEDED"
        job["trials"] = [
            {
                "id": str(number),
                "state": "SUCCEEDED" if metric is not None else "FAILED",
                "parameters": [{"parameterId": key, "value": value} for key, value in values.items()],
                **(
                    {"finalMeasurement": {"stepCount": "3", "metrics": [{"metricId": "val_accuracy", "value": metric}]}}
                    if metric is not None
                    else {}
                ),
            }
            for number, (values, metric) in enumerate(self.trial_results, 1)
        ]
        return 200, job

    def route_custom_job(self, method: str, parent: str, rest: str, body: dict) -> tuple[int, dict]:
        """Custom jobs: created QUEUED; with ``capacity``, PENDING, RUNNING then SUCCEEDED over the next reads,
        without, QUEUED until cancelled."""
        import datetime

        if rest == "customJobs" and method == "POST":
            name = f"{parent}/customJobs/{next(self.ids)}"
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            self.custom_jobs[name] = {**body, "name": name, "state": "JOB_STATE_QUEUED", "createTime": now}
            return 200, self.custom_jobs[name]
        found = re.fullmatch(r"(customJobs/[^/:]+)(:cancel)?", rest)
        name = f"{parent}/{found.group(1)}" if found else ""
        if name not in self.custom_jobs:
            return 404, self.error(404, rest)
        job = self.custom_jobs[name]
        if found.group(2) and method == "POST":
            job["state"] = "JOB_STATE_CANCELLED"
            return 200, {}
        if method == "GET" and self.capacity and job["state"] != "JOB_STATE_CANCELLED":
            order = ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
            job["state"] = order[min(order.index(job["state"]) + 1, len(order) - 1)]
        return 200, job

    def operation(self, parent: str, response: dict) -> dict:
        return {"name": f"{parent}/operations/{next(self.ids)}", "done": True, "response": response}


def start(fake: FakeVertex) -> ThreadingHTTPServer:
    """Serves ``fake`` on 127.0.0.1 (a free port) in a daemon thread; sets ``fake.url``."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parsed = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            code, payload = fake.handle(self.command, unquote(parsed.path), parse_qs(parsed.query), body)
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = _serve  # noqa: N815 (http.server's names)

        def log_message(self, *args) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    return server
