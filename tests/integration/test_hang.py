# SPDX-License-Identifier: Apache-2.0
"""Hang reports: on a rule verdict, which rank went silent first and where
every rank was (Python stacks, /proc states), before the stop; on SIGUSR2,
the same without a stop. Real PyTorch gloo workers on loopback."""

import json
import os
import re
import signal

import pytest

from conftest import deadline_poll, have_torch, write_exec

HANG_RULE = {
    "name": "JobHangingDetection",
    "logPattern": r".*\[Epoch 0 Batch \d+.*'training_loss_step': "
                  r"(\d+(\.\d+)?).*",
    "expectedRecurringFrequencyInSeconds": 2,
    "expectedStartCutOffInSeconds": 120,
}
PROGRESS = "[Epoch 0 Batch {step}] {{'training_loss_step': 1.5}}"

# Rank 2 stops in its first attempt after three steps, in time.sleep on
# the marked line, while the others wait for it in the next all_reduce.
# The second attempt runs to the end.
TRAIN = """\
import os, signal, sys, time
import torch
import torch.distributed as dist

signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # forwarded by the agent
dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
steps = int(sys.argv[1])
t = torch.ones(4)
for step in range(steps):
    dist.all_reduce(t)
    time.sleep(0.3)
    if rank == 2 and step == 3 and attempt == 0 and sys.argv[2] == "hang":
        time.sleep(3600)  # HANGS HERE
    print(PROGRESS.format(step=step), flush=True)
dist.destroy_process_group()
"""

STACK_HEADER = "most recent call first"


def train_script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(f"PROGRESS = {PROGRESS!r}\n" + TRAIN)
    line = next(i for i, text in
                enumerate(path.read_text().splitlines(), 1)
                if "HANGS HERE" in text)
    return path, line


def rules(tmp_path, every_s=2):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(
        [dict(HANG_RULE, expectedRecurringFrequencyInSeconds=every_s)]))
    return path


