# SPDX-License-Identifier: Apache-2.0
"""The agent's files on a node shared with other users.

* A log root that another uid owns, or that others can write, is refused
  before anything is spawned (exit 2, the path, its owner and mode, and
  the fix named), since that uid could rename the run directory and plant
  links in its place.
* Run, attempt and rank directories are 0700 and the files in them 0600:
  another uid reads nothing.
* Links planted in the tree (by a rename of the run directory, or at a
  temporary file's name) are never written through: the agent reaches its
  files from directory fds, with O_NOFOLLOW, exclusive temporary names.
* A SIGKILLed agent's socket and Python directory are removed by the next
  agent in the same TMPDIR, and a live agent's are not.

A second uid is a real one (nobody, 65534, through setpriv); those tests
need root and are skipped otherwise.
"""

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import PYTHON, deadline_poll, processes_with_marker

OTHER = 65534
AS_OTHER = ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}",
            "--clear-groups"]
VICTIM_TEXT = b"root's own file: no one may overwrite it\n"

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="a second uid needs root (setpriv)")


@pytest.fixture
def shared_tmp():
    """A directory like /tmp (root's, mode 1777) that another uid can
    reach, unlike pytest's tmp_path (0700)."""
    d = tempfile.mkdtemp(prefix="hpr-shared-", dir="/tmp")
    os.chmod(d, 0o1777)
    yield d
    subprocess.run(["rm", "-rf", "--one-file-system", d], check=False)


def as_other(*cmd):
    return subprocess.run([*AS_OTHER, *cmd], capture_output=True,
                          timeout=30)


def victim(path):
    with open(path, "wb") as f:
        f.write(VICTIM_TEXT)
    os.chmod(path, 0o600)
    return path


def marker_worker(tmp_path):
    """A worker that leaves a file when it runs."""
    ran = tmp_path / "worker-ran"
    script = tmp_path / "ran.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    return script, ran


# ---- the log root -------------------------------------------------------

@needs_root
def test_a_log_root_made_by_another_uid_is_refused(hpr, tmp_path,
                                                   shared_tmp):
    root = os.path.join(shared_tmp, "hyperpod")
    made = as_other("mkdir", root)
    assert made.returncode == 0, made.stderr
    assert os.stat(root).st_uid == OTHER
    script, ran = marker_worker(tmp_path)
    r = hpr.run(["--standalone", "--tee", "3", "--log-dir", root, script],
                log_dir=False)
    assert r.rc == 2, r.describe()
    err = r.err
    assert f"--log-dir '{root}' refused" in err, err
    assert f"'{root}' is owned by uid {OTHER} (mode 0755)" in err, err
    assert "chown root, chmod go-w" in err, err
    # Nothing was spawned, nothing made in the other uid's directory.
    assert not ran.exists()
    assert os.listdir(root) == []


@needs_root
def test_a_log_root_under_another_uids_directory_is_refused(hpr, tmp_path,
                                                            shared_tmp):
    # root's own directory, but inside one the other uid may rename.
    parent = os.path.join(shared_tmp, "theirs")
    assert as_other("mkdir", parent).returncode == 0
    os.chmod(parent, 0o777)
    root = os.path.join(parent, "hyperpod")
    os.mkdir(root, 0o755)
    script, ran = marker_worker(tmp_path)
    r = hpr.run(["--standalone", "--log-dir", root, script], log_dir=False)
    assert r.rc == 2, r.describe()
    assert f"'{parent}' is owned by uid {OTHER} (mode 0777)" in r.err, r.err
    assert not ran.exists()
    assert os.listdir(root) == []


@pytest.mark.parametrize("mode, says", [
    (0o777, "is writable by every user (mode 0777"),
    (0o770, "is writable by its group (mode 0770"),
    (0o1777, "is writable by every user (mode 1777"),
])
def test_a_log_root_others_can_write_is_refused(hpr, tmp_path, mode, says):
    root = tmp_path / "shared-logs"
    root.mkdir()
    root.chmod(mode)
    script, ran = marker_worker(tmp_path)
    r = hpr.run(["--standalone", "--log-dir", root, script], log_dir=False)
    assert r.rc == 2, r.describe()
    assert f"--log-dir '{root}' refused: '{root}' {says}" in r.err, r.err
    assert not ran.exists()
    assert list(root.iterdir()) == []


