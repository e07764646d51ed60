#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes BENCHMARKS.md and the log-pipeline plot from the JSON results of
the benchmarks, so that the numbers and the text around them cannot drift
apart:

    /usr/bin/python3 bench/report.py [--results bench/results] [--out BENCHMARKS.md]

Every figure in the document comes from a results file; a benchmark with
no results file gets a line saying so.
"""

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import benchlib as bl

PLOT_NAME = "pipeline.png"
SERIES = [  # tool, label, colour, marker
    ("hyperpodrun", "hyperpodrun, 4 rules on every rank", "tab:blue", "o"),
    ("hyperpodrun-norules", "hyperpodrun, no rules", "tab:cyan", "s"),
    ("torchrun", "torchrun --tee 3", "tab:red", "^"),
    ("tee", "tee pipe limit", "tab:gray", "D"),
]


def load(results):
    out = {}
    for name in ("launch", "pipeline", "hang", "restart", "steady", "static", "ipr",
                 "ft", "store", "rdzv", "rdzvscale"):
        path = Path(results, f"{name}.json")
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def f(v, digits=3):
    return bl.fmt(v, digits)


def pct(v):
    return "—" if v is None else f"{100 * v:.0f} %"


def times(v):
    return "—" if v is None else f"{f(v)}×"


def cmdline(argv):
    return " ".join(shlex.quote(a) if a not in ("|", ">", "&") else a for a in argv)


def commands_block(res):
    lines = ["```sh"]
    for label, argv in res["commands"].items():
        lines.append(f"# {label}")
        lines.append(cmdline(argv))
    lines.append("```")
    return "\n".join(lines)


def with_unit(v, unit):
    if v is None:
        return "—"
    if unit == "share":
        return pct(v)
    if unit in ("ms", "%"):
        return f"{f(v)} {unit}"
    return f"{f(v)}{unit or ''}"


def verdict(met):
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def load_line(res):
    a, b = res.get("loadavg_start"), res.get("loadavg_end")
    if not a or not b:
        return ""
    return (f"Load average (1, 5, 15 min) {a[0]:.2f} {a[1]:.2f} {a[2]:.2f} at the start, "
            f"{b[0]:.2f} {b[1]:.2f} {b[2]:.2f} at the end; started {res['started']}.")


def machine_section(data):
    any_res = next(iter(data.values()))
    m = any_res["machine"]
    rows = [
        ("CPU", f"{m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable)"),
        ("memory", f"{m['memory_gib']} GiB"),
        ("kernel", m["kernel"]),
        ("OS", m["os"]),
        # --version names its commit already when it was built from git.
        ("hyperpodrun", m["hyperpodrun"] if m["commit"] in m["hyperpodrun"]
         else f"{m['hyperpodrun']} ({m['commit']})"),
        ("torchrun", f"torch {m['torch']} (Debian python3-torch), through "
                     "bench/torchrun_compat.py"),
        ("Python", m["python"]),
        ("compiler", m["cc"]),
        ("libuv, PCRE2", f"{m['libuv']}, {m['pcre2']}"),
        ("tee", m["tee"]),
        ("scratch", f"{m['scratch']} ({m['scratch_fs']}): log files and consoles"),
    ]
    out = ["## The machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in rows]
    out += ["", "Load around each benchmark: the load at a start is the machine's (other work "
                "shows here); the load at the end of the log pipeline is mostly its own "
                "producers, up to 64 of them.", "",
            "| benchmark | load at start (1, 5, 15 min) | load at end | started |",
            "|---|---|---|---|"]
    for name, res in data.items():
        a, b = res["loadavg_start"], res["loadavg_end"]
        out.append(f"| {name} | {a[0]:.2f} {a[1]:.2f} {a[2]:.2f} | "
                   f"{b[0]:.2f} {b[1]:.2f} {b[2]:.2f} | {res['started']} |")
    return out


def targets_section(data):
    out = ["## Targets", "", "| benchmark | target | measured | |", "|---|---|---|---|"]
    for name, res in data.items():
        for t in res.get("targets", []):
            out.append(f"| {name} | {t['what']} | {with_unit(t['value'], t.get('unit'))} | "
                       f"{verdict(t['met'])} |")
    return out


def launch_section(res):
    tools = res["tools"]
    out = ["## 1. Launch", "",
           f"{res['nproc']} workers that exit at once, from spawning the launcher until it has "
           "exited; the launcher's peak RSS as `/usr/bin/time -v` reports it. Median of "
           f"{len(tools['hyperpodrun']['walls'])} runs for hyperpodrun"
           + (f", {len(tools['torchrun']['walls'])} for torchrun" if "torchrun" in tools else "")
           + ".", "", commands_block(res), "",
           "| | wall time | peak RSS |", "|---|---|---|"]
    for tool, v in tools.items():
        out.append(f"| {tool} | {f(v['wall_s'] * 1000)} ms | {f(v['maxrss_kb'] / 1024)} MiB |")
    if "torchrun" in tools:
        out.append(f"| torchrun / hyperpodrun | {times(res['speedup'])} | "
                   f"{times(res['rss_ratio'])} |")
    return out


def pipeline_plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted({r["ranks"] for r in res["rows"]})
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for tool, label, colour, marker in SERIES:
        ys = [next((r["lines_per_s"] for r in res["rows"]
                    if r["ranks"] == n and r["tool"] == tool), None) for n in ranks]
        if all(y is None for y in ys):
            continue
        ax.plot(ranks, [y / 1e6 if y else None for y in ys], marker=marker, color=colour,
                label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(n) for n in ranks])
    ax.set_xlabel("ranks (worker processes)")
    ax.set_ylabel("million lines per second (all ranks)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("Log pipeline, --tee 3, console to a file, 110-byte lines")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def pipeline_section(res, plot_rel):
    rows = res["rows"]
    ranks = sorted({r["ranks"] for r in rows})
    tools = [t for t, *_ in SERIES if any(r["tool"] == t for r in rows)]
    reps = len(rows[0]["runs"])

    def get(n, tool, key="lines_per_s"):
        return next((r[key] for r in rows if r["ranks"] == n and r["tool"] == tool), None)

    wide = res.get("wide_total")
    out = ["## 2. Log pipeline", "",
           f"Each rank prints {f(res['lines_per_rank'])} training-style lines of 110 bytes as "
           "fast as it can" + (f" (past 8 ranks the ranks share {f(wide)} lines, "
                               f"{f(wide)} / ranks each, so that the full run stays near a "
                               "quarter of an hour)" if wide else "")
           + ". --tee 3: every line goes to its rank's log file and, prefixed, to the "
           "console, which is a file. hyperpodrun runs the four seed rules "
           f"{', '.join(res['rules'])} on every rank. The tee limit is the same producers "
           "each piped through `tee FILE > CONSOLE`. Lines per second over all ranks, from "
           f"spawning the launcher to its exit, median of {reps} runs; CPU is the launcher's "
           "own (its workers excluded), or the tee processes'.", "",
           commands_block(res), "",
           f"![log pipeline throughput]({plot_rel})", "",
           "| ranks | lines per rank | " + " | ".join(
               dict((t, l) for t, l, *_ in SERIES)[t] for t in tools)
           + " | hyperpodrun / torchrun | hyperpodrun / tee limit |",
           "|---" * (len(tools) + 4) + "|"]
    for n in ranks:
        h = get(n, "hyperpodrun")
        cells = [f(get(n, t)) for t in tools]
        out.append(f"| {n} | {f(get(n, 'hyperpodrun', 'lines_per_rank'))} | "
                   + " | ".join(cells)
                   + f" | {times(bl.ratio(h, get(n, 'torchrun')))} | "
                     f"{pct(bl.ratio(h, get(n, 'tee')))} |")
    out += ["", "CPU seconds (the launcher's own, or all tee processes') against the run's "
                "wall seconds, and nanoseconds of CPU per line. A launcher whose CPU falls "
                "well short of the wall time was waiting for a core: the producers and "
                "anything else on the machine share them.", "",
            "| ranks | " + " | ".join(dict((t, l) for t, l, *_ in SERIES)[t]
                                     for t in tools) + " |",
            "|---" * (len(tools) + 1) + "|"]
    for n in ranks:
        cells = []
        for t in tools:
            cpu = get(n, t, "cpu_s")
            lines = n * get(n, t, "lines_per_rank")
            wall = get(n, t, "wall_s")
            cells.append(f"{f(cpu)} s of {f(wall)} s, {f(cpu / lines * 1e9)} ns"
                         if cpu is not None else "—")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return out + flatness_section(res)


def flatness_section(res):
    fl = res.get("flatness")
    if not fl:
        return []
    wide = fl["wide_ranks"]
    out = ["", f"Flatness, from paired runs: hyperpodrun with the four rules at 8 ranks and, "
               f"right after, at {wide} ranks, both printing {f(fl['total_lines'])} lines in "
               f"total ({f(fl['total_lines'] // 8)} and {f(fl['total_lines'] // wide)} per "
               "rank), so that both write the same bytes to disk; "
               f"{len(fl['pairs'])} pairs. The target is judged on the median of the pairs' "
               "ratios: the table's rows are medians of runs minutes apart, and a slow spell "
               "of the machine between them moves one row and not the other.", "",
           f"| pair | 8 ranks, lines/s | {wide} ranks, lines/s | {wide} over 8 |",
           "|---|---|---|---|"]
    for i, p in enumerate(fl["pairs"], 1):
        out.append(f"| {i} | {f(p['narrow_lines_per_s'])} | {f(p['wide_lines_per_s'])} | "
                   f"{pct(p['ratio'])} |")
    out.append(f"| median | {f(fl['narrow_lines_per_s'])} | {f(fl['wide_lines_per_s'])} | "
               f"{pct(fl['ratio'])} |")
    return out


def flatness_against_limit(res, wide):
    """The table's rows at 8 and `wide` ranks against the tee limit of the
    same rows: whether hyperpodrun keeps its share of what the machine
    allows, and how flat that limit itself is."""
    def row(ranks, tool):
        return next((r for r in res["rows"] if r["ranks"] == ranks and r["tool"] == tool),
                    None)
    hn, hw = row(8, "hyperpodrun"), row(wide, "hyperpodrun")
    tn, tw = row(8, "tee"), row(wide, "tee")
    if None in (hn, hw, tn, tw):
        return []
    return ["", f"Against the machine's own limit, from the table above: hyperpodrun with "
                f"the rules carried {pct(hn['lines_per_s'] / tn['lines_per_s'])} of the tee "
                f"limit at 8 ranks and {pct(hw['lines_per_s'] / tw['lines_per_s'])} at {wide}, "
                f"and the tee limit itself went from {f(tn['lines_per_s'])} to "
                f"{f(tw['lines_per_s'])} lines per second "
                f"({pct(tw['lines_per_s'] / tn['lines_per_s'])}): {wide} producers and {wide} tee "
                "processes cost the machine more per line than 8 of each. "
                f"hyperpodrun spent {f(hn['cpu_s'] / (8 * hn['lines_per_rank']) * 1e9)} ns of "
                f"CPU a line at 8 ranks and "
                f"{f(hw['cpu_s'] / (wide * hw['lines_per_rank']) * 1e9)} at {wide}."]


def bare_line_ns(res):
    """hyperpodrun's CPU per line without rules at 8 ranks (benchmark 2)."""
    if not res:
        return None
    row = next((r for r in res["rows"]
                if r["ranks"] == 8 and r["tool"] == "hyperpodrun-norules"), None)
    if not row or not row.get("cpu_s"):
        return None
    return row["cpu_s"] / (8 * row["lines_per_rank"]) * 1e9


