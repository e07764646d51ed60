# SPDX-License-Identifier: Apache-2.0
"""Coordinated restarts with --rdzv-backend c10d: a worker failure on one
node ends the round for every node (pushed through the agents' store), so
every node's workers stop and the next round starts everywhere, with one
job-wide restart count (TORCHELASTIC_RESTART_COUNT the same on every
node); a gloo all-reduce runs across the restart. With no restart left the
failing node exits with its worker's status and every other with 122."""

import re
import signal

import pytest

from conftest import have_torch, helper
from test_c10d import free_port, wait_all

ROUND_WORKER = helper("round_worker.py")

needs_torch = pytest.mark.skipif(not have_torch(),
                                 reason="/usr/bin/python3 has no torch")


def start(hpr, tmp_path, n, nproc, out, env, extra=()):
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for i in range(n):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", endpoint, "--rdzv-id", "job9",
             "--nnodes", str(n), "--nproc-per-node", str(nproc), "--tee", "3",
             *extra, ROUND_WORKER, out],
            env={**env, "DUMP_TAG": f"agent{i}"}, log_dir=False))
    return procs


def records(out):
    """{(agent, node, local, count): (pid, rank, world)} from the files."""
    found = {}
    for p in out.iterdir():
        tag, node, local, count = p.name.split(".")
        pid, rank, world = p.read_text().split()
        found[(tag, int(node), int(local), int(count))] = (
            int(pid), int(rank), int(world))
    return found


def last_node(result):
    nodes = re.findall(r"rendezvous 'job9' at \S+: joined as node (\d+)",
                       result.err)
    assert nodes, result.describe()
    return int(nodes[-1])


@needs_torch
def test_a_worker_failure_restarts_every_node(hpr, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # Global rank 2 is node 1's first worker; it fails in round 0 after
    # the all-reduce, while the others wait as in a collective.
    procs = start(hpr, tmp_path, 2, 2, out,
                  {"FAIL_RANK": "2", "FAIL_UNTIL": "1"},
                  extra=["--max-restarts", "2"])
    results = wait_all(procs, 240)
    for r in results:
        assert r.rc == 0, r.describe()
    found = records(out)
    # Every worker of every node ran in round 0 and again in round 1, as a
    # new process.
    for i in range(2):
        tag = f"agent{i}"
        for count in (0, 1):
            mine = [k for k in found if k[0] == tag and k[3] == count]
            assert len(mine) == 2, (found, results[i].describe())
        pids0 = {found[k][0] for k in found if k[0] == tag and k[3] == 0}
        pids1 = {found[k][0] for k in found if k[0] == tag and k[3] == 1}
        assert not pids0 & pids1, found
    # One world of 4 ranks per round.
    for count in (0, 1):
        ranks = sorted(v[1] for k, v in found.items() if k[3] == count)
        assert ranks == [0, 1, 2, 3], found
    restarted = [r for r in results
                 if "another node's workers failed; restarting the worker "
                    "group with every node (restart 1 of 2)" in r.err]
    failed = [r for r in results
              if "failed; restarting the worker group (restart 1 of 2)"
              in r.err]
    assert len(restarted) == 1 and len(failed) == 1, \
        [r.describe() for r in results]
    # The all-reduce ran in both rounds, through the agents' store.
    for r in results:
        text = r.stdout.decode()
        for rnd in (0, 1):
            assert re.search(rf"round {rnd} rank \d: sum 10 of 10", text), \
                r.describe()


def test_restarts_exhausted_every_agent_exits(hpr, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    procs = start(hpr, tmp_path, 3, 1, out,
                  {"NO_TORCH": "1", "FAIL_RANK": "1", "FAIL_CODE": "7"},
                  extra=["--max-restarts", "1"])
    results = wait_all(procs, 180)
    codes = sorted(r.rc for r in results)
    assert codes == [7, 122, 122], [r.describe() for r in results]
    for r in results:
        if r.rc == 7:
            assert last_node(r) == 1, r.describe()
            assert "no restarts left (--max-restarts 1)" in r.err
        else:
            assert ("another node left the job; exit status 122" in r.err
                    or "another node left the job; no next round" in r.err), \
                r.describe()
    found = records(out)
    # Every node ran round 0 and round 1 (one job-wide restart), never 2.
    for i in range(3):
        counts = sorted(k[3] for k in found if k[0] == f"agent{i}")
        assert counts == [0, 1], found


def start_static(hpr, tmp_path, n, nproc, out, env, extra=()):
    """n agents of a static job whose restarts are coordinated through a
    store on node 0's agent (--rdzv-conf coordinate=PORT)."""
    master, store = free_port(), free_port()
    procs = []
    for i in range(n):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "static",
             "--rdzv-id", "job9", "--rdzv-conf", f"coordinate={store}",
             "--master-addr", "127.0.0.1", "--master-port", str(master),
             "--nnodes", str(n), "--node-rank", str(i),
             "--nproc-per-node", str(nproc), "--tee", "3", *extra,
             ROUND_WORKER, out],
            env={**env, "DUMP_TAG": f"agent{i}"}, log_dir=False))
    return procs


