# SPDX-License-Identifier: Apache-2.0
"""The console: prefixed, line-atomic, filtered copies of the workers' output."""

import os
import re
import socket

import pytest

from conftest import (HELPERS, console_lines, helper, worker_lines,
                      write_exec)


@pytest.fixture(autouse=True)
def _helpers_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))


def not_own(lines):
    return [l for l in lines if not re.match(rb"^hyperpodrun(\[\d+\])?:", l)]


ECHO = ("#!/bin/sh\n"
        "echo \"out $LOCAL_RANK\"\n"
        "echo \"err $LOCAL_RANK\" >&2\n")


def test_eight_ranks_concurrent_chunks(hpr):
    import chunky_lines
    n = 1500
    r = hpr.run(["--standalone", "--nproc-per-node", "8", "--tee", "3",
                 helper("chunky_lines.py"), n], timeout=60)
    assert r.rc == 0, r.describe()
    run_dir = hpr.only_train_dir()
    for console, stream in ((r.stdout, "out"), (r.stderr, "err")):
        by_rank = worker_lines(console)
        stray = by_rank.pop(None, [])
        if stream == "out":
            assert stray == [], stray[:5]
        else:
            assert not_own(stray) == [], not_own(stray)[:5]
        assert sorted(by_rank) == list(range(8))
        for rank in range(8):
            want = chunky_lines.lines(rank, stream, n)
            got = by_rank[rank]
            for i, (g, w) in enumerate(zip(got, want)):
                assert g == w, f"rank {rank} std{stream} line {i}: {g[:120]!r}"
            assert len(got) == len(want), f"rank {rank} std{stream}: lines lost"
            name = "stdout.log" if stream == "out" else "stderr.log"
            assert (run_dir / "attempt_0" / str(rank) / name).read_bytes() == \
                b"".join(l + b"\n" for l in want)


STEADY = """\
import os, sys, time
rank = int(os.environ["LOCAL_RANK"])
for batch in range(40):
    for fd, name in ((1, "out"), (2, "err")):
        data = "".join(f"r{rank} {name} {batch:03d} {i:02d} " + "x" * (batch * 7 % 90) + "\\n"
                       for i in range(25))
        while data:
            data = data[os.write(fd, data.encode()):]
    # The pace of a training loop: small batches a few ms apart, which the
    # agent reads paced, several ranks per wakeup.
    time.sleep(0.003)
os.write(1, f"r{rank} final partial line".encode())
"""


def steady_lines(rank, name):
    return [f"r{rank} {name} {b:03d} {i:02d} ".encode() + b"x" * (b * 7 % 90)
            for b in range(40) for i in range(25)]


def test_steady_ranks_keep_every_line_whole_and_in_order(hpr, tmp_path):
    script = tmp_path / "steady.py"
    script.write_text(STEADY)
    r = hpr.run(["--standalone", "--nproc-per-node", "8", "--tee", "3",
                 script], timeout=60)
    assert r.rc == 0, r.describe()
    run_dir = hpr.only_train_dir()
    for console, name in ((r.stdout, "out"), (r.stderr, "err")):
        by_rank = worker_lines(console)
        stray = by_rank.pop(None, [])
        assert not_own(stray) == [], not_own(stray)[:5]
        assert sorted(by_rank) == list(range(8))
        for rank in range(8):
            want = steady_lines(rank, name)
            tail = [f"r{rank} final partial line".encode()] if name == "out" else []
            assert by_rank[rank] == want + tail, f"rank {rank} std{name}"
            data = (run_dir / "attempt_0" / str(rank) / f"std{name}.log").read_bytes()
            assert data == b"".join(l + b"\n" for l in want) + b"".join(tail)


