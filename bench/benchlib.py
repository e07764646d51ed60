# SPDX-License-Identifier: Apache-2.0
"""What the benchmarks share: the binaries, a measured process run, the
machine's description, medians and the results files.

How a launcher's own CPU time is told apart from its workers': the bench
spawns the launcher itself, waits for it with waitid(WNOWAIT) so that it
stays a zombie, and reads utime and stime from /proc/PID/stat. A zombie
keeps those fields, and they count the process and all of its threads
but none of its children, which are counted separately (cutime, cstime).
Then it is reaped with wait4, whose ru_maxrss is what /usr/bin/time -v
reports.
"""

import argparse
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = "/usr/bin/python3"
RESULTS = BENCH / "results"
RULES_JSON = ROOT / "examples" / "rules" / "rules.json"
PIPELINE_RULES = ["JobStart", "JobHangingDetection", "NoS3CheckpointingDetection",
                  "LowThroughputDetection"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def hyperpodrun_path():
    path = os.environ.get("HYPERPODRUN") or str(ROOT / "build" / "cmd" / "hyperpodrun" /
                                                  "hyperpodrun")
    if not os.access(path, os.X_OK):
        sys.exit(f"bench: hyperpodrun not found at {path}; build it with "
                 "`ninja -C build` or set HYPERPODRUN")
    return os.path.abspath(path)


def producer_path():
    """Builds bench/producer.c into build/bench/ when it is newer than the
    binary: a C compiler is part of the build anyway."""
    src = BENCH / "producer.c"
    out = ROOT / "build" / "bench" / "producer"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
                        "-o", str(out), str(src)], check=True)
    return str(out)


def torchrun_argv():
    return [PYTHON, str(BENCH / "torchrun_compat.py")]


def torch_version():
    try:
        r = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def scratch_root():
    """Where the runs write their logs and consoles: $HPR_BENCH_SCRATCH,
    else /dev/shm when it has room, so that every tool and tee write at
    memory speed and the disk's writeback mood is not what is measured;
    else $TMPDIR."""
    if os.environ.get("HPR_BENCH_SCRATCH"):
        return os.environ["HPR_BENCH_SCRATCH"]
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
        if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize > 6 << 30:
            return str(shm)
    except OSError:
        pass
    return tempfile.gettempdir()


def make_scratch(prefix):
    return tempfile.mkdtemp(prefix=f"hpr-bench-{prefix}-", dir=scratch_root())


def warm_free_memory(nbytes):
    """Writes nbytes to a file in the scratch root and deletes it, so that
    the run which follows gets its pages from memory freed a moment ago.

    Why: on a VM with free page reporting (Firecracker here, virtio-balloon
    with /sys/module/page_reporting), memory that has been free for about
    two seconds is handed back to the host, and the host backs it again on
    first touch, which makes writing into tmpfs two to three times slower.
    Without this, a run's speed depends on what ran before it and how much
    memory that freed (BENCHMARKS.md). Every tool gets the same warm start,
    which is also what a machine without a host to return memory to gives
    all the time."""
    path = Path(scratch_root(), f"hpr-bench-warm-{os.getpid()}")
    chunk = b"\0" * (1 << 20)
    try:
        with open(path, "wb", buffering=0) as f:
            for _ in range(max(1, nbytes >> 20)):
                f.write(chunk)
    finally:
        path.unlink(missing_ok=True)


def filesystem_of(path):
    try:
        out = subprocess.run(["df", "--output=fstype", path], capture_output=True,
                             text=True).stdout.split()
        return out[-1] if out else "?"
    except OSError:
        return "?"


def clean_env(extra=None):
    """The launchers' environment: no PET_*/TORCHELASTIC_* from outside."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "TORCHELASTIC_", "HYPERPOD_"))
           and k not in ("LOGLEVEL", "MASTER_ADDR", "MASTER_PORT", "RANK",
                         "LOCAL_RANK", "WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = "1"  # both launchers would warn and set it
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


def write_rules(path, names, overrides=None):
    """A rules file with the named seed rules of examples/rules/rules.json,
    so the benchmarks run exactly the shipped patterns."""
    rules = json.loads(RULES_JSON.read_text())
    chosen = []
    for name in names:
        rule = next(r for r in rules if r["name"] == name)
        rule = dict(rule)
        rule.update((overrides or {}).get(name, {}))
        chosen.append(rule)
    Path(path).write_text(json.dumps(chosen, indent=1))
    return str(path)


class Run:
    """One finished process: wall seconds, its own CPU seconds (threads
    included, children excluded), its children's, exit status, peak RSS."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return f"Run({self.__dict__})"


