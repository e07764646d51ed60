# SPDX-License-Identifier: Apache-2.0
"""--rdzv-backend etcd-v2 against a real etcd (Debian's etcd-server, its
v2 keys API enabled), started by this module on free loopback ports: two
agents of two workers each meet there, get node ranks 0 and 1 and one
world of 4, and their workers share the store that node 0's worker rank 0
hosts (TORCHELASTIC_USE_AGENT_STORE=False), through which a gloo
all-reduce runs. A worker failure restarts every node together; with no
restart left the other node exits 122. An endpoint where nobody answers
ends within join_timeout, one that is no etcd v2 at once, with a message
that names it; two run ids on one etcd never mix. The keep-alive, the
elastic rounds, etcd restarted or gone mid-job are run too."""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import SOURCE_ROOT, deadline_poll, have_torch, helper, \
    worker_lines
from test_c10d import free_port, wait_all
from test_c10d_keepalive import stop_until_dropped

ETCD = shutil.which("etcd") or "/usr/sbin/etcd"
if not os.access(ETCD, os.X_OK):
    # A failure, not a skip: the CI machine installs it from dev.sh.
    pytest.fail("etcd is not installed; ./dev.sh installs etcd-server "
                "(Debian's etcd 3.4, run here with --enable-v2=true)",
                pytrace=False)

EXAMPLE = SOURCE_ROOT / "examples" / "allreduce.py"
DUMP_ENV = helper("dump_env.py")
ROUND_WORKER = helper("round_worker.py")

needs_torch = pytest.mark.skipif(not have_torch(),
                                 reason="/usr/bin/python3 has no torch")


class Etcd:
    def __init__(self, tmp):
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.port, self.peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "etcd.log"
        self.start()

    def start(self):
        """Starts etcd on its ports and data directory (again, after a
        stop: the same member with its keys)."""
        peer_url = f"http://127.0.0.1:{self.peer}"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [ETCD, "--name", "hp", "--enable-v2=true",
                 "--data-dir", str(self.tmp / "data"),
                 "--listen-client-urls", self.url,
                 "--advertise-client-urls", self.url,
                 "--listen-peer-urls", peer_url,
                 "--initial-advertise-peer-urls", peer_url,
                 "--initial-cluster", f"hp={peer_url}"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline_poll(self.ready, timeout=60, interval=0.1,
                      what=f"etcd on {self.url} (log: {self.log})")

    def ready(self):
        if self.proc.poll() is not None:
            pytest.fail(f"etcd exited {self.proc.returncode}:\n"
                        f"{self.log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/v2/keys/", timeout=5):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def node(self, key):
        """etcd's node at key (with its children), or None when absent."""
        try:
            with urllib.request.urlopen(
                    f"{self.url}/v2/keys{key}?recursive=true",
                    timeout=10) as r:
                return json.load(r)["node"]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def put(self, key, value):
        req = urllib.request.Request(
            f"{self.url}/v2/keys{key}", method="PUT",
            data=urllib.parse.urlencode({"value": value}).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = Etcd(tmp_path_factory.mktemp("etcd"))
    yield server
    server.stop()


def start_agents(hpr, tmp_path, etcd, run_id, n, nproc, worker, env=None,
                 extra=()):
    procs = []
    nnodes = [] if "--nnodes" in extra else ["--nnodes", str(n)]
    for i in range(n):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"{run_id}-agent{i}",
             "--rdzv-backend", "etcd-v2",
             "--rdzv-endpoint", f"127.0.0.1:{etcd.port}",
             "--rdzv-id", run_id, *nnodes,
             "--nproc-per-node", str(nproc), "--tee", "3", *extra, *worker],
            env={**(env or {}), "DUMP_TAG": f"{run_id}-agent{i}"},
            log_dir=False))
    return procs


def node_of(result, run_id):
    m = re.search(rf"rendezvous '{run_id}' at \S+: joined as node (\d+) of",
                  result.err)
    assert m, result.describe()
    return int(m.group(1))


def envs(out, run_id, n, nproc):
    """{(agent, local): environment} of dump_env.py's records."""
    return {(i, local): json.loads(
                (out / f"{run_id}-agent{i}_{local}.json").read_text())["env"]
            for i in range(n) for local in range(nproc)}


