#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""--help, the man page and the docs must say the same thing.

Usage: check_docs.py BINARY MANPAGE ROOT

--help (made by src/config/help.c from the option table) is the source of
truth. Every long option it lists must appear in the man page and in
docs/usage.md (the options tables). Every
option the man page's OPTIONS section documents must exist in --help, so that
nothing stale remains. Every relative link in README.md and docs/*.md must
lead to a file of the tree, and a link's #anchor to a heading of that file;
README.md must link every page under docs/. The man page must have the
sections of REQUIRED_SECTIONS and a .TH line with @VERSION@ for meson to
fill in. Where mandoc (and groff) are installed, they must render it without
a warning.

The option table (src/config/options.h) makes --help, so --help must list
exactly the table's options; the man page must name the PET_ variable of
every torchrun option that is not refused, and every PET_ variable the man
page, README.md or docs/ name must be one of the table's (no stale or
misspelt variable).

Exit status: 0 when everything agrees, 1 with a list of the problems
otherwise, 2 when the check itself cannot run (a missing file, a binary that
does not start).
"""
import pathlib
import re
import shutil
import subprocess
import sys

# The page whose tables list every option.
OPTIONS_PAGE = "docs/usage.md"

REQUIRED_SECTIONS = [
    "NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "FILES",
    "EXIT STATUS", "SIGNALS", "EXAMPLES",
]

# A long option as a whole token: not preceded by a word character or a
# dash, and not continued by one. In --help, "--name_with_underscores" is the
# note on underscore spellings, not an option; the look-ahead skips it.
HELP_OPTION = re.compile(r"(?<![\w-])--([a-z][a-z-]*[a-z])(?![\w-])")
# In the docs, underscore spellings (--nproc_per_node) and prefixes used as
# examples (--redirect=3) are allowed in running text; they are matched
# whole and judged below.
DOC_OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9_-]*[a-z0-9])(?![\w-])")


def fail_setup(message):
    print(f"check_docs: {message}", file=sys.stderr)
    sys.exit(2)


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        fail_setup(f"cannot read {path}: {e.strerror}")


def help_options(binary):
    try:
        result = subprocess.run([binary, "--help"], capture_output=True,
                                text=True, timeout=30, check=False)
    except OSError as e:
        fail_setup(f"cannot run {binary}: {e.strerror}")
    if result.returncode != 0:
        fail_setup(f"{binary} --help exited {result.returncode}: "
                   f"{result.stderr.strip()}")
    options = []
    for name in HELP_OPTION.findall(result.stdout):
        if name not in options:
            options.append(name)
    if len(options) < 10:
        fail_setup(f"{binary} --help lists only {len(options)} long options; "
                   "is it the right binary?")
    return options


def troff_to_text(source):
    """Enough of troff to find option names: dashes, fonts, zero-widths."""
    text = source.replace("\\-", "-").replace("\\&", "").replace("\\%", "")
    text = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", text)
    return text


def man_sections(source):
    """Maps each .SH title to its troff source, in order."""
    sections = {}
    current = None
    for line in source.splitlines():
        m = re.match(r'^\.SH\s+"?(.*?)"?\s*$', line)
        if m:
            current = m.group(1).strip().upper()
            sections[current] = []
            continue
        if current is not None:
            sections[current].append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def tag_lines(section_source):
    """The first line after each .TP: the options a section documents."""
    lines = section_source.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines[:-1])
            if line.startswith(".TP")]


def mentions(text, option):
    return re.search(r"(?<![\w-])--" + re.escape(option) + r"(?![\w-])",
                     text) is not None


def stale_options(options_source, known):
    """Options in the man page's OPTIONS section that --help does not list."""
    problems = []
    tags = set()
    for line in tag_lines(options_source):
        tags.update(DOC_OPTION.findall(troff_to_text(line)))
    for name in sorted(tags):
        if name not in known:
            problems.append(f"--{name} (documented in OPTIONS, not in --help)")
    for name in sorted(set(DOC_OPTION.findall(troff_to_text(options_source)))):
        if name in known or name in tags:
            continue
        dashed = name.replace("_", "-")
        if "_" in name and dashed in known:
            continue  # the underscore spelling of a real option
        prefixed = [k for k in known if k.startswith(dashed)]
        if len(prefixed) == 1:
            continue  # an unambiguous prefix, as getopt_long accepts
        problems.append(f"--{name} (mentioned in OPTIONS, not in --help)")
    return problems


def slug(heading):
    """The anchor GitHub gives a Markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def md_anchors(text):
    """The anchors of a Markdown file's headings, outside code fences."""
    anchors, fenced = set(), False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            m = re.match(r"^#{1,6} (.*)$", line)
            if m:
                anchors.add(slug(m.group(1)))
    return anchors


def md_links(text):
    """(line number, target) of each inline link outside code fences."""
    links, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        links += [(n, m.group(1))
                  for m in re.finditer(r"\]\(([^)\s]+)\)", line)]
    return links


def link_problems(root):
    """Relative links of README.md and docs/*.md that lead nowhere."""
    pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    problems = []
    count = 0
    for page in pages:
        for n, target in md_links(read(page)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            count += 1
            where = f"{page.relative_to(root)}:{n}"
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                problems.append(f"{where}: link to {target}: no such file")
                continue
            if root.resolve() not in dest.resolve().parents and \
                    dest.resolve() != root.resolve():
                problems.append(f"{where}: link to {target}: outside the "
                                "tree")
                continue
            if anchor and dest.suffix == ".md" and \
                    anchor not in md_anchors(read(dest)):
                problems.append(f"{where}: link to {target}: no heading "
                                f"with anchor #{anchor} in "
                                f"{dest.relative_to(root.resolve())}")
    readme_targets = {(root / t.partition("#")[0]).resolve()
                      for _, t in md_links(read(root / "README.md"))}
    for page in pages[1:]:
        if page.resolve() not in readme_targets:
            problems.append(f"README.md does not link "
                            f"{page.relative_to(root)}")
    return problems, count


# A row of options.h: XX(ID, "name", letter, METAVAR|NULL, "PET_X"|NULL,
# KIND, ...; backslash-newlines joined first.
TABLE_ROW = re.compile(r'XX\((\w+),\s*"([a-z-]+)",\s*\S+,\s*(?:NULL|"[^"]*"),'
                       r'\s*(NULL|"PET_\w+"),\s*(\w+),')
DOC_PET = re.compile(r"\bPET_[A-Z][A-Z_]*[A-Z]\b")


def option_table(path):
    """(name, PET_ variable or None, conversion kind) per row."""
    text = read(path).replace("\\\n", " ")
    rows = [(m[2], None if m[3] == "NULL" else m[3].strip('"'), m[4])
            for m in TABLE_ROW.finditer(text)]
    if len(rows) < 50:
        fail_setup(f"{path}: only {len(rows)} option rows understood")
    return rows


def table_problems(rows, options, man_text, docs):
    """What the option table says that --help or the docs contradict."""
    problems = []
    names = {name for name, _, _ in rows}
    for name in sorted(names - set(options)):
        problems.append(f"--{name}: in options.h, missing from --help")
    for name in sorted(set(options) - names):
        problems.append(f"--{name}: in --help, not in options.h")
    pets = {env for _, env, _ in rows if env}
    for name, env, kind in rows:
        if env and kind != "REFUSED" and env not in man_text:
            problems.append(f"--{name}: its {env} is not in the man page")
    for where, text in docs:
        for env in sorted(set(DOC_PET.findall(text)) - pets):
            problems.append(f"{where}: {env} is no option's variable "
                            f"(src/config/options.h)")
    return problems


def run_linter(argv):
    try:
        result = subprocess.run(argv, capture_output=True, text=True,
                                timeout=60, check=False)
    except OSError as e:
        return [f"{argv[0]}: {e.strerror}"]
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if line.strip()]
    if result.returncode != 0 and not lines:
        lines = [f"{argv[0]} exited {result.returncode}"]
    return lines


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary, man_path, root = argv[1], argv[2], pathlib.Path(argv[3])
    options = help_options(binary)
    known = set(options)
    man_source = read(man_path)
    man_text = troff_to_text(man_source)
    usage = read(root / OPTIONS_PAGE)
    problems = []

    for name in options:
        if not mentions(man_text, name):
            problems.append(f"--{name}: in --help, missing from the man page")
        if not mentions(usage, name):
            problems.append(f"--{name}: in --help, missing from "
                            f"{OPTIONS_PAGE}")
    links, nlinks = link_problems(root)
    problems += links
    docs = [("man page", man_text), ("README.md", read(root / "README.md"))]
    docs += [(str(p.relative_to(root)), read(p))
             for p in sorted((root / "docs").glob("*.md"))]
    problems += table_problems(
        option_table(root / "src" / "config" / "options.h"), options,
        man_text, docs)

    sections = man_sections(man_source)
    for name in REQUIRED_SECTIONS:
        if name not in sections:
            problems.append(f"man page: no .SH {name} section")
    if "OPTIONS" in sections:
        problems += [f"man page: {p}"
                     for p in stale_options(sections["OPTIONS"], known)]
    th = re.search(r"^\.TH\s.*$", man_source, re.MULTILINE)
    if th is None or "@VERSION@" not in th.group(0):
        problems.append("man page: the .TH line has no @VERSION@ for meson")

    linted = []
    if shutil.which("mandoc"):
        linted.append("mandoc")
        problems += [f"mandoc: {line}" for line in
                     run_linter(["mandoc", "-T", "lint", "-W", "warning",
                                 man_path])]
    if shutil.which("groff"):
        linted.append("groff")
        problems += [f"groff: {line}" for line in
                     run_linter(["groff", "-t", "-man", "-ww", "-z", "-Tutf8",
                                 man_path])]

    lint_note = ("linted with " + " and ".join(linted) if linted
                 else "not linted (no mandoc or groff)")
    if problems:
        print(f"check_docs: {len(problems)} problem(s):")
        for p in problems:
            print(f"  {p}")
        print(f"check_docs: FAILED: {len(options)} long options in --help, "
              f"{len(problems)} problem(s); man page {lint_note}")
        return 1
    print(f"check_docs: OK: {len(options)} long options of --help all in the "
          f"man page and {OPTIONS_PAGE}; {len(REQUIRED_SECTIONS)} sections "
          f"present; no stale options; {nlinks} relative links resolve; "
          f"man page {lint_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
