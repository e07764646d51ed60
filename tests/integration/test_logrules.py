# SPDX-License-Identifier: Apache-2.0
"""Log rules on live workers (self-driven mode): a verdict stops and
restarts the group, and ends the job with status 124 when no restart is
left. The rule engine's own semantics are covered by tests/logmon."""

import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

from conftest import HYPERPODRUN, SOURCE_ROOT, write_exec

JOB_YAML = SOURCE_ROOT / "examples" / "rules" / "job.yaml"

# The agent's verdict line: reason, state, rule, local rank, when the
# rule's state changed on the wall clock (a hang's deadline), and how long
# after that the agent judged; for a hang, when the rule last matched.
VERDICT = re.compile(r"log rule verdict (\S+) \((\w+)\) by rule (.+?) on local "
                     r"rank (\d+) at (\S+Z): (?:.* since the last match at "
                     r"(\S+Z), )?.*; judged ([\d.]+) s later")


def epoch(iso):
    """2025-06-17T05:51:29.300Z as epoch seconds."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


PROGRESS = ("[Epoch 0 Batch {i}] {{'training_loss_step': 1.5, "
            "'samples/sec': {rate}}}")

HANG_RULE = {
    "name": "JobHangingDetection",
    "logPattern": r".*\[Epoch 0 Batch \d+.*'training_loss_step': "
                  r"(\d+(\.\d+)?).*",
    "expectedRecurringFrequencyInSeconds": 1,
    "expectedStartCutOffInSeconds": 10,
}
SLOW_RULE = {
    "name": "LowThroughputDetection",
    "logPattern": r".*\[Epoch 0 Batch \d+.*'samples\/sec': (\d+(\.\d+)?).*",
    "metricThreshold": 80,
    "operator": "lteq",
    "metricEvaluationDataPoints": 5,
}


def worker(tmp_path, body):
    """A --no-python worker; each run appends its attempt number."""
    return write_exec(tmp_path / "worker.py", "#!/usr/bin/python3\n"
                      "import os, sys, time\n"
                      "attempt = os.environ['TORCHELASTIC_RESTART_COUNT']\n"
                      "rank = os.environ['LOCAL_RANK']\n"
                      f"open({str(tmp_path / 'runs')!r}, 'a')"
                      ".write(rank + ':' + attempt + '\\n')\n" + body)


def rules(tmp_path, *items):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(list(items)))
    return path


def test_a_stalled_worker_is_restarted_then_ends_the_job(hpr, tmp_path):
    script = worker(tmp_path, (
        "for i in range(10):\n"
        f"    print({PROGRESS!r}.format(i=i, rate=99), flush=True)\n"
        "time.sleep(60)\n"))
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--max-restarts", "1", "--log-monitoring-config",
                 rules(tmp_path, HANG_RULE), script], timeout=30)
    assert r.rc == 124, r.describe()
    runs = sorted((tmp_path / "runs").read_text().split())
    assert runs == ["0:0", "0:1", "1:0", "1:1"], r.describe()
    assert "LogHang_JobHangingDetection" in r.err
    assert "Batch 9]" in r.err  # the last matching line is reported


def verdicts(result):
    return [m for m in (VERDICT.search(line) for line in
                        result.err.splitlines()) if m]


def test_a_stall_is_caught_at_the_threshold_within_100_ms(hpr, tmp_path):
    # The worker stamps each progress line with the wall clock, then
    # stalls. The rule allows 1 s between progress lines; the verdict must
    # come after that second and less than 100 ms later, measured both from
    # the worker's stamp and from the agent's own deadline.
    freq = HANG_RULE["expectedRecurringFrequencyInSeconds"]
    script = worker(tmp_path, (
        "for i in range(10):\n"
        f"    print({PROGRESS!r}.format(i=i, rate=99) +"
        " f' t={time.time():.6f}', flush=True)\n"
        "time.sleep(60)\n"))
    r = hpr.run(["--standalone", "--no-python", "--log-monitoring-config",
                 rules(tmp_path, HANG_RULE), script], timeout=30)
    assert r.rc == 124, r.describe()
    stamps = [float(t) for t in re.findall(r"Batch 9\].* t=([\d.]+)",
                                           r.out)]
    found = verdicts(r)
    assert len(found) == 1 and len(stamps) == 1, r.describe()
    verdict = found[0]
    assert verdict.group(1) == "LogHang_JobHangingDetection", r.describe()
    assert verdict.group(2) == "HANGING", r.describe()
    assert verdict.group(3) == "JobHangingDetection", r.describe()
    due, last_match = epoch(verdict.group(5)), epoch(verdict.group(6))
    judged = due + float(verdict.group(7))
    # From the worker's clock: never early, less than 100 ms late (the
    # wall clock is read in ms on both sides: 2 ms of rounding).
    late = judged - stamps[0] - freq
    assert -0.002 <= late < 0.100, f"{late * 1000:.1f} ms late\n{r.describe()}"
    # From the agent's own clock: the deadline is the last match plus the
    # frequency plus 1 ms (cut-offs are strict), and the verdict follows it.
    assert abs(due - (last_match + freq + 0.001)) < 0.0005, r.describe()
    assert 0 <= judged - due < 0.100, r.describe()
    assert last_match >= stamps[0] - 0.002, r.describe()


def test_slow_throughput_restarts_after_n_data_points(hpr, tmp_path):
    # Four slow points, a fast one (which resets the count), then twenty
    # slow ones written at once: the verdict names the fifth slow line in
    # a row, batch 9, in both attempts.
    script = worker(tmp_path, (
        "for i in range(4):\n"
        f"    print({PROGRESS!r}.format(i=i, rate=50), flush=True)\n"
        f"print({PROGRESS!r}.format(i=4, rate=120), flush=True)\n"
        "for i in range(5, 25):\n"
        f"    print({PROGRESS!r}.format(i=i, rate=50))\n"
        "sys.stdout.flush()\n"
        "time.sleep(60)\n"))
    r = hpr.run(["--standalone", "--no-python", "--max-restarts", "1",
                 "--log-monitoring-config", rules(tmp_path, SLOW_RULE),
                 script], timeout=30)
    assert r.rc == 124, r.describe()
    runs = sorted((tmp_path / "runs").read_text().split())
    assert runs == ["0:0", "0:1"], r.describe()
    lines = [line for line in r.err.splitlines()
             if "log rule verdict LogSlow_LowThroughputDetection" in line]
    assert len(lines) == 2, r.describe()
    for line in lines:
        assert line.endswith("[Epoch 0 Batch 9] {'training_loss_step': "
                             "1.5, 'samples/sec': 50}"), r.describe()


def job_yaml_worker(tmp_path, loss):
    """Prints what the job.yaml rules look for: the experiment banner,
    then loss lines in LossSpikeDetection's format, then exits 0."""
    return worker(tmp_path, (
        "print('2025-06-17 05:51:29,300 INFO Experiment configuration: "
        "{}', flush=True)\n"
        "for i in range(8):\n"
        f"    print(f'2025-06-17 05:51:3{{i}},000 INFO step {{i}} "
        f"training_loss_step {loss}', flush=True)\n"))