def test_the_workers_environment(hpr, tmp_path, etcd):
    out = tmp_path / "env"
    out.mkdir()
    results = wait_all(start_agents(hpr, tmp_path, etcd, "envjob", 2, 2,
                                    [DUMP_ENV, out]), 120)
    for r in results:
        assert r.rc == 0, r.describe()
    found = envs(out, "envjob", 2, 2)
    nodes = [node_of(r, "envjob") for r in results]
    assert sorted(nodes) == [0, 1]
    masters = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in found.values()}
    assert len(masters) == 1, found
    addr, port = masters.pop()
    assert addr == "127.0.0.1" and int(port) != etcd.port
    for (i, local), env in found.items():
        assert env["GROUP_RANK"] == str(nodes[i])
        assert env["RANK"] == str(nodes[i] * 2 + local)
        assert env["WORLD_SIZE"] == "4"
        assert env["GROUP_WORLD_SIZE"] == "2"
        assert env["TORCHELASTIC_RUN_ID"] == "envjob"
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
    # Node 0 published the workers' master, and the last agent to finish
    # removed the job's keys.
    assert etcd.node("/hyperpodrun/rdzv/envjob") is None
    host = results[nodes.index(0)]
    assert (f"rendezvous 'envjob': etcd-v2: worker rank 0 hosts the "
            f"workers' store at {addr}:{port}") in host.err, host.describe()


@needs_torch
def test_allreduce_through_worker_rank_0s_store(hpr, tmp_path, etcd):
    results = wait_all(start_agents(hpr, tmp_path, etcd, "reduce", 2, 2,
                                    [EXAMPLE]), 180)
    for r in results:
        assert r.rc == 0, r.describe()
    for r in results:
        node = node_of(r, "reduce")
        by_rank = worker_lines(r.stdout)
        for local in range(2):
            rank = node * 2 + local
            assert by_rank.get(local) == [
                f"rank {rank}/4 (local {local}): all_reduce sum = 10".encode()
            ], r.describe()


def records(out):
    """{(agent, node, local, count): (pid, rank, world)} from the files."""
    found = {}
    for p in out.iterdir():
        tag, node, local, count = p.name.split(".")
        pid, rank, world = p.read_text().split()
        found[(tag, int(node), int(local), int(count))] = (
            int(pid), int(rank), int(world))
    return found


def test_a_worker_failure_restarts_every_node(hpr, tmp_path, etcd):
    out = tmp_path / "out"
    out.mkdir()
    # Global rank 2, node 1's first worker, fails in round 0 (after the
    # all-reduce, with torch); the others wait as in a collective.
    env = {"FAIL_RANK": "2", "FAIL_UNTIL": "1"}
    if not have_torch():
        env["NO_TORCH"] = "1"
    results = wait_all(start_agents(hpr, tmp_path, etcd, "restart", 2, 2,
                                    [ROUND_WORKER, out], env=env,
                                    extra=["--max-restarts", "1"]), 240)
    for r in results:
        assert r.rc == 0, r.describe()
    found = records(out)
    for i in range(2):
        tag = f"restart-agent{i}"
        for count in (0, 1):
            mine = [k for k in found if k[0] == tag and k[3] == count]
            assert len(mine) == 2, (found, results[i].describe())
        pids0 = {found[k][0] for k in found if k[0] == tag and k[3] == 0}
        pids1 = {found[k][0] for k in found if k[0] == tag and k[3] == 1}
        assert not pids0 & pids1, found
    for count in (0, 1):
        ranks = sorted(v[1] for k, v in found.items() if k[3] == count)
        assert ranks == [0, 1, 2, 3], found
    restarted = [r for r in results
                 if "another node's workers failed; restarting the worker "
                    "group with every node (restart 1 of 1)" in r.err]
    failed = [r for r in results
              if "failed; restarting the worker group (restart 1 of 1)"
              in r.err]
    assert len(restarted) == 1 and len(failed) == 1, \
        [r.describe() for r in results]
    assert etcd.node("/hyperpodrun/rdzv/restart") is None
    if have_torch():
        for r in results:
            text = r.stdout.decode()
            for rnd in (0, 1):
                assert re.search(rf"round {rnd} rank \d: sum 10 of 10",
                                 text), r.describe()


def test_restarts_exhausted_the_other_node_exits_122(hpr, tmp_path, etcd):
    out = tmp_path / "out"
    out.mkdir()
    results = wait_all(start_agents(
        hpr, tmp_path, etcd, "exhaust", 2, 1, [ROUND_WORKER, out],
        env={"NO_TORCH": "1", "FAIL_RANK": "1", "FAIL_CODE": "7"},
        extra=["--max-restarts", "1"]), 180)
    codes = sorted(r.rc for r in results)
    assert codes == [7, 122], [r.describe() for r in results]
    for r in results:
        if r.rc == 7:
            assert "no restarts left (--max-restarts 1)" in r.err, \
                r.describe()
        else:
            assert ("another node left the job; exit status 122" in r.err
                    or "another node left the job; no next round" in r.err), \
                r.describe()
    found = records(out)
    for i in range(2):
        counts = sorted(k[3] for k in found if k[0] == f"exhaust-agent{i}")
        assert counts == [0, 1], found


