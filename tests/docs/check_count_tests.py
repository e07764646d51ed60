#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""tools/count_tests.py counts cases, not meson tests, and a run that was
killed counts every case it did not finish as failed. Table-driven: each
row is a meson testlog entry and the (passed, failed) it must give."""
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("count_tests", sys.argv[1])
count_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(count_tests)

PYTEST_HEAD = ("============ test session starts ============\n"
               "collected 10 items\n\n")
CASES = [
    ("pytest, all passed",
     {"result": "OK", "stdout": PYTEST_HEAD + "a.py::t PASSED [ 10%]\n"
      "====== 9 passed, 1 skipped in 12.50s ======\n"}, (9, 0)),
    ("pytest, some failed",
     {"result": "FAIL", "stdout": PYTEST_HEAD +
      "====== 2 failed, 7 passed, 1 error in 3.00s ======\n"}, (7, 3)),
    ("pytest, summary with a duration",
     {"result": "OK", "stdout": PYTEST_HEAD +
      "====== 10 passed in 75.12s (0:01:15) ======\n"}, (10, 0)),
    ("pytest killed by meson's timeout after 3 of 10",
     {"result": "TIMEOUT", "stdout": PYTEST_HEAD +
      "t.py::a PASSED    [ 10%]\nt.py::b[x-1] PASSED    [ 20%]\n"
      "t.py::c SKIPPED (no slurm)    [ 30%]\nt.py::d FAILED    [ 40%]\n"
      "t.py::e PASSED    [ 50%]\n"}, (3, 6)),
    ("pytest crashed before any case ended",
     {"result": "FAIL", "stdout": "collected 1 item\n"}, (0, 1)),
    ("a case's output quoting another summary does not count",
     {"result": "FAIL", "stdout": PYTEST_HEAD +
      "E   AssertionError: 99 passed\n"
      "====== 1 failed, 9 passed in 1.00s ======\n"}, (9, 1)),
    ("a failed run whose summary claims success",
     {"result": "FAIL", "stdout": PYTEST_HEAD +
      "====== 10 passed in 1.00s ======\nERROR: AddressSanitizer\n"},
     (10, 1)),
    ("cmocka",
     {"result": "FAIL", "stdout": "[  PASSED  ] 12 test(s).\n"
      "[  FAILED  ] 2 test(s), listed below:\n"}, (12, 2)),
    ("a plain test that passed", {"result": "OK", "stdout": "ok\n"}, (1, 0)),
    ("a plain test that timed out", {"result": "TIMEOUT", "stdout": ""},
     (0, 1)),
    ("skipped", {"result": "SKIP", "stdout": ""}, (0, 0)),
]

bad = 0
for name, entry, want in CASES:
    got = count_tests.count(entry)
    if got != want:
        print(f"{name}: counted {got}, expected {want}")
        bad += 1
print(f"{len(CASES) - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
