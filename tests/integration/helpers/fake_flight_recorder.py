# SPDX-License-Identifier: Apache-2.0
"""A stand-in for torch's ProcessGroupNCCL flight recorder, for machines
without a GPU: it plays ProcessGroupNCCL's side of the dump trigger as
torch's source does it (DumpPipe and DebugInfoWriter), then hangs.

With a ring size > 0 and TORCH_NCCL_DEBUG_INFO_PIPE_FILE set, it makes
the FIFO <pipe file><RANK>.pipe, opens it O_RDONLY | O_NONBLOCK, and polls
it from a thread (torch's heartbeat monitor does); once any byte arrives it
writes a pickled dict to <dump file><RANK> (torch's default prefix
/tmp/nccl_trace_rank_). As torch 2.8 and later (checked against 2.11), the
ring size and the dump file are read from TORCH_FR_BUFFER_SIZE and
TORCH_FR_DUMP_TEMP_FILE first, then from their deprecated names
TORCH_NCCL_TRACE_BUFFER_SIZE and TORCH_NCCL_DEBUG_INFO_TEMP_FILE.

argv[1]: "serve" (the above), "deaf" (makes the FIFO, never opens it: no
reader), or "none" (no FIFO at all)."""

import os
import pickle
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "serve"
RANK = int(os.environ["RANK"])
STEM = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")


def cvar(*names, default):
    """torch's getCvarString: the first name that is set."""
    for name in names:
        if name in os.environ:
            return os.environ[name]
    return default


DUMP = cvar("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
            default="/tmp/nccl_trace_rank_") + str(RANK)
BUFFER = int(cvar("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
                  default="0"))


def dump():
    entries = [{"record_id": i, "pg_id": 0, "collective_seq_id": i,
                "profiling_name": "nccl:all_reduce", "state": "scheduled",
                "input_sizes": [[1024]], "output_sizes": [[1024]]}
               for i in range(BUFFER and 64)]
    data = pickle.dumps({"version": "2.4", "pg_config": {},
                         "entries": entries, "rank": RANK})
    with open(DUMP, "wb") as f:
        f.write(data)


def monitor(fd):
    while True:
        try:
            got = os.read(fd, 128)
        except BlockingIOError:
            got = b""
        if got:
            dump()
        time.sleep(0.02)


if STEM and BUFFER > 0 and MODE != "none":
    pipe = f"{STEM}{RANK}.pipe"
    try:
        os.unlink(pipe)
    except FileNotFoundError:
        pass
    os.mkfifo(pipe, 0o666)
    if MODE == "serve":
        fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        threading.Thread(target=monitor, args=(fd,), daemon=True).start()

print(f"fifo stem={STEM or 'unset'} buffer={BUFFER} dump={DUMP}", flush=True)
print("[Epoch 0 Batch 0] {'training_loss_step': 1.5}", flush=True)
time.sleep(3600)
