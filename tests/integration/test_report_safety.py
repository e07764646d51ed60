# SPDX-License-Identifier: Apache-2.0
"""A stacks report never changes what a worker does: no death, no EINTR
in any call it is blocked in (the TCPStore rendezvous, a gloo collective,
a store get, poll, recv, read, sleep), whether the report is asked for
with SIGUSR2 or POST /debug/stacks; and SIGUSR2 reaches only the worker
processes that handle it.

The blocking calls of the workers without torch are made through ctypes,
so that an EINTR is seen as the C code that made the call would see it
(Python retries its own calls after an EINTR, PEP 475; torch's C++ does
not, which is how a report killed a rank of a healthy job)."""

import http.client
import json
import os
import re
import signal
import socket
import time

import pytest

from conftest import deadline_poll, have_torch, wait_for_files

READONLY_RE = re.compile(rb"read-only API \(/status, /metrics, /healthz\) "
                         rb"listening on http://127\.0\.0\.1:(\d+)")
# The helper thread of our sitecustomize, left out of the dumps.
OWN_FRAME = "_hp_stacks_wait"


def start(hpr, tmp_path, script, nproc, env, extra=()):
    p = hpr.start(["--standalone", "--nproc-per-node", str(nproc),
                   "--tee", "3", "--server-host", "127.0.0.1",
                   "--server-port", "0", *extra, script], env=env)
    m = deadline_poll(lambda: READONLY_RE.search(p.console_err())
                      or p.poll() is not None, 30, what="the read-only API")
    assert p.poll() is None, p.describe()
    return p, int(m.group(1))


def ask_report(port):
    """POST /debug/stacks; a 429 (at most one report a second) is asked
    again after its Retry-After, as a client should."""
    end = time.monotonic() + 60
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/debug/stacks")
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if resp.status != 429 or time.monotonic() > end:
            break
        time.sleep(float(resp.getheader("Retry-After", "1")))
    assert resp.status == 202, body
    return json.loads(body)["report"]


def wait_report(p, path):
    deadline_poll(lambda: os.path.exists(path) or p.poll() is not None,
                  timeout=60, what=path)
    assert os.path.exists(path), p.describe()
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def thread_state(pid):
    """The state letter of pid's main thread, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def wait_blocked(pids):
    """Until every pid's main thread sleeps (blocked in its call)."""
    deadline_poll(lambda: all(thread_state(pid) == "S" for pid in pids),
                  timeout=60, what="the workers blocked")


def check_report(report, nproc):
    assert sorted(x["rank"] for x in report["ranks"]) == list(range(nproc))
    for x in report["ranks"]:
        py = x["python"]
        assert py["status"] == "complete", x
        assert "<module>" in py["stacks"] and OWN_FRAME not in py["stacks"]
        # Taken while the worker was blocked in its call.
        assert x["processes"][0]["threads"][0]["state"] == "S", x


# ---- (a) SIGUSR2: a report, forwarded only where it is handled ----

SIGUSR2_WORKER = """\
import os, signal, subprocess, sys, time
d = os.environ["WORK"]
role = sys.argv[1] if len(sys.argv) > 1 else "worker"


def note(name):
    with open(os.path.join(d, name), "w") as f:
        f.write(str(os.getpid()))


def wait_done():
    while not os.path.exists(os.path.join(d, "done")):
        time.sleep(0.02)


if role == "handler":
    signal.signal(signal.SIGUSR2, lambda s, f: note("got-handler"))
    note("ready-handler")
    wait_done()
elif role == "sigwait":
    # Takes it with sigwait, as a signalfd user would: blocked, no handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    note("ready-sigwait")
    signal.sigwait([signal.SIGUSR2])
    note("got-sigwait")
    wait_done()
elif role == "ignore":
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    note("ready-ignore")
    wait_done()
else:
    # The worker itself has no handler: SIGUSR2's default action ends it.
    kids = [subprocess.Popen([sys.executable, __file__, r])
            for r in ("handler", "sigwait", "ignore")]
    while not all(os.path.exists(os.path.join(d, "ready-" + r))
                  for r in ("handler", "sigwait", "ignore")):
        time.sleep(0.02)
    note("ready-worker")
    wait_done()
    sys.exit(max(k.wait() for k in kids))
"""


