"""Log rules on live workers (self-driven mode): a verdict stops and
restarts the group, and ends the job with status 124 when no restart is
left. The rule engine's own semantics are covered by tests/logmon."""

import json

from conftest import write_exec

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


def test_slow_throughput_after_n_data_points(hpr, tmp_path):
    script = worker(tmp_path, (
        "for i in range(4):\n"
        f"    print({PROGRESS!r}.format(i=i, rate=50), flush=True)\n"
        f"print({PROGRESS!r}.format(i=4, rate=120), flush=True)\n"
        "for i in range(5, 10):\n"
        f"    print({PROGRESS!r}.format(i=i, rate=50), flush=True)\n"
        "time.sleep(60)\n"))
    r = hpr.run(["--standalone", "--no-python", "--log-monitoring-config",
                 rules(tmp_path, SLOW_RULE), script], timeout=30)
    assert r.rc == 124, r.describe()
    assert "LogSlow_LowThroughputDetection" in r.err
    # Four slow points, a fast one (resets), then five: the fifth slow line
    # in a row is batch 9.
    assert "Batch 9]" in r.err, r.describe()


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
