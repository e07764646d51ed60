# SPDX-License-Identifier: Apache-2.0
"""In-process restart end to end with real PyTorch (gloo): hyperpodrun
--inprocess-restart agents driven by pytest as the HyperPod operator.

The main case is two agents as two nodes on loopback, 2 ranks each
(helpers/ipr_train.py). Training all-reduces known tensors; global rank 1
raises before step 3 and reports job_fault; its node goes FAULTED with the
worker's reason; the operator /stops both nodes, every rank returns to the
barrier (node 1's ranks through the agent's job_fault broadcast), and the
/start with faultCount 1 resumes training in the same processes from the
step in memory, with JOB_RESTART_COUNT 1, to the right sums.

The variants end in a full stop, new processes and a new barrier: a rank
that closes its client, a rank that misses the barrier's
--inprocess-timeout, and a rank that asks for a process-level restart.
"""

import re

import pytest

from conftest import SOURCE_ROOT, deadline_poll, have_torch, helper, pid_alive
from test_operator import Agent, free_port

if not have_torch():
    pytest.skip("/usr/bin/python3 has no torch.distributed",
                allow_module_level=True)

TRAIN = helper("ipr_train.py")
STEPS = 6
PREFIX_RE = re.compile(rb"^\[default(\d+)\]:(.*)$")
IP_VERSION = "2026-01-01T00:00:00Z"


def ipr_agent(hpr, tmp_path, name, env=None, args=()):
    full_env = {"PYTHONPATH": SOURCE_ROOT / "python", "IPR_STEPS": str(STEPS)}
    full_env.update(env or {})
    return Agent(hpr, tmp_path, ["--inprocess-restart", *args], env=full_env,
                 name=name, script=TRAIN)


def rank_ips(nnodes):
    return [{"rank": n, "ip": "127.0.0.1"} for n in range(nnodes)]


def start(agent, node, nnodes, fault_count, port):
    agent.start(rank=node, nnodes=nnodes, fault_count=fault_count,
                master_addr="127.0.0.1", master_port=port,
                ipVersion=IP_VERSION, rankIps=rank_ips(nnodes))


def lines(agent):
    """{local rank: [line, ...]} from the agent's console so far."""
    out = {}
    for raw in agent.proc.console_out().splitlines():
        m = PREFIX_RE.match(raw)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2).decode())
    return out


def pids_of(agent, word):
    """{local rank: [pid, ...]} of the lines '<word> pid N ...'."""
    pat = re.compile(rf"^{word} pid (\d+)")
    return {local: [int(m.group(1)) for m in map(pat.match, ls) if m]
            for local, ls in lines(agent).items()}


def wait_line(agent, local, text, timeout=180, count=1):
    def seen():
        if agent.proc.poll() is not None:
            pytest.fail("hyperpodrun exited\n" + agent.proc.describe())
        return sum(text in l for l in lines(agent).get(local, [])) >= count
    deadline_poll(seen, timeout, interval=0.05,
                  what=f"local rank {local} to print {text!r} ({count}x)")


def check_steps(ls, world, first, last):
    """Each step from first to last printed once, in order, with the
    all-reduce's sum: sum over ranks of (rank + 1) * step."""
    steps = [l for l in ls if l.startswith("step ")]
    want = [f"step {k} sum {k * world * (world + 1) // 2}"
            for k in range(first, last + 1)]
    assert steps == want, ls


# ---- Two nodes: a fault, the pause, the same processes resume -------------------

def test_two_nodes_recover_in_process(hpr, tmp_path):
    agents = [ipr_agent(hpr, tmp_path, f"node{n}", {"IPR_FAULT": "1:3"})
              for n in range(2)]
    # Pre-train is none, so each agent starts its workers at once and is
    # READY, without any /start, when both local ranks are at the barrier.
    for a in agents:
        st = a.wait_status("ready", timeout=120)
        assert list(st["transitions"]) == ["INIT", "READY"], st
        assert st["restartMode"] == "in_process_restart", st
        assert st["rank_labels"] == {}, st
    for a in agents:
        for local in (0, 1):    # the console is written in batches
            wait_line(a, local, "barrier pid")
    first_pids = [pids_of(a, "barrier") for a in agents]
    for p in first_pids:
        assert sorted(p) == [0, 1] and all(len(v) == 1 for v in p.values()), p

    port0 = free_port()
    for n, a in enumerate(agents):
        start(a, n, 2, 0, port0)
    # Global rank 1 (node 0, local 1) raises before step 3 and reports it.
    st = agents[0].wait_status("faulted", timeout=120)
    assert st["reason"] == "TrainingStepFailed", st
    assert st["message"].startswith("rank 1 fails step 3 (pid "), st
    # The failed rank's data and the ranks' labels, as the reference
    # encodes them.
    assert st["worker_data"] == [{"rank": 1, "group_rank": 0, "local_rank": 1,
                                  "failed": True, "data": {"step": 2}}], st
    assert st["rank_labels"] == {"TP": "2"}, st
    # Every other rank saw its collective fail and waits for the broadcast;
    # node 1 has nothing to report.
    assert agents[1].status()["status"] == "running"
    wait_line(agents[0], 1, "barrier pid", count=2)

    # The operator's in-process restart: /stop everywhere, then every node
    # is READY once all its ranks are back at the barrier.
    for a in agents:
        code, _, body = a.post("/stop")
        assert (code, body) == (200, b"")
    for a in agents:
        st = a.wait_status("ready", timeout=60)
        assert "STOPPING" in st["transitions"], st
    for n, a in enumerate(agents):
        for local in (0, 1):
            wait_line(a, local, "barrier pid", count=2)
            if (n, local) != (0, 1):
                # Told by the agent's job_fault broadcast, carrying the
                # faultCount of the round that failed.
                assert "remote fault {'restart_count': 0}" in lines(a)[local]
    alive = [p for per in first_pids for v in per.values() for p in v]
    assert all(pid_alive(p) for p in alive)

    port1 = free_port()
    for n, a in enumerate(agents):
        start(a, n, 2, 1, port1)
    for a in agents:
        st = a.wait_status("completed", timeout=120)
        # Passing the barrier cleared the failed rank's data.
        assert "worker_data" not in st, st
    for n, a in enumerate(agents):
        r = a.shutdown()
        assert r.rc == 0, r.describe()
        by_rank = lines(a)
        for local in (0, 1):
            rank = 2 * n + local
            ls = by_rank[local]
            pid = first_pids[n][local][0]
            # The same process all along: one "up", every line with its pid.
            assert [l for l in ls if l.startswith("up pid")] == [f"up pid {pid}"]
            training = [l for l in ls if l.startswith("training pid")]
            assert training == [
                f"training pid {pid} rank {rank}/4 restart 0 master "
                f"127.0.0.1:{port0} from step 0",
                f"training pid {pid} rank {rank}/4 restart 1 master "
                f"127.0.0.1:{port1} from step 2"], ls
            assert pids_of(a, "barrier")[local] == [pid, pid]
            check_steps(ls, 4, 1, STEPS)
            assert ls[-1] == f"done pid {pid} rank {rank} steps {STEPS}"
        # No new attempt: the processes were never restarted.
        attempts = sorted(p.name for p in (a.dir / "logs").glob("*/attempt_*"))
        assert attempts == ["attempt_0"], attempts


