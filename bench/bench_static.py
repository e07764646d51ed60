#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark 6, static vs dynamic: the static binary of ./dev.sh static
against the dynamic one built the same way (release, -O3), in file size
(as built and stripped), launch time of 8 /bin/true workers, the launcher's
peak RSS, and log-pipeline throughput with the four seed rules on 8 ranks
(benchmark 2's run). The two binaries take turns in every repetition, so
that load from elsewhere lands on both.

Target: the static binary no slower in the pipeline (its PCRE2 JIT is the
same code, statically linked): at most 1.05 times the dynamic one's CPU
time per line. The launcher's own CPU time, not lines/s, is judged: on a
shared machine the wall clock moves with everyone else's load.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib as bl
import bench_launch
import bench_pipeline

NPROC = 8
RANKS = 8


def default_binary(build_dir):
    return str(bl.ROOT / build_dir / "cmd" / "hyperpodrun" / "hyperpodrun")


def sizes(path):
    with tempfile.TemporaryDirectory() as d:
        stripped = Path(d, "stripped")
        subprocess.run(["strip", "-o", str(stripped), path], check=True)
        return {"bytes": os.path.getsize(path),
                "stripped_bytes": stripped.stat().st_size}


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--static", default=default_binary("build-static"),
                   help="the static binary (default build-static/, ./dev.sh static)")
    p.add_argument("--dynamic", default=default_binary("build-release"),
                   help="the dynamic binary (default build-release/, which "
                        "./dev.sh test builds)")
    p.add_argument("--lines", type=int, default=None,
                   help="lines per rank in the pipeline runs (default 500000)")
    args = p.parse_args()
    binaries = {"dynamic": args.dynamic, "static": args.static}
    for kind, path in binaries.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"bench: the {kind} hyperpodrun is not at {path}; "
                     + ("./dev.sh static builds it" if kind == "static" else
                        "meson setup build-release -Dbuildtype=release "
                        "-Dtests=disabled && ninja -C build-release"))
    producer = bl.producer_path()
    reps = bl.repeats(args, full=5)
    lines = args.lines or (2000 if args.smoke else 500000)
    shown = {"launch": bench_launch.commands("hyperpodrun", NPROC)["hyperpodrun"],
             "pipeline": bench_pipeline.argv_for(
                 "hyperpodrun", "hyperpodrun", "producer", RANKS, lines, "LOGDIR",
                 "rules.json")}
    result = bl.result_header(args, "static", args.static, shown)
    result["nproc"] = NPROC
    result["ranks"] = RANKS
    result["lines_per_rank"] = lines
    result["rules"] = bl.PIPELINE_RULES
    result["binaries"] = {k: {"path": v, **sizes(v),
                              "version": subprocess.run(
                                  [v, "--version"], capture_output=True, text=True,
                                  check=True).stdout.splitlines()[0]}
                          for k, v in binaries.items()}
    rules_dir = bl.make_scratch("rules")
    scratch = bl.make_scratch("static")
    launch = {k: [] for k in binaries}
    rss = {k: [] for k in binaries}
    pipe = {k: [] for k in binaries}
    cpu_ns = {k: [] for k in binaries}
    try:
        rules = bl.write_rules(Path(rules_dir, "rules.json"), bl.PIPELINE_RULES)
        env = bl.clean_env({"TMPDIR": scratch})
        for _ in range(reps):
            # Launches one by one in turn, then the pipeline runs in turn:
            # a launch never follows the other binary's flood of writes.
            for _ in range(4):
                for kind, path in binaries.items():
                    argv = bench_launch.commands(path, NPROC)["hyperpodrun"]
                    m = bench_launch.measure(argv, env, 1, 1)
                    launch[kind] += m["walls"]
                    rss[kind] += m["maxrss_runs"]
            for kind, path in binaries.items():
                m = {"wall_s": bl.median(launch[kind][-4:]),
                     "maxrss_kb": bl.median(rss[kind][-4:])}
                r = bench_pipeline.measure("hyperpodrun", path, producer, RANKS, lines,
                                           rules)
                pipe[kind].append(r["lines_per_s"])
                cpu_ns[kind].append(r["cpu_s"] * 1e9 / (RANKS * lines))
                print(f"  {kind:8s} launch {m['wall_s'] * 1000:7.2f} ms  "
                      f"RSS {m['maxrss_kb'] / 1024:6.2f} MiB  "
                      f"pipeline {r['lines_per_s']:12,.0f} lines/s "
                      f"{cpu_ns[kind][-1]:6.0f} ns CPU/line", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(rules_dir, ignore_errors=True)
    result["tools"] = {k: {"launch_s": bl.median(launch[k]), "launch_walls": launch[k],
                           "maxrss_kb": bl.median(rss[k]), "maxrss_runs": rss[k],
                           "lines_per_s": bl.median(pipe[k]), "pipeline_runs": pipe[k],
                           "cpu_ns_per_line": bl.median(cpu_ns[k]),
                           "cpu_ns_runs": cpu_ns[k]}
                       for k in binaries}
    d, s = result["tools"]["dynamic"], result["tools"]["static"]
    result["pipeline_ratio"] = bl.ratio(s["lines_per_s"], d["lines_per_s"])
    result["cpu_ratio"] = bl.ratio(s["cpu_ns_per_line"], d["cpu_ns_per_line"])
    result["targets"] = [
        {"what": "static pipeline CPU per line at most 1.05× the dynamic one's",
         "value": result["cpu_ratio"], "unit": "×",
         "met": None if result["cpu_ratio"] is None else result["cpu_ratio"] <= 1.05},
    ]
    bl.finish_result(result)
    rows = [[k, result["binaries"][k]["bytes"] / 1024,
             result["binaries"][k]["stripped_bytes"] / 1024,
             v["launch_s"] * 1000, v["maxrss_kb"] / 1024, v["lines_per_s"],
             v["cpu_ns_per_line"]]
            for k, v in result["tools"].items()]
    bl.print_table(f"static vs dynamic: median of {reps} (launch {reps * 4})",
                   ["", "KiB", "stripped KiB", "launch ms", "peak RSS MiB",
                    "lines/s", "CPU ns/line"], rows)
    bl.print_targets(result)
    bl.write_result(args, "static", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
