#!/usr/bin/python3
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
    for name in ("launch", "pipeline", "hang", "restart", "steady", "static"):
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
        ("hyperpodrun", f"{m['hyperpodrun']} ({m['commit']})"),
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
    return out + flatness_against_limit(res, wide)


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


# Measured by hand in the sixth session, not from the results: why every
# run starts from warm memory, and where an 8-rank run's time goes.
MEMORY_NOTE = [
    "", "Every pipeline run starts right after as many bytes as it will write were written "
    "to the scratch tmpfs and deleted (`benchlib.warm_free_memory`). This VM hands memory "
    "that has been free for about two seconds back to its host (free page reporting, "
    "`/sys/module/page_reporting`), and the host backs it again on first touch: writing "
    "2 GiB into tmpfs took 2.4–3.7 s from such memory and 0.9–1.2 s right after the same "
    "amount was freed. Without the warm-up a run's speed depended on what ran before it: "
    "hyperpodrun at 8 ranks with the rules gave 2.6–4.9 M lines/s right after the 4-rank "
    "tee run, 5.9–6.0 right after a 64-rank run and 3.1–3.4 after 6 s of sleep. That is "
    "why the fifth session's 8-rank row (3.7–4.0 M lines/s, always after the 4-rank tee "
    "run) disagreed with its own flatness pairs (5.9–6.3). A node whose memory is its own "
    "is always in the warm state. The tee limit gains the most from it, since moving bytes "
    "is all it does: about 9 M lines/s at 8 ranks from cold memory, 9.7–11.5 warm."]

THREADS_NOTE = [
    "", "Where an 8-rank run with the rules spends its time, from each thread's own CPU "
    "time (getrusage(RUSAGE_THREAD) at its end, a build instrumented for it, eight runs of "
    "1.24–1.55 s, sixth session): each of the two rule threads 0.41–0.55 s, the I/O loop "
    "0.15–0.40 s in user space and 0.42–0.52 s in the kernel (pipe reads and log-file "
    "writes), the console thread 0.36–0.40 s, nearly all in the kernel (the console "
    "file's writes), and the producers about 0.3 s: 2.2–2.7 CPU-seconds, 84–90 % of both "
    "cores. The kernel's share of the agent (about 0.85 s) is less than tee's whole CPU "
    "time for the same bytes (about 1.0 s); the rules are what the tee limit does not "
    "pay for. The cores are not fully used because of where Linux puts woken threads: a "
    "`perf sched` trace shows one CPU idle for 0.2–2 ms while a rule thread, woken by the "
    "I/O loop on the other CPU, waits up to 2 ms to run there behind the loop and the "
    "producers that the loop's reads woke (a pipe read wakes its writer on the reader's "
    "CPU). Reads of 128 KiB instead of 64 about halved those wakeups (22,000–24,000 to "
    "12,000–14,000 context switches a run), and rule rings of 4 MiB instead of 1 let the loop run ahead while "
    "one rule thread waits. Pinning threads to CPUs, which the agent must not do on a "
    "training node, is not needed for the rest: the ninth session took much of it back "
    "by never making the loop wait for the console and by giving the loop the higher "
    "priority (below).",
    "", "The 64-rank runs do the same work for the agent but start and stop 64 producers "
    "instead of 8. Since the seventh session the workers are exec'd directly (the "
    "parent-death signal was then set by a fork handler, no longer by a second exec of "
    "hyperpodrun): `hyperpodrun --nproc-per-node 64 --no-python /bin/true` takes 52 ms and "
    "its workers 40 ms of CPU, against 80 ms and 100 ms before, and 8.6 ms for 8 ranks "
    "(median of 21). As root (CAP_SYS_RESOURCE lifts the kernel's limit on pipe memory) "
    "the 64 ranks' pipes are 256 KiB like the 8 ranks', no longer 128 KiB: 6.27 against "
    "5.85 M lines/s at 64 ranks (median of 5 interleaved runs). What remains is the "
    "producers' own: 0.37–0.44 CPU-seconds at 64 ranks against 0.30 at 8 (seventh "
    "session), each process mapping its libc and faulting in its own 1 MiB buffer, which "
    "no launcher can save; the tee limit pays the same, with 64 more processes of its "
    "own. By hand, pairs of one binary gave 0.94, 1.15, 0.97, 0.97 and 0.98 (median "
    "0.97, seventh session) and 1.07, 0.95, 0.99, 1.24 and 1.06 (median 1.06, eighth "
    "session, a slower spell of the machine); the seventh session's full run gave "
    "0.88–0.92.",
    "", "Starting the workers (eleventh session). libuv's uv_spawn forks: the fork copies "
    "the agent's page tables and write-protects its memory, and uv_spawn then waits "
    "while the child's exec tears the copy down. At 64 ranks with the rules that was "
    "1,040 µs a worker and 72 ms from the first worker to the last (an LD_PRELOAD "
    "wrapper timing each call), the forks 49 % of the agent's CPU in a run whose "
    "workers exit at once (perf). The workers are now started as glibc's posix_spawn "
    "starts a process, with clone(CLONE_VM|CLONE_VFORK|CLONE_PIDFD), which shares the "
    "agent's memory until the exec, and the parent-death signal is set in that child; "
    "each worker is reaped through its pidfd. `hyperpodrun --nproc-per-node 8 "
    "--no-python /bin/true` went from 9.46 to 7.52 ms and 64 ranks from 47.3 to 33.5 ms "
    "(median of 20 interleaved runs each); the launch row above went from 8.06 ms "
    "(tenth session) to 4.92. On the pipeline it is worth less than the wall time "
    "suggests, because the first workers already produce while the last start: ten "
    "pairs of 8 and 64 ranks, the two binaries interleaved, gave flatness 0.940 before "
    "and 0.943 after, and 6.89 against 7.01 M lines/s at 64 ranks. A stream's 64 KiB "
    "buffer for lines with invalid UTF-8 is now mapped rather than calloc'd, so it "
    "costs a page only when such a line comes: the agent with the rules on 64 ranks "
    "held 10.2 MB, now 6.3 MB.",
    "", "This run's flatness, 0.950, sits on its target, and its pairs spread over "
    "0.82–1.04; the tenth session's two full runs gave 0.89 and 1.09. The agent's own "
    "cost and its share of the tee limit are flat from 8 to 64 ranks (the comparison "
    "above); what moves is the machine's own limit and how fast its spells are."]

