#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Runs every benchmark, then writes BENCHMARKS.md from their results.

    /usr/bin/python3 bench/run.py            the full run (./dev.sh bench):
                                             bench/results/*.json, the plot,
                                             BENCHMARKS.md
    /usr/bin/python3 bench/run.py --smoke    seconds per benchmark, results
                                             and report in a temporary
                                             directory (./dev.sh bench-smoke,
                                             part of ./dev.sh test)

Each benchmark runs as its own process; one that fails is reported and the
others still run. The last line says "bench: N passed, N failed" (the
report counts as one), which ./dev.sh adds to its totals.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl

BENCHMARKS = ["launch", "pipeline", "hang", "restart", "steady", "static", "ipr", "ft",
              "store", "rdzv", "rdzvscale"]
# A benchmark whose script is not bench_NAME.py.
SCRIPTS = {"rdzvscale": "bench_rdzv_scale.py"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--only", default=None,
                   help="comma-separated benchmarks to run (default all: "
                        + ",".join(BENCHMARKS) + ")")
    p.add_argument("--keep", action="store_true",
                   help="with --smoke: keep the temporary results directory")
    args = p.parse_args()
    names = args.only.split(",") if args.only else BENCHMARKS
    for n in names:
        if n not in BENCHMARKS:
            p.error(f"--only: no benchmark named {n!r}")
    if args.smoke:
        out = Path(tempfile.mkdtemp(prefix="hpr-bench-smoke-"))
        report = out / "BENCHMARKS.md"
    else:
        out = bl.RESULTS
        report = bl.ROOT / "BENCHMARKS.md"
    bl.hyperpodrun_path()  # fails early, with the reason, when not built
    bl.producer_path()
    passed = failed = 0
    for name in names:
        script = SCRIPTS.get(name, f"bench_{name}.py")
        cmd = [bl.PYTHON, str(bl.BENCH / script), "--out", str(out)]
        if args.smoke:
            cmd.append("--smoke")
        print(f"==> bench {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.run(cmd).returncode
        print(f"==> bench {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        if rc == 0:
            passed += 1
        else:
            failed += 1
    rc = subprocess.run([bl.PYTHON, str(bl.BENCH / "report.py"), "--results", str(out),
                         "--out", str(report)]).returncode
    if rc == 0:
        passed += 1
    else:
        failed += 1
    if args.smoke and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    print(f"bench: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
