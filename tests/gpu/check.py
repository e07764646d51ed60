#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Judges what tests/gpu/run.sh collected; prints one line per verdict,
"PASS name: detail", "FAIL name: detail" or "INFO name: detail", which
run.sh appends to its summary. Standard library only; exits 0 unless its
own arguments are wrong (a failed check is a FAIL line, not an exit code).

  check.py metrics METRICS_FILE AGENT_LOG RC
  check.py report REPORT_JSON WORKER_PY HANG_LINE RC AGENT_LOG
  check.py fr FR_DUMP_RC FR_DUMP_TEXT FR_DUMP_JSON_RC FR_DUMP_JSON STEPS
  check.py globals PICKLE        the classes and functions the pickle names
                                 (read by opcode; nothing is unpickled)
  check.py load PICKLE           unpickles it in full (only for a dump this
                                 run made) and prints it as JSON
  check.py ras HOST PORT         asks NCCL's RAS thread for its STATUS
"""
import json
import os
import pickletools
import re
import socket
import sys


def say(kind, name, detail):
    detail = " ".join(str(detail).split())
    print(f"{kind} {name}: {detail[:400]}")


def verdict(ok, name, detail):
    say("PASS" if ok else "FAIL", name, detail)


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        return f"<{path}: {e.strerror}>"


def metrics(path, agent_log, rc):
    text, log = read(path), read(agent_log)
    values = {}
    for line in text.splitlines():
        m = re.match(r"^(hyperpodrun_preflight_\w+)(\{[^}]*\})? (\S+)$", line)
        if m:
            values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    passed = values.get("hyperpodrun_preflight_passed")
    busbw = values.get("hyperpodrun_preflight_best_busbw_bytes_per_second")
    busbw = busbw / 1e9 if busbw is not None else None
    gpus = values.get("hyperpodrun_preflight_gpus")
    said = re.search(r"preflight passed: (.*)", log)
    sizes = re.findall(r"preflight: all-reduce of (\d+) bytes: ([\d.]+) us, "
                       r"([\d.]+) GB/s algorithm, ([\d.]+) GB/s bus", log)
    verdict(rc == "0", "preflight_exit", f"hyperpodrun exited {rc} (want 0)")
    verdict(said is not None, "preflight_log",
            said.group(0) if said else "no 'preflight passed' line; "
            + "; ".join(l for l in log.splitlines() if "preflight" in l)[-300:])
    verdict(len(sizes) >= 1, "preflight_sizes_logged",
            ", ".join(f"{int(b) >> 20} MiB {bus} GB/s" for b, _, _, bus in sizes)
            or "no per-size line")
    verdict(passed == 1 and gpus is not None and gpus >= 1
            and busbw is not None and busbw > 0, "preflight_metrics",
            f"passed={passed} gpus={gpus} busbw={busbw} GB/s "
            f"({len(values)} preflight samples in /metrics)")


def report(path, worker, hang_line, rc, agent_log):
    log = read(agent_log)
    verdict(rc == "124", "hang_exit", f"hyperpodrun exited {rc} (want 124)")
    m = re.search(r"log rule verdict .*", log)
    verdict(m is not None and "HANGING" in m.group(0), "hang_verdict",
            m.group(0) if m else "no verdict line in the agent's log")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        verdict(False, "hang_report", f"{path}: {e}")
        return
    ranks = doc.get("ranks") or []
    verdict(len(ranks) == 1, "hang_report",
            f"{os.path.basename(path)}: verdict {doc.get('verdict')!r}, "
            f"{len(ranks)} rank(s), collect_ms {doc.get('collect_ms')}, "
            f"silence {doc.get('silence')!r}")
    say("INFO", "hang_collect_ms", doc.get("collect_ms"))
    r = ranks[0] if ranks else {}
    py = r.get("python") or {}
    stacks = py.get("stacks") or ""
    want = f'{os.path.basename(worker)}", line {hang_line} in'
    verdict(py.get("status") == "complete" and want in stacks, "hang_python",
            f"status {py.get('status')!r}; want '{want}' in the stacks: "
            + ("found" if want in stacks else "absent; stacks: " + stacks[-300:]))
    procs = r.get("processes") or []
    threads = [t for p in procs for t in (p.get("threads") or [])]
    kstacks = [t for t in threads if t.get("kernel_stack")]
    names = sorted({t.get("comm", "") for t in threads})
    main = (procs[0].get("threads") or [{}])[0] if procs else {}
    verdict(len(procs) >= 1 and len(threads) >= 1, "hang_proc",
            f"{len(procs)} process(es), {len(threads)} thread(s), "
            f"{len(kstacks)} with a kernel stack; rank state "
            f"{r.get('state')!r}; main thread {main.get('state')!r} in "
            f"{main.get('wchan')!r}")
    verdict(len(kstacks) >= 1, "hang_kernel_stacks",
            f"{len(kstacks)} of {len(threads)} threads have "
            "/proc/PID/task/TID/stack (root only)")
    say("INFO", "hang_thread_names", ", ".join(names))
    fr = r.get("nccl_flight_recorder") or {}
    fr_path = fr.get("path") or ""
    size = os.path.getsize(fr_path) if fr_path and os.path.exists(fr_path) else -1
    verdict(fr.get("status") == "complete" and size > 0
            and size == fr.get("size"), "hang_flight_recorder",
            f"status {fr.get('status')!r}, pipe {fr.get('pipe')!r}, path "
            f"{fr_path!r}, size {fr.get('size')} (file {size})")
    ras = doc.get("nccl_ras")
    if ras is None:
        verdict(False, "hang_nccl_ras", "no nccl_ras in the report")
    else:
        text = ras.get("report") or ""
        verdict(ras.get("status") == "complete" and len(text) > 0,
                "hang_nccl_ras",
                f"status {ras.get('status')!r} at {ras.get('address')!r}"
                f"{', detail ' + repr(ras.get('detail')) if ras.get('detail') else ''}"
                f", {len(text)} bytes: " + " | ".join(text.splitlines()[:6]))
    lines = [l for l in log.splitlines() if "hang report:" in l]
    say("INFO", "hang_report_log_line", lines[0] if lines else "none")


def fr(rc_text, text_path, rc_json, json_path, steps):
    text = read(text_path)
    verdict(rc_text == "0", "fr_dump_text",
            f"tools/fr_dump.py exited {rc_text}: "
            + " | ".join(text.splitlines()[:4]))
    if rc_json != "0":
        verdict(False, "fr_dump_entries",
                f"tools/fr_dump.py --json exited {rc_json}: "
                + read(json_path)[:300])
        return
    try:
        with open(json_path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        verdict(False, "fr_dump_entries", f"{json_path}: {e}")
        return
    entries = [e for e in data.get("entries") or [] if isinstance(e, dict)]
    reduces = [e for e in entries
               if "all_reduce" in str(e.get("profiling_name", ""))
               or "allreduce" in str(e.get("profiling_name", "")).lower()]
    last = reduces[-1] if reduces else {}
    done = [e for e in reduces[:-1] if e.get("state") == "completed"]
    ok = (len(reduces) >= steps + 1 and len(done) >= steps
          and last.get("state") not in (None, "completed"))
    verdict(ok, "fr_dump_entries",
            f"version {data.get('version')!r}, {len(entries)} entries, "
            f"{len(reduces)} all_reduce ({len(done)} completed before the "
            f"last); the last: {last.get('profiling_name')!r} state "
            f"{last.get('state')!r} seq {last.get('collective_seq_id')!r}; "
            f"top-level keys {sorted(data)}")


def globals_of(path):
    """GLOBAL and STACK_GLOBAL names, read from the opcodes (the strings
    pushed just before a STACK_GLOBAL)."""
    names, strings = [], []
    with open(path, "rb") as f:
        for op, arg, _ in pickletools.genops(f):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE",
                           "BINUNICODE8"):
                strings.append(arg)
            elif op.name == "GLOBAL":
                names.append(arg.replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append(f"{strings[-2]}.{strings[-1]}")
    counts = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    say("INFO", "fr_pickle_globals",
        ", ".join(f"{n} x{c}" for n, c in sorted(counts.items()))
        or "none: plain data only")


def load(path):
    import pickle
    with open(path, "rb") as f:
        data = pickle.load(f)
    json.dump(data, sys.stdout, indent=1, default=repr)
    print()


def ras(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect((host, int(port)))
            s.sendall(b"CLIENT PROTOCOL 2\n")
            first = b""
            while not first.endswith(b"\n") and len(first) < 200:
                chunk = s.recv(1)
                if not chunk:
                    break
                first += chunk
            s.sendall(b"STATUS\n")
            body = b""
            while len(body) < 1 << 20:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
        print(f"{host}:{port}: {first.decode(errors='replace').strip()!r}, "
              f"{len(body)} bytes")
        print(body.decode(errors="replace"))
    except OSError as e:
        print(f"{host}:{port}: {e}")


def main(argv):
    cmds = {"metrics": (metrics, 3), "report": (report, 5), "fr": (fr, 5),
            "globals": (globals_of, 1), "load": (load, 1), "ras": (ras, 2)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) != cmds[argv[1]][1] + 2:
        sys.exit(__doc__)
    fn, _ = cmds[argv[1]]
    args = argv[2:]
    if fn is fr:
        args[-1] = int(args[-1])
    fn(*args)


if __name__ == "__main__":
    main(sys.argv)