# Measured by hand in the eighth session: what the engine's instructions
# went to, what the rules cost in the agent beyond the engine, and where
# the idle CPU time comes from.
ENGINE_NOTE = [
    "", "What a progress line costs the engine, in instructions (callgrind, bench-logmon "
    "pipeline progress, eighth session): 2,283, from 2,406 before that session. The quick "
    "form, which only answers whether a line matches, no longer saves its groups (55 "
    "fewer on JobHangingDetection's search), the decimal parser's fast path takes 120 "
    "instead of 169, and the ASCII check reads the line's last bytes as one word. About "
    "450 of the 2,283 are the entry into PCRE2 alone: a progress line needs three JIT "
    "calls (JobHangingDetection's search, LowThroughputDetection's head and tail), and a "
    "call of an anchored pattern that fails at its first byte costs about 150 (an "
    "always-failing pattern, same machine). The line splitter now remembers the next "
    "\\r as it remembered the next \\n: 37 fewer instructions a line in the agent "
    "(2,750 to 2,713, 8 ranks × 50,000 lines with the four rules, callgrind).",
    "", "What the rules cost in the agent beyond the engine (8 ranks, 1,000,000 lines "
    "each, median of 5 interleaved runs, eighth session): no rules 9.78 M lines/s and 125 ns of the agent's CPU a line; JobStart "
    "alone, which costs the engine next to nothing on a progress line, 7.80 M lines/s "
    "and 159 ns; the four rules 6.24 M lines/s and 244 ns. So about 34 ns a line go to "
    "queueing each line for a rule thread and to the engine's fixed work on it (the "
    "ASCII check, one literal search), whatever the rules; the four rules' own work is "
    "the other 85 ns.",
    "", "Where the idle CPU time comes from (`perf sched` over one 8-rank run with the "
    "rules, eighth session): CPU 0 sat idle for 163 ms of the run's 1.6 s, in spells of "
    "1–4 ms, while the agent's threads waited 685 ms in all in CPU 1's run queue; CPU 1 "
    "was never idle. A pipe read wakes the writer it made room for as a synchronous "
    "wakeup, which Linux places on the reader's CPU, so the producers gather on the CPU "
    "of the I/O loop and take turns with it every 20–130 µs. Threads woken there stay "
    "there until the load balancer moves them, and it counts a task that ran within the "
    "last half millisecond as cache-hot and leaves it (sysctl_sched_migration_cost), "
    "which every one of them is."]

