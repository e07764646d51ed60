# SPDX-License-Identifier: Apache-2.0
"""In-process restart (--inprocess-restart): pytest is the operator over
HTTP, and the training processes speak the worker socket with raw frames
(helpers/ipr_worker.py), so that the agent's side of the protocol
(docs/inprocess-restart-and-checkpoints.md) is checked on its own."""

import json
import os
import re
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
    """The first processes' pids, once each has written something."""
    def first():
        evs = [events(a, lr) for lr in range(nproc)]
        return [e[0]["pid"] for e in evs] if all(evs) else None
    return deadline_poll(first, 20, interval=0.02, what="every rank's pid")


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


def latest_pids(a, nproc=2):
    return [events(a, lr)[-1]["pid"] if events(a, lr) else None
            for lr in range(nproc)]


def wait_new_processes(a, old, timeout=30):
    """Every local rank has a process that is not one of old, at the
    barrier again."""
    def fresh():
        now = latest_pids(a, len(old))
        if any(p is None or p in old for p in now):
            return None
        for lr in range(len(old)):
            if not any(e["event"] == "at_barrier" and e["pid"] == now[lr]
                       for e in events(a, lr)):
                return None
        return now
    return deadline_poll(fresh, timeout, interval=0.05,
                         what="new processes at the barrier")


def released(a, body=None):
    """READY, then /start: RUNNING with every rank past the barrier."""
    a.wait_status("ready")
    a.start(**(body or {}))
    for lr in range(2):
        wait_event(a, lr, "job_start")
    return a.wait_status("running")


def test_crash_then_stop_restarts_the_processes(hpr, tmp_path):
    a = agent(hpr, tmp_path)
    released(a)
    first = pids(a)
    command(a, 0, "exit 3")
    st = a.wait_status("faulted")
    assert st["reason"] == "WorkerCrash"
    assert "exited with code 3" in st["message"]
    a.post("/stop")
    new = wait_new_processes(a, first)
    st = a.wait_status("ready")
    assert list(st["transitions"]) == ["INIT", "READY", "RUNNING",
                                       "FAULTED", "STOPPING"]
    assert not any(pid_alive(p) for p in first)
    # The new processes start at the last /start's restart count.
    a.start(fault_count=1)
    m = wait_event(a, 0, "job_start", count=2)
    assert m["pid"] == new[0]
    assert m["msg"]["worker_envs"]["JOB_RESTART_COUNT"] == "1"
    assert a.shutdown().rc == 0


@pytest.mark.parametrize("how", ["local_process_level_restart",
                                 "stop_process_level_restart"])
def test_local_process_level_restart(hpr, tmp_path, how):
    a = agent(hpr, tmp_path)
    released(a)
    first = pids(a)
    if how == "local_process_level_restart":
        command(a, 1, "fault Poisoned local_process_level_restart bad state")
    else:
        code, _, _ = a.post("/stop", {"restart_mode": "process_level_restart"})
        assert code == 200
    wait_new_processes(a, first)
    st = a.wait_status("ready")
    assert "INIT" in st["transitions"]
    assert "ipversion" not in st
    err = a.proc.console_err().decode()
    assert "in-process restart: full stop" in err
    assert "a local process-level restart is due" in err
    assert a.shutdown().rc == 0


def test_barrier_timeout_restarts_the_processes(hpr, tmp_path):
    a = agent(hpr, tmp_path, ["--inprocess-timeout", "1"],
              env={"IPRW_NO_BARRIER": "1"})
    wait_event(a, 1, "no_barrier")
    first = pids(a)
    t0 = time.monotonic()

    def restarted():
        now = latest_pids(a)
        return all(p is not None and p not in first for p in now)
    deadline_poll(restarted, 20, interval=0.05, what="a full stop")
    assert time.monotonic() - t0 >= 0.5
    err = a.proc.console_err().decode()
    assert "at most 1 s" in err
    assert ("--inprocess-timeout passed before every local rank reached "
            "the barrier") in err
    st = a.status()
    assert st["status"] == "init"
    assert not any(pid_alive(p) for p in first)
    assert a.shutdown().rc == 0


