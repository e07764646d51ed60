"""Hostile stops (issue 19). Here: the agent starts clean whatever its
parent left it (point 6).
"""

import signal
import time
from pathlib import Path

from conftest import PYTHON, deadline_poll, helper, wait_for_files, write_exec


# ---- 6. The agent starts clean whatever its parent left it ----------------

BLOCKING_PARENT = [PYTHON, "-c",
                   "import os, signal, sys\n"
                   "signal.pthread_sigmask(signal.SIG_BLOCK,\n"
                   "    [signal.SIGTERM, signal.SIGCHLD, signal.SIGINT])\n"
                   "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
                   "signal.signal(signal.SIGQUIT, signal.SIG_IGN)\n"
                   "os.execv(sys.argv[1], sys.argv[1:])\n"]


def test_sigterm_blocked_by_the_parent(hpr, tmp_path):
    """Exec'd with SIGTERM blocked (and SIGCHLD ignored), the agent still
    stops on SIGTERM at once: docker stop works (on main it waited for
    the SIGKILL)."""
    worker = write_exec(tmp_path / "w.sh",
                        f"#!/bin/sh\ntouch '{tmp_path}/ready'\nsleep 60\n")
    proc = hpr.start(["--standalone", "--no-python", worker],
                     wrapper=BLOCKING_PARENT)
    wait_for_files([tmp_path / "ready"], proc=proc)
    sent = time.monotonic()
    proc.signal(signal.SIGTERM)
    r = proc.wait(10)
    assert r.rc == 143, r.describe()
    assert proc.end - sent < 3


def test_sigchld_blocked_by_the_parent(hpr, tmp_path):
    """Exec'd with SIGCHLD blocked, the agent still reaps an orphan while
    the worker runs (on main it stayed a zombie until the worker's end)."""
    out = tmp_path / "o"
    out.mkdir()
    proc = hpr.start(["--standalone", helper("orphan_maker.py"), out],
                     wrapper=BLOCKING_PARENT)
    wait_for_files([out / "orphan"], proc=proc)
    pid, ppid = map(int, (out / "orphan").read_text().split())
    assert ppid == proc.pid
    (out / "go").write_text("")

    def reaped():
        try:
            return Path(f"/proc/{pid}/stat").read_bytes().split()[3] != \
                str(proc.pid).encode()
        except OSError:
            return True
    deadline_poll(reaped, 10, what=f"orphan {pid} to be reaped")
    (out / "done").write_text("")
    r = proc.wait(20)
    assert r.rc == 0, r.describe()
