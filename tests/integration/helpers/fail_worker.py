#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A worker group in which one rank fails in a chosen way.

usage: fail_worker.py OUTDIR FAIL_RANK HOW [NLINES]

Every rank writes OUTDIR/pid_<rank> (its pid) once it is running. The rank
FAIL_RANK waits (bounded) until all ranks have done so, prints NLINES lines
(default 20) to stdout and to stderr and a last partial line, then fails:

  exit:C          exits with code C
  signal:N        kills itself with signal N (no core dump)
  errorjson:C     writes TORCHELASTIC_ERROR_FILE in torch's format, exits C
  errorplain:C    writes the plain-string error file variant, exits C

The other ranks sleep until they are killed.
"""
import json
import os
import resource
import signal
import sys
import time


def wait_all(outdir, world, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(os.path.exists(os.path.join(outdir, f"pid_{r}")) for r in range(world)):
            return
        time.sleep(0.01)
    os.write(2, b"fail_worker: siblings never started\n")
    os._exit(99)


def main():
    outdir, fail_rank, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    nlines = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["LOCAL_WORLD_SIZE"])
    path = os.path.join(outdir, f"pid_{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)

    if rank != fail_rank:
        while True:
            time.sleep(1000)

    wait_all(outdir, world)
    for i in range(nlines):
        os.write(1, f"rank {rank} stdout line {i}\n".encode())
        os.write(2, f"rank {rank} stderr line {i}\n".encode())
    os.write(1, b"last words without newline")
    os.write(2, b"last error words")

    kind, arg = how.split(":")
    arg = int(arg)
    if kind == "exit":
        os._exit(arg)
    if kind == "signal":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if arg not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(arg, signal.SIG_DFL)
        os.kill(os.getpid(), arg)
        time.sleep(10)
        os._exit(98)
    if kind == "errorjson":
        record = {"message": {
            "message": "ValueError: the marker 5f3c is bad",
            "extraInfo": {
                "py_callstack": "Traceback (most recent call last):\n"
                                "  File \"train.py\", line 7, in <module>\n"
                                "    main()\n"
                                "ValueError: the marker 5f3c is bad\n",
                "timestamp": str(int(time.time())),
            }}}
    elif kind == "errorplain":
        record = {"message": "plain message 9a1b", "timestamp": int(time.time())}
    else:
        raise SystemExit(f"unknown mode {how}")
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump(record, f)
    os._exit(arg)


if __name__ == "__main__":
    main()
