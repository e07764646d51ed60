#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Worker (or hook) that records what it was started with.

usage: dump_env.py OUTDIR [ARGS...]

Writes OUTDIR/<tag>_<LOCAL_RANK>.json with the environment, sys.argv, the
raw /proc/self/cmdline, __name__, pid, process group and session. The tag is
$DUMP_TAG (default "env"). Works as a script, as `-m dump_env` (with this
directory on PYTHONPATH) and as an executable for --no-python.
"""
import json
import os
import sys


def main():
    outdir = sys.argv[1]
    tag = os.environ.get("DUMP_TAG", "env")
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = [a.decode() for a in f.read().split(b"\0")[:-1]]
    record = {
        "env": dict(os.environ),
        "argv": sys.argv,
        "cmdline": cmdline,
        "name": __name__,
        "spec": getattr(__spec__, "name", None) if "__spec__" in globals() else None,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
    }
    rank = os.environ.get("LOCAL_RANK", "x")
    path = os.path.join(outdir, f"{tag}_{rank}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.rename(tmp, path)
    print(f"dumped {path}", flush=True)


if __name__ == "__main__":
    main()