def pipeline_analysis(res):
    """What the per-line CPU figures say about the targets: arithmetic on
    the results, no claim that another run could contradict."""
    rows = res["rows"]

    def get(n, tool, key):
        return next((r.get(key) for r in rows if r["ranks"] == n and r["tool"] == tool),
                    None)

    n = 8 if any(r["ranks"] == 8 for r in rows) else max(r["ranks"] for r in rows)
    lines = n * (get(n, "hyperpodrun", "lines_per_rank") or 0)
    cpu, bare = get(n, "hyperpodrun", "cpu_s"), get(n, "hyperpodrun-norules", "cpu_s")
    prod = get(n, "hyperpodrun", "producers_cpu_s")
    tee, tee_cpu = get(n, "tee", "lines_per_s"), get(n, "tee", "cpu_s")
    tee_prod = get(n, "tee", "producers_cpu_s")
    cores, engine = res.get("cores"), res.get("engine_ns_per_line")
    if not lines or not cpu or not bare:
        return []
    ns, bare_ns = cpu / lines * 1e9, bare / lines * 1e9
    text = (f"At {n} ranks hyperpodrun spends {f(ns)} ns of CPU per line with the four rules "
            f"(its I/O thread and, in a flood, its rule threads and console thread together) and {f(bare_ns)} ns "
            f"without them.")
    if not (prod and cores and tee and tee_cpu and tee_prod):
        return ["", text]
    p_ns, t_ns, tp_ns = prod / lines * 1e9, tee_cpu / lines * 1e9, tee_prod / lines * 1e9
    bound = cores * 1e9 / (ns + p_ns)
    measured = get(n, "hyperpodrun", "lines_per_s")
    text += (f" Its producers spend {f(p_ns)} ns a line, so agent and producers need "
             f"{f(ns + p_ns)} ns of CPU per line and this machine's {cores} cores carry at "
             f"most {f(bound)} lines per second; it measured {f(measured)}, "
             f"{pct(measured / bound)} of that bound. The tee limit is bound the same way: "
             f"tee spends {f(t_ns)} ns a line and its producers {f(tp_ns)} ns.")
    use = measured / bound
    target = 0.6 * tee
    budget = cores * 1e9 / target - p_ns
    budget_used = cores * 1e9 * use / target - p_ns
    text += (f" 60 % of the tee limit is {f(target)} lines per second: with the producers' "
             f"{f(p_ns)} ns, the agent could spend at most {f(budget)} ns per line with both "
             f"cores fully used, {f(budget_used)} ns at this run's {pct(use)}. Moving the "
             f"bytes costs it {f(bare_ns)} ns (no rules), which leaves "
             f"{f(budget - bare_ns)} ns, or {f(budget_used - bare_ns)} ns, a line for the "
             f"four rules.")
    engine, floor = res.get("engine_ns_per_line"), res.get("floor_ns_per_line")
    if engine:
        handover = ns - bare_ns - engine
        text += (f" The rule engine alone, on one thread in a tight loop with warm caches, "
                 f"takes {f(engine)} ns for them on a line of the same form "
                 f"(tests/logmon/bench-logmon pipeline progress, fastest of five runs, "
                 f"measured before the pipeline runs); in the agent they cost "
                 f"{f(ns - bare_ns)} ns, {f(handover)} ns more for the hand-over to the rule "
                 f"threads and the lines crossing cores.")
    if engine and floor:
        at_floor = cores * 1e9 * use / (bare_ns + floor + handover + p_ns)
        text += (f" No engine can do less than the two PCRE2 searches that the two rules "
                 f"matching every progress line need: {f(floor)} ns (bench-logmon floor), "
                 f"without the number's parse, the \"[Epoch 0 Batch\" part, the greedy "
                 f"\".*\" or the two rules that do not match. An engine that did only "
                 f"those, with the same hand-over and this run's use of the cores, would "
                 f"carry {f(at_floor)} lines per second, {pct(at_floor / tee)} of the tee "
                 f"limit.")
        if at_floor < target:
            text += (" So on this machine the target is out of reach for any engine that "
                     "matches these patterns with PCRE2, however the work is spread over "
                     "threads.")
        else:
            room = (budget_used - bare_ns - handover) / floor
            text += (f" The target needs an engine within {f(room)}× of that floor; this "
                     f"one is at {f(engine / floor)}×.")
    return ["", text]


