#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes SIZE bytes of printable text with no line terminator to stdout.

usage: big_line.py SIZE [TRAILER]

The bytes are a repeating pattern of the 64 characters [0-9A-Za-z._], so a
test can rebuild them; TRAILER (e.g. "\\n" or "") is written after them,
with backslash escapes decoded.
"""
import os
import sys

ALPHABET = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz._"


def pattern(size):
    reps = size // len(ALPHABET) + 1
    return (ALPHABET * reps)[:size]


def main():
    size = int(sys.argv[1])
    trailer = sys.argv[2].encode().decode("unicode_escape").encode("latin-1") \
        if len(sys.argv) > 2 else b""
    data = pattern(size) + trailer
    view = memoryview(data)
    while view:
        n = os.write(1, view[: 1 << 20])
        view = view[n:]


if __name__ == "__main__":
    main()
