# SPDX-License-Identifier: Apache-2.0
"""Operator mode (--rdzv-backend hyperpod, the default): pytest acts as the
HyperPod training operator over real HTTP on loopback (docs/operator-api.md:
routes, 422 format, PLR state machine, /status, pod_resourceconfig.json)."""

import http.client
import json
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import (SOURCE_ROOT, deadline_poll, have_torch, helper,
                      pid_alive, worker_lines, write_exec)

LISTEN_RE = re.compile(rb"operator API listening on http://127\.0\.0\.1:(\d+)")
ISO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$")
STATUS_KEYS = ["status", "transitions", "reason", "message", "restartMode",
               "ipversion", "agent_version", "assigned_rank", "spare"]


class Agent:
    """One hyperpodrun in operator mode, and an HTTP client for it."""

    def __init__(self, hpr, tmp_path, args=(), env=None, name="agent",
                 nproc=2, script=None, resource_dir=None, rdzv_conf="",
                 wrapper=()):
        self.dir = tmp_path / name
        self.dir.mkdir(exist_ok=True)
        self.work = self.dir / "work"
        self.work.mkdir(exist_ok=True)
        self.resource_dir = resource_dir or self.dir / "rc"
        full_env = {"OPW_DIR": self.work}
        full_env.update(env or {})
        self.proc = hpr.start(
            ["--log-dir", self.dir / "logs", "--server-host", "127.0.0.1",
             "--server-port", "0", "--rdzv-conf",
             f"resource_config_dir={self.resource_dir}{rdzv_conf}",
             "--nproc-per-node", nproc, "--tee", "3", *args,
             script or helper("op_worker.py")],
            env=full_env, log_dir=False, wrapper=wrapper)

        def listening():
            if self.proc.poll() is not None:
                pytest.fail("hyperpodrun exited before listening\n"
                            + self.proc.describe())
            return LISTEN_RE.search(self.proc.console_err())

        self.port = int(deadline_poll(listening, 15, what="the API").group(1))

    def request(self, method, path, body=None, headers=None, raw=None):
        """(status, headers dict, body bytes). body: a JSON value."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        hdrs = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        conn.close()
        return out

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def status(self):
        code, _, body = self.request("GET", "/status")
        assert code == 200, body
        return json.loads(body, object_pairs_hook=lambda p: dict(p))

    def wait_status(self, want, timeout=30):
        def check():
            if self.proc.poll() is not None:
                pytest.fail(f"hyperpodrun exited waiting for {want}\n"
                            + self.proc.describe())
            st = self.status()
            return st if st["status"] == want else None
        return deadline_poll(check, timeout, interval=0.02,
                             what=f"status {want}")

    def start(self, rank=0, nnodes=1, fault_count=0, master_addr="127.0.0.1",
              master_port=29500, **extra):
        body = {"rank": rank, "nnodes": nnodes, "faultCount": fault_count,
                "master_addr": master_addr, "master_port": master_port}
        body.update(extra)
        code, _, data = self.post("/start", body)
        assert code == 200 and data == b"", (code, data)

    def shutdown(self, timeout=30):
        code, _, _ = self.post("/shutdown")
        assert code == 200
        return self.proc.wait(timeout)

    def worker_env(self, rank, attempt=0):
        return json.loads((self.work / f"rank{rank}-attempt{attempt}.json")
                          .read_text())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- The PLR cycle -------------------------------------------------------

def test_full_plr_cycle(hpr, tmp_path):
    hooks = tmp_path / "hooks.log"
    pre = write_exec(tmp_path / "pre.sh",
                     f"#!/bin/sh\necho pre $TORCHELASTIC_RESTART_COUNT >> {hooks}\n")
    post = write_exec(tmp_path / "post.sh",
                      f"#!/bin/sh\necho post $TORCHELASTIC_RESTART_COUNT >> {hooks}\n")
    a = Agent(hpr, tmp_path, ["--pre-train-script", pre,
                              "--post-train-script", post],
              env={"OPW_CRASH": "0:1:3", "NNODES": "2"})
    st = a.status()
    assert st["status"] == "ready"
    assert list(st["transitions"]) == ["INIT", "READY"]
    assert "assigned_rank" not in st

    # Attempt 0: local rank 1 crashes.
    a.start(rank=1, nnodes=2, fault_count=0, master_addr="10.9.8.7",
            master_port="29511")
    st = a.wait_status("faulted")
    assert st["reason"] == "WorkerCrash"
    assert "Local Rank 1 (rank 3) exited with code 3" in st["message"]
    # And how each rank ended or when it went quiet: rank 3 exited.
    assert re.search(r"\nrank 3 exited with code 3 at |\nrank 2 "
                     r"(exited with code \d+ at|silent since|still writing)"
                     r".*; rank 3 exited with code 3 at ", st["message"]), \
        st["message"]
    assert st["assigned_rank"] == "1"
    # The crashing worker wrote its environment before it exited (its
    # sibling may have been stopped before it got that far).
    env = a.worker_env(3)
    assert env == {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
                   "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                   "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.9.8.7",
                   "MASTER_PORT": "29511", "TORCHELASTIC_RESTART_COUNT": "0",
                   "JOB_RESTART_COUNT": "0", "ROLE_RANK": "3"}
    assert hooks.read_text() == "pre 0\n"      # post-train never ran

    # The operator's restart: /stop, wait for ready, /start faultCount 1.
    code, _, body = a.post("/stop")
    assert (code, body) == (200, b"")
    st = a.wait_status("ready")
    assert list(st["transitions"]) == ["INIT", "READY", "RUNNING", "FAULTED",
                                       "STOPPING"]
    assert "reason" not in st
    a.start(rank=0, nnodes=1, fault_count=1, master_port=29512)
    st = a.wait_status("completed")
    assert hooks.read_text() == "pre 0\npre 1\npost 1\n"
    assert a.worker_env(1, attempt=1)["WORLD_SIZE"] == "2"
    run = [d for d in (a.dir / "logs").iterdir() if d.name.startswith("none_")]
    assert sorted(p.name for p in run[0].iterdir()) == ["attempt_0", "attempt_1"]
    out = (run[0] / "attempt_1" / "1" / "stdout.log").read_text()
    assert out == "worker 1 attempt 1 starting\nworker 1 done\n"
    r = a.shutdown()
    assert r.rc == 0, r.describe()
    assert "agent state COMPLETED → SHUTDOWN" in r.err


def test_crash_exit_status_after_shutdown(hpr, tmp_path):
    a = Agent(hpr, tmp_path, env={"OPW_CRASH": "0:0:7"}, nproc=1)
    a.start()
    a.wait_status("faulted")
    r = a.shutdown()
    # The last attempt failed: the root cause's status, as in self-driven
    # mode (the reference exits 1 here).
    assert r.rc == 7, r.describe()
    assert "Root Cause (first observed failure)" in r.err


# ---- Log rules in operator mode ----------------------------------------------

RULE = {"name": "Progress", "logPattern": ".*training step (\\d+).*",
        "expectedStartCutOffInSeconds": 5,
        "expectedRecurringFrequencyInSeconds": 1}


def test_log_hang_faults_while_workers_keep_running(hpr, tmp_path):
    a = Agent(hpr, tmp_path, env={"OPW_MODE": "progress_then_stall"})
    a.start(log_monitoring_configuration=[RULE])
    st = a.wait_status("faulted", timeout=30)
    assert st["reason"] == "LogHang_Progress"
    assert "Progress" in st["message"]
    assert "training step 2" in st["message"]
    # Who went silent, and a report of where each rank was.
    assert re.search(r"; (rank \d|both ranks 0-1) silent since ",
                     st["message"]), st["message"]
    report = deadline_poll(lambda: list(
        (a.dir / "logs").glob("none_*/attempt_0/hang-report.json")), 15,
        what="hang-report.json")
    ranks = json.loads(report[0].read_text())["ranks"]
    assert [x["python"]["status"] for x in ranks] == ["complete"] * 2
    # The workers keep running until the operator's /stop.
    pids = [int((a.work / f"pid{r}-attempt0").read_text()) for r in (0, 1)]
    assert all(pid_alive(p) for p in pids)
    code, _, _ = a.request("GET", "/metrics")
    assert code == 200

    # A graceful stop: SIGUSR1, which these workers handle by exiting.
    code, _, _ = a.post("/stop", {"is_graceful": True, "timeout": 30})
    assert code == 200
    a.wait_status("ready")
    assert (a.work / "usr1-0").exists() and (a.work / "usr1-1").exists()
    assert not any(pid_alive(p) for p in pids)
    r = a.shutdown()
    assert r.rc == 0, r.describe()


def test_stop_timeout_overrides_shutdown_timeout(hpr, tmp_path):
    a = Agent(hpr, tmp_path, ["--shutdown-signal", "SIGTERM",
                              "--shutdown-timeout", "600"],
              env={"OPW_MODE": "ignore_term"}, nproc=1)
    a.start()
    deadline_poll(lambda: (a.work / "pid0-attempt0").exists(), 15,
                  what="the worker")
    pid = int((a.work / "pid0-attempt0").read_text())
    code, _, _ = a.post("/stop", {"timeout": 1})
    assert code == 200
    # Without the override this would take 600 s.
    a.wait_status("ready", timeout=60)
    assert not pid_alive(pid)
    assert a.shutdown().rc == 0


def test_invalid_rules_in_start_are_422(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1)
    code, _, body = a.post("/start", {
        "rank": 0, "nnodes": 1, "faultCount": 0, "master_addr": "h",
        "master_port": 1,
        "log_monitoring_configuration": [{"name": "Bad", "logPattern": "("}]})
    assert code == 422
    detail = json.loads(body)["detail"]
    assert detail[0]["loc"] == ["body", "log_monitoring_configuration"]
    assert "logPattern" in detail[0]["msg"]
    assert a.status()["status"] == "ready"
    assert a.shutdown().rc == 0


# ---- Validation and bad input -------------------------------------------------

GOOD = {"rank": 0, "nnodes": 1, "faultCount": 0, "master_addr": "127.0.0.1",
        "master_port": 29500}


def test_422_cases_change_nothing(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1)
    before = a.status()
    cases = [
        # (body or raw bytes, content type, expected locs, msg part)
        ({"rank": "x", "nnodes": 1.5, "faultCount": None, "master_addr": 5,
          "master_port": 1},
         None, {("body", "rank"), ("body", "nnodes"), ("body", "faultCount"),
                ("body", "master_addr")}, None),
        (dict(GOOD, master_addr=""), None, {("body", "master_addr")},
         "Empty master_addr received from operator"),
        (dict(GOOD, master_port="eighty"), None, {("body", "master_port")},
         "invalid literal for int()"),
        (b'{"rank": 0,', "application/json", None, "JSON decode error"),
        (b"rank=0&nnodes=1", "application/x-www-form-urlencoded",
         {("body",)}, "valid dictionary"),
        (b"", "application/json", {("body",)}, "Field required"),
        (dict(GOOD, rankIps=[{"rank": 200000, "ip": "x"}], ipVersion="v"),
         None, {("body", "rankIps", 0, "rank")}, "out of range"),
    ]
    for body, ctype, locs, msg in cases:
        headers = {"Content-Type": ctype} if ctype else {}
        if isinstance(body, bytes):
            code, hdrs, data = a.post("/start", raw=body, headers=headers)
        else:
            code, hdrs, data = a.post("/start", body, headers=headers)
        assert code == 422, (body, data)
        assert hdrs["content-type"] == "application/json"
        detail = json.loads(data)["detail"]
        for err in detail:
            assert set(err) >= {"type", "loc", "msg", "input"}, err
        if locs is not None:
            assert {tuple(e["loc"]) for e in detail} == locs, detail
        if msg is not None:
            assert any(msg in e["msg"] for e in detail), detail
    # Unknown fields are ignored, as pydantic does: a valid /update.
    code, _, data = a.post("/update", dict(GOOD, surprise={"x": 1}))
    assert code == 200
    # Only /start assigns the rank, as in the reference's PLR agent.
    assert "assigned_rank" not in json.loads(data)
    after = a.status()
    assert after["status"] == "ready"
    assert after["transitions"] == before["transitions"]
    assert not (a.resource_dir / "pod_resourceconfig.json").exists()
    assert a.shutdown().rc == 0


def test_http_limits_and_errors(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1)
    code, _, data = a.request("GET", "/nope")
    assert (code, json.loads(data)) == (404, {"detail": "Not Found"})
    code, _, data = a.request("GET", "/start")
    assert (code, json.loads(data)) == (405, {"detail": "Method Not Allowed"})
    code, _, _ = a.post("/status")
    assert code == 405
    # A body over the limit is refused before it is read.
    code, _, _ = a.post("/start", raw=b"{" + b" " * (2 << 20) + b"}",
                        headers={"Content-Type": "application/json"})
    assert code == 413

    # A client that sends half a request and goes away.
    s = socket.create_connection(("127.0.0.1", a.port))
    s.sendall(b"POST /start HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"ra")
    s.close()
    # Garbage.
    s = socket.create_connection(("127.0.0.1", a.port))
    s.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
    reply = s.recv(4096)
    s.close()
    assert reply.startswith(b"HTTP/1.1 400")
    assert a.status()["status"] == "ready"
    assert a.shutdown().rc == 0


def test_status_format_and_key_order(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1, env={"OPW_MODE": "wait_file"})
    code, hdrs, data = a.request("GET", "/status")
    assert code == 200
    # The reference sends /status with no Content-Type, compact JSON.
    assert "content-type" not in hdrs
    assert b": " not in data and b", " not in data
    a.start(ipVersion="2025-01-10T12:00:00Z", rankIps=[{"rank": 0, "ip": "10.0.0.5"}])
    st = a.wait_status("running")
    keys = list(st)
    assert keys == [k for k in STATUS_KEYS if k in st]
    assert keys == ["status", "transitions", "reason", "restartMode",
                    "ipversion", "agent_version", "assigned_rank", "spare"]
    assert st["reason"] == "Running"
    assert st["restartMode"] == "process_level_restart"
    assert st["ipversion"] == "2025-01-10T12:00:00Z"
    assert st["spare"] == "True"
    for when in st["transitions"].values():
        assert ISO_RE.match(when), when
    # /start while RUNNING: 200, no effect on the running workers.
    a.start(fault_count=5)
    assert a.status()["status"] == "running"
    (a.work / "finish").write_text("")
    a.wait_status("completed")
    assert not (a.work / "rank0-attempt5.json").exists()
    assert a.shutdown().rc == 0


def test_second_start_before_the_spawn_changes_nothing(hpr, tmp_path):
    # Two /starts in one write: both are handled before the attempt the
    # first one asked for has spawned its workers.
    a = Agent(hpr, tmp_path, nproc=1, env={"OPW_MODE": "wait_file"})
    reqs = b""
    for fault_count in (0, 5):
        body = json.dumps({"rank": 0, "nnodes": 1, "faultCount": fault_count,
                           "master_addr": "127.0.0.1",
                           "master_port": 29500}).encode()
        reqs += (b"POST /start HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body)) + body
    with socket.create_connection(("127.0.0.1", a.port), timeout=15) as s:
        s.sendall(reqs)
        got = b""
        while got.count(b"HTTP/1.1 200") < 2:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
    deadline_poll(lambda: (a.work / "rank0-attempt0.json").exists(), 15,
                  what="the worker of the first /start")
    (a.work / "finish").write_text("")
    a.wait_status("completed")
    assert not (a.work / "rank0-attempt5.json").exists()
    assert a.shutdown().rc == 0


def test_stop_while_ready_and_shutdown_while_running(hpr, tmp_path):
    a = Agent(hpr, tmp_path, env={"OPW_MODE": "ignore_term"},
              args=["--shutdown-timeout", "1"])
    code, _, _ = a.post("/stop")
    assert code == 200
    st = a.status()
    assert st["status"] == "ready" and "STOPPING" not in st["transitions"]
    a.start()
    deadline_poll(lambda: (a.work / "pid1-attempt0").exists(), 15,
                  what="the workers")
    # /shutdown: SIGTERM (ignored here), SIGKILL after --shutdown-timeout.
    r = a.shutdown(timeout=60)
    assert r.rc == 0, r.describe()
    assert "RUNNING → SHUTDOWN" in r.err


def test_concurrent_status_polls(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1)
    errors = []

    def poll():
        try:
            conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=15)
            for _ in range(20):     # keep-alive: one connection, 20 requests
                conn.request("GET", "/status")
                resp = conn.getresponse()
                body = json.loads(resp.read())
                if resp.status != 200 or body["status"] != "ready":
                    errors.append((resp.status, body))
            conn.close()
        except Exception as e:      # noqa: BLE001 - collected and asserted
            errors.append(repr(e))

    threads = [threading.Thread(target=poll) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert a.shutdown().rc == 0


# ---- pod_resourceconfig.json --------------------------------------------------

def test_pod_resourceconfig(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1, env={"OPW_MODE": "wait_file"})
    path = a.resource_dir / "pod_resourceconfig.json"
    ips = [{"rank": r, "ip": f"10.0.0.{r}"} for r in range(4)]
    a.start(rank=1, nnodes=4, ipVersion="v1", rankIps=ips)
    doc = json.loads(path.read_text())
    assert doc == {"ips": ["10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3"],
                   "current_pod_ip": "10.0.0.1", "ips_timestamp": "v1"}
    # A partial update replaces one rank; ranks past nnodes are ignored.
    code, _, body = a.post("/update", dict(GOOD, rank=1, nnodes=4,
                                            ipVersion="v2",
                                            rankIps=[{"rank": 2, "ip": "X"},
                                                     {"rank": 7, "ip": "Y"}]))
    assert code == 200 and json.loads(body)["ipversion"] == "v2"
    assert json.loads(path.read_text())["ips"] == ["10.0.0.0", "10.0.0.1", "X",
                                                    "10.0.0.3"]
    # Scale down to 2 nodes.
    a.post("/update", dict(GOOD, rank=1, nnodes=2, ipVersion="v3",
                           rankIps=[{"rank": 0, "ip": "A"}]))
    assert json.loads(path.read_text()) == {
        "ips": ["A", "10.0.0.1"], "current_pod_ip": "10.0.0.1",
        "ips_timestamp": "v3"}
    # ipVersion without rankIps writes nothing.
    a.post("/update", dict(GOOD, rank=1, nnodes=2, ipVersion="v4"))
    assert json.loads(path.read_text())["ips_timestamp"] == "v3"
    assert not (a.resource_dir / "pod_resourceconfig.json.tmp").exists()
    (a.work / "finish").write_text("")
    a.wait_status("completed")
    assert a.shutdown().rc == 0

    # An agent restarted on the same file system reports the saved version.
    b = Agent(hpr, tmp_path, nproc=1, name="again",
              resource_dir=a.resource_dir)
    assert b.status()["ipversion"] == "v3"
    assert b.shutdown().rc == 0


# ---- Startup, signals, metrics ------------------------------------------------

def test_port_in_use_is_retried_then_fails(hpr, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = hpr.run(["--server-host", "127.0.0.1", "--server-port", port,
                     "--rdzv-conf", f"resource_config_dir={tmp_path / 'rc'}",
                     "--nproc-per-node", "1", helper("op_worker.py")],
                    env={"HYPERPOD_ELASTICAGENT_SERVER_MAX_RETRY": "3",
                         "HYPERPOD_ELASTICAGENT_SERVER_DELAY": "0.05",
                         "OPW_DIR": tmp_path}, timeout=30)
    assert r.rc == 2, r.describe()
    assert f"cannot listen on 127.0.0.1:{port}" in r.err
    assert "attempt 3 of 3" in r.err and "(after 3 attempts)" in r.err


@pytest.mark.parametrize("env,text", [
    ({"HYPERPOD_ELASTICAGENT_SERVER_MAX_RETRY": "zero"},
     "HYPERPOD_ELASTICAGENT_SERVER_MAX_RETRY='zero'"),
    ({"HYPERPOD_ELASTICAGENT_SERVER_DELAY": "-1"},
     "HYPERPOD_ELASTICAGENT_SERVER_DELAY='-1'"),
])
def test_bad_server_environment(hpr, tmp_path, env, text):
    env = dict(env, OPW_DIR=tmp_path)
    r = hpr.run(["--server-port", "0", "--rdzv-conf",
                 f"resource_config_dir={tmp_path / 'rc'}",
                 helper("op_worker.py")], env=env)
    assert r.rc == 2 and text in r.err, r.describe()


def test_sigterm_while_waiting_for_start(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1)
    a.proc.signal(signal.SIGTERM)
    r = a.proc.wait(15)
    assert r.rc == 128 + signal.SIGTERM, r.describe()


def test_metrics_and_healthz(hpr, tmp_path):
    a = Agent(hpr, tmp_path, env={"OPW_MODE": "wait_file"})
    code, hdrs, data = a.request("GET", "/healthz")
    assert (code, data) == (200, b"ok\n")
    a.start(log_monitoring_configuration=[
        {"name": "Start", "logPattern": ".*starting.*",
         "expectedStartCutOffInSeconds": 60}])
    a.wait_status("running")
    deadline_poll(lambda: (a.work / "pid1-attempt0").exists(), 15,
                  what="the workers")

    def scrape():
        code, hdrs, data = a.request("GET", "/metrics")
        assert code == 200
        assert hdrs["content-type"].startswith("text/plain; version=0.0.4")
        return data.decode()

    def rank1_lines(text):
        m = re.search(r'hyperpodrun_stream_lines_total\{local_rank="1",stream="stdout"\} (\d+)',
                      text)
        assert m, text
        return int(m.group(1))

    # Rank 1 starts and prints on its own schedule, and the agent reads
    # every 10 ms while output trickles in: wait for both to show.
    def started():
        text = scrape()
        matched = 'hyperpodrun_rule_matches_total{local_rank="0",rule="Start"} 1' in text
        return text if matched and rank1_lines(text) >= 1 else None

    text = deadline_poll(started, 15,
                         what="the rule match and rank 1's first line in /metrics")
    assert 'hyperpodrun_agent_state{state="running"} 1' in text
    assert 'hyperpodrun_rule_state{local_rank="0",rule="Start"} 1' in text
    assert "hyperpodrun_attempts_total 1" in text
    assert "hyperpodrun_workers_running 2" in text
    # Every sample line is "name{labels} value" or "name value".
    for line in text.splitlines():
        if not line.startswith("#"):
            assert re.match(r'^[a-z_]+(\{[^}]*\})? [0-9.e+-]+$', line), line
    (a.work / "finish").write_text("")
    a.wait_status("completed")
    assert a.shutdown().rc == 0


def test_metrics_count_every_line_read_under_a_flood(hpr, tmp_path):
    # 100,000 lines at once: the rules run on their own thread, behind the
    # reads. A scrape must never show the rules behind the lines counted
    # in the same scrape: once the stream shows every line read, the rule
    # shows every one matched, or counted as skipped where the rules fell
    # behind (they are advisory).
    n = 100000
    a = Agent(hpr, tmp_path, nproc=1,
              env={"OPW_MODE": "flood", "OPW_LINES": str(n)})
    a.start(log_monitoring_configuration=[
        {"name": "Flood", "logPattern": r".*flood (\d+).*",
         "metricThreshold": -1, "operator": "lt"}])
    a.wait_status("running")

    def counts():
        code, _, data = a.request("GET", "/metrics")
        assert code == 200
        text = data.decode()
        lines = re.search(r'hyperpodrun_stream_lines_total\{local_rank="0",'
                          r'stream="stdout"\} (\d+)', text)
        matches = re.search(r'hyperpodrun_rule_matches_total\{'
                            r'local_rank="0",rule="Flood"\} (\d+)', text)
        skipped = re.search(r'hyperpodrun_rule_skipped_lines_total (\d+)',
                            text)
        # The rule's series appear once the stage's monitors exist, which
        # can be after /status already says running.
        if lines is None or matches is None or skipped is None:
            return None
        return (int(lines.group(1)),
                int(matches.group(1)) + int(skipped.group(1)))

    def all_read():
        got = counts()
        if got is None:
            return None
        lines, matches = got
        # The "starting" line is the only one the rule does not match.
        assert matches <= max(lines - 1, 0), (lines, matches)
        return (lines, matches) if lines == n + 1 else None

    assert deadline_poll(all_read, 30, what="every line read") == (n + 1, n)
    (a.work / "finish").write_text("")
    a.wait_status("completed")
    assert a.shutdown().rc == 0


# ---- Two agents, one job: real torch -----------------------------------------

@pytest.mark.skipif(not have_torch(), reason="/usr/bin/python3 has no torch")
def test_two_agents_allreduce(hpr, tmp_path):
    port = free_port()
    agents = [Agent(hpr, tmp_path, name=f"node{n}",
                    script=SOURCE_ROOT / "examples" / "allreduce.py")
              for n in range(2)]
    for n, a in enumerate(agents):
        a.start(rank=n, nnodes=2, master_addr="127.0.0.1", master_port=port)
    for n, a in enumerate(agents):
        a.wait_status("completed", timeout=120)
    for n, a in enumerate(agents):
        r = a.shutdown()
        assert r.rc == 0, r.describe()
        by_rank = worker_lines(r.stdout)
        for local in range(2):
            rank = n * 2 + local
            assert by_rank[local] == [
                f"rank {rank}/4 (local {local}): all_reduce sum = 10".encode()]


def test_rdzv_conf_keys_for_hyperpod(hpr, tmp_path):
    # Keys the hyperpod backend does not read are ignored with a warning, as
    # the reference ignores them; a key without a value is an error.
    a = Agent(hpr, tmp_path, nproc=1, rdzv_conf=",join_timeout=900")
    r = a.shutdown()
    assert r.rc == 0, r.describe()
    assert "--rdzv-conf key 'join_timeout' is not read by the hyperpod backend" in r.err
    r = hpr.run(["--server-port", "0", "--rdzv-conf",
                 f"join_timeout=1,resource_config_dir=",
                 helper("op_worker.py")])
    assert r.rc == 2 and "--rdzv-conf resource_config_dir: the value must be" in r.err, r.describe()