# The prose below is not computed from the results: it says how the
# benchmarks are run and what limits each figure, from profiles taken by
# hand on the benchmark machine (perf sched, callgrind, per-thread CPU
# time). It states what holds for the code as it is; how a figure got
# there is in the git history.
REPRODUCE = [
    "## How to reproduce", "",
    "`./dev.sh bench` installs what is missing, builds `build/`, `build-release/` "
    "(release, `-O3`) and `build-static/` (`./dev.sh static`), runs every benchmark "
    "(about 15 minutes) and writes bench/results/*.json, the plot and this file. "
    "`/usr/bin/python3 bench/run.py --only pipeline,hang` runs some of them; each is "
    "also a script of its own, `/usr/bin/python3 bench/bench_NAME.py` (`--help`). "
    "`--smoke` runs each at a tiny size in seconds, with its results in a temporary "
    "directory (`./dev.sh test` does). `/usr/bin/python3 bench/report.py` writes this "
    "file and the plot again from bench/results/ alone. "
    "`/usr/bin/python3 bench/compare.py --before OLD --after NEW` runs five of them "
    "at a reduced size for two binaries in paired rounds, the order flipped each "
    "round, and reports the median of after/before: how a change is shown not to "
    "slow the agent on a machine whose load moves more than the change does.", "",
    "torchrun is Debian's python3-torch 1.13 launcher, run through "
    "`bench/torchrun_compat.py`, which replaces `Std.from_str` (it breaks on Python "
    "3.11) and calls `torch.distributed.run.main()`. It is given "
    "`--monitor_interval 0.1`, the default of current torch; 1.13's default of 5 s "
    "would add up to 5 s to each of its figures.", "",
    "The workers are `bench/producer.c`, built with `cc -O2`. It formats lines into "
    "1 MiB buffers, so that it is never what limits a run, and writes them 8 KiB at a "
    "time, cut anywhere, as a Python worker's buffered stdout does. hyperpodrun's "
    "workers write into pipes, as the tee limit's do.", "",
    "Every pipeline run starts right after as many bytes as it will write were written "
    "to the scratch tmpfs and deleted (`benchlib.warm_free_memory`). This VM hands "
    "memory that has been free for about two seconds back to its host (free page "
    "reporting, `/sys/module/page_reporting`), and the host backs it again on first "
    "touch, which makes writing into tmpfs two to three times slower; without the "
    "warm-up a run's speed would depend on what ran before it. A node whose memory is "
    "its own is always in the warm state."]

