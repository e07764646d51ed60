"""The HyperPod EKS example (examples/eks) stays true: job.yaml's
logMonitoringConfiguration loads through hyperpodrun's rules loader, its
rules mean what its comments say, and the Dockerfile's entry point is an
exec of hyperpodrun whose options hyperpodrun accepts. The Slurm example
runs on a real Slurm cluster in test_slurm.py."""

import re
import shlex

import pytest

from conftest import SOURCE_ROOT, have_torch, write_exec

EKS = SOURCE_ROOT / "examples" / "eks"
EXAMPLE = SOURCE_ROOT / "examples" / "allreduce.py"


@pytest.mark.skipif(not have_torch(), reason="/usr/bin/python3 has no torch")
def test_eks_job_rules_load_and_pass_a_healthy_run(hpr):
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                 "--log-monitoring-config", EKS / "job.yaml", EXAMPLE],
                timeout=120)
    assert r.rc == 0, r.describe()
    assert f"2 log rules from {EKS / 'job.yaml'}" in r.err, r.describe()


def test_eks_job_nccl_rule_faults(hpr, tmp_path):
    """The NCCLFault rule stops a job that logs an NCCL warning: exit 124
    with no restart left."""
    worker = write_exec(tmp_path / "w.sh", (
        "#!/bin/sh\n"
        "echo 'ip-10-1-2-3:41:99 [0] NCCL WARN Net : Connection closed by "
        "remote peer'\n"
        "exec sleep 60\n"))
    r = hpr.run(["--standalone", "--tee", "3", "--log-monitoring-config",
                 EKS / "job.yaml", "--no-python", worker], timeout=30)
    assert r.rc == 124, r.describe()
    assert "NCCLFault" in r.err, r.describe()


def test_eks_dockerfile_entrypoint_execs_hyperpodrun(hpr, tmp_path):
    """The ENTRYPOINT is the shell form with exec (hyperpodrun becomes PID
    1), and hyperpodrun accepts its options: checked with --standalone
    added, since the operator is not here, and this machine's paths."""
    text = (EKS / "Dockerfile").read_text().replace("\\\n", " ")
    m = re.search(r"(?m)^ENTRYPOINT exec hyperpodrun (.*)$", text)
    assert m, "no 'ENTRYPOINT exec hyperpodrun ...' line"
    args = shlex.split(m.group(1))
    assert args[-1] == "/workspace/train.py"
    assert "COPY examples/allreduce.py /workspace/train.py" in text
    worker = write_exec(tmp_path / "train.sh", "#!/bin/sh\necho trained\n")
    # A free port instead of 8080, which the API may bind.
    args = ["0" if a == "8080" else a.replace("/tmp/hyperpod",
                                                str(tmp_path / "logs"))
            for a in args[:-1]]
    r = hpr.run(["--standalone", *args, "--no-python", worker], log_dir=False,
                env={"CUDA_VISIBLE_DEVICES": "0"})
    assert r.rc == 0, r.describe()
    assert b"[default0]:trained" in r.stdout, r.describe()