def test_no_timeout_waits_for_the_barrier(hpr, tmp_path):
    a = agent(hpr, tmp_path, env={"IPRW_NO_BARRIER": "1"})
    wait_event(a, 1, "no_barrier")
    wait_event(a, 0, "at_barrier")
    time.sleep(0.3)   # nothing may happen: no deadline to wait for
    assert a.status()["status"] == "init"
    assert all(pid_alive(p) for p in pids(a))
    assert a.shutdown().rc == 0


@pytest.mark.parametrize("step", ["connect", "init"])
def test_dropped_before_the_barrier_times_out(hpr, tmp_path, step):
    a = agent(hpr, tmp_path, ["--inprocess-timeout", "1"],
              env={"IPRW_DROP": f"{step}:1"})
    wait_event(a, 1, "dropped")
    first = pids(a)

    def restarted():
        now = latest_pids(a)
        return all(p is not None and p not in first for p in now)
    deadline_poll(restarted, 20, interval=0.05, what="a full stop")
    assert a.status()["status"] == "init"
    assert a.shutdown().rc == 0


def test_dropped_at_the_barrier_faults_at_start(hpr, tmp_path):
    a = agent(hpr, tmp_path, env={"IPRW_DROP": "barrier:1"})
    wait_event(a, 1, "dropped")
    a.wait_status("ready")
    first = pids(a)
    a.start()
    st = a.wait_status("faulted")
    assert st["reason"] == "WorkerFault"
    assert st["message"] == "Missing client connections from local ranks 1"
    # Checked before anything is sent, as the reference: no rank is
    # released into a job a rank of its node is missing from.
    assert not [e for e in events(a, 0) if e["event"] == "job_start"]
    a.post("/stop")
    wait_new_processes(a, first)
    a.wait_status("ready")
    assert a.shutdown().rc == 0


def test_dropped_after_start_full_stop_at_pause(hpr, tmp_path):
    a = agent(hpr, tmp_path, env={"IPRW_DROP": "start:1"})
    a.wait_status("ready")
    first = pids(a)
    a.start()
    wait_event(a, 1, "dropped")
    a.wait_status("running")
    a.post("/stop")
    wait_new_processes(a, first)
    a.wait_status("ready")
    err = a.proc.console_err().decode()
    assert "a local rank dropped its connection during the pause" in err
    assert a.shutdown().rc == 0


def test_job_fault_without_rank(hpr, tmp_path):
    a = agent(hpr, tmp_path)
    released(a)
    command(a, 0, "fault-norank")
    st = a.wait_status("faulted")
    assert st["reason"] == "NoRank"
    err = a.proc.console_err().decode()
    assert ('job_fault from local rank 0: "rank" is missing, not a global '
            'rank; kept as unknown (-1 in /status)') in err
    # The rank is still the one that failed; the agent goes on.
    a.post("/stop")
    a.wait_status("ready")
    assert a.shutdown().rc == 0


def raw_client(a, tmp_path):
    name = f"hyperpod_elastic_agent_{a.proc.pid}.sock"
    path = next(p for p in (tmp_path / "tmpdir" / name, f"/tmp/{name}")
                if os.path.exists(p))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    return s


def send_raw(s, msg):
    body = json.dumps(msg).encode()
    s.sendall(struct.pack(">I", len(body)) + body)


