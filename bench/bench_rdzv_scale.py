#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark 11, rendezvous as agents grow: 8 to 256 agents (c10d).

N agents on loopback meet with --rdzv-backend c10d, each with one trivial
worker (bench/producer.c `start`: it stamps CLOCK_MONOTONIC on entry and
exits 0). The rendezvous time runs from a stamp taken just before the
first agent is spawned to the moment the last of the N workers runs its
first instruction; every agent must then exit 0. The cost as it grows is
the agents' CPU time over the rendezvous: the moment the bench sees the
last worker's stamp it sums every live thread's run time
(/proc/PID/task/*/schedstat) over all agents, and gives it per agent; the
agents' whole lives (startup, rendezvous, the worker, the exit barrier)
come from wait4, their one trivial worker included.

torchrun's c10d agents (--monitor_interval 0.1) run the same where the
machine holds them: one torchrun agent's peak RSS is measured first, and a
size whose agents would need more than --memory-share (0.75) of
MemAvailable is skipped, with the figures that say so in the results.
"""

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import benchlib as bl

DEADLINE_S = 300  # for one run of N agents, start to the last exit
POLL_S = 0.005


def argv_for(tool, hpr, producer, stamps, logdir, n, port):
    endpoint = f"127.0.0.1:{port}"
    worker = [producer, "start", str(stamps)]
    if tool == "hyperpodrun":
        return [hpr, "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                "--rdzv-id", "bench", "--nnodes", str(n), "--nproc-per-node", "1",
                "--log-dir", str(logdir), "--no-python"] + worker
    return bl.torchrun_argv() + [
        "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "bench",
        "--nnodes", str(n), "--nproc_per_node", "1", "--monitor_interval", "0.1",
        "--log_dir", str(logdir), "--no_python"] + worker


def mem_available_kb():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def raise_fd_limit(n):
    """Each agent inherits the bench's limit, and the agent that hosts the
    store holds a socket per agent: the soft limit goes up to the hard one,
    and a size that would not fit is refused with both figures."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = 4 * n + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit(f"bench_rdzv_scale: {n} agents need about {need} file descriptors in "
                 f"the agent that hosts the store; ulimit -Hn is {hard}")
    return hard


def live_cpu_s(pid):
    """Every live thread's run time, in seconds (ns in schedstat)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except OSError:
            pass  # a thread that ended
    return total / 1e9


def kill_all(procs):
    bl.kill_trees([p.pid for p in procs])
    for p in procs:
        p.wait()


def one_run(tool, hpr, producer, scratch, n):
    stamps = Path(scratch, "stamps")
    stamps.unlink(missing_ok=True)
    shutil.rmtree(Path(scratch, "logs"), ignore_errors=True)
    for old in Path(scratch).glob("agent*.err"):
        old.unlink()
    port = bl.free_port()
    env = bl.clean_env()
    procs = []

    def fail(what, agent=0):
        err = Path(scratch, f"agent{agent}.err")
        tail = err.read_text(errors="replace")[-1500:] if err.exists() else ""
        raise bl.Failure(f"{tool}, {n} agents: {what}: agent {agent} said: {tail}")

    index, rcs, cpu = {}, {}, {}

    def reap():
        """Reaps the agents that have exited: their CPU time comes from
        wait4 (all their threads, their one worker included); one that
        failed fails the run at once."""
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            i = index.get(pid)
            if i is None:
                continue
            procs[i].returncode = rcs[i] = os.waitstatus_to_exitcode(status)
            cpu[i] = ru.ru_utime + ru.ru_stime
            if rcs[i] != 0:
                fail(f"agent {i} exited {rcs[i]}", i)

    try:
        t0 = time.monotonic_ns()
        for i in range(n):
            with open(Path(scratch, f"agent{i}.err"), "w") as err:
                procs.append(subprocess.Popen(
                    argv_for(tool, hpr, producer, stamps, Path(scratch, "logs", str(i)), n,
                             port),
                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=err, start_new_session=True))
            index[procs[-1].pid] = i
        spawned = time.monotonic_ns()
        deadline = time.monotonic() + DEADLINE_S
        while True:
            reap()
            st = [s for s in bl.read_stamps(stamps) if s[0] == "start"]
            if len(st) >= n:
                break
            if time.monotonic() > deadline:
                fail(f"{len(st)} of {n} workers started within {DEADLINE_S} s")
            time.sleep(POLL_S)
        # Every worker has run: the agents' CPU so far is the rendezvous'.
        reap()
        rdzv_cpu = sum(cpu.values()) + sum(live_cpu_s(p.pid) for i, p in enumerate(procs)
                                            if i not in rcs)
        while len(rcs) < n:
            if time.monotonic() > deadline:
                fail(f"{n - len(rcs)} of {n} agents had not exited within {DEADLINE_S} s",
                     next(i for i in range(n) if i not in rcs))
            time.sleep(POLL_S)
            reap()
        life_cpu = sum(cpu.values())
    except BaseException:
        kill_all(procs)
        raise
    st = [s for s in bl.read_stamps(stamps) if s[0] == "start"]
    bl.check(len(st) == n, f"{tool}, {n} agents: {len(st)} worker starts, expected {n}")
    starts = sorted(ns for _, _, _, ns in st)
    return {"rdzv_ms": (starts[-1] - t0) / 1e6,
            "first_worker_ms": (starts[0] - t0) / 1e6,
            "spawn_ms": (spawned - t0) / 1e6,
            "rdzv_cpu_s_per_agent": rdzv_cpu / n,
            "life_cpu_s_per_agent": life_cpu / n}


def agent_rss_kb(tool, hpr, producer, scratch):
    """One agent's peak RSS, alone in a round of one (/usr/bin/time -v)."""
    stamps = Path(scratch, "rss-stamps")
    argv = argv_for(tool, hpr, producer, stamps, Path(scratch, "rss-logs"), 1,
                    bl.free_port())
    kb = bl.time_v_maxrss(argv, env=bl.clean_env())
    bl.check(len(bl.read_stamps(stamps)) == 1, f"{tool}: a round of one ran no worker")
    stamps.unlink()
    return kb


def fits(n, rss_kb, share):
    """None when n agents of rss_kb fit in share of MemAvailable, else why
    not, with the figures."""
    avail = mem_available_kb()
    need = n * rss_kb
    if need <= avail * share:
        return None
    return {"why": f"{n} agents × {rss_kb / 1024:.0f} MiB peak RSS = "
                   f"{need / 1048576:.1f} GiB, more than {share:g} of the "
                   f"{avail / 1048576:.1f} GiB MemAvailable",
            "rss_mib": rss_kb / 1024, "need_mib": need / 1024,
            "mem_available_mib": avail / 1024, "memory_share": share}


def summary(runs):
    return {k: bl.median([r[k] for r in runs]) for k in runs[0]}


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--agents", default=None,
                   help="comma-separated agent counts (default 8,32,64,256; 4 with "
                        "--smoke)")
    p.add_argument("--memory-share", type=float, default=0.75,
                   help="run a tool at a size only when its agents' peak RSS "
                        "fits in this share of MemAvailable (default 0.75: "
                        "a quarter is left to the rest of a machine that may "
                        "have no swap, where an OOM kill would end more than "
                        "the bench)")
    args = p.parse_args()
    if not 0 < args.memory_share <= 0.9:
        p.error(f"--memory-share {args.memory_share}: expected above 0 and "
                "at most 0.9")
    counts = [int(x) for x in
              (args.agents or ("4" if args.smoke else "8,32,64,256")).split(",")]
    raise_fd_limit(max(counts))
    hpr = bl.hyperpodrun_path()
    producer = bl.producer_path()
    reps = bl.repeats(args, full=3)
    tools = ["hyperpodrun"] + ([] if args.no_torchrun else ["torchrun"])
    cmds = {t: argv_for(t, "hyperpodrun", "producer", "STAMPS", "LOGDIR", "N", "PORT")
            for t in tools}
    if "torchrun" in cmds:
        cmds["torchrun"][:2] = ["torchrun"]
    result = bl.result_header(args, "rdzvscale", hpr, cmds)
    scratch = bl.make_scratch("rdzvscale")
    cases = {}
    try:
        rss = {t: agent_rss_kb(t, hpr, producer, scratch) for t in tools}
        for n in counts:
            skipped = {t: fits(n, rss[t], args.memory_share) for t in tools}
            run_tools = [t for t in tools if skipped[t] is None]
            runs = {t: [] for t in run_tools}
            for _ in range(reps):
                for t in run_tools:
                    runs[t].append(one_run(t, hpr, producer, scratch, n))
            case = {t: {**summary(ms), "runs": ms} for t, ms in runs.items()}
            case.update({t: {"skipped": why} for t, why in skipped.items() if why})
            tr = case.get("torchrun", {})
            case["ratio"] = bl.ratio(tr.get("rdzv_ms"), case["hyperpodrun"]["rdzv_ms"])
            case["cpu_ratio"] = bl.ratio(tr.get("rdzv_cpu_s_per_agent"),
                                         case["hyperpodrun"]["rdzv_cpu_s_per_agent"])
            cases[str(n)] = case
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.update({"repeats": reps, "deadline_s": DEADLINE_S, "agent_rss_kb": rss,
                   "cases": cases})
    bl.finish_result(result)
    rows = []
    for n, c in cases.items():
        h, t = c["hyperpodrun"], c.get("torchrun", {})
        rows.append([n, h["rdzv_ms"], t.get("rdzv_ms", "skipped" if "skipped" in t else None),
                     c["ratio"], h["rdzv_cpu_s_per_agent"] * 1e3,
                     None if "rdzv_cpu_s_per_agent" not in t
                     else t["rdzv_cpu_s_per_agent"] * 1e3, c["cpu_ratio"]])
    bl.print_table(f"c10d rendezvous, N agents × 1 trivial worker, median of {reps}",
                   ["agents", "hyperpodrun ms", "torchrun ms", "ratio",
                    "hyperpodrun CPU ms/agent", "torchrun CPU ms/agent", "ratio"], rows)
    for n, c in cases.items():
        for t, v in c.items():
            if isinstance(v, dict) and "skipped" in v:
                print(f"  {t} at {n} agents not run: {v['skipped']['why']}")
    bl.write_result(args, "rdzvscale", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