def test_a_stopped_agent_that_comes_back_rejoins(hpr, tmp_path, etcd):
    """The keep-alive through etcd: agent 1 is SIGSTOPped while round 0
    runs; agent 0 finds its count standing still, stops its workers and
    waits for two nodes in round 1; continued, agent 1 reads that its
    round ended and follows, and the job ends well on both."""
    out = tmp_path / "out"
    out.mkdir()
    procs = start_agents(
        hpr, tmp_path, etcd, "ka", 2, 1, [ROUND_WORKER, out],
        env={"NO_TORCH": "1", "FAIL_UNTIL": "1"},
        extra=["--max-restarts", "1", "--rdzv-conf",
               "keep_alive_interval=0.2,keep_alive_max_attempt=5,"
               "join_timeout=120"])
    deadline_poll(lambda: len([p for p in out.iterdir()
                               if p.name.endswith(".0")]) >= 2,
                  timeout=120, what="round 0's workers")
    results = stop_until_dropped(procs)
    assert re.search(r"node \d sent no keep-alive for 1 s", results[0].err), \
        results[0].describe()
    assert "another node found a node gone silent" in results[1].err, \
        results[1].describe()
    found = {p.name.split(".")[0] + "." + p.name.split(".")[3]
             for p in out.iterdir()}
    assert found == {"ka-agent0.0", "ka-agent0.1", "ka-agent1.0",
                     "ka-agent1.1"}, found


def test_etcd_going_away_ends_every_agent(hpr, tmp_path):
    """An etcd of its own, killed while the workers run: every agent's
    watch loses its connection and tries again; once the keep-alive's
    window (1.5 s here) passed with no beat answered, each stops its
    workers and exits 122."""
    server = Etcd(tmp_path / "own")
    try:
        out = tmp_path / "out"
        out.mkdir()
        procs = start_agents(hpr, tmp_path, server, "gone", 2, 1,
                             [ROUND_WORKER, out],
                             env={"NO_TORCH": "1", "FAIL_UNTIL": "1"},
                             extra=["--rdzv-conf", "keep_alive_interval=0.5"])
        deadline_poll(lambda: len([p for p in out.iterdir()
                                   if p.name.endswith(".0")]) >= 2,
                      timeout=120, what="round 0's workers")
    finally:
        server.proc.kill()
        server.proc.wait(30)
    results = wait_all(procs, 120)
    for r in results:
        assert r.rc == 122, r.describe()
        assert re.search(r"the rendezvous store at 127\.0\.0\.1:\d+ answered "
                         r"no keep-alive for 1\.5 s", r.err), r.describe()


def test_min_nodes_close_the_round_after_the_last_call(hpr, tmp_path, etcd):
    """--nnodes 2:4: two agents come, and the round closes with them once
    last_call_timeout passed."""
    out = tmp_path / "out"
    out.mkdir()
    results = wait_all(start_agents(
        hpr, tmp_path, etcd, "el", 2, 1, [ROUND_WORKER, out],
        env={"NO_TORCH": "1", "FAIL_UNTIL": "0"},
        extra=["--nnodes", "2:4", "--rdzv-conf", "last_call_timeout=1"]),
        120)
    for r in results:
        assert r.rc == 0, r.describe()
        assert "round 0 closed with 2 nodes (--nnodes 2:4)" in r.err, \
            r.describe()
    found = records(out)
    assert sorted(v[1] for v in found.values()) == [0, 1], found
    assert {v[2] for v in found.values()} == {2}, found


