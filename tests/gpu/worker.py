#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The worker of tests/gpu/run.sh: a real ProcessGroupNCCL job of one rank
that hangs on the GPU, for hyperpodrun's --hang-dump full.

It runs HPGPU_STEPS all-reduce steps (default 5), each printing a progress
line the rule in tests/gpu/rules.json matches, so that the flight recorder
holds completed entries. Then it makes a hang that one GPU allows (NCCL
refuses two ranks on one GPU, so no cross-rank hang): a spin kernel
(torch.cuda._sleep) on the current stream, an all_reduce whose NCCL stream
must wait behind it (recorded, never completed), and
torch.cuda.synchronize(), where the Python worker blocks in a C call and
prints nothing more. The process group timeout is 10 minutes, so torch's
watchdog stays quiet until hyperpodrun's rule judges the job HANGING.

HPGPU_MODE:
  gpu   (default) the above, NCCL on cuda:LOCAL_RANK;
  cpu   the same steps over gloo on the CPU, and the hang is a
        threading.Event().wait(): a rehearsal of run.sh without a GPU.
        A thread stands in for ProcessGroupNCCL's dump pipe (as
        tests/integration/helpers/fake_flight_recorder.py does), so that
        run.sh's flight recorder steps run too;
  wait  no torch: waits for the file HPGPU_GO (at most 120 s), then exits
        0 (the worker of the --preflight nccl run).

HPGPU_SELF_DUMP (gpu mode) names a file for the flight recorder as
torch._C._distributed_c10d._dump_nccl_trace() returns it before the hang.

