# SPDX-License-Identifier: Apache-2.0
"""Checkpoint discovery end to end with real PyTorch (gloo, 2 ranks): the
job saves every 2 steps and reports each rank's shard through the Python
client; a rank is killed after saving a step it never reports; the
restarted workers resume from the last step every rank completed, and
their loss sequence continues exactly."""

import re

import pytest

from conftest import SOURCE_ROOT, have_torch, helper, worker_lines
from test_operator import Agent, free_port

if not have_torch():
    pytest.skip("/usr/bin/python3 has no torch.distributed",
                allow_module_level=True)

LOSS_RE = re.compile(rb"^step (\d+) loss (\S+)$")
RESUME_RE = re.compile(rb"^resume (\S+) at (\d+)$")


def job_env(tmp_path, kill):
    return {"PYTHONPATH": SOURCE_ROOT / "python",
            "CKPT_DIR": tmp_path / "ckpt", "CKPT_STEPS": "8",
            "CKPT_KILL": kill}


def attempt_lines(run_dir, attempt, local):
    return (run_dir / f"attempt_{attempt}" / str(local) / "stdout.log") \
        .read_bytes().splitlines()


def losses(lines):
    return {int(m.group(1)): m.group(2) for m in map(LOSS_RE.match, lines) if m}


def resumed(lines):
    m = [RESUME_RE.match(l) for l in lines if RESUME_RE.match(l)]
    assert len(m) == 1, lines
    return m[0].group(1).decode(), int(m[0].group(2))


def check_resume(run_dir, ckdir):
    """Attempt 1 resumed at step 4 and recomputed the steps attempt 0 had
    printed after it (5, and 6 unless the stop came first) exactly, then
    went on to 8."""
    for local in (0, 1):
        first = losses(attempt_lines(run_dir, 0, local))
        second_lines = attempt_lines(run_dir, 1, local)
        second = losses(second_lines)
        assert resumed(second_lines) == (str(ckdir / "step_4"), 4)
        assert sorted(second) == [5, 6, 7, 8], second_lines
        # Step 5 ended on both ranks before rank 1 could reach step 6.
        assert 5 in first, first
        for step in (5, 6):
            if step in first:
                assert second[step] == first[step], (step, first, second)
        assert second_lines[-1] == b"done"


def test_operator_resumes_from_status_progress(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=2, script=helper("ckpt_train.py"),
              env=job_env(tmp_path, "0:1:6"))
    a.start(master_port=free_port())
    st = a.wait_status("faulted", timeout=120)
    ckdir = tmp_path / "ckpt"
    # Rank 1 saved step 6 and died before reporting it: 4 is the last step
    # both ranks completed.
    assert st["progress"] == {str(ckdir): {"progressData": str(ckdir / "step_4"),
                                           "progressCount": 4}}, st
    keys = list(st)
    assert keys.index("restartMode") < keys.index("progress") < \
        keys.index("agent_version")
    code, _, _ = a.post("/stop")
    assert code == 200
    st = a.wait_status("ready", timeout=60)
    assert st["progress"]["" + str(ckdir)]["progressCount"] == 4
    a.start(fault_count=1, master_port=free_port(), progress=st["progress"])
    st = a.wait_status("completed", timeout=120)
    assert st["progress"] == {str(ckdir): {"progressData": str(ckdir / "step_8"),
                                           "progressCount": 8}}, st
    r = a.shutdown()
    assert r.rc == 0, r.describe()
    run = [d for d in (a.dir / "logs").iterdir() if d.name.startswith("none_")]
    check_resume(run[0], ckdir)


def test_self_driven_restart_resumes(hpr, tmp_path):
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                 "--tee", "3", helper("ckpt_train.py")],
                env=job_env(tmp_path, "0:1:6"), timeout=180)
    assert r.rc == 0, r.describe()
    check_resume(hpr.only_train_dir(), tmp_path / "ckpt")
    assert "checkpoint step 4 is complete on every local rank" in r.err
