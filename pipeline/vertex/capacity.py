"""The training machine in the run's region: offered there (Compute Engine's machine and accelerator types), with
Vertex AI quota for it (Cloud Quotas)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.vertex_client import VertexSettings
from pipeline.vertex.findings import MISSING, OK, UNKNOWN, Finding, answered

# the Vertex AI quota of a training machine: a part of its metric's name, and what it counts
QUOTAS = {
    "ct5lp": ("tpu_v5e", "TPU v5e chips"),
    "ct6e": ("tpu_v6e", "TPU v6e chips"),
    "NVIDIA_TESLA_T4": ("nvidia_t4_gpus", "T4 GPUs"),
    "NVIDIA_L4": ("nvidia_l4_gpus", "L4 GPUs"),
    "NVIDIA_TESLA_A100": ("nvidia_a100_gpus", "A100 GPUs"),
    "cpu": ("custom_model_training_cpus", "vCPUs"),
}
COMPUTE_ACCELERATORS = {
    "NVIDIA_TESLA_T4": "nvidia-tesla-t4",
    "NVIDIA_L4": "nvidia-l4",
    "NVIDIA_TESLA_A100": "nvidia-tesla-a100",
}


@dataclass(frozen=True)
class Machine:
    """The training job's machine, as the compiled template gives it."""

    machine_type: str
    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""

    @property
    def family(self) -> str:
        """The key of ``QUOTAS``: the TPU machine family, the GPU, or ``cpu``."""
        if self.machine_type.startswith(("ct5lp", "ct6e")):
            return self.machine_type.split("-")[0]
        return self.accelerator_type or "cpu"

    def needs(self) -> int:
        """How much quota it takes: TPU chips (the topology's), GPUs, or vCPUs (the machine type's last number)."""
        if self.tpu_topology:
            count = 1
            for side in self.tpu_topology.split("x"):
                count *= int(side)
            return count
        if self.accelerator_type:
            return self.accelerator_count or 1
        found = re.search(r"-(\d+)$", self.machine_type)
        return int(found.group(1)) if found else 1


def machine_offered(apis, settings: VertexSettings, machine: Machine) -> list[Finding]:
    """The training machine (and its GPU) is offered in a zone of the region (Compute Engine's lists)."""
    wanted = [("machineTypes", machine.machine_type)]
    if machine.accelerator_type in COMPUTE_ACCELERATORS:
        wanted.append(("acceleratorTypes", COMPUTE_ACCELERATORS[machine.accelerator_type]))
    findings = []
    for collection, name in wanted:
        what = f"{name} in {settings.region}"
        found, failed = answered(
            lambda collection=collection, name=name: apis.get(
                "compute",
                f"/compute/v1/projects/{settings.project}/aggregated/{collection}",
                {"filter": f'name = "{name}"', "returnPartialSuccess": "true"},
            ),
            what,
        )
        if failed:
            findings.append(failed)
            continue
        zones = sorted(
            scope.removeprefix("zones/")
            for scope, items in found.get("items", {}).items()
            if any(item.get("name") == name for item in items.get(collection, []))
        )
        here = [zone for zone in zones if zone.startswith(settings.region + "-")]
        if here:
            findings.append(Finding(OK, what, f"offered in {', '.join(here)}"))
            continue
        regions = sorted({zone.rsplit("-", 1)[0] for zone in zones})
        elsewhere = f"offered in {', '.join(regions)}" if regions else "offered in no region of this project"
        findings.append(
            Finding(
                MISSING,
                what,
                f"not offered there ({elsewhere})",
                f"--region {regions[0]}"
                if regions
                else "another --accelerator (python -m pipeline compile --accelerator ...)",
            )
        )
    return findings


def quota(apis, settings: VertexSettings, machine: Machine) -> Finding:
    """Vertex AI's custom-training quota for the machine in the region, against what it takes (Cloud Quotas: the
    limit, not what other jobs use of it now)."""
    part, unit = QUOTAS.get(machine.family, ("", ""))
    needed = machine.needs()
    what = f"quota of {unit or machine.machine_type} for training in {settings.region}"
    if not part:
        return Finding(UNKNOWN, what, "no known Vertex AI quota for this machine")
    infos, failed = all_quota_infos(apis, settings.project)
    if failed:
        return Finding(
            UNKNOWN,
            what,
            failed.detail,
            failed.fix or "see the console's IAM & Admin > Quotas, filtered on aiplatform.googleapis.com",
        )
    matching = [
        info
        for info in infos
        if "custom_model_training" in info.get("metric", "")
        and part in info["metric"]
        and "preemptible" not in info["metric"]
    ]
    if not matching:
        return Finding(
            UNKNOWN,
            what,
            f"Cloud Quotas lists no Vertex AI quota named for {part}: not guessed",
            "see the console's IAM & Admin > Quotas, filtered on aiplatform.googleapis.com",
        )
    info = matching[0]
    limit = region_limit(info, settings.region)
    if limit is None:
        return Finding(UNKNOWN, what, f"{info['metric']} has no value for {settings.region}")
    if limit < 0 or limit >= needed:
        return Finding(OK, what, f"{info['metric']}: {'unlimited' if limit < 0 else limit}, the job takes {needed}")
    return Finding(
        MISSING,
        what,
        f"{info['metric']} allows {limit}, the job takes {needed}",
        f"gcloud beta quotas preferences create --service=aiplatform.googleapis.com "
        f"--quota-id={info.get('quotaId', 'QUOTA_ID')} --preferred-value={needed} "
        f"--dimensions=region={settings.region} --project={settings.project}",
    )


def all_quota_infos(apis, project: str) -> tuple[list[dict], Finding | None]:
    """Every Vertex AI quota of the project (Cloud Quotas' list, page after page)."""
    path = f"/v1/projects/{project}/locations/global/services/aiplatform.googleapis.com/quotaInfos"
    infos, token = [], ""
    while True:
        page, failed = answered(
            lambda token=token: apis.get(
                "cloudquotas", path, {"pageSize": 500, **({"pageToken": token} if token else {})}
            ),
            "quota",
        )
        if failed:
            return [], failed
        infos += page.get("quotaInfos", [])
        token = page.get("nextPageToken", "")
        if not token:
            return infos, None


def region_limit(info: dict, region: str) -> int | None:
    """A quota's limit in ``region``: its entry for the region, else the default entry that applies there."""
    entries = info.get("dimensionsInfos", [])
    own = [e for e in entries if e.get("dimensions", {}).get("region") == region]
    applying = [e for e in entries if not e.get("dimensions") and (region in e.get("applicableLocations", [region]))]
    for entry in own or applying:
        try:
            return int(entry.get("details", {}).get("value", ""))
        except ValueError:
            return None
    return None
