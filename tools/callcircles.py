#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Lists the file-level call circles of each module: file A calls file B
when A's object file uses a symbol (a function or a variable) that B's
defines, as nm reads them from a built tree. A circle is a set of files of
one module that reach each other through such calls (a strongly connected
component of more than one file). Prints one line per module with its
circles and, with --edges, every call between its files. Exits 1 when a
module has a circle, unless --allow names it (a module whose circles are
still being taken apart). Usage:
tools/callcircles.py [BUILD_DIR] [--edges] [--allow mod,...]"""
import pathlib
import subprocess
import sys


def symbols(obj):
    out = subprocess.run(["nm", "-P", str(obj)], capture_output=True,
                         text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRC" or kind in "VW":
            defined.add(name)
    return defined, used


def module_graph(objdir):
    files = {}
    for obj in sorted(objdir.glob("*.o")):
        files[obj.name[:-2]] = symbols(obj)  # "agent.c.o" -> "agent.c"
    owner = {}
    for name, (defined, _) in files.items():
        for sym in defined:
            owner[sym] = name
    edges = {name: set() for name in files}
    for name, (_, used) in files.items():
        for sym in used:
            other = owner.get(sym)
            if other is not None and other != name:
                edges[name].add(other)
    return edges


def circles(edges):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv):
    build = pathlib.Path("build")
    show_edges = False
    allow = set()
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--edges":
            show_edges = True
        elif a == "--allow":
            allow = set(args.pop(0).split(","))
        else:
            build = pathlib.Path(a)
    objdirs = sorted(build.glob("src/*/libhp-*.a.p"))
    if not objdirs:
        print(f"no module objects under {build}/src: build it first",
              file=sys.stderr)
        return 2
    bad = False
    for objdir in objdirs:
        module = objdir.parent.name
        edges = module_graph(objdir)
        found = circles(edges)
        names = "; ".join(" <-> ".join(n for n in c) for c in found)
        print(f"{module}: {len(found)} circle{'s' if len(found) != 1 else ''}"
              + (f": {names}" if found else ""))
        if show_edges:
            for a in sorted(edges):
                for b in sorted(edges[a]):
                    print(f"  {a} -> {b}")
        if found and module not in allow:
            bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
