#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark 3, hang-detection latency: a worker prints a progress line
every 10 ms, then stops printing (it stays alive, as a hung collective
does). JobHangingDetection, with a recurring threshold of 1 s or of 5 s,
must call it hanging. Measured from the moment the worker's last line was
written (the worker stamps CLOCK_MONOTONIC after its write returns):

  verdict   hyperpodrun's "log rule verdict" line arriving on its stderr
  restart   the restarted worker's first instruction (self-driven mode:
            the verdict stops the group and --max-restarts 1 starts the
            next attempt)
  /status   operator mode: the first GET /status (polled every ms) that
            says "faulted"; the workers keep running until /stop

Latency = that interval minus the threshold. Target: within 20 ms.
torchrun has no log rules: its hung job waits until something kills it.
"""

import shutil
import sys
from pathlib import Path

import benchlib as bl

INTERVAL_MS = 10
PROGRESS_LINES = 30


def rules_for(scratch, threshold_s):
    return bl.write_rules(Path(scratch, f"hang-{threshold_s}.json"), ["JobHangingDetection"],
                          {"JobHangingDetection": {
                              "expectedRecurringFrequencyInSeconds": threshold_s}})


def self_driven(hpr, producer, threshold_s, scratch):
    stamps = Path(scratch, "stamps")
    stamps.unlink(missing_ok=True)
    rules = rules_for(scratch, threshold_s)
    verdicts = []

    def on_stderr(ns, line):
        if "log rule verdict" in line:
            verdicts.append(ns)

    argv = [hpr, "--standalone", "--nproc-per-node", "1", "--max-restarts", "1",
            "--tee", "3", "--log-dir", str(Path(scratch, "logs")),
            "--log-monitoring-config", rules, "--no-python", producer, "hang",
            str(INTERVAL_MS), str(PROGRESS_LINES), str(stamps)]
    r = bl.run_measured(argv, env=bl.clean_env(), stdout=str(Path(scratch, "console")),
                        stderr_lines=on_stderr, timeout=threshold_s + 60)
    bl.check(r.rc == 0, f"hyperpodrun exited {r.rc}")
    st = bl.read_stamps(stamps)
    last = [ns for kind, _, attempt, ns in st if kind == "last" and attempt == 0]
    start = [ns for kind, _, attempt, ns in st if kind == "start" and attempt == 1]
    bl.check(len(last) == 1 and len(start) == 1 and len(verdicts) == 1,
             f"expected one last line, one verdict and one restart: {st} {verdicts}")
    base = last[0] + threshold_s * 1e9
    return {"verdict_ms": (verdicts[0] - base) / 1e6, "restart_ms": (start[0] - base) / 1e6}


def operator_mode(hpr, producer, threshold_s, scratch):
    """None when the binary has no operator API."""
    stamps = Path(scratch, "stamps")
    stamps.unlink(missing_ok=True)
    op = bl.Operator(hpr, ["--nproc-per-node", "1", "--tee", "3",
                           "--log-dir", str(Path(scratch, "logs")),
                           "--log-monitoring-config", rules_for(scratch, threshold_s),
                           "--no-python"],
                     [producer, "hang", str(INTERVAL_MS), str(PROGRESS_LINES), str(stamps)],
                     env=bl.clean_env(), stderr=str(Path(scratch, "agent.err")))
    if op.start() is None:
        return None
    try:
        bl.check(op.status() == "ready", "the agent did not come up ready")
        op.post_start(0)
        faulted = op.wait_status("faulted", timeout=threshold_s + 30)
    finally:
        op.close()
    last = [ns for kind, _, _, ns in bl.read_stamps(stamps) if kind == "last"]
    bl.check(len(last) == 1, "the worker did not stamp its last line")
    return {"status_ms": (faulted - last[0] - threshold_s * 1e9) / 1e6}


def main():
    args = bl.arg_parser(__doc__.splitlines()[0]).parse_args()
    hpr = bl.hyperpodrun_path()
    producer = bl.producer_path()
    reps = bl.repeats(args, full=5)
    thresholds = [1] if args.smoke else [1, 5]
    result = bl.result_header(args, "hang", hpr, {
        "hyperpodrun (self-driven)": ["hyperpodrun", "--standalone", "--nproc-per-node", "1",
                                      "--max-restarts", "1", "--tee", "3",
                                      "--log-monitoring-config", "hang-T.json",
                                      "--no-python", "producer", "hang", str(INTERVAL_MS),
                                      str(PROGRESS_LINES), "STAMPS"],
        "hyperpodrun (operator)": ["hyperpodrun", "--rdzv-backend", "hyperpod",
                                   "--server-port", "PORT", "--nproc-per-node", "1",
                                   "--tee", "3", "--log-monitoring-config", "hang-T.json",
                                   "--no-python", "producer", "hang", "..."],
    })
    rows = []
    scratch = bl.make_scratch("hang")
    try:
        for threshold in thresholds:
            runs = [self_driven(hpr, producer, threshold, scratch) for _ in range(reps)]
            op_runs = []
            for _ in range(reps):
                m = operator_mode(hpr, producer, threshold, scratch)
                if m is None:
                    break
                op_runs.append(m)
            rows.append({
                "threshold_s": threshold,
                "verdict_ms": bl.median([m["verdict_ms"] for m in runs]),
                "restart_ms": bl.median([m["restart_ms"] for m in runs]),
                "status_ms": bl.median([m["status_ms"] for m in op_runs]),
                "operator": "measured" if op_runs else bl.NEEDS_OPERATOR,
                "runs": runs, "operator_runs": op_runs,
            })
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result["rows"] = rows
    result["torchrun"] = "never (no log rules)"
    worst = max(max(r["restart_ms"], r["status_ms"] or 0) for r in rows)
    result["targets"] = [{"what": "hang detected within the threshold + 20 ms (worst "
                                  "median over thresholds and modes)",
                          "value": worst, "unit": "ms", "met": worst <= 20}]
    bl.finish_result(result)
    bl.print_table(f"hang detection, ms beyond the threshold, median of {reps}",
                   ["threshold", "verdict (log)", "restart", "/status faulted", "torchrun"],
                   [[f"{r['threshold_s']} s", r["verdict_ms"], r["restart_ms"],
                     r["status_ms"] if r["status_ms"] is not None else "not run",
                     "never"] for r in rows])
    bl.print_targets(result)
    bl.write_result(args, "hang", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