def _proc_stat_cpu(pid):
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def _hwm_kb(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run_measured(argv, *, env=None, stdout=None, stderr=None, cwd=None, timeout=600,
                 sample_rss=False, stderr_lines=None):
    """Spawns argv, waits for it, and measures it as described above.

    stdout/stderr: paths (None: /dev/null). stderr_lines: a callable; when
    given, stderr is a pipe and each line is passed to it as (monotonic ns,
    text) the moment it arrives. sample_rss: VmHWM is read every 20 ms,
    for the process itself (ru_maxrss also covers its children)."""
    exe = shutil.which(argv[0]) or argv[0]
    fds = []
    actions = []

    def target(path, fd):
        f = os.open(path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        fds.append(f)
        actions.append((os.POSIX_SPAWN_DUP2, f, fd))

    devnull = os.open(os.devnull, os.O_RDONLY)
    fds.append(devnull)
    actions.append((os.POSIX_SPAWN_DUP2, devnull, 0))
    target(stdout, 1)
    reader = None
    if stderr_lines is not None:
        rfd, wfd = os.pipe()
        fds.append(wfd)
        actions.append((os.POSIX_SPAWN_DUP2, wfd, 2))
    else:
        target(stderr, 2)
    old_cwd = os.getcwd()
    if cwd:
        os.chdir(cwd)
    try:
        t0 = time.perf_counter()
        pid = os.posix_spawn(exe, argv, env if env is not None else os.environ,
                             file_actions=actions, setsid=True)
    finally:
        os.chdir(old_cwd)
        for f in fds:
            os.close(f)
    if stderr_lines is not None:
        def pump():
            with os.fdopen(rfd, "rb", buffering=0) as f:
                pending = b""
                while True:
                    chunk = f.read(65536)
                    if not chunk:
                        break
                    now = time.monotonic_ns()
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        stderr_lines(now, line.decode(errors="replace"))
                if pending:
                    stderr_lines(time.monotonic_ns(), pending.decode(errors="replace"))
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
    hwm = [0]
    stop_sampling = threading.Event()
    sampler = None
    if sample_rss:
        def sample():
            while not stop_sampling.wait(0.02):
                hwm[0] = max(hwm[0], _hwm_kb(pid))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        t1 = time.perf_counter()
        timed_out = not ready
        if timed_out:
            _kill_tree(pid)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        self_cpu, child_cpu = _proc_stat_cpu(pid)
        _, status, ru = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
        stop_sampling.set()
    if sampler:
        sampler.join()
    if reader:
        reader.join(timeout=10)
    if timed_out:
        raise RuntimeError(f"{argv[0]} ran past {timeout} s: {' '.join(argv)}")
    return Run(wall=t1 - t0, cpu=self_cpu, children_cpu=child_cpu,
               rc=os.waitstatus_to_exitcode(status), maxrss_kb=ru.ru_maxrss,
               hwm_kb=hwm[0], pid=pid)


def run_tee(worker, ranks, scratch):
    """The pipe limit: one `WORKER | tee FILE > CONSOLE` per rank, spawned
    directly so that each tee's CPU time comes from its own wait4. The
    console lines are counted, to check that nothing was lost."""
    logdir = Path(scratch, "tee")
    logdir.mkdir()
    pids = {}
    t0 = time.perf_counter()
    for i in range(ranks):
        r, w = os.pipe()
        console = os.open(logdir / f"{i}.console", os.O_WRONLY | os.O_CREAT, 0o644)
        prod = os.posix_spawn(worker[0], worker, os.environ,
                              file_actions=[(os.POSIX_SPAWN_DUP2, w, 1),
                                            (os.POSIX_SPAWN_CLOSE, r)])
        tee = os.posix_spawn("/usr/bin/tee", ["tee", str(logdir / f"{i}.log")], os.environ,
                             file_actions=[(os.POSIX_SPAWN_DUP2, r, 0),
                                           (os.POSIX_SPAWN_DUP2, console, 1),
                                           (os.POSIX_SPAWN_CLOSE, w)])
        for fd in (r, w, console):
            os.close(fd)
        pids[prod] = "producer"
        pids[tee] = "tee"
    cpu = {"tee": 0.0, "producer": 0.0}
    ok = True
    while pids:
        pid, status, ru = os.wait4(-1, 0)
        kind = pids.pop(pid, None)
        if kind is None:
            continue
        ok = ok and os.waitstatus_to_exitcode(status) == 0
        cpu[kind] += ru.ru_utime + ru.ru_stime
    wall = time.perf_counter() - t0
    check(ok, "a producer or tee failed")
    consoles = sum(count_lines(logdir / f"{i}.console") for i in range(ranks))
    return Run(wall=wall, cpu=cpu["tee"], children_cpu=cpu["producer"], rc=0,
               console_lines=consoles)


def tee_command(worker, ranks, logdir):
    """run_tee as the shell command it is equivalent to."""
    return ["sh", "-c", f"for i in $(seq {ranks}); do {' '.join(worker)} | "
            f"tee {logdir}/$i.log > {logdir}/$i.console & done; wait"]


def _kill_tree(pid):
    # The launcher was started as a session leader: its process group is
    # the launcher and whatever it did not move into a group of its own.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        time.sleep(1)


def kill_trees(pids):
    """_kill_tree for many group leaders at once: SIGTERM to every
    group, a second for them to go, then SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = False
        for pid in pids:
            try:
                os.killpg(pid, sig)
                alive = True
            except ProcessLookupError:
                pass
        if not alive:
            return
        if sig == signal.SIGTERM:
            time.sleep(1)


def time_v_maxrss(argv, env=None):
    """Peak RSS in KiB as /usr/bin/time -v reports it."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        r = subprocess.run(["/usr/bin/time", "-v", "-o", out.name] + argv, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=600)
        text = Path(out.name).read_text()
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"/usr/bin/time -v {' '.join(argv)} failed: {text[-500:]}")
    return int(m.group(1))


def read_stamps(path):
    """The producer's stamps: [(kind, rank, attempt, ns)]."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        kind, rank, attempt, ns = line.split()
        out.append((kind, int(rank), int(attempt), int(ns)))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median(xs):
    return statistics.median(xs) if xs else None


def ratio(a, b):
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def at_least(value, floor):
    """A target's verdict: None when it could not be measured."""
    return None if value is None else value >= floor


def count_lines(path):
    n = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                return n
            n += chunk.count(b"\n")


def _first_line(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def machine_info(hyperpodrun):
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    commit = _first_line(["git", "-C", str(ROOT), "describe", "--always", "--dirty"])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kb / 1048576, 1),
        "kernel": platform.release(),
        "os": _first_line(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "hyperpodrun": _first_line([hyperpodrun, "--version"]),
        "commit": commit,
        "torch": torch_version(),
        "python": _first_line([PYTHON, "--version"]),
        "cc": _first_line(["cc", "--version"]),
        "libuv": _first_line(["pkg-config", "--modversion", "libuv"]),
        "pcre2": _first_line(["pkg-config", "--modversion", "libpcre2-8"]),
        "tee": _first_line(["tee", "--version"]),
        "scratch": scratch_root(),
        "scratch_fs": filesystem_of(scratch_root()),
    }


def arg_parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, one repetition: checks that the benchmark works")
    p.add_argument("--out", default=str(RESULTS),
                   help="directory for the JSON results (default bench/results)")
    p.add_argument("--repeats", type=int, default=None,
                   help="repetitions per figure (default: 3, 1 with --smoke)")
    p.add_argument("--no-torchrun", action="store_true",
                   help="measure hyperpodrun only")
    return p


def repeats(args, full=3):
    if args.repeats:
        return args.repeats
    return 1 if args.smoke else full


def write_result(args, name, result):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"bench: wrote {path}")
    return path


