# SPDX-License-Identifier: Apache-2.0
"""--rdzv-backend c10d: agents on loopback meet at a TCPStore that one of
them hosts (src/store), get their node ranks from the round, and their
workers share that store (TORCHELASTIC_USE_AGENT_STORE=True): torch's
env:// makes every rank a client of MASTER_ADDR:MASTER_PORT, the agent's
store, and a gloo all-reduce runs through it. Bad input and an endpoint
where nobody answers end with a message that names them."""

import json
import os
import re
import socket
import subprocess
import time

import pytest

from conftest import (SOURCE_ROOT, deadline_poll, have_torch, helper,
                      worker_lines)

EXAMPLE = SOURCE_ROOT / "examples" / "allreduce.py"
DUMP_ENV = helper("dump_env.py")

needs_torch = pytest.mark.skipif(not have_torch(),
                                 reason="/usr/bin/python3 has no torch")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_agents(hpr, tmp_path, n, endpoint, worker, extra=(), nproc=2):
    procs = []
    for i in range(n):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", endpoint, "--rdzv-id", "job7",
             "--nnodes", str(n), "--nproc-per-node", str(nproc), "--tee", "3",
             *extra, *worker], log_dir=False))
    return procs


def release(gate):
    """Lets the worker blocked on the FIFO gate go: opening it for writing
    waits until the worker has opened it for reading (bounded), and the
    close is its end of file."""
    subprocess.run(["/bin/sh", "-c", 'exec 3>"$1"', "sh", str(gate)],
                   timeout=120, check=True)


def wait_all(procs, timeout):
    """Waits for every agent; one that does not end shows the others'
    consoles too, where the reason usually is."""
    results = []
    for i, p in enumerate(procs):
        try:
            results.append(p.wait(timeout))
        except pytest.fail.Exception as e:
            others = "\n".join(
                f"--- agent {j}, console.err (tail) ---\n"
                f"{q.err_path.read_text(errors='replace')[-3000:]}"
                for j, q in enumerate(procs) if j != i)
            pytest.fail(f"{e}\n{others}")
    return results


def node_of(result):
    m = re.search(r"rendezvous 'job7' at \S+: joined as node (\d+) of (\d+)",
                  result.err)
    assert m, result.describe()
    return int(m.group(1))


@needs_torch
def test_two_agents_allreduce_through_the_agent_store(hpr, tmp_path):
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    procs = start_agents(hpr, tmp_path, 2, endpoint, [EXAMPLE])
    results = wait_all(procs, 180)
    for r in results:
        assert r.rc == 0, r.describe()
    nodes = [node_of(r) for r in results]
    assert sorted(nodes) == [0, 1]
    hosts = [r for r in results
             if f"rendezvous 'job7': hosting the store on 127.0.0.1:{port}"
             in r.err]
    assert len(hosts) == 1, [r.describe() for r in results]
    for node, r in zip(nodes, results):
        by_rank = worker_lines(r.stdout)
        for local in range(2):
            rank = node * 2 + local
            assert by_rank.get(local) == [
                f"rank {rank}/4 (local {local}): all_reduce sum = 10".encode()
            ], r.describe()


def test_the_workers_environment(hpr, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    procs = []
    for i in range(2):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job7",
             "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "1",
             DUMP_ENV, out],
            env={"DUMP_TAG": f"agent{i}"}, log_dir=False))
    results = wait_all(procs, 120)
    for r in results:
        assert r.rc == 0, r.describe()
    ranks = set()
    for i, r in enumerate(results):
        assert ("--node-rank 1 is not read by the c10d backend: node ranks "
                "go by order of arrival") in r.err, r.describe()
        node = node_of(r)
        for local in range(2):
            env = json.loads((out / f"agent{i}_{local}.json").read_text())["env"]
            assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
            assert env["MASTER_ADDR"] == "127.0.0.1"
            assert env["MASTER_PORT"] == str(port)
            assert env["GROUP_RANK"] == str(node)
            assert env["GROUP_WORLD_SIZE"] == "2"
            assert env["WORLD_SIZE"] == "4"
            assert env["RANK"] == str(node * 2 + local)
            assert env["TORCHELASTIC_RUN_ID"] == "job7"
            ranks.add(env["RANK"])
    assert ranks == {"0", "1", "2", "3"}


def test_without_an_endpoint(hpr):
    r = hpr.run(["--rdzv-backend", "c10d", "--nnodes", "2", "/bin/true"])
    assert r.rc == 2, r.describe()
    assert ("--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]" in r.err
            ), r.describe()


