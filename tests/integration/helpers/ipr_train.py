# SPDX-License-Identifier: Apache-2.0
"""An in-process restart training loop with real PyTorch (gloo), for
hyperpodrun --inprocess-restart.

Each rank waits at the barrier, makes a process group from the job_start's
envs and all-reduces (rank + 1) * step for IPR_STEPS steps; every rank
prints "step K sum S", which the test checks against K * world * (world + 1) / 2.
The step counter lives in memory: after an in-process restart a rank goes
on from the step it was at. What can go wrong, only in round 0
(JOB_RESTART_COUNT 0) and only in the first process of a local rank:

  IPR_FAULT=RANK:STEP[:MODE]   global RANK raises before step STEP's
                               all-reduce and reports job_fault with MODE
                               (default in_process_restart)
  IPR_DROP=RANK:STEP           global RANK closes its client before step
                               STEP and hangs
  IPR_LATE=LOCAL:SECS          local rank LOCAL sleeps SECS before its
                               first barrier

A rank whose collective fails because a peer left waits (up to 120 s) for
the agent's job_fault broadcast before it goes back to the barrier; one
that never comes is reported as a fault of its own. Every rank sets the
rank labels {"TP": "2"}; a failing rank leaves {"step": N} as its data.
"""

import datetime
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from hyperpodrun_client import InProcessRestartSocketClient

STEPS = int(os.environ.get("IPR_STEPS", "6"))
LOCAL = int(os.environ["LOCAL_RANK"])
PID = os.getpid()
FIRST = Path(os.environ["OPW_DIR"]) / f"first-{LOCAL}"
# Only the first process of each local rank misbehaves: a process started
# after a full stop is a new one and finds the marker.
FIRST_PROCESS = not FIRST.exists()
FIRST.touch()


def say(text):
    print(text, flush=True)


def spec(name):
    value = os.environ.get(name)
    return value.split(":") if value else None


class InjectedFault(Exception):
    pass


def teardown():
    if dist.is_initialized():
        dist.destroy_process_group()


def main():
    say(f"up pid {PID}")
    if FIRST_PROCESS and spec("IPR_LATE") and int(spec("IPR_LATE")[0]) == LOCAL:
        time.sleep(float(spec("IPR_LATE")[1]))
    client = InProcessRestartSocketClient()
    step = 0
    while True:
        say(f"barrier pid {PID} at step {step}")
        _, start = client.hyperpod_barrier()
        envs = start["worker_envs"]
        rank, world = int(envs["RANK"]), int(envs["WORLD_SIZE"])
        restart = int(envs["JOB_RESTART_COUNT"])
        assert os.environ["RANK"] == envs["RANK"]
        assert envs["TORCHELASTIC_RESTART_COUNT"] == envs["JOB_RESTART_COUNT"]
        dist.init_process_group("gloo", init_method="env://",
                                timeout=datetime.timedelta(seconds=60))
        client.hyperpod_past_rcb_barrier()
        client.hyperpod_notify_labels({"TP": "2"})
        say(f"training pid {PID} rank {rank}/{world} restart {restart} "
            f"master {envs['MASTER_ADDR']}:{envs['MASTER_PORT']} from step {step}")
        fault, drop = spec("IPR_FAULT"), spec("IPR_DROP")
        try:
            while step < STEPS:
                if client.fault_event.is_set():
                    raise InjectedFault("a job_fault arrived between steps")
                if restart == 0 and FIRST_PROCESS:
                    if fault and int(fault[0]) == rank and int(fault[1]) == step + 1:
                        raise InjectedFault(f"rank {rank} fails step {step + 1}")
                    if drop and int(drop[0]) == rank and int(drop[1]) == step + 1:
                        say(f"dropping the client at step {step + 1}")
                        client.close()
                        time.sleep(3600)
                value = torch.tensor([float((rank + 1) * (step + 1))])
                dist.all_reduce(value)
                step += 1
                say(f"step {step} sum {int(value.item())}")
            dist.barrier()
            teardown()
            say(f"done pid {PID} rank {rank} steps {step}")
            return 0
        except InjectedFault as ex:
            if client.fault_event.is_set():
                say(f"remote fault {client.last_fault}")
            else:
                mode = fault[2] if fault and len(fault) > 2 else "in_process_restart"
                say(f"fault: {ex}; reporting {mode}")
                client.hyperpod_send_data(rank, {"step": step})
                client.hyperpod_send_fault(rank, mode, "TrainingStepFailed",
                                           f"{ex} (pid {PID})")
            teardown()
        except RuntimeError as ex:
            say(f"collective failed at step {step + 1}: {str(ex).splitlines()[0]}")
            teardown()
            if client.fault_event.wait(120):
                say(f"remote fault {client.last_fault}")
            else:
                client.hyperpod_send_fault(rank, "in_process_restart",
                                           "CollectiveFailed", str(ex))


if __name__ == "__main__":
    sys.exit(main())
