#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark 7, recovery of one fault, in-process (IPR) against process-level (PLR).

One agent in operator mode, 4 ranks (bench/ipr_worker.py), driven over
HTTP as the HyperPod operator drives it. Round 0 trains; local rank 0
fails; the operator polls /status every millisecond until "faulted",
sends /stop, polls until "ready", and sends /start with faultCount 1. The
figure is from rank 0's last instruction before the fault to the moment
the last rank trains again.

IPR (--inprocess-restart): rank 0 reports job_fault and goes back to the
barrier; /stop broadcasts job_fault and the others follow; /start sends
job_start, and the same processes train again. PLR: rank 0 exits 1; /stop
kills the group and /start spawns a new one.

Two workers: "plain" trains at once (the agents' own cost), "torch"
trains once `import torch` is done and a gloo group has all-reduced (what
a real job pays: PLR imports torch again in every new process, IPR only
makes a new group).
"""

import shutil
import sys
import time
from pathlib import Path

import benchlib as bl

NPROC = 4
FAULT_MS = 300
IP_VERSION = "2026-01-01T00:00:00Z"
WORKER = bl.BENCH / "ipr_worker.py"
# The reference's published figure (AWS Machine Learning Blog, "Checkpointless
# training on Amazon SageMaker HyperPod", December 2025): production jobs of
# thousands of accelerators, the whole recovery with the peer-to-peer state
# transfer, against a checkpoint restart.
REFERENCE = ("AWS reports for checkpointless training (in-process recovery with "
             "peer-to-peer state recovery) on clusters of thousands of accelerators "
             "a recovery under 2 minutes, against 15–30 minutes or more for a "
             "checkpoint restart (80–93 % less); the agent's own part is not "
             "given separately")


def launcher_args(mode, scratch):
    args = ["--nproc-per-node", str(NPROC), "--log-dir", str(Path(scratch, "logs"))]
    if mode == "ipr":
        args.append("--inprocess-restart")
    return args


def worker(mode, kind, stamps):
    return [str(WORKER), mode, kind, str(FAULT_MS), str(stamps)]


def post_start(op, fault_count):
    op.request("POST", "/start", {
        "rank": 0, "nnodes": 1, "faultCount": fault_count,
        "master_addr": "127.0.0.1", "master_port": bl.free_port(),
        "ipVersion": IP_VERSION, "rankIps": [{"rank": 0, "ip": "127.0.0.1"}]})


def stamped(stamps, kind, round_):
    return [ns for k, _, r, ns in bl.read_stamps(stamps) if k == kind and r == round_]


def wait_stamps(op, stamps, kind, round_, count, timeout):
    end = time.monotonic() + timeout
    asked = time.monotonic()
    while time.monotonic() < end:
        got = stamped(stamps, kind, round_)
        if len(got) >= count:
            return got
        # The agent closes a keep-alive connection idle for 5 s (as the
        # reference's server does), longer than torch takes to import on
        # a busy machine: keep asking.
        if time.monotonic() - asked > 1:
            op.status()
            asked = time.monotonic()
        time.sleep(0.001)
    raise bl.Failure(f"{len(stamped(stamps, kind, round_))} of {count} '{kind}' "
                     f"stamps for round {round_} after {timeout} s: "
                     f"{bl.read_stamps(stamps)}")


def one_cycle(hpr, mode, kind, scratch):
    stamps = Path(scratch, "stamps")
    stamps.unlink(missing_ok=True)
    shutil.rmtree(Path(scratch, "logs"), ignore_errors=True)
    env = bl.clean_env({"PYTHON_EXEC": bl.PYTHON,
                        "PYTHONPATH": str(bl.ROOT / "python")})
    op = bl.Operator(hpr, launcher_args(mode, scratch), worker(mode, kind, stamps),
                     env=env, stderr=str(Path(scratch, "agent.err")))
    if op.start() is None:
        return None
    try:
        if mode == "ipr":
            op.wait_status("ready", timeout=120)   # every rank at the barrier
        post_start(op, 0)
        wait_stamps(op, stamps, "train", 0, NPROC, 120)
        op.wait_status("faulted", timeout=60)
        t_faulted = time.monotonic_ns()
        op.post_stop()
        t_ready = op.wait_status("ready", timeout=60)
        t_start = time.monotonic_ns()
        post_start(op, 1)
        trained = wait_stamps(op, stamps, "train", 1, NPROC, 120)
        fault = stamped(stamps, "fault", 0)
        bl.check(len(fault) == 1, f"expected one fault stamp: {bl.read_stamps(stamps)}")
        group = {r: ns for k, r, a, ns in bl.read_stamps(stamps) if k == "group" and a == 1}
        train = {r: ns for k, r, a, ns in bl.read_stamps(stamps) if k == "train" and a == 1}
    finally:
        op.close()
    return {"group_ms": max((train[r] - group[r]) / 1e6 for r in group) if group else None,
            "fault_to_faulted_ms": (t_faulted - fault[0]) / 1e6,
            "stop_to_ready_ms": (t_ready - t_faulted) / 1e6,
            "start_to_training_ms": (max(trained) - t_start) / 1e6,
            "recovery_ms": (max(trained) - fault[0]) / 1e6}


KEYS = ("recovery_ms", "fault_to_faulted_ms", "stop_to_ready_ms", "start_to_training_ms",
        "group_ms")


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--no-torch-worker", action="store_true",
                   help="the plain worker only")
    args = p.parse_args()
    hpr = bl.hyperpodrun_path()
    reps = bl.repeats(args, full=5)
    kinds = ["plain"]
    if not args.smoke and not args.no_torch_worker and bl.torch_version():
        kinds.append("torch")
    cases = [(mode, kind) for kind in kinds for mode in ("ipr", "plr")]
    cmds = {f"{mode}, {kind} worker":
            [Path(hpr).name, "--rdzv-backend", "hyperpod", "--server-port", "PORT"]
            + launcher_args(mode, "SCRATCH")
            + [str(WORKER.relative_to(bl.ROOT))] + worker(mode, kind, "STAMPS")[1:]
            for mode, kind in cases}
    result = bl.result_header(args, "ipr", hpr, cmds)
    scratch = bl.make_scratch("ipr")
    runs = {f"{mode}/{kind}": [] for mode, kind in cases}
    state = {}
    try:
        for _ in range(reps):
            for mode, kind in cases:
                m = one_cycle(hpr, mode, kind, scratch)
                if m is None:
                    state[f"{mode}/{kind}"] = bl.NEEDS_OPERATOR
                    continue
                runs[f"{mode}/{kind}"].append(m)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result["nproc"] = NPROC
    result["fault_ms"] = FAULT_MS
    result["cases"] = {
        name: {"state": state.get(name, "measured"),
               **{k: bl.median([m[k] for m in ms if m.get(k) is not None]) for k in KEYS},
               "runs": ms}
        for name, ms in runs.items()}
    result["reference"] = REFERENCE
    rows = []
    for kind in kinds:
        ipr = result["cases"][f"ipr/{kind}"]["recovery_ms"]
        plr = result["cases"][f"plr/{kind}"]["recovery_ms"]
        result["cases"][f"ipr/{kind}"]["plr_over_ipr"] = bl.ratio(plr, ipr)
        for mode in ("ipr", "plr"):
            c = result["cases"][f"{mode}/{kind}"]
            rows.append([f"{mode.upper()}, {kind} worker"] + [c[k] for k in KEYS])
        rows.append([f"PLR / IPR, {kind}", bl.ratio(plr, ipr), None, None, None, None])
    plain_ipr = result["cases"]["ipr/plain"]["recovery_ms"]
    plain_plr = result["cases"]["plr/plain"]["recovery_ms"]
    result["targets"] = [{"what": "in-process recovery faster than process-level "
                                  "(plain worker)",
                          "value": bl.ratio(plain_plr, plain_ipr), "unit": "×",
                          "met": None if plain_ipr is None or plain_plr is None
                          else plain_ipr < plain_plr}]
    bl.finish_result(result)
    bl.print_table(f"recovery from one fault, {NPROC} ranks, median of {reps}",
                   ["", "fault → all training ms", "fault → faulted ms",
                    "/stop → ready ms", "/start → training ms",
                    "of which the process group ms"], rows)
    print(f"  reference: {REFERENCE}")
    bl.print_targets(result)
    bl.write_result(args, "ipr", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
