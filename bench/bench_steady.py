#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark 5, overhead during a steady job: 8 ranks each printing 10,000
training-style lines per second (a batch every 10 ms) for 20 s, with
--tee 3 and the console to a file. The launcher's own CPU time over the
run's wall time, in % of one core, and its peak RSS (VmHWM of the launcher
process alone, sampled every 20 ms).

  hyperpodrun            the four seed rules on local rank 0 (the default
                         --log-monitor-ranks; what the rules cost on every
                         rank is benchmark 2's subject)
  torchrun               --tee 3 (no rules)
  tee, one per rank      the same producers each piped through
                         `tee FILE > CONSOLE`: what moving these bytes
                         costs with nothing else done (the sum of the tee
                         processes' CPU; RSS: one tee's)

Target: under 2 % of one core.
"""

import shutil
import sys
from pathlib import Path

import benchlib as bl

TOOLS = ["hyperpodrun", "torchrun", "tee"]
LABELS = {"hyperpodrun": "hyperpodrun, rules on rank 0",
          "torchrun": "torchrun",
          "tee": "tee, one per rank"}


def argv_for(tool, hpr, producer, nproc, lines, rate, logdir, rules):
    worker = ["--no-python", producer, "lines", str(lines), str(rate)]
    if tool == "tee":
        return bl.tee_command(worker[1:], nproc, logdir)
    if tool == "torchrun":
        return bl.torchrun_argv() + [
            "--standalone", "--nproc_per_node", str(nproc), "--monitor_interval", "0.1",
            "--tee", "3", "--log_dir", logdir] + ["--no_python"] + worker[1:]
    argv = [hpr, "--standalone", "--nproc-per-node", str(nproc), "--tee", "3",
            "--log-dir", logdir, "--log-monitoring-config", rules]
    return argv + worker


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=None, help="default 20 (1 with --smoke)")
    args = p.parse_args()
    hpr = bl.hyperpodrun_path()
    producer = bl.producer_path()
    reps = bl.repeats(args)
    nproc, rate = (2, 1000) if args.smoke else (8, 10000)
    seconds = args.seconds or (1 if args.smoke else 20)
    lines = int(rate * seconds)
    tools = [t for t in TOOLS if not (args.no_torchrun and t == "torchrun")]
    cmds = {LABELS[t]: argv_for(t, "hyperpodrun", "producer", nproc, lines, rate, "LOGDIR",
                                "rules.json") for t in tools}
    if "torchrun" in tools:
        cmds[LABELS["torchrun"]][:2] = ["torchrun"]
    result = bl.result_header(args, "steady", hpr, cmds)
    scratch = bl.make_scratch("steady")
    runs = {t: [] for t in tools}
    try:
        rules = bl.write_rules(Path(scratch, "rules.json"), bl.PIPELINE_RULES)
        for _ in range(reps):
            for t in tools:
                logdir = Path(scratch, "logs")
                console = Path(scratch, "console")
                if t == "tee":
                    r = bl.run_tee([producer, "lines", str(lines), str(rate)], nproc,
                                   scratch)
                    r.hwm_kb = bl.time_v_maxrss(["tee", "/dev/null"])
                    got = r.console_lines
                    shutil.rmtree(Path(scratch, "tee"))
                else:
                    r = bl.run_measured(argv_for(t, hpr, producer, nproc, lines, rate,
                                                 str(logdir), rules),
                                        env=bl.clean_env(), stdout=str(console),
                                        stderr=str(Path(scratch, "err")), sample_rss=True,
                                        timeout=seconds * 3 + 60)
                    bl.check(r.rc == 0, f"{t} exited {r.rc}")
                    got = bl.count_lines(console)
                bl.check(got == nproc * lines, f"{t}: {got} console lines, expected "
                                               f"{nproc * lines}")
                runs[t].append({"cpu_s": r.cpu, "wall_s": r.wall,
                                "cpu_pct": 100 * r.cpu / r.wall, "rss_kb": r.hwm_kb})
                print(f"  {LABELS[t]:32s} {100 * r.cpu / r.wall:6.2f} % of a core  "
                      f"{r.hwm_kb / 1024:6.1f} MiB", flush=True)
                shutil.rmtree(logdir, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.update(nproc=nproc, rate=rate, seconds=seconds)
    result["tools"] = {t: {"cpu_pct": bl.median([m["cpu_pct"] for m in ms]),
                           "rss_kb": bl.median([m["rss_kb"] for m in ms]),
                           "runs": ms} for t, ms in runs.items()}
    h = result["tools"]["hyperpodrun"]
    tr = result["tools"].get("torchrun")
    result["cpu_ratio"] = bl.ratio(tr and tr["cpu_pct"], h["cpu_pct"])
    result["rss_ratio"] = bl.ratio(tr and tr["rss_kb"], h["rss_kb"])
    result["targets"] = [{"what": "steady job under 2 % of one core (rules on rank 0)",
                          "value": h["cpu_pct"], "unit": "%", "met": h["cpu_pct"] < 2}]
    bl.finish_result(result)
    tee = result["tools"].get("tee")
    result["tee_ratio"] = bl.ratio(h["cpu_pct"], tee and tee["cpu_pct"])
    rows = [[LABELS[t], v["cpu_pct"], v["rss_kb"] / 1024] for t, v in result["tools"].items()]
    if tr:
        rows.append(["torchrun / hyperpodrun", result["cpu_ratio"], result["rss_ratio"]])
    bl.print_table(f"steady job, {nproc} ranks x {rate} lines/s for {seconds:g} s, "
                   f"median of {reps}", ["", "CPU % of one core", "peak RSS MiB"], rows)
    bl.print_targets(result)
    bl.write_result(args, "steady", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
