# SPDX-License-Identifier: Apache-2.0
"""A small DDP job (gloo, CPU) that checkpoints every CKPT_EVERY steps,
reports each rank's shard through hyperpodrun_client, and on start resumes
from the checkpoint the agent says every rank completed.

CKPT_DIR    the checkpoint series (the client's prefix)
CKPT_STEPS  last step
CKPT_EVERY  checkpoint interval (default 2)
CKPT_KILL   "attempt:rank:step": that rank SIGKILLs itself on that attempt
            right after saving that step, before reporting it
It prints "resume <path> at <step>" and "step <n> loss <value>" lines.
"""
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hyperpodrun_client import CheckpointDiscoverySocketClient, CheckpointType

try:
    import torch.distributed.checkpoint as dcp
except Exception:  # torch without a usable distributed checkpoint
    dcp = None

ckdir = os.environ["CKPT_DIR"]
last = int(os.environ["CKPT_STEPS"])
every = int(os.environ.get("CKPT_EVERY", "2"))
kill = os.environ.get("CKPT_KILL", "")
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])

dist.init_process_group("gloo")
rank = dist.get_rank()
client = CheckpointDiscoverySocketClient(
    ckdir, num_model_checkpoints=int(os.environ["LOCAL_WORLD_SIZE"]))
# Asked before the first collective below (the DDP constructor), so no rank
# can report a new step before every rank has asked.
resume = client.get_latest_checkpoint_path()

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
start = 0
if resume:
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    if dcp is not None:
        dcp.load(state, checkpoint_id=resume)
    else:
        state = torch.load(os.path.join(resume, f"rank{rank}.pt"))
    model.load_state_dict(state["model"])
    start = int(state["step"])
print(f"resume {resume} at {start}", flush=True)

ddp = DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
for step in range(start + 1, last + 1):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loss = ((ddp(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.9f}", flush=True)
    if step % every:
        continue
    path = os.path.join(ckdir, f"step_{step}")
    state = {"model": model.state_dict(), "step": torch.tensor(step)}
    if dcp is not None:
        dcp.save(state, checkpoint_id=path)
    else:
        os.makedirs(path, exist_ok=True)
        torch.save(state, os.path.join(path, f"rank{rank}.pt"))
    if kill == f"{attempt}:{rank}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)
    client.update(step, path, CheckpointType.MODEL_CHECKPOINT)
dist.destroy_process_group()
print("done", flush=True)
