# SPDX-License-Identifier: Apache-2.0
"""A torch.distributed client of a TCPStore server, for test_store.py.

    store_worker.py ops HOST PORT             the client's operations, one
                                              line each
    store_worker.py wait HOST PORT KEY        waits for KEY, prints its value
    store_worker.py set HOST PORT KEY VALUE
    store_worker.py allreduce-store HOST PORT RANK WORLD
                                              gloo through the store given
    store_worker.py allreduce-env RANK WORLD  gloo through env:// (the
                                              caller sets MASTER_ADDR, ...)
"""

import datetime
import sys

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=60)


def client(host, port):
    # world_size=None: no "init/" count, so num_keys counts only ours.
    return dist.TCPStore(host, int(port), None, False, timeout=TIMEOUT)


def ops(host, port):
    s = client(host, port)
    s.set("a", "hello")
    print("get", s.get("a"))
    print("add", s.add("n", 3), s.add("n", 4), s.add("n", -10))
    print("cas hit", s.compare_set("a", "hello", "world"), s.get("a"))
    print("cas mismatch", s.compare_set("a", "hello", "again"), s.get("a"))
    print("cas missing", s.compare_set("b", "x", "y"))
    print("cas create", s.compare_set("c", "", "new"), s.get("c"))
    print("num_keys", s.num_keys())
    print("delete", s.delete_key("a"), s.delete_key("a"))
    print("num_keys", s.num_keys())
    s.wait(["n", "c"])
    print("wait ready")
    try:
        s.wait(["never"], datetime.timedelta(milliseconds=300))
        print("wait returned")
    except RuntimeError as e:
        print("wait timeout", "Timeout" in str(e) or "timed out" in str(e))
    # torch 1.13's client leaves its connection mid-WAIT after a timeout;
    # a new client goes on.
    s = client(host, port)
    s.set("big", b"x" * (1 << 20))
    print("big", len(s.get("big")))
    print("done")


def allreduce(rank, world, **kw):
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=TIMEOUT, **kw)
    t = torch.tensor([rank + 1])
    dist.all_reduce(t)
    dist.barrier()
    print(f"rank {rank}/{world}: all_reduce sum = {int(t.item())}")
    dist.destroy_process_group()


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "ops":
        ops(*args)
    elif mode == "wait":
        s = client(args[0], args[1])
        s.wait([args[2]])
        print("woken", s.get(args[2]).decode())
    elif mode == "set":
        client(args[0], args[1]).set(args[2], args[3])
    elif mode == "allreduce-store":
        host, port, rank, world = args[0], args[1], int(args[2]), int(args[3])
        store = dist.TCPStore(host, int(port), world, False, timeout=TIMEOUT)
        allreduce(rank, world, store=store)
    elif mode == "allreduce-env":
        allreduce(int(args[0]), int(args[1]), init_method="env://")
    else:
        sys.exit(f"store_worker.py: unknown mode {mode!r}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