HPGPU_DIAG names a JSON file the worker writes facts to (versions, the
libraries it mapped, its threads, whether torch's dump FIFO exists after
init and after the first collective). Nothing of that goes to stdout.
"""
import datetime
import json
import os
import sys
import threading
import time

MODE = os.environ.get("HPGPU_MODE", "gpu")
DIAG = os.environ.get("HPGPU_DIAG", "")
STEPS = int(os.environ.get("HPGPU_STEPS", "5"))
# About 10 minutes of spinning at an H100's ~2 GHz: longer than any run;
# the agent kills the worker long before.
SLEEP_CYCLES = int(os.environ.get("HPGPU_SLEEP_CYCLES", str(2 * 10**9 * 600)))

facts = {"mode": MODE, "pid": os.getpid(), "argv0": sys.argv[0],
         "python": sys.version.split()[0], "executable": sys.executable}


def save():
    if not DIAG:
        return
    tmp = DIAG + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(facts, f, indent=1, default=repr)
    os.replace(tmp, DIAG)


def threads():
    """Thread names of this process, with counts (pt_nccl_heartbt is the
    heartbeat monitor, pt_nccl_watchdg the watchdog, NCCL RAS the RAS
    thread)."""
    names = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
                    name = f.read().strip()
            except OSError:
                continue
            names[name] = names.get(name, 0) + 1
    except OSError:
        pass
    return dict(sorted(names.items()))


def mapped_libraries():
    """The NCCL and CUDA runtime files this process has mapped."""
    found = set()
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if base.startswith(("libnccl", "libcudart", "libcuda.so",
                                    "libtorch_cuda")):
                    found.add(path)
    except OSError:
        pass
    return sorted(found)


def fifo_state(rank):
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    if not stem:
        return "TORCH_NCCL_DEBUG_INFO_PIPE_FILE unset"
    path = f"{stem}{rank}.pipe"
    try:
        import stat
        st = os.stat(path)
        kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "not a fifo"
        return f"{kind}: {path}"
    except OSError as e:
        return f"absent ({e.strerror}): {path}"


def stand_in_entry(seq, state):
    return {"record_id": seq - 1, "pg_id": 0, "collective_seq_id": seq,
            "profiling_name": "gloo-stand-in:all_reduce", "state": state,
            "input_sizes": [[1 << 20]], "output_sizes": [[1 << 20]]}


def snapshot(rank):
    return {"time": time.time(), "fifo": fifo_state(rank),
            "threads": threads(), "libraries": mapped_libraries()}


def fake_flight_recorder(rank, entries):
    """cpu mode only: ProcessGroupNCCL's DumpPipe and DebugInfoWriter as
    torch's source does them: a FIFO <pipe file><rank>.pipe read without
    blocking; a byte on it writes a pickle of plain data to <temp
    file><rank>."""
    import pickle
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    dump = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                          "/tmp/nccl_trace_rank_") + str(rank)
    if not stem or int(os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) <= 0:
        return
    pipe = f"{stem}{rank}.pipe"
    try:
        os.unlink(pipe)
    except FileNotFoundError:
        pass
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)

    def poll():
        while True:
            try:
                got = os.read(fd, 128)
            except BlockingIOError:
                got = b""
            if got:
                data = {"version": "stand-in", "pg_config": {},
                        "entries": list(entries), "rank": rank}
                with open(dump, "wb") as f:
                    pickle.dump(data, f)
            time.sleep(0.05)

    threading.Thread(target=poll, daemon=True).start()


def self_dump(torch, path):
    """The flight recorder as torch's own Python binding dumps it, before
    the hang (so every entry is completed): a real dump for
    tools/fr_dump.py even when the pipe route fails."""
    try:
        c10d = torch._C._distributed_c10d
        facts["c10d_dump_names"] = [n for n in dir(c10d)
                                    if "dump" in n.lower() or "trace" in n.lower()]
        data = c10d._dump_nccl_trace()
        with open(path, "wb") as f:
            f.write(data)
        facts["self_dump"] = f"{len(data)} bytes in {path}"
    except Exception as e:  # noqa: BLE001 - a fact, not a failure
        facts["self_dump"] = repr(e)


def wait_for_go():
    go = os.environ.get("HPGPU_GO", "")
    deadline = time.monotonic() + 120
    while go and not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.1)
    print("hpgpu: go" if go and os.path.exists(go) else "hpgpu: no go file",
          flush=True)


def main():
    if MODE == "wait":
        wait_for_go()
        return 0
    facts["env"] = {k: v for k, v in sorted(os.environ.items())
                    if k.startswith(("TORCH", "NCCL", "CUDA", "HYPERPOD",
                                     "PYTHON", "LD_LIBRARY", "RANK",
                                     "LOCAL_RANK", "WORLD_SIZE", "MASTER"))}
    save()
    t0 = time.monotonic()
    import torch
    import torch.distributed as dist
    facts["torch"] = torch.__version__
    facts["torch_file"] = torch.__file__
    facts["import_s"] = round(time.monotonic() - t0, 3)
    save()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    timeout = datetime.timedelta(minutes=10)
    if MODE == "gpu":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        facts["cuda"] = torch.version.cuda
        facts["gpu"] = torch.cuda.get_device_name(dev)
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as e:  # noqa: BLE001 - a fact, not a failure
            facts["nccl"] = repr(e)
        dist.init_process_group("nccl", timeout=timeout, device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
        recorded = []
        fake_flight_recorder(rank, recorded)
    facts["init_s"] = round(time.monotonic() - t0, 3)
    facts["after_init"] = snapshot(rank)
    save()

    t = torch.ones(1 << 20, device=dev)
    for step in range(1, STEPS + 1):
        dist.all_reduce(t)
        if MODE == "gpu":
            torch.cuda.synchronize()
        else:
            recorded.append(stand_in_entry(step, "completed"))
        loss = 4.0 / step
        print(f"[Epoch 0 Batch {step}/100] {{'training_loss_step': "
              f"{loss:.4f}, 'samples/sec': 100.0}}", flush=True)
        if step == 1:
            facts["after_first_collective"] = snapshot(rank)
            save()
        time.sleep(0.3)

    if MODE == "gpu" and os.environ.get("HPGPU_SELF_DUMP"):
        self_dump(torch, os.environ["HPGPU_SELF_DUMP"])
    facts["before_hang"] = snapshot(rank)
    facts["hang_start"] = time.time()
    save()
    # Not a progress line: the rule ignores it; run.sh waits for it.
    print("hpgpu: about to hang", flush=True)
    if MODE == "gpu":
        torch.cuda._sleep(SLEEP_CYCLES)
        dist.all_reduce(t)
        block = torch.cuda.synchronize
    else:
        recorded.append(stand_in_entry(STEPS + 1, "scheduled"))
        block = threading.Event().wait
    block()  # HANG-HERE
    print("hpgpu: the hang ended, which it should not have", flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main())