WHERE_LAUNCH = [
    "### Launch", "",
    "A worker is started with one clone(CLONE_VM|CLONE_VFORK|CLONE_PIDFD), as glibc's "
    "posix_spawn starts a process: the child shares the agent's memory until its exec, "
    "so what a worker costs the agent does not grow with the agent, and the worker is "
    "reaped through its pidfd. A fork, as libuv's uv_spawn makes, copies the agent's "
    "page tables and write-protects its memory for every worker, which measured about "
    "1 ms a worker at 64 ranks here. What remains of the launch time is the kernel "
    "creating, exec'ing and reaping the workers; torchrun's is mostly its interpreter "
    "starting and importing torch, which is also what its RSS holds."]

WHERE_RESTART = [
    "### Restart", "",
    "The restart benchmark's workers die the moment they are signalled, so crash → "
    "running is the agent seeing rank 0's exit on its pidfd, stopping and reaping the "
    "group, and spawning it again: about the time of the first spawn. The operator's "
    "cycle adds the HTTP requests and the state machine's steps, a fraction of a "
    "millisecond."]

WHERE_PIPELINE = [
    "", "The loop thread is the pipeline's head: it reads every pipe (128 KiB a read, "
    "from its own epoll set), writes the log files and queues each monitored line for "
    "a rule thread, and every moment it waits or sits in a run queue idles the rest. "
    "The rule threads (one per core, up to a limit) therefore run at a nice value 3 "
    "above the agent's and under SCHED_BATCH, so that the loop goes first when the "
    "cores are busy and a rule thread's wakeup does not preempt it; a file console has "
    "four buffers of 1 MiB, up to three queued for its thread, so that the loop does "
    "not wait for the console's writes. Each rule thread's ring holds 4 MiB, so that "
    "the loop can run ahead while one rule thread waits and the other has emptied its "
    "own; larger rings gain nothing. On a training node the same settings make a "
    "flood's rule work yield to the training processes.", "",
    "The cores are not fully used because of where Linux puts woken threads. A pipe "
    "read wakes the writer it made room for as a synchronous wakeup, on the reader's "
    "CPU, so the producers gather on the loop's CPU and take turns with it; the load "
    "balancer counts a task that ran within the last half millisecond as cache-hot "
    "(sysctl_sched_migration_cost) and leaves it there, while the other CPU idles in "
    "spells of a few milliseconds (perf sched). Reads of 128 KiB rather than 64 halve "
    "those wakeups. Pinning threads to CPUs would recover the rest, and the agent must "
    "not do that on a training node.", "",
    "The kernel's part of the agent's work (pipe reads, log-file and console writes) "
    "costs less than tee's whole CPU time for the same bytes: the rules are what the "
    "tee limit does not pay for. In the engine a progress line takes three PCRE2 JIT "
    "calls (the head that JobHangingDetection and LowThroughputDetection share, run "
    "once a line, and their two tails); the entry into PCRE2 alone is a good part of "
    "each. The rest is fixed work on every line, whatever the rules: the ASCII check "
    "(16 bytes a step), each rule's literal, looked for before its pattern runs, and "
    "the number's parse."]

WHERE_FLATNESS = [
    "", "What moves from 8 to 64 ranks is the machine's own limit: 64 producers each "
    "map their libc and fault in their own 1 MiB buffer, which no launcher can save, "
    "and the tee limit pays the same with 64 more processes of its own. As root "
    "(CAP_SYS_RESOURCE lifts the kernel's limit on a user's pipe memory) the 64 ranks' "
    "pipes are 256 KiB like the 8 ranks'; without it they are 128 KiB and the "
    "producers block about twice as often. Single pairs spread widely between the "
    "machine's slow and fast spells, which is why the target is judged on the median "
    "of eleven."]

WHERE_HANG = [
    "### Hang detection", "",
    "A rule's cut-off is strict and the engine's clock counts milliseconds, so a "
    "stream turns HANGING 1 ms past its threshold at the earliest. The deadline timer "
    "reads the pipes before it ticks the rules (hp_stream_hub_read_now), so a line "
    "already written is never missed; the rest of the figure is the timer's wakeup "
    "and writing the verdict. \"Restarted\" adds stopping the worker and spawning the "
    "next one (as in the restart benchmark); the operator's /status is polled every "
    "millisecond."]

