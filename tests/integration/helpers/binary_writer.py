#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes pseudo-random binary to stdout and stderr in random chunks.

usage: binary_writer.py OUTDIR SIZE

The payload of each stream holds NUL bytes, invalid UTF-8, lone CR, CRLF
(also split across two writes), and ends without a newline. A copy of
exactly what was written goes to OUTDIR/expect_<rank>_{stdout,stderr}.bin.
"""
import os
import random
import sys


def payload(rng, size):
    parts = [b"start\0with NUL\n", b"bad utf8 \xff\xfe\xc3\x28 \xed\xa0\x80\n",
             b"cr only\rnext\r\n", b"\x00\x00\x00\n", b"tqdm 10%\rtqdm 20%\r"]
    body = rng.randbytes(size)
    parts.append(body)
    parts.append(b"\nno newline at the end \xff")
    return b"".join(parts)


def write_all(fd, data, rng):
    i = 0
    while i < len(data):
        n = rng.randint(1, 5000)
        chunk = data[i:i + n]
        # Split a CRLF across two writes now and then.
        cr = chunk.find(b"\r\n")
        if cr >= 0 and rng.random() < 0.5:
            chunk = chunk[:cr + 1]
        while chunk:
            w = os.write(fd, chunk)
            chunk = chunk[w:]
            i += w


def main():
    outdir, size = sys.argv[1], int(sys.argv[2])
    rank = int(os.environ["LOCAL_RANK"])
    rng = random.Random(1000 + rank)
    data = {1: payload(rng, size), 2: payload(rng, size)}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        with open(os.path.join(outdir, f"expect_{rank}_{name}.bin"), "wb") as f:
            f.write(data[fd])
    # Interleave the two streams.
    write_all(1, data[1][: len(data[1]) // 2], rng)
    write_all(2, data[2][: len(data[2]) // 2], rng)
    write_all(1, data[1][len(data[1]) // 2:], rng)
    write_all(2, data[2][len(data[2]) // 2:], rng)


if __name__ == "__main__":
    main()
