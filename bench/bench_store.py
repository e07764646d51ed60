#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: TCPStore throughput, the C server (src/store, run alone as
hp-store-server) beside torch's own server (torch.distributed.TCPStore
with is_master=True in a process of its own), with the same clients:
Debian's torch 1.13 TCPStore clients, one process each, 1 to 256 of them.

  For each number of clients, each server: every client sets COUNT keys of
  its own (64-byte values), then gets them; past 32 clients each sets
  fewer, so that all of them together set at most MAX_OPS keys. ops/s is
  all clients' operations over the time from the first client's start to
  the last client's end of that phase. torch 1.13's get() is a WAIT and a
  GET (two round trips), its set() one query without an answer. Also the
  server's CPU time per operation, both phases (every thread of its
  process, from schedstat).

  The clients are forked from one process that imported torch
  (store_client.py): a torch process on its own holds about 230 MiB RSS,
  256 of them some 58 GiB; a forked client owns a few MiB of its own.
  Each client reports its memory, the launcher its own (that of a client
  started alone).
"""

import json
import os
import signal
import subprocess
import sys
import time

from pathlib import Path

import benchlib as bl

VALUE_BYTES = 64
MAX_OPS = 160000  # keys over all clients: 32 clients × 5000
TORCH_SERVER = """
import datetime, signal, sys, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=300))
print("port", s.port, flush=True)
signal.sigwait([signal.SIGTERM])
"""


def store_server_path():
    path = os.environ.get("HYPERPODRUN_STORE_SERVER") or str(
        bl.ROOT / "build" / "tests" / "hp-store-server")
    if not os.access(path, os.X_OK):
        sys.exit(f"bench_store: hp-store-server not found at {path}; build it "
                 "with `ninja -C build` or set HYPERPODRUN_STORE_SERVER")
    return path


def cpu_seconds(pid):
    """Every thread's CPU time from schedstat, in nanoseconds where
    /proc/PID/stat counts 10 ms ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except OSError:
            pass  # a thread that ended
    return total / 1e9


def start_server(argv, env):
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().split()
    if len(line) != 2 or line[0] != "port":
        p.kill()
        sys.exit(f"bench_store: {argv[0]} did not say its port")
    return p, int(line[1])


def one_run(server_argv, clients, count, env):
    server, port = start_server(server_argv, env)
    launcher = None
    try:
        # A process group of their own, to be killed as one, in the bench's
        # session: with the kernel's autogroups a session of their own would
        # give the clients a share of the CPU of their own, apart from the
        # server's, and change what is measured.
        launcher = subprocess.Popen(
            [bl.PYTHON, str(bl.BENCH / "store_client.py"), "127.0.0.1", str(port), "0",
             str(clients), str(count), str(VALUE_BYTES)],
            env=env, stdout=subprocess.PIPE, text=True, process_group=0)
        # The clients are connected once each has added one to "ready";
        # "go" then starts them together, and the server's CPU is read
        # from there.
        import datetime
        import torch.distributed as dist
        ctl = dist.TCPStore("127.0.0.1", port, None, False,
                            timeout=datetime.timedelta(seconds=300))
        end = time.monotonic() + 300
        while ctl.add("bench/ready", 0) < clients:
            bl.check(time.monotonic() < end, "the clients did not all connect")
            bl.check(launcher.poll() is None,
                     f"the store clients exited {launcher.returncode} before connecting")
            time.sleep(0.01)
        cpu0 = cpu_seconds(server.pid)
        ctl.set("bench/go", "1")
        out, _ = launcher.communicate(timeout=600)
        cpu1 = cpu_seconds(server.pid)
        bl.check(launcher.returncode == 0, f"store clients failed ({launcher.returncode})")
        results = [json.loads(line) for line in out.splitlines()]
        launcher_mem = [r["launcher"] for r in results if "launcher" in r]
        results = [r for r in results if "launcher" not in r]
        bl.check(len(launcher_mem) == 1, "the store clients' launcher did not report")
        bl.check(sorted(r["id"] for r in results) == list(range(clients)),
                 f"{len(results)} of {clients} clients reported")
    finally:
        if launcher is not None and launcher.poll() is None:
            bl.kill_trees([launcher.pid])
            launcher.wait()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    ops = clients * count
    out = {}
    for phase in ("set", "get"):
        t0 = min(r[phase][0] for r in results)
        t1 = max(r[phase][1] for r in results)
        out[f"{phase}_ops_per_s"] = ops / (t1 - t0)
    out["server_cpu_us_per_op"] = (cpu1 - cpu0) / (2 * ops) * 1e6
    out["client_rss_kb"] = bl.median([r["rss_kb"] for r in results])
    out["client_private_kb"] = bl.median([r["private_kb"] for r in results])
    out["launcher_rss_kb"] = launcher_mem[0]["rss_kb"]
    return out


def mem_available_kb():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--clients", default=None,
                   help="comma-separated client counts (default 1,8,32,64,256; 1,4 with "
                        "--smoke)")
    p.add_argument("--count", type=int, default=None,
                   help="keys per client (default 5000; 300 with --smoke)")
    p.add_argument("--max-ops", type=int, default=MAX_OPS,
                   help="at most this many keys over all clients: fewer per client where "
                        f"COUNT × clients is more (default {MAX_OPS})")
    args = p.parse_args()
    counts = [int(x) for x in
              (args.clients or ("1,4" if args.smoke else "1,8,32,64,256")).split(",")]
    count = args.count or (300 if args.smoke else 5000)
    reps = bl.repeats(args)
    env = bl.clean_env({"OMP_NUM_THREADS": "1"})
    servers = {
        "hyperpodrun": [store_server_path(), "--host", "127.0.0.1", "--port", "0"],
        "torch": [bl.PYTHON, "-c", TORCH_SERVER],
    }
    cmds = dict(servers, hyperpodrun=["hp-store-server"] + servers["hyperpodrun"][1:])
    result = bl.result_header(args, "store", bl.hyperpodrun_path(), cmds)
    cases = {}
    for n in counts:
        keys = max(1, min(count, args.max_ops // n))
        for name, argv in servers.items():
            runs = [one_run(argv, n, keys, env) for _ in range(reps)]
            cases[f"{name}/{n}"] = {
                "server": name, "clients": n, "count": keys, "runs": runs,
                **{k: bl.median([r[k] for r in runs]) for k in runs[0]},
            }
    rows = []
    for n in counts:
        c, t = cases[f"hyperpodrun/{n}"], cases[f"torch/{n}"]
        for name, v in (("hyperpodrun", c), ("torch", t)):
            rows.append([f"{n}", f"{v['count']}", name, v["set_ops_per_s"],
                         v["get_ops_per_s"], v["server_cpu_us_per_op"]])
        c["set_ratio"] = bl.ratio(c["set_ops_per_s"], t["set_ops_per_s"])
        c["get_ratio"] = bl.ratio(c["get_ops_per_s"], t["get_ops_per_s"])
        c["cpu_ratio"] = bl.ratio(t["server_cpu_us_per_op"], c["server_cpu_us_per_op"])
    result.update({"count": count, "max_ops": args.max_ops, "value_bytes": VALUE_BYTES,
                   "torch": bl.torch_version(), "mem_available_kb": mem_available_kb(),
                   "cases": cases})
    bl.finish_result(result)
    bl.print_table(f"TCPStore, {VALUE_BYTES}-byte values, median of {reps}",
                   ["clients", "keys each", "server", "SET/s", "GET/s", "server CPU µs/op"],
                   rows)
    bl.write_result(args, "store", result)


if __name__ == "__main__":
    main()