def test_local_ranks_filter_tee(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "4", "--tee", "3",
                 "--local-ranks-filter", "0,3", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert sorted(console_lines(r.stdout)) == [b"[default0]:out 0",
                                               b"[default3]:out 3"]
    assert sorted(not_own(console_lines(r.stderr))) == [b"[default0]:err 0",
                                                        b"[default3]:err 3"]
    run_dir = hpr.only_train_dir()
    for rank in range(4):
        d = run_dir / "attempt_0" / str(rank)
        assert (d / "stdout.log").read_bytes() == f"out {rank}\n".encode()
        assert (d / "stderr.log").read_bytes() == f"err {rank}\n".encode()


def test_local_ranks_filter_without_tee(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "4",
                 "--local-ranks-filter", "0,3", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert sorted(console_lines(r.stdout)) == [b"out 0", b"out 3"]
    assert sorted(not_own(console_lines(r.stderr))) == [b"err 0", b"err 3"]


def test_redirect_only(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--redirects", "3",
                 "--no-python", script])
    assert r.rc == 0, r.describe()
    assert r.stdout == b""
    assert not_own(console_lines(r.stderr)) == []
    run_dir = hpr.only_train_dir()
    for rank in range(2):
        d = run_dir / "attempt_0" / str(rank)
        assert (d / "stdout.log").read_bytes() == f"out {rank}\n".encode()
        assert (d / "stderr.log").read_bytes() == f"err {rank}\n".encode()


def test_redirect_stdout_tee_stderr(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "-r", "1", "-t", "2",
                 "--no-python", script])
    assert r.rc == 0, r.describe()
    assert r.stdout == b""
    assert sorted(not_own(console_lines(r.stderr))) == [b"[default0]:err 0",
                                                        b"[default1]:err 1"]
    run_dir = hpr.only_train_dir()
    for rank in range(2):
        d = run_dir / "attempt_0" / str(rank)
        assert (d / "stdout.log").read_bytes() == f"out {rank}\n".encode()
        assert (d / "stderr.log").read_bytes() == f"err {rank}\n".encode()


def test_no_redirects_plain_console(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert sorted(console_lines(r.stdout)) == [b"out 0", b"out 1"]
    assert sorted(not_own(console_lines(r.stderr))) == [b"err 0", b"err 1"]
    # Nothing redirected: no log files.
    run_dir = hpr.only_train_dir()
    files = [f for _, _, fs in os.walk(run_dir) for f in fs]
    assert files == []


TEMPLATE = ("<${role_name}|${rank}|${local_rank}|${group_rank}|${restart_count}"
            "|${hostname}|${pid}> ")


def pid_printer(tmp_path):
    return write_exec(tmp_path / "w.py",
                      "#!/usr/bin/python3\nimport os\n"
                      "print('pid', os.getpid(), flush=True)\n")


def check_template(r, role, node_rank, nproc):
    host = socket.gethostname()
    lines = console_lines(r.stdout)
    assert len(lines) == nproc, lines
    seen = set()
    for line in lines:
        m = re.fullmatch(rb"<([^|]*)\|(\d+)\|(\d+)\|(\d+)\|(\d+)\|([^|]*)\|(\d+)> pid (\d+)",
                         line)
        assert m, line
        g = [x.decode() for x in m.groups()]
        local = int(g[2])
        assert g[0] == role
        assert int(g[1]) == node_rank * nproc + local
        assert int(g[3]) == node_rank
        assert g[4] == "0"
        assert g[5] == host
        assert g[6] == g[7], "${pid} is the worker's pid"
        seen.add(local)
    assert seen == set(range(nproc))


def test_prefix_template_flag(hpr, tmp_path):
    script = pid_printer(tmp_path)
    r = hpr.run(["--rdzv-backend", "static", "--nnodes", "2", "--node-rank", "1",
                 "--nproc-per-node", "2", "--role", "trainer", "-t", "1",
                 "--log-line-prefix-template", TEMPLATE, "--no-python", script])
    assert r.rc == 0, r.describe()
    check_template(r, "trainer", 1, 2)


def test_prefix_template_env(hpr, tmp_path):
    script = pid_printer(tmp_path)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "-t", "1",
                 "--no-python", script],
                env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": TEMPLATE})
    assert r.rc == 0, r.describe()
    check_template(r, "default", 0, 2)