def read_report(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def all_logs(run_dir):
    return b"".join(p.read_bytes() for p in run_dir.rglob("*.log"))


def leftover_python_dirs(hpr):
    return [p for p in hpr.tmpdir.iterdir()
            if p.name.startswith("hyperpodrun-py-")]


@pytest.mark.skipif(not have_torch(), reason="/usr/bin/python3 has no torch")
def test_gloo_hang_names_the_silent_rank_and_where_each_rank_was(hpr,
                                                                 tmp_path):
    script, hang_line = train_script(tmp_path)
    # 5 s between progress lines: on a loaded machine, gloo's steps and
    # torch's teardown after the last line of the second attempt can take
    # more than 2 s, which the rule would rightly call a second hang.
    r = hpr.run(["--standalone", "--nproc-per-node", "4", "--max-restarts",
                 "1", "--tee", "3", "--log-monitoring-config",
                 rules(tmp_path, every_s=5), script, 8, "hang"],
                timeout=180)
    # The hang was stopped, the group restarted, and the second attempt
    # finished.
    assert r.rc == 0, r.describe()
    assert "LogHang_JobHangingDetection: restarting the worker group" in r.err

    # Who went silent: rank 2, a step before the others.
    silent = re.search(r"who went silent: (.*)", r.err)
    assert silent, r.describe()
    assert re.match(r"rank 2 silent since \d\d:\d\d:\d\d\.\d{3} \([\d.]+ s "
                    r"before the verdict, [\d.]+ s before the others\); "
                    r"ranks 0-1,3 silent since ", silent.group(1)), \
        silent.group(1)

    run_dir = hpr.only_train_dir()
    report = read_report(run_dir / "attempt_0" / "hang-report.json")
    assert report["reason"] == "verdict"
    assert report["verdict"] == "LogHang_JobHangingDetection"
    assert report["rule"] == "JobHangingDetection"
    assert report["silence"] == silent.group(1)
    assert report["attempt"] == 0 and report["stage"] == "train"
    ranks = report["ranks"]
    assert [x["rank"] for x in ranks][0] == 2
    assert sorted(x["rank"] for x in ranks) == [0, 1, 2, 3]
    assert ranks[0]["silent_s"] > ranks[1]["silent_s"]
    for x in ranks:
        py = x["python"]
        assert py["status"] == "complete", x
        assert py["pid"] == x["pid"]
        assert STACK_HEADER in py["stacks"]
        worker = x["processes"][0]
        assert worker["pid"] == x["pid"]
        assert worker["threads"][0]["tid"] == x["pid"]
        assert all(t["state"] for t in worker["threads"])
    # Rank 2 in time.sleep on the marked line; the others in all_reduce.
    assert f'File "{script}", line {hang_line} in <module>' in \
        ranks[0]["python"]["stacks"]
    assert ranks[0]["processes"][0]["threads"][0]["wchan"] == \
        "hrtimer_nanosleep"
    for x in ranks[1:]:
        assert " in all_reduce" in x["python"]["stacks"], x["python"]
    # The human summary: one line per rank.
    assert re.search(rf'hang report: rank 2 \(local 2, pid \d+\): S in '
                     rf'hrtimer_nanosleep; Python: File "{re.escape(str(script))}", '
                     rf'line {hang_line} in <module>', r.err), r.describe()
    assert len(re.findall(r"hang report: rank \d", r.err)) == 4

    # The stacks went to the report only: not to the console, not to the
    # log files the rules and --replay read.
    assert STACK_HEADER not in r.out and STACK_HEADER not in r.err
    assert STACK_HEADER.encode() not in all_logs(run_dir)
    assert not (run_dir / "attempt_1" / "hang-report.json").exists()
    assert leftover_python_dirs(hpr) == []


def test_no_python_hang_reports_process_states(hpr, tmp_path):
    # Rank 1 stops after two lines, in a child `sleep`; rank 0 goes on a
    # little, then stops too, which the rule on rank 0 judges.
    script = write_exec(tmp_path / "worker.sh", (
        "#!/bin/sh\n"
        "n=6; [ \"$LOCAL_RANK\" = 1 ] && n=2\n"
        "i=0\n"
        "while [ $i -lt $n ]; do\n"
        "  echo \"[Epoch 0 Batch $i] {'training_loss_step': 1.5}\"\n"
        "  i=$((i + 1)); sleep 0.2\n"
        "done\n"
        "exec sleep 3600\n"))
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--log-monitoring-config", rules(tmp_path), script],
                timeout=60)
    assert r.rc == 124, r.describe()
    report = read_report(hpr.only_train_dir() / "attempt_0" /
                         "hang-report.json")
    assert report["silence"].startswith("rank 1 silent since "), report
    ranks = report["ranks"]
    assert [x["rank"] for x in ranks] == [1, 0]
    for x in ranks:
        assert x["python"]["status"] == "no handler"
        assert "stacks" not in x["python"]
        worker = x["processes"][0]
        assert worker["pid"] == x["pid"]
        assert worker["comm"] == "sleep"  # the shell exec'd it
        assert worker["threads"][0]["state"] == "S"
        assert worker["threads"][0]["wchan"] == "hrtimer_nanosleep"
    assert re.search(r"hang report: rank 1 \(local 1, pid \d+\): S in "
                     r"hrtimer_nanosleep$", r.err, re.M), r.describe()
    assert "Python stacks from 0 of 0 Python workers" in r.err


def test_full_adds_kernel_stacks_of_every_process_in_the_group(hpr, tmp_path):
    script = write_exec(tmp_path / "worker.sh", (
        "#!/bin/sh\n"
        "echo \"[Epoch 0 Batch 0] {'training_loss_step': 1.5}\"\n"
        "sleep 3600 &\n"
        "wait\n"))
    r = hpr.run(["--standalone", "--no-python", "--hang-dump", "full",
                 "--log-monitoring-config", rules(tmp_path), script],
                timeout=60)
    assert r.rc == 124, r.describe()
    report = read_report(hpr.only_train_dir() / "attempt_0" /
                         "hang-report.json")
    assert report["hang_dump"] == "full"
    procs = report["ranks"][0]["processes"]
    assert [p["comm"] for p in procs] == ["worker.sh", "sleep"], procs
    assert procs[1]["ppid"] == procs[0]["pid"]
    # Readable as root only (elsewhere the key is absent).
    if os.geteuid() == 0:
        assert "hrtimer_nanosleep+0x" in \
            procs[1]["threads"][0]["kernel_stack"], procs
        assert re.match(r"\[<0>\] \w+(\.\w+)*\+0x[0-9a-f]+/0x[0-9a-f]+",
                        procs[0]["threads"][0]["kernel_stack"]), procs