def test_job_yaml_from_examples_end_to_end(hpr, tmp_path):
    # A loss stuck above 2.0 for 5 steps: LossSpikeDetection of the
    # examples' job.yaml ends the job, and replaying rank 0's stdout.log
    # through the same file comes to the same verdict.
    script = job_yaml_worker(tmp_path, "2.75")
    r = hpr.run(["--standalone", "--no-python", "--tee", "3",
                 "--log-monitoring-config", JOB_YAML, script], timeout=30)
    assert r.rc == 124, r.describe()
    assert [m.group(1) for m in verdicts(r)] == [
        "LogSlow_LossSpikeDetection"], r.describe()
    log = hpr.only_train_dir() / "attempt_0" / "0" / "stdout.log"
    replay = subprocess.run([HYPERPODRUN, "--replay", str(log),
                             "--log-monitoring-config", str(JOB_YAML)],
                            capture_output=True, text=True, timeout=30,
                            env=hpr.env)
    assert replay.returncode == 0, replay.stderr
    summary = json.loads(replay.stdout.splitlines()[-1])["summary"]
    assert summary["streams"][0]["reason"] == "LogSlow_LossSpikeDetection"

    # The same worker with a healthy loss runs to completion.
    script = job_yaml_worker(tmp_path, "1.25")
    r = hpr.run(["--standalone", "--no-python", "--log-monitoring-config",
                 JOB_YAML, script], timeout=30)
    assert r.rc == 0, r.describe()
    assert verdicts(r) == [], r.describe()


def test_healthy_job_with_rules_succeeds(hpr, tmp_path):
    script = worker(tmp_path, (
        "for i in range(5):\n"
        f"    print({PROGRESS!r}.format(i=i, rate=99), flush=True)\n"))
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--log-monitor-ranks", "all", "--log-monitoring-config",
                 rules(tmp_path, HANG_RULE, SLOW_RULE), script], timeout=30)
    assert r.rc == 0, r.describe()


