# SPDX-License-Identifier: Apache-2.0
"""Hostile output paths: a disk that fills up, a console that fails or is
not read, and a log rule too slow for the output. The agent keeps the job
going and the files whole, and says what it lost."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from conftest import HYPERPODRUN, deadline_poll, write_exec


def worker(tmp_path, body, name="worker.py"):
    return write_exec(tmp_path / name, "#!/usr/bin/python3\n"
                      "import os, signal, sys, time\n"
                      "rank = os.environ['LOCAL_RANK']\n" + body)


class PipedRun:
    """hyperpodrun with stdout and/or stderr on pipes the test controls:
    nothing reads them until the test says so. one_pipe: both on the
    stderr pipe (2>&1)."""

    def __init__(self, hpr, args, stdout_pipe=False, stderr_pipe=True,
                 one_pipe=False):
        self.out_r = self.err_r = None
        out_w = err_w = None
        self.out_file = open(hpr.tmp / "console.out", "wb")
        if stdout_pipe:
            self.out_r, out_w = os.pipe()
        if stderr_pipe:
            self.err_r, err_w = os.pipe()
        if one_pipe:
            out_w = os.dup(err_w)
            stdout_pipe = True
        self.popen = subprocess.Popen(
            [HYPERPODRUN, "--log-dir", str(hpr.log_dir), *map(str, args)],
            env=hpr.env, cwd=hpr.tmp, stdin=subprocess.DEVNULL,
            stdout=out_w if stdout_pipe else self.out_file,
            stderr=err_w, start_new_session=True)
        for fd in (out_w, err_w):
            if fd is not None:
                os.close(fd)
        self.collected = {}
        self.readers = []

    def read_all(self, which):
        """Starts draining one pipe in a thread; collected[which] is what
        it got once the pipe closes (see finish)."""
        fd = self.out_r if which == "out" else self.err_r
        chunks = []

        def drain():
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                chunks.append(data)
            self.collected[which] = b"".join(chunks)

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        self.readers.append(t)

    def finish(self, timeout=30):
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail("hyperpodrun did not exit")
        for t in self.readers:
            t.join(timeout)
        return rc

    def kill(self):
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(5)

    def close(self):
        if self.popen.poll() is None:
            self.kill()
        for fd in (self.out_r, self.err_r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.out_file.close()


@pytest.fixture
def small_disk(tmp_path):
    """A real 512 KiB filesystem (tmpfs) that a test can fill."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs",
                        str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.decode()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


LINE = "rank {rank} line {i:06d} " + "x" * 80


def test_a_full_disk_leaves_a_clean_prefix_and_a_report(hpr, tmp_path,
                                                        small_disk):
    # The worker writes 300 lines, then 6,000 more (about 600 KB) into a
    # 512 KiB disk that is nearly full already. Once the agent has said
    # the write failed, the disk is freed and the worker writes 300 more:
    # a brief ENOSPC. The file must then hold the first lines, each whole,
    # with nothing spliced in after the gap; the console has every line,
    # the job succeeds, and the loss is named with file and rank.
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (256 * 1024))
    go = tmp_path / "go"
    script = worker(tmp_path, (
        f"line = {LINE!r}\n"
        "def emit(a, b):\n"
        "    for i in range(a, b):\n"
        "        print(line.format(rank=rank, i=i))\n"
        "    sys.stdout.flush()\n"
        "emit(0, 300)\n"
        "emit(300, 6300)\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.01)\n"
        "emit(6300, 6600)\n"))
    log_dir = small_disk / "logs"
    proc = hpr.start(["--log-dir", log_dir, "--standalone",
                      "--nproc-per-node", "1", "--no-python", "--tee", "3",
                      script], log_dir=False)
    deadline_poll(lambda: b"No space left on device" in proc.console_err()
                  or b"no space left on device" in proc.console_err()
                  or proc.poll() is not None,
                  what="the agent's report of the failed write")
    filler.unlink()
    go.write_text("")
    r = proc.wait(30)
    assert r.rc == 0, r.describe()

    expected = [LINE.format(rank=0, i=i) for i in range(6600)]
    log = next(log_dir.glob("*/attempt_0/0/stdout.log"))
    data = log.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-200:]
    kept = data.decode().splitlines()
    # A clean prefix: the first lines, in order, each whole, nothing after.
    assert 300 <= len(kept) < 6600, len(kept)
    assert kept == expected[:len(kept)]
    # The console keeps going and has every line.
    shown = [l.split(":", 1)[1] for l in r.out.splitlines()
             if l.startswith("[default0]:")]
    assert shown == expected, len(shown)
    # Named with file and rank, and how much the file misses.
    assert re.search(rf"local rank 0: writing its log file {re.escape(str(log))}"
                     r" failed: no space left on device", r.err,
                     re.IGNORECASE), r.describe()
    lost = sum(len(l) + 1 for l in expected) - len(data)
    assert (f"local rank 0: its log file {log} misses the last {lost} of "
            f"{sum(len(l) + 1 for l in expected)} bytes") in r.err, r.describe()