@needs_torch
def test_static_restarts_every_node_through_node_0s_store(hpr, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    procs = start_static(hpr, tmp_path, 2, 1, out,
                         {"FAIL_RANK": "1", "FAIL_UNTIL": "1"},
                         extra=["--max-restarts", "1"])
    results = wait_all(procs, 240)
    for r in results:
        assert r.rc == 0, r.describe()
    assert "hosting the restart store" in results[0].err, results[0].describe()
    found = records(out)
    for i in range(2):
        counts = sorted(k[3] for k in found if k[0] == f"agent{i}")
        assert counts == [0, 1], found
        # The static node rank is kept across the restart.
        assert {k[1] for k in found if k[0] == f"agent{i}"} == {i}, found
    for r in results:
        for rnd in (0, 1):
            assert re.search(rf"round {rnd} rank \d: sum 3 of 3", r.out), \
                r.describe()
    assert ("another node's workers failed; restarting the worker group "
            "with every node (restart 1 of 1)") in results[0].err


def test_static_restarts_exhausted_every_agent_exits(hpr, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    procs = start_static(hpr, tmp_path, 3, 1, out,
                         {"NO_TORCH": "1", "FAIL_RANK": "2", "FAIL_CODE": "5"},
                         extra=["--max-restarts", "1"])
    results = wait_all(procs, 180)
    assert [r.rc for r in results] == [122, 122, 5], \
        [r.describe() for r in results]
    found = records(out)
    for i in range(3):
        counts = sorted(k[3] for k in found if k[0] == f"agent{i}")
        assert counts == [0, 1], found


def test_coordinate_bad_value(hpr):
    r = hpr.run(["--rdzv-backend", "static", "--nnodes", "2",
                 "--node-rank", "0", "--rdzv-conf", "coordinate=maybe",
                 ROUND_WORKER, "/nonexistent"], timeout=30)
    assert r.rc == 2, r.describe()
    assert ("invalid value 'maybe' for --rdzv-conf coordinate: expected on, "
            "off or a port (1 to 65535)") in r.err, r.describe()


def wait_started(out, tags, count=0, timeout=120):
    """Until every agent's workers of round count have written their file."""
    from conftest import deadline_poll
    deadline_poll(lambda: all(any(p.name.startswith(f"{t}.") and
                                  p.name.endswith(f".{count}")
                                  for p in out.iterdir()) for t in tags),
                  timeout=timeout, what="every agent's workers")


def test_an_agent_stopped_by_a_signal_ends_every_node(hpr, tmp_path):
    """SIGTERM to one agent: it stops its workers and exits 143; the other
    learns it at the store, stops its workers and exits 122 rather than
    waiting in a collective."""
    out = tmp_path / "out"
    out.mkdir()
    procs = start(hpr, tmp_path, 2, 1, out,
                  {"NO_TORCH": "1", "FAIL_UNTIL": "99"},
                  extra=["--max-restarts", "3"])
    wait_started(out, ["agent0", "agent1"])
    procs[1].signal(signal.SIGTERM)
    results = wait_all(procs, 120)
    assert [r.rc for r in results] == [122, 143], \
        [r.describe() for r in results]
    assert "another node left the job: stopping the workers; the job ends" \
        in results[0].err, results[0].describe()


def test_the_store_hosts_death_ends_every_node(hpr, tmp_path):
    """SIGKILL to the agent that hosts the store (the store dies with it):
    the other agent's watch connection closes, and it stops its workers
    and exits 122 at once (torchrun's job fails too, after its timeouts)."""
    out = tmp_path / "out"
    out.mkdir()
    procs = start(hpr, tmp_path, 2, 1, out,
                  {"NO_TORCH": "1", "FAIL_UNTIL": "99"},
                  extra=["--max-restarts", "3"])
    wait_started(out, ["agent0", "agent1"])
    host = [p for p in procs
            if b"hosting the store" in p.err_path.read_bytes()]
    assert len(host) == 1
    other = [p for p in procs if p is not host[0]][0]
    host[0].kill()
    r = other.wait(120)
    assert r.rc == 122, r.describe()
    assert "the rendezvous store went away: stopping the workers" in r.err, \
        r.describe()


def test_two_jobs_on_one_endpoint_are_never_mixed(hpr, tmp_path):
    """Two jobs (--rdzv-id a and b) of two agents each on one endpoint:
    each job's round has its own two nodes, and a failure in job a
    restarts job a only."""
    out = tmp_path / "out"
    out.mkdir()
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for job, env in (("a", {"FAIL_RANK": "1", "FAIL_UNTIL": "1"}),
                     ("b", {"FAIL_UNTIL": "0"})):
        (out / job).mkdir()
        for i in range(2):
            procs.append(hpr.start(
                ["--log-dir", tmp_path / f"{job}{i}", "--rdzv-backend",
                 "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", job,
                 "--nnodes", "2", "--nproc-per-node", "1",
                 "--max-restarts", "1", ROUND_WORKER, out / job],
                env={"NO_TORCH": "1", **env, "DUMP_TAG": f"{job}{i}"},
                log_dir=False))
    results = wait_all(procs, 180)
    for r in results:
        assert r.rc == 0, r.describe()
    found = {**records(out / "a"), **records(out / "b")}
    for job, rounds in (("a", [0, 1]), ("b", [0])):
        for count in rounds:
            mine = [v for k, v in found.items()
                    if k[0].startswith(job) and k[3] == count]
            assert sorted(v[1] for v in mine) == [0, 1], found
            assert {v[2] for v in mine} == {2}, found
        assert not [k for k in found if k[0].startswith(job)
                    and k[3] not in rounds], found