def test_monitored_rank_is_chosen(hpr, tmp_path):
    # Rank 1 stalls without ever printing progress; only watching rank 1
    # catches it (its start cut-off), rank 0 alone finishes happily.
    script = worker(tmp_path, (
        "if rank == '1':\n"
        "    time.sleep(60)\n"
        f"print({PROGRESS!r}.format(i=0, rate=99), flush=True)\n"))
    rule = dict(HANG_RULE, expectedStartCutOffInSeconds=1)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--log-monitor-ranks", "1", "--log-monitoring-config",
                 rules(tmp_path, rule), script], timeout=30)
    assert r.rc == 124, r.describe()
    assert "local rank 1" in r.err, r.describe()


def test_bad_rules_are_refused_before_anything_runs(hpr, tmp_path):
    script = worker(tmp_path, "print('ran')\n")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "x", "logPattern": "(unclosed"}]))
    r = hpr.run(["--standalone", "--no-python", "--log-monitoring-config",
                 bad, script], timeout=30)
    assert r.rc == 2, r.describe()
    assert "bad.json" in r.err and "logPattern" in r.err, r.describe()
    assert not (tmp_path / "runs").exists()
    r = hpr.run(["--standalone", "--no-python", "--log-monitor-ranks", "0",
                 script], timeout=30)
    assert r.rc == 2 and "--log-monitoring-config" in r.err, r.describe()


# ---- Floods: past HP_RULE_INLINE_MAX lines a loop iteration, the rules run
# on a thread of their own; nothing may change for the user. ---------------

FLOOD = 20000


def flood_worker(tmp_path, special_at, special_rate, special_rank=0,
                 count=FLOOD):
    """Writes count progress lines with one write (so that the agent reads
    hundreds of lines at a time), the line special_at with special_rate on
    local rank special_rank, then exits 0."""
    return worker(tmp_path, (
        f"lines = [{PROGRESS!r}.format(i=i, rate={special_rate} if i == "
        f"{special_at} and rank == '{special_rank}' else 120)"
        f" for i in range({count})]\n"
        "sys.stdout.write('\\n'.join(lines) + '\\n')\n"
        "sys.stdout.flush()\n"))


def test_a_slow_line_inside_a_flood_is_the_verdict(hpr, tmp_path):
    # One slow line among 20,000 healthy ones, with one data point: the
    # rule is SLOW for exactly one line, and the next turns it HEALTHY
    # again. The verdict must still be taken, on that line, though the
    # workers exit 0 right after.
    rule = dict(SLOW_RULE, metricEvaluationDataPoints=1)
    script = flood_worker(tmp_path, 15000, 50)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--log-monitoring-config", rules(tmp_path, rule), script],
                timeout=60)
    assert r.rc == 124, r.describe()
    found = verdicts(r)
    assert [m.group(1, 4) for m in found] == [
        ("LogSlow_LowThroughputDetection", "0")], r.describe()
    assert ("[Epoch 0 Batch 15000] {'training_loss_step': 1.5, "
            "'samples/sec': 50}") in r.err, r.describe()


def test_a_flood_on_every_rank_names_the_rank_of_the_verdict(hpr, tmp_path):
    rule = dict(SLOW_RULE, metricEvaluationDataPoints=1)
    script = flood_worker(tmp_path, FLOOD - 2, 50, special_rank=2)
    r = hpr.run(["--standalone", "--nproc-per-node", "4", "--no-python",
                 "--log-monitor-ranks", "all", "--log-monitoring-config",
                 rules(tmp_path, rule), script], timeout=60)
    assert r.rc == 124, r.describe()
    found = verdicts(r)
    assert [m.group(1, 4) for m in found] == [
        ("LogSlow_LowThroughputDetection", "2")], r.describe()
    assert f"[Epoch 0 Batch {FLOOD - 2}]" in r.err, r.describe()