def test_bad_barrier_messages_change_nothing(hpr, tmp_path):
    """Duplicate inits, ranks outside the node, barrier messages before an
    init: each is named in a warning and changes nothing."""
    a = agent(hpr, tmp_path, env={"IPRW_NO_BARRIER": "1"})
    wait_event(a, 1, "no_barrier")
    wait_event(a, 0, "at_barrier")
    s = raw_client(a, tmp_path)
    cid = str(uuid.uuid4())
    # A barrier message for a rank this node does not have.
    send_raw(s, {"type": "init", "local_rank": 5, "client_id": cid})
    send_raw(s, {"type": "at_rcb_barrier", "local_rank": 5,
                 "client_id": cid})
    # Before its init on this connection.
    send_raw(s, {"type": "at_rcb_barrier", "local_rank": 1,
                 "client_id": "never-registered"})
    # A duplicate init moves the client to the rank it names last.
    send_raw(s, {"type": "init", "local_rank": 0, "client_id": cid})
    send_raw(s, {"type": "init", "local_rank": 0, "client_id": cid})
    send_raw(s, {"type": "at_rcb_barrier", "local_rank": 1,
                 "client_id": cid})
    # Labels that are not an object.
    send_raw(s, {"type": "rank_labels", "local_rank": 0, "client_id": cid,
                 "labels": ["PP", "0"]})

    def warned():
        err = a.proc.console_err().decode()
        return ("local_rank 5 is not on this node" in err
                and "before its init on this connection" in err
                and '"labels" is ["PP","0"], not an object' in err)
    deadline_poll(warned, 10, what="the warnings")
    st = a.status()
    assert st["status"] == "init"
    assert st["rank_labels"] == {}
    # Labels from a registered client: last writer wins, kept as sent.
    send_raw(s, {"type": "rank_labels", "local_rank": 0, "client_id": cid,
                 "labels": {"PP": "0", "TP": "2"}})
    deadline_poll(lambda: a.status()["rank_labels"] == {"PP": "0",
                                                         "TP": "2"},
                  10, what="the labels")
    # The rank that never reached the barrier gets there through a raw
    # client of its own: READY.
    cid1 = str(uuid.uuid4())
    send_raw(s, {"type": "init", "local_rank": 1, "client_id": cid1})
    send_raw(s, {"type": "at_rcb_barrier", "local_rank": 1,
                 "client_id": cid1})
    a.wait_status("ready")
    s.close()
    assert a.shutdown().rc == 0


def stray(a, tmp_path, msg, seen):
    """A second client of local rank 0 sends msg; returns once the agent
    logged one of seen (the old or the new wording)."""
    s = raw_client(a, tmp_path)
    cid = str(uuid.uuid4())
    send_raw(s, {"type": "init", "local_rank": 0, "client_id": cid})
    send_raw(s, dict(msg, local_rank=0, client_id=cid))
    deadline_poll(lambda: any(t in a.proc.console_err().decode()
                              for t in seen),
                  20, what="the stray message handled")
    s.close()


def test_stray_past_barrier_while_ready_is_ignored(hpr, tmp_path):
    """A past_rcb_barrier from a rank no job_start released (a second
    client, a call twice) is ignored: /start still releases every rank.
    Before, the rank stopped counting at the barrier and /start went
    RUNNING with job_start sent to no rank, for ever."""
    a = agent(hpr, tmp_path)
    a.wait_status("ready")
    stray(a, tmp_path, {"type": "past_rcb_barrier"},
          ["local rank 0 passed the barrier",
           "past_rcb_barrier from local rank 0, which no job_start "
           "released; ignored"])
    a.start()
    for lr in range(2):
        wait_event(a, lr, "job_start", timeout=20)
    st = a.wait_status("running")
    assert st["reason"] == "Running"
    # The real past_rcb_barrier of each released rank counts.
    deadline_poll(lambda: a.proc.console_err().decode().count(
        "passed the barrier") >= 2, 20, what="both ranks past the barrier")
    assert a.shutdown().rc == 0


def test_stray_fault_while_ready_pause_counts_held_ranks(hpr, tmp_path):
    """A job_fault from a rank waiting at the barrier: /start reports it,
    and /stop's pause counts the ranks already at the barrier (they never
    answer the pause's job_fault). Before, STOPPING for ever."""
    a = agent(hpr, tmp_path)
    a.wait_status("ready")
    first = pids(a)
    stray(a, tmp_path, {"type": "job_fault", "rank": 0, "reason": "Stray",
                        "message": "not from the worker"},
          ["reported a fault (in_process_restart): Stray"])
    a.start()
    st = a.wait_status("faulted")
    assert st["reason"] == "Stray"
    code, _, _ = a.post("/stop")
    assert code == 200
    a.wait_status("ready", timeout=20)
    err = a.proc.console_err().decode()
    assert ("local ranks 0, 1 already at the barrier; waiting for none"
            in err)
    a.start(fault_count=1)
    for lr in range(2):
        m = wait_event(a, lr, "job_start")
        assert m["pid"] == first[lr]
        assert m["msg"]["worker_envs"]["JOB_RESTART_COUNT"] == "1"
    a.wait_status("running")
    assert a.shutdown().rc == 0


