# SPDX-License-Identifier: Apache-2.0
"""Per-rank log files, their layout, and the console copy of what they hold."""

import os
import re

import pytest

from conftest import (console_lines, helper, read_json, worker_lines,
                      write_exec)

MARKER = b" [hyperpodrun: line longer than 65536 bytes, continued on the next line]"
LINE_MAX = 65536
TERMINATOR = re.compile(rb"\r\n|\r|\n")


def expected_console(data):
    """What the console shows for a stream: one entry per line, \\r, \\n and
    \\r\\n each ending a line, a final partial line included."""
    lines = TERMINATOR.split(data)
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def attempt_files(run_dir, attempt=0):
    """{relative path: bytes} of every file under attempt_<N>."""
    base = run_dir / f"attempt_{attempt}"
    out = {}
    for root, _, files in os.walk(base):
        for name in files:
            p = os.path.join(root, name)
            out[os.path.relpath(p, base)] = open(p, "rb").read()
    return out


def test_binary_bytes_identical(hpr, tmp_path):
    out = tmp_path / "expect"
    out.mkdir()
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                 helper("binary_writer.py"), out, 200_000])
    assert r.rc == 0, r.describe()
    run_dir = hpr.only_train_dir()
    files = attempt_files(run_dir)
    assert sorted(files) == ["0/stderr.log", "0/stdout.log",
                             "1/stderr.log", "1/stdout.log"]
    for rank in range(2):
        for name in ("stdout", "stderr"):
            want = (out / f"expect_{rank}_{name}.bin").read_bytes()
            got = files[f"{rank}/{name}.log"]
            assert b"\0" in want and b"\xff" in want
            assert got == want, f"rank {rank} {name}.log differs " \
                f"(len {len(got)} vs {len(want)})"

    # The console: every line prefixed, in order, nothing split or merged.
    for console, name in ((r.stdout, "stdout"), (r.stderr, "stderr")):
        by_rank = worker_lines(console)
        for rank in range(2):
            want = expected_console(
                (out / f"expect_{rank}_{name}.bin").read_bytes())
            got = by_rank.get(rank, [])
            assert len(got) == len(want), f"rank {rank} {name}: line count"
            for i, (g, w) in enumerate(zip(got, want)):
                assert g == w, f"rank {rank} {name} line {i}: {g!r} != {w!r}"
        if name == "stdout":
            assert None not in by_rank, by_rank.get(None)[:5]
        else:
            stray = [l for l in by_rank.get(None, [])
                     if not l.startswith(b"hyperpodrun[")]
            assert stray == []


def test_ten_megabytes_without_newline(hpr, tmp_path):
    size = 10_000_000
    r = hpr.run(["--standalone", "--tee", "1", helper("big_line.py"), size],
                timeout=60)
    assert r.rc == 0, r.describe()
    got = (hpr.only_train_dir() / "attempt_0" / "0" / "stdout.log").read_bytes()
    import big_line  # noqa: E402  (helpers/ is importable via sys.path below)
    assert got == big_line.pattern(size)

    lines = console_lines(r.stdout)
    prefix = b"[default0]:"
    assert all(l.startswith(prefix) for l in lines), \
        [l[:80] for l in lines if not l.startswith(prefix)][:3]
    pieces = [l[len(prefix):] for l in lines]
    full, rest = divmod(size, LINE_MAX)
    assert len(pieces) == full + 1
    for i, p in enumerate(pieces[:-1]):
        assert p.endswith(MARKER), f"piece {i} has no continuation marker"
        assert len(p) == LINE_MAX + len(MARKER), f"piece {i}: {len(p)} bytes"
    assert not pieces[-1].endswith(MARKER)
    assert len(pieces[-1]) == rest
    joined = b"".join(p[:-len(MARKER)] for p in pieces[:-1]) + pieces[-1]
    assert joined == got


@pytest.mark.parametrize("length,trailer,npieces", [
    (LINE_MAX, "\\n", 1),      # exactly the limit: a normal line
    (LINE_MAX + 1, "\\n", 2),  # one byte over: cut once
    (LINE_MAX, "", 1),         # exactly the limit, final partial line
    (2 * LINE_MAX, "\\r", 2),
])
def test_line_limit_edges(hpr, length, trailer, npieces):
    r = hpr.run(["--standalone", "--tee", "1", helper("big_line.py"), length,
                 trailer])
    assert r.rc == 0, r.describe()
    lines = console_lines(r.stdout)
    assert len(lines) == npieces, [len(l) for l in lines]
    for l in lines[:-1]:
        assert l.endswith(MARKER)
    assert not lines[-1].endswith(MARKER)
    assert len(lines[-1]) == len(b"[default0]:") + length - (npieces - 1) * LINE_MAX


def test_partial_final_line_and_cr(hpr, tmp_path):
    script = write_exec(tmp_path / "w.py", r"""#!/usr/bin/python3
import os
os.write(1, b"one\rtwo\r\nthree\n\nlast words")
os.write(2, b"err one\r")
""")
    r = hpr.run(["--standalone", "--tee", "3", "--no-python", script])
    assert r.rc == 0, r.describe()
    d = hpr.only_train_dir() / "attempt_0" / "0"
    assert (d / "stdout.log").read_bytes() == b"one\rtwo\r\nthree\n\nlast words"
    assert (d / "stderr.log").read_bytes() == b"err one\r"
    assert r.stdout == (b"[default0]:one\n[default0]:two\n[default0]:three\n"
                        b"[default0]:\n[default0]:last words\n")
    assert b"[default0]:err one\n" in r.stderr
    assert b"[default0]:err one\n[default0]:" not in r.stderr


