# SPDX-License-Identifier: Apache-2.0
"""The rank monitor end to end: real Python workers with the
hyperpodrun_client.fault_tolerance client (ft's RankMonitorClient names),
the agent's --ft-* flags, its verdicts and the straggler windows; torch
gloo for the computed timeouts that a restart keeps."""

import json
import math
import re
import subprocess
import urllib.request

import pytest

from conftest import PYTHON, SOURCE_ROOT, deadline_poll, have_torch, helper
from test_operator import free_port

WORKER = helper("ft_worker.py")


def ft_env(mode, **kw):
    env = {"PYTHONPATH": SOURCE_ROOT / "python", "FT_MODE": mode}
    env.update({k: str(v) for k, v in kw.items()})
    return env


def run(hpr, nproc, flags, env, timeout=90.0):
    return hpr.run(["--standalone", "--nproc-per-node", nproc, *flags,
                    WORKER], env=env, timeout=timeout)


def test_a_rank_that_stops_heartbeating_but_prints_is_named(hpr):
    r = run(hpr, 2, ["--ft-rank-heartbeat-timeout", "1",
                     "--ft-initial-rank-heartbeat-timeout", "30",
                     "--max-restarts", "0", "--redirects", "1"],
            ft_env("stop_hb", FT_BAD=1, FT_PERIOD=0.05))
    assert r.rc == 124, r.describe()
    assert re.search(r"rank monitor verdict RankHeartbeatTimeout: Local rank "
                     r"1 \(rank 1\) sent no heartbeat for 1\.000 s",
                     r.err), r.describe()
    # It kept printing after its last heartbeat: log lines alone would not
    # have told.
    rank1 = (hpr.only_train_dir() / "attempt_0" / "1" / "stdout.log")
    beats = [l for l in rank1.read_text().splitlines()
             if l.startswith("beat ")]
    assert len(beats) > 10, r.describe()
    report = json.loads(next(hpr.only_train_dir().glob(
        "attempt_0/hang-report.json")).read_text())
    assert report["verdict"] == "RankHeartbeatTimeout"
    assert report["verdict_local_rank"] == 1


def test_a_section_left_open_is_named(hpr):
    r = run(hpr, 2, ["--ft-rank-section-timeouts", "step:1,setup:600",
                     "--max-restarts", "0"],
            ft_env("section", FT_BAD=0, FT_PERIOD=0.05))
    assert r.rc == 124, r.describe()
    assert re.search(r"rank monitor verdict RankSectionTimeout_step: Section "
                     r"step of local rank 0 \(rank 0\) was open for 1\.000 s",
                     r.err), r.describe()
    assert "section left open" in r.out


def test_a_healthy_job_passes(hpr):
    r = run(hpr, 2, ["--ft-rank-heartbeat-timeout", "5",
                     "--ft-initial-rank-heartbeat-timeout", "30",
                     "--ft-rank-section-timeouts", "step:5",
                     "--ft-rank-out-of-section-timeout", "5"],
            ft_env("healthy", FT_STEPS=20, FT_PERIOD=0.02))
    assert r.rc == 0, r.describe()
    assert "verdict" not in r.err, r.describe()
    assert r.out.count("step 19") == 2


def test_a_rank_whose_client_ended_is_not_judged(hpr):
    # Rank 1 shuts its client down early and exits 0; rank 0 goes on past
    # rank 1's timeout without a verdict.
    r = run(hpr, 2, ["--ft-rank-heartbeat-timeout", "1"],
            ft_env("healthy", FT_STEPS=5, FT_PERIOD=0.4))
    assert r.rc == 0, r.describe()
    assert "verdict" not in r.err, r.describe()


@pytest.mark.skipif(not have_torch(), reason="no torch.distributed")
def test_a_restart_keeps_the_computed_timeouts(hpr, tmp_path):
    state = tmp_path / "ft_state.json"
    r = run(hpr, 2, ["--ft-rank-heartbeat-timeout", "120",
                     "--ft-initial-rank-heartbeat-timeout", "120",
                     "--ft-safety-factor", "5", "--max-restarts", "1"],
            ft_env("compute", FT_TORCH=1, FT_STEPS=10, FT_PERIOD=0.05,
                   FT_STATE=state),
            timeout=150.0)
    assert r.rc == 124, r.describe()
    saved = json.loads(state.read_text())["current_timeouts"]["heartbeat"]
    assert saved["were_calculated"] is True
    sub = saved["subsequent"]
    # The max interval over both ranks (gloo all-reduce) times 5.
    assert 5 * 0.05 <= sub < 120, saved
    shown = f"{math.ceil(sub * 1000) / 1000:.3f}"
    verdicts = re.findall(r"RankHeartbeatTimeout: Local rank \d \(rank \d\) "
                          r"sent no heartbeat for (\S+) s", r.err)
    # One per attempt, both at the computed timeout, not the flag's 120 s.
    assert verdicts == [shown, shown], r.describe()
    assert "were_calculated=True" in r.out, r.describe()


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                timeout=5) as resp:
        text = resp.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        name + r'\{local_rank="(\d+)"\} (\S+)', text)}


