#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Leaves an orphan behind for the agent (a subreaper) to adopt and reap.

usage: orphan_maker.py OUTDIR

The worker forks A, A forks B and exits at once, so B is reparented to the
nearest subreaper. B writes OUTDIR/orphan ("<pid> <ppid>") once it has been
reparented, waits for OUTDIR/go and exits 0 -- leaving a zombie unless its
new parent reaps it. The worker itself exits 0 once OUTDIR/done exists.
"""
import os
import sys
import time


def wait_for(path, timeout=20):
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            os._exit(97)
        time.sleep(0.01)


def main():
    outdir = sys.argv[1]
    a = os.fork()
    if a == 0:
        parent = os.getpid()  # A; B may run only after A is gone
        if os.fork() == 0:
            end = time.monotonic() + 20
            while os.getppid() == parent:
                if time.monotonic() > end:
                    os._exit(96)
                time.sleep(0.005)
            path = os.path.join(outdir, "orphan")
            with open(path + ".tmp", "w") as f:
                f.write(f"{os.getpid()} {os.getppid()}")
            os.rename(path + ".tmp", path)
            wait_for(os.path.join(outdir, "go"))
            os._exit(0)
        os._exit(0)
    os.waitpid(a, 0)
    wait_for(os.path.join(outdir, "done"))
    os._exit(0)


if __name__ == "__main__":
    main()