def test_crlf_split_across_writes(hpr, tmp_path):
    """A \\r at the end of one write and \\n at the start of the next are one
    line end, even when the console has already printed the line."""
    console = tmp_path / "console0" / "console.out"
    script = write_exec(tmp_path / "w.py", rf"""#!/usr/bin/python3
import os, time
os.write(1, b"alpha\r")
end = time.monotonic() + 20
while b"alpha" not in open({str(console)!r}, "rb").read():
    if time.monotonic() > end:
        os._exit(3)
    time.sleep(0.01)
os.write(1, b"\nbeta\n")
""")
    r = hpr.run(["--standalone", "--tee", "1", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert r.stdout == b"[default0]:alpha\n[default0]:beta\n"
    assert (hpr.only_train_dir() / "attempt_0" / "0" / "stdout.log").read_bytes() \
        == b"alpha\r\nbeta\n"


def test_worker_closes_stdout_and_keeps_running(hpr, tmp_path):
    console = tmp_path / "console0" / "console.out"
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                 helper("close_stdout.py"), console, 200])
    assert r.rc == 0, r.describe()
    run_dir = hpr.only_train_dir()
    for rank in range(2):
        d = run_dir / "attempt_0" / str(rank)
        assert (d / "stdout.log").read_bytes() == f"before close {rank}\n".encode()
        want = "".join(f"after close {rank} {i}\n" for i in range(200)).encode()
        assert (d / "stderr.log").read_bytes() == want
        assert worker_lines(r.stdout)[rank] == [f"before close {rank}".encode()]
        assert worker_lines(r.stderr)[rank] == \
            [f"after close {rank} {i}".encode() for i in range(200)]


def test_layout_and_per_rank_redirects(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh",
                        "#!/bin/sh\necho \"out $LOCAL_RANK\"\necho \"err $LOCAL_RANK\" >&2\n")
    r = hpr.run(["--rdzv-backend", "static", "--rdzv-id", "myjob",
                 "--nproc-per-node", "3", "--redirects", "0:3,1:1",
                 "--no-python", script])
    assert r.rc == 0, r.describe()
    # <log-dir>/<run_id>_<8 chars [a-z0-9_]>/attempt_0/<local_rank>/...
    names = [d.name for d in hpr.run_dirs()]
    assert len(names) == 1 and re.fullmatch(r"myjob_[a-z0-9_]{8}", names[0]), names
    run_dir = hpr.train_dir("myjob")
    assert [p.name for p in run_dir.iterdir()] == ["attempt_0"]
    files = attempt_files(run_dir)
    assert files == {"0/stdout.log": b"out 0\n", "0/stderr.log": b"err 0\n",
                     "1/stdout.log": b"out 1\n"}
    # Redirected streams are not on the console; the others are, unprefixed.
    assert sorted(console_lines(r.stdout)) == [b"out 2"]
    assert sorted(own_free(r.stderr)) == [b"err 1", b"err 2"]


def own_free(data):
    return [l for l in console_lines(data) if not l.startswith(b"hyperpodrun[")
            and not l.startswith(b"hyperpodrun:")]


def test_default_log_dir_in_tmpdir(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", "#!/bin/sh\necho hello\n")
    r = hpr.run(["--standalone", "-t", "1", "--no-python", script],
                log_dir=False)
    assert r.rc == 0, r.describe()
    tops = list(hpr.tmpdir.iterdir())
    assert len(tops) == 1 and re.fullmatch(r"torchelastic_[A-Za-z0-9_]{8}",
                                           tops[0].name), tops
    runs = list(tops[0].iterdir())
    assert len(runs) == 1
    assert (runs[0] / "attempt_0" / "0" / "stdout.log").read_bytes() == b"hello\n"


def test_log_dir_created(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", "#!/bin/sh\necho hello\n")
    nested = tmp_path / "a" / "b" / "c"
    r = hpr.run(["--log-dir", nested, "--rdzv-backend", "static", "-r", "1",
                 "--no-python", script], log_dir=False)
    assert r.rc == 0, r.describe()
    runs = list(nested.iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("none_")
    assert (runs[0] / "attempt_0" / "0" / "stdout.log").read_bytes() == b"hello\n"


def test_log_dir_dev_null(hpr, tmp_path):
    out = tmp_path / "dump"
    out.mkdir()
    before = set(os.listdir("/dev"))
    r = hpr.run(["--log-dir", "/dev/null", "--standalone", "--nproc-per-node",
                 "2", "--tee", "3", helper("dump_env.py"), out], log_dir=False)
    assert r.rc == 0, r.describe()
    # No files: not in $TMPDIR, not next to /dev/null.
    assert list(hpr.tmpdir.iterdir()) == []
    assert set(os.listdir("/dev")) == before
    assert os.path.exists("/dev/null") and not os.path.isdir("/dev/null")
    for i in range(2):
        rec = read_json(out / f"env_{i}.json")
        assert rec["env"]["TORCHELASTIC_ERROR_FILE"] == ""
    # Tee'd streams still reach the console, prefixed.
    by_rank = worker_lines(r.stdout)
    for i in range(2):
        assert by_rank[i] == [f"dumped {out}/env_{i}.json".encode()]


def test_error_json_written_by_worker_stays(hpr, tmp_path):
    script = write_exec(tmp_path / "w.py", r"""#!/usr/bin/python3
import os
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
    f.write("{}")
""")
    r = hpr.run(["--standalone", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert attempt_files(hpr.only_train_dir()) == {"0/error.json": b"{}"}


@pytest.fixture(autouse=True)
def _helpers_importable(monkeypatch):
    from conftest import HELPERS
    monkeypatch.syspath_prepend(str(HELPERS))
