"""The processes of a multi-host TPU slice: where ``jax.distributed.initialize`` takes its arguments from (explicit
variables, the slice's TPU worker variables, Vertex AI's ``CLUSTER_SPEC``, or JAX's own Cloud TPU detection), checked
before anything is imported, and the connection itself."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from components.cli import UsageError, one_line

log = logging.getLogger(__name__)


# the multi-process launch contract (JAX reads JAX_COORDINATOR_ADDRESS itself): one process per host
PROCESS_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def process_launch(hosts: int, env: Mapping[str, str]) -> tuple[dict | None, str]:
    """(the arguments of ``jax.distributed.initialize`` for this process, where they came from), checked before
    anything is imported. None with one process. With several, the first of these sources that is set:

    - ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``: several local processes, or hosts
      started by hand;
    - ``TPU_WORKER_HOSTNAMES`` (or ``TPU_PROCESS_ADDRESSES``) with ``TPU_WORKER_ID``: the hosts of a TPU slice as GKE
      and TPU VMs describe them (the coordinator: the first host, on JAX's port);
    - ``CLUSTER_SPEC``: Vertex AI's description of a custom job's replicas, where it names one per host;
    - else ``{}`` on a slice of ``hosts`` > 1: JAX's own Cloud TPU detection asks the TPU metadata server.

    The explicit sources turn JAX's detection off, so that no metadata lookup can override them."""
    explicit = {name: env.get(name, "") for name in PROCESS_VARIABLES}
    if any(explicit.values()):
        return _jax_launch(explicit, hosts), "JAX_COORDINATOR_ADDRESS"
    if hosts <= 1:
        return None, ""
    workers_variable = next((name for name in TPU_WORKER_VARIABLES if env.get(name)), "")
    if workers_variable:
        return _tpu_worker_launch(workers_variable, hosts, env), workers_variable
    if env.get("CLUSTER_SPEC"):
        launch, why = _cluster_spec_launch(env["CLUSTER_SPEC"], hosts, env)
        if launch is not None:
            return launch, "CLUSTER_SPEC"
        log.info("CLUSTER_SPEC %s: JAX's Cloud TPU detection finds the hosts", why)
    return {}, "JAX's Cloud TPU detection"


# the hosts of a TPU slice as GKE and TPU VMs set them (JAX's GkeTpuCluster reads the same), and JAX's coordinator port
TPU_WORKER_VARIABLES = ("TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES")


JAX_COORDINATOR_PORT = "8482"


# what the start of a run logs, for the launch on real hardware to be read afterwards
CLUSTER_VARIABLES = (
    *PROCESS_VARIABLES,
    *TPU_WORKER_VARIABLES,
    "TPU_WORKER_ID",
    "TPU_SKIP_MDS_QUERY",
    "TPU_ACCELERATOR_TYPE",
    "MEGASCALE_COORDINATOR_ADDRESS",
    "MEGASCALE_NUM_SLICES",
    "MEGASCALE_SLICE_ID",
    "CLUSTER_SPEC",
)


def _explicit(coordinator: str, count: int, index: int) -> dict:
    return {
        "coordinator_address": coordinator,
        "num_processes": count,
        "process_id": index,
        "cluster_detection_method": "deactivate",
    }


def _jax_launch(explicit: dict, hosts: int) -> dict:
    missing = [name for name, value in explicit.items() if not value]
    if missing:
        raise UsageError(f"a multi-process launch needs {', '.join(PROCESS_VARIABLES)}: {', '.join(missing)} not set")
    try:
        count, index = int(explicit["JAX_NUM_PROCESSES"]), int(explicit["JAX_PROCESS_ID"])
    except ValueError:
        raise UsageError("JAX_NUM_PROCESSES and JAX_PROCESS_ID must be whole numbers") from None
    if not 0 <= index < count:
        raise UsageError(f"JAX_PROCESS_ID {index} must be in [0, {count}) for JAX_NUM_PROCESSES {count}")
    if hosts > 1 and count != hosts:
        raise UsageError(f"JAX_NUM_PROCESSES {count} does not match --hosts {hosts}: start one process per host")
    return _explicit(explicit["JAX_COORDINATOR_ADDRESS"], count, index)


def _host(address: str) -> str:
    """``host:port`` or ``[v6]:port`` or a bare host -> the host."""
    if address.startswith("["):
        return address[1 : address.index("]")]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def _coordinator(first_host: str, env: Mapping[str, str]) -> str:
    return f"{_host(first_host)}:{env.get('JAX_COORDINATOR_PORT') or JAX_COORDINATOR_PORT}"


def _tpu_worker_launch(variable: str, hosts: int, env: Mapping[str, str]) -> dict:
    workers = [w.strip() for w in env[variable].split(",") if w.strip()]
    if len(workers) != hosts:
        raise UsageError(
            f"{variable} names {len(workers)} host(s), --hosts is {hosts}: compile for the slice this job runs on"
        )
    try:
        index = int(env.get("TPU_WORKER_ID", ""))
    except ValueError:
        raise UsageError(
            f"{variable} is set but TPU_WORKER_ID is not a whole number: set it to this host's index in [0, {hosts})"
        ) from None
    if not 0 <= index < hosts:
        raise UsageError(f"TPU_WORKER_ID {index} must be in [0, {hosts}) for the {hosts} hosts of {variable}")
    return _explicit(_coordinator(workers[0], env), hosts, index)


def _cluster_spec_launch(value: str, hosts: int, env: Mapping[str, str]) -> tuple[dict | None, str]:
    """Vertex AI's ``CLUSTER_SPEC`` (``{"cluster": {"workerpool0": ["host:port", ...], ...}, "task": {"type":
    "workerpool0", "index": 0}}``) as a launch, when its replicas are the slice's hosts; else (None, why not)."""
    try:
        spec = json.loads(value)
        pools = {name: list(addresses) for name, addresses in spec["cluster"].items()}
        task_type, task_index = spec["task"]["type"], int(spec["task"]["index"])
        order = sorted(pools, key=lambda name: (len(name), name))  # workerpool0, workerpool1, ..., workerpool10
        offset = sum(len(pools[name]) for name in order[: order.index(task_type)])
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UsageError(
            f"CLUSTER_SPEC is not Vertex AI's cluster description ({one_line(err, with_type=True)}): "
            "unset it, or set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID"
        ) from None
    addresses = [address for name in order for address in pools[name]]
    if len(addresses) != hosts:
        return None, f"names {len(addresses)} replica(s), not the {hosts} hosts of the slice"
    if not 0 <= task_index < len(pools[task_type]):
        raise UsageError(f"CLUSTER_SPEC's task index {task_index} is outside {task_type}'s {len(pools[task_type])}")
    return _explicit(_coordinator(addresses[0], env), hosts, offset + task_index), ""


def log_cluster_environment(env: Mapping[str, str]) -> None:
    """Logs the variables a multi-host launch is read from (none of them is a secret), so that what a slice was
    given can be read in its logs."""
    present = {name: env[name] for name in CLUSTER_VARIABLES if env.get(name)}
    log.info("cluster variables: %s", json.dumps(present, sort_keys=True) if present else "none set")


def connect_processes(hosts: int, env: Mapping[str, str]) -> tuple[int, int]:
    """(processes, this process's index) after ``jax.distributed.initialize`` where there is more than one (see
    ``process_launch``). A process count other than the slice's is a one-line error: hosts that train alone would
    each write a different model."""
    import jax

    kwargs, source = process_launch(hosts, env)
    if kwargs is None:
        return 1, 0
    expected = kwargs.get("num_processes", hosts)
    log.info("connecting %d processes (from %s)", expected, source)
    try:
        jax.distributed.initialize(**kwargs)
    except (ValueError, RuntimeError, OSError) as err:  # OSError: a metadata lookup's connection error
        raise UsageError(
            f"jax.distributed could not connect the {expected} hosts of this slice ({one_line(err)}): on Vertex AI "
            "run the multi-host target's worker pool as compiled; by hand, set "
            f"{', '.join(PROCESS_VARIABLES)} in every process"
        ) from err
    if jax.process_count() != expected:
        raise UsageError(
            f"jax.distributed found {jax.process_count()} process(es), expected {expected} (--hosts {hosts}): "
            "the slice's hosts did not all join"
        )
    log.info("process %d of %d (jax.distributed)", jax.process_index(), jax.process_count())
    return jax.process_count(), jax.process_index()