def result_header(args, name, hyperpodrun, commands):
    return {
        "bench": name,
        "smoke": bool(args.smoke),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "loadavg_start": list(os.getloadavg()),
        "machine": machine_info(hyperpodrun),
        "commands": commands,
    }


def finish_result(result):
    result["loadavg_end"] = list(os.getloadavg())
    return result


def fmt(v, digits=3):
    """A number for a table, or an em dash."""
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def print_table(title, header, rows):
    print(f"\n{title}")
    table = [header] + [[fmt(c) if not isinstance(c, str) else c for c in r]
                        for r in rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))


def print_targets(result):
    for t in result.get("targets", []):
        state = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        unit = f" {t['unit']}" if t.get("unit") and t["value"] is not None else ""
        print(f"  target: {t['what']}: {fmt(t['value'])}{unit} -> {state}")


class Failure(Exception):
    """A benchmark whose run was wrong (lines lost, a launcher failing):
    its numbers would mean nothing."""


def check(cond, what):
    if not cond:
        raise Failure(what)


NEEDS_OPERATOR = "not run: needs the operator API (--rdzv-backend hyperpod)"


class Operator:
    """hyperpodrun in operator mode, driven over HTTP as the HyperPod
    training operator drives it: POST /start, GET /status, POST /stop,
    POST /shutdown (reference contract, hyperpod-agent.md section 3).

    start() returns None when the binary refuses the hyperpod backend (a
    build without the operator API exits 2 at once), so that the benchmarks
    report the measurement as not run instead of failing."""

    def __init__(self, hpr, launcher_args, worker, env=None, stderr=None):
        self.port = free_port()
        # pod_resourceconfig.json goes to a scratch directory, not to
        # /opt/ml/input/config.
        self.resource_dir = tempfile.mkdtemp(prefix="hpr-bench-rc-")
        self.argv = [hpr, "--rdzv-backend", "hyperpod", "--server-host", "127.0.0.1",
                     "--server-port", str(self.port), "--rdzv-conf",
                     f"resource_config_dir={self.resource_dir}"] + launcher_args + worker
        self.env = env
        self.stderr = stderr
        self.proc = None
        self.conn = None

    def start(self, timeout=10.0):
        import http.client
        with open(self.stderr or os.devnull, "wb") as err:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return self._refused()
            try:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                self.status()
                return self
            except OSError:
                self.conn = None
                time.sleep(0.01)
        self.close()
        raise Failure(f"operator API on port {self.port} did not answer in {timeout} s")

    def _refused(self):
        """The launcher exited before its API answered: a build without
        the operator API says the backend is not available (None); any
        other reason is a failure of the benchmark."""
        err = Path(self.stderr).read_text(errors="replace") if self.stderr else ""
        if not self.stderr or "not available in this build" in err:
            return None
        raise Failure(f"operator mode exited {self.proc.returncode}: {err[-1500:]}")

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        payload = resp.read()
        if resp.status != 200:
            raise Failure(f"{method} {path}: HTTP {resp.status}: {payload[:300]!r}")
        return payload

    def status(self):
        return json.loads(self.request("GET", "/status"))["status"]

    def post_start(self, fault_count):
        self.request("POST", "/start", {"rank": 0, "nnodes": 1, "faultCount": fault_count,
                                        "master_addr": "127.0.0.1", "master_port": 29500})

    def post_stop(self):
        self.request("POST", "/stop")

    def wait_status(self, wanted, timeout=30.0, interval=0.001):
        """Polls /status until it says wanted; returns the monotonic ns of
        the answer that said so."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.status() == wanted:
                return time.monotonic_ns()
            time.sleep(interval)
        raise Failure(f"/status did not say {wanted!r} within {timeout} s")

    def close(self):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                if self.conn is not None:
                    self.request("POST", "/shutdown")
                self.proc.wait(timeout=30)
            except (OSError, Failure, subprocess.TimeoutExpired):
                _kill_tree(self.proc.pid)
                self.proc.wait()
        if self.conn is not None:
            self.conn.close()
        shutil.rmtree(self.resource_dir, ignore_errors=True)
        return self.proc.returncode
