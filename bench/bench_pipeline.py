#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark 2, the log pipeline: N ranks each printing training-style
lines of 110 bytes as fast as they can, through the launcher with --tee 3
(every line to its rank's file and, prefixed, to the console, which is a
file here), in lines per second and the launcher's own CPU seconds.

  hyperpodrun        the four seed rules JobStart, JobHangingDetection,
                     NoS3CheckpointingDetection and LowThroughputDetection
                     on every rank (--log-monitor-ranks all)
  hyperpodrun, no rules   the same without rules: what the rules cost
  torchrun           --tee 3 (it has no rules)
  tee limit          the same producers, each piped through
                     `tee FILE > CONSOLE`: what the kernel's pipes and the
                     file system allow when nothing else is done; its CPU
                     is the tee processes'

Targets: with the four rules on all 8 ranks at least 60 % of the tee limit
and at least 8x torchrun; throughput flat or better from 8 to 64 ranks.

Flatness is judged on its own paired runs rather than on the table's rows:
hyperpodrun with the four rules at 8 ranks and right after at 64 ranks,
both printing the same lines in total (so that both write the same bytes
to disk), eleven times over; the median of the eleven 64-over-8 ratios.
The table's rows are medians of runs minutes apart, and on a shared machine
a slow spell between them moves one row and not the other. Eleven pairs,
because single pairs spread widely on a shared machine and the median of
fewer moves by several percent from one full run to the next.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import benchlib as bl

TOOLS = ["hyperpodrun", "hyperpodrun-norules", "torchrun", "tee"]
LABELS = {
    "hyperpodrun": "hyperpodrun, 4 rules",
    "hyperpodrun-norules": "hyperpodrun, no rules",
    "torchrun": "torchrun",
    "tee": "tee limit",
}


def argv_for(tool, hpr, producer, ranks, lines, logdir, rules):
    worker = [producer, "lines", str(lines)]
    if tool.startswith("hyperpodrun"):
        argv = [hpr, "--standalone", "--nproc-per-node", str(ranks), "--tee", "3",
                "--log-dir", logdir]
        if tool == "hyperpodrun":
            argv += ["--log-monitoring-config", rules, "--log-monitor-ranks", "all"]
        return argv + ["--no-python"] + worker
    if tool == "torchrun":
        return bl.torchrun_argv() + [
            "--standalone", "--nproc_per_node", str(ranks), "--monitor_interval", "0.1",
            "--tee", "3", "--log_dir", logdir, "--no_python"] + worker
    return bl.tee_command(worker, ranks, logdir)


def run_launcher(tool, argv, ranks, lines, scratch):
    console = Path(scratch, "console.out")
    err = Path(scratch, "console.err")
    r = bl.run_measured(argv, env=bl.clean_env(), stdout=str(console), stderr=str(err),
                        timeout=900)
    bl.check(r.rc == 0, f"{tool} exited {r.rc}: {err.read_text()[-2000:]}")
    r.console_lines = bl.count_lines(console)
    return r


# What a run writes per line, with room to spare: the line itself (about
# 110 bytes) to its rank's file and again, prefixed, to the console.
WARM_BYTES_PER_LINE = 2 * 128


def measure(tool, hpr, producer, ranks, lines, rules):
    bl.warm_free_memory(ranks * lines * WARM_BYTES_PER_LINE)
    scratch = bl.make_scratch("pipeline")
    try:
        logdir = str(Path(scratch, "logs"))
        if tool == "tee":
            r = bl.run_tee([producer, "lines", str(lines)], ranks, scratch)
        else:
            argv = argv_for(tool, hpr, producer, ranks, lines, logdir, rules)
            r = run_launcher(tool, argv, ranks, lines, scratch)
        # Nothing may be lost: every line on the console.
        bl.check(r.console_lines == ranks * lines,
                 f"{tool}, {ranks} ranks: {r.console_lines} console lines, "
                 f"expected {ranks * lines}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"wall_s": r.wall, "cpu_s": r.cpu, "producers_cpu_s": r.children_cpu,
            "lines_per_s": ranks * lines / r.wall}


