"""A local stand-in for the Google Cloud REST APIs beside Vertex AI that the preflight asks, served by the fake
Vertex AI server under ``/<service>/`` (``pipeline.vertex.google_apis``): Service Usage, Resource Manager, IAM,
Artifact Registry, Compute Engine's machine and accelerator types, and Cloud Quotas.

Its state is a project ready for a first run: every API enabled, the default compute account and a trainer account
with their roles, every image of ``images`` pushed, the TPU v5e and CPU machines in europe-west4 with quota. A test
takes one thing away and checks what the preflight says."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PROJECT, NUMBER, REGION = "demo-project", "123456789", "europe-west4"
COMPUTE_ACCOUNT = f"{NUMBER}-compute@developer.gserviceaccount.com"
TRAINER = f"trainer@{PROJECT}.iam.gserviceaccount.com"
RUNNER = f"sa@{PROJECT}.iam.gserviceaccount.com"  # another account a user made to run the pipeline as
SERVICES = ("serviceusage", "cloudresourcemanager", "iam", "artifactregistry", "compute", "cloudquotas")
HOSTS = {
    "serviceusage": "serviceusage.googleapis.com",
    "cloudresourcemanager": "cloudresourcemanager.googleapis.com",
    "iam": "iam.googleapis.com",
    "artifactregistry": "artifactregistry.googleapis.com",
    "compute": "compute.googleapis.com",
    "cloudquotas": "cloudquotas.googleapis.com",
}


def quota_info(metric: str, values: dict[str, int], default: int = 0) -> dict:
    """A Cloud Quotas ``QuotaInfo`` of Vertex AI: a limit per region, ``default`` elsewhere (as strings, int64)."""
    quota_id = "CustomModelTraining" + "".join(part.title() for part in metric.split("_")[3:]) + "PerProjectPerRegion"
    return {
        "name": f"projects/{NUMBER}/locations/global/services/aiplatform.googleapis.com/quotaInfos/{quota_id}",
        "quotaId": quota_id,
        "metric": f"aiplatform.googleapis.com/{metric}",
        "service": "aiplatform.googleapis.com",
        "dimensions": ["region"],
        "dimensionsInfos": [
            *(
                {"dimensions": {"region": region}, "details": {"value": str(value)}, "applicableLocations": [region]}
                for region, value in values.items()
            ),
            {"dimensions": {}, "details": {"value": str(default)}, "applicableLocations": ["us-central1", REGION]},
        ],
    }


@dataclass
class FakeGoogle:
    """The project as the APIs answer it; every field may be changed by a test."""

    enabled: set = field(
        default_factory=lambda: {
            "aiplatform.googleapis.com",
            "storage.googleapis.com",
            "artifactregistry.googleapis.com",
            "iam.googleapis.com",
            "cloudresourcemanager.googleapis.com",
            "dataflow.googleapis.com",
            "compute.googleapis.com",
            "serviceusage.googleapis.com",
            "cloudquotas.googleapis.com",
        }
    )
    images: set = field(default_factory=set)  # LOCATION-docker.pkg.dev/P/REPO/NAME:TAG
    accounts: dict = field(default_factory=lambda: {COMPUTE_ACCOUNT: {}, TRAINER: {}, RUNNER: {}})
    caller_acts_as: set = field(default_factory=lambda: {COMPUTE_ACCOUNT, TRAINER, RUNNER})
    caller_permissions: set = field(default_factory=lambda: {"aiplatform.pipelineJobs.create"})
    account_policies: dict = field(
        default_factory=lambda: {
            account: [{"role": "roles/iam.serviceAccountUser", "members": [f"serviceAccount:{account}"]}]
            for account in (COMPUTE_ACCOUNT, TRAINER, RUNNER)
        }
    )
    project_bindings: list = field(
        default_factory=lambda: [
            {"role": "roles/editor", "members": [f"serviceAccount:{COMPUTE_ACCOUNT}"]},
            *(
                {"role": role, "members": [f"serviceAccount:{TRAINER}", f"serviceAccount:{RUNNER}"]}
                for role in ("roles/aiplatform.user", "roles/storage.objectUser", "roles/dataflow.developer")
            ),
        ]
    )
    machine_types: dict = field(
        default_factory=lambda: {
            "ct5lp-hightpu-4t": ["europe-west4-b", "us-central1-a"],
            "ct5lp-hightpu-8t": ["europe-west4-b"],
            "ct6e-standard-4t": ["us-east5-b", "europe-west4-a"],
            "n1-standard-8": ["europe-west4-a", "europe-west4-b"],
            "g2-standard-8": ["europe-west4-a"],
        }
    )
    accelerator_types: dict = field(
        default_factory=lambda: {"nvidia-l4": ["europe-west4-a"], "nvidia-tesla-t4": ["europe-west4-b"]}
    )
    quotas: list = field(
        default_factory=lambda: [
            quota_info("custom_model_training_tpu_v5e", {REGION: 8}),
            quota_info("custom_model_training_cpus", {}, 24),
            quota_info("custom_model_training_nvidia_l4_gpus", {REGION: 2}),
        ]
    )

    def route(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict] | None:
        """The answer to a request under ``/<service>/``; None for another path."""
        service, _, rest = path.lstrip("/").partition("/")
        if service not in SERVICES:
            return None
        if HOSTS[service] not in self.enabled:
            return disabled(HOSTS[service])
        return getattr(self, f"_{service}")(method, "/" + rest, query, body)

    def _serviceusage(self, method, path, query, body):
        if method == "GET" and path == f"/v1/projects/{PROJECT}/services:batchGet":
            names = query.get("names", [])
            return 200, {
                "services": [
                    {
                        "name": name.replace(PROJECT, NUMBER),
                        "config": {"name": name.rsplit("/", 1)[1]},
                        "state": "ENABLED" if name.rsplit("/", 1)[1] in self.enabled else "DISABLED",
                    }
                    for name in names
                ]
            }
        return not_found(path)

    def _cloudresourcemanager(self, method, path, query, body):
        if method == "GET" and path == f"/v3/projects/{PROJECT}":
            return 200, {"name": f"projects/{NUMBER}", "projectId": PROJECT, "state": "ACTIVE"}
        if method == "POST" and path == f"/v1/projects/{PROJECT}:getIamPolicy":
            return 200, {"version": 1, "etag": "BwX=", "bindings": self.project_bindings}
        if method == "POST" and path == f"/v1/projects/{PROJECT}:testIamPermissions":
            return 200, {"permissions": [p for p in body.get("permissions", []) if p in self.caller_permissions]}
        return not_found(path)

    def _iam(self, method, path, query, body):
        found = re.fullmatch(r"/v1/projects/-/serviceAccounts/([^/:]+)(?::(\w+))?", path)
        if not found or found.group(1) not in self.accounts:
            return not_found(path)
        account, action = found.groups()
        if method == "GET" and not action:
            return 200, {
                "name": f"projects/{PROJECT}/serviceAccounts/{account}",
                "email": account,
                "projectId": PROJECT,
                **self.accounts[account],
            }
        if method == "POST" and action == "testIamPermissions":
            granted = account in self.caller_acts_as
            return 200, {"permissions": [p for p in body.get("permissions", []) if granted]} if granted else {}
        if method == "POST" and action == "getIamPolicy":
            return 200, {"version": 1, "etag": "BwY=", "bindings": self.account_policies.get(account, [])}
        return not_found(path)

    def _artifactregistry(self, method, path, query, body):
        # (the package's slashes arrive unquoted: the server decodes %2F)
        found = re.fullmatch(
            r"/v1/projects/([^/]+)/locations/([^/]+)/repositories/([^/]+)/packages/(.+)/tags/([^/]+)", path
        )
        if method == "GET" and found:
            project, location, repository, package, tag = found.groups()
            image = f"{location}-docker.pkg.dev/{project}/{repository}/{package}:{tag}"
            if image in self.images:
                return 200, {"name": path.removeprefix("/v1/"), "version": f"{path}/versions/sha256:0"}
        return not_found(path)

    def _compute(self, method, path, query, body):
        found = re.fullmatch(rf"/compute/v1/projects/{PROJECT}/aggregated/(machineTypes|acceleratorTypes)", path)
        if method != "GET" or not found:
            return not_found(path)
        collection = found.group(1)
        wanted = re.search(r'name = "([^"]+)"', query.get("filter", [""])[0])
        known = self.machine_types if collection == "machineTypes" else self.accelerator_types
        items = {}
        for name, zones in known.items():
            if wanted and wanted.group(1) != name:
                continue
            for zone in zones:
                items.setdefault(f"zones/{zone}", {collection: []})[collection].append({"name": name, "zone": zone})
        return 200, {"items": items}

    def _cloudquotas(self, method, path, query, body):
        if method == "GET" and path == (
            f"/v1/projects/{PROJECT}/locations/global/services/aiplatform.googleapis.com/quotaInfos"
        ):
            return 200, {"quotaInfos": self.quotas}
        return not_found(path)


def not_found(path: str) -> tuple[int, dict]:
    return 404, {"error": {"code": 404, "message": f"Requested entity was not found: {path}", "status": "NOT_FOUND"}}


def disabled(service: str) -> tuple[int, dict]:
    """Google's answer for a call to an API that is not enabled: 403, reason SERVICE_DISABLED."""
    url = f"https://console.developers.google.com/apis/api/{service}/overview?project={NUMBER}"
    message = (
        f"{service} has not been used in project {NUMBER} before or it is disabled. Enable it by visiting {url} "
        "then retry."
    )
    return 403, {
        "error": {
            "code": 403,
            "message": message,
            "status": "PERMISSION_DENIED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "SERVICE_DISABLED",
                    "domain": "googleapis.com",
                    "metadata": {"service": service, "consumer": f"projects/{NUMBER}", "activationUrl": url},
                }
            ],
        }
    }
