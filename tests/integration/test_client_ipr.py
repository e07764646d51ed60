# SPDX-License-Identifier: Apache-2.0
"""The Python client's in-process restart side (python/hyperpodrun_client)
against a fake agent written here: a real Unix socket server that records
every frame and sends what a test tells it to. The bytes on the wire, the
barrier and its job_start, the envs, the reader thread's fault flag,
disconnects at each step, and elastic_event_detected with and without
torch.distributed."""

import importlib
import json
import logging
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import PYTHON, SOURCE_ROOT, deadline_poll, have_torch

sys.path.insert(0, str(SOURCE_ROOT / "python"))
import hyperpodrun_client as hc  # noqa: E402
from hyperpodrun_client import (  # noqa: E402
    HyperPodIPCException,
    InProcessRestartSocketClient,
    RestartMode,
)

SOCKET_ENV = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"


def frame(obj, raw=None):
    body = raw if raw is not None else json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


class FakeAgent:
    """A listening socket; one thread per connection reads frames into
    self.frames as (connection index, raw bytes)."""

    def __init__(self, path):
        self.path = str(path)
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(16)
        self.conns = []
        self.frames = []
        self.lock = threading.Lock()
        self.threads = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            with self.lock:
                idx = len(self.conns)
                self.conns.append(c)
            t = threading.Thread(target=self._read, args=(c, idx), daemon=True)
            t.start()

    def _read(self, c, idx):
        buf = b""
        while True:
            try:
                chunk = c.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 4:
                (n,) = struct.unpack(">I", buf[:4])
                if len(buf) < 4 + n:
                    break
                with self.lock:
                    self.frames.append((idx, buf[4:4 + n]))
                buf = buf[4 + n:]

    def messages(self, msg_type=None):
        with self.lock:
            out = [json.loads(b) for _, b in self.frames]
        return [m for m in out if msg_type is None or m.get("type") == msg_type]

    def wait_message(self, msg_type, count=1):
        return deadline_poll(
            lambda: (lambda ms: ms if len(ms) >= count else None)(
                self.messages(msg_type)),
            10, what=f"{count} {msg_type} frame(s)")

    def drop(self, conn_idx):
        """Closes a connection; the shutdown also wakes its reader, which
        a bare close() would leave blocked with the socket open."""
        c = self.conns[conn_idx]
        c.shutdown(socket.SHUT_RDWR)
        c.close()

    def send(self, conn_idx, data):
        self.conns[conn_idx].sendall(data)

    def send_to(self, client_id, msg_type, payload, conn_idx=0):
        m = dict(payload)
        m["type"] = msg_type
        m["client_id"] = client_id
        self.send(conn_idx, frame(m))

    def close(self):
        self.srv.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # dropped by the test already
            c.close()


@pytest.fixture
def agent(tmp_path, monkeypatch):
    a = FakeAgent(tmp_path / "agent.sock")
    monkeypatch.setenv(SOCKET_ENV, a.path)
    monkeypatch.setenv("LOCAL_RANK", "1")
    yield a
    a.close()


@pytest.fixture
def ipr(agent):
    c = InProcessRestartSocketClient()
    agent.wait_message("init")
    yield c
    c.close()


JOB_START = {
    "worker_envs": {
        "RANK": "3", "GROUP_RANK": "1", "ROLE_RANK": "3", "WORLD_SIZE": "4",
        "GROUP_WORLD_SIZE": "2", "ROLE_WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.9", "MASTER_PORT": "29999",
        "JOB_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "1",
        "SPARE": "False"},
    "aggregate_worker_data": {
        "rank_ips": [{"rank": 0, "ip": "127.0.0.1"}, {"rank": 1, "ip": "127.0.0.1"}],
        "aggregate_worker_data": [{"rank": 2, "group_rank": 1, "local_rank": 0,
                                   "failed": True, "data": "trace"}]},
}


def in_thread(fn, *args, **kw):
    """Runs fn in a thread; returns a function that joins it (bounded) and
    gives its result or raises its exception."""
    out = {}

    def run():
        try:
            out["value"] = fn(*args, **kw)
        except BaseException as ex:  # noqa: BLE001 - handed to the test
            out["error"] = ex

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def result(timeout=10):
        t.join(timeout)
        assert not t.is_alive(), f"{fn.__name__} still blocked after {timeout}s"
        if "error" in out:
            raise out["error"]
        return out["value"]
    result.thread = t
    return result


