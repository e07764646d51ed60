#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile output paths, by hand: what a backtracking log rule costs the
workers, and how late SIGTERM reaches them while nobody reads stderr.

  rule      one rank writes LINES lines of 3,000 bytes that make the rule
            (.*a){12}$ backtrack to PCRE2's match limit, through
            hyperpodrun --tee 3 with and without that rule; the worker
            times its own writes (lines per second)
  sigterm   two ranks fill stderr, a pipe nobody reads, and wait; SIGTERM
            to hyperpodrun, then the time until both workers have it
            (capped at --cap seconds: past that it is reported as such)

Not part of bench/run.py: it has no torchrun side and no target. Run it
against two builds with HYPERPODRUN=... to compare them.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import benchlib as bl

RULE = [{"name": "Backtracking", "logPattern": r"(.*a){12}$",
         "expectedStartCutOffInSeconds": 600,
         "expectedRecurringFrequencyInSeconds": 600}]

RULE_WORKER = """#!/usr/bin/python3
import os, sys, time
n = int(sys.argv[1])
body = (('x' * 6 + 'a') * 430)[:2990] + 'x'
out = sys.stdout.buffer
t = time.monotonic()
for i in range(n):
    out.write(('%06d %s\\n' % (i, body)).encode())
out.flush()
open(sys.argv[2], 'w').write(repr(time.monotonic() - t))
"""

TERM_WORKER = """#!/usr/bin/python3
import os, signal, sys, time
d = sys.argv[1]
rank = os.environ['LOCAL_RANK']
def on_term(sig, frame):
    open(d + '/term.' + rank, 'w').write(repr(time.monotonic()))
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
chunk = ('e' * 200 + '\\n') * 500
for _ in range(60):
    sys.stderr.write(chunk)
    sys.stderr.flush()
open(d + '/ready.' + rank, 'w').close()
while True:
    time.sleep(0.05)
"""


def script(d, name, text):
    path = Path(d, name)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def rule_run(hpr, lines, with_rule):
    d = tempfile.mkdtemp(prefix="hpr-bench-faults-", dir=bl.scratch_root())
    try:
        w = script(d, "w.py", RULE_WORKER)
        argv = [hpr, "--standalone", "--nproc-per-node", "1", "--no-python",
                "--tee", "3", "--log-dir", d + "/logs"]
        if with_rule:
            rules = Path(d, "rules.json")
            rules.write_text(json.dumps(RULE))
            argv += ["--log-monitoring-config", str(rules)]
        with open(Path(d, "console"), "wb") as out:
            subprocess.run(argv + [w, str(lines), d + "/took"], stdout=out,
                           stderr=out, check=True, timeout=900)
        return lines / float(Path(d, "took").read_text())
    finally:
        shutil.rmtree(d, ignore_errors=True)


def sigterm_run(hpr, cap):
    d = tempfile.mkdtemp(prefix="hpr-bench-faults-", dir=bl.scratch_root())
    r, w = os.pipe()
    try:
        worker = script(d, "w.py", TERM_WORKER)
        p = subprocess.Popen([hpr, "--standalone", "--nproc-per-node", "2",
                              "--no-python", "--tee", "3", "--log-dir",
                              d + "/logs", worker, d],
                             stdout=subprocess.DEVNULL, stderr=w,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        os.close(w)
        end = time.monotonic() + 30
        while not all(Path(d, f"ready.{i}").exists() for i in range(2)):
            if time.monotonic() > end:
                raise SystemExit("bench: the workers never filled stderr")
            time.sleep(0.01)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        while not all(Path(d, f"term.{i}").exists() for i in range(2)):
            if time.monotonic() - t0 > cap:
                break
            time.sleep(0.001)
        got = [float(Path(d, f"term.{i}").read_text()) - t0
               if Path(d, f"term.{i}").exists() else None for i in range(2)]
        threading.Thread(target=lambda: [None for _ in iter(
            lambda: os.read(r, 65536), b"")], daemon=True).start()
        p.wait(60)
        return None if None in got else max(got)
    finally:
        os.close(r)
        shutil.rmtree(d, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--lines", type=int, default=None,
                   help="lines for the rule runs (default 30000, 300 with "
                        "--smoke)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--cap", type=float, default=30.0,
                   help="longest wait for SIGTERM to reach the workers (s)")
    args = p.parse_args()
    hpr = bl.hyperpodrun_path()
    lines = args.lines or (300 if args.smoke else 30000)
    reps = args.repeats or (1 if args.smoke else 5)
    with_rule, without, term = [], [], []
    for _ in range(reps):
        with_rule.append(rule_run(hpr, lines, True))
        without.append(rule_run(hpr, lines, False))
        term.append(sigterm_run(hpr, args.cap))
        print(f"  rule {with_rule[-1]:12,.0f} lines/s  no rule "
              f"{without[-1]:12,.0f} lines/s  SIGTERM "
              + (f"{term[-1] * 1e3:.2f} ms" if term[-1] is not None
                 else f"> {args.cap:.0f} s"), flush=True)
    print(f"worker lines/s with the backtracking rule: "
          f"{statistics.median(with_rule):,.0f} (median of {reps}), without: "
          f"{statistics.median(without):,.0f}")
    late = [t for t in term if t is not None]
    print("SIGTERM to both workers with stderr unread: "
          + (f"{statistics.median(late) * 1e3:.2f} ms (median)" if
             len(late) == len(term) else
             f"{len(term) - len(late)} of {len(term)} runs over "
             f"{args.cap:.0f} s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
