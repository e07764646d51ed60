#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The in-process restart benchmark's worker: one rank of a small job that
fails once and trains again, run in place (IPR) or anew (PLR).

    ipr_worker.py ipr|plr plain|torch FAULT_MS STAMPS

ipr: the rank waits at the barrier (hyperpodrun_client), trains until a
job_fault arrives, and goes back; local rank 0 reports job_fault FAULT_MS
after training starts in round 0. plr: the rank trains from the start;
local rank 0 exits 1 FAULT_MS after the start of attempt 0.

"Training" is reached once the rank could do a step: for plain, at once;
for torch, after `import torch` and a gloo process group with one
all-reduce done (in ipr mode torch is imported once, at the process's
start, and the group is made anew each round). Stamps are
"KIND LOCAL_RANK ROUND NANOSECONDS" lines (CLOCK_MONOTONIC, one write
each): "train" when a rank trains, "fault" just before rank 0 fails, and
for torch "group" when the rank starts making its process group.
"""

import os
import sys
import time

MODE, KIND, FAULT_MS, STAMPS = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
LOCAL = int(os.environ["LOCAL_RANK"])
FD = os.open(STAMPS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

if KIND == "torch":
    import datetime

    import torch
    import torch.distributed as dist


def stamp(kind, round_):
    os.write(FD, f"{kind} {LOCAL} {round_} {time.monotonic_ns()}\n".encode())


ROUND = [0]


def ready():
    """What a rank does before it can train a step."""
    if KIND == "torch":
        stamp("group", ROUND[0])
        dist.init_process_group("gloo", init_method="env://",
                                timeout=datetime.timedelta(seconds=60))
        dist.all_reduce(torch.ones(1))


def plr():
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    ROUND[0] = attempt
    ready()
    stamp("train", attempt)
    if attempt == 0 and LOCAL == 0:
        time.sleep(FAULT_MS / 1000)
        stamp("fault", attempt)
        os._exit(1)
    while True:
        time.sleep(3600)


def ipr():
    from hyperpodrun_client import InProcessRestartSocketClient, RestartMode

    client = InProcessRestartSocketClient()
    while True:
        _, start = client.hyperpod_barrier()
        round_ = int(start["worker_envs"]["JOB_RESTART_COUNT"])
        rank = int(start["worker_envs"]["RANK"])
        ROUND[0] = round_
        ready()
        client.hyperpod_past_rcb_barrier()
        stamp("train", round_)
        if round_ == 0 and LOCAL == 0:
            time.sleep(FAULT_MS / 1000)
            stamp("fault", round_)
            client.hyperpod_send_fault(rank, RestartMode.IN_PROCESS_RESTART,
                                       "BenchFault", "rank 0 fails once")
        else:
            client.fault_event.wait()
        if KIND == "torch":
            dist.destroy_process_group()


if __name__ == "__main__":
    ipr() if MODE == "ipr" else plr()
