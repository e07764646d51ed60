# SPDX-License-Identifier: Apache-2.0
"""The keep-alive of the rounds at a store (--rdzv-conf keep_alive_interval,
keep_alive_max_attempt): an agent that is stopped or cut off while its
round runs is dropped by the others, which restart without it (they go on
with the smaller world while it is still --nnodes MIN or more); an agent
that the store stops answering ends its workers and exits 122 at once. The
partition is real: two network namespaces joined by a veth pair whose link
is taken down, so that packets vanish and no connection is reset."""

import os
import re
import shutil
import signal
import subprocess

import pytest

from conftest import deadline_poll, helper
from test_c10d import free_port, wait_all

ROUND_WORKER = helper("round_worker.py")

# 0.2 s × 5: a node is dropped 1 s after its last beat.
KEEP_ALIVE = "keep_alive_interval=0.2,keep_alive_max_attempt=5"


def agent(hpr, tmp_path, i, endpoint, out, nnodes, conf, extra=(),
          wrapper=()):
    return hpr.start(
        ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
         "--rdzv-endpoint", endpoint, "--rdzv-id", "ka", "--nnodes", nnodes,
         "--nproc-per-node", "1", "--rdzv-conf", f"{KEEP_ALIVE},{conf}",
         *extra, ROUND_WORKER, out],
        # Round 0's workers wait to be stopped; round 1's end well.
        env={"NO_TORCH": "1", "FAIL_UNTIL": "1", "DUMP_TAG": f"agent{i}"},
        log_dir=False, wrapper=wrapper)


def start_agents(hpr, tmp_path, n, out, nnodes, conf, extra=()):
    """n agents, the first of which hosts the store; returns them once
    every worker of round 0 runs."""
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for i in range(n):
        procs.append(agent(hpr, tmp_path, i, endpoint, out, nnodes, conf,
                           extra))
        if i == 0:
            deadline_poll(lambda: b"hosting the store" in procs[0].err_path
                          .read_bytes() or procs[0].poll() is not None,
                          timeout=60, what="the host")
    deadline_poll(lambda: len([p for p in out.iterdir()
                               if p.name.endswith(".0")]) >= n,
                  timeout=120, what="round 0's workers")
    return procs


def stop_until_dropped(procs):
    """SIGSTOPs procs[1] until procs[0] has judged it lost, continues it,
    and returns both ends, which must be good: it came back in time."""
    procs[1].signal(signal.SIGSTOP)
    try:
        deadline_poll(lambda: b"sent no keep-alive" in
                      procs[0].err_path.read_bytes(),
                      timeout=60, what="the keep-alive's verdict")
    finally:
        procs[1].signal(signal.SIGCONT)
    results = wait_all(procs, 120)
    for r in results:
        assert r.rc == 0, r.describe()
    return results


def test_a_stopped_agent_is_dropped_and_the_others_go_on(hpr, tmp_path):
    """Three agents (--nnodes 2:3); one that does not host is SIGSTOPped
    while round 0 runs. The other two stop their workers a keep-alive
    window later, close round 1 with the two of them after the last call,
    and their job ends well; that restart counts, as a failure would."""
    out = tmp_path / "out"
    out.mkdir()
    procs = start_agents(hpr, tmp_path, 3, out, "2:3",
                         "last_call_timeout=1", ["--max-restarts", "1"])
    procs[2].signal(signal.SIGSTOP)
    try:
        results = wait_all(procs[:2], 120)
    finally:
        procs[2].signal(signal.SIGCONT)
    stopped = procs[2].wait(120)
    # The first to see it ends the round with "lost"; the other may see
    # that or the silence itself.
    saw = 0
    for r in results:
        assert r.rc == 0, r.describe()
        saw += bool(re.search(r"node \d sent no keep-alive for 1 s "
                              r"\(keep_alive_interval 0\.2 s × "
                              r"keep_alive_max_attempt 5\): stopping the "
                              r"workers for the next round, without it",
                              r.err))
        assert re.search(r"(node \d sent no keep-alive|another node found a "
                         r"node gone silent).*\n.*restarting the worker "
                         r"group with the nodes left \(restart 1 of 1\)",
                         r.err), r.describe()
        assert "round 1 closed with 2 nodes (--nnodes 2:3)" in r.err, \
            r.describe()
    assert saw >= 1, results[0].describe() + results[1].describe()
    # Continued, it finds the round it ran over and the job gone.
    assert stopped.rc == 122, stopped.describe()
    assert "round 1 closed" not in stopped.err, stopped.describe()