def test_a_console_on_a_full_device_is_reported_and_the_job_goes_on(
        hpr, tmp_path):
    script = worker(tmp_path, (
        "for i in range(5000):\n"
        "    print('line', i)\n"))
    with open("/dev/full", "wb") as full:
        p = subprocess.run(
            [HYPERPODRUN, "--log-dir", str(hpr.log_dir), "--standalone",
             "--nproc-per-node", "2", "--no-python", "--tee", "3",
             str(script)], env=hpr.env, cwd=hpr.tmp, stdin=subprocess.DEVNULL,
            stdout=full, stderr=subprocess.PIPE, timeout=30)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0, err
    # Said at the stage's end, and once more with the final count.
    lost = re.findall(r"console stdout: writing it failed \(no space left "
                      r"on device\); (\d+) lines lost", err, re.IGNORECASE)
    assert lost and lost[-1] == "10000", err
    for rank in range(2):
        log = next(hpr.log_dir.glob(f"*/attempt_0/{rank}/stdout.log"))
        assert log.read_text().count("\n") == 5000


def test_sigterm_reaches_the_workers_while_nobody_reads_stderr(hpr,
                                                                 tmp_path):
    # stderr is a pipe nobody reads, and the workers have filled it (and
    # the agent's console queue behind it). The agent still has things to
    # say on SIGTERM: it must forward the signal all the same, before
    # anyone reads a byte of its stderr.
    script = worker(tmp_path, (
        f"got = {str(tmp_path)!r} + '/term.' + rank\n"
        "def on_term(sig, frame):\n"
        "    open(got, 'w').close()\n"
        "    os._exit(0)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "chunk = ('e' * 200 + '\\n') * 500\n"
        "for _ in range(60):\n"
        "    sys.stderr.write(chunk)\n"
        "    sys.stderr.flush()\n"
        f"open({str(tmp_path)!r} + '/ready.' + rank, 'w').close()\n"
        "while True:\n"
        "    time.sleep(0.05)\n"))
    run = PipedRun(hpr, ["--standalone", "--nproc-per-node", "2",
                         "--no-python", "--tee", "3", script])
    try:
        deadline_poll(lambda: all((tmp_path / f"ready.{r}").exists()
                                  for r in range(2)),
                      what="the workers' stderr floods")
        run.popen.send_signal(signal.SIGTERM)
        # No one reads stderr until both workers have the signal.
        deadline_poll(lambda: all((tmp_path / f"term.{r}").exists()
                                  for r in range(2)),
                      what="SIGTERM reaching the workers")
        run.read_all("err")
        rc = run.finish()
        err = run.collected["err"].decode(errors="replace")
        assert rc == 128 + signal.SIGTERM or rc == 143, err[-3000:]
        assert "console lines dropped" in err, err[-3000:]
    finally:
        run.close()


@pytest.mark.parametrize("one_pipe", [False, True],
                         ids=["stderr", "stdout-and-stderr"])