def test_shutdown_ends_a_pause_that_never_ends(hpr, tmp_path):
    """A rank that never comes back to the barrier and no
    --inprocess-timeout: the pause waits, and /shutdown ends it (the
    reference refuses /shutdown in STOPPING: only a signal ended it)."""
    a = agent(hpr, tmp_path, env={"IPRW_DEAF": "1"})
    released(a)
    first = pids(a)
    code, _, _ = a.post("/stop")
    assert code == 200
    wait_event(a, 1, "job_fault")
    wait_event(a, 0, "at_barrier", count=2)
    assert a.status()["status"] == "stopping"
    r = a.shutdown(timeout=20)
    assert r.rc == 0, r.describe()
    assert not any(pid_alive(p) for p in first)
    assert "agent state STOPPING → SHUTDOWN" in r.stderr.decode()


def test_null_ip_entry_holds_job_start_until_update(hpr, tmp_path):
    a = agent(hpr, tmp_path)
    a.wait_status("ready")
    a.start(rank=0, nnodes=2, ipVersion="v1",
            rankIps=[{"rank": 0, "ip": "10.0.0.1"}])
    a.wait_status("running")

    def held():
        return "job_start held" in a.proc.console_err().decode()
    deadline_poll(held, 10, what="the hold")
    err = a.proc.console_err().decode()
    assert "has no IP for node ranks 1" in err
    assert not [e for e in events(a, 0) if e["event"] == "job_start"]
    code, _, body = a.post("/update", {
        "rank": 0, "nnodes": 2, "faultCount": 0, "master_addr": "10.0.0.1",
        "master_port": 29500, "ipVersion": "v2",
        "rankIps": [{"rank": "1", "ip": "10.0.0.2", "zone": "b"}]})
    assert code == 200
    m = wait_event(a, 0, "job_start")["msg"]
    assert m["worker_envs"]["WORLD_SIZE"] == "4"
    # As the reference's model holds them: an int rank, no other keys.
    assert m["aggregate_worker_data"]["rank_ips"] == [
        {"rank": 1, "ip": "10.0.0.2"}]
    assert a.shutdown().rc == 0


def test_update_sends_rank_info(hpr, tmp_path):
    a = agent(hpr, tmp_path)
    # Before the training processes are up to take it: ipversion cleared.
    released(a, {"ipVersion": "v1", "rankIps": [{"rank": 0,
                                                 "ip": "10.0.0.1"}]})
    code, _, body = a.post("/update", {
        "rank": 0, "nnodes": 1, "faultCount": 0, "master_addr": "10.0.0.9",
        "master_port": 29501, "ipVersion": "v2",
        "rankIps": [{"rank": 0, "ip": "10.0.0.9"}], "worker_data": [1]})
    assert code == 200
    st = json.loads(body)
    assert st["ipversion"] == "v2"
    assert st["assigned_rank"] == "0"
    for lr in range(2):
        m = wait_event(a, lr, "job_rank_info")["msg"]
        assert m["worker_envs"]["MASTER_ADDR"] == "10.0.0.9"
        assert m["aggregate_worker_data"] == {
            "rank_ips": [{"rank": 0, "ip": "10.0.0.9"}],
            "aggregate_worker_data": [1]}
    assert a.shutdown().rc == 0


