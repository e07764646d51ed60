#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Starts a daemon that escapes the worker's process group, then exits 0.

usage: daemonize.py OUTDIR

Double fork + setsid; the daemon ignores SIGTERM, SIGINT and SIGHUP, keeps
the worker's stdout and stderr open, writes OUTDIR/daemon (its pid) and
sleeps. The worker waits for that file and exits 0.
"""
import os
import signal
import sys
import time


def main():
    outdir = sys.argv[1]
    path = os.path.join(outdir, "daemon")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(s, signal.SIG_IGN)
            os.write(1, b"daemon started\n")
            with open(path + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(path + ".tmp", path)
            while True:
                time.sleep(1000)
        os._exit(0)
    end = time.monotonic() + 20
    while not os.path.exists(path):
        if time.monotonic() > end:
            os._exit(97)
        time.sleep(0.01)
    print("worker done", flush=True)


if __name__ == "__main__":
    main()
