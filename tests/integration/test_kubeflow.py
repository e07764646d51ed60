# SPDX-License-Identifier: Apache-2.0
"""A Kubeflow PyTorchJob runs unchanged with hyperpodrun as its command.

examples/kubeflow/pytorchjob.yaml's command runs on two "nodes" of this
machine, each given the environment Kubeflow's training operator sets for
its pod (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
PET_MASTER_PORT, and MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
PYTHONUNBUFFERED), and their four workers all-reduce with PyTorch's gloo
backend. No --rdzv-backend is given: PET_MASTER_ADDR selects static, and
the agent says so.
"""

import signal

import pytest

from conftest import SOURCE_ROOT, deadline_poll, have_torch
from test_multinode import check_allreduce, free_port

yaml = pytest.importorskip("yaml")

MANIFEST = SOURCE_ROOT / "examples" / "kubeflow" / "pytorchjob.yaml"
ELASTIC = SOURCE_ROOT / "examples" / "kubeflow" / "pytorchjob-elastic.yaml"
EXAMPLE = SOURCE_ROOT / "examples" / "allreduce.py"
CHOICE = ("rendezvous backend static: PET_MASTER_ADDR is set and no "
          "--rdzv-backend or PET_RDZV_BACKEND names a backend")

needs_torch = pytest.mark.skipif(not have_torch(),
                                 reason="/usr/bin/python3 has no torch")


def manifest():
    job = yaml.safe_load(MANIFEST.read_text())
    assert job["apiVersion"] == "kubeflow.org/v1"
    assert job["kind"] == "PyTorchJob"
    assert "elasticPolicy" not in job["spec"]
    return job


def replica_commands(job):
    """Each replica type's container command, Master first, and the
    master's port (the container port Kubeflow looks up by name)."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    commands, port = [], None
    for rtype in ("Master", "Worker"):
        (container,) = specs[rtype]["template"]["spec"]["containers"]
        for _ in range(specs[rtype]["replicas"]):
            commands.append(container["command"])
        for p in container.get("ports", []):
            if p["name"] == "pytorchjob-port":
                port = p["containerPort"]
    assert port is not None
    return commands, port


def kubeflow_env(job, node, nnodes, port):
    """What the training operator puts in pod `node`'s environment, with
    the master's service name replaced by this machine's loopback."""
    return {
        "PET_NNODES": nnodes,
        "PET_NPROC_PER_NODE": job["spec"]["nprocPerNode"],
        "PET_NODE_RANK": node,
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": port,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
        "WORLD_SIZE": nnodes,
        "RANK": node,
        "PYTHONUNBUFFERED": "0",
    }


def test_manifest_is_a_plain_pytorchjob():
    job = manifest()
    commands, port = replica_commands(job)
    assert len(commands) == 2
    for command in commands:
        assert command[0] == "hyperpodrun"
        assert not any(a.startswith("--rdzv") for a in command)
    assert port == 23456


@needs_torch
def test_two_pods_allreduce_with_kubeflow_env(hpr, tmp_path):
    job = manifest()
    commands, _ = replica_commands(job)
    nproc = int(job["spec"]["nprocPerNode"])
    port = free_port()  # not the manifest's 23456: tests run side by side
    procs = []
    # The worker pod first: Kubeflow starts them in no set order.
    for node in reversed(range(len(commands))):
        args = [str(EXAMPLE) if a == "/workspace/train.py" else a
                for a in commands[node][1:]]
        procs.append((node, hpr.start(
            args, env=kubeflow_env(job, node, len(commands), port),
            log_dir=False)))
    results = dict((node, p.wait(120)) for node, p in procs)
    results = [results[n] for n in range(len(commands))]
    check_allreduce(results, nproc, len(commands))
    for node, r in enumerate(results):
        assert CHOICE in r.err, r.describe()
        assert (f"attempt 0: {nproc} workers, node {node} of 2, world size "
                f"{2 * nproc}, master 127.0.0.1:{port}") in r.err, \
            r.describe()


@needs_torch
def test_elastic_pytorchjob_runs_with_c10d(hpr, tmp_path):
    """examples/kubeflow/pytorchjob-elastic.yaml: the environment of an
    elasticPolicy (c10d, PET_NNODES=MIN:MAX) on two pods; both join one
    round (MAX) and all-reduce through the agents' store."""
    job = yaml.safe_load(ELASTIC.read_text())
    policy = job["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "c10d"
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"][
        "spec"]["containers"]
    command = container["command"]
    assert command[0] == "hyperpodrun"
    assert not any(a.startswith("--rdzv") for a in command)
    nproc = int(job["spec"]["nprocPerNode"])
    port = free_port()
    procs = []
    for pod in range(2):
        env = {"PET_RDZV_BACKEND": "c10d",
               "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
               "PET_RDZV_ID": job["metadata"]["name"],
               "PET_NNODES": f"{policy['minReplicas']}:{policy['maxReplicas']}",
               "PET_MAX_RESTARTS": str(policy["maxRestarts"]),
               "PET_NPROC_PER_NODE": str(nproc),
               "PYTHONUNBUFFERED": "0"}
        args = [str(EXAMPLE) if a == "/workspace/train.py" else a
                for a in command[1:]]
        procs.append(hpr.start(["--log-dir", tmp_path / f"pod{pod}", *args],
                               env=env, log_dir=False))
    results = [p.wait(180) for p in procs]
    world = 2 * nproc
    for r in results:
        assert r.rc == 0, r.describe()
        assert "round 0 closed with 2 nodes (--nnodes 1:2)" in r.err, \
            r.describe()
        lines = [ln for ln in r.out.splitlines() if "all_reduce sum" in ln]
        assert len(lines) == nproc, r.describe()
        want = world * (world + 1) // 2
        for ln in lines:
            assert f"/{world} (local " in ln, r.describe()
            assert ln.endswith(f"all_reduce sum = {want}"), r.describe()


def test_hyperpod_backend_named_keeps_operator_mode(hpr, tmp_path):
    """--rdzv-backend hyperpod with Kubeflow's environment: the operator
    drives the job, as the HyperPod operator's pods need."""
    job = manifest()
    env = kubeflow_env(job, 0, 2, free_port())
    proc = hpr.start(["--rdzv-backend", "hyperpod", "--server-port", "0",
                      EXAMPLE], env=env, log_dir=False)
    deadline_poll(lambda: b"waiting for /start" in proc.console_err(), 30,
                  what="the agent to wait for the operator's /start")
    proc.signal(signal.SIGTERM)
    r = proc.wait(30)
    assert "operator mode (--rdzv-backend hyperpod" in r.err, r.describe()
    assert CHOICE not in r.err, r.describe()
