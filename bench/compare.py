#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Paired before/after runs of the benchmarks for two hyperpodrun binaries.

    /usr/bin/python3 bench/compare.py --before OLD --after NEW [--rounds 5]
        [--only launch,pipeline,restart,steady,hang] [--markdown FILE]

A change that moves code around must not make the agent slower, and one
run of each binary on a shared machine cannot show that: the load moves
more than the change does. So each round runs every benchmark once with
each binary, back to back, the order flipping from round to round, and the
figure compared is the median over rounds of after/before within a round.
Each benchmark runs at a reduced size (see SIZES) without torchrun.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib as bl

# Reduced sizes: each round of all five takes about two minutes per binary.
SIZES = {
    "launch": ["--repeats", "20"],
    "pipeline": ["--ranks", "8", "--lines", "500000", "--flat-pairs", "0",
                 "--repeats", "1"],
    "restart": ["--repeats", "5"],
    "steady": ["--seconds", "10", "--repeats", "1"],
    "hang": ["--repeats", "3"],
}


def pipeline_row(res, tool):
    return next(r for r in res["rows"] if r["ranks"] == 8 and r["tool"] == tool)


def cpu_ns_per_line(row):
    return row["cpu_s"] / (row["ranks"] * row["lines_per_rank"]) * 1e9


# Each figure: (name, unit, extractor, True when higher is better).
FIGURES = {
    "launch": [
        ("launch, 8 workers", "ms", lambda r: r["tools"]["hyperpodrun"]["wall_s"] * 1e3, False),
        ("launch peak RSS", "KiB", lambda r: r["tools"]["hyperpodrun"]["maxrss_kb"], False),
    ],
    "pipeline": [
        ("pipeline, 8 ranks, 4 rules", "M lines/s",
         lambda r: pipeline_row(r, "hyperpodrun")["lines_per_s"] / 1e6, True),
        ("pipeline, 8 ranks, no rules", "M lines/s",
         lambda r: pipeline_row(r, "hyperpodrun-norules")["lines_per_s"] / 1e6, True),
        ("agent CPU per line, 4 rules", "ns",
         lambda r: cpu_ns_per_line(pipeline_row(r, "hyperpodrun")), False),
        ("agent CPU per line, no rules", "ns",
         lambda r: cpu_ns_per_line(pipeline_row(r, "hyperpodrun-norules")), False),
    ],
    "restart": [
        ("self-driven restart", "ms", lambda r: r["tools"]["hyperpodrun"]["restart_ms"], False),
        ("operator stop→start cycle", "ms", lambda r: r["operator"]["cycle_ms"], False),
    ],
    "steady": [
        ("steady job CPU", "% of a core", lambda r: r["tools"]["hyperpodrun"]["cpu_pct"], False),
        ("steady job RSS", "KiB", lambda r: r["tools"]["hyperpodrun"]["rss_kb"], False),
    ],
    "hang": [
        ("hang → restart, 1 s threshold", "ms",
         lambda r: next(x for x in r["rows"] if x["threshold_s"] == 1)["restart_ms"], False),
        ("hang → restart, 5 s threshold", "ms",
         lambda r: next(x for x in r["rows"] if x["threshold_s"] == 5)["restart_ms"], False),
    ],
}


def num(v):
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def run_one(name, binary, out):
    env = dict(os.environ, HYPERPODRUN=binary)
    cmd = [bl.PYTHON, str(bl.BENCH / f"bench_{name}.py"), "--no-torchrun",
           "--out", out] + SIZES[name]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0:
        sys.exit(f"compare: {' '.join(cmd)} with {binary} failed "
                 f"(exit {proc.returncode}):\n{proc.stdout[-4000:]}")
    return json.loads(Path(out, f"{name}.json").read_text())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the binary before the change")
    p.add_argument("--after", required=True, help="the binary after the change")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", default=",".join(SIZES))
    p.add_argument("--markdown", default=None, help="also write the table to this file")
    args = p.parse_args()
    names = args.only.split(",")
    for n in names:
        if n not in SIZES:
            p.error(f"--only: no benchmark named {n!r} (known: {', '.join(SIZES)})")
    bins = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    for label, b in bins.items():
        if not os.access(b, os.X_OK):
            p.error(f"--{label}: {b} is not an executable")
    bl.producer_path()
    values = {}  # (name, figure) -> {"before": [...], "after": [...]}
    with tempfile.TemporaryDirectory(prefix="hpr-compare-") as tmp:
        for rnd in range(args.rounds):
            order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
            for name in names:
                for label in order:
                    res = run_one(name, bins[label], os.path.join(tmp, label))
                    for fig, unit, get, _ in FIGURES[name]:
                        values.setdefault((name, fig), {"before": [], "after": []})
                        values[(name, fig)][label].append(get(res))
                print(f"compare: round {rnd + 1}/{args.rounds} {name} done", flush=True)
    lines = [f"Paired runs, {args.rounds} rounds, order flipped each round: "
             f"before {bins['before']}, after {bins['after']}.", "",
             "| figure | unit | before (median) | after (median) | after/before "
             "(median of rounds) | rounds' range | better |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        for fig, unit, _, higher in FIGURES[name]:
            v = values[(name, fig)]
            ratios = [a / b for a, b in zip(v["after"], v["before"]) if b]
            r = statistics.median(ratios) if ratios else float("nan")
            better = "after" if (r > 1) == higher and r != 1 else "before"
            if abs(r - 1) < 0.02:
                better = "same (within 2 %)"
            spread = f"{min(ratios):.3f}–{max(ratios):.3f}" if ratios else ""
            lines.append(f"| {fig} | {unit} | {num(statistics.median(v['before']))} | "
                         f"{num(statistics.median(v['after']))} | {r:.3f} | {spread} | "
                         f"{better} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
