# SPDX-License-Identifier: Apache-2.0
"""A worker that uses the rank monitor client (hyperpodrun_client's
fault_tolerance, ft's names). FT_MODE says what it does:

healthy   FT_STEPS steps, each a "step" section and a heartbeat; exit 0
stop_hb   local rank FT_BAD stops heartbeating after 5 beats and keeps
          printing; the others go on
section   local rank FT_BAD leaves its 5th "step" section open and keeps
          heartbeating and printing
compute   heartbeats; after FT_STEPS the timeouts are computed (gloo
          all-reduce when FT_TORCH=1) and saved to FT_STATE by local rank
          0, then every rank stops heartbeating. A restarted attempt
          loads FT_STATE before init and stops heartbeating at once.
straggler every rank heartbeats each FT_PERIOD, FT_BAD four times slower,
          for FT_STEPS of the others' beats
"""

import json
import os
import sys
import time

from hyperpodrun_client import fault_tolerance

lr = int(os.environ["LOCAL_RANK"])
mode = os.environ["FT_MODE"]
bad = int(os.environ.get("FT_BAD", "-1"))
steps = int(os.environ.get("FT_STEPS", "20"))
period = float(os.environ.get("FT_PERIOD", "0.05"))
state_file = os.environ.get("FT_STATE")
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

if os.environ.get("FT_TORCH") == "1":
    import torch.distributed as dist
    dist.init_process_group("gloo")

client = fault_tolerance.RankMonitorClient()
if state_file and os.path.exists(state_file):
    with open(state_file) as f:
        client.load_state_dict(json.load(f))
client.init_workload_monitoring()
print(f"init attempt {attempt} hb {client.hb_timeouts}", flush=True)


def forever_printing():
    i = 0
    while True:
        print(f"still printing {i}", flush=True)
        i += 1
        time.sleep(period)


if mode == "healthy":
    for i in range(steps):
        client.start_section("step")
        time.sleep(period)
        client.end_section("step")
        client.send_heartbeat()
        print(f"step {i}", flush=True)
    client.shutdown_workload_monitoring()
elif mode == "stop_hb":
    i = 0
    while True:
        if lr != bad or i < 5:
            client.send_heartbeat()
        print(f"beat {i}", flush=True)
        i += 1
        time.sleep(period)
elif mode == "section":
    i = 0
    while True:
        client.start_section("step")
        time.sleep(period)
        if lr != bad or i < 5:
            client.end_section("step")
        client.send_heartbeat()
        print(f"step {i}", flush=True)
        i += 1
        if lr == bad and i > 5:
            while True:
                client.send_heartbeat()
                print("section left open", flush=True)
                time.sleep(period)
elif mode == "compute":
    if attempt == 0:
        # Set-up work before the first heartbeat, as training has: the
        # computed initial timeout (5x this) leaves the restarted
        # attempt's immediate first heartbeat far inside it, even on a
        # loaded machine.
        time.sleep(4 * period)
        for i in range(steps):
            client.send_heartbeat()
            time.sleep(period)
        client.calculate_and_set_hb_timeouts()
        print(f"computed {client.hb_timeouts}", flush=True)
        if lr == 0:
            tmp = state_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(client.state_dict(), f)
            os.replace(tmp, state_file)
        if os.environ.get("FT_TORCH") == "1":
            dist.barrier()
    else:
        client.send_heartbeat()
    forever_printing()
elif mode == "straggler":
    every = 4 if lr == bad else 1
    for i in range(steps):
        if i % every == 0:
            client.send_heartbeat()
        time.sleep(period)
    client.shutdown_workload_monitoring()
else:
    sys.exit(f"unknown FT_MODE {mode}")