WHERE_STEADY = [
    "", "With the rules on rank 0 only, the agent runs a steady job on its loop thread "
    "alone (the rule threads and a file console's thread start only in a flood), "
    "about 100 wakeups a second. Most of a pass is the kernel writing the bytes "
    "into tmpfs, which costs "
    "more after the CPU has idled: an 88 KiB write into a tmpfs file takes about "
    "twice as long after 10 ms of sleep as back to back. Reading and writing every 20 "
    "or 50 ms instead of 10 costs more: the larger batches miss the caches, and at "
    "50 ms a read passes the fast-writer size and ends the pacing. One binary's steady "
    "run spreads over about 1.6–2.6 % of a core between the machine's spells, so the "
    "2 % target sits inside that spread."]

WHERE_STATIC = [
    "### Static vs dynamic", "",
    "Both run the same code, the same PCRE2 JIT among it, so their CPU per line differs "
    "by the noise of the machine. The static launcher's RSS is lower because it maps no "
    "shared libraries."]


def where_section(data):
    """What limits each figure today: the results' own arithmetic, then
    the profiles' findings."""
    out = ["## Where the time goes", ""]
    if "launch" in data:
        out += WHERE_LAUNCH + [""]
    pipe = data.get("pipeline")
    if pipe:
        out += ["### Log pipeline"] + pipeline_analysis(pipe) + WHERE_PIPELINE + [""]
        fl = pipe.get("flatness")
        if fl:
            out += (["### Flatness"] + flatness_against_limit(pipe, fl["wide_ranks"])
                    + WHERE_FLATNESS + [""])
    if "hang" in data:
        out += WHERE_HANG + [""]
    if "restart" in data:
        out += WHERE_RESTART + [""]
    if "steady" in data:
        out += (["### Steady job"] + steady_where(data["steady"], bare_line_ns(pipe))
                + WHERE_STEADY + [""])
    if "static" in data:
        out += WHERE_STATIC + [""]
    return out


def static_section(res):
    tools, bins = res["tools"], res["binaries"]
    n = len(tools["static"]["pipeline_runs"])
    out = ["## 6. Static vs dynamic", "",
           "The static binary of `./dev.sh static` against the dynamic one built the same "
           "way (release, `-O3`): file size as built and stripped; launch of "
           f"{res['nproc']} `/bin/true` workers (median of "
           f"{len(tools['static']['launch_walls'])} runs) and the launcher's peak RSS; "
           f"log-pipeline throughput with the four seed rules on {res['ranks']} ranks, "
           f"{res['lines_per_rank']:,} lines each (benchmark 2's run, median of {n}). "
           "The two take turns in every repetition.", "", commands_block(res), "",
           "| | size | stripped | launch | peak RSS | pipeline | launcher CPU |",
           "|---|---|---|---|---|---|---|"]
    for kind in ("dynamic", "static"):
        v, b = tools[kind], bins[kind]
        out.append(f"| {kind} | {f(b['bytes'] / 1024)} KiB | "
                   f"{f(b['stripped_bytes'] / 1024)} KiB | {f(v['launch_s'] * 1000)} ms | "
                   f"{f(v['maxrss_kb'] / 1024)} MiB | {f(v['lines_per_s'])} lines/s | "
                   f"{f(v['cpu_ns_per_line'])} ns/line |")
    out += ["", f"Static over dynamic in the pipeline: {times(res['cpu_ratio'])} the CPU "
            f"per line, {times(res['pipeline_ratio'])} the lines/s. The launch times and "
            "lines/s are wall-clock figures, which other load on the machine moves "
            "(see the load table); the CPU figure is the one judged. "
            "The dynamic binary's size leaves out the shared libraries it loads; the "
            "static one carries libuv, PCRE2 (with its JIT), cJSON, libyaml, "
            "http-parser and glibc."]
    return out


def hang_section(res):
    out = ["## 3. Hang-detection latency", "",
           "A worker prints a progress line every 10 ms, then stops printing and stays alive. "
           "JobHangingDetection with the recurring threshold below. Milliseconds from the "
           "worker's last line (stamped by the worker after its write returned) to the "
           "verdict, beyond the threshold: the verdict's log line reaching the bench, the "
           "restarted worker's first instruction (self-driven mode, --max-restarts 1), and "
           "the first GET /status that says \"faulted\" (operator mode, polled every "
           f"millisecond). Median of {len(res['rows'][0]['runs'])} runs.", "",
           commands_block(res), "",
           "| threshold | verdict logged | restarted | /status \"faulted\" | torchrun |",
           "|---|---|---|---|---|"]
    for r in res["rows"]:
        status = f"+{f(r['status_ms'])} ms" if r["status_ms"] is not None else r["operator"]
        out.append(f"| {r['threshold_s']} s | +{f(r['verdict_ms'])} ms | "
                   f"+{f(r['restart_ms'])} ms | {status} | {res['torchrun']} |")
    return out


def restart_section(res):
    tools = res["tools"]
    o = res["operator"]
    out = ["## 4. Restart latency", "",
           f"{res['nproc']} workers; 300 ms after the start local rank 0 exits with code 1 and "
           "the launcher restarts the group (--max-restarts 1). From rank 0's last "
           "instruction to the moment the last of the new workers runs its first one. The "
           "other workers wait in pause(), so they die the moment they are signalled: the "
           "workers' own exit time is nil here. \"Spawn\" is the same launcher's time from "
           f"being spawned to all workers of the first attempt running. Median of "
           f"{len(tools['hyperpodrun']['runs'])} runs.", "",
           commands_block(res), "",
           "| | crash → group running again | spawn → group running |", "|---|---|---|"]
    for tool, v in tools.items():
        out.append(f"| {tool} | {f(v['restart_ms'])} ms | {f(v['start_ms'])} ms |")
    if res.get("ratio"):
        out.append(f"| torchrun / hyperpodrun | {times(res['ratio'])} | "
                   f"{times(bl.ratio(tools['torchrun']['start_ms'], tools['hyperpodrun']['start_ms']))} |")
    out.append("")
    if o["state"] == "measured":
        out.append(f"Operator mode (/stop → \"ready\" → /start with faultCount 1 → all workers "
                   f"running): /stop → ready {f(o['stop_to_ready_ms'])} ms, /start → running "
                   f"{f(o['start_to_running_ms'])} ms, the whole cycle "
                   f"{f(o['cycle_ms'])} ms.")
    else:
        out.append(f"Operator mode (/stop → \"ready\" → /start → all workers running): "
                   f"{o['state']}.")
    return out