def test_a_tmpdir_others_can_write_without_sticky_bit_is_refused(
        hpr, tmp_path):
    # The default log root is made in TMPDIR: 0777 without the sticky bit
    # lets anyone rename it away.
    tmp = tmp_path / "open-tmp"
    tmp.mkdir()
    tmp.chmod(0o777)
    script, ran = marker_worker(tmp_path)
    r = hpr.run(["--standalone", script], log_dir=False,
                env={"TMPDIR": tmp})
    assert r.rc == 2, r.describe()
    assert (f"cannot create the log directory in {tmp} (TMPDIR or /tmp): "
            f"'{tmp}' is writable by every user (mode 0777") in r.err, r.err
    assert "set TMPDIR or --log-dir" in r.err
    assert not ran.exists()
    assert list(tmp.iterdir()) == []


# ---- modes ----------------------------------------------------------------

SECRET = "hpr-secret-token-5f2c"


def all_under(top):
    out = [top]
    for dirpath, dirnames, filenames in os.walk(top):
        out += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return out


@needs_root
def test_logs_are_private_to_the_agents_user(hpr, tmp_path, shared_tmp):
    # A log root that another uid can reach (root's, 0755, in a 1777
    # directory), as /tmp/hyperpod is.
    root = os.path.join(shared_tmp, "hyperpod")
    os.mkdir(root, 0o755)
    script = tmp_path / "secret.py"
    script.write_text(f"import sys\nprint({SECRET!r})\n"
                      f"print({SECRET!r}, file=sys.stderr)\n")
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                 "--log-dir", root, script], log_dir=False)
    assert r.rc == 0, r.describe()
    (run,) = [os.path.join(root, n) for n in os.listdir(root)]
    modes = {os.path.relpath(p, root): stat.S_IMODE(os.lstat(p).st_mode)
             for p in all_under(run)}
    files = [p for p in modes if p.endswith(".log")]
    assert len(files) == 4, modes
    assert {m for p, m in modes.items() if p not in files} == {0o700}, modes
    assert {modes[p] for p in files} == {0o600}, modes
    # The other uid: not a name, not a byte.
    log = os.path.join(run, "attempt_0", "0", "stdout.log")
    assert SECRET in open(log).read()
    for cmd in (["cat", log], ["ls", run],
                ["cat", os.path.join(run, "attempt_0", "1", "stderr.log")]):
        seen = as_other(*cmd)
        assert seen.returncode != 0, (cmd, seen.stdout)
        assert b"Permission denied" in seen.stderr, seen.stderr
        assert SECRET.encode() not in seen.stdout


def test_the_default_log_root_is_private(hpr, tmp_path):
    tmp = tmp_path / "sticky-tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    r = hpr.run(["--standalone", "--tee", "3", script], log_dir=False,
                env={"TMPDIR": tmp})
    assert r.rc == 0, r.describe()
    (root,) = [p for p in tmp.iterdir() if p.name.startswith("torchelastic_")]
    assert re.fullmatch(r"torchelastic_[a-z0-9_]{8}", root.name)
    modes = {os.path.relpath(p, tmp): stat.S_IMODE(os.lstat(p).st_mode)
             for p in all_under(str(root))}
    assert {m for p, m in modes.items() if not p.endswith(".log")} == \
        {0o700}, modes
    assert {m for p, m in modes.items() if p.endswith(".log")} == {0o600}, \
        modes


# ---- links planted in the tree ---------------------------------------------

# A worker that plants links in its own run directory, as another uid could
# when the log root was theirs: it stands for "whoever may write there".
PLANT = r"""
import os, signal, sys, time
signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # forwarded by the agent
mode, victim, victim_dir, ready, done = sys.argv[1:6]
attempt = os.path.dirname(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"]))
run = os.path.dirname(attempt)
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if mode == "tmp-link":
    os.symlink(victim, os.path.join(attempt, "stacks-report-1.json.tmp"))
elif mode == "moved-run" and restart == 0:
    # The run directory renamed, a link to the victim's directory in its
    # place, holding the names the agent writes next.
    os.rename(run, run + ".moved")
    os.symlink(victim_dir, run)
if restart == 0 and mode == "moved-run":
    sys.exit(1)  # attempt 1 starts: a new attempt directory and logs
print("attempt", restart, "ran", flush=True)
open(ready, "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(done) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def plant_script(tmp_path):
    script = tmp_path / "plant.py"
    script.write_text(PLANT)
    return script


def victim_tree(tmp_path):
    """The victim's directory as the moved-run link presents it: an
    attempt_0 with a link at the report's temporary name, an attempt_1
    with a rank's stdout.log."""
    vdir = tmp_path / "victim-dir"
    for sub in ("attempt_0", "attempt_1/0"):
        (vdir / sub).mkdir(parents=True)
    victim(vdir / "attempt_1" / "0" / "stdout.log")
    return vdir