@pytest.mark.skipif(not have_torch(), reason="/usr/bin/python3 has no torch")
def test_sigusr2_writes_a_report_and_the_job_goes_on(hpr, tmp_path):
    script, _ = train_script(tmp_path)
    p = hpr.start(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                   script, 30, "run"])
    deadline_poll(lambda: b"Batch 2]" in p.console_out() or p.poll(),
                  timeout=120, what="the job's third step")
    p.signal(signal.SIGUSR2)
    report_path = []

    def written():
        found = list(hpr.log_dir.glob("*/attempt_0/stacks-report-1.json"))
        report_path[:] = found
        return found or p.poll() is not None

    deadline_poll(written, timeout=30, what="stacks-report-1.json")
    r = p.wait(120)
    # The dump did not disturb the workers: every step ran.
    assert r.rc == 0, r.describe()
    assert r.out.count("Batch 29]") == 2, r.describe()
    assert report_path, r.describe()
    report = read_report(report_path[0])
    assert report["reason"] == "request" and "verdict" not in report
    assert sorted(x["rank"] for x in report["ranks"]) == [0, 1]
    for x in report["ranks"]:
        assert x["python"]["status"] == "complete", x
        assert " in <module>" in x["python"]["stacks"]
    assert STACK_HEADER not in r.out and STACK_HEADER not in r.err


def test_the_users_sitecustomize_still_runs(hpr, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text(
        "import os\nos.environ['OWN_SITECUSTOMIZE'] = 'ran'\n")
    script = tmp_path / "show.py"
    script.write_text(
        "import os, sys\n"
        "print('own:', os.environ.get('OWN_SITECUSTOMIZE'))\n"
        "print('signal var:', os.environ.get('HYPERPODRUN_STACKS_SIGNAL'))\n"
        "print('path0:', os.environ['PYTHONPATH'].split(':')[0])\n"
        "print('path1:', os.environ['PYTHONPATH'].split(':')[1])\n"
        "fds = os.listdir('/proc/self/fd')\n"
        "links = [os.readlink('/proc/self/fd/' + f) for f in fds\n"
        "         if os.path.exists('/proc/self/fd/' + f)]\n"
        "print('memfd:', any('hyperpodrun-stacks' in f for f in links))\n")
    r = hpr.run(["--standalone", "--tee", "3", script],
                env={"PYTHONPATH": own})
    assert r.rc == 0, r.describe()
    assert "own: ran" in r.out
    assert "signal var: None" in r.out  # taken by our sitecustomize
    assert f"path1: {own}" in r.out
    assert re.search(rf"path0: {re.escape(str(hpr.tmpdir))}/hyperpodrun-py-",
                     r.out), r.out
    assert "memfd: True" in r.out
    assert leftover_python_dirs(hpr) == []


def test_hang_dump_off_leaves_the_environment_alone(hpr, tmp_path):
    script = write_exec(tmp_path / "worker.sh", (
        "#!/bin/sh\n"
        "echo \"pythonpath=${PYTHONPATH-unset} "
        "signal=${HYPERPODRUN_STACKS_SIGNAL-unset}\"\n"
        "echo \"[Epoch 0 Batch 0] {'training_loss_step': 1.5}\"\n"
        "exec sleep 3600\n"))
    r = hpr.run(["--standalone", "--no-python", "--tee", "3", "--hang-dump",
                 "off", "--log-monitoring-config", rules(tmp_path), script],
                unset=("PYTHONPATH",), timeout=60)
    assert r.rc == 124, r.describe()
    assert "pythonpath=unset signal=unset" in r.out
    # The silence line is still logged; no report is written.
    assert "who went silent: rank 0 silent since" in r.err
    assert not list(hpr.log_dir.rglob("hang-report.json"))
    assert "hang report" not in r.err


def test_bad_hang_dump_value_is_named(hpr):
    r = hpr.run(["--standalone", "--hang-dump", "everything", "--no-python",
                 "true"])
    assert r.rc == 2, r.describe()
    assert "everything" in r.err and "--hang-dump" in r.err
    assert "off, stacks, full" in r.err


def test_a_worker_that_does_not_answer_delays_the_stop_only_until_the_timeout(
        hpr, tmp_path):
    # The worker ignores the stack signal: its dump never comes, and the
    # stop must still follow, once --hang-dump-timeout is over.
    script = tmp_path / "deaf.py"
    script.write_text(
        "import signal, time\n"
        "signal.signal(signal.SIGRTMIN + 6, signal.SIG_IGN)\n"
        "print(\"[Epoch 0 Batch 0] {'training_loss_step': 1.5}\", flush=True)\n"
        "time.sleep(3600)\n")
    r = hpr.run(["--standalone", "--hang-dump-timeout", "1",
                 "--log-monitoring-config", rules(tmp_path), script],
                timeout=60)
    assert r.rc == 124, r.describe()
    report = read_report(hpr.only_train_dir() / "attempt_0" /
                         "hang-report.json")
    rank = report["ranks"][0]
    assert rank["python"]["status"] == "no answer", rank
    assert "stacks" not in rank["python"]
    assert report["collect_ms"] >= 1000, report
    assert "Python stacks from 0 of 1 Python worker," in r.err


def test_a_worker_failure_logs_who_went_silent(hpr, tmp_path):
    # Rank 1 stops writing, then fails a second later; rank 0 is blocked.
    script = write_exec(tmp_path / "worker.sh", (
        "#!/bin/sh\n"
        "echo start\n"
        "if [ \"$LOCAL_RANK\" = 1 ]; then sleep 1; exit 3; fi\n"
        "exec sleep 3600\n"))
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 script], timeout=60)
    assert r.rc == 3, r.describe()
    # Rank 1 is gone, not silent: named with how it ended; rank 0 is the
    # one left to compare.
    assert re.search(r"who went silent: rank 1 exited with code 3 at "
                     r"[\d:.]+ \([\d.]+ s before the failure\); rank 0 "
                     r"silent since [\d:.]+ \([\d.]+ s before the failure\)",
                     r.err), r.describe()
    assert "collective" not in r.err.split("who went silent:")[1] \
        .split("\n")[0], r.describe()