def test_stop_during_pre_train_restarts_the_node(hpr, tmp_path):
    """A pre-train fault, then /stop: the reference stays in STOPPING;
    here the node's processes restart from pre-train."""
    runs = tmp_path / "pre.log"
    pre = write_exec(tmp_path / "pre.sh",
                     f"#!/bin/sh\necho run >> {runs}\necho BAD\nsleep 30\n")
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"name": "Bad", "logPattern": "BAD",
                                  "faultOnMatch": True}]))
    a = agent(hpr, tmp_path, ["--pre-train-script", pre,
                              "--log-monitoring-config", rules])
    st = a.wait_status("faulted")
    assert st["reason"] == "LogFault_Bad"
    code, _, _ = a.post("/stop")
    assert code == 200

    def twice():
        return runs.exists() and len(runs.read_text().split()) >= 2
    deadline_poll(twice, 20, what="pre-train run again")
    st = a.status()
    assert st["status"] in ("init", "faulted")
    assert st["transitions"]["INIT"] > st["transitions"]["STOPPING"]
    assert a.shutdown().rc == 0


def test_stages_pre_train_then_barrier_then_post_train(hpr, tmp_path):
    hooks = tmp_path / "hooks.log"
    pre = write_exec(tmp_path / "pre.sh",
                     f"#!/bin/sh\necho pre $GROUP_RANK $MASTER_PORT >> {hooks}\n")
    post = write_exec(tmp_path / "post.sh",
                      f"#!/bin/sh\necho post $GROUP_RANK >> {hooks}\n")
    a = agent(hpr, tmp_path, ["--pre-train-script", pre,
                              "--post-train-script", post])
    a.wait_status("ready")
    # Pre-train ran at once, with the placeholder rendezvous.
    assert hooks.read_text() == "pre -1 -1\n"
    released(a, {"rank": 0, "nnodes": 1})
    for lr in range(2):
        command(a, lr, "exit 0")
    st = a.wait_status("completed")
    assert hooks.read_text() == "pre -1 -1\npost 0\n"
    assert list(st["transitions"]) == ["INIT", "READY", "RUNNING",
                                       "COMPLETED"]
    assert a.shutdown().rc == 0


def test_spare_flip_restarts_the_processes(hpr, tmp_path):
    a = agent(hpr, tmp_path)
    released(a, {"spare": False})
    first = pids(a)
    code, _, body = a.post("/update", {
        "rank": 0, "nnodes": 1, "faultCount": 0, "master_addr": "10.0.0.1",
        "master_port": 29500, "spare": True})
    assert code == 200
    wait_new_processes(a, first)
    st = a.wait_status("ready")
    assert st["spare"] == "True"
    assert a.shutdown().rc == 0


def test_node_fault_faults_and_keeps_the_node_down(hpr, tmp_path):
    """A kernel-log fault while training: FAULTED with it; /stop restarts
    nothing on the condemned node, which says FAULTED again at once."""
    from test_node_health import NEURON, XID, XID79, Fifo, record
    fifo = Fifo(tmp_path / "kmsg")
    a = agent(hpr, tmp_path, ["--node-problem-config", f"{NEURON},{XID}",
                              "--kmsg", fifo.path])
    released(a)
    first = pids(a)
    fifo.write(record(XID79, seq=1))
    st = a.wait_status("faulted")
    assert st["reason"] == "NodeFault_Xid79FallenOffTheBus"
    assert "hardware fault on this node" in st["message"]
    a.post("/stop")

    def down_again():
        st = a.status()
        return st if (st["status"] == "faulted"
                      and st["transitions"]["FAULTED"]
                      > st["transitions"]["STOPPING"]) else None
    st = deadline_poll(down_again, 20, what="FAULTED after the full stop")
    assert st["reason"] == "NodeFault_Xid79FallenOffTheBus"
    assert not any(pid_alive(p) for p in first)
    assert latest_pids(a) == first, "a process started on a faulted node"
    assert a.shutdown().rc == 0


# What a placeholder rank looked like in the agent's sentences: "node rank
# -1", "(rank -1)", "node -1 of 1", "master :-1", "rank      : -2".
PLACEHOLDER = re.compile(r"rank[ :]*-\d|node -\d|ranks -\d|:-1\b|rank -\d")


