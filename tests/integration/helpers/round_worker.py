# SPDX-License-Identifier: Apache-2.0
"""A worker for coordinated restarts: it writes a line with its pid, ranks
and TORCHELASTIC_RESTART_COUNT to OUT_DIR/<tag>.<node>.<local>.<count>,
then (with torch) all-reduces across every node through the agents'
store (env://). The rank named by FAIL_RANK exits FAIL_CODE while the
restart count is below FAIL_UNTIL (FAIL_UNTIL absent: always); the other
ranks then wait for the agent to stop them, as a collective would hang.
Otherwise every rank exits 0 after the all-reduce. The failing rank fails
only once every rank of the round has written its file (and FAIL_GATE,
when set, exists). With LOOP_UNTIL, every rank of a round below it
all-reduces in a loop, so that a rank that dies makes the others fail."""

import os
import sys
import time

out_dir = sys.argv[1]
env = os.environ
count = int(env["TORCHELASTIC_RESTART_COUNT"])
node, local, rank = env["GROUP_RANK"], env["LOCAL_RANK"], int(env["RANK"])
with open(os.path.join(out_dir, f"{env['DUMP_TAG']}.{node}.{local}.{count}"),
          "w") as f:
    f.write(f"{os.getpid()} {rank} {env['WORLD_SIZE']}\n")

fail_until = env.get("FAIL_UNTIL")
failing = (str(rank) == env.get("FAIL_RANK")
           and (fail_until is None or count < int(fail_until)))

if env.get("NO_TORCH") != "1":
    import datetime
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=120))
    t = torch.tensor([rank + 1])
    dist.all_reduce(t)
    ws = int(env["WORLD_SIZE"])
    print(f"round {count} rank {rank}: sum {int(t.item())} of "
          f"{ws * (ws + 1) // 2}", flush=True)
    if env.get("LOOP_UNTIL") and count < int(env["LOOP_UNTIL"]):
        # All-reduces until a rank is gone, which fails this one.
        while True:
            dist.all_reduce(torch.tensor([1]))
            time.sleep(0.05)

if failing and env.get("FAIL_GATE"):
    # It fails once the test has made the gate file (bounded).
    end = time.monotonic() + 120
    while not os.path.exists(env["FAIL_GATE"]) and time.monotonic() < end:
        time.sleep(0.05)
if failing:
    # Every rank of the round has started (its file is there) before the
    # failure, as an all-reduce would ensure; bounded.
    ws = int(env["WORLD_SIZE"])
    end = time.monotonic() + 120
    while (sum(1 for n in os.listdir(out_dir) if n.endswith(f".{count}")) < ws
           and time.monotonic() < end):
        time.sleep(0.05)
    sys.exit(int(env.get("FAIL_CODE", "3")))
if fail_until is None or count < int(fail_until):
    # A healthy rank of a round that fails: it waits, as in a collective,
    # until its agent stops it.
    time.sleep(600)
    sys.exit(9)
sys.exit(0)