def test_a_late_joiner_is_admitted_at_the_next_round(hpr, tmp_path, etcd):
    """--nnodes 2:3: two agents run round 0 (their workers wait); a third
    comes, the two stop their workers and the three run round 1 together;
    with --max-restarts 0 a join is no failure."""
    out = tmp_path / "out"
    out.mkdir()
    env = {"NO_TORCH": "1", "FAIL_UNTIL": "1"}
    extra = ["--nnodes", "2:3", "--rdzv-conf", "last_call_timeout=1"]
    first = start_agents(hpr, tmp_path, etcd, "late", 2, 1,
                         [ROUND_WORKER, out], env=env, extra=extra)
    deadline_poll(lambda: len(list(out.iterdir())) >= 2, timeout=120,
                  what="round 0's workers")
    late = hpr.start(
        ["--log-dir", tmp_path / "late-agent2", "--rdzv-backend", "etcd-v2",
         "--rdzv-endpoint", f"127.0.0.1:{etcd.port}", "--rdzv-id", "late",
         "--nproc-per-node", "1", *extra, ROUND_WORKER, out],
        env={**env, "DUMP_TAG": "late-agent2"}, log_dir=False)
    results = wait_all([*first, late], 180)
    for r in results:
        assert r.rc == 0, r.describe()
    found = records(out)
    rounds = {(k[0], k[3]) for k in found}
    for i in range(2):
        assert {(f"late-agent{i}", 0), (f"late-agent{i}", 1)} <= rounds, found
        assert ("a node joined the job; re-rendezvous with every node (not "
                "a failure: 0 of 0 restarts used)") in results[i].err, \
            results[i].describe()
    assert ("late-agent2", 0) not in rounds, found
    assert ("late-agent2", 1) in rounds, found
    assert sorted(v[1] for k, v in found.items() if k[3] == 1) == [0, 1, 2]
    assert etcd.node("/hyperpodrun/rdzv/late") is None


def test_etcd_restarted_mid_job_the_job_goes_on(hpr, tmp_path):
    """An etcd of its own, stopped and started again (same member, same
    keys) while the workers run: the agents connect again, their watch
    and keep-alive go on, and the job ends well on both nodes, in one
    round."""
    server = Etcd(tmp_path / "own")
    gate = tmp_path / "gate"
    try:
        # A keep-alive window (100 s) longer than a restart on a loaded
        # machine.
        procs = start_agents(hpr, tmp_path, server, "bounce", 2, 1,
                             ["--no-python", "/bin/sh", "-c",
                              f"echo $TORCHELASTIC_RESTART_COUNT; "
                              f"while [ ! -e {gate} ]; do sleep 0.1; done"],
                             extra=["--rdzv-conf",
                                    "keep_alive_max_attempt=20"])
        deadline_poll(lambda: all(b"attempt 0:" in p.err_path.read_bytes()
                                  for p in procs),
                      timeout=120, what="both agents' workers")
        server.stop()
        server.start()
        deadline_poll(lambda: all(b"connected again" in p.err_path
                                  .read_bytes() or p.poll() is not None
                                  for p in procs),
                      timeout=120, what="both agents back at etcd")
        gate.touch()
        results = wait_all(procs, 120)
    finally:
        server.stop()
    for r in results:
        assert r.rc == 0, r.describe()
        assert "the connection broke" in r.err, r.describe()
        assert "attempt 1" not in r.err, r.describe()
        assert worker_lines(r.stdout).get(0) == [b"0"], r.describe()


def test_nobody_answers_within_join_timeout(hpr):
    port = free_port()
    t0 = time.monotonic()
    r = hpr.run(["--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--rdzv-id", "lonely", "--rdzv-conf",
                 "join_timeout=2", "--nnodes", "2", "/bin/true"], timeout=60)
    assert r.rc != 0, r.describe()
    assert (f"rendezvous 'lonely': no etcd answered at 127.0.0.1:{port} "
            "within join_timeout (2 s)") in r.err, r.describe()
    assert time.monotonic() - t0 < 30


def test_too_few_agents_within_join_timeout(hpr, etcd):
    """One agent of two: the round does not close, no worker starts."""
    r = hpr.run(["--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                 f"127.0.0.1:{etcd.port}", "--rdzv-id", "half", "--rdzv-conf",
                 "join_timeout=2", "--nnodes", "2", "--no-python", "/bin/sh",
                 "-c", "echo worker ran"], timeout=60)
    assert r.rc != 0, r.describe()
    assert (f"rendezvous 'half' at 127.0.0.1:{etcd.port}: fewer than 2 "
            "nodes (--nnodes) joined round 0 within join_timeout (2 s)"
            ) in r.err, r.describe()
    assert b"worker ran" not in r.stdout, r.describe()


def test_a_server_that_is_no_etcd_v2_is_named(hpr, etcd):
    """etcd's peer port answers HTTP, but not the v2 keys API."""
    r = hpr.run(["--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                 f"127.0.0.1:{etcd.peer}", "--rdzv-id", "wrong",
                 "--rdzv-conf", "join_timeout=60", "--nnodes", "2",
                 "/bin/true"], timeout=60)
    assert r.rc != 0, r.describe()
    assert (f"rendezvous 'wrong' at 127.0.0.1:{etcd.peer}: the server at "
            f"127.0.0.1:{etcd.peer} answered HTTP 404 to etcd's v2 keys API"
            ) in r.err, r.describe()
    assert "--enable-v2=true" in r.err


