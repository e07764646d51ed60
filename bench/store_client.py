# SPDX-License-Identifier: Apache-2.0
"""One client of bench_store.py: a torch.distributed TCPStore client that
connects, says it is ready, waits for "go", then does COUNT SETs of its
own keys and COUNT GETs of them, and prints the times of both phases as
one JSON line.

    store_client.py HOST PORT ID COUNT VALUE_BYTES
"""

import datetime
import json
import sys
import time

import torch.distributed as dist


def main():
    host, port, cid, count, size = sys.argv[1:6]
    count, size = int(count), int(size)
    s = dist.TCPStore(host, int(port), None, False,
                      timeout=datetime.timedelta(seconds=300))
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
    print(json.dumps({"set": [t0, t1], "get": [t1, t2]}), flush=True)


if __name__ == "__main__":
    main()
