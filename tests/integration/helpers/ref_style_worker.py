# SPDX-License-Identifier: Apache-2.0
"""A worker written against the reference agent's package, as its own
examples use it: TrainingManager, a thread looping on hyperpod_wait_fault,
another on hyperpod_wait_rank_info that sets rank labels, the barrier's
("job_start", payload) tuple, hyperpod_send_data with a JSON string and
hyperpod_send_fault with only the rank. Runs on hyperpodrun through the
hyperpod_elastic_agent package in python/, with no torch.

In round 0 local rank REF_FAIL_LOCAL (default 1) reports a fault and goes
back to the barrier; the others wait for the job_fault broadcast. Round 1
ends the job.
"""

import json
import os
import threading

from hyperpod_elastic_agent import TrainingManager
from hyperpod_elastic_agent.ipc import HyperPodIPCException

LOCAL_RANK = int(os.environ["LOCAL_RANK"])
FAIL_LOCAL = int(os.environ.get("REF_FAIL_LOCAL", "1"))


_SAY = threading.Lock()


def say(text):
    # print() writes the text and its newline separately: two threads
    # printing at once could join their lines.
    with _SAY:
        print(text, flush=True)


def monitor(tm, fault):
    while True:
        try:
            _, data = tm.InProcessRestart.hyperpod_wait_fault()
        except HyperPodIPCException:
            return
        say(f"monitor: job_fault {data}")
        fault.set()


def ranking(tm):
    while True:
        try:
            _, info = tm.InProcessRestart.hyperpod_wait_rank_info()
        except HyperPodIPCException:
            return
        rank = info["worker_envs"]["RANK"]
        say(f"rank info: RANK {rank}")
        tm.InProcessRestart.hyperpod_notify_labels(labels={"PP": rank, "TP": "2"})


def main():
    tm = TrainingManager()
    fault = threading.Event()
    threading.Thread(target=monitor, args=(tm, fault), daemon=True).start()
    threading.Thread(target=ranking, args=(tm,), daemon=True).start()
    while True:
        say("at barrier")
        msg_type, payload = tm.InProcessRestart.hyperpod_barrier()
        envs = payload["worker_envs"]
        rank, restart = int(envs["RANK"]), int(envs["TORCHELASTIC_RESTART_COUNT"])
        fault.clear()
        tm.InProcessRestart.hyperpod_past_rcb_barrier()
        say(f"{msg_type}: rank {rank} restart {restart} rank_ips "
            f"{payload['aggregate_worker_data']['rank_ips']}")
        if restart > 0:
            say(f"done rank {rank}")
            return
        if LOCAL_RANK == FAIL_LOCAL:
            tm.InProcessRestart.hyperpod_send_data(
                rank=rank, data=json.dumps({"trace": f"rank {rank} failed"}))
            tm.InProcessRestart.hyperpod_send_fault(rank=rank)
            say("sent job_fault")
            continue
        fault.wait()


if __name__ == "__main__":
    main()
