# SPDX-License-Identifier: Apache-2.0
"""Worker failures: the summary, the exit status, and whole-group restarts."""

import re

import pytest

from conftest import (console_lines, helper, pid_alive, worker_lines,
                      write_exec)


def run_fail(hpr, tmp_path, nproc, fail_rank, how, extra=(), nlines=20):
    out = tmp_path / "out"
    out.mkdir()
    script = helper("fail_worker.py")
    r = hpr.run(["--standalone", "--nproc-per-node", nproc, "--tee", "3", *extra,
                 script, out, fail_rank, how, nlines], timeout=30)
    pids = {i: int((out / f"pid_{i}").read_text()) for i in range(nproc)
            if (out / f"pid_{i}").exists()}
    assert sorted(pids) == list(range(nproc)), r.describe()
    return r, pids, script


def summary(r):
    """The root-cause block of the failure summary, as text."""
    err = r.err
    i = err.find("Root Cause (first observed failure):")
    assert i >= 0, r.describe()
    return err[i:]


def assert_title(r, script):
    """The summary title names the script (exactly as given: see
    test_summary_title_is_script_as_given)."""
    script = str(script)
    names = {re.escape(script), re.escape(script.rsplit("/", 1)[-1])}
    assert re.search(rf"(?m)^({'|'.join(names)}) FAILED$", r.err), r.describe()


