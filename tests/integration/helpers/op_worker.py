# SPDX-License-Identifier: Apache-2.0
"""A worker for the operator-mode tests. Behaviour from the environment:

OPW_DIR      where to write rank<RANK>.json (its environment) and pid files
OPW_CRASH    "restart:local_rank:code": exit with code on that attempt/rank
OPW_MODE     "exit" (default: print and exit 0), "progress_then_stall"
             (print OPW_STEPS step lines, then sleep until signalled),
             "ignore_term" (ignore SIGTERM and SIGUSR1, sleep),
             "wait_file" (run until OPW_DIR/finish exists), "flood"
             (OPW_LINES lines "flood <i>" in one write, then as wait_file)
On SIGUSR1 (unless ignored) it writes usr1-<RANK> and exits 0.
"""
import json
import os
import signal
import sys
import time

d = os.environ["OPW_DIR"]
rank = os.environ["RANK"]
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "JOB_RESTART_COUNT", "ROLE_RANK"]
env = {k: os.environ.get(k) for k in keys}
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(os.path.join(d, f"rank{rank}-attempt{restart}.json"), "w") as f:
    json.dump(env, f)


def on_usr1(signum, frame):
    with open(os.path.join(d, f"usr1-{rank}"), "w") as f:
        f.write("usr1\n")
    sys.exit(0)


mode = os.environ.get("OPW_MODE", "exit")
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
else:
    signal.signal(signal.SIGUSR1, on_usr1)
print(f"worker {rank} attempt {restart} starting", flush=True)

crash = os.environ.get("OPW_CRASH")
if crash:
    attempt, local, code = crash.split(":")
    if attempt == restart and local == os.environ["LOCAL_RANK"]:
        print(f"worker {rank} crashing with {code}", flush=True)
        sys.exit(int(code))

# Written whole, then renamed: a test that sees the file reads the pid.
pid_file = os.path.join(d, f"pid{rank}-attempt{restart}")
with open(pid_file + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pid_file + ".tmp", pid_file)

if mode == "progress_then_stall":
    for step in range(int(os.environ.get("OPW_STEPS", "3"))):
        print(f"training step {step}", flush=True)
    while True:
        time.sleep(3600)
elif mode == "ignore_term":
    while True:
        time.sleep(3600)
elif mode in ("wait_file", "flood"):
    if mode == "flood":
        n = int(os.environ["OPW_LINES"])
        sys.stdout.write("".join(f"flood {i}\n" for i in range(n)))
        sys.stdout.flush()
    # Runs until the test creates the file: a worker that is "training".
    path = os.path.join(d, "finish")
    while not os.path.exists(path):
        time.sleep(0.02)
print(f"worker {rank} done", flush=True)