# ---- Full stops: new processes, a new barrier ---------------------------------

def full_stop_then_train(a, old_pids, port, why):
    """After a full stop for the reason why (as the agent logs it): the
    agent is READY again with new processes at the barrier; a /start with
    faultCount 1 trains them from step 0. Returns the READY /status and
    the agent's result."""
    st = a.wait_status("ready", timeout=120)
    assert "INIT" in st["transitions"], st

    def new_at_barrier():
        # The console is written in batches: the lines may follow "ready".
        new = pids_of(a, "barrier")
        if all(new.get(local) and new[local][-1] not in old_pids[local]
               for local in (0, 1)):
            return new
    new = deadline_poll(new_at_barrier, 120,
                        what="new processes at the barrier")
    assert not any(pid_alive(p) for v in old_pids.values() for p in v)
    start(a, 0, 1, 1, port)
    a.wait_status("completed", timeout=120)
    ls = lines(a)
    r = a.shutdown()
    assert r.rc == 0, r.describe()
    for local in (0, 1):
        tail = ls[local][ls[local].index(f"barrier pid {new[local][-1]} at step 0"):]
        check_steps(tail, 2, 1, STEPS)
        assert any(l.endswith(f"rank {local}/2 restart 1 master 127.0.0.1:{port} "
                              "from step 0") for l in tail), tail
    assert re.search(r"in-process restart: full stop \(agent \w+, [^)]*\): "
                     + re.escape(why), r.err), r.describe()
    return st, r


def all_pids(a):
    """{local rank: [pid]} of the processes started so far, once both
    local ranks' first "up" line is on the console."""
    for local in (0, 1):
        wait_line(a, local, "up pid")
    return pids_of(a, "up")


def test_dropped_client_is_a_full_stop(hpr, tmp_path):
    a = ipr_agent(hpr, tmp_path, "node0", {"IPR_DROP": "1:2"})
    a.wait_status("ready", timeout=120)
    old = all_pids(a)
    start(a, 0, 1, 0, free_port())
    wait_line(a, 1, "dropping the client at step 2")
    # Rank 0 waits in the collective for rank 1, which hangs without a
    # client. The operator stops the job; the pause finds a rank it can
    # no longer reach, so the agent stops every process and starts anew.
    code, _, _ = a.post("/stop")
    assert code == 200
    full_stop_then_train(a, old, free_port(),
                         "a local rank dropped its connection during the pause")


def test_barrier_timeout_is_a_full_stop(hpr, tmp_path):
    # Local rank 1's first process reaches the barrier 30 s late; the
    # agent waits 3.
    a = ipr_agent(hpr, tmp_path, "node0", {"IPR_LATE": "1:30"},
                  args=["--inprocess-timeout", "3"])
    old = all_pids(a)
    _, r = full_stop_then_train(
        a, old, free_port(),
        "--inprocess-timeout passed before every local rank reached the barrier")
    assert "waiting for local ranks 0-1 at the barrier (at most 3 s)" in r.err, \
        r.describe()


@pytest.mark.parametrize("mode", ["local_process_level_restart",
                                  "process_level_restart"])
def test_rank_asks_for_a_process_level_restart(hpr, tmp_path, mode):
    a = ipr_agent(hpr, tmp_path, "node0", {"IPR_FAULT": f"1:3:{mode}"})
    a.wait_status("ready", timeout=120)
    old = all_pids(a)
    start(a, 0, 1, 0, free_port())
    wait_line(a, 1, f"reporting {mode}")
    if mode == "process_level_restart":
        # The operator's to act: FAULTED, and /status says which restart
        # the rank asked for; the /stop that asks for it is a full stop.
        st = a.wait_status("faulted", timeout=60)
        assert st["restartMode"] == "process_level_restart", st
        assert st["reason"] == "TrainingStepFailed", st
        code, _, _ = a.post("/stop", {"restart_mode": "process_level_restart"})
        assert code == 200
    # local_process_level_restart: the agent restarts its own processes.
    st, _ = full_stop_then_train(a, old, free_port(),
                                 "a local process-level restart is due")
    assert "FAULTED" in st["transitions"], st