def test_a_fault_on_the_last_line_of_a_flood_ends_the_job(hpr, tmp_path):
    # 200,000 lines (14 MB) at once: when the worker exits, the rules are
    # still behind the reads, and the stage's end must wait for them before
    # it judges the attempt. One rank: a verdict stops the others, which
    # would cut their floods short.
    count = 10 * FLOOD
    rule = {"name": "Fault", "logPattern": r".*'samples/sec': 7\b.*",
            "faultOnMatch": True}
    script = flood_worker(tmp_path, count - 1, 7, count=count)
    r = hpr.run(["--standalone", "--nproc-per-node", "1", "--no-python",
                 "--tee", "3", "--log-monitoring-config",
                 rules(tmp_path, rule), script], timeout=60)
    assert r.rc == 124, r.describe()
    assert [m.group(1, 4) for m in verdicts(r)] == [
        ("LogFault_Fault", "0")], r.describe()
    # The console may drop lines it cannot keep up with; the file has
    # every one.
    log = hpr.only_train_dir() / "attempt_0" / "0" / "stdout.log"
    assert log.read_bytes().count(b"\n") == count


def test_a_first_match_inside_a_flood_arms_the_hang_deadline(hpr, tmp_path):
    # The start cut-off is 600 s; the rule's first match, deep inside a
    # flood (on a rule thread, as a rule runs after HP_RULE_INLINE_MAX
    # lines), trades it for the 1 s recurring frequency. The worker then
    # stays silent: the hang must be caught about a second later, not at
    # the cut-off, so the earlier deadline has to reach the loop's timer.
    rule = dict(HANG_RULE, expectedStartCutOffInSeconds=600)
    script = worker(tmp_path, (
        "noise = ['{} INFO dataloader prefetched shard'.format(i)"
        f" for i in range({FLOOD})]\n"
        f"lines = [{PROGRESS!r}.format(i=i, rate=120) for i in range(2000)]\n"
        "sys.stdout.write('\\n'.join(noise + lines) + '\\n')\n"
        "sys.stdout.flush()\n"
        "time.sleep(60)\n"))
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--log-monitor-ranks", "all", "--log-monitoring-config",
                 rules(tmp_path, rule), script], timeout=20)
    assert r.rc == 124, r.describe()
    assert [m.group(1) for m in verdicts(r)] == [
        "LogHang_JobHangingDetection"], r.describe()
    assert "Batch 1999]" in r.err, r.describe()


def test_a_healthy_flood_succeeds(hpr, tmp_path):
    script = flood_worker(tmp_path, -1, 50)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--log-monitor-ranks", "all", "--log-monitoring-config",
                 rules(tmp_path, SLOW_RULE, HANG_RULE), script], timeout=60)
    assert r.rc == 0, r.describe()
    assert verdicts(r) == [], r.describe()


def thread_sched(pid):
    """{tid: (nice, policy)} of a live process's threads, from /proc."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        # Fields 19 and 41 are the nice value and the scheduling policy;
        # the fields after the command's closing parenthesis start at
        # field 3.
        fields = stat.rsplit(")", 1)[1].split()
        out[int(task.name)] = (int(fields[16]), int(fields[38]))
    return out


def test_rule_threads_run_below_the_loop_priority(hpr, tmp_path):
    # In a flood the rules run on threads with a nice value 3 above the
    # agent's and the SCHED_BATCH policy, so that the thread that reads
    # the pipes is never kept waiting by them nor preempted when it wakes
    # them; the loop thread itself keeps the agent's priority and policy.
    # The workers flood, then stay until the agent is stopped.
    script = worker(tmp_path, (
        f"lines = [{PROGRESS!r}.format(i=i, rate=120) for i in range({FLOOD})]\n"
        "sys.stdout.write('\\n'.join(lines) + '\\n')\n"
        "sys.stdout.flush()\n"
        "time.sleep(60)\n"))
    p = hpr.start(["--standalone", "--nproc-per-node", "2", "--no-python",
                   "--log-monitor-ranks", "all", "--log-monitoring-config",
                   rules(tmp_path, SLOW_RULE), script])
    # One rule thread per core, up to the ranks watched.
    want = min(len(os.sched_getaffinity(0)), 2)
    base = os.getpriority(os.PRIO_PROCESS, p.pid)
    rule_thread = (base + 3, os.SCHED_BATCH)
    deadline = time.monotonic() + 20
    threads = {}
    while time.monotonic() < deadline and p.poll() is None:
        threads = thread_sched(p.pid)
        if list(threads.values()).count(rule_thread) == want:
            break
        time.sleep(0.01)
    p.signal(signal.SIGTERM)
    r = p.wait(30)
    assert threads.get(p.pid) == (base, os.SCHED_OTHER), (threads, r.describe())
    assert list(threads.values()).count(rule_thread) == want, (threads, r.describe())
    assert all(t in ((base, os.SCHED_OTHER), rule_thread)
               for t in threads.values()), threads
