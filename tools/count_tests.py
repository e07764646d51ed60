#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Counts test cases (not meson test binaries) in a meson testlog.json.

cmocka and pytest each run many cases inside one meson test; this reads
their own summaries from the captured output so the closing line of
dev.sh counts cases. A pytest run that was killed (meson's timeout, a
crash) has no summary: the cases it collected and did not pass or skip
count as failed, so a suite that times out halfway reports every case it
did not run. Any other meson test that failed without a readable summary
counts as one failure. Prints "PASSED FAILED".
"""
import json
import re
import sys

# pytest's last line: "==== 2 failed, 40 passed, 1 skipped in 3.21s ====".
PYTEST_SUMMARY = re.compile(r"^=+ (.*) in [\d.]+s(?: \([^)]*\))? =+$", re.M)
PYTEST_COLLECTED = re.compile(r"^collected (\d+) items?", re.M)
# pytest -v: "path.py::test_name[param] PASSED    [ 40%]"
PYTEST_CASE = re.compile(r"^\S+::\S.* (PASSED|XPASS|SKIPPED|XFAIL)\b", re.M)


def pytest_counts(out, ok):
    """(passed, failed) of a pytest run, or None if out is not one."""
    summaries = PYTEST_SUMMARY.findall(out)
    collected = PYTEST_COLLECTED.findall(out)
    if summaries:
        counts = {word: int(n) for n, word in
                  re.findall(r"(\d+) (\w+)", summaries[-1])}
        passed = counts.get("passed", 0) + counts.get("xpassed", 0)
        failed = (counts.get("failed", 0) + counts.get("error", 0)
                  + counts.get("errors", 0))
        return passed, failed
    if not collected:
        return None
    # Killed before its summary: what did not end well did not run.
    ended = PYTEST_CASE.findall(out)
    passed = sum(1 for r in ended if r in ("PASSED", "XPASS"))
    settled = passed + sum(1 for r in ended if r in ("SKIPPED", "XFAIL"))
    return passed, max(int(collected[-1]) - settled, 0 if ok else 1)


def cmocka_counts(out):
    """(passed, failed) of cmocka binaries, or None."""
    # "[  PASSED  ] 12 test(s)." / "[  FAILED  ] 2 test(s), ..."
    cm_pass = re.findall(r"\[  PASSED  \] (\d+) test", out)
    cm_fail = re.findall(r"\[  FAILED  \] (\d+) test", out)
    if not cm_pass and not cm_fail:
        return None
    return sum(map(int, cm_pass)), sum(map(int, cm_fail))


def count(entry):
    if entry.get("result") == "SKIP":
        return 0, 0
    out = (entry.get("stdout") or "") + (entry.get("stderr") or "")
    ok = entry.get("result") in ("OK", "EXPECTEDFAIL")
    counts = cmocka_counts(out) or pytest_counts(out, ok)
    p, f = counts if counts is not None else ((1, 0) if ok else (0, 1))
    if not ok and f == 0:
        f = 1  # it failed, whatever its output claims
    return p, f


def main():
    passed = failed = 0
    with open(sys.argv[1]) as log:
        for line in log:
            p, f = count(json.loads(line))
            passed += p
            failed += f
    print(passed, failed)


if __name__ == "__main__":
    main()
