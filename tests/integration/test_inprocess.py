"""In-process restart (--inprocess-restart): pytest is the operator over
HTTP, and the training processes speak the worker socket with raw frames
(helpers/ipr_worker.py), so that the agent's side of the protocol (§3.6,
§4.9) is checked on its own."""

import json
import os
import socket
import struct
import time
import uuid

import pytest

from conftest import deadline_poll, helper, pid_alive, write_exec
from test_operator import Agent

WORKER = helper("ipr_worker.py")


def agent(hpr, tmp_path, args=(), env=None, nproc=2, **kw):
    out = tmp_path / "iprw"
    out.mkdir(exist_ok=True)
    full_env = {"IPRW_DIR": out, "NNODES": "1"}
    full_env.update(env or {})
    a = Agent(hpr, tmp_path, ["--inprocess-restart", *args], env=full_env,
              nproc=nproc, script=WORKER, **kw)
    a.out = out
    return a


def events(a, lr):
    path = a.out / f"rank{lr}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_event(a, lr, name, count=1, timeout=20):
    def seen():
        evs = [e for e in events(a, lr) if e["event"] == name]
        return evs if len(evs) >= count else None
    return deadline_poll(seen, timeout, interval=0.02,
                         what=f"local rank {lr}: {name} x{count}")[count - 1]


def command(a, lr, text):
    tmp = a.out / f".cmd{lr}"
    tmp.write_text(text)
    os.rename(tmp, a.out / f"cmd{lr}")


def pids(a, nproc=2):
    return [events(a, lr)[0]["pid"] for lr in range(nproc)]


def test_barrier_start_fault_pause_restart(hpr, tmp_path):
    a = agent(hpr, tmp_path)
    st = a.wait_status("ready")
    assert list(st["transitions"]) == ["INIT", "READY"]
    assert st["restartMode"] == "in_process_restart"
    assert st["rank_labels"] == {}
    assert st["spare"] == "True"
    first = pids(a)

    a.start(rank=0, nnodes=1, fault_count=0, master_addr="10.1.2.3",
            master_port=29555, spare=False, worker_data={"k": [1, 2]},
            rankIps=[{"rank": 0, "ip": "10.1.2.3"}], ipVersion="v1")
    for lr in range(2):
        m = wait_event(a, lr, "job_start")["msg"]
        envs = m["worker_envs"]
        assert envs == {
            "RANK": str(lr), "GROUP_RANK": "0", "ROLE_RANK": str(lr),
            "WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "1",
            "ROLE_WORLD_SIZE": "2", "MASTER_ADDR": "10.1.2.3",
            "MASTER_PORT": "29555", "JOB_RESTART_COUNT": "0",
            "TORCHELASTIC_RESTART_COUNT": "0", "SPARE": "False"}
        assert m["aggregate_worker_data"] == {
            "rank_ips": [{"rank": 0, "ip": "10.1.2.3"}],
            "aggregate_worker_data": {"k": [1, 2]}}
    st = a.wait_status("running")
    assert st["reason"] == "Running"
    assert st["spare"] == "False"
    assert "priority" not in st

    # A rank reports a fault: FAULTED with its reason, its data shown.
    command(a, 1, "fault NaNLoss in_process_restart loss is nan at step 7")
    st = a.wait_status("faulted")
    assert st["reason"] == "NaNLoss"
    assert st["message"] == "loss is nan at step 7"
    assert st["worker_data"][0]["local_rank"] == 1
    assert st["worker_data"][0]["rank"] == 1
    assert st["worker_data"][0]["group_rank"] == 0
    assert st["worker_data"][0]["failed"] is True
    assert st["worker_data"][0]["data"].startswith("step=")
    assert list(st)[:7] == ["status", "transitions", "reason", "message",
                            "restartMode", "worker_data", "rank_labels"]

    # /stop pauses: job_fault to every rank, back at the barrier, READY.
    code, _, _ = a.post("/stop")
    assert code == 200
    st = a.wait_status("ready")
    assert st["priority"] == "True"
    m = wait_event(a, 0, "job_fault")["msg"]
    assert m["restart_count"] == 0
    assert pids(a) == first

    # /start again with faultCount 1: the same processes, count 1.
    a.start(rank=0, nnodes=1, fault_count=1, master_addr="10.1.2.3",
            master_port=29556)
    for lr in range(2):
        envs = wait_event(a, lr, "job_start", count=2)["msg"]["worker_envs"]
        assert envs["JOB_RESTART_COUNT"] == "1"
        assert envs["TORCHELASTIC_RESTART_COUNT"] == "1"
        assert envs["MASTER_PORT"] == "29556"
    st = a.wait_status("running")
    assert "priority" not in st
    assert all(pid_alive(p) for p in first)
    for lr in range(2):
        assert all(e["pid"] == first[lr] for e in events(a, lr))
    assert a.shutdown().rc == 0
