#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: the worker socket's cost to the agent. hyperpodrun in
operator mode with --nproc-per-node 64 (no /start, so no workers), and 64
client connections from this process, one per local rank, speaking the
reference client's frames.

  per update   64 ranks send ckpt_info_update frames (one frame per write)
               as fast as they can; the agent's CPU time (schedstat, all
               threads) over the updates it handled: microseconds per update,
               read, parse, tracker and all
  steady       each of the 64 ranks sends one update per second (every
               step completes) for --seconds; the agent's CPU over the wall
               time, in % of one core, beside the same time with the 64
               clients connected and silent
"""

import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import uuid

from pathlib import Path

import benchlib as bl

NPROC = 64
PREFIX = "/fsx/ckpt/bench"


def frame(msg):
    body = json.dumps(msg).encode()
    return struct.pack(">I", len(body)) + body


def cpu(pid):
    """The agent's CPU seconds, all threads, from schedstat: nanoseconds,
    where /proc/PID/stat counts 10 ms ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def handled(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('hyperpodrun_ipc_messages_total{result="handled"}'):
                return int(float(line.split()[-1]))
    return 0


def wait_handled(port, want, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if handled(port) >= want:
            return
        time.sleep(0.05)
    sys.exit(f"bench_ipc: the agent handled {handled(port)} of {want} messages")


def main():
    p = bl.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=None,
                   help="updates for the per-update figure (default 200,000; 6,400 with --smoke)")
    p.add_argument("--seconds", type=float, default=None,
                   help="steady and idle phases, each (default 20; 2 with --smoke)")
    args = p.parse_args()
    updates = args.updates or (6400 if args.smoke else 200_000)
    seconds = args.seconds or (2.0 if args.smoke else 20.0)
    hpr = bl.hyperpodrun_path()
    scratch = Path(bl.make_scratch("ipc"))
    port = bl.free_port()
    env = bl.clean_env({"TMPDIR": "/tmp"})
    argv = [hpr, "--log-dir", str(scratch / "logs"), "--server-host", "127.0.0.1",
            "--server-port", str(port), "--rdzv-conf",
            f"resource_config_dir={scratch / 'rc'}", "--nproc-per-node", str(NPROC),
            "/bin/true"]
    agent = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = f"/tmp/hyperpod_elastic_agent_{agent.pid}.sock"
    try:
        end = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < end:
            time.sleep(0.01)
        conns = []
        for rank in range(NPROC):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            cid = str(uuid.uuid4())
            s.sendall(frame({"local_rank": rank, "client_id": cid, "type": "init"}))
            s.sendall(frame({"prefix": PREFIX,
                             "checkpoint_types": {"model_checkpoint": NPROC,
                                                  "data_checkpoint": 0},
                             "type": "ckpt_init", "local_rank": rank,
                             "client_id": cid}))
            conns.append((s, rank, cid))
        sent = 2 * NPROC
        wait_handled(port, sent)

        def update(conn, step):
            s, rank, cid = conn
            s.sendall(frame({"step": step, "path": f"{PREFIX}/step_{step}",
                             "checkpoint_type": "model_checkpoint",
                             "type": "ckpt_info_update", "local_rank": rank,
                             "client_id": cid}))

        # Per update.
        steps = updates // NPROC
        t0 = cpu(agent.pid)
        w0 = time.monotonic()
        for step in range(1, steps + 1):
            for c in conns:
                update(c, step)
        sent += steps * NPROC
        wait_handled(port, sent)
        per_update_us = (cpu(agent.pid) - t0) / (steps * NPROC) * 1e6
        burst_rate = steps * NPROC / (time.monotonic() - w0)

        # Idle, then steady.
        t0 = cpu(agent.pid)
        time.sleep(seconds)
        idle_pct = (cpu(agent.pid) - t0) / seconds * 100
        t0, w0 = cpu(agent.pid), time.monotonic()
        step = steps
        tick = w0
        while time.monotonic() - w0 < seconds:
            step += 1
            for c in conns:
                update(c, step)
            sent += NPROC
            tick += 1.0
            time.sleep(max(0.0, tick - time.monotonic()))
        wait_handled(port, sent)
        wall = time.monotonic() - w0
        steady_pct = (cpu(agent.pid) - t0) / wall * 100
    finally:
        agent.terminate()
        agent.wait(30)
    result = bl.result_header(args, "ipc", hpr, {"hyperpodrun": argv})
    result.update({
        "ranks": NPROC,
        "updates": steps * NPROC,
        "per_update_us": per_update_us,
        "burst_updates_per_s": burst_rate,
        "steady_seconds": wall,
        "steady_cpu_pct_of_core": steady_pct,
        "idle_cpu_pct_of_core": idle_pct,
    })
    bl.finish_result(result)
    bl.print_table("worker socket, 64 ranks", ["figure", "value"], [
        ["agent CPU per update (µs)", bl.fmt(per_update_us)],
        ["updates/s sent (burst)", bl.fmt(burst_rate)],
        ["agent CPU, 64 updates/s (% of a core)", bl.fmt(steady_pct)],
        ["agent CPU, idle (% of a core)", bl.fmt(idle_pct)],
    ])
    bl.write_result(args, "ipc", result)


if __name__ == "__main__":
    main()
