#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A worker whose pipes are held out of its process group's reach.

usage: escaped_holder.py OUTDIR MODE     (or $ESC_DIR and $ESC_MODE)

MODE "sleep": the worker sleeps once set up; "crash": it exits 3.

The worker forks X, which leaves the worker's process group
(setpgid(0, 0)) but keeps the worker's stdout and stderr open and sleeps.
X forks M, which moves back into the worker's group and exits; X never
reaps it, so the worker's group holds a zombie for as long as X lives.
X writes OUTDIR/x_<RANK>_<RESTART> (its pid). Once that is done the worker
writes OUTDIR/ready_<RANK>_<RESTART> and, on a restart, records in
OUTDIR/alive_<RANK>_<RESTART> the earlier attempts' X that are still alive.
A crashing worker waits until every local rank is ready.
"""
import os
import sys
import time


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2:][:1] not in (b"Z", b"X")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.environ["ESC_DIR"]
    mode = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("ESC_MODE",
                                                                "sleep")
    rank = os.environ["RANK"]
    restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
    worker_group = os.getpgrp()
    xfile = os.path.join(outdir, f"x_{rank}_{restart}")
    if os.fork() == 0:
        os.setpgid(0, 0)
        m = os.fork()
        if m == 0:
            os.setpgid(0, worker_group)
            os._exit(0)
        # Wait for M to be a zombie in the worker's group, without
        # reaping it.
        os.waitid(os.P_PID, m, os.WEXITED | os.WNOWAIT)
        with open(xfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(xfile + ".tmp", xfile)
        while True:
            time.sleep(1000)
    end = time.monotonic() + 20
    while not os.path.exists(xfile):
        if time.monotonic() > end:
            os._exit(97)
        time.sleep(0.005)
    earlier = []
    for name in os.listdir(outdir):
        if name.startswith("x_") and not name.endswith(".tmp") and \
                name.split("_")[2] != restart:
            pid = int(open(os.path.join(outdir, name)).read())
            if alive(pid):
                earlier.append(pid)
    with open(os.path.join(outdir, f"alive_{rank}_{restart}"), "w") as f:
        f.write(" ".join(map(str, earlier)))
    print(f"worker {rank} ready", flush=True)
    open(os.path.join(outdir, f"ready_{rank}_{restart}"), "w").close()
    if mode == "crash":
        # Every rank's X is set up before any rank fails.
        ranks = int(os.environ["LOCAL_WORLD_SIZE"])
        end = time.monotonic() + 20
        while not all(os.path.exists(os.path.join(outdir,
                                                  f"ready_{r}_{restart}"))
                      for r in range(ranks)):
            if time.monotonic() > end:
                os._exit(97)
            time.sleep(0.005)
        sys.exit(3)
    while True:
        time.sleep(1000)


if __name__ == "__main__":
    main()