def test_summary_title_is_script_as_given(hpr, tmp_path):
    """torchrun titles the summary with the entry point as given on the
    command line (torch.distributed.launcher.api._get_entrypoint_name)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    write_exec(sub / "w.sh", "#!/bin/sh\nexit 3\n")
    r = hpr.run(["--standalone", "--no-python", "sub/w.sh"])
    assert r.rc == 3, r.describe()
    assert re.search(r"(?m)^sub/w\.sh FAILED$", r.err), r.err


def test_crash_summary_and_exit_code(hpr, tmp_path):
    r, pids, script = run_fail(hpr, tmp_path, 3, 1, "exit:7")
    assert r.rc == 7, r.describe()
    assert_title(r, script)
    root = summary(r)
    assert re.search(r"(?m)^\s*rank\s*: 1 \(local_rank: 1\)$", root), root
    assert re.search(rf"(?m)^\s*exitcode\s*: 7 \(pid: {pids[1]}\)$", root), root
    assert re.search(r"(?m)^\s*error_file\s*: <N/A>$", root), root
    # The survivors were stopped (SIGKILL by default), not waited for.
    assert r.elapsed < 15
    for pid in pids.values():
        assert not pid_alive(pid)


def test_last_lines_before_crash(hpr, tmp_path):
    r, pids, _ = run_fail(hpr, tmp_path, 2, 0, "exit:3", nlines=300)
    assert r.rc == 3, r.describe()
    d = hpr.only_train_dir() / "attempt_0" / "0"
    want_out = "".join(f"rank 0 stdout line {i}\n" for i in range(300)) + \
        "last words without newline"
    want_err = "".join(f"rank 0 stderr line {i}\n" for i in range(300)) + \
        "last error words"
    assert (d / "stdout.log").read_text() == want_out
    assert (d / "stderr.log").read_text() == want_err
    assert worker_lines(r.stdout)[0] == [l.encode() for l in want_out.split("\n")]
    err0 = worker_lines(r.stderr)[0]
    assert err0 == [l.encode() for l in want_err.split("\n")]
    # Console order: the worker's last words come before the summary.
    assert r.stderr.index(b"[default0]:last error words\n") < \
        r.stderr.index(b"Root Cause (first observed failure):")


@pytest.mark.parametrize("signum,name", [(11, "SIGSEGV"), (9, "SIGKILL"),
                                         (6, "SIGABRT")])
def test_signal_death(hpr, tmp_path, signum, name):
    r, pids, _ = run_fail(hpr, tmp_path, 2, 0, f"signal:{signum}")
    assert r.rc == 128 + signum, r.describe()
    root = summary(r)
    assert re.search(r"(?m)^\s*rank\s*: 0 \(local_rank: 0\)$", root), root
    assert re.search(rf"(?m)^\s*exitcode\s*: -{signum} \(pid: {pids[0]}\)$", root), root
    assert f"Signal {signum} ({name}) received by PID {pids[0]}" in root, root


def test_error_json_traceback(hpr, tmp_path):
    r, pids, _ = run_fail(hpr, tmp_path, 2, 1, "errorjson:1")
    assert r.rc == 1, r.describe()
    root = summary(r)
    err_file = hpr.only_train_dir() / "attempt_0" / "1" / "error.json"
    assert err_file.exists()
    assert re.search(rf"(?m)^\s*error_file\s*: {re.escape(str(err_file))}$", root), root
    assert re.search(rf"(?m)^\s*exitcode\s*: 1 \(pid: {pids[1]}\)$", root), root
    # The py_callstack, line by line.
    for line in ('File "train.py", line 7, in <module>',
                 "ValueError: the marker 5f3c is bad"):
        assert line in root, root
    assert "traceback" in root
    assert "To enable traceback" not in root


def test_error_json_plain_message(hpr, tmp_path):
    r, pids, _ = run_fail(hpr, tmp_path, 1, 0, "errorplain:4")
    assert r.rc == 4, r.describe()
    assert "plain message 9a1b" in summary(r)


@pytest.mark.parametrize("code", [1, 2, 42, 255])
def test_exit_code_table(hpr, tmp_path, code):
    script = write_exec(tmp_path / "w.sh", f"#!/bin/sh\necho bye\nexit {code}\n")
    r = hpr.run(["--standalone", "--no-python", script])
    assert r.rc == code, r.describe()
    root = summary(r)
    assert re.search(rf"(?m)^\s*exitcode\s*: {code} \(pid: \d+\)$", root), root
    assert_title(r, script)


def test_success_no_summary(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", "#!/bin/sh\nexit 0\n")
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python", script])
    assert r.rc == 0, r.describe()
    assert "FAILED" not in r.err and "Root Cause" not in r.err


RESTART_SCRIPT = """#!/bin/sh
echo "attempt $TORCHELASTIC_RESTART_COUNT job $JOB_RESTART_COUNT rank $RANK max $TORCHELASTIC_MAX_RESTARTS"
echo "attempt $TORCHELASTIC_RESTART_COUNT" >> "$1/attempts_$LOCAL_RANK"
touch "$1/done_${LOCAL_RANK}_$TORCHELASTIC_RESTART_COUNT"
if [ "$LOCAL_RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt "$2" ]; then
    # Fail only once rank 0 has written its line (else it may be stopped
    # before it does).
    i=0
    while [ ! -e "$1/done_0_$TORCHELASTIC_RESTART_COUNT" ] && [ $i -lt 2000 ]; do
        sleep 0.01; i=$((i + 1))
    done
    exit 5
fi
exit 0
"""


def test_max_restarts_recovers(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", RESTART_SCRIPT)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--max-restarts", "3",
                 "-t", "1", "--no-python", script, tmp_path, 2])
    assert r.rc == 0, r.describe()
    run_dir = hpr.only_train_dir()
    assert sorted(p.name for p in run_dir.iterdir()) == \
        ["attempt_0", "attempt_1", "attempt_2"]
    for n in range(3):
        for rank in range(2):
            got = (run_dir / f"attempt_{n}" / str(rank) / "stdout.log").read_text()
            assert got == f"attempt {n} job {n} rank {rank} max 3\n"
    for rank in range(2):
        assert (tmp_path / f"attempts_{rank}").read_text() == \
            "attempt 0\nattempt 1\nattempt 2\n"
    by_rank = worker_lines(r.stdout)
    assert by_rank[1] == [f"attempt {n} job {n} rank 1 max 3".encode()
                          for n in range(3)]


def test_max_restarts_exhausted(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", RESTART_SCRIPT)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                 "-t", "1", "--no-python", script, tmp_path, 99])
    assert r.rc == 5, r.describe()
    run_dir = hpr.only_train_dir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["attempt_0", "attempt_1"]
    assert (tmp_path / "attempts_1").read_text() == "attempt 0\nattempt 1\n"
    root = summary(r)
    assert re.search(r"(?m)^\s*rank\s*: 1 \(local_rank: 1\)$", root)


def test_no_restart_by_default(hpr, tmp_path):
    script = write_exec(tmp_path / "w.sh", RESTART_SCRIPT)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "-t", "1",
                 "--no-python", script, tmp_path, 99])
    assert r.rc == 5, r.describe()
    assert (tmp_path / "attempts_1").read_text() == "attempt 0\n"
    assert sorted(p.name for p in hpr.only_train_dir().iterdir()) == ["attempt_0"]


@pytest.mark.parametrize("interpreter, code, why", [
    ("/nonexistent/interpreter", 127, "no such file or directory"),
    # A directory as interpreter: found, but execve says EACCES.
    ("/tmp", 126, "permission denied"),
])
def test_worker_that_cannot_be_executed(hpr, tmp_path, interpreter, code, why):
    """A program that passes the start-up checks but whose exec fails (its
    #! interpreter is missing or unusable) fails its worker with the shell's
    status, and the error names the program and the reason."""
    script = write_exec(tmp_path / "w.sh", f"#!{interpreter}\necho never\n")
    r = hpr.run(["--standalone", "--nproc-per-node", 2, "--no-python", script])
    assert r.rc == code, r.describe()
    assert f"train worker 0: cannot execute '{script}': {why}" in r.err, r.describe()
    root = summary(r)
    assert re.search(rf"(?m)^\s*exitcode\s*: {code} \(pid: \d+\)$", root), root


def test_script_without_interpreter_line_and_many_arguments(hpr, tmp_path):
    """A script with no #! line is run by /bin/sh, as execvp runs it, with
    all of its arguments: 20,000 of them need more room to be passed on
    (the argument vector is copied on the starting process's stack) than
    a small fixed stack would give."""
    script = write_exec(tmp_path / "w", f'echo "$# $1 ${{20000}}" > "{tmp_path}/argc_$RANK"\n')
    args = [f"a{i}" for i in range(1, 20001)]
    r = hpr.run(["--standalone", "--nproc-per-node", 2, "--no-python", script,
                 *args])
    assert r.rc == 0, r.describe()
    for rank in range(2):
        assert (tmp_path / f"argc_{rank}").read_text() == "20000 a1 a20000\n"
