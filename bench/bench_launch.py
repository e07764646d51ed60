#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark 1, launch: 8 workers that exit at once (--no-python /bin/true),
from spawning the launcher until it has exited, and the launcher's peak RSS
as /usr/bin/time -v reports it (ru_maxrss: the launcher or any one of its
workers, whichever is largest; here always the launcher).

Target: at least 100x faster than torchrun, with at most 1/30 of its RSS.
"""

import shutil
import sys

import benchlib as bl

NPROC = 8


def commands(hpr, nproc):
    return {
        "hyperpodrun": [hpr, "--standalone", "--nproc-per-node", str(nproc),
                        "--no-python", "/bin/true"],
        # 1.13 polls its workers every 5 s by default; 0.1 s (torch >= 2.2's
        # default) is the figure a user of a current torchrun sees.
        "torchrun": bl.torchrun_argv() + [
            "--standalone", "--nproc_per_node", str(nproc), "--monitor_interval", "0.1",
            "--no_python", "/bin/true"],
    }


def measure(argv, env, runs, rss_runs):
    walls = []
    for _ in range(runs):
        r = bl.run_measured(argv, env=env, timeout=120)
        bl.check(r.rc == 0, f"{argv[0]} exited {r.rc}")
        walls.append(r.wall)
    rss = [bl.time_v_maxrss(argv, env) for _ in range(rss_runs)]
    return {"wall_s": bl.median(walls), "walls": walls,
            "maxrss_kb": bl.median(rss), "maxrss_runs": rss}


def main():
    args = bl.arg_parser(__doc__.splitlines()[0]).parse_args()
    hpr = bl.hyperpodrun_path()
    reps = bl.repeats(args, full=5)
    cmds = commands(hpr, NPROC)
    if args.no_torchrun:
        del cmds["torchrun"]
    shown = commands("hyperpodrun", NPROC)
    shown["torchrun"][:2] = ["torchrun"]
    result = bl.result_header(args, "launch", hpr, {k: shown[k] for k in cmds})
    scratch = bl.make_scratch("launch")
    try:
        # Both write their default log directory into TMPDIR.
        env = bl.clean_env({"TMPDIR": scratch})
        tools = {}
        for tool, argv in cmds.items():
            # hyperpodrun takes milliseconds: more runs for a stable median.
            runs = reps * (4 if tool == "hyperpodrun" else 1)
            tools[tool] = measure(argv, env, runs, max(1, min(reps, 3)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    h, t = tools["hyperpodrun"], tools.get("torchrun")
    result["nproc"] = NPROC
    result["tools"] = tools
    result["speedup"] = bl.ratio(t and t["wall_s"], h["wall_s"])
    result["rss_ratio"] = bl.ratio(t and t["maxrss_kb"], h["maxrss_kb"])
    result["targets"] = [
        {"what": "launch at least 100× faster than torchrun", "value": result["speedup"],
         "unit": "×", "met": bl.at_least(result["speedup"], 100)},
        {"what": "peak RSS at most 1/30 of torchrun's", "value": result["rss_ratio"],
         "unit": "× smaller", "met": bl.at_least(result["rss_ratio"], 30)},
    ]
    bl.finish_result(result)
    rows = [[tool, v["wall_s"] * 1000, v["maxrss_kb"] / 1024] for tool, v in tools.items()]
    if t:
        rows.append(["torchrun / hyperpodrun", result["speedup"], result["rss_ratio"]])
    bl.print_table(f"launch: {NPROC} x /bin/true, median of {reps} (hyperpodrun "
                   f"{reps * 4})", ["", "wall ms", "peak RSS MiB"], rows)
    bl.print_targets(result)
    bl.write_result(args, "launch", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
