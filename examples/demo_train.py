#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A stand-in training job for ./dev.sh demo: no GPU, no torch.

Each rank prints the log lines a real HyperPod job prints (and that the
seed logMonitoringConfiguration rules match): the experiment banner, a
progress line per batch with loss and throughput, and a checkpoint line.
It reads only the environment hyperpodrun sets.
"""
import os
import random
import sys
import time

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
world = int(os.environ["WORLD_SIZE"])
batches = int(sys.argv[1]) if len(sys.argv) > 1 else 20

print(f"Experiment configuration: rank {rank}/{world}, "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, "
      f"attempt {os.environ['TORCHELASTIC_RESTART_COUNT']}")
rng = random.Random(rank)
loss = 2.5
for batch in range(batches):
    time.sleep(0.05)
    loss *= 0.93 + rng.random() * 0.04
    samples = 90 + rng.random() * 20
    print(f"[Epoch 0 Batch {batch}] {{'training_loss_step': {loss:.4f}, "
          f"'samples/sec': {samples:.2f}}}")
    if batch % 10 == 9:
        print("The checkpoint is finalized. All shards is written.")
        print(f"rank {local_rank}: checkpoint {batch + 1} saved",
              file=sys.stderr)
print(f"rank {rank}: training done, final loss {loss:.4f}")