def test_sigusr2_writes_a_report_and_spares_workers_without_a_handler(
        hpr, tmp_path):
    """SIGUSR2 to the agent: the report is written, the processes that
    handle SIGUSR2 (a handler, or sigwait) get it, and the worker without
    a handler, whose default action is to die, does not: the job ends as
    it would have (on main the worker died and the job exited 140)."""
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "w.py"
    script.write_text(SIGUSR2_WORKER)
    p = hpr.start(["--standalone", "--nproc-per-node", "1", "--tee", "3",
                   script], env={"WORK": work})
    wait_for_files([work / f"ready-{r}" for r in
                    ("worker", "handler", "sigwait", "ignore")], proc=p,
                   timeout=60)
    p.signal(signal.SIGUSR2)
    wait_for_files([work / "got-handler", work / "got-sigwait"], proc=p,
                   timeout=30)
    reports = []
    deadline_poll(lambda: reports.extend(hpr.log_dir.glob(
        "*/attempt_0/stacks-report-1.json")) or reports or p.poll(),
        timeout=30, what="stacks-report-1.json")
    assert p.poll() is None, p.describe()
    (work / "done").write_text("")
    r = p.wait(60)
    assert r.rc == 0, r.describe()
    assert reports, r.describe()
    assert "SIGUSR2: forwarded to 2 worker processes that handle it; 2 " \
           "without a handler left alone" in r.err, r.err
    with open(reports[0], encoding="utf-8") as f:
        report = json.load(f)
    assert report["ranks"][0]["python"]["status"] == "complete", report


# ---- (b) no EINTR in any blocking call ----

BLOCKED_WORKER = """\
import ctypes, os, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
rank = int(os.environ["LOCAL_RANK"])
d = os.environ["WORK"]
sleep_s = int(os.environ["SLEEP_S"])
mode = ["poll", "read", "recv-timeout", "recv", "nanosleep", "sleep"][rank]
buf = ctypes.create_string_buffer(8)


def ready():
    # Written whole, then renamed: the test reads the pid once it sees it.
    path = os.path.join(d, f"ready{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)


def check(ret, what):
    if ret < 0:
        err = ctypes.get_errno()
        print(f"rank {rank} {mode}: {what} failed: {os.strerror(err)}",
              flush=True)
        sys.exit(1)


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short),
                ("revents", ctypes.c_short)]


class Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


if mode in ("poll", "read"):
    fd = os.open(os.path.join(d, f"fifo{rank}"), os.O_RDONLY)
    if mode == "poll":
        # Never restarted after a handler, SA_RESTART or not.
        pfd = PollFd(fd, 1, 0)
        ready()
        check(libc.poll(ctypes.byref(pfd), 1, -1), "poll")
    else:
        ready()
        check(libc.read(fd, buf, 1), "read")
elif mode.startswith("recv"):
    s = socket.create_connection(("127.0.0.1", int(os.environ["PORT"])))
    if mode == "recv-timeout":
        # SO_RCVTIMEO: never restarted either (TCPStore's client has it).
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                     struct.pack("ll", 300, 0))
    ready()
    check(libc.recv(s.fileno(), buf, 1, 0), "recv")
elif mode == "nanosleep":
    ts = Timespec(sleep_s, 0)
    ready()
    check(libc.nanosleep(ctypes.byref(ts), None), "nanosleep")
else:
    t = time.monotonic()
    ready()
    time.sleep(sleep_s)
    assert time.monotonic() - t >= sleep_s
print(f"rank {rank} {mode}: returned normally", flush=True)
"""
MODES = ["poll", "read", "recv-timeout", "recv", "nanosleep", "sleep"]


def test_reports_interrupt_no_blocking_call(hpr, tmp_path):
    """Six workers, each blocked in one call in its main thread; two
    reports (POST /debug/stacks, then SIGUSR2) while they block; then each
    is released. Every call returns normally and the job exits 0. (On
    main, the report's signal went to the process, and poll, the recv
    under SO_RCVTIMEO and nanosleep failed with EINTR.)"""
    work = tmp_path / "work"
    work.mkdir()
    fifos = {}
    for rank in (0, 1):
        path = work / f"fifo{rank}"
        os.mkfifo(path)
        # Held open for writing: the worker's open does not wait.
        fifos[rank] = os.open(path, os.O_RDWR)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    script = tmp_path / "blocked.py"
    script.write_text(BLOCKED_WORKER)
    try:
        p, port = start(hpr, tmp_path, script, len(MODES),
                        {"WORK": work, "SLEEP_S": 20,
                         "PORT": listener.getsockname()[1]})
        wait_for_files([work / f"ready{r}" for r in range(len(MODES))],
                       proc=p, timeout=60)
        pids = [int((work / f"ready{r}").read_text())
                for r in range(len(MODES))]
        wait_blocked(pids)
        check_report(wait_report(p, ask_report(port)), len(MODES))
        p.signal(signal.SIGUSR2)
        report = wait_report(p, str(hpr.only_train_dir() / "attempt_0" /
                                    "stacks-report-2.json"))
        check_report(report, len(MODES))
        assert p.poll() is None, p.describe()
        # Release the calls that wait for someone; the sleeps end alone.
        for fd in fifos.values():
            os.write(fd, b"x")
        for _ in range(2):
            conn, _ = listener.accept()
            conn.sendall(b"x")
            conn.close()
        r = p.wait(120)
    finally:
        listener.close()
        for fd in fifos.values():
            os.close(fd)
    assert r.rc == 0, r.describe()
    for rank, mode in enumerate(MODES):
        assert f"rank {rank} {mode}: returned normally" in r.out, r.describe()
    assert "failed" not in r.out


