#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A worker (plus one grandchild in its process group) that records signals.

usage: sigworker.py OUTDIR MODE [FAIL_RANK]

Each process appends "<SIGNAME> <CLOCK_MONOTONIC seconds>" to
OUTDIR/sig_<who>_<rank> for every SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1
and SIGUSR2 it receives (who: w = worker, g = grandchild), and writes
OUTDIR/ready_<who>_<rank> (containing its pid) once its handlers are in
place; the worker only after its grandchild is ready.

MODE:
  exit-on-term  a terminating signal exits with 128+N; SIGUSR1/2 are noted
  ignore-term   SIGTERM is noted and otherwise ignored
  until-usr     exits 0 once it has had both SIGUSR1 and SIGUSR2
If FAIL_RANK is given, that rank exits 3 once every rank is ready.
Set SIGW_GRANDCHILD=0 for no grandchild.
"""
import os
import signal
import subprocess
import sys
import time

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
           signal.SIGUSR1, signal.SIGUSR2)
TERMINATING = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}


def atomic_write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def wait_for(paths, timeout=20):
    end = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > end:
            os.write(2, f"sigworker: timed out waiting for {paths}\n".encode())
            os._exit(97)
        time.sleep(0.01)


def main():
    outdir, mode = sys.argv[1], sys.argv[2]
    grandchild = len(sys.argv) > 3 and sys.argv[3] == "--grandchild"
    fail_rank = int(sys.argv[3]) if len(sys.argv) > 3 and not grandchild else None
    who = "g" if grandchild else "w"
    rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["LOCAL_WORLD_SIZE"])
    log = os.path.join(outdir, f"sig_{who}_{rank}")
    got = set()

    def handler(signum, frame):
        with open(log, "a") as f:
            f.write(f"{signal.Signals(signum).name} {time.monotonic():.6f}\n")
        got.add(signum)
        if signum in TERMINATING and not (mode == "ignore-term"
                                          and signum == signal.SIGTERM):
            os._exit(128 + signum)

    for s in HANDLED:
        signal.signal(s, handler)

    child = None
    want_child = os.environ.get("SIGW_GRANDCHILD", "1") == "1"
    if not grandchild and want_child:
        child = subprocess.Popen([sys.executable, __file__, outdir, mode,
                                  "--grandchild"])
        wait_for([os.path.join(outdir, f"ready_g_{rank}")])
    atomic_write(os.path.join(outdir, f"ready_{who}_{rank}"), str(os.getpid()))

    if fail_rank is not None and rank == fail_rank:
        wait_for([os.path.join(outdir, f"ready_w_{r}") for r in range(world)])
        os._exit(3)

    while True:
        if mode == "until-usr" and {signal.SIGUSR1, signal.SIGUSR2} <= got:
            if child is not None:
                child.wait()
            os._exit(0)
        time.sleep(0.02)  # a bounded poll: pause() could miss a signal


if __name__ == "__main__":
    main()
