# SPDX-License-Identifier: Apache-2.0
"""bench_ft's worker: FTB_MODE cost (rank 0 times N heartbeats and, for
comparison, N datagrams and N framed stream writes, and prints the
figures), hb (a heartbeat every ms for FTB_SECONDS), idle (the same loop
without heartbeats), stop (heartbeats every 10 ms, rank 0 stops after 20)."""

import json
import os
import socket
import struct
import time

from hyperpodrun_client import fault_tolerance

mode = os.environ["FTB_MODE"]
lr = int(os.environ["LOCAL_RANK"])
seconds = float(os.environ.get("FTB_SECONDS", "2"))
n = int(os.environ.get("FTB_CALLS", "20000"))

c = fault_tolerance.RankMonitorClient()
c.init_workload_monitoring()


def per_call(fn):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


if mode == "cost" and lr == 0:
    # One rank times, so that the others do not share its cores.
    hb = per_call(c.send_heartbeat)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False)
    b.setblocking(False)

    def dgram():
        # The send alone: a full queue drops the beat (the reader needs
        # only the latest), and is drained here only then.
        try:
            a.send(struct.pack("=Q", time.monotonic_ns()))
        except BlockingIOError:
            try:
                while True:
                    b.recv(64)
            except BlockingIOError:
                pass
    dg = per_call(dgram)
    s1, s2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    s1.setblocking(False)
    s2.setblocking(False)

    def framed():
        body = json.dumps({"type": "ft_heartbeat", "local_rank": lr,
                           "client_id": "x"}).encode()
        try:
            s1.send(struct.pack(">I", len(body)) + body)
        except BlockingIOError:
            try:
                while True:
                    s2.recv(1 << 20)
            except BlockingIOError:
                pass
    st = per_call(framed)
    print(json.dumps({"heartbeat_ns": hb, "datagram_ns": dg,
                      "stream_frame_ns": st}), flush=True)
elif mode == "cost":
    pass
elif mode in ("hb", "idle"):
    end = time.monotonic() + seconds
    beats = 0
    while time.monotonic() < end:
        if mode == "hb":
            c.send_heartbeat()
            beats += 1
        time.sleep(0.001)
    if lr == 0:
        print(json.dumps({"beats": beats}), flush=True)
elif mode == "stop":
    for i in range(20):
        c.send_heartbeat()
        time.sleep(0.01)
    while lr == 0:
        time.sleep(1)
    while True:
        c.send_heartbeat()
        time.sleep(0.01)
c.shutdown_workload_monitoring()
