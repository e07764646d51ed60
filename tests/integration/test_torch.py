# SPDX-License-Identifier: Apache-2.0
"""Real PyTorch workers: env:// rendezvous, gloo all-reduce, @record."""

import re
import socket

import pytest

from conftest import SOURCE_ROOT, have_torch, worker_lines

if not have_torch():
    pytest.skip("/usr/bin/python3 has no torch.distributed",
                allow_module_level=True)

EXAMPLE = SOURCE_ROOT / "examples" / "allreduce.py"
SUM_RE = re.compile(rb"^rank (\d+)/(\d+) \(local (\d+)\): all_reduce sum = (\d+)$")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_sums(console, run_dir, node_rank, nproc, world):
    by_rank = worker_lines(console)
    want_sum = world * (world + 1) // 2
    for local in range(nproc):
        rank = node_rank * nproc + local
        want = f"rank {rank}/{world} (local {local}): all_reduce sum = {want_sum}"
        assert by_rank.get(local) == [want.encode()], by_rank
        got = (run_dir / "attempt_0" / str(local) / "stdout.log").read_bytes()
        assert got == (want + "\n").encode()


def test_allreduce_standalone(hpr):
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--tee", "3", EXAMPLE],
                timeout=120)
    assert r.rc == 0, r.describe()
    check_sums(r.stdout, hpr.only_train_dir(), 0, 2, 2)


def test_allreduce_two_nodes_one_machine(hpr, tmp_path):
    port = free_port()
    procs = []
    for node in range(2):
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"node{node}", "--rdzv-backend", "static",
             "--nnodes", "2", "--node-rank", node, "--master-addr", "127.0.0.1",
             "--master-port", port, "--nproc-per-node", "2", "--tee", "3",
             EXAMPLE], log_dir=False))
    results = [p.wait(120) for p in procs]
    for node, r in enumerate(results):
        assert r.rc == 0, r.describe()
        run_dirs = list((tmp_path / f"node{node}").iterdir())
        assert len(run_dirs) == 1 and run_dirs[0].name.startswith("none_")
        check_sums(r.stdout, run_dirs[0], node, 2, 4)


def test_record_writes_error_file_into_summary(hpr, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(
        "import os\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "\n"
        "@record\n"
        "def main():\n"
        "    if os.environ['LOCAL_RANK'] == '1':\n"
        "        raise ValueError('boom 7c1d')\n"
        "\n"
        "main()\n")
    r = hpr.run(["--standalone", "--nproc-per-node", "2", script], timeout=120)
    assert r.rc == 1, r.describe()
    root = r.err[r.err.index("Root Cause (first observed failure):"):]
    err_file = hpr.only_train_dir() / "attempt_0" / "1" / "error.json"
    assert err_file.exists()
    assert re.search(r"(?m)^\s*rank\s*: 1 \(local_rank: 1\)$", root), root
    assert re.search(rf"(?m)^\s*error_file\s*: {re.escape(str(err_file))}$", root)
    assert "ValueError: boom 7c1d" in root
    assert 'in main' in root  # the worker's Python call stack