def test_role_in_default_prefix(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--role", "gen",
                 "-t", "1", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert sorted(console_lines(r.stdout)) == [b"[gen0]:out 0", b"[gen1]:out 1"]


def test_restart_count_in_prefix(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh",
                        "#!/bin/sh\necho \"attempt $TORCHELASTIC_RESTART_COUNT\"\n"
                        "[ \"$TORCHELASTIC_RESTART_COUNT\" -ge 1 ]\n")
    r = hpr.run(["--standalone", "--max-restarts", "2", "-t", "1",
                 "--log-line-prefix-template", "[${restart_count}]",
                 "--no-python", script])
    assert r.rc == 0, r.describe()
    assert console_lines(r.stdout) == [b"[0]attempt 0", b"[1]attempt 1"]


def test_many_ranks(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "32", "--tee", "3",
                 "--no-python", script])
    assert r.rc == 0, r.describe()
    assert sorted(console_lines(r.stdout)) == sorted(
        f"[default{i}]:out {i}".encode() for i in range(32))
    assert sorted(not_own(console_lines(r.stderr))) == sorted(
        f"[default{i}]:err {i}".encode() for i in range(32))


def test_own_messages_format(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", "#!/bin/sh\n[ $LOCAL_RANK = 0 ] || exit 3\n")
    proc = hpr.start(["--standalone", "--nproc-per-node", "2", "--no-python",
                      script])
    r = proc.wait(20)
    assert r.rc == 3, r.describe()
    own = [l for l in r.err.splitlines() if l.startswith("hyperpodrun")]
    assert own, r.describe()
    for line in own:
        assert re.match(rf"^hyperpodrun\[{proc.pid}\]: (debug|info|warning|error): \S",
                        line), line


def test_console_reader_gone(hpr, tmp_path):
    """hyperpodrun's stdout is a pipe nobody reads any more (| head -1):
    no SIGPIPE death, workers unaffected, files complete."""
    import subprocess
    script = write_exec(tmp_path / "w.py", "#!/usr/bin/python3\n"
                        "import os\n"
                        "for i in range(20000):\n"
                        "    os.write(1, b'line %d\\n' % i)\n")
    proc = hpr.start(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                      "--no-python", script], stdout=subprocess.PIPE)
    proc.popen.stdout.close()
    r = proc.wait(30)
    assert r.rc == 0, r.describe()
    want = b"".join(b"line %d\n" % i for i in range(20000))
    for rank in range(2):
        assert (hpr.only_train_dir() / "attempt_0" / str(rank) / "stdout.log") \
            .read_bytes() == want


def test_console_blocked_does_not_stall_workers(hpr, tmp_path):
    """hyperpodrun's stdout is a pipe that is never read: the workers still
    run to completion, the files get every byte, and hyperpodrun exits."""
    import subprocess
    done = tmp_path / "done"
    script = write_exec(tmp_path / "w.py", "#!/usr/bin/python3\n"
                        "import os\n"
                        "line = b'x' * 199 + b'\\n'\n"
                        "for i in range(100000):\n"   # 20 MB per rank
                        "    os.write(1, line)\n"
                        f"open('{done}_' + os.environ['LOCAL_RANK'], 'w').close()\n")
    proc = hpr.start(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                      "--no-python", script], stdout=subprocess.PIPE)
    try:
        # The workers finish although nobody reads the console.
        from conftest import wait_for_files
        wait_for_files([f"{done}_0", f"{done}_1"], timeout=30)
        try:
            proc.popen.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("hyperpodrun did not exit while its stdout was blocked")
    finally:
        proc.popen.stdout.close()
    r = proc.wait(10)
    assert r.rc == 0, r.describe()
    for rank in range(2):
        size = (hpr.only_train_dir() / "attempt_0" / str(rank) / "stdout.log") \
            .stat().st_size
        assert size == 200 * 100000
    assert "dropped" in r.err, "lost console lines are reported"