# Measured by hand in the ninth session: who waits for whom in a flood, and
# the two changes that came of it.
WAITS_NOTE = [
    "", "Who waits for whom in an 8-rank run with the rules (ninth session, a build that "
    "summed the time each thread spent in each wait, runs of about 1.2 s): the two rule "
    "threads waited for lines 1.1–1.7 s together, the I/O loop waited for room in a rule "
    "queue 0.001–0.015 s, and for the console's thread to finish the write before the "
    "next 0.04–0.15 s in 65–70 waits. So the loop thread, which reads, writes and queues "
    "every line, is the pipeline's head, and every moment it waits or sits in a run queue "
    "idles the rest. Two changes came of it:",
    "", "- A file console now has four buffers of 1 MiB, up to three queued for its "
    "thread, instead of two of 4 MiB: the loop no longer waited for it at all, and the "
    "run went from 6.51 to 7.00 M lines/s (median of 13 interleaved runs; eight buffers "
    "of 1 MiB gave 7.07, two of 4 MiB as before 6.72, sixteen no more).",
    "- The rule threads run at a nice value 3 above the agent's, so that the loop goes "
    "first when both cores are busy: 6.79 to 7.18 M lines/s (median of 11 interleaved "
    "runs; the median of the paired ratios 1.056; +1, +2 and +5 gave about the same). "
    "On a training node the rule work of a flood then also yields to the training "
    "processes.",
    "", "Two other shapes were measured and left (ninth session, 8 ranks, four rules, "
    "interleaved runs): the rules on the loop thread itself, with no rule threads, cost "
    "the agent less CPU (221–232 ns a line against 214–247) but carried only 5.16–5.43 M "
    "lines/s, one thread doing all the work; and reading the pipes on two threads at "
    "once (each read pass split between the loop and a helper thread by stream, the "
    "rules run where the line is read, the helper's console lines copied into the "
    "console at the end of the pass) carried 6.53 M lines/s against 6.75 for the rule "
    "threads: the console copy took 0.09–0.14 s a run and the loop waited 0.04–0.09 s "
    "for the helper at the ends of passes."]

# Measured by hand in the tenth session: what the engine's instructions
# went to after the ninth, and what came off.
ENGINE10_NOTE = [
    "", "The engine in the tenth session (callgrind, bench-logmon pipeline progress): "
    "2,040 instructions a progress line, from 2,281, and 645 a line that no rule "
    "matches (info), from 877. JobHangingDetection and LowThroughputDetection start "
    "alike (`\\[Epoch 0 Batch \\d+`): the set now gives such heads an id and a "
    "stream remembers, per line, where the first `[` is and where the head matched "
    "there, so the head runs once a line; a pattern without groups to read, whose head "
    "is shared, answers through its split form (the tail lazy, not capturing, at the "
    "literal's occurrences in line order) for less than its own search. A line that is "
    "all ASCII and holds no \\n is recognised 16 bytes a step (GCC vector "
    "extensions: SSE2 here, NEON on arm64), 61 instructions fewer; a rule's literal is "
    "looked for before the call into its forms, 71 fewer; literals are compared eight "
    "bytes at a time; the stream's state is only recomputed after a line that moved a "
    "rule; and a literal's anchor byte is chosen by letter frequencies, so that "
    "JobStart's \"Experiment configuration\" is looked for by its `x`, not by the `E` "
    "of every `[Epoch` line. bench-logmon went from 92 to 84 ns a line (six "
    "interleaved runs), and the agent at 8 ranks from 2,697 to 2,396 instructions a "
    "line over all its threads (8 × 100,000 lines, callgrind). The three PCRE2 calls a "
    "progress line needs (the shared head and the two tails) are now about 700 of the "
    "2,040.",
    "", "What kept the loop thread off its CPU (tenth session, sched_switch events with "
    "their stacks, one 8-rank run of 1.1 s with the rules): it was preempted about 2,500 "
    "times, 315 ms in all, against 29 ms waiting for room in a rule queue and 17 ms for "
    "the console. About 1,100 of the preemptions came right after a pipe read (the "
    "producer it woke), 650 right after the signal that woke a rule thread and 630 "
    "right after an unlock that woke the console's thread. The rule threads now run "
    "under SCHED_BATCH, which keeps their share of the CPU but lets a waking thread "
    "never preempt the one running: those 650 fell to about 220, and the run went from "
    "6.12 to 6.50 and from 6.38 to 7.12 M lines/s (two sets of 16 runs in alternating "
    "order; the median of the paired ratios 1.067 and 1.084, the new binary ahead in 21 "
    "of 32; a third set after the full run, 1.012, ahead in 6 of 10). At 64 ranks it did "
    "not help: 0.941, 0.984 and 0.990 in sets of 12, 12 and 20, ahead in 16 of 44, perhaps because a "
    "rule thread that cannot preempt waits longer behind 64 runnable producers; kept for "
    "8 ranks, the common node, and because a flood's rule work should never preempt a "
    "training process. Measured and left: the console's thread under SCHED_BATCH as well (paired "
    "0.98), or at nice +3 (0.935); signalling the rule and console threads after the "
    "unlock rather than before (10 % fewer context switches, but 3–7 % slower: the "
    "woken thread then preempts the loop at once); three or four rule threads instead "
    "of two (no difference against the tee limit, 0.601 and 0.599 of it)."]