def no_placeholder(text):
    found = [m.group(0) + " in: " + text[max(0, m.start() - 80):m.end() + 40]
             for m in PLACEHOLDER.finditer(text)]
    assert not found, "\n".join(found)


def test_crash_before_start_prints_no_placeholder_rank(hpr, tmp_path):
    """Before /start the processes have no global rank, the node no node
    rank and no master: the start line, the FAULTED message, the failure
    summary and the silence line say so instead of printing -1."""
    a = agent(hpr, tmp_path, env={"IPRW_EXIT_AT_BARRIER": "1"})
    st = a.wait_status("faulted")
    assert st["reason"] == "WorkerCrash"
    msg = st["message"]
    assert "(node rank not known yet)" in msg, msg
    assert "\nLocal Rank 1 exited with code 3" in msg, msg
    no_placeholder(msg)

    def summary():
        err = a.proc.console_err().decode()
        return err if "Root Cause" in err and "who went silent" in err \
            else None
    err = deadline_poll(summary, 20, what="the failure summary")
    assert ("attempt 0: 2 workers, 1 node (node rank and master not known "
            "yet), world size 2, run id") in err
    assert "rank      : unknown (local_rank: 1)" in err
    assert re.search(r"who went silent: .*local rank", err), err
    no_placeholder(err)
    assert a.shutdown().rc != 0


def test_crash_after_start_names_the_ranks_start_gave(hpr, tmp_path):
    """After /start the same processes have the ranks job_start gave
    them, and the agent's texts name those."""
    a = agent(hpr, tmp_path)
    released(a, {"rank": 1, "nnodes": 2, "master_addr": "10.0.0.5",
                 "master_port": 29511})
    command(a, 1, "exit 3")
    st = a.wait_status("faulted")
    msg = st["message"]
    assert msg.startswith("train failed on node rank 1 ("), msg
    assert "\nLocal Rank 1 (rank 3) exited with code 3" in msg, msg
    err = a.proc.console_err().decode()
    assert ("job_start sent to local ranks 0-1 (node rank 1, ranks 2-3, "
            "master 10.0.0.5:29511") in err
    no_placeholder(err)
    assert a.shutdown().rc != 0


def test_stacks_report_before_and_after_start(hpr, tmp_path):
    """A stacks report of processes waiting for /start has no global
    ranks to give (null, and the log names local ranks); after /start it
    has the ranks job_start gave."""
    a = agent(hpr, tmp_path)
    a.wait_status("ready")

    def report():
        def taken():
            code, _, body = a.post("/debug/stacks")
            assert code in (202, 429), body
            return json.loads(body)["report"] if code == 202 else None
        path = deadline_poll(taken, 30, interval=0.1, what="a report")
        deadline_poll(lambda: os.path.exists(path), 30, what=path)
        with open(path) as f:
            return json.load(f)
    before = report()
    assert sorted(r["local_rank"] for r in before["ranks"]) == [0, 1]
    assert all(r["rank"] is None for r in before["ranks"]), before["ranks"]
    assert "who went silent" in a.proc.console_err().decode()
    released(a, {"rank": 1, "nnodes": 2})
    after = report()
    assert sorted(r["rank"] for r in after["ranks"]) == [2, 3]
    err = a.proc.console_err().decode()
    assert "hang report: local rank 0 (pid" in err
    assert "hang report: rank 2 (local 0, pid" in err
    no_placeholder(err)
    assert a.shutdown().rc == 0


# Numbers as the operator and the workers wrote them: cJSON's double would
# print 1.0 as 1, -0.0 as 0 and a 20-digit integer as 1.2345678901234567e+19;
# the reference's Python json keeps each (1e400 reads back as inf either way).
EXACT = ('{"a":1.0,"b":-0.0,"c":12345678901234567890,'
         '"d":[1e400,2.50,1E-7,-123456789012345678901234567890],'
         '"e":{"f":[0.1,{"g":1.0,"h":"1.0 -0.0"}],"a":-1}}')


