# SPDX-License-Identifier: Apache-2.0
"""How the other workers are stopped when one fails, per mode.

Self-driven modes stand in for torchrun: SIGTERM, then SIGKILL after
TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30 s (PET_SHUTDOWN_TIMEOUT and
--shutdown-timeout above it), so a worker's SIGTERM handler (a checkpoint,
a log flush) completes. Operator mode stands in for the HyperPod agent:
SIGKILL, with --shutdown-signal SIGTERM and --shutdown-timeout to change
it. In each case local rank 1 exits 3 once local rank 0 is ready; rank 0
either has a handler that saves a file after a short delay, or records
SIGTERM and carries on (it must then be killed after the grace).
"""

import pytest

from conftest import deadline_poll, pid_alive, wait_for_files, write_exec
from test_operator import Agent

WORKER = """#!/usr/bin/python3
import os, signal, sys, time
d = os.environ["STOPW_DIR"]
mode = os.environ["STOPW_MODE"]
def path(name):
    return os.path.join(d, name)
if os.environ["LOCAL_RANK"] == "1":
    while not os.path.exists(path("ready0")):
        time.sleep(0.01)
    sys.exit(3)
def on_term(signum, frame):
    open(path("term"), "w").close()
    if mode == "handler":
        time.sleep(0.5)  # the checkpoint the handler must finish
        open(path("saved"), "w").close()
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
with open(path("pid0.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(path("pid0.tmp"), path("ready0"))
while True:
    time.sleep(3600)
"""

KILLED_AFTER_GRACE = ("train worker 0 (pid {pid}) still running after "
                      "SIGTERM: SIGKILL")


def make_worker(tmp_path, mode):
    work = tmp_path / "work"
    work.mkdir()
    script = write_exec(tmp_path / "w.py", WORKER)
    return script, work, {"STOPW_DIR": work, "STOPW_MODE": mode}


def worker_pid(work):
    return int((work / "ready0").read_text())


# ---- Self-driven: torchrun's stop ----------------------------------------

# How the grace is given: torchrun's variable, its PET_ form, the flag.
GRACE = {
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": ({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": 1},
                                       []),
    "PET_SHUTDOWN_TIMEOUT": ({"PET_SHUTDOWN_TIMEOUT": 1}, []),
    "--shutdown-timeout": ({}, ["--shutdown-timeout", 1]),
}


def test_self_driven_handler_completes(hpr, tmp_path):
    """The default: SIGTERM, and 30 s for the handler (it needs 0.5)."""
    script, work, env = make_worker(tmp_path, "handler")
    r = hpr.run(["--standalone", "--nproc-per-node", 2, "--no-python",
                 script], env=env, timeout=60)
    assert r.rc == 3, r.describe()
    assert (work / "term").exists(), r.describe()
    assert (work / "saved").exists(), r.describe()
    assert ("stopping the other train workers: SIGTERM, then SIGKILL after "
            "30 s") in r.err, r.describe()
    assert "still running after" not in r.err


@pytest.mark.parametrize("how", sorted(GRACE))
def test_self_driven_ignorer_killed_after_grace(hpr, tmp_path, how):
    script, work, env = make_worker(tmp_path, "ignore")
    extra_env, args = GRACE[how]
    env.update(extra_env)
    proc = hpr.start(["--standalone", "--nproc-per-node", 2, *args,
                      "--no-python", script], env=env)
    wait_for_files([work / "ready0"], proc=proc)
    pid = worker_pid(work)
    # Well under the 30 s default: only the 1 s grace ends it this soon.
    r = proc.wait(20)
    assert r.rc == 3, r.describe()
    assert (work / "term").exists(), r.describe()
    assert not (work / "saved").exists()
    assert not pid_alive(pid)
    assert ("stopping the other train workers: SIGTERM, then SIGKILL after "
            "1 s") in r.err, r.describe()
    assert KILLED_AFTER_GRACE.format(pid=pid) in r.err, r.describe()


# ---- Operator mode: the HyperPod agent's stop ----------------------------

def operator_run(hpr, tmp_path, mode, args=()):
    script, work, env = make_worker(tmp_path, mode)
    a = Agent(hpr, tmp_path, list(args), env=env, script=script)
    a.start()
    wait_for_files([work / "ready0"], proc=a.proc)
    pid = worker_pid(work)
    st = a.wait_status("faulted")
    assert st["reason"] == "WorkerCrash", st
    deadline_poll(lambda: not pid_alive(pid), 20,
                  what=f"worker 0 (pid {pid}) to be stopped")
    r = a.shutdown()
    return r, work, pid


@pytest.mark.parametrize("mode", ["handler", "ignore"])
def test_operator_default_is_sigkill(hpr, tmp_path, mode):
    """The reference's SIGKILL: no handler runs."""
    r, work, _ = operator_run(hpr, tmp_path, mode)
    assert not (work / "term").exists(), r.describe()
    assert not (work / "saved").exists()
    assert "stopping the other train workers: SIGKILL\n" in r.err, \
        r.describe()


def test_operator_sigterm_handler_completes(hpr, tmp_path):
    r, work, _ = operator_run(hpr, tmp_path, "handler",
                              ["--shutdown-signal", "SIGTERM"])
    assert (work / "saved").exists(), r.describe()
    assert "still running after" not in r.err


def test_operator_sigterm_ignorer_killed_after_grace(hpr, tmp_path):
    r, work, pid = operator_run(hpr, tmp_path, "ignore",
                                ["--shutdown-signal", "SIGTERM",
                                 "--shutdown-timeout", 1])
    assert (work / "term").exists(), r.describe()
    assert not (work / "saved").exists()
    assert KILLED_AFTER_GRACE.format(pid=pid) in r.err, r.describe()
