"""The preflight's checks of the pipeline root's bucket: it exists in (or spans) the run's region, and the caller
and the run-as account may read and write there."""

from __future__ import annotations

from components.cli import one_line
from components.vertex_client import VertexSettings
from pipeline.vertex.findings import MISSING, NOT_SEEN, OK, UNKNOWN, Finding, roles_of

BUCKET_ROLES = (
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
    "roles/storage.admin",
    "roles/storage.legacyBucketWriter",
    "roles/storage.legacyBucketOwner",
)


PROJECT_STORAGE_ROLES = (
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
    "roles/storage.admin",
    "roles/editor",
    "roles/owner",
)


BUCKET_PERMISSIONS = ("storage.objects.create", "storage.objects.get", "storage.objects.list")


def bucket(settings: VertexSettings, account: str, policy: list[dict] | None) -> list[Finding]:
    """The pipeline root's bucket exists in (or spans) the region, the caller may write there, and so may the
    run-as account."""
    from google.api_core import exceptions

    from components.storage import bucket_of

    name = settings.pipeline_root.removeprefix("gs://").split("/", 1)[0]
    where = f"bucket gs://{name}"
    try:
        found = bucket_of(settings.pipeline_root)
        found.reload()
    except exceptions.NotFound:
        return [
            Finding(
                MISSING,
                where,
                "does not exist",
                f"gcloud storage buckets create gs://{name} "
                f"--location={settings.region} --uniform-bucket-level-access --project {settings.project}",
            )
        ]
    except exceptions.GoogleAPICallError as err:
        return [Finding(UNKNOWN, where, f"could not be read: {one_line(err)}")]
    findings = [bucket_location(where, found, settings.region)]
    try:
        granted = found.test_iam_permissions(list(BUCKET_PERMISSIONS))
        lacking = [p for p in BUCKET_PERMISSIONS if p not in granted]
        findings.append(
            Finding(
                MISSING,
                f"your access to {where}",
                f"lacking {', '.join(lacking)}",
                f"gcloud storage buckets add-iam-policy-binding gs://{name} --member=user:YOUR_EMAIL "
                "--role=roles/storage.objectUser",
            )
            if lacking
            else Finding(OK, f"your access to {where}", "read and write")
        )
        bindings = found.get_iam_policy(requested_policy_version=3).bindings
    except exceptions.GoogleAPICallError as err:
        findings.append(Finding(UNKNOWN, f"access to {where}", f"could not be read: {one_line(err)}"))
        return findings
    member, what = f"serviceAccount:{account}", f"{account}'s access to {where}"
    on_bucket = roles_of(bindings, member) & set(BUCKET_ROLES)
    on_project = roles_of(policy or [], member) & set(PROJECT_STORAGE_ROLES)
    if on_bucket or on_project:
        findings.append(Finding(OK, what, ", ".join(sorted(on_bucket | on_project))))
    else:
        findings.append(
            Finding(
                MISSING,
                what,
                f"no object role on it nor on the project ({NOT_SEEN})",
                f"gcloud storage buckets add-iam-policy-binding gs://{name} --member={member} "
                "--role=roles/storage.objectUser",
            )
        )
    return findings


# the multi-regions' regions by their names' start (Cloud Storage's locations page)
MULTI_REGIONS = {"US": ("us-",), "EU": ("europe-",), "ASIA": ("asia-",)}


def bucket_location(where: str, found, region: str) -> Finding:
    """A bucket in the run's region fits; one spanning it (a multi-region or dual-region) too; elsewhere, Vertex AI
    refuses to write the model and the job outputs there ("must be in the same regional location")."""
    location = (found.location or "").upper()
    kind = found.location_type or "region"
    spans = [str(loc).lower() for loc in (getattr(found, "data_locations", None) or [])]
    if location.lower() == region or region in spans or region.startswith(MULTI_REGIONS.get(location, ("\0",))):
        return Finding(OK, f"the location of {where}", f"{kind} {location} holds {region}")
    return Finding(
        MISSING,
        f"the location of {where}",
        f"{kind} {location}, not {region}: Vertex AI in {region} "
        "writes the models and job outputs only to a bucket there",
        f"gcloud storage buckets create gs://NEW_BUCKET --location={region} --uniform-bucket-level-access, "
        "then --pipeline-root gs://NEW_BUCKET/root",
    )