def test_agent_messages_never_land_inside_a_worker_line(hpr, tmp_path,
                                                        one_pipe):
    # Workers write long lines while the agent reports attempts and
    # failures on stderr, which the test reads slowly; with one_pipe the
    # workers' stdout shares that pipe (2>&1). Every line must come out
    # whole: a worker's line exactly as written, the agent's own lines on
    # their own.
    body = "y" * 3000
    script = worker(tmp_path, (
        f"line = '{{}} {{:05d}} ' + {body!r}\n"
        "for i in range(300):\n"
        "    sys.stderr.write(line.format(rank, i) + '\\n')\n"
        "    sys.stdout.write(line.format(rank, i) + '\\n')\n"
        "sys.exit(1)\n"))
    run = PipedRun(hpr, ["--standalone", "--nproc-per-node", "2",
                         "--no-python", "--tee", "3", "--max-restarts", "3",
                         script], one_pipe=one_pipe)
    try:
        chunks = []

        def slow_reader():
            while True:
                data = os.read(run.err_r, 4096)
                if not data:
                    break
                chunks.append(data)
                time.sleep(0.0005)

        t = threading.Thread(target=slow_reader, daemon=True)
        t.start()
        rc = run.popen.wait(60)
        t.join(30)
    finally:
        run.close()
    assert rc == 1
    text = b"".join(chunks).decode(errors="replace")
    # A worker stopped with its group may end on part of a line, written
    # as a line of its own: shorter, never mixed.
    worker_line = re.compile(r"^\[default([01])\]:([01]) (\d{5}) y{1,3000}$")
    agent_line = re.compile(r"^hyperpodrun\[\d+\]: (error|warning|info): ")
    seen = 0
    for line in text.splitlines():
        if line.startswith("[default"):
            m = worker_line.match(line)
            assert m and m.group(1) == m.group(2), (line[:80], line[-80:])
            seen += 1
        elif "hyperpodrun[" in line:
            assert agent_line.match(line), line[:200]
        else:
            # Nothing else holds part of a worker's line; no line is empty.
            assert line.strip() and "yyyy" not in line, line[:200]

    assert seen > 0, text[-2000:]


def test_the_last_drop_marker_reaches_the_console_at_the_end(hpr, tmp_path):
    # The workers flood stdout while nobody reads it, then end. The
    # console drops what it cannot hold and promises a marker line saying
    # how many: no later line brings it out, so the end of the run must.
    # What the console shows plus what the markers count is every line.
    count = 40000
    script = worker(tmp_path, (
        f"for i in range({count}):\n"
        "    print('flood', rank, i, 'z' * 100)\n"
        "sys.stdout.flush()\n"
        f"open({str(tmp_path)!r} + '/done.' + rank, 'w').close()\n"))
    run = PipedRun(hpr, ["--standalone", "--nproc-per-node", "2",
                         "--no-python", "--tee", "3", script],
                   stdout_pipe=True, stderr_pipe=False)
    try:
        deadline_poll(lambda: all((tmp_path / f"done.{r}").exists()
                                  for r in range(2)),
                      what="the workers' floods")
        run.read_all("out")
        rc = run.finish()
    finally:
        run.close()
    assert rc == 0
    lines = run.collected["out"].decode().splitlines()
    shown = sum(1 for l in lines if l.startswith("[default"))
    dropped = sum(int(m.group(1)) for m in
                  (re.match(r"^\[hyperpodrun\]: (\d+) console lines dropped",
                            l) for l in lines) if m)
    assert shown < 2 * count, "the console kept up; nothing was tested"
    assert shown + dropped == 2 * count, (shown, dropped)


PATHOLOGICAL = {
    "name": "Backtracking",
    "logPattern": r"(.*a){12}$",
    "expectedStartCutOffInSeconds": 600,
    "expectedRecurringFrequencyInSeconds": 600,
}