def ipr_section(res):
    cases = res["cases"]
    reps = max(len(c["runs"]) for c in cases.values())
    out = ["## 7. In-process restart against process-level restart", "",
           f"One agent in operator mode, {res['nproc']} ranks of bench/ipr_worker.py, driven "
           "over HTTP: round 0 trains, local rank 0 fails "
           f"{res['fault_ms']} ms in, the operator polls /status every millisecond until "
           "\"faulted\", sends /stop, polls until \"ready\" and sends /start with "
           "faultCount 1. From rank 0's last instruction before the fault to the last "
           "rank training again. In-process (IPR, --inprocess-restart): rank 0 reports "
           "job_fault and returns to the barrier, /stop broadcasts job_fault and the others "
           "follow, /start sends job_start to the same processes. Process-level (PLR): rank "
           "0 exits 1, /stop kills the group, /start spawns a new one. The plain worker "
           "trains at once; the torch worker trains once `import torch` is done and a gloo "
           "group has all-reduced, which PLR pays in every new process and IPR only for "
           "the new group; the last column is the longest a rank of the new round took from "
           "starting its process group to its first all-reduce done (torch's TCP store "
           "and gloo's connections). That part is torch's and has two modes: torch 1.13's "
           "store client that connects before rank 0's store listens tries again a second "
           "later, so the torch rows land near their fast figure or a second above it, by "
           f"the luck of which rank starts first. Median of {reps} runs.", "",
           commands_block(res), "",
           "| | fault → all training | fault → \"faulted\" | /stop → \"ready\" | "
           "/start → all training | of which the process group |",
           "|---|---|---|---|---|---|"]
    for name, c in cases.items():
        mode, kind = name.split("/")
        if c["state"] != "measured":
            out.append(f"| {mode.upper()}, {kind} worker | {c['state']} | | | | |")
            continue
        out.append(f"| {mode.upper()}, {kind} worker | {with_unit(c['recovery_ms'], 'ms')} | "
                   f"{with_unit(c['fault_to_faulted_ms'], 'ms')} | "
                   f"{with_unit(c['stop_to_ready_ms'], 'ms')} | "
                   f"{with_unit(c['start_to_training_ms'], 'ms')} | "
                   f"{with_unit(c.get('group_ms'), 'ms')} |")
        ratio_ = cases.get(f"ipr/{kind}", {}).get("plr_over_ipr")
        if mode == "plr" and ratio_:
            out.append(f"| PLR / IPR, {kind} worker | {times(ratio_)} | | | | |")
    out += ["", f"For scale: {res['reference']}."]
    return out


def ft_section(res):
    cost = res["worker_cost_ns"]
    agent = res["agent"]
    lat = res["verdict_latency_ms"]
    return ["## 8. The rank monitor: heartbeats", "",
            "bench/ft_worker.py under hyperpodrun --standalone --nproc-per-node 8. "
            "Worker cost: N calls in a tight loop in rank 0 while the others idle: "
            "send_heartbeat() (two stores into the rank's shared slot and ft's timeout "
            "bookkeeping), beside the designs not taken, a non-blocking datagram send and "
            "a framed JSON write on a stream socket (send alone; a full queue is drained "
            "only then). Agent CPU: schedstat of all its threads over the run, in % of one "
            "core: 8 ranks each heartbeating every millisecond, beside the same workers "
            "looping every millisecond without heartbeats. Verdict: "
            "--ft-rank-heartbeat-timeout 0.2 and a rank that stops; how long after the "
            f"deadline the agent judged, from its log line, median of {len(lat)} runs.", "",
            commands_block(res), "",
            "| figure | value |", "|---|---|",
            f"| send_heartbeat() per call | {f(cost['heartbeat_ns'] / 1000)} µs |",
            f"| datagram send per call | {f(cost['datagram_ns'] / 1000)} µs |",
            f"| framed stream write per call | {f(cost['stream_frame_ns'] / 1000)} µs |",
            f"| agent CPU, 8 ranks × 1 kHz heartbeats | "
            f"{with_unit(agent['hb']['cpu_pct'], '%')} |",
            f"| agent CPU, the same job without heartbeats | "
            f"{with_unit(agent['idle']['cpu_pct'], '%')} |",
            f"| verdict past the deadline | {with_unit(bl.median(lat), 'ms')} |"]


