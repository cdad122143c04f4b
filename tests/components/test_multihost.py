"""A multi-host slice finds its hosts from whichever description its platform gives (JAX's launch variables, the TPU
worker variables of GKE and TPU VMs, Vertex AI's CLUSTER_SPEC), connects them as two local processes do here, and
hands each follower the backup process 0 settled, whatever a cached view of the model folder shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from components.artifacts.checkpoints import BACKUP_METADATA
from components.cli import UsageError
from components.train.backup import BACKUP_WEIGHTS, backup_digest, copy_chiefs_backup
from components.train.hosts import connect_processes, process_launch
from tests.components.test_train_jax import REPO_ROOT, free_port, jax_env

OFF = "deactivate"  # JAX's own detection, off where the launch is explicit


def spec(pools: dict, task: str, index: int) -> str:
    return json.dumps({"cluster": pools, "environment": "cloud", "task": {"type": task, "index": index, "trial": ""}})


@pytest.mark.parametrize(
    ("env", "hosts", "launch", "source"),
    [
        (
            {
                "JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234",
                "JAX_NUM_PROCESSES": "4",
                "JAX_PROCESS_ID": "1",
                "TPU_WORKER_HOSTNAMES": "a,b,c,d",
                "TPU_WORKER_ID": "3",
            },
            4,
            {"coordinator_address": "10.0.0.2:1234", "num_processes": 4, "process_id": 1},
            "JAX_COORDINATOR_ADDRESS",
        ),
        (
            {
                "TPU_WORKER_HOSTNAMES": "t1v-w-0,t1v-w-1,t1v-w-2,t1v-w-3",
                "TPU_WORKER_ID": "2",
                "CLUSTER_SPEC": spec({"workerpool0": ["x:2222"]}, "workerpool0", 0),
            },
            4,
            {"coordinator_address": "t1v-w-0:8482", "num_processes": 4, "process_id": 2},
            "TPU_WORKER_HOSTNAMES",
        ),
        (
            {
                "TPU_PROCESS_ADDRESSES": "10.1.0.5:8476,10.1.0.6:8476",
                "TPU_WORKER_HOSTNAMES": "h0,h1",
                "TPU_WORKER_ID": "1",
                "JAX_COORDINATOR_PORT": "9000",
            },
            2,
            {"coordinator_address": "10.1.0.5:9000", "num_processes": 2, "process_id": 1},
            "TPU_PROCESS_ADDRESSES",
        ),
        (
            {
                "CLUSTER_SPEC": spec(
                    {"workerpool1": ["b:2222", "c:2222", "d:2222"], "workerpool0": ["a:2222"]}, "workerpool1", 1
                )
            },
            4,
            {"coordinator_address": "a:8482", "num_processes": 4, "process_id": 2},
            "CLUSTER_SPEC",
        ),
    ],
    ids=["jax-first", "tpu-workers", "process-addresses", "cluster-spec"],
)
def test_each_launch_source_names_the_coordinator_the_count_and_this_host(env, hosts, launch, source):
    assert process_launch(hosts, env) == ({**launch, "cluster_detection_method": OFF}, source)


def test_without_a_description_of_its_hosts_jax_detects_them_and_one_host_launches_nothing():
    one_replica = {"CLUSTER_SPEC": spec({"workerpool0": ["cmle-training-workerpool0-1-0:2222"]}, "workerpool0", 0)}
    # one replica stands for the whole slice: CLUSTER_SPEC does not name its hosts, the TPU metadata does
    assert process_launch(4, one_replica) == ({}, "JAX's Cloud TPU detection")
    assert process_launch(4, {}) == ({}, "JAX's Cloud TPU detection")
    assert process_launch(1, {"TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0"}) == (None, "")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"TPU_WORKER_HOSTNAMES": "a,b,c"},
            "TPU_WORKER_HOSTNAMES names 3 host(s), --hosts is 4: compile for the slice this job runs on",
        ),
        (
            {"TPU_WORKER_HOSTNAMES": "a,b,c,d"},
            "TPU_WORKER_HOSTNAMES is set but TPU_WORKER_ID is not a whole number: "
            "set it to this host's index in [0, 4)",
        ),
        (
            {"TPU_WORKER_HOSTNAMES": "a,b,c,d", "TPU_WORKER_ID": "4"},
            "TPU_WORKER_ID 4 must be in [0, 4) for the 4 hosts of TPU_WORKER_HOSTNAMES",
        ),
        ({"CLUSTER_SPEC": "{not json"}, "CLUSTER_SPEC is not Vertex AI's cluster description (JSONDecodeError: "),
        (
            {"CLUSTER_SPEC": json.dumps({"cluster": {"workerpool0": ["a:1"] * 4}})},
            "CLUSTER_SPEC is not Vertex AI's cluster description (KeyError: 'task')",
        ),
    ],
)
def test_a_malformed_description_is_one_line(env, message):
    with pytest.raises(UsageError) as raised:
        process_launch(4, env)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def connect_two(extra: list[dict]) -> list[subprocess.CompletedProcess]:
    script = (
        "import json, os\nfrom components.cli import configure_logging\n"
        "from components.train.hosts import connect_processes\nconfigure_logging()\n"
        "print(json.dumps(connect_processes(2, os.environ)))\n"
    )
    started = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=REPO_ROOT,
            env=jax_env(**env),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for env in extra
    ]
    try:
        return [
            subprocess.CompletedProcess(p.args, p.wait(timeout=180), p.stdout.read(), p.stderr.read()) for p in started
        ]
    finally:
        for process in started:
            process.kill()


@pytest.mark.parametrize("source", ["TPU_WORKER_HOSTNAMES", "CLUSTER_SPEC"])
def test_two_local_processes_connect_from_each_description(source):
    port = str(free_port())
    if source == "TPU_WORKER_HOSTNAMES":
        envs = [{source: "127.0.0.1,127.0.0.1", "TPU_WORKER_ID": str(i), "JAX_COORDINATOR_PORT": port} for i in (0, 1)]
    else:
        pools = {"workerpool0": ["127.0.0.1:2222"], "workerpool1": ["127.0.0.1:2222"]}
        envs = [{source: spec(pools, f"workerpool{i}", 0), "JAX_COORDINATOR_PORT": port} for i in (0, 1)]
    results = connect_two(envs)
    for index, result in enumerate(results):
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout.strip().splitlines()[-1]) == [2, index]
        assert f"connecting 2 processes (from {source})" in result.stderr


def test_a_metadata_lookup_that_cannot_connect_is_one_line(monkeypatch):
    import jax
    import requests

    def unreachable(**kwargs):  # what JAX's Cloud TPU detection raises off Google's network
        raise requests.exceptions.ConnectionError("HTTPConnectionPool(host='metadata.google.internal', port=80)")

    monkeypatch.setattr(jax.distributed, "initialize", unreachable)
    with pytest.raises(UsageError, match=r"^jax.distributed could not connect the 4 hosts of this slice \(.*metadata"):
        connect_processes(4, {})


def write_backup(folder, weights: bytes, epoch: int) -> int:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, BACKUP_WEIGHTS), "wb") as handle:
        handle.write(weights)
    with open(os.path.join(folder, BACKUP_METADATA), "w") as handle:
        json.dump({"epoch": epoch}, handle)
    return backup_digest(os.path.join(folder, BACKUP_WEIGHTS), os.path.join(folder, BACKUP_METADATA))


def test_a_follower_reads_again_until_it_sees_the_chiefs_backup(tmp_path):
    chiefs = write_backup(tmp_path / "chief", b"weights after epoch 4", 4)
    shared = tmp_path / "model" / "checkpoints" / "backup"
    stale = write_backup(shared, b"weights after epoch 2", 2)  # what a cached view still shows
    assert 0 != stale != chiefs != 0
    waits = []

    def wait(seconds):  # the cache catches up while the follower waits
        waits.append(seconds)
        write_backup(shared, b"weights after epoch 4", 4)

    copy_chiefs_backup(str(shared), str(tmp_path / "scratch"), chiefs, 1, reads=3, wait=wait)
    assert len(waits) == 1
    assert (tmp_path / "scratch" / BACKUP_WEIGHTS).read_bytes() == b"weights after epoch 4"
    assert json.loads((tmp_path / "scratch" / BACKUP_METADATA).read_text()) == {"epoch": 4}


def test_a_follower_starts_afresh_when_the_chief_removed_its_backup(tmp_path):
    shared = tmp_path / "backup"
    write_backup(shared, b"a first backup cut short", 1)  # removed by process 0, still in this host's view
    copy_chiefs_backup(str(shared), str(tmp_path / "scratch"), 0, 1, reads=2, wait=pytest.fail)
    assert os.listdir(tmp_path / "scratch") == []


def test_a_follower_that_never_sees_the_chiefs_backup_is_one_line(tmp_path):
    shared = tmp_path / "backup"
    write_backup(shared, b"another run's weights", 7)
    waits = []
    with pytest.raises(
        UsageError,
        match=r"^process 3 sees another backup in .*backup than process 0 settled, after 4 "
        r"reads: the hosts must share the model folder",
    ):
        copy_chiefs_backup(str(shared), str(tmp_path / "scratch"), 12345, 3, reads=4, wait=waits.append)
    assert len(waits) == 3
