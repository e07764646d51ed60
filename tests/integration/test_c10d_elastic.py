# SPDX-License-Identifier: Apache-2.0
"""--rdzv-backend c10d with --nnodes MIN:MAX: a round closes when MAX
agents joined, or MIN and then last_call_timeout passed; an agent that
comes to a running job is admitted at the next round and makes the running
nodes re-rendezvous, which --max-restarts does not count. Bad input ends
with a message naming it."""

import re
import signal

import pytest

from conftest import deadline_poll, have_torch, helper
from test_c10d import free_port, wait_all

ROUND_WORKER = helper("round_worker.py")

needs_torch = pytest.mark.skipif(not have_torch(),
                                 reason="/usr/bin/python3 has no torch")


def agent(hpr, tmp_path, i, endpoint, out, nnodes, env, extra=()):
    return hpr.start(
        ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
         "--rdzv-endpoint", endpoint, "--rdzv-id", "el5",
         "--nnodes", nnodes, "--nproc-per-node", "1", "--tee", "3",
         "--rdzv-conf", "last_call_timeout=1", *extra, ROUND_WORKER, out],
        env={"NO_TORCH": "1", **env, "DUMP_TAG": f"agent{i}"},
        log_dir=False)


def records(out):
    found = {}
    for p in out.iterdir():
        tag, node, local, count = p.name.split(".")
        pid, rank, world = p.read_text().split()
        found[(tag, int(count))] = (int(node), int(rank), int(world))
    return found


def test_min_nodes_close_the_round_after_the_last_call(hpr, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [agent(hpr, tmp_path, i, endpoint, out, "2:4",
                   {"FAIL_UNTIL": "0"})
             for i in range(2)]
    results = wait_all(procs, 120)
    for r in results:
        assert r.rc == 0, r.describe()
        assert re.search(r"round 0 closed with 2 nodes \(--nnodes 2:4\)",
                         r.err), r.describe()
    found = records(out)
    assert sorted(v[1] for v in found.values()) == [0, 1]
    assert {v[2] for v in found.values()} == {2}


def test_a_late_joiner_is_admitted_at_the_next_round(hpr, tmp_path):
    """Two agents run round 0 (their workers wait); a third comes, the two
    stop their workers and the three run round 1 together; with
    --max-restarts 0 this proves a join is not counted as a failure."""
    out = tmp_path / "out"
    out.mkdir()
    endpoint = f"127.0.0.1:{free_port()}"
    env = {"FAIL_UNTIL": "1"}  # round 0's workers wait, round 1's end
    first = [agent(hpr, tmp_path, i, endpoint, out, "2:3", env)
             for i in range(2)]
    deadline_poll(lambda: len(list(out.iterdir())) >= 2, timeout=120,
                  what="round 0's workers")
    late = agent(hpr, tmp_path, 2, endpoint, out, "2:3", env)
    results = wait_all([*first, late], 180)
    for r in results:
        assert r.rc == 0, r.describe()
    found = records(out)
    for i in range(2):
        assert (f"agent{i}", 0) in found and (f"agent{i}", 1) in found, found
        assert ("a node joined the job; re-rendezvous with every node (not "
                "a failure: 0 of 0 restarts used)") in results[i].err, \
            results[i].describe()
    assert ("agent2", 0) not in found and ("agent2", 1) in found, found
    assert sorted(found[(f"agent{i}", 1)][1] for i in range(3)) == [0, 1, 2]
    assert {found[(f"agent{i}", 1)][2] for i in range(3)} == {3}
    assert "round 0 is running without this node" in results[2].err


def test_min_above_max_is_refused(hpr):
    r = hpr.run(["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1",
                 "--nnodes", "3:2", ROUND_WORKER, "/nonexistent"], timeout=30)
    assert r.rc == 2, r.describe()
    assert "invalid value '3:2' for --nnodes: MIN 3 is above MAX 2" in r.err


def test_min_max_needs_c10d(hpr):
    r = hpr.run(["--rdzv-backend", "static", "--nnodes", "1:2",
                 ROUND_WORKER, "/nonexistent"], timeout=30)
    assert r.rc == 2, r.describe()
    assert ("--nnodes 1:2: an elastic node count needs --rdzv-backend c10d"
            in r.err), r.describe()


def test_fewer_than_min_within_join_timeout(hpr):
    port = free_port()
    r = hpr.run(["--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--rdzv-id", "few", "--rdzv-conf",
                 "join_timeout=1,last_call_timeout=0.1", "--nnodes", "2:3",
                 "--no-python", "/bin/true"], timeout=60)
    assert r.rc != 0, r.describe()
    assert (f"rendezvous 'few' at 127.0.0.1:{port}: fewer than 2 nodes "
            "(--nnodes MIN) joined round 0 within join_timeout (1 s)") \
        in r.err, r.describe()


def test_a_stopped_agent_is_left_out_of_the_next_round(hpr, tmp_path):
    """Three agents (--nnodes 2:3); the third is SIGSTOPped, then a worker
    of node 0 fails: the next round closes after the last call with the two
    agents that came (still MIN), and their job ends well. The stopped
    agent, continued, finds its round over and the job's store gone: it
    exits 122 and never joins the round it was left out of."""
    out = tmp_path / "out"
    out.mkdir()
    gate = tmp_path / "go"
    endpoint = f"127.0.0.1:{free_port()}"
    env = {"FAIL_RANK": "0", "FAIL_UNTIL": "1", "FAIL_GATE": str(gate)}
    extra = ["--max-restarts", "1", "--rdzv-conf",
             "last_call_timeout=1,join_timeout=5"]
    procs = []
    for i in range(3):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", endpoint, "--rdzv-id", "el5",
             "--nnodes", "2:3", "--nproc-per-node", "1", *extra,
             ROUND_WORKER, out],
            env={"NO_TORCH": "1", **env, "DUMP_TAG": f"agent{i}"},
            log_dir=False))
        if i == 0:
            # The first hosts the store; the one stopped must not.
            deadline_poll(lambda: b"hosting the store" in procs[0].err_path
                          .read_bytes() or procs[0].poll() is not None,
                          timeout=60, what="the host")
    deadline_poll(lambda: len([p for p in out.iterdir()
                               if p.name.endswith(".0")]) >= 3,
                  timeout=120, what="round 0's three workers")
    found = records(out)
    stop = [i for i in (1, 2) if found[(f"agent{i}", 0)][0] != 0][0]
    procs[stop].signal(signal.SIGSTOP)
    gate.write_text("")
    running = [p for i, p in enumerate(procs) if i != stop]
    results = wait_all(running, 120)
    procs[stop].signal(signal.SIGCONT)
    stopped = procs[stop].wait(120)
    for r in results:
        assert r.rc == 0, r.describe()
        assert "round 1 closed with 2 nodes (--nnodes 2:3)" in r.err, \
            r.describe()
    # Continued, it reads the round's end; the store went with the job.
    assert stopped.rc == 122, stopped.describe()
    assert "round 1 closed" not in stopped.err, stopped.describe()