# ---- The bytes on the wire -------------------------------------------------------

def test_init_and_every_message_in_reference_bytes(agent, ipr):
    ipr.hyperpod_past_rcb_barrier()
    ipr.hyperpod_send_fault(3, RestartMode.LOCAL_PRL, "GPUFault", "ECC error")
    ipr.hyperpod_send_fault(3)
    ipr.hyperpod_send_data(3, {"step": 7})
    ipr.hyperpod_notify_labels({"PP": "0", "TP": "2"})
    agent.wait_message("rank_labels")
    cid = ipr.client_id
    with agent.lock:
        raw = [b for _, b in agent.frames]
    # json.dumps with its default separators, the payload first, then
    # type, local_rank (from LOCAL_RANK) and client_id: the reference
    # client's exact bytes.
    tail = f'"local_rank": 1, "client_id": "{cid}"}}'
    assert raw == [
        ('{"type": "init", ' + tail).encode(),
        ('{"type": "past_rcb_barrier", ' + tail).encode(),
        ('{"rank": 3, "restart_mode": "local_process_level_restart", "reason": '
         '"GPUFault", "message": "ECC error", "type": "job_fault", ' + tail).encode(),
        ('{"rank": 3, "restart_mode": "in_process_restart", "reason": null, '
         '"message": null, "type": "job_fault", ' + tail).encode(),
        ('{"rank": 3, "data": {"step": 7}, "type": "job_data", ' + tail).encode(),
        ('{"labels": {"PP": "0", "TP": "2"}, "type": "rank_labels", ' + tail).encode(),
    ]


@pytest.mark.parametrize("call,text", [
    (lambda c: c.hyperpod_send_fault(None), "rank must be an int"),
    (lambda c: c.hyperpod_send_fault("3"), "rank must be an int"),
    (lambda c: c.hyperpod_send_fault(True), "rank must be an int"),
    (lambda c: c.hyperpod_send_fault(0, "reboot"),
     "restart_mode 'reboot' is not one of"),
    (lambda c: c.hyperpod_send_fault(0, reason=5), "reason must be a str"),
    (lambda c: c.hyperpod_send_data("x", 1), "rank must be an int"),
    (lambda c: c.hyperpod_notify_labels({"PP": 0}), "labels must map str to str"),
    (lambda c: c.hyperpod_notify_labels(["PP"]), "labels must map str to str"),
])
def test_bad_arguments_are_refused_before_sending(agent, ipr, call, text):
    with pytest.raises(ValueError, match=text):
        call(ipr)
    ipr.hyperpod_past_rcb_barrier()
    agent.wait_message("past_rcb_barrier")
    assert [m["type"] for m in agent.messages()] == ["init", "past_rcb_barrier"]


def test_restart_mode_strings_are_accepted(agent, ipr):
    ipr.hyperpod_send_fault(0, "process_level_restart")
    assert agent.wait_message("job_fault")[0]["restart_mode"] == "process_level_restart"


def test_no_socket_path(monkeypatch, tmp_path):
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    with pytest.raises(ValueError, match=SOCKET_ENV):
        InProcessRestartSocketClient()
    missing = tmp_path / "nobody.sock"
    monkeypatch.setenv(SOCKET_ENV, str(missing))
    with pytest.raises(HyperPodIPCException, match=str(missing)):
        InProcessRestartSocketClient()


# ---- The barrier ----------------------------------------------------------------

def test_barrier_returns_job_start_and_applies_envs(agent, ipr, monkeypatch):
    for k in JOB_START["worker_envs"]:
        monkeypatch.delenv(k, raising=False)
    ipr.fault_event.set()
    done = in_thread(ipr.hyperpod_barrier)
    agent.wait_message("at_rcb_barrier")
    assert done.thread.is_alive(), "the barrier returned before job_start"
    # Frames that are not this client's job_start are passed over: another
    # client's, a checkpoint answer, one without a client_id; and the
    # job_start itself arrives one byte at a time.
    agent.send_to("someone-else", "job_start", {"worker_envs": {"RANK": "9"}})
    agent.send_to(ipr.client_id, "ckpt_info_get", {"path": None})
    agent.send(0, frame({"type": "job_start", "worker_envs": {}}))
    agent.send(0, frame(None, raw=b"not json"))
    agent.send(0, frame([1, 2]))
    data = frame(dict(JOB_START, type="job_start", client_id=ipr.client_id))
    for i in range(len(data)):
        agent.send(0, data[i:i + 1])
    msg_type, payload = done()
    assert msg_type == "job_start"
    assert payload == JOB_START
    for k, v in JOB_START["worker_envs"].items():
        assert os.environ[k] == v
    assert not ipr.fault_event.is_set()