def snapshot(top):
    return {os.path.relpath(p, top): (open(p, "rb").read()
                                      if os.path.isfile(p)
                                      and not os.path.islink(p) else None)
            for p in all_under(str(top))}


def test_a_link_at_the_reports_temporary_name_is_not_written_through(
        hpr, tmp_path):
    target = victim(tmp_path / "victim")
    ready, done = tmp_path / "ready", tmp_path / "done"
    p = hpr.start(["--standalone", "--tee", "3", plant_script(tmp_path),
                   "tmp-link", target, tmp_path / "unused", ready, done])
    deadline_poll(ready.exists, timeout=60, what="the link planted")
    p.signal(signal.SIGUSR2)

    def written():
        return list(hpr.log_dir.glob("*/attempt_0/stacks-report-1.json"))
    deadline_poll(written, timeout=60, what="stacks-report-1.json")
    done.touch()
    r = p.wait(60)
    assert r.rc == 0, r.describe()
    assert target.read_bytes() == VICTIM_TEXT
    (report,) = written()
    assert report.read_bytes().startswith(b"{")
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    link = report.parent / "stacks-report-1.json.tmp"
    assert link.is_symlink()
    assert [q.name for q in report.parent.iterdir()
            if q.name.startswith("stacks-report-1.json.tmp.")] == []


def test_a_renamed_run_directory_leads_nowhere_else(hpr, tmp_path):
    # Attempt 0 moves the run directory and puts a link to the victim's
    # directory in its place; attempt 1's directory and logs, and the
    # report asked for in it, go to the moved directory, by its fd.
    target = victim(tmp_path / "victim")
    vdir = victim_tree(tmp_path)
    os.symlink(target, vdir / "attempt_1" / "stacks-report-1.json.tmp")
    before = snapshot(vdir)
    ready, done = tmp_path / "ready", tmp_path / "done"
    p = hpr.start(["--standalone", "--tee", "3", "--max-restarts", "1",
                   plant_script(tmp_path), "moved-run", target, vdir, ready,
                   done])
    deadline_poll(ready.exists, timeout=60, what="attempt 1 running")
    p.signal(signal.SIGUSR2)
    report = re.compile(rb"hang report in (\S+stacks-report-1\.json)")
    deadline_poll(lambda: report.search(p.console_err()), timeout=60,
                  what="the report written")
    done.touch()
    r = p.wait(60)
    assert r.rc == 0, r.describe()
    assert snapshot(vdir) == before
    assert target.read_bytes() == VICTIM_TEXT
    (moved,) = list(hpr.log_dir.glob("*.moved"))
    attempt = moved / "attempt_1"
    assert (attempt / "0" / "stdout.log").read_bytes() == b"attempt 1 ran\n"
    assert (attempt / "stacks-report-1.json").read_bytes().startswith(b"{")


# ---- leftovers of a SIGKILLed agent ------------------------------------------

