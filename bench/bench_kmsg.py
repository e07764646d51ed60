#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Kernel log watcher (--node-problem-config): what it costs and how fast
it acts. The kernel log is a FIFO given with --kmsg, fed records in the
/dev/kmsg format, with the shipped Neuron and NVIDIA Xid configs.

  throughput  2 workers (bench/producer) print N lines each as fast as they
              can; wall time and the agent's own CPU, without the watcher,
              with it idle, and with a 10 MB burst of kernel noise written
              into the kernel log while the workers print
  latency     a permanent record (NEURON_HW_ERR=DMA_ERROR) written while the
              workers run: time from just before the write to hyperpodrun's
              NodeFault line on stderr, and to its exit (status 123)
"""

import os
import sys
import threading
import time
from pathlib import Path

import benchlib as bl

EXAMPLES = bl.ROOT / "examples" / "node-problem"
CONFIGS = f"{EXAMPLES / 'neuron.json'},{EXAMPLES / 'nvidia-xid.json'}"


def boot_usec():
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1e6)


def record(msg, seq):
    return f"6,{seq},{boot_usec()},-;{msg}\n"


def noise(nbytes):
    out, seq, size = [], 0, 0
    while size < nbytes:
        line = record(f"usb 1-1: noise line {seq} " + "x" * 60, seq)
        out.append(line)
        size += len(line)
        seq += 1
    return "".join(out).encode()


def write_all(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def throughput(hpr, producer, lines, mode, scratch):
    fifo = Path(scratch, f"kmsg-{mode}")
    args = [hpr, "--standalone", "--nproc-per-node", "2", "--no-python",
            "--log-dir", str(Path(scratch, "logs")), "--tee", "0"]
    burst = None
    fed = {}
    if mode != "off":
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        args += ["--node-problem-config", CONFIGS, "--kmsg", str(fifo)]
    if mode == "burst":
        data = noise(10 * 1000 * 1000)

        def feed():
            # Waits for hyperpodrun to open the FIFO for reading. A run that
            # ends first leaves the rest unread (EPIPE): counted.
            try:
                write_all(fifo, data)
                fed["bytes"] = len(data)
            except BrokenPipeError:
                fed["bytes"] = None
        burst = threading.Thread(target=feed, daemon=True)
        burst.start()
    run = bl.run_measured(args + [producer, "lines", str(lines)],
                          env=bl.clean_env(), timeout=600)
    if burst is not None:
        burst.join(60)
    if run.rc != 0:
        raise RuntimeError(f"hyperpodrun exited {run.rc} ({mode})")
    return {"mode": mode, "wall_s": run.wall, "agent_cpu_s": run.cpu,
            "lines_per_s": 2 * lines / run.wall,
            "burst_read_whole": fed.get("bytes") is not None if burst else None}


def latency(hpr, producer, scratch, i):
    fifo = Path(scratch, f"kmsg-lat{i}")
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    seen = {}
    started = threading.Event()

    def on_line(ns, text):
        if "attempt 0:" in text:
            started.set()
        if "NodeFault_NeuronHasError_DMA_ERROR: the kernel log" in text:
            seen.setdefault("fault", ns)

    written = {}

    def inject():
        started.wait(30)
        time.sleep(0.2)  # the workers are printing by then
        data = record("NEURON_HW_ERR=DMA_ERROR nd-id=0 bench", 1).encode()
        # Stamped before the write: hyperpodrun may act before it returns.
        written["ns"] = time.monotonic_ns()
        write_all(fifo, data)
    t = threading.Thread(target=inject, daemon=True)
    t.start()
    run = bl.run_measured([hpr, "--standalone", "--nproc-per-node", "2",
                           "--no-python", "--log-dir", str(Path(scratch, "logs")),
                           "--tee", "0", "--node-problem-config", CONFIGS,
                           "--kmsg", str(fifo), producer, "lines", "100000000",
                           "2000"],
                          env=bl.clean_env(), stderr_lines=on_line, timeout=120)
    end_ns = time.monotonic_ns()
    t.join(5)
    if run.rc != 123 or "fault" not in seen:
        raise RuntimeError(f"no node fault seen (exit {run.rc})")
    return {"to_log_ms": (seen["fault"] - written["ns"]) / 1e6,
            "to_exit_ms": (end_ns - written["ns"]) / 1e6}


def main():
    args = bl.arg_parser(__doc__).parse_args()
    hpr = bl.hyperpodrun_path()
    producer = bl.producer_path()
    scratch = bl.make_scratch("kmsg")
    lines = 20000 if args.smoke else 5000000
    n = bl.repeats(args, full=3)
    result = bl.result_header(args, "kmsg", hpr, {
        "throughput": f"hyperpodrun --standalone --nproc-per-node 2 [--node-problem-config "
                      f"neuron.json,nvidia-xid.json --kmsg FIFO] producer lines {lines}",
        "latency": "FIFO record NEURON_HW_ERR=DMA_ERROR while 2 workers print 2000 lines/s"})
    runs = {m: [throughput(hpr, producer, lines, m, scratch) for _ in range(n)]
            for m in ("off", "idle", "burst")}
    result["throughput"] = {
        m: {"wall_s": bl.median([r["wall_s"] for r in rs]),
            "agent_cpu_s": bl.median([r["agent_cpu_s"] for r in rs]),
            "lines_per_s": bl.median([r["lines_per_s"] for r in rs]),
            "runs": rs}
        for m, rs in runs.items()}
    lats = [latency(hpr, producer, scratch, i) for i in range(max(n, 1 if args.smoke else 5))]
    result["latency"] = {
        "to_log_ms": bl.median([x["to_log_ms"] for x in lats]),
        "to_exit_ms": bl.median([x["to_exit_ms"] for x in lats]),
        "runs": lats}
    bl.write_result(args, "kmsg", bl.finish_result(result))
    for m, v in result["throughput"].items():
        print(f"kmsg {m:5}: {v['lines_per_s']:.0f} lines/s, wall {v['wall_s']:.3f} s, "
              f"agent CPU {v['agent_cpu_s']:.3f} s")
    print(f"kmsg latency: record → NodeFault log {result['latency']['to_log_ms']:.2f} ms, "
          f"→ exit {result['latency']['to_exit_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