def test_stacks_thread_takes_no_signal_but_its_own(hpr, tmp_path):
    """The thread our sitecustomize starts in each Python worker blocks
    every signal but the stacks signal (and the synchronous ones): a
    SIGTERM sent to the worker lands on the worker's own threads, so its
    handler runs at once instead of when a sleeping main thread wakes."""
    out = tmp_path / "o"
    out.mkdir()
    script = write_exec(tmp_path / "w.py", f"""#!/usr/bin/python3
import os, time
open('{out}/pid.tmp', 'w').write(str(os.getpid()))
os.rename('{out}/pid.tmp', '{out}/pid')
time.sleep(1000)
""")
    proc = hpr.start(["--standalone", "--shutdown-timeout", "1", script])
    pid = int(deadline_poll(lambda: (out / "pid").exists() and
                            (out / "pid").read_text(), 60, what="the pid"))

    bit = lambda sig: 1 << (sig - 1)

    def masks():
        found = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            status = open(f"/proc/{pid}/task/{tid}/status").read()
            found[int(tid)] = int(re.search(r"SigBlk:\s*([0-9a-f]+)",
                                            status).group(1), 16)
        # glibc starts a thread with every signal blocked and sets its own
        # mask a moment later (seen on a loaded machine): wait for that,
        # which leaves SIGSEGV open.
        if len(found) < 2 or any(m & bit(signal.SIGSEGV)
                                 for tid, m in found.items() if tid != pid):
            return None
        return found
    found = deadline_poll(masks, 60, what="the stacks thread's own mask")
    assert found[pid] & bit(signal.SIGTERM) == 0
    others = [m for tid, m in found.items() if tid != pid]
    assert len(others) == 1, found
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1,
                signal.SIGUSR2, signal.SIGCHLD):
        assert others[0] & bit(sig), (sig, hex(others[0]))
    assert others[0] & bit(signal.SIGSEGV) == 0
    proc.signal(signal.SIGTERM)
    r = proc.wait(30)
    assert r.rc == 143, r.describe()