def test_nobody_answers_within_join_timeout(hpr):
    port = free_port()
    t0 = time.monotonic()
    r = hpr.run(["--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--rdzv-id", "lonely", "--rdzv-conf",
                 "is_host=false,join_timeout=1", "--nnodes", "2", "/bin/true"],
                timeout=60)
    assert r.rc != 0, r.describe()
    assert (f"rendezvous 'lonely': no store answered at 127.0.0.1:{port} "
            "within join_timeout (1 s)") in r.err, r.describe()
    assert time.monotonic() - t0 < 30


def test_too_few_agents_within_join_timeout(hpr):
    port = free_port()
    r = hpr.run(["--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--rdzv-id", "half", "--rdzv-conf",
                 "join_timeout=1", "--nnodes", "2", "/bin/true"], timeout=60)
    assert r.rc != 0, r.describe()
    assert (f"rendezvous 'half' at 127.0.0.1:{port}: fewer than 2 nodes "
            "(--nnodes) joined round 0 within join_timeout (1 s)") in r.err, \
        r.describe()


def test_an_agent_past_nnodes_is_refused(hpr, tmp_path):
    """A one-node job holds the store while its worker blocks on a FIFO;
    a second agent with the same --rdzv-id is one node too many."""
    port = free_port()
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    first = hpr.start(
        ["--log-dir", tmp_path / "a", "--rdzv-backend", "c10d",
         "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "full",
         "--nnodes", "1", "--no-python", "/bin/sh", "-c",
         f"cat {gate} >/dev/null"], log_dir=False)
    try:
        deadline_poll(lambda: b"joined as node 0 of 1" in first.err_path.read_bytes()
                      or first.poll() is not None, timeout=60,
                      what="the first agent's round")
        assert first.poll() is None, first.err_path.read_text()
        second = hpr.run(["--log-dir", tmp_path / "b", "--rdzv-backend",
                          "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                          "--rdzv-id", "full", "--nnodes", "1", "/bin/true"],
                         log_dir=False, timeout=60)
        assert second.rc != 0, second.describe()
        assert (f"rendezvous 'full' at 127.0.0.1:{port} already has its 1 "
                "nodes (--nnodes 1); this agent came as node 2") in second.err
    finally:
        release(gate)
    r = first.wait(60)
    assert r.rc == 0, r.describe()


@needs_torch
def test_the_host_keeps_the_store_until_every_node_finished(hpr, tmp_path):
    """The hosting agent's workers end at once; it stays (the exit
    barrier) while the other node's worker, released by the test, still
    uses the store through MASTER_ADDR:MASTER_PORT."""
    port = free_port()
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    common = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-id", "barrier", "--nnodes", "2", "--no-python"]
    host = hpr.start(["--log-dir", tmp_path / "a", *common, "/bin/true"],
                     log_dir=False)
    deadline_poll(lambda: b"hosting the store" in host.err_path.read_bytes()
                  or host.poll() is not None, timeout=60, what="the host")
    other = hpr.start(
        ["--log-dir", tmp_path / "b", *common, "/bin/sh", "-c",
         f'cat {gate} >/dev/null && exec /usr/bin/python3 '
         f'{helper("store_worker.py")} set "$MASTER_ADDR" "$MASTER_PORT" k v'],
        log_dir=False)
    try:
        deadline_poll(lambda: b"all stages succeeded" in host.err_path.read_bytes()
                      or host.poll() is not None, timeout=60,
                      what="the host's workers to end")
        assert host.poll() is None, host.err_path.read_text()
    finally:
        release(gate)
    r = other.wait(120)
    assert r.rc == 0, r.describe()
    r = host.wait(60)
    assert r.rc == 0, r.describe()


@needs_torch
def test_a_garbage_client_on_the_store_port_is_dropped(hpr, tmp_path):
    """While the host waits for the second agent, a client that speaks
    HTTP on the endpoint is dropped and logged; the round and the job go
    on."""
    port = free_port()
    common = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-id", "job7", "--nnodes", "2", "--nproc-per-node", "2",
              "--tee", "3"]
    host = hpr.start(["--log-dir", tmp_path / "a", *common, EXAMPLE],
                     log_dir=False)
    deadline_poll(lambda: b"hosting the store" in host.err_path.read_bytes()
                  or host.poll() is not None, timeout=60, what="the host")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(64) == b""
    other = hpr.start(["--log-dir", tmp_path / "b", *common, EXAMPLE],
                      log_dir=False)
    results = wait_all([host, other], 180)
    for r in results:
        assert r.rc == 0, r.describe()
    assert "store: dropped the client 127.0.0.1:" in results[0].err
    assert "not PyTorch's TCPStore protocol" in results[0].err