def test_a_stopped_agent_that_comes_back_rejoins(hpr, tmp_path):
    """Two agents (--nnodes 2); the second is SIGSTOPped. The first drops
    it, stops its workers and waits for two nodes in round 1; continued
    within join_timeout, the second follows into round 1 and the job ends
    well on both."""
    out = tmp_path / "out"
    out.mkdir()
    procs = start_agents(hpr, tmp_path, 2, out, "2", "join_timeout=120",
                         ["--max-restarts", "1"])
    results = stop_until_dropped(procs)
    assert "node 1 sent no keep-alive for 1 s" in results[0].err, \
        results[0].describe()
    assert "another node found a node gone silent" in results[1].err, \
        results[1].describe()
    found = {p.name.split(".")[0] + "." + p.name.split(".")[3]
             for p in out.iterdir()}
    assert found == {"agent0.0", "agent0.1", "agent1.0", "agent1.1"}, found


def test_a_lost_node_with_no_restart_left_ends_every_agent(hpr, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    procs = start_agents(hpr, tmp_path, 2, out, "2", "join_timeout=120")
    procs[1].signal(signal.SIGSTOP)
    try:
        first = procs[0].wait(60)
    finally:
        procs[1].signal(signal.SIGCONT)
    second = procs[1].wait(60)
    assert first.rc == 122, first.describe()
    assert ("a node was lost and no restarts are left (--max-restarts 0); "
            "exit status 122") in first.err, first.describe()
    assert second.rc == 122, second.describe()


def test_coordinated_static_rounds_keep_alive_too(hpr, tmp_path):
    """--rdzv-backend static with --rdzv-conf coordinate: node 1's agent
    is SIGSTOPped; node 0's agent (the store's host) drops it, stops its
    workers, and waits for node 1 in round 1; continued, node 1 follows
    and the job ends well, with the static node ranks kept."""
    out = tmp_path / "out"
    out.mkdir()
    master, store = free_port(), free_port()
    procs = [hpr.start(
        ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "static",
         "--rdzv-id", "ka3", "--rdzv-conf",
         f"coordinate={store},join_timeout=120,{KEEP_ALIVE}",
         "--master-addr", "127.0.0.1", "--master-port", str(master),
         "--nnodes", "2", "--node-rank", str(i), "--nproc-per-node", "1",
         "--max-restarts", "1", ROUND_WORKER, out],
        env={"NO_TORCH": "1", "FAIL_UNTIL": "1", "DUMP_TAG": f"agent{i}"},
        log_dir=False) for i in range(2)]
    deadline_poll(lambda: len([p for p in out.iterdir()
                               if p.name.endswith(".0")]) >= 2,
                  timeout=120, what="round 0's workers")
    results = stop_until_dropped(procs)
    assert "node 1 sent no keep-alive for 1 s" in results[0].err, \
        results[0].describe()
    found = sorted(p.name for p in out.iterdir())
    assert found == ["agent0.0.0.0", "agent0.0.0.1", "agent1.1.0.0",
                     "agent1.1.0.1"], found


def test_a_finished_node_is_not_lost(hpr, tmp_path):
    """Node 1's workers end at once, node 0's a few keep-alive windows
    later: node 1 stops beating when its job succeeded, and node 0 must
    not take it for lost."""
    out = tmp_path / "out"
    out.mkdir()
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [hpr.start(
        ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
         "--rdzv-endpoint", endpoint, "--rdzv-id", "ka2", "--nnodes", "2",
         "--nproc-per-node", "1", "--rdzv-conf", KEEP_ALIVE, "--no-python",
         "/bin/sh", "-c", 'if [ "$GROUP_RANK" = 0 ]; then sleep 3; fi'],
        log_dir=False) for i in range(2)]
    results = wait_all(procs, 120)
    for r in results:
        assert r.rc == 0, r.describe()
        assert "keep-alive" not in r.err, r.describe()


