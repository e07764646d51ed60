#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of the fuzz targets from the engine's test cases
(tests/logmon/cases/*.txt): each case's rules as a rule file (corpus/rules)
and the case as a stream script (corpus/stream, format in fuzz_stream.c).
Run it again after adding cases; corpus/replay is written by hand.

Usage: make_seeds.py [CASES_DIR]
"""
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent / "logmon" / "cases"
OPS = {"tick": "t", "advance": "t", "start": "S", "suspend": "s",
       "resume": "r", "clear": "c"}


def unescape(text):
    """The escapes of test_cases.c: \\xHH, \\t, \\r, \\\\."""
    out = bytearray()
    i = 0
    raw = text.encode()
    while i < len(raw):
        if raw[i:i + 1] == b"\\" and i + 1 < len(raw):
            c = raw[i + 1:i + 2]
            if c == b"x" and i + 3 < len(raw):
                out.append(int(raw[i + 2:i + 4], 16))
                i += 4
                continue
            out += {b"t": b"\t", b"r": b"\r", b"\\": b"\\"}.get(c, b"\\" + c)
            i += 2
            continue
        out += raw[i:i + 1]
        i += 1
    return bytes(out)


def sections(path):
    current, found = None, {}
    for line in path.read_text().split("\n"):
        if line.startswith("%"):
            current = line.split(" ", 1)[0][1:]
            found.setdefault(current, [])
        elif current is not None and not line.startswith("#"):
            found[current].append(line)
    return found


def main():
    rules_dir, stream_dir = HERE / "corpus" / "rules", HERE / "corpus" / "stream"
    rules_dir.mkdir(parents=True, exist_ok=True)
    stream_dir.mkdir(parents=True, exist_ok=True)
    count = 0
    for case in sorted(CASES.glob("*.txt")):
        found = sections(case)
        rules = "\n".join(found.get("rules", [])).strip()
        if not rules:
            continue
        (rules_dir / (case.stem + ".json")).write_text(rules + "\n")
        script, now = [rules.encode(), b"%%"], 0
        for line in found.get("input", []):
            m = re.match(r"@(\d+) (\w+) ?(.*)$", line)
            if not m:
                continue
            at, op, text = int(m.group(1)), m.group(2), m.group(3)
            delta, now = max(at - now, 0), max(at, now)
            if op == "line":
                script.append(b"l%d " % delta + unescape(text))
            elif op in OPS:
                script.append(b"%s%d" % (OPS[op].encode(), delta))
        (stream_dir / (case.stem + ".script")).write_bytes(
            b"\n".join(script) + b"\n")
        count += 1
    print(f"make_seeds: {count} cases written to {rules_dir} and {stream_dir}")


if __name__ == "__main__":
    main()
