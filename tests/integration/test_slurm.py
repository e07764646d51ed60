# SPDX-License-Identifier: Apache-2.0
"""A real Slurm: `srun hyperpodrun --rdzv-backend slurm` on a one-node cluster.

The module starts its own cluster from Debian's packages (./dev.sh installs
slurmctld, slurmd, slurm-client and munge): a munge key and munged with its
own socket, slurmctld and slurmd in the foreground, all in a temporary
directory with a minimal slurm.conf (proctrack/linuxproc, task/none, no
cgroups, no accounting) on free ports. Every wait is bounded, and at the end
every daemon, and anything they started, is stopped and checked gone.

What this proves that the stand-ins cannot: the variables a real srun sets,
the real `scontrol --oneliner show job` answer, and the exit status that
srun (and so sbatch and HyperPod's auto-resume) sees.
"""

import getpass
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import (HYPERPODRUN, PYTHON, SOURCE_ROOT, have_torch, helper,
                      worker_lines, write_exec)

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "scontrol", "sinfo", "scancel")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
WORKER = helper("rdzv_worker.py")
EXAMPLE = SOURCE_ROOT / "examples" / "allreduce.py"
SBATCH_EXAMPLE = SOURCE_ROOT / "examples" / "slurm" / "train.sbatch"


def find(name):
    return shutil.which(name, path=os.pathsep.join(
        [os.environ.get("PATH", ""), *SBIN]))


missing = [n for n in DAEMONS + CLIENTS if find(n) is None]
if missing:
    pytest.skip(f"Slurm is not installed (missing {', '.join(missing)}); "
                "./dev.sh installs slurmctld, slurmd, slurm-client and munge",
                allow_module_level=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout, what, describe=lambda: ""):
    """Polls predicate (a cheap check) until true; fails after timeout."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout}s waiting for {what}\n"
                        + describe())
        time.sleep(0.05)


class Cluster:
    def __init__(self, root):
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.user = getpass.getuser()
        self.conf = root / "slurm.conf"
        self.daemons = []  # (name, Popen), in start order
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM", "SAGEMAKER_"))}
        self.env["SLURM_CONF"] = str(self.conf)
        # Slurm's and munge's programs, wherever this system keeps them.
        self.env["PATH"] = os.pathsep.join(
            [str(os.path.dirname(HYPERPODRUN)), self.env.get("PATH", ""),
             *SBIN])

    def logs(self):
        out = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log",
                     "munged.out", "slurmctld.out", "slurmd.out"):
            p = self.root / name
            if p.exists():
                out.append(f"--- {name} (tail) ---\n"
                           + p.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def start_daemon(self, name, args):
        out = open(self.root / f"{name}.out", "wb")
        proc = subprocess.Popen([find(name), *args], env=self.env,
                                stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd=self.root,
                                start_new_session=True)
        out.close()
        self.daemons.append((name, proc))

        def alive_or_fail():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode} at "
                            f"start-up\n{self.logs()}")
        return alive_or_fail

    def write_conf(self):
        r = self.root
        self.conf.write_text(f"""\
ClusterName=hprtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={r}/munge.socket
CredType=cred/munge
SlurmUser={self.user}
SlurmdUser={self.user}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmctldDebug=info
SlurmdDebug=info
NodeName={self.node} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def start(self):
        for d in ("state", "spool"):
            (self.root / d).mkdir()
        key = self.root / "munge.key"
        subprocess.run([find("mungekey"), "--create", "--keyfile", str(key)],
                       check=True, timeout=30, capture_output=True)
        key.chmod(0o600)
        sock = self.root / "munge.socket"
        # --force: the temporary directory lies under a world-writable
        # /tmp, which munged would otherwise refuse.
        check = self.start_daemon("munged", [
            "--foreground", "--force", f"--socket={sock}",
            f"--key-file={key}", f"--pid-file={self.root}/munged.pid",
            f"--seed-file={self.root}/munged.seed",
            f"--log-file={self.root}/munged.log"])
        wait_until(lambda: check() or sock.exists(), 20, "munged's socket",
                   self.logs)
        self.write_conf()
        check_ctld = self.start_daemon("slurmctld",
                                       ["-D", "-i", "-f", str(self.conf)])
        check_d = self.start_daemon("slurmd", ["-D", "-f", str(self.conf)])

        def idle():
            check_ctld()
            check_d()
            r = subprocess.run([find("sinfo"), "-h", "-o", "%t"],
                               env=self.env, capture_output=True, text=True,
                               timeout=10)
            return r.returncode == 0 and r.stdout.strip() == "idle"
        wait_until(idle, 60, f"node {self.node} to be idle", self.logs)

    def processes(self):
        """Live processes started from this cluster: their environment
        holds our SLURM_CONF (slurmstepd, tasks, the daemons)."""
        needle = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            zombie = stat[stat.rindex(b")") + 2:][:1] in (b"Z", b"X")
            if needle in env and not zombie:
                found.append(int(entry))
        return found

    def stop(self):
        subprocess.run([find("scancel"), "--full", "--user", self.user],
                       env=self.env, capture_output=True, timeout=10)
        for name, proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
        left = self.processes()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        left = c.stop()
    assert left == [], f"processes left behind by the cluster: {left}"