WAIT = r"""
import os, sys, time
open(sys.argv[1], "w").close()
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def socket_of(hpr, pid):
    return hpr.tmpdir / f"hyperpod_elastic_agent_{pid}.sock"


def python_dirs(hpr, pid):
    return [p for p in hpr.tmpdir.iterdir()
            if p.name.startswith(f"hyperpodrun-py-{pid}-")]


def start_waiting(hpr, tmp_path, name):
    script = tmp_path / "wait.py"
    script.write_text(WAIT)
    ready, done = tmp_path / f"{name}.ready", tmp_path / f"{name}.done"
    p = hpr.start(["--standalone", script, ready, done])
    deadline_poll(ready.exists, timeout=60, what=f"agent {name}'s worker")
    return p, done


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def stale_socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the file stays, no one listens


def test_a_sigkilled_agents_leftovers_go_with_the_next_start(hpr, tmp_path,
                                                             marker):
    a, _ = start_waiting(hpr, tmp_path, "a")
    sock, pydirs = socket_of(hpr, a.pid), python_dirs(hpr, a.pid)
    assert sock.exists() and len(pydirs) == 1
    os.kill(a.pid, signal.SIGKILL)
    a.wait(30)
    # The watcher ends the workers; the files stay.
    deadline_poll(lambda: not processes_with_marker(marker), timeout=30,
                  what="agent a's workers gone")
    assert sock.exists() and pydirs[0].exists()

    # Look-alikes that are not provably a dead agent's stay.
    gone = dead_pid()
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(socket_of(hpr, gone)))  # someone listens on it
    listening.listen(1)
    odd = hpr.tmpdir / f"hyperpodrun-py-{gone}-abcdef"
    odd.mkdir(mode=0o700)
    (odd / "sitecustomize.py").write_text("")
    (odd / "notes.txt").write_text("not ours\n")

    r = hpr.run(["--standalone", "--no-python", "true"])
    assert r.rc == 0, r.describe()
    assert not sock.exists()
    assert not pydirs[0].exists()
    assert f"removed {sock}, left by agent {a.pid}, which is gone" in r.err
    assert socket_of(hpr, gone).exists()
    listening.close()
    assert (odd / "notes.txt").exists()


def test_a_dead_agents_private_socket_directory_goes(hpr, tmp_path):
    """An agent whose reference socket path was taken listens in a private
    directory (see test_ipc.py); SIGKILLed, it leaves that behind. The
    next start removes it when it holds only that agent's dead socket;
    one with anything else in it stays. (A TMPDIR short enough for a
    socket path two levels down.)"""
    short = Path(tempfile.mkdtemp(prefix="hpr-", dir="/tmp"))
    try:
        dead = dead_pid()
        private = short / f"hyperpodrun-ipc-{dead}.Ab3dE9"
        private.mkdir(mode=0o700)
        stale_socket(private / f"hyperpod_elastic_agent_{dead}.sock")
        crowded = short / f"hyperpodrun-ipc-{dead}.Zz9yX8"
        crowded.mkdir(mode=0o700)
        stale_socket(crowded / f"hyperpod_elastic_agent_{dead}.sock")
        (crowded / "notes.txt").write_text("not ours\n")
        r = hpr.run(["--standalone", "--no-python", "true"],
                    env={"TMPDIR": short})
        assert r.rc == 0, r.describe()
        assert not private.exists(), r.describe()
        assert (f"removed {private}, left by agent {dead}, which is gone"
                in r.err), r.describe()
        assert (crowded / "notes.txt").exists()
        assert (crowded / f"hyperpod_elastic_agent_{dead}.sock").exists()
    finally:
        shutil.rmtree(short, ignore_errors=True)


@needs_root
def test_another_uids_stale_socket_stays(hpr, tmp_path, shared_tmp):
    # In a TMPDIR both uids use, as /tmp.
    path = os.path.join(shared_tmp, f"hyperpod_elastic_agent_{dead_pid()}"
                        ".sock")
    made = as_other(PYTHON, "-c",
                    "import socket, sys; s = socket.socket(socket.AF_UNIX);"
                    " s.bind(sys.argv[1]); s.close()", path)
    assert made.returncode == 0, made.stderr
    assert os.lstat(path).st_uid == OTHER
    mine = os.path.join(shared_tmp, f"hyperpod_elastic_agent_{dead_pid()}"
                        ".sock")
    stale_socket(mine)
    r = hpr.run(["--standalone", "--no-python", "true"],
                env={"TMPDIR": shared_tmp})
    assert r.rc == 0, r.describe()
    assert os.path.exists(path)
    assert not os.path.exists(mine)


def test_a_live_agents_files_stay(hpr, tmp_path):
    a, a_done = start_waiting(hpr, tmp_path, "a")
    sock, pydirs = socket_of(hpr, a.pid), python_dirs(hpr, a.pid)
    assert sock.exists() and len(pydirs) == 1
    # A stale socket of a dead agent beside it goes; a's stays.
    stale = socket_of(hpr, dead_pid())
    stale_socket(stale)
    r = hpr.run(["--standalone", "--no-python", "true"])
    assert r.rc == 0, r.describe()
    assert not stale.exists()
    assert sock.exists() and pydirs[0].exists()
    assert (pydirs[0] / "sitecustomize.py").exists()
    # And a still answers on it.
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(str(sock))
    c.close()
    a_done.touch()
    ra = a.wait(60)
    assert ra.rc == 0, ra.describe()
    assert not sock.exists() and not pydirs[0].exists()