def test_a_backtracking_rule_does_not_slow_the_workers(hpr, tmp_path):
    # Each line costs the rule milliseconds (up to the PCRE2 match limit).
    # Rules are advisory: the worker writes at full speed, the file and
    # the console get every line, the lines the rule never saw are
    # counted and reported, and another rule's deadline still fires
    # while the backtracking one is behind.
    hang = {"name": "Progress", "logPattern": r"^progress \d+$",
            "expectedStartCutOffInSeconds": 2,
            "expectedRecurringFrequencyInSeconds": 2}
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([PATHOLOGICAL, hang]))
    count = 1500
    script = worker(tmp_path, (
        "body = (('x' * 6 + 'a') * 430)[:2990] + 'x'\n"
        "out = sys.stdout.buffer\n"
        f"for i in range({count}):\n"
        "    out.write(('%06d %s\\n' % (i, body)).encode())\n"
        "out.flush()\n"
        f"open({str(tmp_path)!r} + '/flooded', 'w').close()\n"
        "time.sleep(60)\n"))
    r = hpr.run(["--standalone", "--nproc-per-node", "1", "--no-python",
                 "--tee", "3", "--log-monitoring-config", rules, script],
                timeout=60)
    # The hang rule stopped the job, after the whole flood was written.
    assert r.rc == 124, r.describe()
    assert "LogHang_Progress" in r.err, r.describe()
    assert (tmp_path / "flooded").exists(), r.describe()
    body = (("x" * 6 + "a") * 430)[:2990] + "x"
    expected = [f"{i:06d} {body}" for i in range(count)]
    log = hpr.only_train_dir() / "attempt_0" / "0" / "stdout.log"
    assert log.read_text().splitlines() == expected
    shown = [l.split(":", 1)[1] for l in r.out.splitlines()
             if l.startswith("[default0]:")]
    assert shown == expected
    m = re.search(r"log rules fell behind the output: (\d+) monitored lines? "
                  r"not evaluated", r.err)
    assert m and int(m.group(1)) > 0, r.describe()
    assert re.search(r"given up at the PCRE2 match or depth limit", r.err), \
        r.describe()


def test_metrics_count_what_the_rules_missed_and_the_files_lost(
        hpr, tmp_path, small_disk):
    # Operator mode, the log directory on a small disk that fills, and the
    # backtracking rule. Once every line is read, /metrics accounts for
    # each one: evaluated (each hitting the PCRE2 limit) or skipped, and
    # the bytes the log file misses.
    from test_operator import Agent

    count = 1500
    (small_disk / "filler").write_bytes(b"\0" * (384 * 1024))
    script = worker(tmp_path, (
        "body = (('x' * 6 + 'a') * 430)[:2990] + 'x'\n"
        "out = sys.stdout.buffer\n"
        f"for i in range({count}):\n"
        "    out.write(('%06d %s\\n' % (i, body)).encode())\n"
        "out.flush()\n"
        f"while not os.path.exists({str(tmp_path / 'finish')!r}):\n"
        "    time.sleep(0.01)\n"))
    a = Agent(hpr, tmp_path, nproc=1, script=script,
              args=["--no-python", "--log-dir", small_disk / "logs"])
    a.start(log_monitoring_configuration=[PATHOLOGICAL])
    a.wait_status("running")

    def value(text, name, labels=""):
        m = re.search(rf"^{name}{re.escape(labels)} (\d+)$", text, re.M)
        assert m, (name, text)
        return int(m.group(1))

    def scrape():
        code, _, data = a.request("GET", "/metrics")
        assert code == 200
        text = data.decode()
        lines = value(text, "hyperpodrun_stream_lines_total",
                      '{local_rank="0",stream="stdout"}')
        return text if lines == count else None

    text = deadline_poll(scrape, 30, what="every line read")
    skipped = value(text, "hyperpodrun_rule_skipped_lines_total")
    limits = value(text, "hyperpodrun_rule_limit_hits_total",
                   '{local_rank="0",rule="Backtracking"}')
    assert skipped > 0 and limits > 0
    assert skipped + limits == count, (skipped, limits)
    lost = value(text, "hyperpodrun_log_file_lost_bytes_total",
                 '{local_rank="0",stream="stdout"}')
    log = next((small_disk / "logs").glob("*/attempt_0/0/stdout.log"))
    line_bytes = len("000000 ") + 2991 + 1
    assert lost > 0 and lost + log.stat().st_size == count * line_bytes
    (tmp_path / "finish").write_text("")
    a.wait_status("completed")
    assert a.shutdown().rc == 0
