# SPDX-License-Identifier: Apache-2.0
"""Signals to hyperpodrun and to its workers, reaping, and leftovers."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (PYTHON, deadline_poll, helper, pid_alive, proc_status,
                      wait_for_files, write_exec)


def records(path):
    """[(signal name, monotonic time)] recorded by a sigworker process."""
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path).read().splitlines():
        name, t = line.split()
        out.append((name, float(t)))
    return out


def names(path):
    return [n for n, _ in records(path)]


def start_sigworkers(hpr, tmp_path, mode, nproc=2, extra=(), fail_rank=None,
                     env=None):
    out = tmp_path / "sig"
    out.mkdir()
    args = ["--standalone", "--nproc-per-node", nproc, *extra,
            helper("sigworker.py"), out, mode]
    if fail_rank is not None:
        args.append(fail_rank)
    proc = hpr.start(args, env=env)
    return proc, out


def ready_paths(out, nproc, grandchild=True):
    paths = [out / f"ready_w_{r}" for r in range(nproc)]
    if grandchild:
        paths += [out / f"ready_g_{r}" for r in range(nproc)]
    return paths


def pids_of(out, nproc, who=("w", "g")):
    return [int((out / f"ready_{w}_{r}").read_text())
            for r in range(nproc) for w in who]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                 signal.SIGQUIT])
def test_termination_signal_reaches_every_group(hpr, tmp_path, sig):
    proc, out = start_sigworkers(hpr, tmp_path, "exit-on-term")
    wait_for_files(ready_paths(out, 2), proc=proc)
    pids = pids_of(out, 2)
    proc.signal(sig)
    r = proc.wait(20)
    assert r.rc == 128 + sig, r.describe()
    for rank in range(2):
        for who in ("w", "g"):
            assert names(out / f"sig_{who}_{rank}") == [sig.name], (who, rank)
    for pid in pids:
        assert not pid_alive(pid)


def test_sigusr_forwarded_and_job_completes(hpr, tmp_path):
    proc, out = start_sigworkers(hpr, tmp_path, "until-usr")
    wait_for_files(ready_paths(out, 2), proc=proc)
    proc.signal(signal.SIGUSR1)
    # Both signals must arrive, also when the second comes while the agent is
    # still forwarding the first.
    proc.signal(signal.SIGUSR2)
    r = proc.wait(20)
    assert r.rc == 0, r.describe()
    for rank in range(2):
        for who in ("w", "g"):
            assert sorted(names(out / f"sig_{who}_{rank}")) == \
                ["SIGUSR1", "SIGUSR2"], (who, rank)


def test_sigusr_twice(hpr, tmp_path):
    proc, out = start_sigworkers(hpr, tmp_path, "until-usr", nproc=1,
                                 env={"SIGW_GRANDCHILD": "0"})
    wait_for_files(ready_paths(out, 1, grandchild=False), proc=proc)
    proc.signal(signal.SIGUSR1)
    deadline_poll(lambda: "SIGUSR1" in names(out / "sig_w_0"), 10,
                  what="SIGUSR1 at the worker")
    assert proc.poll() is None
    proc.signal(signal.SIGUSR2)
    r = proc.wait(20)
    assert r.rc == 0, r.describe()


def test_sigterm_then_sigkill_after_shutdown_timeout(hpr, tmp_path):
    proc, out = start_sigworkers(hpr, tmp_path, "ignore-term",
                                 extra=["--shutdown-timeout", "1"])
    wait_for_files(ready_paths(out, 2), proc=proc)
    pids = pids_of(out, 2)
    sent = time.monotonic()
    proc.signal(signal.SIGTERM)
    r = proc.wait(20)
    waited = proc.end - sent
    assert r.rc == 143, r.describe()
    for rank in range(2):
        for who in ("w", "g"):
            assert names(out / f"sig_{who}_{rank}") == ["SIGTERM"]
    assert 0.9 <= waited < 8, f"exited {waited:.2f}s after SIGTERM"
    for pid in pids:
        assert not pid_alive(pid)


def test_second_signal_kills_at_once(hpr, tmp_path):
    proc, out = start_sigworkers(hpr, tmp_path, "ignore-term",
                                 extra=["--shutdown-timeout", "60"])
    wait_for_files(ready_paths(out, 2), proc=proc)
    pids = pids_of(out, 2)
    proc.signal(signal.SIGTERM)
    deadline_poll(lambda: all(names(out / f"sig_w_{r}") for r in range(2)), 10,
                  what="SIGTERM at both workers")
    assert proc.poll() is None, "hyperpodrun did not wait for the stubborn workers"
    sent = time.monotonic()
    proc.signal(signal.SIGTERM)
    r = proc.wait(10)
    assert r.rc == 143, r.describe()
    assert proc.end - sent < 5
    for pid in pids:
        assert not pid_alive(pid)


def test_failure_shutdown_signal_sigterm_then_sigkill(hpr, tmp_path):
    proc, out = start_sigworkers(
        hpr, tmp_path, "ignore-term", fail_rank=0,
        extra=["--shutdown-signal", "SIGTERM", "--shutdown-timeout", "1"])
    r = proc.wait(20)
    assert r.rc == 3, r.describe()
    rec = records(out / "sig_w_1")
    assert [n for n, _ in rec] == ["SIGTERM"], r.describe()
    assert names(out / "sig_g_1") == ["SIGTERM"]
    waited = proc.end - rec[0][1]
    assert 0.75 <= waited < 8, f"SIGKILL came {waited:.2f}s after SIGTERM"
    assert "rank      : 0 (local_rank: 0)" in r.err


def test_failure_shutdown_signal_sigterm_obeyed(hpr, tmp_path):
    proc, out = start_sigworkers(
        hpr, tmp_path, "exit-on-term", fail_rank=0,
        extra=["--shutdown-signal", "SIGTERM", "--shutdown-timeout", "30"])
    r = proc.wait(20)
    assert r.rc == 3, r.describe()
    rec = records(out / "sig_w_1")
    assert [n for n, _ in rec] == ["SIGTERM"], r.describe()
    # Well inside the 30 s timeout, however slow the machine.
    waited = proc.end - rec[0][1]
    assert waited < 15, \
        f"ended {waited:.2f}s after SIGTERM: waited for the timeout " \
        "although the worker exited"
    # The root cause is the worker that failed, not the one we stopped.
    assert "rank      : 0 (local_rank: 0)" in r.err.split("Root Cause")[1]


def test_failure_default_shutdown_signal_is_sigterm(hpr, tmp_path):
    """Self-driven, as torchrun: SIGTERM to the other workers' groups
    (operator mode's SIGKILL: test_stop_modes.py)."""
    proc, out = start_sigworkers(hpr, tmp_path, "exit-on-term", fail_rank=0)
    r = proc.wait(20)
    assert r.rc == 3, r.describe()
    assert names(out / "sig_w_1") == ["SIGTERM"], r.describe()


def test_failure_shutdown_signal_sigkill(hpr, tmp_path):
    proc, out = start_sigworkers(hpr, tmp_path, "exit-on-term", fail_rank=0,
                                 extra=["--shutdown-signal", "SIGKILL"])
    r = proc.wait(20)
    assert r.rc == 3, r.describe()
    assert names(out / "sig_w_1") == []
    assert names(out / "sig_g_1") == []


def test_orphans_are_reaped(hpr, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    proc = hpr.start(["--standalone", helper("orphan_maker.py"), out])
    wait_for_files([out / "orphan"], proc=proc)
    pid, ppid = map(int, (out / "orphan").read_text().split())
    assert ppid == proc.pid, "the orphan was not adopted by hyperpodrun " \
        "(PR_SET_CHILD_SUBREAPER)"
    (out / "go").write_text("")
    deadline_poll(lambda: proc_status(pid) is None or proc_status(pid)[1] != proc.pid,
                  10, what=f"orphan {pid} to be reaped, not left a zombie")
    assert proc.poll() is None
    # Nothing under hyperpodrun is a zombie (its worker is still running).
    zombies = [p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
               if (proc_status(p) or ("", 0)) == ("Z", proc.pid)]
    assert zombies == []
    (out / "done").write_text("")
    r = proc.wait(20)
    assert r.rc == 0, r.describe()
    # Now hyperpodrun is gone, nothing of ours is left either (the hpr
    # fixture checks that).


def test_setsid_daemon_killed_at_end(hpr, tmp_path):
    """The daemon ignores SIGTERM: it is killed at the stage's end, after
    --shutdown-timeout."""
    out = tmp_path / "d"
    out.mkdir()
    proc = hpr.start(["--standalone", "--tee", "3", "--shutdown-timeout", 1,
                      helper("daemonize.py"), out])
    r = proc.wait(20)
    assert r.rc == 0, r.describe()
    daemon = int((out / "daemon").read_text())
    deadline_poll(lambda: not pid_alive(daemon), 5,
                  what=f"daemon {daemon} to be gone after hyperpodrun exited")
    assert b"[default0]:worker done\n" in r.stdout
    assert b"[default0]:daemon started\n" in r.stdout


def test_pdeathsig_when_agent_is_killed(hpr, tmp_path):
    proc, out = start_sigworkers(hpr, tmp_path, "exit-on-term", nproc=2,
                                 env={"SIGW_GRANDCHILD": "0"})
    wait_for_files(ready_paths(out, 2, grandchild=False), proc=proc)
    pids = pids_of(out, 2, who=("w",))
    proc.signal(signal.SIGKILL)
    r = proc.wait(10)
    assert r.rc == -signal.SIGKILL
    deadline_poll(lambda: not any(pid_alive(p) for p in pids), 5,
                  what=f"workers {pids} to die with hyperpodrun")
    for rank in range(2):
        assert names(out / f"sig_w_{rank}") == []


def test_worker_starts_with_default_signals_in_its_own_session(hpr, tmp_path):
    """Whatever the agent inherited or set up for itself, a worker starts
    with no signal ignored or blocked and leads its own session and process
    group (so a stop signal to the group reaches what it starts)."""
    # The agent starts with SIGHUP ignored and SIGUSR2 blocked, as under
    # nohup or a launcher that blocks signals.
    wrapper = [PYTHON, "-c",
               "import os, signal, sys\n"
               "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
               "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])\n"
               "os.execv(sys.argv[1], sys.argv[1:])\n"]
    # Shell builtins only: a shell blocks every signal while it waits for
    # a child, which a grep reading its status would see.
    worker = write_exec(tmp_path / "w.sh", f"""#!/bin/sh
while read -r key value; do
    case $key in SigBlk:|SigIgn:) echo "$key $value";; esac
done < /proc/$$/status > '{tmp_path}/status_'$RANK
read -r pid comm state ppid pgrp sid rest < /proc/$$/stat
echo $pid $pgrp $sid > '{tmp_path}/ids_'$RANK
""")
    r = hpr.run(["--standalone", "--nproc-per-node", 2, "--no-python", worker],
                wrapper=wrapper)
    assert r.rc == 0, r.describe()
    for rank in range(2):
        status = (tmp_path / f"status_{rank}").read_text()
        assert status == "SigBlk: 0000000000000000\nSigIgn: 0000000000000000\n", status
        pid, pgrp, sid = (tmp_path / f"ids_{rank}").read_text().split()
        assert pid == pgrp == sid, (pid, pgrp, sid)


def test_closed_standard_streams(hpr, tmp_path):
    """Started with stdin, stdout and stderr closed (a supervisor that
    closes them), hyperpodrun still runs the job and tees every worker's
    output to its files: no pipe of its own takes a standard stream's
    number."""
    worker = write_exec(tmp_path / "w.sh",
                        "#!/bin/sh\necho out $RANK\necho err $RANK >&2\n")
    r = hpr.run(["--standalone", "--nproc-per-node", 2, "--tee", 3,
                 "--no-python", worker],
                wrapper=["/bin/sh", "-c", 'exec "$0" "$@" <&- >&- 2>&-'])
    assert r.rc == 0, r.describe()
    train = hpr.only_train_dir() / "attempt_0"
    for rank in range(2):
        assert (train / str(rank) / "stdout.log").read_text() == f"out {rank}\n"
        assert (train / str(rank) / "stderr.log").read_text() == f"err {rank}\n"


def test_signal_during_pre_train(hpr, tmp_path):
    out = tmp_path / "p"
    out.mkdir()
    hook = write_exec(tmp_path / "pre.py", f"""#!/usr/bin/python3
import os, signal, time
def h(s, f):
    open({str(out / 'pre_sig')!r}, 'a').write(signal.Signals(s).name + '\\n')
    os._exit(128 + s)
signal.signal(signal.SIGTERM, h)
open({str(out / 'pre_ready')!r}, 'w').close()
while True:
    time.sleep(1000)
""")
    worker = write_exec(tmp_path / "w.sh", f"#!/bin/sh\ntouch '{out}/worker_ran'\n")
    proc = hpr.start(["--standalone", "--pre-train-script", hook,
                      "--no-python", worker])
    wait_for_files([out / "pre_ready"], proc=proc)
    proc.signal(signal.SIGTERM)
    r = proc.wait(60)
    assert r.rc == 143, r.describe()
    # The agent's log says how the hook ended if its handler did not run.
    sig = out / "pre_sig"
    assert sig.exists() and sig.read_text() == "SIGTERM\n", r.describe()
    assert not (out / "worker_ran").exists()


@pytest.mark.parametrize("pid1", [False, True], ids=["child", "pid1"])
def test_signal_while_starting(hpr, tmp_path, pid1):
    """A SIGTERM that arrives before the agent's handlers exist waits for
    them and is answered as a stop (exit 143, no worker started), instead
    of the default action killing the agent or, as PID 1 of a container,
    being dropped (the kernel drops a signal PID 1 neither handles nor
    blocks). The agent is held in its start, before the handlers: the
    Slurm rendezvous runs scontrol and waits for it, and this scontrol
    waits for the test's go."""
    wrapper = ()
    if pid1:
        wrapper = ("unshare", "--pid", "--fork", "--mount-proc")
        probe = subprocess.run([*wrapper, "true"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"no PID namespace here: {probe.stderr.decode()}")
    out = tmp_path / "o"
    out.mkdir()
    scontrol = write_exec(tmp_path / "scontrol", f"""#!/bin/sh
touch '{out}/asked'
i=0
while [ ! -e '{out}/go' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
echo 'JobId=4242 NodeList=127.0.0.1 BatchHost=127.0.0.1'
""")
    worker = write_exec(tmp_path / "w.sh",
                        f"#!/bin/sh\ntouch '{out}/worker_ran'\n")
    env = {"SLURM_JOB_ID": 4242, "SLURM_JOB_NUM_NODES": 1,
           "SLURM_JOB_NODELIST": "127.0.0.1", "SLURM_NODEID": 0,
           "SLURM_PROCID": 0, "SLURM_LOCALID": 0,
           "SLURMD_NODENAME": "127.0.0.1"}
    proc = hpr.start(["--rdzv-backend", "slurm", "--rdzv-conf",
                      f"scontrol={scontrol},scontrol_timeout=120",
                      "--no-python", worker], env=env, wrapper=wrapper)
    wait_for_files([out / "asked"], timeout=60, proc=proc)
    agent = proc.pid
    if pid1:
        # unshare's one child is the agent, PID 1 in its namespace.
        agent = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                    .read_text().split()[0])
        nspid = [line.split()[1:] for line in
                 Path(f"/proc/{agent}/status").read_text().splitlines()
                 if line.startswith("NSpid:")][0]
        assert nspid[-1] == "1", nspid
    os.kill(agent, signal.SIGTERM)
    (out / "go").touch()
    r = proc.wait(60)
    assert r.rc == 143, r.describe()
    assert not (out / "worker_ran").exists()


def test_background_child_holding_pipes(hpr, tmp_path):
    """The worker exits 0 and leaves a child in its group that keeps its
    stdout and stderr open: the job is done, the child is stopped."""
    out = tmp_path / "bg"
    out.mkdir()
    script = write_exec(tmp_path / "w.sh",
                        "#!/bin/sh\n"
                        f"sleep 1000 &\necho $! > '{out}/bg.tmp'\n"
                        f"mv '{out}/bg.tmp' '{out}/bg'\necho worker done\n")
    r = hpr.run(["--standalone", "--tee", "3", "--no-python", script], timeout=20)
    assert r.rc == 0, r.describe()
    assert r.stdout == b"[default0]:worker done\n"
    bg = int((out / "bg").read_text())
    deadline_poll(lambda: not pid_alive(bg), 5, what=f"background child {bg} to go")


def test_stopped_by_signal_no_restart_even_if_workers_exit_0(hpr, tmp_path):
    """A signal stops the job: no restart although restarts are left, no
    post-train, and the status is 128+N even when the workers exit 0."""
    out = tmp_path / "z"
    out.mkdir()
    script = write_exec(tmp_path / "w.py", f"""#!/usr/bin/python3
import os, signal, sys, time
rank, attempt = os.environ["LOCAL_RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
def h(s, f):
    open({str(out)!r} + f"/term_{{rank}}_{{attempt}}", "w").close()
    os._exit(0)
signal.signal(signal.SIGTERM, h)
open({str(out)!r} + f"/ready_{{rank}}_{{attempt}}", "w").close()
while True:
    time.sleep(1000)
""")
    post = write_exec(tmp_path / "post.sh", f"#!/bin/sh\ntouch '{out}/post_ran'\n")
    proc = hpr.start(["--standalone", "--nproc-per-node", "2", "--max-restarts",
                      "3", "--post-train-script", post, "--no-python", script])
    wait_for_files([out / "ready_0_0", out / "ready_1_0"], proc=proc)
    proc.signal(signal.SIGTERM)
    r = proc.wait(20)
    assert r.rc == 143, r.describe()
    assert sorted(os.listdir(out)) == ["ready_0_0", "ready_1_0", "term_0_0",
                                       "term_1_0"]
    assert [p.name for p in hpr.only_train_dir().iterdir()] == ["attempt_0"]


def test_every_reaped_orphan_is_named(hpr, tmp_path):
    """As PID 1 with LOGLEVEL=DEBUG, a stage that leaves 100 orphans
    behind (tini's reaping test) gets each named in a "reaped orphan"
    line while the reader keeps up, and the worker's escaped daemons,
    killed at the stage's end, are named too: no reaping path is silent,
    and nothing is dropped from a console that is read."""
    wrapper = ("unshare", "--pid", "--fork", "--mount-proc")
    probe = subprocess.run([*wrapper, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no PID namespace here: {probe.stderr.decode()}")
    out = tmp_path / "o"
    out.mkdir()
    # posix_spawn, not subprocess: a Popen object reaps its exited child
    # when collected, and such a child was never the agent's orphan.
    stage = write_exec(tmp_path / "stage.py", f"""#!/usr/bin/python3
import os, time
if os.fork() == 0:
    pids = [os.posix_spawn("/bin/sleep", ["sleep", str(0.2 + i % 10 / 10)],
                           os.environ) for i in range(100)]
    open('{out}/orphans', 'w').write(" ".join(map(str, pids)))
    os._exit(0)
os.wait()
pids = [int(p) for p in open('{out}/orphans').read().split()]
# Gone from /proc only once the agent reaped it: a zombie stays there.
while any(os.path.exists(f"/proc/{{p}}") for p in pids):
    time.sleep(0.05)
""")
    worker = write_exec(tmp_path / "w.py", f"""#!/usr/bin/python3
import os
pids = [os.posix_spawn("/usr/bin/setsid", ["setsid", "sleep", "1000"],
                       os.environ) for _ in range(10)]
open('{out}/daemons', 'w').write(" ".join(map(str, pids)))
""")
    r = hpr.run(["--standalone", "--shutdown-timeout", "1",
                 "--pre-train-script", stage, "--no-python", worker],
                env={"LOGLEVEL": "DEBUG"}, wrapper=wrapper, timeout=120)
    assert r.rc == 0, r.describe()
    expected = set()
    for name in ("orphans", "daemons"):
        expected |= {int(p) for p in (out / name).read_text().split()}
    named = {int(line.rsplit(" ", 1)[1]) for line in r.err.splitlines()
             if "debug: reaped orphan pid " in line}
    assert len(expected) == 110
    assert expected - named == set(), r.describe()
    assert "console lines dropped" not in r.err
