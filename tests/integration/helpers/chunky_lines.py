#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes many lines to stdout and stderr in small random chunks.

usage: chunky_lines.py NLINES

Each rank writes lines(rank, stream, NLINES) to the stream, cut at random
points (mostly mid-line) into separate write(2) calls, alternating between
the two streams and now and then yielding the CPU so that other ranks'
chunks land in between.
"""
import os
import random
import sys
import time

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def lines(rank, stream, n):
    rng = random.Random(f"{rank}-{stream}")
    out = []
    for i in range(n):
        k = rng.choice((0, 1, 3, 8, 20, 60)) if rng.random() > 0.01 else 900
        text = " ".join(rng.choice(WORDS) for _ in range(k))
        out.append(f"r{rank} {stream} {i:05d} {text}".encode())
    return out


def chunks(data, rng):
    i = 0
    while i < len(data):
        n = rng.randint(1, 200)
        yield data[i:i + n]
        i += n


def main():
    n = int(sys.argv[1])
    rank = int(os.environ["LOCAL_RANK"])
    rng = random.Random(rank)
    streams = {1: chunks(b"".join(l + b"\n" for l in lines(rank, "out", n)), rng),
               2: chunks(b"".join(l + b"\n" for l in lines(rank, "err", n)), rng)}
    writes = 0
    while streams:
        fd = rng.choice(sorted(streams))
        try:
            chunk = next(streams[fd])
        except StopIteration:
            del streams[fd]
            continue
        while chunk:
            chunk = chunk[os.write(fd, chunk):]
        writes += 1
        if writes % 50 == 0:
            time.sleep(0.0005)


if __name__ == "__main__":
    main()
