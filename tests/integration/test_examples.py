# SPDX-License-Identifier: Apache-2.0
"""The HyperPod EKS example (examples/eks) stays true: job.yaml's
logMonitoringConfiguration loads through hyperpodrun's rules loader, its
rules mean what its comments say, the Dockerfile builds the static binary
as CI does, and its entry point is an exec-form hyperpodrun whose options
hyperpodrun accepts. The Slurm example
runs on a real Slurm cluster in test_slurm.py."""

import json
import re
from pathlib import Path

import pytest

from conftest import HYPERPODRUN, SOURCE_ROOT, have_torch, write_exec

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


def dockerfile_stages():
    """The Dockerfile's instructions, continuation lines joined, as one list
    of (INSTRUCTION, arguments) per stage; ARGs before FROM in stage 0."""
    text = (EKS / "Dockerfile").read_text().replace("\\\n", " ")
    stages = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
    return stages


def test_eks_dockerfile_build_stage_is_the_ci_build():
    """Stage one runs exactly ./dev.sh static, the build ./dev.sh test runs
    (its binary is the one tests/static/run.sh proves in Debian 11, which
    also checks that the copied paths exist), and copies the binary from
    where that build puts it."""
    pre, build, final = dockerfile_stages()
    assert pre[0][0] == "ARG" and pre[0][1].startswith("BASE_IMAGE=")
    base = pre[0][1].split("=", 1)[1]
    assert "pytorch" in base and "cuda" in base, base
    assert build[0] == ("FROM", "debian:12 AS build")
    runs = [a for i, a in build if i == "RUN"]
    assert runs == ["./dev.sh static"], runs
    workdir = [a for i, a in build if i == "WORKDIR"][-1]
    assert ("COPY", f". {workdir}") in build

    dev = (SOURCE_ROOT / "dev.sh").read_text()
    for case in ("static", "test"):
        m = re.search(rf"(?ms)^{case}\)\n(.*?)^        ;;", dev)
        assert m and "build_static" in m.group(1), f"dev.sh {case}"
    m = re.search(r"(?ms)^build_static\(\) \{\n.*?build (\S+) ", dev)
    static_dir = m.group(1)

    assert final[0] == ("FROM", "${BASE_IMAGE}")
    copies = [a.split() for i, a in final if i == "COPY"]
    assert copies[0][0] == "--from=build"
    src, dst = copies[0][1:]
    assert dst == "/usr/local/bin/hyperpodrun"
    # The same place in build-static/ as the tested binary in build/.
    exe = Path(HYPERPODRUN)
    build_root = exe.parents[2]
    assert (build_root / "meson-private").is_dir(), build_root
    assert src == f"{workdir}/{static_dir}/{exe.relative_to(build_root)}"
    # The other COPYs come from the checkout.
    for c in copies[1:]:
        assert (SOURCE_ROOT / c[0]).is_file(), c
    # A build directory of the host's would be reused with its paths.
    ignore = (EKS / "Dockerfile.dockerignore").read_text().split()
    assert "build*/" in ignore


def test_eks_dockerfile_entrypoint_execs_hyperpodrun(hpr, tmp_path):
    """The ENTRYPOINT is the exec form (hyperpodrun is PID 1, no shell),
    and hyperpodrun accepts its options: checked with --standalone added,
    since the operator is not here, and this machine's paths."""
    final = dockerfile_stages()[-1]
    entry = [a for i, a in final if i == "ENTRYPOINT"]
    assert len(entry) == 1
    args = json.loads(entry[0])
    assert isinstance(args, list) and all(isinstance(a, str) for a in args)
    assert args[0] == "hyperpodrun"
    args = args[1:]
    assert args[-1] == "/workspace/train.py"
    assert ["COPY", "examples/allreduce.py /workspace/train.py"] in \
        [list(c) for c in final]
    worker = write_exec(tmp_path / "train.sh", "#!/bin/sh\necho trained\n")
    # A free port instead of 8080, which the API may bind.
    args = ["0" if a == "8080" else a.replace("/tmp/hyperpod",
                                                str(tmp_path / "logs"))
            for a in args[:-1]]
    r = hpr.run(["--standalone", *args, "--no-python", worker], log_dir=False,
                env={"CUDA_VISIBLE_DEVICES": "0"})
    assert r.rc == 0, r.describe()
    assert b"[default0]:trained" in r.stdout, r.describe()


def test_eks_networkpolicy_admits_only_the_operator_to_the_api():
    """networkpolicy.yaml selects job.yaml's pods, lets only the operator's
    namespace reach port 8080, and keeps every other port open between
    the job's own pods (a policy that selects a pod denies the rest)."""
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load((EKS / "job.yaml").read_text())
    pol = yaml.safe_load((EKS / "networkpolicy.yaml").read_text())
    labels = job["spec"]["replicaSpecs"][0]["template"]["metadata"]["labels"]
    assert pol["kind"] == "NetworkPolicy"
    assert pol["metadata"]["namespace"] == job["metadata"]["namespace"]
    assert pol["spec"]["podSelector"]["matchLabels"] == labels
    assert pol["spec"]["policyTypes"] == ["Ingress"]

    def covers(rule, proto, port):
        return any(p["protocol"] == proto and
                   p["port"] <= port <= p.get("endPort", p["port"])
                   for p in rule["ports"])
    api = [r for r in pol["spec"]["ingress"] if covers(r, "TCP", 8080)]
    assert len(api) == 1
    assert all("namespaceSelector" in f for f in api[0]["from"])
    peers = [r for r in pol["spec"]["ingress"]
             if any(f.get("podSelector", {}).get("matchLabels") == labels
                    for f in r["from"])]
    assert len(peers) == 1
    for port in (1, 29500, 8079, 8081, 65535):
        assert covers(peers[0], "TCP", port), port
    assert covers(peers[0], "UDP", 8080)
