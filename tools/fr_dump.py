#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Shows a torch NCCL flight recorder dump (the file a hang report's
nccl_flight_recorder.path names) for a human: its version, then one line
per recorded collective, the newest last.

Usage: tools/fr_dump.py DUMP [--last N] [--json]

The dump is a pickle. It is read with an unpickler that refuses every
global (class or function), so a file from elsewhere cannot run code: the
flight recorder's dump holds only dicts, lists, strings and numbers.
"""
import argparse
import json
import pickle
import sys


class PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"refusing {module}.{name}: a flight recorder dump holds only "
            "plain data")


def load(path):
    with open(path, "rb") as f:
        return PlainUnpickler(f).load()


def line(entry):
    sizes = entry.get("input_sizes")
    return "{:>6} pg {} seq {} {} {}{}".format(
        entry.get("record_id", "?"), entry.get("pg_id", "?"),
        entry.get("collective_seq_id", "?"),
        entry.get("profiling_name", "?"), entry.get("state", "?"),
        f" in {sizes}" if sizes else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("--last", type=int, default=20,
                    help="entries shown, the newest (default 20; 0: all)")
    ap.add_argument("--json", action="store_true",
                    help="print the whole dump as JSON instead")
    args = ap.parse_args()
    try:
        data = load(args.dump)
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        sys.exit(f"fr_dump: {args.dump}: {e}")
    if not isinstance(data, dict):
        sys.exit(f"fr_dump: {args.dump}: not a flight recorder dump "
                 f"(a {type(data).__name__}, not a dict)")
    if args.json:
        json.dump(data, sys.stdout, indent=1, default=repr)
        print()
        return
    entries = data.get("entries") or []
    print(f"version {data.get('version', '?')}, {len(entries)} entries")
    for entry in entries[-args.last if args.last else 0:]:
        print(line(entry) if isinstance(entry, dict) else repr(entry))


if __name__ == "__main__":
    main()