def srun(cluster, args, marker, timeout=120, env=None):
    """Runs srun with args in the cluster; the test marker rides along in
    the environment, so the hpr fixture finds anything left behind."""
    full_env = dict(cluster.env)
    full_env.update({"PYTHON_EXEC": PYTHON, "HPR_TEST_MARKER": marker,
                     "PYTHONDONTWRITEBYTECODE": "1"})
    full_env.update(env or {})
    try:
        return subprocess.run([find("srun"), *map(str, args)], env=full_env,
                              capture_output=True, text=True,
                              timeout=timeout, cwd=cluster.root)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"srun did not finish within {timeout}s: {e}\n"
                    + cluster.logs())


def describe(r, cluster):
    return (f"exit {r.returncode}\n--- stdout ---\n{r.stdout[-3000:]}\n"
            f"--- stderr ---\n{r.stderr[-3000:]}\n{cluster.logs()}")


def srun_hyperpodrun(cluster, marker, tmp_path, *args):
    """srun -N1 hyperpodrun --rdzv-backend slurm ARGS, logs in tmp_path."""
    return srun(cluster, ["-N1", "-n1", HYPERPODRUN, "--rdzv-backend", "slurm",
                          "--log-dir", tmp_path / "logs", *args], marker)


def read_records(path):
    return sorted((json.loads(line) for line in path.read_text().splitlines()),
                  key=lambda x: x["RANK"])


def test_srun_gives_ranks_world_and_master(cluster, hpr, marker, tmp_path):
    out = tmp_path / "records"
    r = srun_hyperpodrun(cluster, marker, tmp_path, "--nproc-per-node", "2",
                         WORKER, out)
    assert r.returncode == 0, describe(r, cluster)
    m = re.search(r"rendezvous: slurm: node 0 of 1, master (\S+):29500, from "
                  r"scontrol show job (\d+) \(NodeList=(\S+)\)", r.stderr)
    # The real scontrol was asked, and its list named this node.
    assert m, describe(r, cluster)
    assert m.group(1) == cluster.node and m.group(3) == cluster.node
    assert [(x["RANK"], x["LOCAL_RANK"], x["WORLD_SIZE"], x["GROUP_RANK"],
             x["GROUP_WORLD_SIZE"], x["MASTER_ADDR"], x["MASTER_PORT"])
            for x in read_records(out)] == [
        ("0", "0", "2", "0", "1", cluster.node, "29500"),
        ("1", "1", "2", "0", "1", cluster.node, "29500"),
    ]


def test_srun_port_from_job_id(cluster, hpr, marker, tmp_path):
    out = tmp_path / "records"
    r = srun_hyperpodrun(cluster, marker, tmp_path, "--rdzv-conf",
                         "master_port=jobid", WORKER, out)
    assert r.returncode == 0, describe(r, cluster)
    job_id = int(re.search(r"scontrol show job (\d+)", r.stderr).group(1))
    [record] = read_records(out)
    assert record["MASTER_PORT"] == str(15000 + job_id % 10000)


def test_srun_sees_the_exit_status(cluster, hpr, marker, tmp_path):
    """srun exits with the task's status: the failing worker's code, and 2
    for bad rendezvous input (nothing spawned)."""
    worker = write_exec(tmp_path / "fail.sh", "#!/bin/sh\nexit 3\n")
    r = srun_hyperpodrun(cluster, marker, tmp_path, "--no-python", worker)
    assert r.returncode == 3, describe(r, cluster)

    out = tmp_path / "records"
    r = srun_hyperpodrun(cluster, marker, tmp_path, "--nnodes", "2", WORKER,
                         out)
    assert r.returncode == 2, describe(r, cluster)
    assert re.search(r"hyperpodrun: error: --nnodes 2 disagrees with "
                     r"scontrol show job \d+ \(NodeList=\S+\), which has 1 "
                     r"node", r.stderr), describe(r, cluster)
    assert not out.exists()


def resolves(name):
    try:
        socket.gethostbyname(name)
        return True
    except OSError:
        return False