def test_worker_data_numbers_pass_through_as_written(hpr, tmp_path):
    a = agent(hpr, tmp_path)
    a.wait_status("ready")
    head = ('{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"127.0.0.1",'
            '"master_port":29555,"worker_data":')
    json_type = {"Content-Type": "application/json"}
    # Numbers Python's json refuses (cJSON takes them) are a 422.
    for bad in ("01", "1.", "-01.5", "1.e5", "1e"):
        code, _, body = a.post("/start", raw=(head + "[" + bad + "]}")
                               .encode(), headers=json_type)
        assert code == 422, (bad, body)
        err = json.loads(body)["detail"][0]
        assert err["type"] == "json_invalid", (bad, err)
        assert "invalid JSON" in err["ctx"]["error"], (bad, err)
    code, _, body = a.post("/start", raw=(head + EXACT + "}").encode(),
                           headers=json_type)
    assert code == 200, body
    for lr in range(2):
        ev = wait_event(a, lr, "job_start")
        assert '"aggregate_worker_data":' + EXACT + "}" in ev["raw"], ev["raw"]
        got = ev["msg"]["aggregate_worker_data"]["aggregate_worker_data"]
        assert got["a"] == 1.0 and isinstance(got["a"], float)
        assert str(got["b"]) == "-0.0"
        assert got["c"] == 12345678901234567890
    a.wait_status("running")

    # A worker's job_data comes back in /status as the worker wrote it.
    command(a, 0, "data " + EXACT)

    def shown():
        code, _, body = a.request("GET", "/status")
        assert code == 200
        return body if b'"worker_data"' in body else None
    body = deadline_poll(shown, 20, interval=0.02, what="worker_data")
    assert ('"data":' + EXACT + "}").encode() in body, body
    assert a.shutdown().rc == 0


def test_log_hang_names_who_went_silent_and_reports(hpr, tmp_path):
    """A rule's verdict in in-process mode: /status names the silent
    ranks as plain operator mode does, and the hang report is written
    for the attempt that faulted."""
    rule = {"name": "Progress", "logPattern": ".*training step (\\d+).*",
            "expectedStartCutOffInSeconds": 2,
            "expectedRecurringFrequencyInSeconds": 1}
    a = agent(hpr, tmp_path)
    released(a, {"log_monitoring_configuration": [rule]})
    st = a.wait_status("faulted", timeout=30)
    assert st["reason"] == "LogHang_Progress"
    assert re.search(r"; (rank \d|both ranks 0-1) silent since ",
                     st["message"]), st["message"]
    report = deadline_poll(lambda: list(
        (a.dir / "logs").glob("none_*/attempt_0/hang-report.json")), 15,
        what="hang-report.json")
    assert "LogHang_Progress" in report[0].read_text()
    assert a.shutdown().rc == 0


def test_post_train_runs_at_the_last_starts_fault_count(hpr, tmp_path):
    """In-process rounds keep the processes, not the count: the
    post-train hook, a new process, runs at the last /start's faultCount
    and logs into that attempt's directory, as the reference's would."""
    hooks = tmp_path / "hooks.log"
    post = write_exec(tmp_path / "post.sh",
                      "#!/bin/sh\necho post $TORCHELASTIC_RESTART_COUNT "
                      f"$JOB_RESTART_COUNT >> {hooks}\n")
    a = agent(hpr, tmp_path, ["--post-train-script", post])
    released(a, {"fault_count": 0})
    for count in (1, 3):
        command(a, 1, "fault NaNLoss in_process_restart loss is nan")
        a.wait_status("faulted")
        a.post("/stop")
        a.wait_status("ready")
        a.start(fault_count=count)
        wait_event(a, 0, "job_start", count=1 + (count > 1) + 1)
        a.wait_status("running")
    for lr in range(2):
        command(a, lr, "exit 0")
    a.wait_status("completed")
    assert hooks.read_text() == "post 3 3\n"
    assert [p.name for p in (a.dir / "logs").glob("post_train_*/*")] \
        == ["attempt_3"]
    assert a.shutdown().rc == 0
