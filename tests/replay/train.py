# SPDX-License-Identifier: Apache-2.0
"""A tiny data-parallel PyTorch job (gloo, CPU) whose console
record.py keeps for replay tests. REPLAY_SCENARIO picks how it behaves:
healthy, hung (rank 1 stops joining the all-reduce, so rank 0 blocks in
it), slow (each step takes a second: real throughput under the
threshold) or never_started (rank 1 never joins the process group, so
rank 0 never gets past it and never prints its banner)."""
import os
import sys
import time

import torch
import torch.distributed as dist

scenario = os.environ["REPLAY_SCENARIO"]
rank = int(os.environ["RANK"])
if scenario == "never_started" and rank == 1:
    time.sleep(120)
    sys.exit(0)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batch = 64
if rank == 0:
    print(f"Experiment configuration: {{'backend': 'gloo', 'world_size': "
          f"{dist.get_world_size()}, 'batch': {batch}}}", flush=True)
steps = {"healthy": 8, "hung": 8, "slow": 6}[scenario]
for i in range(steps):
    if scenario == "hung" and rank == 1 and i == 4:
        time.sleep(120)
    start = time.monotonic()
    x = torch.randn(batch, 16)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    opt.step()
    time.sleep(1.0 if scenario == "slow" else 0.2)
    rate = batch / (time.monotonic() - start)
    if rank == 0:
        print(f"[Epoch 0 Batch {i}] {{'training_loss_step': "
              f"{loss.item():.4f}, 'samples/sec': {rate:.1f}}}", flush=True)
if rank == 0:
    print("Training finished", flush=True)
dist.destroy_process_group()
