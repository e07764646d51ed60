# SPDX-License-Identifier: Apache-2.0
"""The worker socket from outside: pytest speaks the reference client's
exact bytes to a running agent (operator mode, no workers needed), and
throws bad input at it while a good client, the HTTP API and the metrics
keep answering."""

import fcntl
import http.client
import json
import os
import re
import resource
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import termios
import time
import uuid

import pytest

from conftest import (PYTHON, SOURCE_ROOT, deadline_poll, wait_for_files,
                      write_exec)
from test_operator import Agent

PREFIX = "/fsx/ckpt/run1"


def sock_path(agent, tmpdir):
    """Where the agent listens: under TMPDIR, or /tmp when that path
    would be too long for a Unix socket."""
    name = f"hyperpod_elastic_agent_{getattr(agent, 'proc', agent).pid}.sock"
    for d in (tmpdir, "/tmp"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    pytest.fail(f"no {name} under {tmpdir} or /tmp")


def ref_frame(message):
    """A frame as the reference client builds it: json.dumps with its
    default separators, UTF-8, a 4-byte big-endian length."""
    body = json.dumps(message).encode("utf-8")
    return struct.pack(">I", len(body)) + body


def ref_message(msg_type, client_id, local_rank, payload=None):
    """The reference client's key order: the payload, then type,
    local_rank and client_id added by its sendall."""
    m = dict(payload or {})
    m["type"] = msg_type
    m["local_rank"] = local_rank
    m["client_id"] = client_id
    return m


def recv_frame(s, timeout=10):
    s.settimeout(timeout)
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        assert chunk, "the agent closed the connection"
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        assert chunk, "the agent closed the connection mid-frame"
        body += chunk
    return body


class RefClient:
    """One connection with one client object, sending reference bytes."""

    def __init__(self, path, local_rank):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.rank = local_rank
        self.id = str(uuid.uuid4())
        # The reference's init: {"local_rank", "client_id"} then type.
        init = {"local_rank": local_rank, "client_id": self.id}
        init["type"] = "init"
        init["local_rank"] = local_rank
        init["client_id"] = self.id
        self.s.sendall(ref_frame(init))

    def send(self, msg_type, payload=None):
        self.s.sendall(ref_frame(ref_message(msg_type, self.id, self.rank,
                                             payload)))

    def get(self):
        self.send("ckpt_info_get")
        body = recv_frame(self.s)
        return json.loads(body.decode("utf-8"))

    def close(self):
        self.s.close()


def metrics(agent):
    code, _, body = agent.request("GET", "/metrics")
    assert code == 200
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def ckpt_client(path, rank=0):
    """A reference-style client of local rank `rank` that has sent
    ckpt_init (model checkpoints only) and read its answer."""
    c = RefClient(path, rank)
    c.send("ckpt_init", {"prefix": PREFIX,
                         "checkpoint_types": {"model_checkpoint": 1,
                                              "data_checkpoint": 0}})
    assert c.get()["path"] is None
    return c


def test_reference_client_bytes(hpr, tmp_path):
    a = Agent(hpr, tmp_path, nproc=2)
    path = sock_path(a, hpr.tmpdir)
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "progress" not in a.status()

    r0, r1 = RefClient(path, 0), RefClient(path, 1)
    types = {"model_checkpoint": 2, "data_checkpoint": 0}
    for c in (r0, r1):
        c.send("ckpt_init", {"prefix": PREFIX, "checkpoint_types": types})
    # Nothing complete: the reply is {"path": null} addressed to r0.
    reply = r0.get()
    assert reply == {"path": None, "type": "ckpt_info_get",
                     "client_id": r0.id}
    for c in (r0, r1):
        c.send("ckpt_info_update", {"step": 10, "path": f"{PREFIX}/step_10",
                                    "checkpoint_type": "model_checkpoint"})
    # The two connections are read in no set order, and a get prunes the
    # incomplete steps: ask once both updates are in.
    deadline_poll(lambda: "progress" in a.status(), 10, what="step 10")
    assert r1.get() == {"path": f"{PREFIX}/step_10", "type": "ckpt_info_get",
                        "client_id": r1.id}
    st = a.status()
    assert st["progress"] == {PREFIX: {"progressData": f"{PREFIX}/step_10",
                                       "progressCount": 10}}
    # The exact encoding, in its place among the keys.
    code, _, raw = a.request("GET", "/status")
    assert (b',"progress":{"/fsx/ckpt/run1":{"progressData":'
            b'"/fsx/ckpt/run1/step_10","progressCount":10}},"agent_version"'
            in raw), raw

    # One update's frame dribbled in byte by byte, the length prefix too.
    frame = ref_frame(ref_message("ckpt_info_update", r0.id, 0, {
        "step": 20, "path": f"{PREFIX}/step_20",
        "checkpoint_type": "model_checkpoint"}))
    handled = 'hyperpodrun_ipc_messages_total{result="handled"}'
    before = metrics(a)[handled]
    for i in range(len(frame)):
        r0.s.send(frame[i:i + 1])
    deadline_poll(lambda: metrics(a)[handled] == before + 1, 10,
                  what="the dribbled update")
    # Two frames in one write.
    r1.s.sendall(ref_frame(ref_message("ckpt_info_update", r1.id, 1, {
        "step": 20, "path": f"{PREFIX}/step_20",
        "checkpoint_type": "model_checkpoint"})) +
        ref_frame(ref_message("ckpt_info_get", r1.id, 1)))
    assert json.loads(recv_frame(r1.s))["path"] == f"{PREFIX}/step_20"

    m = metrics(a)
    assert m["hyperpodrun_checkpoint_step"] == 20
    assert m["hyperpodrun_ipc_clients"] == 2
    assert m['hyperpodrun_ipc_messages_total{result="ignored"}'] == 0
    # A closed connection unregisters its clients.
    r1.close()
    deadline_poll(lambda: metrics(a)["hyperpodrun_ipc_clients"] == 1, 10,
                  what="r1 unregistered")
    r0.close()
    r = a.shutdown()
    assert r.rc == 0, r.describe()
    assert not os.path.exists(path), "the socket outlived the agent"


def test_socket_path_is_exported_to_workers_and_hooks(hpr, tmp_path):
    out = tmp_path / "seen"
    out.mkdir()
    script = write_exec(tmp_path / "w.sh",
                        "#!/bin/sh\necho \"$HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH\""
                        f" > {out}/$1-$LOCAL_RANK\n")
    pre = write_exec(tmp_path / "pre.sh",
                     "#!/bin/sh\necho \"$HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH\""
                     f" > {out}/pre\n")
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--pre-train-script", pre, script, "train"], timeout=60)
    assert r.rc == 0, r.describe()
    seen = {p.name: p.read_text().strip() for p in out.iterdir()}
    assert sorted(seen) == ["pre", "train-0", "train-1"]
    assert len(set(seen.values())) == 1
    assert list(seen.values())[0].endswith(".sock")
    assert not os.path.exists(list(seen.values())[0])


def test_bad_input_is_contained(hpr, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below 1,200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    a = Agent(hpr, tmp_path, nproc=2)
    path = sock_path(a, hpr.tmpdir)
    good = ckpt_client(path)

    # 1,000 clients that connect and never speak.
    silent = []
    for _ in range(1000):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        silent.append(s)

    def raw(data):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(data)
        return s

    cid = str(uuid.uuid4())
    bad = [
        raw(struct.pack(">I", 5) + b"{oops"),                   # invalid JSON
        raw(struct.pack(">I", 2) + b"\xff\xfe"),                # not UTF-8
        raw(struct.pack(">I", 0)),                              # empty
        raw(ref_frame([1, 2, 3])),                              # not an object
        raw(ref_frame({"client_id": cid, "local_rank": 0})),    # no type
        raw(ref_frame({"type": "init", "local_rank": 0})),      # no client_id
        raw(ref_frame({"type": "init", "client_id": cid})),     # no local_rank
        raw(ref_frame({"type": 5, "client_id": cid, "local_rank": 0})),
        raw(ref_frame({"type": "init", "client_id": 7, "local_rank": 0})),
        raw(ref_frame({"type": "init", "client_id": cid, "local_rank": "0"})),
        raw(ref_frame({"type": "init", "client_id": cid, "local_rank": 2})),
        raw(ref_frame({"type": "init", "client_id": cid, "local_rank": -1})),
        raw(ref_frame(ref_message("ckpt_info_get", cid, 0))),   # before init
        raw(ref_frame(ref_message("init", cid, 1)) +
            ref_frame(ref_message("no_such_type", cid, 1)) +
            ref_frame(ref_message("ckpt_info_update", cid, 1, {
                "step": "12", "path": "/x", "checkpoint_type":
                "model_checkpoint"})) +
            ref_frame(ref_message("ckpt_info_update", cid, 1, {
                "step": 1.5, "path": 3, "checkpoint_type": None})) +
            ref_frame(ref_message("ckpt_init", cid, 1, {
                "prefix": 9, "checkpoint_types": []}))),
    ]
    # A frame over the cap closes that connection.
    big = raw(struct.pack(">I", 64 << 20) + b"{")
    big.settimeout(10)
    assert big.recv(1) == b"", "the oversized frame's connection stayed open"
    # A partial prefix, and a partial body, that never finish.
    bad.append(raw(b"\x00\x00"))
    bad.append(raw(struct.pack(">I", 100) + b"{\"type\""))
    # A client that asks and never reads: closed once its replies pile up.
    hog = RefClient(path, 1)
    hog.s.setblocking(False)
    get = ref_frame(ref_message("ckpt_info_get", hog.id, 1))
    sent, closed = 0, False
    end = time.monotonic() + 60
    while time.monotonic() < end and not closed:
        try:
            hog.s.send(get * 64)
            sent += 1
        except BlockingIOError:
            time.sleep(0.001)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    assert closed, "the agent kept queueing replies for a client that never reads"

    # Meanwhile the good client, the HTTP API and the metrics answer.
    good.send("ckpt_info_update", {"step": 3, "path": "/fsx/ckpt/run1/3",
                                   "checkpoint_type": "model_checkpoint"})
    assert good.get()["path"] == "/fsx/ckpt/run1/3"
    assert a.status()["progress"][PREFIX]["progressCount"] == 3
    m = metrics(a)
    assert m["hyperpodrun_ipc_rejected_frames_total"] == 1
    assert m['hyperpodrun_ipc_messages_total{result="ignored"}'] >= 15
    assert m["hyperpodrun_ipc_connections"] >= 1000
    err = a.proc.console_err().decode(errors="replace")
    assert "over the 4194304-byte limit; closing that connection" in err
    assert "is not valid UTF-8 JSON" in err
    assert "local_rank 2 is not on this node (0 to 1)" in err
    assert "unknown message type \"no_such_type\"" in err
    assert "\"step\" is not an integer: \"12\"" in err
    assert "\"local_rank\" is \"0\"" in err
    assert "does not read its replies" in err
    for s in silent + bad:
        s.close()
    good.close()
    r = a.shutdown()
    assert r.rc == 0, r.describe()


def test_python_client_errors(monkeypatch, tmp_path):
    import sys
    from conftest import SOURCE_ROOT
    sys.path.insert(0, str(SOURCE_ROOT / "python"))
    try:
        from hyperpodrun_client import (CheckpointDiscoverySocketClient,
                                        HyperPodIPCException)
    finally:
        sys.path.pop(0)
    monkeypatch.delenv("HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH", raising=False)
    with pytest.raises(ValueError, match="HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"):
        CheckpointDiscoverySocketClient("/p", 1)
    missing = tmp_path / "nobody.sock"
    monkeypatch.setenv("HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH", str(missing))
    with pytest.raises(HyperPodIPCException, match=str(missing)):
        CheckpointDiscoverySocketClient("/p", 1)


# ---- A shared node: descriptors, memory and the socket's path ---------------

READONLY_RE = re.compile(
    rb"read-only API \(/status, /metrics, /healthz\) listening on "
    rb"http://127\.0\.0\.1:(\d+)")


def healthz(port):
    """/healthz's status code, or the error that stood in for it."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        conn.request("GET", "/healthz")
        code = conn.getresponse().status
        conn.close()
        return code
    except OSError as ex:
        return repr(ex)


def idle_flood(path, n):
    """n connections that never say anything, as a leaky worker leaves."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        socks.append(s)
    return socks


def nofile(pid):
    """(soft, hard) RLIMIT_NOFILE of a process."""
    return resource.prlimit(pid, resource.RLIMIT_NOFILE)


def test_idle_connections_cannot_fail_a_restart(hpr, tmp_path):
    # A soft limit of 256 under a hard one of 8,192; 400 idle connections
    # held while the first attempt fails. The agent raises its own soft
    # limit, the workers keep 256, /healthz answers throughout, and the
    # restart spawns.
    script = tmp_path / "w.py"
    script.write_text(
        "import os, resource, sys, time\n"
        "d = os.environ['OPW_DIR']\n"
        "a = os.environ['TORCHELASTIC_RESTART_COUNT']\n"
        "r = os.environ['LOCAL_RANK']\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "tmp = os.path.join(d, f'.limit-{a}-{r}')\n"
        "with open(tmp, 'w') as f:\n"
        "    f.write(f'{soft} {hard}')\n"
        "os.rename(tmp, os.path.join(d, f'limit-{a}-{r}'))\n"
        "stop = 'go' if a == '0' else 'finish'\n"
        "while not os.path.exists(os.path.join(d, stop)):\n"
        "    time.sleep(0.02)\n"
        "sys.exit(1 if a == '0' else 0)\n")
    p = hpr.start(["--standalone", "--nproc-per-node", "2", "--max-restarts",
                   "2", "--server-host", "127.0.0.1", "--server-port", "0",
                   script],
                  env={"OPW_DIR": tmp_path},
                  wrapper=["prlimit", "--nofile=256:8192", "--"])
    port = int(deadline_poll(lambda: READONLY_RE.search(p.console_err()), 15,
                             what="the read-only API").group(1))
    wait_for_files([tmp_path / "limit-0-0", tmp_path / "limit-0-1"],
                   proc=p)
    flood = idle_flood(sock_path(p, hpr.tmpdir), 400)
    assert healthz(port) == 200
    (tmp_path / "go").touch()
    wait_for_files([tmp_path / "limit-1-0", tmp_path / "limit-1-1"],
                   timeout=60, proc=p)
    assert healthz(port) == 200
    assert nofile(p.pid) == (8192, 8192), "the agent kept its low limit"
    for rank in (0, 1):
        for attempt in (0, 1):
            limit = (tmp_path / f"limit-{attempt}-{rank}").read_text()
            assert limit == "256 8192", (
                f"attempt {attempt} rank {rank} got the agent's raised "
                f"limit: {limit}")
    (tmp_path / "finish").touch()
    r = p.wait(60)
    for s in flood:
        s.close()
    assert r.rc == 0, r.describe()
    assert "Too many open files" not in r.err, r.describe()


def test_flood_past_the_cap_evicts_idle_connections_not_ranks(hpr, tmp_path):
    # A hard limit of 256 that cannot be raised: the socket keeps its
    # connections to what leaves the reserve free, closes the connection
    # idle the longest that registered no client for each new one, and
    # never closes a rank's, although the rank's is the oldest.
    a = Agent(hpr, tmp_path, nproc=2,
              wrapper=["prlimit", "--nofile=256:256", "--"])
    path = sock_path(a, hpr.tmpdir)
    rank = ckpt_client(path)
    flood = idle_flood(path, 400)
    # The agent has seen every connection once the counter says so.
    deadline_poll(lambda: metrics(a)[
        'hyperpodrun_ipc_closed_total{reason="evicted"}'] >= 400 - 96, 30,
        what="the flood's evictions")
    assert healthz(a.port) == 200
    m = metrics(a)
    assert m["hyperpodrun_ipc_connections"] <= 256 - 128 - 2 * 16
    assert m['hyperpodrun_ipc_closed_total{reason="refused"}'] == 0
    # The rank's connection is still there and answered.
    rank.send("ckpt_info_update", {"step": 7, "path": f"{PREFIX}/7",
                                   "checkpoint_type": "model_checkpoint"})
    assert rank.get()["path"] == f"{PREFIX}/7"
    # A new client gets in after the flood.
    late = RefClient(path, 1)
    assert late.get()["path"] == f"{PREFIX}/7"
    # And the workers still start.
    a.start()
    a.wait_status("completed", timeout=60)
    err = a.proc.console_err().decode(errors="replace")
    assert "closing the ones idle the longest that registered no client" \
        in err
    for s in flood + [rank.s, late.s]:
        s.close()
    r = a.shutdown()
    assert r.rc == 0, r.describe()


def unread(s):
    """Bytes sent on a Unix socket that its peer has not read yet."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ,
                                          b"\0" * 4))[0]


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_stalled_frames_cannot_grow_the_agent(hpr, tmp_path):
    # 150 connections each send all but the last byte of a 4 MiB frame:
    # 600 MiB the agent would hold. The bytes held for unfinished frames
    # are capped at 64 MiB in all; a rank's connection is not touched.
    # Under AddressSanitizer freed memory would wait in a quarantine of up
    # to 256 MiB, counted in RSS; other builds ignore ASAN_OPTIONS.
    asan = os.environ.get("ASAN_OPTIONS", "")
    a = Agent(hpr, tmp_path, nproc=2,
              env={"ASAN_OPTIONS": f"{asan}:quarantine_size_mb=0"})
    path = sock_path(a, hpr.tmpdir)
    rank = ckpt_client(path)
    before = vm_kib(a.proc.pid, "VmRSS")
    frame = struct.pack(">I", 4 << 20) + b"{" + b" " * ((4 << 20) - 2)
    stalled = []
    for _ in range(150):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        try:
            s.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while sending: the agent shed it
        stalled.append(s)
    # Every byte sent has been read (or dropped with its connection).
    deadline_poll(lambda: all(unread(s) == 0 for s in stalled), 60,
                  what="the agent to read the stalled frames")
    assert rank.get()["path"] is None
    grown_mib = (vm_kib(a.proc.pid, "VmRSS") - before) / 1024
    peak_mib = (vm_kib(a.proc.pid, "VmHWM") - before) / 1024
    assert grown_mib < 160, f"the agent grew by {grown_mib:.0f} MiB"
    assert peak_mib < 200, f"the agent's peak grew by {peak_mib:.0f} MiB"
    m = metrics(a)
    assert m['hyperpodrun_ipc_closed_total{reason="unfinished_frames"}'] \
        >= 150 - 64 // 4
    assert m["hyperpodrun_ipc_clients"] == 1
    err = a.proc.console_err().decode(errors="replace")
    assert "unfinished frames hold" in err and \
        "over the 67108864-byte limit" in err
    for s in stalled + [rank.s]:
        s.close()
    r = a.shutdown()
    assert r.rc == 0, r.describe()


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]

# Waits until the test has squatted the path its pid names (at most
# 120 s), then becomes hyperpodrun: $0 is the pid file; the test creates
# "$0.go".
HANDSHAKE = ('echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; i=0; '
             'while [ ! -e "$0.go" ] && [ $i -lt 12000 ]; do '
             'sleep 0.01; i=$((i + 1)); done; exec "$@"')

CKPT_WORKER = """\
import os
from hyperpod_elastic_agent.ipc import CheckpointDiscoverySocketClient
c = CheckpointDiscoverySocketClient("/ckpt", 1, 0)
c.update(5, "/ckpt/5", "model_checkpoint")
got = c.get_latest_checkpoint_path()
with open(os.path.join(os.environ["OPW_DIR"], "seen"), "w") as f:
    f.write(os.environ["HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"] + "\\n"
            + str(got))
"""


@pytest.fixture
def shared_tmp():
    """A directory like /tmp (1777, root's) that a second uid can use."""
    if os.geteuid() != 0:
        pytest.skip("a second uid needs root (CI runs as root)")
    d = tempfile.mkdtemp(prefix="hpr-shared-", dir="/tmp")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_nobody(*cmd):
    subprocess.run([*NOBODY, *cmd], check=True, timeout=30)


def start_held(hpr, tmp_path, shared_tmp):
    """Starts an agent with TMPDIR=shared_tmp, held before its exec until
    tmp_path/pid.go exists (HANDSHAKE), and returns it with the socket path
    it will want, <shared_tmp>/hyperpod_elastic_agent_<its pid>.sock."""
    pidfile = tmp_path / "pid"
    worker = tmp_path / "w.py"
    worker.write_text(CKPT_WORKER)
    p = hpr.start(["--standalone", "--nproc-per-node", "1", worker],
                  env={"OPW_DIR": tmp_path, "TMPDIR": shared_tmp,
                       "PYTHONPATH": SOURCE_ROOT / "python"},
                  wrapper=["sh", "-c", HANDSHAKE, pidfile])
    wait_for_files([pidfile], proc=p)
    pid = int(pidfile.read_text())
    assert pid == p.pid
    return p, os.path.join(shared_tmp, f"hyperpod_elastic_agent_{pid}.sock")


@pytest.mark.parametrize("kind", ["file", "directory", "symlink", "socket"])
def test_squatted_socket_path_is_left_alone(hpr, tmp_path, shared_tmp, kind):
    # Another uid owns what is at <tempdir>/hyperpod_elastic_agent_<pid>.sock
    # before the agent starts: the agent neither stops nor touches it, and
    # its workers reach it, the reference's way (the environment), in a
    # private directory beside it.
    p, squat = start_held(hpr, tmp_path, shared_tmp)
    listener = None
    if kind == "file":
        as_nobody("sh", "-c", 'echo theirs > "$0"', squat)
    elif kind == "directory":
        as_nobody("mkdir", squat)
    elif kind == "symlink":
        bait = os.path.join(shared_tmp, "bait")
        as_nobody("sh", "-c", 'echo bait > "$0"', bait)
        as_nobody("ln", "-s", bait, squat)
    else:
        listener = subprocess.Popen(
            [*NOBODY, PYTHON, "-c",
             "import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "s.bind(sys.argv[1]); s.listen(8)\n"
             "print('up', flush=True); sys.stdin.read()\n", squat],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert listener.stdout.readline() == b"up\n"
    before = os.lstat(squat)
    assert before.st_uid == 65534
    (tmp_path / "pid.go").touch()
    try:
        r = p.wait(60)
        assert r.rc == 0, r.describe()
        seen, got = (tmp_path / "seen").read_text().split("\n")
        assert got == "/ckpt/5"
        assert seen != squat
        assert os.path.dirname(os.path.dirname(seen)) == shared_tmp
        assert os.path.basename(seen) == os.path.basename(squat)
        assert not os.path.exists(os.path.dirname(seen)), \
            "the private directory outlived the agent"
        after = os.lstat(squat)
        assert (after.st_ino, after.st_uid, stat.S_IFMT(after.st_mode)) == \
            (before.st_ino, 65534, stat.S_IFMT(before.st_mode)), \
            "the other uid's entry was replaced"
        if kind == "socket":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(squat)  # still theirs, still listening
            s.close()
        what = {"file": "a file", "directory": "a directory",
                "symlink": "a symbolic link", "socket": "a socket"}[kind]
        assert (f"worker socket: {squat} is {what} of uid 65534"
                in r.err), r.describe()
        assert f"listening on {seen} instead" in r.err, r.describe()
    finally:
        if listener is not None:
            listener.stdin.close()
            listener.wait(10)


def test_live_socket_of_our_own_uid_is_not_taken_over(hpr, tmp_path,
                                                      shared_tmp):
    # Two containers that share /tmp both run the agent as PID 1 and root:
    # the second one's path is the first one's live socket. Played here by
    # a root listener at the second agent's path.
    p, squat = start_held(hpr, tmp_path, shared_tmp)
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.bind(squat)
    first.listen(8)
    (tmp_path / "pid.go").touch()
    r = p.wait(60)
    assert r.rc == 0, r.describe()
    seen, got = (tmp_path / "seen").read_text().split("\n")
    assert got == "/ckpt/5" and seen != squat
    assert "that another process listens on" in r.err, r.describe()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(squat)  # the first agent's socket still reaches it
    s.close()
    first.close()


def test_stale_socket_of_our_own_is_reused(hpr, tmp_path, shared_tmp):
    # A SIGKILLed agent of the same pid (a container's PID 1) left its
    # socket: nobody listens on it, so it is replaced, in place.
    p, squat = start_held(hpr, tmp_path, shared_tmp)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(squat)
    dead.close()
    (tmp_path / "pid.go").touch()
    r = p.wait(60)
    assert r.rc == 0, r.describe()
    seen, got = (tmp_path / "seen").read_text().split("\n")
    assert (seen, got) == (squat, "/ckpt/5")
    assert "worker socket:" not in r.err, r.describe()
    assert not os.path.exists(squat)