def flatness(hpr, producer, rules, total, pairs, wide=64):
    """Paired runs, 8 ranks then `wide` ranks, hyperpodrun with the four
    rules, each run printing `total` lines over all its ranks; per pair the
    wide run's throughput over the 8-rank run's."""
    out = []
    for _ in range(pairs):
        narrow = measure("hyperpodrun", hpr, producer, 8, total // 8, rules)
        broad = measure("hyperpodrun", hpr, producer, wide, total // wide, rules)
        out.append({"narrow_lines_per_s": narrow["lines_per_s"],
                    "wide_lines_per_s": broad["lines_per_s"],
                    "ratio": broad["lines_per_s"] / narrow["lines_per_s"]})
        print(f"  flatness: 8 ranks {narrow['lines_per_s']:12,.0f}  {wide} ranks "
              f"{broad['lines_per_s']:12,.0f} lines/s  ratio {out[-1]['ratio']:.3f}",
              flush=True)
    return {"total_lines": total, "wide_ranks": wide, "pairs": out,
            "narrow_lines_per_s": bl.median([p["narrow_lines_per_s"] for p in out]),
            "wide_lines_per_s": bl.median([p["wide_lines_per_s"] for p in out]),
            "ratio": bl.median([p["ratio"] for p in out])}


def engine_ns(mode):
    """ns per line, the fastest of five runs of tests/logmon/bench-logmon:
    "engine", the rule engine alone, for the same four rules over a
    progress line of the producer's form, in a tight loop on one thread
    with warm caches; "floor", no engine, only the two PCRE2 searches that
    any engine must make on such a line (see that program). None when it
    was not built. The fastest rather than the median: a tight loop on one
    core only ever gets slower from what else runs (right after the
    64-rank torchrun runs it can take nearly twice as long), and main()
    measures it before the runs for the same reason."""
    exe = bl.ROOT / "build" / "tests" / "logmon" / "bench-logmon"
    if not exe.exists():
        return None
    argv = [str(exe), "1000000"] + (["jit", "pipeline", "progress"]
                                    if mode == "engine" else ["floor"])
    figures = []
    for _ in range(5):
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        figures.append(float(re.search(r"\(([\d.]+) ns/line\)", out).group(1)))
    return min(figures)


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--ranks", default=None,
                   help="comma-separated rank counts (default 1,2,4,8,16,32,64)")
    p.add_argument("--lines", type=int, default=None,
                   help="lines per rank, up to 8 ranks (default 1000000)")
    p.add_argument("--flat-pairs", type=int, default=None,
                   help="paired 8- and 64-rank runs for the flatness target (default 11, "
                        "1 with --smoke; 0: none)")
    p.add_argument("--wide-total", type=int, default=None,
                   help="past 8 ranks, the lines all ranks print together, each rank "
                        "printing wide-total/ranks, so that a full run stays near a "
                        "quarter of an hour (default 4000000; 0: --lines per rank at "
                        "every count)")
    args = p.parse_args()
    hpr = bl.hyperpodrun_path()
    producer = bl.producer_path()
    reps = bl.repeats(args)
    ranks_list = [int(x) for x in (args.ranks or
                                   ("1,2" if args.smoke else "1,2,4,8,16,32,64")).split(",")]
    lines = args.lines or (2000 if args.smoke else 1000000)
    wide_total = args.wide_total if args.wide_total is not None else 4000000
    tools = [t for t in TOOLS if not (args.no_torchrun and t == "torchrun")]
    rules_dir = bl.make_scratch("rules")
    rules = bl.write_rules(Path(rules_dir, "rules.json"), bl.PIPELINE_RULES)

    def per_rank(n):
        return lines if n <= 8 or not wide_total else wide_total // n

    # The exact commands, for 8 ranks, with the scratch paths as names.
    example = {LABELS[t]: argv_for(t, "hyperpodrun", "producer", 8, per_rank(8),
                                   "LOGDIR", "rules.json") for t in tools}
    if "torchrun" in tools:
        example[LABELS["torchrun"]][:2] = ["torchrun"]
    result = bl.result_header(args, "pipeline", hpr, example)
    result["rules"] = bl.PIPELINE_RULES
    result["lines_per_rank"] = lines
    result["wide_total"] = wide_total
    result["engine_ns_per_line"] = engine_ns("engine")
    result["floor_ns_per_line"] = engine_ns("floor")
    runs = {}
    try:
        # Repetitions outermost, so that a burst of load from elsewhere
        # lands on one repetition of everything rather than on one tool.
        for _ in range(reps):
            for n in ranks_list:
                for tool in tools:
                    m = measure(tool, hpr, producer, n, per_rank(n), rules)
                    runs.setdefault((n, tool), []).append(m)
                    print(f"  {n:3d} ranks {LABELS[tool]:22s} {m['lines_per_s']:12,.0f} "
                          f"lines/s  {m['cpu_s']:7.2f} s CPU  {m['wall_s']:7.2f} s",
                          flush=True)
        pairs = args.flat_pairs if args.flat_pairs is not None else \
            (1 if args.smoke else 11)
        if pairs:
            # The same lines in total as the 8-rank row, a multiple of 64.
            result["flatness"] = flatness(hpr, producer, rules,
                                          8 * lines // 64 * 64, pairs)
    finally:
        shutil.rmtree(rules_dir, ignore_errors=True)
    rows = []
    for n in ranks_list:
        for tool in tools:
            ms = runs[(n, tool)]
            rows.append({
                "ranks": n, "tool": tool, "lines_per_rank": per_rank(n),
                "lines_per_s": bl.median([m["lines_per_s"] for m in ms]),
                "cpu_s": bl.median([m["cpu_s"] for m in ms]),
                "wall_s": bl.median([m["wall_s"] for m in ms]),
                "producers_cpu_s": bl.median([m["producers_cpu_s"] for m in ms]),
                "runs": ms,
            })
    result["rows"] = rows
    result["cores"] = os.cpu_count()
    result["targets"] = targets(rows, result.get("flatness"))
    bl.finish_result(result)

    def get(n, tool, key="lines_per_s"):
        return next((r[key] for r in rows if r["ranks"] == n and r["tool"] == tool), None)

    table = []
    for n in ranks_list:
        h = get(n, "hyperpodrun")
        table.append([str(n), get(n, "hyperpodrun"), get(n, "hyperpodrun-norules"),
                      get(n, "torchrun"), get(n, "tee"),
                      bl.ratio(h, get(n, "torchrun")), bl.ratio(h, get(n, "tee")),
                      get(n, "hyperpodrun", "cpu_s"), get(n, "torchrun", "cpu_s")])
    bl.print_table(f"log pipeline, lines/s, median of {reps}",
                   ["ranks", "hpr 4 rules", "hpr no rules", "torchrun", "tee limit",
                    "x torchrun", "of tee", "hpr CPU s", "torchrun CPU s"], table)
    bl.print_targets(result)
    bl.write_result(args, "pipeline", result)
    return 0


def targets(rows, flat_pairs):
    def get(n, tool):
        return next((r["lines_per_s"] for r in rows
                     if r["ranks"] == n and r["tool"] == tool), None)

    h8, tee8, t8 = get(8, "hyperpodrun"), get(8, "tee"), get(8, "torchrun")
    of_tee = bl.ratio(h8, tee8)
    x_torch = bl.ratio(h8, t8)
    flat = flat_pairs["ratio"] if flat_pairs else None

    return [
        {"what": "8 ranks, four rules on every rank: at least 60 % of the tee limit",
         "value": of_tee, "unit": "share", "met": bl.at_least(of_tee, 0.6)},
        {"what": "8 ranks, four rules on every rank: at least 8× torchrun --tee 3",
         "value": x_torch, "unit": "×", "met": bl.at_least(x_torch, 8)},
        {"what": "flat or better from 8 to 64 ranks (paired runs, same lines in total: "
                 "64-rank throughput over 8-rank, at least 0.95)", "value": flat,
         "unit": "share",
         "met": bl.at_least(flat, 0.95)},
    ]


if __name__ == "__main__":
    sys.exit(main())
