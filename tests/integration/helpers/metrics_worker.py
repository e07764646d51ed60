# SPDX-License-Identifier: Apache-2.0
"""A worker for the metrics tests: a training loop whose throughput and
faults the test controls through files.

MW_DIR        where the control files are read
MW_PERIOD     seconds between steps (default 0.1)
MW_CKPT       a checkpoint prefix: every rank reports each 5th step through
              the worker socket (hyperpodrun_client on PYTHONPATH)
MW_FAIL       "N": attempts below N exit 3 after 3 steps; "file": attempt 0
              exits 3 once MW_DIR/crash exists
Each step prints "step <n> throughput <v>", v being the number in
MW_DIR/throughput (100 while it is absent), or 1 on attempt 1 while
MW_DIR/slow exists. It runs until MW_DIR/finish
exists, then exits 0.
"""
import os
import sys
import time

d = os.environ["MW_DIR"]
period = float(os.environ.get("MW_PERIOD", "0.1"))
fail = os.environ.get("MW_FAIL", "")
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
ckpt = os.environ.get("MW_CKPT")
client = None
if ckpt:
    from hyperpodrun_client import (CheckpointDiscoverySocketClient,
                                    CheckpointType)
    client = CheckpointDiscoverySocketClient(
        ckpt, num_model_checkpoints=int(os.environ["LOCAL_WORLD_SIZE"]))


def throughput():
    if attempt == 1 and os.path.exists(os.path.join(d, "slow")):
        return "1"
    try:
        with open(os.path.join(d, "throughput")) as f:
            return f.read().strip() or "100"
    except FileNotFoundError:
        return "100"


step = 0
while not os.path.exists(os.path.join(d, "finish")):
    step += 1
    print(f"step {step} throughput {throughput()}", flush=True)
    if client is not None and step % 5 == 0:
        client.update(step, os.path.join(ckpt, f"step_{step}"),
                      CheckpointType.MODEL_CHECKPOINT)
    if fail == "file" and attempt == 0 and \
            os.path.exists(os.path.join(d, "crash")):
        print("crashing", flush=True)
        sys.exit(3)
    if fail.isdigit() and attempt < int(fail) and step >= 3:
        print(f"attempt {attempt} failing", flush=True)
        sys.exit(3)
    time.sleep(period)