@pytest.mark.skipif(not have_torch(), reason="/usr/bin/python3 has no torch")
def test_sbatch_example_allreduce(cluster, hpr, marker, tmp_path):
    """examples/slurm/train.sbatch itself, on one node, without HyperPod's
    --auto-resume (AUTO_RESUME empty): the workers all-reduce with the
    node's name as MASTER_ADDR."""
    if not resolves(cluster.node):
        pytest.skip(f"this machine's name {cluster.node} does not resolve, "
                    "so workers cannot use it as MASTER_ADDR")
    output = tmp_path / "job.out"
    env = dict(cluster.env)
    env.update({"PYTHON_EXEC": PYTHON, "HPR_TEST_MARKER": marker,
                "AUTO_RESUME": "", "NPROC_PER_NODE": "2",
                "LOG_DIR": str(tmp_path / "logs"),
                "RULES": str(SOURCE_ROOT / "examples" / "rules" / "rules.json"),
                "PYTHONDONTWRITEBYTECODE": "1"})
    r = subprocess.run([find("sbatch"), "--parsable", "-N1",
                        f"--output={output}", str(SBATCH_EXAMPLE),
                        str(EXAMPLE)],
                       env=env, capture_output=True, text=True, timeout=30,
                       cwd=tmp_path)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{cluster.logs()}"
    job_id = r.stdout.strip().split(";")[0]
    # sbatch --wait would do, but it sleeps up to 10 s between looks.
    state = {}

    def finished():
        q = subprocess.run([find("scontrol"), "--oneliner", "show", "job",
                            job_id], env=cluster.env, capture_output=True,
                           text=True, timeout=10)
        state.update(re.findall(r"(JobState|ExitCode)=(\S+)", q.stdout))
        return state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED",
                                         "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
    wait_until(finished, 180, f"job {job_id} to end", cluster.logs)
    text = output.read_text() if output.exists() else ""
    assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), (
        f"{state}\n--- job output ---\n{text}\n{cluster.logs()}")
    # The console prefix names the node: every node writes to one file.
    by_rank = worker_lines(text.encode(), rb"\[" +
                           re.escape(socket.gethostname().encode()) +
                           rb"\] \[default(\d+)\]:")
    assert by_rank.get(0) == [b"rank 0/2 (local 0): all_reduce sum = 3"], text
    assert by_rank.get(1) == [b"rank 1/2 (local 1): all_reduce sum = 3"], text
    # Per-rank files under the node's own folder, the seed's rules loaded.
    logs = tmp_path / "logs" / socket.gethostname()
    assert list(logs.glob(f"{job_id}_*/attempt_0/1/stdout.log")), text
    assert "6 log rules from" in text, text
    assert re.search(rf"rendezvous: slurm: node 0 of 1, master "
                     rf"{re.escape(cluster.node)}:(\d+), from scontrol show "
                     rf"job (\d+)", text), text


def test_node_fault_asks_slurm_for_a_new_node(cluster, hpr, marker, tmp_path):
    """--node-fault-action replace: a permanent kernel log record makes
    hyperpodrun run scontrol update ... state=fail reason=Action:Replace,
    which HyperPod reads as a request for a new node. The node is resumed
    afterwards, for the tests that follow."""
    import threading

    from test_node_health import DMA, NEURON, WORKER as HEALTH_WORKER
    from test_node_health import Fifo, record

    fifo = Fifo(tmp_path / "kmsg")
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(HEALTH_WORKER)
    script.chmod(0o755)

    def inject():
        end = time.monotonic() + 60
        while not (work / "started0").exists() and time.monotonic() < end:
            time.sleep(0.02)
        fifo.write(record(DMA))

    def node_info():
        q = subprocess.run([find("scontrol"), "--oneliner", "show", "node",
                            cluster.node], env=cluster.env,
                           capture_output=True, text=True, timeout=10)
        return q.stdout

    t = threading.Thread(target=inject, daemon=True)
    t.start()
    try:
        r = srun_hyperpodrun(cluster, marker, tmp_path, "--nproc-per-node",
                             "1", "--node-problem-config", NEURON, "--kmsg",
                             fifo.path, "--node-fault-action", "replace",
                             script, work)
        t.join(10)
        assert r.returncode == 123, describe(r, cluster)
        assert (f"--node-fault-action: scontrol update nodename="
                f"{cluster.node} state=fail reason=Action:Replace") in r.stderr
        assert "--node-fault-action: scontrol succeeded" in r.stderr, \
            describe(r, cluster)
        info = node_info()
        assert "Reason=Action:Replace" in info, info
        assert re.search(r"State=\S*FAIL", info), info
    finally:
        subprocess.run([find("scontrol"), "update",
                        f"nodename={cluster.node}", "state=resume"],
                       env=cluster.env, capture_output=True, timeout=10)
        wait_until(lambda: re.search(r"State=IDLE ", node_info()), 60,
                   f"node {cluster.node} to be idle again", cluster.logs)