@pytest.mark.parametrize("key,value,message", [
    ("keep_alive_interval", "0", "invalid value '0' for --rdzv-conf "
     "keep_alive_interval: expected seconds above 0, e.g. 30 or 0.5"),
    ("keep_alive_interval", "soon", "invalid value 'soon' for --rdzv-conf "
     "keep_alive_interval: expected seconds above 0"),
    ("keep_alive_max_attempt", "0", "invalid value '0' for --rdzv-conf "
     "keep_alive_max_attempt: expected a count from 1 to 1000"),
    ("keep_alive_max_attempt", "2.5", "invalid value '2.5' for --rdzv-conf "
     "keep_alive_max_attempt: expected a count from 1 to 1000"),
    ("close_timeout", "-1", "invalid value '-1' for --rdzv-conf "
     "close_timeout: expected seconds above 0"),
    ("read_timeout", "x", "invalid value 'x' for --rdzv-conf read_timeout: "
     "expected seconds above 0"),
])
def test_bad_keep_alive_values_are_refused(hpr, key, value, message):
    r = hpr.run(["--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{free_port()}", "--nnodes", "2", "--rdzv-conf",
                 f"{key}={value}", "--no-python", "/bin/true"], timeout=30)
    assert r.rc == 2, r.describe()
    assert message in r.err, r.describe()


# ---- a real partition, in network namespaces ----

def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True,
                       timeout=30)
    if check and r.returncode != 0:
        pytest.fail(f"ip {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return r


@pytest.fixture
def two_hosts():
    """Two network namespaces, "a" at 10.77.0.1 and "b" at 10.77.0.2,
    joined by a veth pair; yields (ns_a, ns_b, cut), where cut() takes a's
    end of the link down: a silent partition."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (CI has both)")
    tag = f"hpr{os.getpid()}"
    ns = [f"{tag}a", f"{tag}b"]
    veth = [f"{tag}va", f"{tag}vb"]
    try:
        for n in ns:
            _ip("netns", "add", n)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for n, v, addr in zip(ns, veth, ("10.77.0.1", "10.77.0.2")):
            _ip("link", "set", v, "netns", n)
            _ip("-n", n, "addr", "add", f"{addr}/24", "dev", v)
            _ip("-n", n, "link", "set", v, "up")
            _ip("-n", n, "link", "set", "lo", "up")
        yield ns[0], ns[1], lambda: _ip("-n", ns[0], "link", "set", veth[0],
                                        "down")
    finally:
        for n in ns:
            _ip("netns", "del", n, check=False)


def test_a_partition_drops_the_cut_off_node(hpr, tmp_path, two_hosts):
    """The store's host in one namespace, a second agent in another,
    --nnodes 1:2. The link between them goes down while round 0 runs: the
    host drops the other node a keep-alive window later and runs round 1
    alone to a good end; the cut-off agent, whose store answers nothing,
    stops its workers and exits 122 at once instead of waiting out TCP."""
    ns_a, ns_b, cut = two_hosts
    out = tmp_path / "out"
    out.mkdir()
    endpoint = "10.77.0.1:29400"  # the namespace's own: no port is shared
    extra = ["--max-restarts", "1"]
    procs = [agent(hpr, tmp_path, 0, endpoint, out, "1:2",
                   "last_call_timeout=3", extra,
                   wrapper=("ip", "netns", "exec", ns_a))]
    deadline_poll(lambda: b"hosting the store" in procs[0].err_path
                  .read_bytes() or procs[0].poll() is not None,
                  timeout=60, what="the host")
    procs.append(agent(hpr, tmp_path, 1, endpoint, out, "1:2",
                       "last_call_timeout=3", extra,
                       wrapper=("ip", "netns", "exec", ns_b)))
    deadline_poll(lambda: len([p for p in out.iterdir()
                               if p.name.endswith(".0")]) >= 2,
                  timeout=120, what="round 0's workers on both hosts")
    cut()
    results = wait_all(procs, 120)
    host, cut_off = results
    assert host.rc == 0, host.describe()
    assert "node 1 sent no keep-alive for 1 s" in host.err, host.describe()
    assert "round 1 closed with 1 node (--nnodes 1:2)" in host.err, \
        host.describe()
    assert cut_off.rc == 122, cut_off.describe()
    assert ("the rendezvous store at 10.77.0.1:29400 answered no keep-alive "
            "for 1 s (keep_alive_interval 0.2 s × keep_alive_max_attempt 5)"
            ": stopping the workers; the job ends") in cut_off.err, \
        cut_off.describe()
    # Its workers were stopped and it did not wait for the store at the
    # end: well within TCP's own timeouts (minutes).
    assert cut_off.elapsed < 60, cut_off.describe()
    assert ("agent0", 1) in {(p.name.split(".")[0], int(p.name.split(".")[3]))
                             for p in out.iterdir()}
