"""Before a run is created: what a first run on a new Google Cloud project needs, checked against the project.

``submit`` and ``schedule create|update`` run it (``--no-preflight`` skips it); ``python -m pipeline check`` runs it on
its own. Each item is ``ok``, ``MISSING`` (with the command that fixes it: the run is not created) or ``unknown``
(what could not be read, and why: it is never guessed). It checks, for the compiled template and the settings:

- the APIs the run calls are enabled (Vertex AI, Cloud Storage, Artifact Registry, IAM, Resource Manager; Dataflow and
  Compute Engine where the conversion runs on Dataflow);
- the caller may create pipeline runs, the run-as account exists, the caller may act as it, and it may act as itself
  (the training job runs as the pipeline's account);
- the run-as account holds Vertex AI's role on the project (and Dataflow's, where it runs), and may read and write the
  pipeline root's bucket, which is in (or spans) the run's region;
- every step's image, and each job's, is in Artifact Registry;
- the training machine is offered in the region (Compute Engine's machine types), with quota for it (Cloud Quotas).

Roles are read from the project's and the bucket's allow policies: a role granted through a group, a folder or the
organization is not seen there, and such an item says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from components.vertex_client import VertexSettings
from pipeline.vertex.bucket import bucket
from pipeline.vertex.capacity import Machine, machine_offered, quota
from pipeline.vertex.findings import MISSING, NOT_SEEN, OK, UNKNOWN, Finding, answered, roles_of

BASE_SERVICES = (
    "aiplatform.googleapis.com",
    "storage.googleapis.com",
    "artifactregistry.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)


DATAFLOW_SERVICES = ("dataflow.googleapis.com", "compute.googleapis.com")


# the roles that carry what each principal needs (basic roles included); a custom role is read as unknown
VERTEX_ROLES = ("roles/aiplatform.user", "roles/aiplatform.admin", "roles/editor", "roles/owner")


DATAFLOW_ROLES = ("roles/dataflow.developer", "roles/dataflow.admin", "roles/editor", "roles/owner")


ACT_AS_ROLES = ("roles/iam.serviceAccountUser", "roles/iam.serviceAccountAdmin", "roles/editor", "roles/owner")


CALLER_PERMISSIONS = ("aiplatform.pipelineJobs.create",)


ARTIFACT_REGISTRY = re.compile(r"^([a-z0-9-]+)-docker\.pkg\.dev/([^/]+)/([^/]+)/(.+):([^:/]+)$")


@dataclass(frozen=True)
class Run:
    """What the preflight checks the project for: the template's images and training machine, the run-as account,
    and whether the conversion runs on Dataflow."""

    images: dict[str, str]
    machine: Machine | None
    account: str
    dataflow: bool


def constants(spec: dict):
    """Every mapping in the template's DAGs (its tasks' inputs among them), depth first."""
    from pipeline.images import mappings

    return mappings(spec.get("root", {}), spec.get("components", {}))


def training_machine(spec: dict) -> Machine | None:
    """The training job's machine: the fullest ``machine_spec`` among the template's constants (the job's worker
    pool, with its TPU topology); None for a template without a training job."""
    found = [
        node["machine_spec"]
        for node in constants(spec)
        if isinstance(node.get("machine_spec"), dict) and node["machine_spec"].get("machine_type")
    ]
    if not found:
        return None
    machine = max(found, key=len)
    return Machine(
        machine["machine_type"],
        machine.get("accelerator_type", ""),
        int(machine.get("accelerator_count", 0) or 0),
        machine.get("tpu_topology", ""),
    )


def uses_dataflow(parameters: dict) -> bool:
    """Whether the run's ``beam_args`` (a list, or its JSON as ``--param`` gives it) name Dataflow's runner."""
    import json

    args = parameters.get("beam_args") or []
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = [args]
    return any("DataflowRunner" in str(arg) for arg in args)


def worker_image(spec: dict) -> str:
    """The Dataflow workers' image the template's convert step passes (its ``worker_image`` constant)."""
    for node in constants(spec):
        found = node.get("worker_image", {})
        if isinstance(found, dict) and isinstance(found.get("runtimeValue", {}).get("constant"), str):
            return found["runtimeValue"]["constant"]
    return ""


def preflight(settings: VertexSettings, spec: dict, apis=None) -> list[Finding]:
    """Every item, checked against the project (``apis``: a ``GoogleApis``; made from the settings when None)."""
    from pipeline.images import template_images
    from pipeline.vertex.google_apis import GoogleApis

    apis = apis or GoogleApis(settings)
    images = template_images(spec)
    dataflow = uses_dataflow(settings.parameters)
    if dataflow and worker_image(spec):
        images["the Dataflow workers"] = worker_image(spec)
    number = project_number(apis, settings.project)
    account = settings.service_account or (f"{number}-compute@developer.gserviceaccount.com" if number else "")
    run = Run(images, training_machine(spec), account, dataflow)
    findings = [*services(apis, settings, run)]
    if not number:
        findings.append(
            Finding(
                UNKNOWN,
                f"project {settings.project}",
                "its number could not be read (so neither its default service account)",
                "check: gcloud projects describe " + settings.project,
            )
        )
    findings += caller(apis, settings)
    policy, policy_finding = project_policy(apis, settings)
    if policy_finding:
        findings.append(policy_finding)
    if account:
        findings += run_as(apis, settings, run, policy)
        findings += bucket(settings, account, policy)
    findings += artifact_images(apis, run)
    if run.machine is not None:
        findings += machine_offered(apis, settings, run.machine)
        findings.append(quota(apis, settings, run.machine))
    return findings


def project_number(apis, project: str) -> str:
    found, _ = answered(lambda: apis.get("cloudresourcemanager", f"/v3/projects/{project}"), "project")
    return (found or {}).get("name", "").rsplit("/", 1)[-1]


def services(apis, settings: VertexSettings, run: Run) -> list[Finding]:
    """Each API the run calls is enabled (Service Usage)."""
    wanted = [*BASE_SERVICES, *(DATAFLOW_SERVICES if run.dataflow else ())]
    names = [f"projects/{settings.project}/services/{service}" for service in wanted]
    found, failed = answered(
        lambda: apis.get("serviceusage", f"/v1/projects/{settings.project}/services:batchGet", {"names": names}),
        "the APIs the run calls",
    )
    if failed:
        return [failed]
    states = {
        entry.get("config", {}).get("name") or entry["name"].rsplit("/", 1)[-1]: entry.get("state")
        for entry in found.get("services", [])
    }
    return [
        Finding(OK, f"API {service}", "enabled")
        if states.get(service) == "ENABLED"
        else Finding(
            MISSING, f"API {service}", "disabled", f"gcloud services enable {service} --project {settings.project}"
        )
        for service in wanted
    ]


def caller(apis, settings: VertexSettings) -> list[Finding]:
    """The caller may create pipeline runs in the project."""
    what = f"your permission {', '.join(CALLER_PERMISSIONS)} on project {settings.project}"
    found, failed = answered(
        lambda: apis.post(
            "cloudresourcemanager",
            f"/v1/projects/{settings.project}:testIamPermissions",
            {"permissions": list(CALLER_PERMISSIONS)},
        ),
        what,
    )
    if failed:
        return [failed]
    lacking = [p for p in CALLER_PERMISSIONS if p not in found.get("permissions", [])]
    if lacking:
        return [
            Finding(
                MISSING,
                what,
                "not granted",
                f"gcloud projects add-iam-policy-binding {settings.project} "
                "--member=user:YOUR_EMAIL --role=roles/aiplatform.user",
            )
        ]
    return [Finding(OK, what, "granted")]


def project_policy(apis, settings: VertexSettings) -> tuple[list[dict] | None, Finding | None]:
    """The project's allow policy's bindings, or (None, why they could not be read)."""
    found, failed = answered(
        lambda: apis.post(
            "cloudresourcemanager",
            f"/v1/projects/{settings.project}:getIamPolicy",
            {"options": {"requestedPolicyVersion": 3}},
        ),
        f"the roles on project {settings.project}",
    )
    if failed:
        return None, Finding(
            UNKNOWN,
            failed.what,
            failed.detail,
            "reading it takes resourcemanager.projects.getIamPolicy (roles/iam.securityReviewer)",
        )
    return found.get("bindings", []), None


def run_as(apis, settings: VertexSettings, run: Run, policy: list[dict] | None) -> list[Finding]:
    """The run-as account exists, the caller may act as it, it may act as itself, and it holds Vertex AI's role on
    the project (and Dataflow's, where the conversion runs there)."""
    account, project = run.account, settings.project
    member = f"serviceAccount:{account}"
    path = f"/v1/projects/-/serviceAccounts/{account}"
    created = (
        f"gcloud iam service-accounts create {account.split('@')[0]} --project {project}"
        if not account.endswith("-compute@developer.gserviceaccount.com")
        else f"gcloud services enable compute.googleapis.com --project {project} (it makes the default account)"
    )
    found, failed = answered(
        lambda: apis.get("iam", path),
        f"the run-as account {account}",
        lambda _: Finding(MISSING, f"the run-as account {account}", "does not exist", created),
    )
    if failed is not None and failed.state == MISSING:
        return [failed]  # (what it may do is moot)
    findings = [failed] if failed else []
    if found is not None:
        if found.get("disabled"):
            findings.append(
                Finding(
                    MISSING,
                    f"the run-as account {account}",
                    "is disabled",
                    f"gcloud iam service-accounts enable {account} --project {project}",
                )
            )
        else:
            findings.append(Finding(OK, f"the run-as account {account}", "exists"))
    acting = f"your permission to act as {account} (iam.serviceAccounts.actAs)"
    tested, failed = answered(
        lambda: apis.post("iam", f"{path}:testIamPermissions", {"permissions": ["iam.serviceAccounts.actAs"]}), acting
    )
    if failed:
        findings.append(failed)
    elif "iam.serviceAccounts.actAs" in tested.get("permissions", []):
        findings.append(Finding(OK, acting, "granted"))
    else:
        findings.append(
            Finding(
                MISSING,
                acting,
                "not granted",
                f"gcloud iam service-accounts add-iam-policy-binding "
                f"{account} --member=user:YOUR_EMAIL --role=roles/iam.serviceAccountUser --project "
                f"{project}",
            )
        )
    if run.machine is not None:  # the training job runs as the pipeline's account: it launches it as itself
        findings.append(acts_as_itself(apis, account, project, policy))
    needs = [("Vertex AI's role", VERTEX_ROLES, "roles/aiplatform.user")]
    if run.dataflow:
        needs.append(("Dataflow's role", DATAFLOW_ROLES, "roles/dataflow.developer"))
    for name, roles, role in needs:
        what = f"{name} for {account} on project {project}"
        if policy is None:
            findings.append(Finding(UNKNOWN, what, "the project's roles could not be read"))
        elif roles_of(policy, member) & set(roles):
            findings.append(Finding(OK, what, ", ".join(sorted(roles_of(policy, member) & set(roles)))))
        else:
            findings.append(
                Finding(
                    MISSING,
                    what,
                    f"none of {', '.join(roles)} ({NOT_SEEN})",
                    f"gcloud projects add-iam-policy-binding {project} --member={member} --role={role}",
                )
            )
    return findings


def acts_as_itself(apis, account: str, project: str, policy: list[dict] | None) -> Finding:
    member, what = f"serviceAccount:{account}", f"{account} acting as itself (it launches the training job)"
    found, failed = answered(lambda: apis.post("iam", f"/v1/projects/-/serviceAccounts/{account}:getIamPolicy"), what)
    granted = roles_of((found or {}).get("bindings", []), member) | roles_of(policy or [], member)
    if granted & set(ACT_AS_ROLES):
        return Finding(OK, what, ", ".join(sorted(granted & set(ACT_AS_ROLES))))
    if failed and policy is None:
        return failed
    return Finding(
        MISSING,
        what,
        f"no roles/iam.serviceAccountUser on itself ({NOT_SEEN})",
        f"gcloud iam service-accounts add-iam-policy-binding {account} --member={member} "
        f"--role=roles/iam.serviceAccountUser --project {project}",
    )


def artifact_images(apis, run: Run) -> list[Finding]:
    """Each image the run pulls is in Artifact Registry (Google's own public images are not checked); the ones
    missing of one registry and tag are one item, which ``make images`` pushes at once."""
    findings, missing = [], {}
    for image in dict.fromkeys(run.images.values()):
        found = ARTIFACT_REGISTRY.match(image)
        if image.startswith(("gcr.io/ml-pipeline/", "us-docker.pkg.dev/vertex-ai/")):
            continue  # Google Cloud Pipeline Components' and Vertex AI's own images
        if not found:
            findings.append(Finding(UNKNOWN, f"image {image}", "not in Artifact Registry: not checked"))
            continue
        location, project, repository, package, tag = found.groups()
        path = (
            f"/v1/projects/{project}/locations/{location}/repositories/{repository}/packages/"
            f"{quote(package, safe='')}/tags/{tag}"
        )
        registry = f"{location}-docker.pkg.dev/{project}/{repository}"
        _, failed = answered(
            lambda path=path: apis.get("artifactregistry", path),
            f"image {image}",
            lambda _, image=image: Finding(MISSING, image),
        )
        if failed is not None and failed.state == MISSING:
            missing.setdefault((registry, tag), []).append(package)
        else:
            findings.append(failed or Finding(OK, f"image {image}", "pushed"))
    for (registry, tag), packages in missing.items():
        findings.append(
            Finding(
                MISSING,
                f"images {', '.join(packages)} of {registry} at tag {tag}",
                "not in Artifact Registry",
                f"make images REGISTRY={registry} TAG={tag} PUSH=1",
            )
        )
    return findings
