# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures for the hyperpodrun integration tests.

Every test runs the real binary on real processes. Conventions:

* hyperpodrun's stdout and stderr go to files (never pipes), so a test can
  look at the console while the job runs and nothing can block on a full pipe.
* Every wait is bounded; a hang fails the test instead of blocking the suite.
* Each test gets a unique marker in the environment of everything it starts
  (HPR_TEST_MARKER); after the test, any live process carrying it is a leak:
  it is killed and the test errors.
* Workers are Python scripts run with /usr/bin/python3 (PYTHON_EXEC is set),
  or small executables written into the test's tmp_path for --no-python.
"""

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

PYTHON = "/usr/bin/python3"
HERE = Path(__file__).resolve().parent
HELPERS = HERE / "helpers"
SOURCE_ROOT = Path(os.environ.get("HYPERPODRUN_SOURCE_ROOT", HERE.parent.parent))


def _binary():
    path = os.environ.get("HYPERPODRUN")
    if not path:
        path = str(SOURCE_ROOT / "build" / "cmd" / "hyperpodrun" / "hyperpodrun")
    return os.path.abspath(path)


HYPERPODRUN = _binary()

# Variables of the outer environment that would change what hyperpodrun does.
_SCRUB_PREFIXES = ("PET_", "TORCHELASTIC_", "HYPERPOD_")
_SCRUB = {
    "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK",
    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "JOB_RESTART_COUNT", "PYTHONPATH", "PYTHONSTARTUP", "LOGLEVEL",
    "CUDA_VISIBLE_DEVICES", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
}

SIGNAL_NAMES = {s.value: s.name for s in signal.Signals}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "soak: a long run that the suite still runs (about a "
        "minute at most)")
    if not os.access(HYPERPODRUN, os.X_OK):
        raise pytest.UsageError(
            f"hyperpodrun binary not found at {HYPERPODRUN}; "
            "build it with `ninja -C build` or set HYPERPODRUN")


def deadline_poll(predicate, timeout=10.0, interval=0.01, what="condition"):
    """Calls predicate until it returns a truthy value; fails after timeout."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_for_files(paths, timeout=15.0, proc=None):
    """Waits until every path exists (e.g. workers' ready files)."""
    paths = [Path(p) for p in paths]

    def ready():
        if proc is not None and proc.poll() is not None:
            missing = [str(p) for p in paths if not p.exists()]
            if missing:
                pytest.fail(f"hyperpodrun exited ({proc.returncode}) before "
                            f"{missing} appeared\n{proc.describe()}")
        return all(p.exists() for p in paths)

    deadline_poll(ready, timeout, what=f"files {[str(p) for p in paths]}")


def write_exec(path, text):
    """Writes an executable script (tests never rely on checked-in modes)."""
    path = Path(path)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def helper(name):
    return str(HELPERS / name)


def pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = data[data.rindex(b")") + 2:][:1]
    return state not in (b"Z", b"X")


def proc_status(pid):
    """(state letter, ppid) or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[1])


def processes_with_marker(marker):
    """Live (non-zombie) processes whose environment or cmdline has marker."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if (needle in env or needle in cmd) and pid_alive(pid):
            found.append((pid, cmd.replace(b"\0", b" ").decode(errors="replace")))
    return found


class Result:
    def __init__(self, args, rc, stdout, stderr, elapsed):
        self.args = args
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed

    @property
    def out(self):
        return self.stdout.decode(errors="replace")

    @property
    def err(self):
        return self.stderr.decode(errors="replace")

    def describe(self):
        return (f"command: {self.args}\nexit: {self.rc} after {self.elapsed:.2f}s\n"
                f"--- stdout (tail) ---\n{self.out[-4000:]}\n"
                f"--- stderr (tail) ---\n{self.err[-4000:]}")

    def own_messages(self):
        """hyperpodrun's own log lines on stderr."""
        return [l for l in self.err.splitlines()
                if re.match(r"^hyperpodrun\[\d+\]: ", l)]


class Proc:
    """A running hyperpodrun whose console goes to files."""

    def __init__(self, args, env, cwd, outdir, stdout=None):
        """stdout: instead of the console file, e.g. subprocess.PIPE."""
        self.args = args
        self.out_path = outdir / "console.out"
        self.err_path = outdir / "console.err"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.start = time.monotonic()
        self.popen = subprocess.Popen(
            args, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=self._out if stdout is None else stdout, stderr=self._err,
            start_new_session=True)
        self.pid = self.popen.pid
        self.end = None

    @property
    def returncode(self):
        return self.popen.returncode

    def poll(self):
        rc = self.popen.poll()
        if rc is not None and self.end is None:
            self.end = time.monotonic()
        return rc

    def console_out(self):
        return self.out_path.read_bytes()

    def console_err(self):
        return self.err_path.read_bytes()

    def signal(self, sig):
        self.popen.send_signal(sig)

    def describe(self):
        return (f"command: {self.args}\n"
                f"--- stdout (tail) ---\n"
                f"{self.console_out()[-4000:].decode(errors='replace')}\n"
                f"--- stderr (tail) ---\n"
                f"{self.console_err()[-4000:].decode(errors='replace')}")

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def wait(self, timeout=30.0):
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"hyperpodrun did not exit within {timeout}s\n"
                        + self.describe())
        if self.end is None:
            self.end = time.monotonic()
        self._out.close()
        self._err.close()
        return Result(self.args, self.popen.returncode, self.console_out(),
                      self.console_err(), self.end - self.start)


