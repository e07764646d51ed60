#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Adds the SPDX line to every tracked or new source file that lacks it
(C, headers, Python, shell, meson, the man page), where
tests/docs/check_release.py looks for it: the first line, or the second
after a #! line (or the man page's preprocessor line). Prints how many
files it changed. Usage: tools/spdx.py (from anywhere in the checkout)."""
import pathlib
import subprocess
import sys

TAG = "SPDX-License-Identifier: Apache-2.0"


def style(name):
    if name.endswith((".c", ".h", ".h.in")):
        return "c"
    if name.endswith(".1.in"):
        return "man"
    if name.endswith((".py", ".sh", ".sbatch", "meson.build", "Dockerfile",
                      ".ini")) or name in ("meson_options.txt", "dev.sh",
                                           ".ci/run"):
        return "hash"
    return None


def main():
    root = pathlib.Path(subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True,
        text=True, check=True).stdout.strip())
    names = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    changed = 0
    for name in names:
        kind = style(name)
        path = root / name
        if kind is None or name.startswith("debian/") or not path.is_file():
            continue
        text = path.read_text()
        if TAG in text[:400]:
            continue
        lines = text.splitlines(keepends=True)
        if kind == "c":
            lines.insert(0, f"/* {TAG} */\n")
        elif kind == "man":
            lines.insert(1 if lines and lines[0].startswith("'\\\"") else 0,
                         f'.\\" {TAG}\n')
        else:
            lines.insert(1 if lines and lines[0].startswith("#!") else 0,
                         f"# {TAG}\n")
        path.write_text("".join(lines))
        changed += 1
    print(f"spdx: {changed} file(s) given the SPDX line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