def test_per_rank_tee_map(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "--nproc-per-node", "3", "--tee", "0:1,1:2",
                 "--no-python", script])
    assert r.rc == 0, r.describe()
    assert sorted(console_lines(r.stdout)) == [b"[default0]:out 0", b"out 1",
                                               b"out 2"]
    assert sorted(not_own(console_lines(r.stderr))) == [b"[default1]:err 1",
                                                        b"err 0", b"err 2"]
    run_dir = hpr.only_train_dir() / "attempt_0"
    assert (run_dir / "0" / "stdout.log").read_bytes() == b"out 0\n"
    assert (run_dir / "1" / "stderr.log").read_bytes() == b"err 1\n"
    assert not (run_dir / "0" / "stderr.log").exists()
    assert not (run_dir / "1" / "stdout.log").exists()
    assert not (run_dir / "2" / "stdout.log").exists()


def test_template_string_template_syntax(hpr, tmp_path):
    """Python string.Template syntax, as torch uses: $name, ${name}, $$."""
    script = write_exec(tmp_path / "w.sh", ECHO)
    r = hpr.run(["--standalone", "-t", "1", "--log-line-prefix-template",
                 "$$|$local_rank|${role_name}>", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert console_lines(r.stdout) == [b"$|0|default>out 0"]


def test_pet_console_options(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", ECHO)
    logs = tmp_path / "petlogs"
    r = hpr.run(["--standalone", "--nproc-per-node", "2", script],
                env={"PET_TEE": "3", "PET_LOG_DIR": logs, "PET_NO_PYTHON": "1",
                     "PET_ROLE": "pet"}, log_dir=False)
    assert r.rc == 0, r.describe()
    assert sorted(console_lines(r.stdout)) == [b"[pet0]:out 0", b"[pet1]:out 1"]
    runs = list(logs.iterdir())
    assert len(runs) == 1
    assert (runs[0] / "attempt_0" / "1" / "stderr.log").read_bytes() == b"err 1\n"


# What a worker sees on fd 1 and 2: is it a pipe, and how large.
PIPE_PROBE = ("import fcntl, os, stat\n"
              "for fd in (1, 2):\n"
              "    st = os.fstat(fd)\n"
              "    print(fd, stat.S_ISFIFO(st.st_mode),"
              " fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))\n")


# Runs hyperpodrun without the capabilities that lift Linux's limits on a
# user's pipe memory, as an unprivileged user would.
UNPRIVILEGED = ("setpriv", "--inh-caps=-sys_resource,-sys_admin",
                "--bounding-set=-sys_resource,-sys_admin")


@pytest.mark.parametrize("ranks, privileged, size", [
    (2, False, 256 * 1024), (40, False, 128 * 1024), (40, True, 256 * 1024)])
def test_workers_write_into_pipes_sized_for_bursts(hpr, tmp_path, ranks,
                                                   privileged, size):
    # Pipes, not socket pairs (a socket costs a buffer per write), with
    # room for a burst: within 16 MiB for the group when the user's pipe
    # limits apply to hyperpodrun, 256 KiB each when they do not.
    if privileged and os.geteuid() != 0:
        pytest.skip("needs root: CAP_SYS_RESOURCE lifts the pipe limits")
    probe = tmp_path / "probe.py"
    probe.write_text(PIPE_PROBE)
    r = hpr.run(["--standalone", "--nproc-per-node", str(ranks), "--tee", "3",
                 "--no-python", "python3", "-S", str(probe)],
                wrapper=() if privileged else UNPRIVILEGED)
    assert r.rc == 0, r.describe()
    want = sorted(f"[default{i}]:{fd} True {size}".encode()
                  for i in range(ranks) for fd in (1, 2))
    assert sorted(not_own(console_lines(r.stdout))) == want