def test_a_one_mib_job_start(agent, ipr):
    # The operator's aggregate worker data can be large.
    big = dict(JOB_START, aggregate_worker_data={
        "rank_ips": [], "aggregate_worker_data": "x" * (1 << 20)})
    done = in_thread(ipr.hyperpod_barrier, apply_envs=False)
    agent.wait_message("at_rcb_barrier")
    agent.send_to(ipr.client_id, "job_start", big)
    assert done()[1] == big


def test_barrier_with_apply_envs_false_leaves_environ(agent, ipr, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    done = in_thread(ipr.hyperpod_barrier, apply_envs=False)
    agent.wait_message("at_rcb_barrier")
    agent.send_to(ipr.client_id, "job_start", JOB_START)
    assert done()[1]["worker_envs"]["RANK"] == "3"
    assert os.environ["RANK"] == "0"


def test_a_start_from_an_earlier_round_is_not_taken(agent, ipr):
    # A job_start that arrived before this barrier belongs to a round
    # already over: the barrier waits for its own.
    stale = dict(JOB_START, worker_envs=dict(JOB_START["worker_envs"],
                                             JOB_RESTART_COUNT="0"))
    agent.send_to(ipr.client_id, "job_start", stale)
    agent.send_to(ipr.client_id, "job_fault", {"restart_count": 0})
    deadline_poll(ipr.fault_event.is_set, 10, what="the fault flag")
    done = in_thread(ipr.hyperpod_barrier, apply_envs=False)
    agent.wait_message("at_rcb_barrier")
    time.sleep(0.2)  # a barrier that took the stale start returns now
    assert done.thread.is_alive(), "the barrier took the stale job_start"
    agent.send_to(ipr.client_id, "job_start", JOB_START)
    assert done()[1]["worker_envs"]["JOB_RESTART_COUNT"] == "1"


def test_barrier_timeout(agent, ipr):
    t0 = time.monotonic()
    with pytest.raises(HyperPodIPCException, match="Timed out .* after 0.3 seconds"):
        ipr.hyperpod_barrier(timeout=0.3)
    assert 0.25 < time.monotonic() - t0 < 5
    # The client still works.
    done = in_thread(ipr.hyperpod_barrier, apply_envs=False)
    agent.wait_message("at_rcb_barrier", 2)
    agent.send_to(ipr.client_id, "job_start", JOB_START)
    assert done()[0] == "job_start"


def test_job_start_without_envs(agent, ipr):
    done = in_thread(ipr.hyperpod_barrier)
    agent.wait_message("at_rcb_barrier")
    agent.send_to(ipr.client_id, "job_start", {"aggregate_worker_data": {}})
    with pytest.raises(HyperPodIPCException, match="no worker_envs object"):
        done()


# ---- Faults from elsewhere -------------------------------------------------------

def test_remote_fault_sets_the_flag_from_the_reader_thread(agent, ipr):
    assert not ipr.fault_event.is_set()
    waiter = in_thread(ipr.hyperpod_wait_fault, timeout=10)
    time.sleep(0.05)
    agent.send_to(ipr.client_id, "job_fault", {"restart_count": 2})
    assert ipr.fault_event.wait(10)
    assert ipr.last_fault == {"restart_count": 2}
    assert waiter() == ("job_fault", {"restart_count": 2})
    # The next barrier clears the flag.
    done = in_thread(ipr.hyperpod_barrier, apply_envs=False)
    agent.wait_message("at_rcb_barrier")
    agent.send_to(ipr.client_id, "job_start", JOB_START)
    done()
    assert not ipr.fault_event.is_set()


def test_a_fault_right_after_the_start_is_kept(agent, ipr):
    ipr.fault_event.set()
    done = in_thread(ipr.hyperpod_barrier, apply_envs=False)
    agent.wait_message("at_rcb_barrier")
    start = dict(JOB_START, type="job_start", client_id=ipr.client_id)
    fault = {"restart_count": 3, "type": "job_fault", "client_id": ipr.client_id}
    agent.send(0, frame(start) + frame(fault))
    done()
    assert ipr.fault_event.wait(10)
    assert ipr.last_fault == {"restart_count": 3}


def test_unread_messages_are_bounded(agent, ipr):
    for n in range(100):
        agent.send_to(ipr.client_id, "job_fault", {"restart_count": n})
    deadline_poll(lambda: ipr.last_fault == {"restart_count": 99}, 10,
                  what="the 100th job_fault")
    assert len(ipr._inbox["job_fault"]) == 16
    assert ipr._inbox["job_fault"][0] == {"restart_count": 84}


def test_wait_fault_timeout(ipr):
    with pytest.raises(HyperPodIPCException, match="Timed out"):
        ipr.hyperpod_wait_fault(timeout=0.1)


def test_wait_rank_info_gives_the_latest(agent, ipr):
    for n in ("1", "2"):
        agent.send_to(ipr.client_id, "job_rank_info",
                      {"worker_envs": {"RANK": n}, "aggregate_worker_data": {}})
    deadline_poll(lambda: len(ipr._inbox["job_rank_info"]) == 2, 10,
                  what="two job_rank_info")
    assert ipr.hyperpod_wait_rank_info()[1]["worker_envs"]["RANK"] == "2"
    waiter = in_thread(ipr.hyperpod_wait_rank_info, timeout=10)
    agent.send_to(ipr.client_id, "job_rank_info",
                  {"worker_envs": {"RANK": "5"}, "aggregate_worker_data": {}})
    assert waiter()[1]["worker_envs"]["RANK"] == "5"


# ---- Disconnects ------------------------------------------------------------------

@pytest.mark.parametrize("when", ["in_barrier", "before_barrier", "in_wait_fault"])
def test_a_closed_connection_wakes_every_wait(agent, ipr, when):
    if when == "before_barrier":
        agent.drop(0)
        deadline_poll(lambda: not ipr.connected, 10, what="the client to see EOF")
        with pytest.raises(HyperPodIPCException):
            ipr.hyperpod_barrier(timeout=30)
        return
    fn = ipr.hyperpod_barrier if when == "in_barrier" else ipr.hyperpod_wait_fault
    done = in_thread(fn)
    if when == "in_barrier":
        agent.wait_message("at_rcb_barrier")
    time.sleep(0.05)
    agent.drop(0)
    with pytest.raises(HyperPodIPCException, match="closed the worker socket"):
        done(timeout=10)
    assert not ipr.connected


def test_a_closed_connection_mid_frame(agent, ipr):
    done = in_thread(ipr.hyperpod_barrier)
    agent.wait_message("at_rcb_barrier")
    agent.send(0, struct.pack(">I", 100) + b'{"type": "job_')
    agent.drop(0)
    with pytest.raises(HyperPodIPCException):
        done()


def test_an_oversized_frame_ends_the_connection(agent, ipr):
    done = in_thread(ipr.hyperpod_barrier)
    agent.wait_message("at_rcb_barrier")
    agent.send(0, struct.pack(">I", 64 << 20))
    with pytest.raises(HyperPodIPCException, match="67108864-byte frame"):
        done()


def test_sending_after_the_agent_left(agent, ipr):
    agent.drop(0)
    agent.close()
    deadline_poll(lambda: not ipr.connected, 10, what="EOF")

    def send_until_error():
        # The first send after a close may still land in the buffer.
        for _ in range(100):
            ipr.hyperpod_past_rcb_barrier()
            time.sleep(0.01)
    with pytest.raises(HyperPodIPCException, match="cannot send past_rcb_barrier"):
        send_until_error()


def test_close_stops_the_reader(agent, ipr):
    ipr.close()
    assert not ipr._reader.is_alive()
    with pytest.raises(HyperPodIPCException, match="the client was closed"):
        ipr.hyperpod_barrier(timeout=1)


# ---- The reference's names -----------------------------------------------------

def test_reference_import_paths_and_training_manager(agent):
    from hyperpod_elastic_agent import (CheckpointDiscoverySocketClient,
                                        InProcessRestartSocketMessageType,
                                        RestartMode as RM, TrainingManager)
    from hyperpod_elastic_agent.checkpoint_discovery import CheckpointType
    from hyperpod_elastic_agent.ipc import HyperPodIPCException as E
    from hyperpod_elastic_agent.ipc import InProcessRestartSocketClient as C
    assert C is InProcessRestartSocketClient and E is HyperPodIPCException
    assert RM.LOCAL_PRL == "local_process_level_restart"
    assert InProcessRestartSocketMessageType.AT_RCB_BARRIER == "at_rcb_barrier"
    tm = TrainingManager()
    assert isinstance(tm.InProcessRestart, InProcessRestartSocketClient)
    ck = TrainingManager.get_checkpoint_discovery_client("/p", 2)
    assert isinstance(ck, CheckpointDiscoverySocketClient)
    agent.wait_message("ckpt_init")
    assert CheckpointType.MODEL_CHECKPOINT == "model_checkpoint"
    # A job_fault broadcast reaches the checkpoint client's connection too:
    # its next answer is still found.
    inits = agent.messages("init")
    ck_conn = 1
    agent.send_to(ck.client_id, "job_fault", {"restart_count": 1}, conn_idx=ck_conn)
    answer = in_thread(ck.get_latest_checkpoint_path)
    agent.wait_message("ckpt_info_get")
    agent.send_to(ck.client_id, "ckpt_info_get", {"path": "/p/7"}, conn_idx=ck_conn)
    assert answer() == "/p/7"
    assert len(inits) == 2
    tm.InProcessRestart.close()
    ck.close()


# ---- elastic_event_detected -------------------------------------------------------

@pytest.fixture
def handler(monkeypatch):
    """Loads the handler module afresh with HYPERPOD_SIGNAL_COORDINATION as
    the test sets it; puts the process's SIGUSR1 disposition back after."""
    previous = signal.getsignal(signal.SIGUSR1)

    def load(mode):
        if mode is None:
            monkeypatch.delenv("HYPERPOD_SIGNAL_COORDINATION", raising=False)
        else:
            monkeypatch.setenv("HYPERPOD_SIGNAL_COORDINATION", mode)
        import hyperpodrun_client.elastic_event_handler as eh
        return importlib.reload(eh)
    yield load
    signal.signal(signal.SIGUSR1, previous)


def raise_sigusr1(eh):
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline_poll(lambda: eh._signal_received[signal.SIGUSR1], 10,
                  what="the SIGUSR1 flag")


@pytest.mark.parametrize("mode", [None, "disabled", "DISABLED"])
def test_elastic_event_disabled(handler, mode):
    eh = handler(mode)
    assert signal.getsignal(signal.SIGUSR1) == eh._signal_handler
    assert eh.elastic_event_detected() is False
    raise_sigusr1(eh)
    assert eh.elastic_event_detected() is False


def test_elastic_event_invalid_mode_warns(handler, caplog):
    with caplog.at_level(logging.WARNING):
        eh = handler("sometimes")
    assert 'HYPERPOD_SIGNAL_COORDINATION="sometimes" is not one of disabled, ' \
           'distributed' in caplog.text
    raise_sigusr1(eh)
    assert eh.elastic_event_detected() is False


def test_elastic_event_distributed_without_process_group(handler):
    eh = handler("Distributed")
    assert eh.elastic_event_detected() is False
    raise_sigusr1(eh)
    assert eh.elastic_event_detected() is True
    assert eh.elastic_event_detected(signal.SIGTERM) is False
    # The top-level name is the same function.
    assert hc.elastic_event_detected is eh.elastic_event_detected


def test_importing_the_package_leaves_sigusr1_alone():
    code = ("import signal, sys; sys.path.insert(0, sys.argv[1]); "
            "import hyperpodrun_client, hyperpod_elastic_agent; "
            "from hyperpodrun_client import *; "
            "print(signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL); "
            "from hyperpodrun_client import elastic_event_detected; "
            "print(signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)")
    r = subprocess.run([PYTHON, "-c", code, str(SOURCE_ROOT / "python")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


TORCH_SCRIPT = r"""
import os, signal, sys, logging
sys.path.insert(0, sys.argv[1])
logging.basicConfig(level=logging.WARNING, stream=sys.stdout,
                    format="%(levelname)s %(message)s")
import torch.distributed as dist
from hyperpod_elastic_agent.elastic_event_handler import elastic_event_detected
import hyperpodrun_client.elastic_event_handler as eh
dist.init_process_group("gloo", init_method="file://" + sys.argv[2],
                        rank=0, world_size=1)
calls = []
real = dist.all_reduce
def counting(*a, **kw):
    calls.append(1)
    return real(*a, **kw)
dist.all_reduce = counting
print("before", elastic_event_detected(), len(calls))
os.kill(os.getpid(), signal.SIGUSR1)
print("after", elastic_event_detected(), len(calls))
def broken(*a, **kw):
    raise RuntimeError("gloo is gone")
dist.all_reduce = broken
print("fallback", elastic_event_detected())
dist.all_reduce = real
dist.destroy_process_group()
"""


@pytest.mark.skipif(not have_torch(), reason="/usr/bin/python3 has no torch")
def test_elastic_event_all_reduce_with_gloo(tmp_path):
    script = tmp_path / "ev.py"
    script.write_text(TORCH_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERPOD_")}
    env["HYPERPOD_SIGNAL_COORDINATION"] = "distributed"
    r = subprocess.run([PYTHON, str(script), str(SOURCE_ROOT / "python"),
                        str(tmp_path / "pg")], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "before False 1" in lines
    assert "after True 2" in lines
    assert "fallback True" in lines
    assert any("elastic event all-reduce failed (gloo is gone); using this "
               "rank's flag" in l for l in lines), lines


def test_docs_examples_compile():
    """The in-process restart examples of
    docs/inprocess-restart-and-checkpoints.md are Python that parses and
    imports only names the client has."""
    page = "docs/inprocess-restart-and-checkpoints.md"
    text = (SOURCE_ROOT / page).read_text()
    section = text[text.index("\n## In-process restart\n"):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    for block in blocks:
        compile(block, page, "exec")
        for names in re.findall(r"from hyperpodrun_client import (.+)", block):
            for name in names.split(","):
                assert hasattr(hc, name.strip()), name


# ---- The reference's style against the real agent -----------------------------

def test_reference_style_worker_runs_unchanged(hpr, tmp_path):
    """A worker written for the reference's package (helpers/
    ref_style_worker.py) through a whole in-process restart, an /update
    among it, on hyperpodrun --inprocess-restart."""
    from test_operator import Agent, free_port
    from conftest import helper

    a = Agent(hpr, tmp_path, ["--inprocess-restart"], nproc=2,
              script=helper("ref_style_worker.py"),
              env={"PYTHONPATH": SOURCE_ROOT / "python"})
    a.wait_status("ready", timeout=60)
    ips = [{"rank": 0, "ip": "127.0.0.1"}]
    port = free_port()
    a.start(fault_count=0, master_port=port, ipVersion="v1", rankIps=ips)
    # The fault carries no reason: rule 0's default names the rank.
    st = a.wait_status("faulted", timeout=60)
    assert st["reason"] == "WorkerReportedFault", st
    assert st["message"] == "The processes reported a failure on ranks 1", st
    assert st["worker_data"] == [{"rank": 1, "group_rank": 0, "local_rank": 1,
                                  "failed": True,
                                  "data": '{"trace": "rank 1 failed"}'}], st
    # /update reaches every rank's hyperpod_wait_rank_info thread, which
    # sets the labels.
    code, _, _ = a.post("/update", {
        "rank": 0, "nnodes": 1, "faultCount": 0, "master_addr": "127.0.0.1",
        "master_port": port, "ipVersion": "v1", "rankIps": ips})
    assert code == 200
    deadline_poll(lambda: a.status()["rank_labels"] in
                  ({"PP": "0", "TP": "2"}, {"PP": "1", "TP": "2"}), 30,
                  what="the labels from job_rank_info")
    code, _, _ = a.post("/stop")
    assert code == 200
    a.wait_status("ready", timeout=60)
    a.start(fault_count=1, master_port=free_port(), ipVersion="v1", rankIps=ips)
    a.wait_status("completed", timeout=60)
    r = a.shutdown()
    assert r.rc == 0, r.describe()
    out = r.stdout.decode()
    for local in (0, 1):
        p = f"[default{local}]:"
        assert f"{p}rank info: RANK {local}" in out, out
        assert (f"{p}job_start: rank {local} restart 1 rank_ips "
                "[{'rank': 0, 'ip': '127.0.0.1'}]") in out, out
        assert f"{p}done rank {local}" in out, out
    # The monitor threads saw the pause's broadcast, with the round's count.
    assert out.count("monitor: job_fault {'restart_count': 0}") == 2, out
    assert "[default1]:sent job_fault" in out
