# SPDX-License-Identifier: Apache-2.0
"""All-reduce over every worker, set up only from hyperpodrun's environment.

One node, two workers:

    PYTHON_EXEC=python3 hyperpodrun --standalone --nproc-per-node 2 \\
        examples/allreduce.py

Two nodes (here both on one machine; on a cluster use node 0's address):

    hyperpodrun --rdzv-backend static --nnodes 2 --node-rank 0 \\
        --master-addr 127.0.0.1 --master-port 29511 --nproc-per-node 2 \\
        examples/allreduce.py
    hyperpodrun --rdzv-backend static --nnodes 2 --node-rank 1 \\
        --master-addr 127.0.0.1 --master-port 29511 --nproc-per-node 2 \\
        examples/allreduce.py

Each worker contributes a tensor holding RANK + 1; after the all-reduce
every rank holds 1 + 2 + ... + WORLD_SIZE and prints it. The process group
is initialised with init_method "env://": MASTER_ADDR, MASTER_PORT, RANK and
WORLD_SIZE come from hyperpodrun. With TORCHELASTIC_USE_AGENT_STORE=False
(static, slurm, resource-config, --standalone) rank 0 hosts the TCP store;
with --rdzv-backend c10d it is True and every rank uses the agents' store
at MASTER_ADDR:MASTER_PORT.

Options: --backend (default gloo; nccl needs one GPU per local rank),
--timeout seconds for the process group (default 60).
"""

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])

    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)

    dist.init_process_group(
        backend=args.backend,
        init_method="env://",
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    assert dist.get_rank() == rank and dist.get_world_size() == world_size

    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    total = int(value.item())
    expected = world_size * (world_size + 1) // 2

    print(f"rank {rank}/{world_size} (local {local_rank}): "
          f"all_reduce sum = {total}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if total != expected:
        print(f"rank {rank}: expected {expected}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