def test_two_run_ids_on_one_etcd_never_mix(hpr, tmp_path, etcd):
    out = tmp_path / "env"
    out.mkdir()
    procs = []
    for i in range(2):
        for run_id in ("jobA", "jobB"):
            procs.append(hpr.start(
                ["--log-dir", tmp_path / f"{run_id}-agent{i}",
                 "--rdzv-backend", "etcd-v2",
                 "--rdzv-endpoint", f"127.0.0.1:{etcd.port}",
                 "--rdzv-id", run_id, "--nnodes", "2",
                 "--nproc-per-node", "1", DUMP_ENV, out],
                env={"DUMP_TAG": f"{run_id}-agent{i}"}, log_dir=False))
    results = wait_all(procs, 120)
    for r in results:
        assert r.rc == 0, r.describe()
    masters = {}
    for run_id in ("jobA", "jobB"):
        found = envs(out, run_id, 2, 1)
        assert sorted(e["GROUP_RANK"] for e in found.values()) == ["0", "1"]
        assert {e["TORCHELASTIC_RUN_ID"] for e in found.values()} == {run_id}
        assert {e["WORLD_SIZE"] for e in found.values()} == {"2"}
        mine = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in found.values()}
        assert len(mine) == 1, found
        masters[run_id] = mine.pop()
    assert masters["jobA"] != masters["jobB"]


def test_a_run_id_runs_again_once_every_node_finished(hpr, tmp_path, etcd):
    """The keys stay at etcd while the job runs, and go with its end,
    failed or not: the same id then runs again from round 0. Node 1's
    worker fails once the test made the gate file; node 0's runs until its
    agent stops it."""
    gate = tmp_path / "gate"
    procs = start_agents(hpr, tmp_path, etcd, "again", 2, 1,
                         ["--no-python", "/bin/sh", "-c",
                          f'while [ ! -e {gate} ]; do sleep 0.1; done; '
                          '[ "$GROUP_RANK" = 1 ] && exit 3; '
                          "while :; do sleep 1; done"])
    node = deadline_poll(lambda: etcd.node("/hyperpodrun/rdzv/again/0/beat"),
                         timeout=120, interval=0.1, what="the job's beats")
    assert len(node["nodes"]) == 2, node
    assert etcd.node("/hyperpodrun/rdzv/again/0/joined")["value"] == "2"
    gate.touch()
    results = wait_all(procs, 120)
    assert sorted(r.rc for r in results) == [3, 122], \
        [r.describe() for r in results]
    assert etcd.node("/hyperpodrun/rdzv/again") is None
    again = wait_all(start_agents(hpr, tmp_path / "b", etcd, "again", 2, 1,
                                  ["--no-python", "/bin/true"]), 120)
    for r in again:
        assert r.rc == 0, r.describe()
        assert re.search(r"rendezvous 'again' at \S+: joined as node \d of 2",
                         r.err), r.describe()


def test_a_round_a_killed_job_left_is_named(hpr, etcd):
    """Keys a killed job left (its round full) refuse the next agent with
    that id, and the message says how to remove them."""
    etcd.put("/hyperpodrun/rdzv/stale/0/joined", "2")
    r = hpr.run(["--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                 f"127.0.0.1:{etcd.port}", "--rdzv-id", "stale",
                 "--nnodes", "2", "/bin/true"], timeout=60)
    assert r.rc != 0, r.describe()
    assert (f"rendezvous 'stale' at 127.0.0.1:{etcd.port} already has its 2 "
            "nodes (--nnodes 2); this agent came as node 3") in r.err, \
        r.describe()
    assert ("curl -X DELETE 'http://HOST:PORT/v2/keys/hyperpodrun/rdzv/ID"
            "?recursive=true'") in r.err, r.describe()


def test_an_id_etcd_would_hide_is_refused(hpr, etcd):
    r = hpr.run(["--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                 f"127.0.0.1:{etcd.port}", "--rdzv-id", "_hidden",
                 "--nnodes", "2", "/bin/true"], timeout=60)
    assert r.rc == 2, r.describe()
    assert ("--rdzv-id '_hidden' cannot name an etcd directory" in r.err
            ), r.describe()