@needs_torch
def test_a_torchrun_agent_joining_by_mistake_fails_clearly(hpr, tmp_path):
    """torchrun's c10d agent keeps its rendezvous at
    "torch.rendezvous.<id>": the store drops it, so it fails at once with
    a connection error instead of waiting for a round it cannot read, and
    the hyperpodrun round goes on with the right agent."""
    port = free_port()
    common = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-id", "job7", "--nnodes", "2", "--nproc-per-node", "1",
              "--no-python", "/bin/true"]
    host = hpr.start(["--log-dir", tmp_path / "a", *common], log_dir=False)
    deadline_poll(lambda: b"hosting the store" in host.err_path.read_bytes()
                  or host.poll() is not None, timeout=60, what="the host")
    torchrun = subprocess.run(
        ["/usr/bin/python3", "-m", "torch.distributed.run",
         "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
         "--rdzv_id", "job7", "--nnodes", "2", "--nproc_per_node", "1",
         "--no_python", "/bin/true"],
        env=hpr.env, capture_output=True, timeout=120, cwd=tmp_path)
    assert torchrun.returncode != 0, torchrun.stderr.decode()[-3000:]
    assert b"RendezvousConnectionError" in torchrun.stderr, \
        torchrun.stderr.decode()[-3000:]
    other = hpr.start(["--log-dir", tmp_path / "b", *common], log_dir=False)
    results = wait_all([host, other], 180)
    for r in results:
        assert r.rc == 0, r.describe()
    assert ("key '/torch.rendezvous.job7': a torchrun agent's c10d "
            "rendezvous; hyperpodrun's rounds are not torchrun's") \
        in results[0].err, results[0].describe()


@needs_torch
def test_torch_disable_share_rdzv_tcp_store(hpr, tmp_path):
    """TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, torchrun's way back: node 0
    publishes its address and a free port, worker rank 0 hosts the
    workers' store there (TORCHELASTIC_USE_AGENT_STORE=False)."""
    port = free_port()
    procs = []
    for i in range(2):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"agent{i}", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job7",
             "--nnodes", "2", "--nproc-per-node", "2", "--tee", "3", EXAMPLE],
            env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}, log_dir=False))
    results = wait_all(procs, 180)
    masters = set()
    for r in results:
        assert r.rc == 0, r.describe()
        m = re.search(r"attempt 0: 2 workers, node \d of 2, world size 4, "
                      r"master 127\.0\.0\.1:(\d+)", r.err)
        assert m, r.describe()
        masters.add(int(m.group(1)))
    assert len(masters) == 1 and port not in masters
    said = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: worker rank 0 hosts the "
            f"workers' store at 127.0.0.1:{masters.pop()}")
    published = [r for r in results if said in r.err]
    assert len(published) == 1
    for node, r in zip([node_of(r) for r in results], results):
        by_rank = worker_lines(r.stdout)
        assert by_rank.get(0) == [
            f"rank {node * 2}/4 (local 0): all_reduce sum = 10".encode()]


def test_a_port_held_at_start_is_hosted_once_it_is_free(hpr, tmp_path):
    """Every agent finds the endpoint's port held (bound, not listening)
    when it tries to host: none hosts, nobody answers. Once the holder
    lets go, one agent hosts after all and the job runs, rather than all
    waiting out join_timeout for a host."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    procs = [hpr.start(["--log-dir", tmp_path / f"agent{i}",
                        "--rdzv-backend", "c10d", "--rdzv-endpoint",
                        f"127.0.0.1:{port}", "--rdzv-id", "job7",
                        "--nnodes", "2", "--nproc-per-node", "1",
                        "--no-python", "/bin/true"],
                       env={"LOGLEVEL": "DEBUG"}, log_dir=False)
             for i in range(2)]
    deadline_poll(lambda: all(b"rendezvous: not hosting" in p.console_err()
                              for p in procs), 60,
                  what="both agents to find the port held")
    holder.close()
    results = wait_all(procs, 120)
    for r in results:
        assert r.rc == 0, r.describe()
    hosts = [r for r in results if "(nobody answered there)" in r.err]
    assert len(hosts) == 1, [r.describe() for r in results]
