# SPDX-License-Identifier: Apache-2.0
"""The clients of bench_store.py: torch.distributed TCPStore clients, one
process each. Each connects, says it is ready, waits for "go", then does
COUNT SETs of its own keys and COUNT GETs of them, and prints the times of
both phases and its memory as one JSON line; a last line gives this
process's own memory.

    store_client.py HOST PORT FIRST_ID CLIENTS COUNT VALUE_BYTES

This process imports torch once and forks CLIENTS clients (ids FIRST_ID
on), so that 256 of them fit in memory: a torch process on its own peaks
at about 230 MiB RSS, a forked client shares that with this one and owns
a few MiB. Each client is still a process of its own with its own
connection, as separate launches would be. Exits 0 once every client did.
"""

import datetime
import json
import os
import sys
import time
import traceback

import torch.distributed as dist


def memory_kb():
    """Rss and the pages this process owns alone (Private_*), in KiB."""
    out = {"rss_kb": 0, "private_kb": 0}
    with open("/proc/self/smaps_rollup") as fh:
        for line in fh:
            parts = line.split()
            if parts[0] == "Rss:":
                out["rss_kb"] = int(parts[1])
            elif parts[0] in ("Private_Clean:", "Private_Dirty:"):
                out["private_kb"] += int(parts[1])
    return out


def client(host, port, cid, count, size):
    s = dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=300))
    value = b"v" * size
    keys = [f"bench/{cid}/{i}" for i in range(count)]
    s.add("bench/ready", 1)
    s.wait(["bench/go"])
    t0 = time.monotonic()
    for k in keys:
        s.set(k, value)
    # A GET answers only once the SETs before it were handled: the end of
    # the SET phase is the first GET's answer, the same for both servers.
    s.get(keys[-1])
    t1 = time.monotonic()
    for k in keys:
        s.get(k)
    t2 = time.monotonic()
    line = json.dumps({"id": cid, "set": [t0, t1], "get": [t1, t2], **memory_kb()})
    os.write(1, (line + "\n").encode())  # one write: the clients share the pipe


def main():
    host, port, first, clients, count, size = sys.argv[1:7]
    port, first, clients, count, size = (int(x) for x in (port, first, clients, count, size))
    launcher_memory = memory_kb()
    pids = []
    for i in range(clients):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                client(host, port, first + i, count, size)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        pids.append(pid)
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed += os.waitstatus_to_exitcode(status) != 0
    if failed:
        print(f"store_client: {failed} of {clients} clients failed", file=sys.stderr)
        return 1
    # What a client launched on its own would hold: this process, torch
    # imported, before any fork.
    os.write(1, (json.dumps({"launcher": launcher_memory}) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