def test_a_quarter_rate_rank_is_a_straggler(hpr):
    port = free_port()
    p = hpr.start(["--standalone", "--nproc-per-node", 4,
                   "--server-port", port, "--server-host", "127.0.0.1",
                   "--straggler-ratio", "0.5", "--straggler-windows", "2",
                   "--straggler-window", "1", WORKER],
                  env=ft_env("straggler", FT_BAD=3, FT_STEPS=300,
                             FT_PERIOD=0.05))
    seen = {}

    def slow_in_metrics():
        try:
            seen.update(metric(port, "hyperpodrun_rank_relative_speed"))
        except OSError:
            return False
        return "3" in seen and seen["3"] < 0.5

    deadline_poll(slow_in_metrics, timeout=60, interval=0.2,
                  what="rank 3's relative speed below 0.5 in /metrics")
    r = p.wait(90)
    assert r.rc == 0, r.describe()
    assert re.search(r"straggler: local rank 3 \(rank 3\) ran at 0\.\d+ of "
                     r"the median rate of the ranks for 2 windows", r.err), \
        r.describe()
    assert not re.search(r"straggler: local rank [012]", r.err), r.describe()


def test_a_straggler_verdict_when_asked(hpr):
    r = run(hpr, 4, ["--straggler-ratio", "0.5", "--straggler-windows", "2",
                     "--straggler-window", "1", "--straggler-action",
                     "verdict", "--max-restarts", "0"],
            ft_env("straggler", FT_BAD=2, FT_STEPS=600, FT_PERIOD=0.05))
    assert r.rc == 124, r.describe()
    assert "rank monitor verdict RankStraggler: Local rank 2 (rank 2) is a " \
        "straggler" in r.err, r.describe()


def test_without_an_agent_init_is_a_clear_error(tmp_path):
    code = ("import hyperpodrun_client.fault_tolerance as ft\n"
            "c = ft.RankMonitorClient()\n"
            "try:\n"
            "    c.init_workload_monitoring()\n"
            "except ft.RankMonitorClientError as e:\n"
            "    print('error:', e)\n")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True,
                         text=True, timeout=60,
                         env={"PYTHONPATH": str(SOURCE_ROOT / "python")})
    assert "error: HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH is not set" \
        in out.stdout, out


def test_a_hang_rule_on_rank_0_of_several_warns(hpr, tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{
        "name": "Progress", "logPattern": ".*step.*",
        "expectedRecurringFrequencyInSeconds": 600}]))
    r = run(hpr, 2, ["--log-monitoring-config", rules],
            ft_env("healthy", FT_STEPS=2, FT_PERIOD=0.01))
    assert r.rc == 0, r.describe()
    assert "hang rule Progress watches local rank 0 only of 2 ranks" in r.err


def test_a_dead_agents_segment_goes_and_a_live_ones_stays(hpr, tmp_path):
    import fcntl
    import os
    import tempfile
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else str(hpr.tmpdir)
    dead = tempfile.mkdtemp(prefix="hyperpodrun-ft-4194304.", dir=base)
    live = tempfile.mkdtemp(prefix="hyperpodrun-ft-4194305.", dir=base)
    for d in (dead, live):
        open(os.path.join(d, "slots"), "w").close()
    held = open(os.path.join(live, "slots"), "r+")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        r = run(hpr, 1, [], ft_env("healthy", FT_STEPS=2, FT_PERIOD=0.01))
        assert r.rc == 0, r.describe()
        assert not os.path.exists(dead), r.describe()
        assert f"rank monitor: removed {dead}" in r.err
        assert os.path.exists(os.path.join(live, "slots"))
    finally:
        held.close()
        for d in (dead, live):
            if os.path.exists(os.path.join(d, "slots")):
                os.unlink(os.path.join(d, "slots"))
            if os.path.exists(d):
                os.rmdir(d)


def test_operator_mode_faults_with_the_monitors_reason(hpr, tmp_path):
    from test_operator import Agent
    a = Agent(hpr, tmp_path, nproc=2, script=WORKER,
              args=["--ft-rank-section-timeouts", "step:1"],
              env=ft_env("section", FT_BAD=1, FT_PERIOD=0.05))
    a.wait_status("ready")
    a.start()
    st = a.wait_status("faulted", timeout=60)
    assert st["reason"] == "RankSectionTimeout_step", st
    assert st["message"].startswith(
        "Section step of local rank 1 (rank 1) was open for 1.000 s"), st
    a.post("/stop")
    a.wait_status("ready", timeout=60)
    assert a.shutdown().rc == 0
