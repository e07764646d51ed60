#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The version comes from one place, meson.build's project(), and every other
place that names it agrees; every source file carries its SPDX line.

Usage: check_release.py SOURCE_ROOT VERSION DATE BINARY BUILT_MANPAGE

Checked: `BINARY --version` starts with "hyperpodrun VERSION"; the built man
page's .TH line has DATE and "hyperpodrun VERSION"; python/pyproject.toml's
version is VERSION; NEWS.md's first release heading is "VERSION (DATE)";
debian/changelog's first entry is VERSION-N; every C, header, Python, shell
and meson file of SOURCE_ROOT (git's tracked and new files) has the line
"SPDX-License-Identifier: Apache-2.0".
"""
import pathlib
import re
import subprocess
import sys

SPDX = "SPDX-License-Identifier: Apache-2.0"
SOURCE_SUFFIXES = (".c", ".h", ".h.in", ".py", ".sh", ".1.in", ".ini")
SOURCE_NAMES = ("meson.build", "meson_options.txt", "dev.sh", "run")
# Trees that are not the project's sources (without git: build*/ too).
SKIP_TOP = ("dist", ".git")


def is_source(path):
    return path.name.endswith(SOURCE_SUFFIXES) or path.name in SOURCE_NAMES


def source_files(root):
    """The tree's files (git's list of tracked and new ones where it is a
    checkout, so that a venv or build in it is not read), sources only."""
    try:
        names = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
            capture_output=True, text=True, check=True, timeout=60).stdout
        paths = [root / n for n in names.splitlines()]
    except (OSError, subprocess.SubprocessError):
        paths = [p for top in sorted(root.iterdir())
                 if top.name not in SKIP_TOP and not top.name.startswith("build")
                 for p in ([top] if top.is_file() else sorted(top.rglob("*")))]
    for p in paths:
        rel = p.relative_to(root)
        if rel.parts[0] in SKIP_TOP or rel.parts[0] == "debian" or \
                "__pycache__" in rel.parts:
            continue  # debian/: debhelper's files, not the project's sources
        if p.is_file() and is_source(p):
            yield p


def main(argv):
    if len(argv) != 6:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    version, date, binary, man = argv[2], argv[3], argv[4], argv[5]
    problems = []

    out = subprocess.run([binary, "--version"], capture_output=True,
                         text=True, timeout=60).stdout
    first = out.splitlines()[0] if out else ""
    if not first.startswith(f"hyperpodrun {version} "):
        problems.append(f"{binary} --version says {first!r}, meson.build "
                        f"says {version}")

    th = re.search(r"^\.TH\s.*$", pathlib.Path(man).read_text(), re.M)
    th = th.group(0) if th else ""
    if f'"hyperpodrun {version}"' not in th or f" {date} " not in th:
        problems.append(f"{man}: .TH line {th!r} lacks version {version} "
                        f"or date {date}")

    pyproject = (root / "python" / "pyproject.toml").read_text()
    m = re.search(r'^version\s*=\s*"([^"]*)"', pyproject, re.M)
    if not m or m.group(1) != version:
        problems.append(f"python/pyproject.toml: version "
                        f"{m.group(1) if m else None!r}, meson.build says "
                        f"{version}")

    news = (root / "NEWS.md").read_text()
    m = re.search(r"^## hyperpodrun (\S+) \((\S+)\)$", news, re.M)
    if not m or m.groups() != (version, date):
        problems.append(f"NEWS.md: first release heading "
                        f"{m.group(0) if m else None!r}, want "
                        f"'## hyperpodrun {version} ({date})'")

    changelog = (root / "debian" / "changelog").read_text()
    m = re.match(r"hyperpodrun \(([^)-]+)-\d+\)", changelog)
    if not m or m.group(1) != version:
        problems.append(f"debian/changelog: first entry "
                        f"{changelog.splitlines()[0] if changelog else ''!r}"
                        f", want version {version}-N")

    files = list(source_files(root))
    for p in files:
        if SPDX not in p.read_text(errors="replace")[:400]:
            problems.append(f"{p.relative_to(root)}: no '{SPDX}' line "
                            "at its top (tools/spdx.py adds it)")

    if problems:
        print(f"check_release: {len(problems)} problem(s):")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"check_release: OK: version {version} ({date}) in --version, the "
          f"man page, pyproject.toml, NEWS.md and debian/changelog; "
          f"{len(files)} source files carry their SPDX line")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
