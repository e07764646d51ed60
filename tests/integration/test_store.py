# SPDX-License-Identifier: Apache-2.0
"""The C TCPStore server (src/store, run alone as hp-store-server) with
Debian's torch 1.13 as its clients: the store API, a WAIT woken by another
process, gloo process groups that rendezvous through it (the store passed
in, and env:// with TORCHELASTIC_USE_AGENT_STORE), and a client that
speaks something else."""

import json
import os
import select
import signal
import socket
import subprocess
import time

import pytest

from conftest import PYTHON, SOURCE_ROOT, deadline_poll, have_torch, helper

if not have_torch():
    pytest.skip("/usr/bin/python3 has no torch.distributed",
                allow_module_level=True)

STORE_SERVER = os.environ.get("HYPERPODRUN_STORE_SERVER") or str(
    SOURCE_ROOT / "build" / "tests" / "hp-store-server")
WORKER = helper("store_worker.py")


class StoreServer:
    def __init__(self, tmp_path, *args):
        self.err_path = tmp_path / "store.err"
        self._err = open(self.err_path, "wb")
        self.p = subprocess.Popen([STORE_SERVER, *args], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=self._err)
        line = self._line(30)
        assert line.startswith("port "), line
        self.port = int(line.split()[1])

    def _line(self, timeout):
        end = time.monotonic() + timeout
        buf = b""
        fd = self.p.stdout.fileno()
        while not buf.endswith(b"\n"):
            left = end - time.monotonic()
            assert left > 0, f"hp-store-server said nothing in {timeout}s"
            r, _, _ = select.select([fd], [], [], left)
            if r:
                b = os.read(fd, 1)
                assert b, f"hp-store-server exited: {self.p.wait()}"
                buf += b
        return buf.decode().strip()

    def stats(self):
        self.p.send_signal(signal.SIGUSR1)
        return json.loads(self._line(30))

    def stop(self):
        if self.p.poll() is not None:
            return None
        self.p.send_signal(signal.SIGTERM)
        stats = json.loads(self._line(30))
        assert self.p.wait(timeout=30) == 0
        return stats

    def stderr(self):
        return self.err_path.read_text()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self._err.close()


@pytest.fixture
def store(tmp_path):
    s = StoreServer(tmp_path)
    yield s
    s.kill()


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASTER_", "TORCHELASTIC_", "RANK",
                                "WORLD_SIZE", "LOCAL_"))}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def run_worker(*args, env=None, timeout=120):
    r = subprocess.run([PYTHON, WORKER, *map(str, args)], env=env or clean_env(),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.splitlines()


def test_torch_client_api(store):
    out = run_worker("ops", "127.0.0.1", store.port)
    assert out == [
        "get b'hello'",
        "add 3 7 -3",
        "cas hit b'world' b'world'",
        "cas mismatch b'world' b'world'",
        "cas missing b'x'",
        "cas create b'new' b'new'",
        "num_keys 3",
        "delete True False",
        "num_keys 2",
        "wait ready",
        "wait timeout True",
        "big 1048576",
        "done",
    ]
    stats = store.stop()
    assert stats["protocol_errors"] == 0 and stats["limit_errors"] == 0


def test_wait_woken_by_another_process(store):
    waiter = subprocess.Popen([PYTHON, WORKER, "wait", "127.0.0.1",
                               str(store.port), "late"], env=clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        # The WAIT is on the server once it holds an entry for the key that
        # is not yet set; then the SET must wake it.
        deadline_poll(lambda: waiter.poll() is not None
                      or store.stats()["keys"] == 1, timeout=120,
                      interval=0.05, what="the waiter's WAIT")
        if waiter.poll() is not None:
            pytest.fail(f"the waiter ended ({waiter.returncode}) before its "
                        f"WAIT was seen: {waiter.communicate()}")
        run_worker("set", "127.0.0.1", store.port, "late", "v")
        out, err = waiter.communicate(timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, err
    assert out.splitlines() == ["woken v"], (out, err)


def start_group(world, argv_of, env_of):
    procs = [subprocess.Popen([PYTHON, WORKER, *map(str, argv_of(r))],
                              env=env_of(r), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, out + err
            outs.append(out.splitlines())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    want = world * (world + 1) // 2
    assert outs == [[f"rank {r}/{world}: all_reduce sum = {want}"]
                    for r in range(world)]


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_through_the_store_given(store, world):
    start_group(world,
                lambda r: ("allreduce-store", "127.0.0.1", store.port, r, world),
                lambda r: clean_env())
    stats = store.stop()
    # Two connections per torch 1.13 client (the store and its callback
    # socket), and gloo's own stores.
    assert stats["connections_total"] >= 2 * world
    assert stats["protocol_errors"] == 0


def test_gloo_env_rendezvous_with_the_agent_store(store):
    """torch 1.13's env:// with TORCHELASTIC_USE_AGENT_STORE=True makes
    every rank a client of MASTER_ADDR:MASTER_PORT, under the prefix
    /worker/attempt_<TORCHELASTIC_RESTART_COUNT>: no rank hosts a store,
    the C server is the only one."""
    world = 4

    def env(r):
        return clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
                         TORCHELASTIC_USE_AGENT_STORE="True",
                         TORCHELASTIC_RESTART_COUNT="0",
                         RANK=str(r), WORLD_SIZE=str(world))

    start_group(world, lambda r: ("allreduce-env", r, world), env)
    stats = store.stop()
    assert stats["connections_total"] >= 2 * world
    assert stats["keys"] >= world


def test_a_client_that_speaks_http_is_dropped_and_counted(store):
    with socket.create_connection(("127.0.0.1", store.port), timeout=30) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(64) == b""
    # The store goes on serving torch.
    assert run_worker("set", "127.0.0.1", store.port, "k", "v") == []
    stats = store.stop()
    assert stats["protocol_errors"] == 1
    err = store.stderr()
    assert "store: dropped the client 127.0.0.1:" in err
    assert "unknown query type 0x47" in err
    assert "not PyTorch's TCPStore protocol" in err


def test_a_value_over_the_limit_drops_its_client(tmp_path):
    s = StoreServer(tmp_path, "--value-max", "1000")
    try:
        r = subprocess.run(
            [PYTHON, "-c",
             "import sys, datetime, torch.distributed as d\n"
             "s = d.TCPStore('127.0.0.1', int(sys.argv[1]), None, False,\n"
             "               timeout=datetime.timedelta(seconds=30))\n"
             "s.set('small', 'x' * 1000)\n"
             "s.set('big', 'x' * 1001)\n"
             "try:\n"
             "    s.get('small')\n"
             "except RuntimeError:\n"
             "    print('dropped')\n", str(s.port)],
            env=clean_env(), capture_output=True, text=True, timeout=120)
        assert r.stdout.splitlines() == ["dropped"], r.stdout + r.stderr
        stats = s.stop()
        assert stats["limit_errors"] == 1
        assert "value of 1001 bytes at offset" in s.stderr()
    finally:
        s.kill()
