#!/usr/bin/python3
"""Counts test cases (not meson test binaries) in a meson testlog.json.

cmocka and pytest each run many cases inside one meson test; this reads
their own summaries from the captured output so the closing line of
dev.sh counts cases. A meson test that failed without a readable summary
(a crash, a timeout) counts as one failure.
Prints "PASSED FAILED".
"""
import json
import re
import sys

passed = failed = 0
with open(sys.argv[1]) as log:
    for line in log:
        entry = json.loads(line)
        out = (entry.get("stdout") or "") + (entry.get("stderr") or "")
        ok = entry.get("result") in ("OK", "EXPECTEDFAIL")
        if entry.get("result") == "SKIP":
            continue
        # cmocka: "[  PASSED  ] 12 test(s)." / "[  FAILED  ] 2 test(s), ..."
        cm_pass = re.findall(r"\[  PASSED  \] (\d+) test", out)
        cm_fail = re.findall(r"\[  FAILED  \] (\d+) test", out)
        # pytest: "== 40 passed, 2 failed, 1 skipped in 3.2s ==" or "-q" form
        py_pass = re.findall(r"(\d+) passed", out)
        py_fail = re.findall(r"(\d+) (?:failed|error)", out)
        if cm_pass or cm_fail:
            p = sum(map(int, cm_pass))
            f = sum(map(int, cm_fail))
        elif py_pass or py_fail:
            p = int(py_pass[-1]) if py_pass else 0
            f = int(py_fail[-1]) if py_fail else 0
        else:
            p, f = (1, 0) if ok else (0, 1)
        if not ok and f == 0:
            f = 1  # it failed, whatever its output claims
        passed += p
        failed += f
print(passed, failed)