TORCH_WORKER = """\
import datetime, os, sys, time
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
d = os.environ["WORK"]


def mark(name):
    # Written whole, then renamed: the test reads the pid once it sees it.
    path = os.path.join(d, f"{name}{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)


def wait_file(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.02)


# Phase 1: rank 0, which hosts the TCPStore, comes late; ranks 1 and 2
# wait in the rendezvous, connecting to it.
mark("phase1-")
if rank == 0:
    wait_file("go1")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
store = dist.distributed_c10d._get_default_store()
t = torch.ones(4)
# Phase 2: rank 1 waits in a store get of a key rank 0 has not set; rank
# 2 in a gloo all_reduce that ranks 0 and 1 have not joined.
mark("phase2-")
if rank == 0:
    wait_file("go2")
    store.set("late", "v")
elif rank == 1:
    assert store.get("late") == b"v"
dist.all_reduce(t)
assert t[0].item() == 3
dist.barrier()
print(f"rank {rank}: done", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.skipif(not have_torch(), reason="/usr/bin/python3 has no torch")
def test_reports_leave_the_rendezvous_and_collectives_alone(hpr, tmp_path):
    """torch 1.13 gloo workers, reports taken while ranks wait in the
    TCPStore rendezvous, then in a store get and a gloo all_reduce. (On
    main a report made a rank waiting in the rendezvous fail with
    RuntimeError: Interrupted system call, and the job with it.)"""
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TORCH_WORKER)
    p, port = start(hpr, tmp_path, script, 3, {"WORK": work})
    for phase, ranks, go in (("phase1-", (1, 2), "go1"),
                             ("phase2-", (1, 2), "go2")):
        wait_for_files([work / f"{phase}{r}" for r in range(3)], proc=p,
                       timeout=120)
        wait_blocked([int((work / f"{phase}{r}").read_text())
                      for r in ranks])
        for _ in range(2):
            report = wait_report(p, ask_report(port))
            assert sorted(x["rank"] for x in report["ranks"]) == [0, 1, 2]
            for x in report["ranks"]:
                assert x["python"]["status"] == "complete", x
        assert p.poll() is None, p.describe()
        (work / go).write_text("")
    r = p.wait(180)
    assert r.rc == 0, r.describe()
    assert "Interrupted system call" not in r.out + r.err
    assert "FAILED" not in r.err
    for rank in range(3):
        assert f"rank {rank}: done" in r.out, r.describe()


def test_a_report_as_a_worker_exits_does_not_kill_it(hpr, tmp_path):
    """As Python exits, faulthandler puts back the disposition it found:
    a report's signal then must be lost, not kill a worker that was ending
    well. The worker unregisters faulthandler itself (what the exit does)
    and a report is taken: it has no answer, and the worker exits 0. (On
    main the signal's default action killed it.)"""
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "w.py"
    script.write_text(
        "import faulthandler, os, signal, time\n"
        "faulthandler.unregister(signal.SIGRTMIN + 6)\n"
        "open(os.path.join(os.environ['WORK'], 'ready'), 'w').close()\n"
        "while not os.path.exists(os.path.join(os.environ['WORK'], "
        "'done')):\n"
        "    time.sleep(0.02)\n")
    p, port = start(hpr, tmp_path, script, 1, {"WORK": work},
                    extra=("--hang-dump-timeout", "1"))
    wait_for_files([work / "ready"], proc=p, timeout=60)
    report = wait_report(p, ask_report(port))
    assert report["ranks"][0]["python"]["status"] == "no answer", report
    assert p.poll() is None, p.describe()
    (work / "done").write_text("")
    r = p.wait(60)
    assert r.rc == 0, r.describe()