def store_section(res):
    cases = res["cases"]
    reps = max(len(c["runs"]) for c in cases.values())
    per_client = {c.get("count", res["count"]) for c in cases.values()}
    fewer = ""
    if len(per_client) > 1:
        fewer = (f" Past {f(res['max_ops'] // res['count'])} clients each sets fewer, so "
                 f"that all of them together set at most {f(res['max_ops'])} (the table "
                 "says how many).")
    out = ["## 9. TCPStore throughput", "",
           "The C store server (src/store, run alone as hp-store-server) beside "
           f"torch {res.get('torch') or ''}'s own (torch.distributed.TCPStore with "
           "is_master=True, a process of its own), with the same clients: one "
           "process per client, each a torch TCPStore client that sets "
           f"{f(res['count'])} keys of its own ({res['value_bytes']}-byte values) and "
           f"then gets them, all clients started together.{fewer} ops/s is every client's "
           "operations over the first start to the last end of the phase; torch "
           "1.13's get() is two round trips (WAIT, then GET), its set() one query "
           "with no answer. The server's CPU time per operation covers both phases. "
           f"Median of {reps} runs.", ""]
    launcher = [c["launcher_rss_kb"] for c in cases.values() if c.get("launcher_rss_kb")]
    if launcher:
        most = max(c["clients"] for c in cases.values())
        own = bl.median([c["client_private_kb"] for c in cases.values()])
        text = (f"The clients are forked from one process that imported torch "
                f"(bench/store_client.py): such a process holds "
                f"{f(bl.median(launcher) / 1024)} MiB RSS, so {most} clients launched "
                f"one by one would hold {f(most * bl.median(launcher) / 1048576)} GiB")
        if res.get("mem_available_kb"):
            text += f" (MemAvailable was {f(res['mem_available_kb'] / 1048576)} GiB)"
        out += [text + f"; a forked client owns {f(own / 1024)} MiB of its own and "
                "shares the rest. Each is still a process with its own connection.", ""]
    # The server binary by its name, not by where the tree was built.
    cmds = {k: ([os.path.basename(v[0])] + v[1:] if k == "hyperpodrun" else v)
            for k, v in res["commands"].items()}
    out += [commands_block({"commands": cmds}), "",
            "| clients | keys per client | server | SET/s | GET/s | server CPU per op |",
            "|---|---|---|---|---|---|"]
    for c in cases.values():
        keys = f(c.get("count", res["count"]))
        out.append(f"| {c['clients']} | {keys} | {c['server']} | {f(c['set_ops_per_s'])} | "
                   f"{f(c['get_ops_per_s'])} | "
                   f"{with_unit(c['server_cpu_us_per_op'], 'µs')} |")
        if c["server"] == "torch":
            mine = cases.get(f"hyperpodrun/{c['clients']}", {})
            if mine.get("set_ratio"):
                out.append(f"| {c['clients']} | | C / torch | {times(mine['set_ratio'])} | "
                           f"{times(mine['get_ratio'])} | torch / C: "
                           f"{times(mine['cpu_ratio'])} |")
    return out


def rdzv_section(res):
    cases = res["cases"]
    reps = max(len(c["hyperpodrun"]["runs"]) for c in cases.values())
    out = ["## 10. Coordinated restart across nodes (c10d)", "",
           f"N agents on loopback, {res['nproc']} workers each, meet with "
           "--rdzv-backend c10d (torchrun: its own c10d backend, --monitor_interval "
           "0.1). 1 s after the start global rank 0 exits with code 1; every agent "
           "must stop its workers and start the next round (--max-restarts 1). From "
           "rank 0's last instruction to the moment the last of the new workers runs "
           "its first one; the other workers wait in pause(), so their own exit time "
           "is nil. hyperpodrun's agents learn the round's end through a WAIT on the "
           f"store; torchrun's poll it. Median of {reps} runs.", "",
           commands_block(res), "",
           "| agents | hyperpodrun | torchrun | torchrun / hyperpodrun |",
           "|---|---|---|---|"]
    for n, c in cases.items():
        t = c.get("torchrun", {}).get("restart_ms")
        out.append(f"| {n} | {f(c['hyperpodrun']['restart_ms'])} ms | "
                   f"{'—' if t is None else f(t) + ' ms'} | {times(c['ratio'])} |")
    return out


def rdzvscale_section(res):
    cases = res["cases"]
    rss = res["agent_rss_kb"]
    reps = {n: max(len(v["runs"]) for v in c.values() if isinstance(v, dict) and "runs" in v)
            for n, c in cases.items()}
    def runs(r):
        return "one run" if r == 1 else f"the median of {r} runs"

    reps_text = (runs(next(iter(reps.values()))).capitalize() if len(set(reps.values())) == 1
                 else "; ".join(f"{runs(r)} at {n} agents" for n, r in reps.items()).capitalize())
    out = ["## 11. Rendezvous as agents grow (c10d)", "",
           "N agents on loopback meet with --rdzv-backend c10d (torchrun: its own c10d "
           "backend, --monitor_interval 0.1), each with one trivial worker that stamps "
           "CLOCK_MONOTONIC on entry and exits 0 (`producer start`). The rendezvous time "
           "runs from just before the first agent is spawned to the moment the last of "
           "the N workers runs its first instruction, so it includes spawning the agents "
           "and their own startup; every agent must then exit 0. The CPU time is the "
           "agents' over the same span, per agent: when the last worker's stamp appears "
           "the bench sums the run time of every thread of every agent "
           "(/proc/PID/task/*/schedstat; an agent that has already exited counts "
           "through wait4, its one worker included). Agent CPU over the whole life "
           "(startup, rendezvous, the worker, the exit barrier) is in the results file. "
           f"{reps_text}. The machine's {res['machine']['usable_cores']} cores run all N "
           "agents.", "",
           commands_block(res), "",
           "| agents | hyperpodrun | torchrun | torchrun / hyperpodrun | "
           "hyperpodrun CPU per agent | torchrun CPU per agent | torchrun / hyperpodrun |",
           "|---|---|---|---|---|---|---|"]
    skipped = []
    for n, c in cases.items():
        t_name = "torchrun"
        h, t = c["hyperpodrun"], c.get(t_name, {})
        if "skipped" in t:
            why = t["skipped"]
            share = why.get("memory_share", 0.5)
            skipped.append(f"{n} agents × {f(rss[t_name] / 1024)} MiB = "
                           f"{f(why['need_mib'] / 1024)} GiB, where {share:g} of "
                           f"MemAvailable was "
                           f"{f(why['mem_available_mib'] * share / 1024)} GiB")
            tms = tcpu = "not run"
        else:
            tms = with_unit(t.get("rdzv_ms"), "ms")
            tcpu = with_unit(None if "rdzv_cpu_s_per_agent" not in t
                             else t["rdzv_cpu_s_per_agent"] * 1e3, "ms")
        out.append(f"| {n} | {with_unit(h['rdzv_ms'], 'ms')} | {tms} | {times(c['ratio'])} | "
                   f"{with_unit(h['rdzv_cpu_s_per_agent'] * 1e3, 'ms')} | {tcpu} | "
                   f"{times(c['cpu_ratio'])} |")
    out += ["", "Of hyperpodrun's figures, spawning the agents (the bench's Popen, one "
            "after the other) took "
            + ", ".join(f"{f(c['hyperpodrun']['spawn_ms'])} ms at {n} agents"
                        for n, c in cases.items())
            + ". One agent alone in a round of one peaks at "
            f"{f(rss['hyperpodrun'] / 1024)} MiB RSS for hyperpodrun"
            + (f", {f(rss['torchrun'] / 1024)} MiB for torchrun" if "torchrun" in rss else "")
            + "."]
    if skipped:
        out += ["", "torchrun was not run where its agents would not fit in a share of "
                "the memory available at the time (one agent's peak RSS × N against "
                "MemAvailable × --memory-share; the machine has no swap): "
                + "; ".join(skipped) + "."]
    return out


