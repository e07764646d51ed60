#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: the rank monitor (heartbeats through the shared slot).

  worker cost   ns per send_heartbeat() in a worker, beside a non-blocking
                datagram and a framed write on a stream socket (the designs
                not taken), each N calls in a tight loop in rank 0 (the
                other ranks idle)
  agent CPU     8 ranks × 1 kHz heartbeats for --seconds: the agent's CPU
                (schedstat, all threads) in % of one core, beside the same
                job whose workers loop at 1 kHz without heartbeats
  verdict       --ft-rank-heartbeat-timeout 0.2 and a rank that stops: how
                long past the deadline the agent judged (its own log line)
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import benchlib as bl

NPROC = 8
WORKER = str(bl.BENCH / "ft_worker.py")


def cpu(pid):
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def run(hpr, scratch, mode, flags, extra_env, timeout):
    env = bl.clean_env({"PYTHONPATH": str(bl.ROOT / "python"),
                        "FTB_MODE": mode,
                        **{k: str(v) for k, v in extra_env.items()}})
    argv = [hpr, "--log-dir", str(scratch / f"logs-{mode}"), "--standalone",
            "--nproc-per-node", str(NPROC), *flags, WORKER]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    t0, c0 = time.monotonic(), cpu(p.pid)
    samples = []
    while p.poll() is None and time.monotonic() - t0 < timeout:
        try:
            samples.append((time.monotonic(), cpu(p.pid)))
        except OSError:
            break
        time.sleep(0.05)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    wall = samples[-1][0] - t0 if samples else 0.0
    used = samples[-1][1] - c0 if samples else 0.0
    return p.returncode, out, err, wall, used


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=None,
                   help="heartbeat and idle phases (default 20; 2 with --smoke)")
    args = p.parse_args()
    seconds = args.seconds or (2.0 if args.smoke else 20.0)
    calls = 20000 if args.smoke else 1_000_000
    hpr = bl.hyperpodrun_path()
    scratch = Path(bl.make_scratch("ft"))
    result = bl.result_header(args, "ft", hpr, {
        "hyperpodrun (FTB_MODE cost, idle, hb, stop)":
            [hpr, "--standalone", "--nproc-per-node", str(NPROC),
             "[--ft-rank-heartbeat-timeout 0.2 --max-restarts 0]",
             "bench/ft_worker.py"]})

    rc, out, err, _, _ = run(hpr, scratch, "cost", [],
                             {"FTB_CALLS": calls}, 300)
    bl.check(rc == 0, f"cost run exit {rc}: {err[-2000:]}")
    cost = json.loads(out.strip().splitlines()[-1])
    result["worker_cost_ns"] = cost

    phases = {}
    for mode in ("idle", "hb"):
        rc, out, err, wall, used = run(hpr, scratch, mode, [],
                                       {"FTB_SECONDS": seconds},
                                       seconds + 120)
        bl.check(rc == 0, f"{mode} run exit {rc}: {err[-2000:]}")
        phases[mode] = {"wall_s": wall, "cpu_s": used,
                        "cpu_pct": 100.0 * used / wall if wall else 0.0}
        if mode == "hb":
            phases[mode]["beats_rank0"] = json.loads(
                out.strip().splitlines()[-1])["beats"]
    result["agent"] = phases

    lat = []
    for _ in range(bl.repeats(args, full=5)):
        rc, out, err, _, _ = run(hpr, scratch, "stop",
                                 ["--ft-rank-heartbeat-timeout", "0.2",
                                  "--max-restarts", "0"], {}, 120)
        m = re.search(r"judged (\S+) ms past the deadline", err)
        bl.check(rc == 124 and m, f"stop run exit {rc}: {err[-2000:]}")
        lat.append(float(m.group(1)))
    result["verdict_latency_ms"] = lat
    bl.write_result(args, "ft", bl.finish_result(result))
    bl.print_table("rank monitor", ["figure", "value"], [
        ["send_heartbeat() per call", f"{cost['heartbeat_ns']:.0f} ns"],
        ["non-blocking datagram per call", f"{cost['datagram_ns']:.0f} ns"],
        ["framed stream write per call", f"{cost['stream_frame_ns']:.0f} ns"],
        [f"agent CPU, {NPROC} ranks x 1 kHz heartbeats",
         f"{phases['hb']['cpu_pct']:.2f} %"],
        ["agent CPU, same job without heartbeats",
         f"{phases['idle']['cpu_pct']:.2f} %"],
        ["verdict past the deadline (median)",
         f"{bl.median(lat):.3f} ms"],
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