# Measured by hand in the seventh session: what one read pass of the steady
# job costs, and why reading less often does not help.
STEADY_NOTE = [
    "", "With the rules on rank 0 only, the agent runs the steady job on one thread "
    "(about 105 wakeups a second, 200 µs of CPU each, seventh session, /proc schedstat). "
    "Most of a pass is the kernel writing the bytes into tmpfs, and it costs more after "
    "the CPU has idled: an 88 KiB write into a tmpfs file took 38 µs back to back and 79 "
    "µs after 10 ms of sleep (a Python loop on this VM, thread CPU time). Pacing the reads "
    "and console writes at 20 ms or 50 ms instead of 10 measured worse (2.5 % against 2.1 "
    "%, median of 4 interleaved 10-second runs): the larger batches miss the caches, and "
    "at 50 ms a read passes the fast-writer size and ends the pacing. The same 10-second "
    "run of one binary ranged over 1.6–2.6 % between spells of the machine, so the 2 % "
    "target sits inside that spread; the tee processes, which do strictly less, used "
    "more in each of the seventh session's runs."]


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
    tee = tools.get("tee")
    hpr = tools.get("hyperpodrun")
    if tee and hpr:
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
        out += ["", text]
    return out


def document(data, plot_rel):
    out = ["# Benchmarks", "",
           "hyperpodrun side by side with torchrun, on one machine, in one run. Generated by "
           "`./dev.sh bench` (bench/run.py, then bench/report.py from bench/results/*.json): "
           "do not edit by hand, run it again. Each benchmark is also a script of its own, "
           "`/usr/bin/python3 bench/bench_NAME.py` (`--help`; `--smoke` for a seconds-long "
           "check, which `./dev.sh test` runs).", "",
           "torchrun is Debian's python3-torch 1.13 launcher, run through "
           "`bench/torchrun_compat.py`, which replaces `Std.from_str` (it breaks on Python "
           "3.11) and calls `torch.distributed.run.main()`. It is given "
           "`--monitor_interval 0.1`, the default of current torch; 1.13's default of 5 s "
           "would add up to 5 s to each of its figures. The workers are `bench/producer.c`, "
           "built with `cc -O2`; it formats lines into 1 MiB buffers, so that it is never "
           "what limits a run, and writes them 8 KiB at a time, cut anywhere, as a Python "
           "worker's buffered stdout does. Until the fourth session it wrote up to 1 MiB "
           "per write(), which no worker does. hyperpodrun's workers write into pipes, "
           "as the tee limit's do.", ""]
    out += machine_section(data) + [""]
    out += targets_section(data) + [""]
    sections = [("launch", launch_section), ("pipeline", None), ("hang", hang_section),
                ("restart", restart_section), ("steady", steady_section),
                ("static", static_section)]
    for name, fn in sections:
        if name not in data:
            out += [f"## {name}", "", "Not run: no results file.", ""]
            continue
        if name == "pipeline":
            out += (pipeline_section(data[name], plot_rel) + pipeline_analysis(data[name])
                    + MEMORY_NOTE + THREADS_NOTE + ENGINE_NOTE + WAITS_NOTE
                    + ENGINE10_NOTE)
        elif name == "steady":
            out += fn(data[name], bare_line_ns(data.get("pipeline"))) + STEADY_NOTE
        else:
            out += fn(data[name])
        out += [""]
    return "\n".join(out)


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