def steady_section(res, bare_ns=None):
    tools = res["tools"]
    out = ["## 5. Overhead of a steady job", "",
           f"{res['nproc']} ranks each printing {f(res['rate'])} lines per second (a batch "
           f"every 10 ms) for {f(res['seconds'])} s, --tee 3, console to a file. The "
           "launcher's own CPU time over the run's wall time, in % of one core, and its peak "
           "RSS (VmHWM, sampled every 20 ms). The tee row moves the same bytes with one "
           "`tee` per rank: its CPU is all of them together, its RSS one tee's. Median of "
           f"{len(tools['hyperpodrun']['runs'])} runs.", "",
           commands_block(res), "",
           "| | CPU, % of one core | peak RSS |", "|---|---|---|"]
    labels = {"hyperpodrun": "hyperpodrun, rules on rank 0 (the default)",
              "torchrun": "torchrun", "tee": "tee, one per rank"}
    for tool, v in tools.items():
        out.append(f"| {labels.get(tool, tool)} | {f(v['cpu_pct'])} % | "
                   f"{f(v['rss_kb'] / 1024)} MiB |")
    if res.get("cpu_ratio"):
        out.append(f"| torchrun / hyperpodrun | {times(res['cpu_ratio'])} | "
                   f"{times(res['rss_ratio'])} |")
    return out


def steady_where(res, bare_ns=None):
    """What one read pass of the steady job costs, from its results and
    benchmark 2's CPU per line without rules."""
    tools = res["tools"]
    tee = tools.get("tee")
    hpr = tools.get("hyperpodrun")
    if not (tee and hpr):
        return []
    lines = res["nproc"] * res["rate"]
    wakeups = res["nproc"] * 100
    text = (f"The tee row is the cost of moving these bytes the plain way on this "
            f"machine: {res['nproc']} ranks × a batch every 10 ms (written 8 KiB at a "
            f"time) wake the readers at least {f(wakeups)} times a second, and each "
            f"wakeup pays for a pipe read and two file writes. hyperpodrun reads every "
            f"rank's pipe in one pass every 10 ms "
            f"while small pieces keep arriving, writes the console every 10 ms and "
            f"each log file every 100 ms (or once 128 KiB wait), and with the rules on rank 0 uses "
            f"{f(hpr['cpu_pct'])} % of a core for {f(lines)} lines a second, the "
            f"{res['nproc']} tee processes together {f(tee['cpu_pct'])} %.")
    if bare_ns:
        floor = bare_ns * lines / 1e9 * 100
        text += (f" At flood speed, with every write as large as it gets, hyperpodrun "
                 f"moves a line for {f(bare_ns)} ns (benchmark 2, no rules): "
                 f"{f(floor)} % of a core at this rate before the rules on rank 0 and "
                 f"before any wakeup is paid for; the rest, "
                 f"{f(hpr['cpu_pct'] - floor)} %, is what about 100 read passes, 100 "
                 f"console writes and 80 file writes a second cost here.")
    return ["", text]


def document(data, plot_rel):
    out = ["# Benchmarks", "",
           "hyperpodrun side by side with torchrun and with the plain `tee` limit, on one "
           "machine, in one run. Generated by `./dev.sh bench` (bench/run.py, then "
           "bench/report.py from bench/results/*.json): do not edit by hand, run it "
           "again.", ""]
    out += machine_section(data) + [""]
    out += REPRODUCE + [""]
    out += targets_section(data) + [""]
    sections = [("launch", launch_section),
                ("pipeline", lambda res: pipeline_section(res, plot_rel)),
                ("hang", hang_section), ("restart", restart_section),
                ("steady", steady_section), ("static", static_section),
                ("ipr", ipr_section), ("ft", ft_section),
                ("store", store_section), ("rdzv", rdzv_section),
                ("rdzvscale", rdzvscale_section)]
    for name, fn in sections:
        if name not in data:
            out += [f"## {name}", "", "Not run: no results file.", ""]
            continue
        out += fn(data[name]) + [""]
    out += where_section(data)
    return "\n".join(out).rstrip("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(bl.RESULTS))
    p.add_argument("--out", default=str(bl.ROOT / "BENCHMARKS.md"))
    args = p.parse_args()
    data = load(args.results)
    if not data:
        sys.exit(f"report: no results in {args.results}; run ./dev.sh bench")
    plot = Path(args.results, PLOT_NAME)
    if "pipeline" in data:
        pipeline_plot(data["pipeline"], plot)
    out = Path(args.out)
    plot_rel = os.path.relpath(plot, out.parent)
    out.write_text(document(data, plot_rel) + "\n")
    print(f"report: wrote {out}" + (f" and {plot}" if "pipeline" in data else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
