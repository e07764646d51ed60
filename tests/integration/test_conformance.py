"""Behaviour the operator and torchrun users expect: the reference agent's
operator contract where hyperpodrun used to differ, torchrun's command line
and environment, and small input holes. Real processes and real HTTP."""

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from conftest import deadline_poll, helper, pid_alive, worker_lines, write_exec
from test_operator import LISTEN_RE, Agent

GOOD = {"rank": 0, "nnodes": 1, "faultCount": 0, "master_addr": "127.0.0.1",
        "master_port": 29500}


def py_worker(tmp_path, name, body):
    """A worker script run by PYTHON_EXEC; OPW_DIR is its output folder."""
    path = tmp_path / name
    path.write_text("import os, sys, time, signal\n"
                    "d = os.environ['OPW_DIR']\n" + body)
    return path


def strict_json(data):
    """What a strict client does: UTF-8 first, then JSON."""
    return json.loads(data.decode("utf-8", errors="strict"))


# ---- Operator contract ------------------------------------------------------

def test_crash_stop_shutdown_exits_0(hpr, tmp_path):
    # The reference's /stop resets the run result.
    a = Agent(hpr, tmp_path, env={"OPW_CRASH": "0:0:7"}, nproc=1)
    a.start()
    a.wait_status("faulted")
    assert a.post("/stop")[0] == 200
    a.wait_status("ready")
    r = a.shutdown()
    assert r.rc == 0, r.describe()


def test_status_is_strict_utf8_after_invalid_bytes(hpr, tmp_path):
    script = py_worker(tmp_path, "w.py", (
        "sys.stdout.buffer.write(b'bad \\xff\\xfe byte \\xe2\\x82 line\\n')\n"
        "sys.stdout.flush()\n"
        "time.sleep(3600)\n"))
    a = Agent(hpr, tmp_path, nproc=1, script=script)
    a.start(log_monitoring_configuration=[
        {"name": "Bad", "logPattern": ".*bad.*", "faultOnMatch": True}])
    a.wait_status("faulted")
    code, _, body = a.request("GET", "/status")
    assert code == 200
    st = strict_json(body)
    assert st["reason"] == "LogFault_Bad"
    assert "bad \ufffd\ufffd byte \ufffd line" in st["message"], st
    code, _, body = a.post("/update", GOOD)
    assert code == 200 and strict_json(body)["status"] == "faulted"
    assert a.post("/stop")[0] == 200
    a.wait_status("ready")
    assert a.shutdown().rc == 0


def test_update_does_not_assign_rank(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=1, env={"OPW_MODE": "wait_file"})
    code, _, body = a.post("/update", dict(GOOD, rank=2, nnodes=4))
    assert code == 200
    assert "assigned_rank" not in json.loads(body)
    a.start(rank=1, nnodes=4)
    assert a.status()["assigned_rank"] == "1"
    code, _, body = a.post("/update", dict(GOOD, rank=3, nnodes=4))
    assert code == 200 and json.loads(body)["assigned_rank"] == "1"
    assert a.post("/stop")[0] == 200
    a.wait_status("ready")
    assert a.shutdown().rc == 0


def test_stop_timeout_0_means_shutdown_timeout(hpr, tmp_path):
    # The worker needs a moment after SIGTERM; a stop that kills at once
    # (the old meaning of 0) would not let it write its file.
    script = py_worker(tmp_path, "w.py", (
        "def term(s, f):\n"
        "    time.sleep(0.5)\n"
        "    open(os.path.join(d, 'term'), 'w').close()\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "open(os.path.join(d, 'up'), 'w').close()\n"
        "time.sleep(3600)\n"))
    a = Agent(hpr, tmp_path, ["--shutdown-signal", "SIGTERM",
                              "--shutdown-timeout", "600"],
              nproc=1, script=script)
    a.start()
    deadline_poll(lambda: (a.work / "up").exists(), 15, what="the worker")
    assert a.post("/stop", {"timeout": 0})[0] == 200
    a.wait_status("ready", timeout=60)
    assert (a.work / "term").exists()
    assert a.shutdown().rc == 0


