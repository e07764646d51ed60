#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Closes its stdout, keeps running, then writes to stderr.

usage: close_stdout.py CONSOLE_OUT NLINES

Writes "before close" to stdout, closes fd 1, waits (bounded) until the
line shows up in CONSOLE_OUT (hyperpodrun's stdout, a file), then writes
NLINES lines to stderr and exits 0.
"""
import os
import sys
import time


def main():
    console, nlines = sys.argv[1], int(sys.argv[2])
    rank = os.environ["LOCAL_RANK"]
    os.write(1, f"before close {rank}\n".encode())
    os.close(1)
    want = f"before close {rank}\n".encode()
    end = time.monotonic() + 20
    while time.monotonic() < end:
        with open(console, "rb") as f:
            if want in f.read():
                break
        time.sleep(0.01)
    else:
        os.write(2, b"console never showed the stdout line\n")
        os._exit(3)
    for i in range(nlines):
        os.write(2, f"after close {rank} {i}\n".encode())
    # sys.stdout wraps the closed fd; skip the interpreter's flush of it.
    os._exit(0)


if __name__ == "__main__":
    main()