@needs_torch
def test_scale_down_after_an_agent_is_killed(hpr, tmp_path):
    """Three agents (--nnodes 2:3) whose workers all-reduce in a loop; one
    agent (not the store's host) is SIGKILLed, its worker dies with it, the
    others' collectives fail, and the next round closes after the last call
    with the two left: a gloo job of 2 ranks runs to its end."""
    out = tmp_path / "out"
    out.mkdir()
    endpoint = f"127.0.0.1:{free_port()}"
    env = {"LOOP_UNTIL": "1", "FAIL_UNTIL": "0"}
    procs = []
    for i in range(3):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", endpoint, "--rdzv-id", "el6",
             "--nnodes", "2:3", "--nproc-per-node", "1", "--tee", "3",
             "--max-restarts", "1", "--rdzv-conf", "last_call_timeout=1",
             ROUND_WORKER, out],
            env={**env, "DUMP_TAG": f"agent{i}"}, log_dir=False))
        if i == 0:
            deadline_poll(lambda: b"hosting the store" in procs[0].err_path
                          .read_bytes() or procs[0].poll() is not None,
                          timeout=60, what="the host")
    deadline_poll(lambda: sum(b"round 0 rank" in p.out_path.read_bytes()
                              for p in procs) == 3,
                  timeout=90, what="round 0's all-reduce on every node")
    procs[2].kill()
    results = wait_all(procs[:2], 240)
    for r in results:
        assert r.rc == 0, r.describe()
        assert "round 1 closed with 2 nodes (--nnodes 2:3)" in r.err, \
            r.describe()
        assert re.search(r"round 1 rank \d: sum 3 of 3", r.out), r.describe()