class Runner:
    def __init__(self, tmp_path, marker):
        self.tmp = tmp_path
        self.marker = marker
        self.procs = []
        self.tmpdir = tmp_path / "tmpdir"
        self.tmpdir.mkdir()
        self.log_dir = tmp_path / "logs"
        self.env = self.base_env()

    def base_env(self):
        env = {k: v for k, v in os.environ.items()
               if k not in _SCRUB and not k.startswith(_SCRUB_PREFIXES)}
        env["PYTHON_EXEC"] = PYTHON
        env["HPR_TEST_MARKER"] = self.marker
        env["TMPDIR"] = str(self.tmpdir)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def start(self, args, env=None, unset=(), cwd=None, log_dir=True,
              stdout=None, wrapper=()):
        """Starts hyperpodrun with args. log_dir=True adds --log-dir <tmp>/logs
        in front; env entries overlay the base environment; wrapper is a
        command that execs hyperpodrun (setpriv ...)."""
        full_env = dict(self.env)
        if env:
            full_env.update({k: str(v) for k, v in env.items()})
        for k in unset:
            full_env.pop(k, None)
        cmd = [*wrapper, HYPERPODRUN]
        if log_dir:
            cmd += ["--log-dir", str(self.log_dir)]
        cmd += [str(a) for a in args]
        outdir = self.tmp / f"console{len(self.procs)}"
        outdir.mkdir()
        proc = Proc(cmd, full_env, cwd or self.tmp, outdir, stdout=stdout)
        self.procs.append(proc)
        return proc

    def run(self, args, timeout=30.0, **kw):
        return self.start(args, **kw).wait(timeout)

    # Log directory helpers -------------------------------------------------

    def run_dirs(self, prefix=None):
        """Directories directly under the log dir, optionally by prefix."""
        if not self.log_dir.exists():
            return []
        dirs = sorted(p for p in self.log_dir.iterdir() if p.is_dir())
        if prefix is not None:
            dirs = [d for d in dirs if d.name.startswith(prefix)]
        return dirs

    def train_dir(self, run_id):
        """The one <run_id>_XXXXXXXX directory of the training stage."""
        pat = re.compile(re.escape(run_id) + r"_[a-z0-9_]{8}$")
        dirs = [d for d in self.run_dirs() if pat.match(d.name)]
        assert len(dirs) == 1, (
            f"expected one {run_id}_XXXXXXXX dir in {self.log_dir}, found "
            f"{[d.name for d in self.run_dirs()]}")
        return dirs[0]

    def only_train_dir(self):
        dirs = [d for d in self.run_dirs()
                if not d.name.startswith(("pre_train_", "post_train_"))]
        assert len(dirs) == 1, f"run dirs: {[d.name for d in self.run_dirs()]}"
        return dirs[0]

    def cleanup(self):
        for p in self.procs:
            if p.popen.poll() is None:
                p.kill()
            for f in (p._out, p._err, p.popen.stdout):
                if f is not None and not f.closed:
                    f.close()


@pytest.fixture
def marker():
    return "hprtest-" + uuid.uuid4().hex


@pytest.fixture
def hpr(tmp_path, marker):
    """Runs hyperpodrun; fails the test if anything it started outlives it."""
    runner = Runner(tmp_path, marker)
    yield runner
    still_running = [p for p in runner.procs if p.popen.poll() is None]
    runner.cleanup()

    def leftovers():
        return processes_with_marker(marker)

    end = time.monotonic() + 5.0
    left = leftovers()
    while left and time.monotonic() < end:
        time.sleep(0.02)
        left = leftovers()
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if still_running:
        pytest.fail(f"hyperpodrun still running at the end of the test: "
                    f"{[p.args for p in still_running]}")
    if left:
        pytest.fail(f"processes left behind after hyperpodrun exited: {left}")


def read_json(path):
    with open(path) as f:
        return json.load(f)


def console_lines(data):
    """Splits console bytes into lines; the console always ends lines with
    \\n, so a trailing piece without one is a bug and kept visibly."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    else:
        lines[-1] += b"<NO NEWLINE AT END OF CONSOLE>"
    return lines


def worker_lines(data, prefix_re=rb"\[default(\d+)\]:"):
    """Groups prefixed console lines by local rank: {rank: [line, ...]}.
    Lines that carry no prefix are returned under key None."""
    pat = re.compile(b"^" + prefix_re)
    by_rank = {}
    for line in console_lines(data):
        m = pat.match(line)
        if m:
            by_rank.setdefault(int(m.group(1)), []).append(line[m.end():])
        else:
            by_rank.setdefault(None, []).append(line)
    return by_rank


def own_lines_removed(data):
    """Console stderr bytes without hyperpodrun's own messages and summary."""
    keep = []
    for line in console_lines(data):
        if re.match(rb"^hyperpodrun\[\d+\]: ", line):
            continue
        keep.append(line)
    return keep


def have_torch():
    r = subprocess.run([PYTHON, "-c", "import torch.distributed"],
                       capture_output=True, timeout=60)
    return r.returncode == 0
