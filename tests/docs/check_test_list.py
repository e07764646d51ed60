#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every tests/integration/test_*.py is a meson test: a file missing from
tests/meson.build's list would never run, and a listed one that is gone
would fail to start. Usage: check_test_list.py DIR NAME..."""
import pathlib
import sys

have = {p.stem for p in pathlib.Path(sys.argv[1]).glob("test_*.py")}
listed = set(sys.argv[2:])
for name in sorted(have - listed):
    print(f"tests/integration/{name}.py is not in tests/meson.build's "
          "integration_files")
for name in sorted(listed - have):
    print(f"tests/meson.build lists {name}, which is not in tests/integration")
sys.exit(1 if have != listed else 0)