def test_rules_of_a_mid_attempt_update_watch_the_next_stage(hpr, tmp_path):
    pre = write_exec(tmp_path / "pre.sh", (
        "#!/bin/sh\n"
        f"touch {tmp_path}/pre-running\n"
        f"while [ ! -e {tmp_path}/go ]; do sleep 0.05; done\n"))
    a = Agent(hpr, tmp_path, ["--pre-train-script", pre], nproc=1,
              env={"OPW_MODE": "wait_file"})
    a.start()
    deadline_poll(lambda: (tmp_path / "pre-running").exists(), 15,
                  what="the pre-train hook")
    rule = {"name": "Starting", "logPattern": ".*attempt 0 starting.*",
            "faultOnMatch": True}
    code, _, _ = a.post("/update", dict(GOOD,
                                        log_monitoring_configuration=[rule]))
    assert code == 200
    (tmp_path / "go").touch()
    st = a.wait_status("faulted")
    assert st["reason"] == "LogFault_Starting", st
    assert a.post("/stop")[0] == 200
    a.wait_status("ready")
    assert a.shutdown().rc == 0


def test_operator_workers_see_max_restarts_3(hpr, tmp_path):
    script = py_worker(tmp_path, "w.py", (
        "open(os.path.join(d, 'max'), 'w').write("
        "os.environ['TORCHELASTIC_MAX_RESTARTS'])\n"))
    a = Agent(hpr, tmp_path, ["--max-restarts", "7"], nproc=1,
              script=script)
    a.start()
    a.wait_status("completed")
    assert (a.work / "max").read_text() == "3"
    assert a.shutdown().rc == 0


@pytest.mark.parametrize("raw,why", [
    (b'{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"10.0.0.1\\nx",'
     b'"master_port":1}', "control character"),
    (b'{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"10.0.0.1\\u0000x",'
     b'"master_port":1}', "NUL"),
    (b'{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"h\xff",'
     b'"master_port":1}', "UTF-8"),
])
def test_bad_master_addr_bytes_are_422(hpr, tmp_path, raw, why):
    a = Agent(hpr, tmp_path, nproc=1)
    code, _, body = a.request("POST", "/start", raw=raw,
                              headers={"Content-Type": "application/json"})
    assert code == 422, body
    assert why in body.decode("utf-8", errors="strict")
    assert a.status()["status"] == "ready"
    assert a.shutdown().rc == 0


# ---- Waiting for the operator ------------------------------------------------

def test_operator_mode_says_what_it_waits_for(hpr, tmp_path):
    rc = tmp_path / "opt" / "ml" / "input" / "config"
    a = Agent(hpr, tmp_path, nproc=1, resource_dir=rc,
              env={"OPW_MODE": "wait_file"})
    deadline_poll(lambda: b"no worker starts until the HyperPod operator"
                  in a.proc.console_err(), 10, what="the hint")
    err = a.proc.console_err()
    assert b"--standalone" in err and b"--rdzv-backend static" in err
    # Nothing is made under the resource config directory until the IP
    # table is first written.
    assert not (tmp_path / "opt").exists()
    a.start(ipVersion="v1", rankIps=[{"rank": 0, "ip": "10.0.0.1"}])
    assert json.loads((rc / "pod_resourceconfig.json").read_text())
    assert a.post("/stop")[0] == 200
    a.wait_status("ready")
    assert a.shutdown().rc == 0


def test_unwritable_resource_dir_is_a_500_at_start(hpr, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    a = Agent(hpr, tmp_path, nproc=1, resource_dir=blocker / "sub")
    code, _, body = a.post("/start", dict(
        GOOD, ipVersion="v1", rankIps=[{"rank": 0, "ip": "10.0.0.1"}]))
    assert code == 500
    assert f"cannot create the resource config directory '{blocker}/sub'" \
        in json.loads(body)["detail"]
    assert a.status()["status"] == "ready"
    assert a.shutdown().rc == 0


def test_operator_mode_tees_to_the_console_by_default(hpr, tmp_path):
    # No --tee: operator mode's default is 3, so the lines carry prefixes.
    work = tmp_path / "work"
    work.mkdir()
    p = hpr.start(["--log-dir", tmp_path / "logs", "--server-host",
                   "127.0.0.1", "--server-port", "0", "--rdzv-conf",
                   f"resource_config_dir={tmp_path / 'rc'}",
                   "--nproc-per-node", "2", helper("op_worker.py")],
                  env={"OPW_DIR": work}, log_dir=False)
    m = deadline_poll(lambda: LISTEN_RE.search(p.console_err()), 15,
                      what="the API")

    class Client(Agent):
        def __init__(self, port, proc):
            self.port, self.proc, self.work = port, proc, work
    a = Client(int(m.group(1)), p)
    a.start()
    a.wait_status("completed")
    lines = worker_lines(p.console_out())
    assert any(b"attempt 0 starting" in ln for ln in lines.get(0, [])), lines
    assert any(b"attempt 0 starting" in ln for ln in lines.get(1, [])), lines
    assert a.shutdown().rc == 0
