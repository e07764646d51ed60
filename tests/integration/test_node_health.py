# SPDX-License-Identifier: Apache-2.0
"""Node health: the kernel log read with node-problem-detector's rules
(--node-problem-config, the configs in examples/node-problem/).

Records reach hyperpodrun the way the kernel gives them: written to
/dev/kmsg as the AWS Neuron fault-injection procedure does (`echo
"NEURON_HW_ERR=DMA_ERROR ..." > /dev/kmsg`), which needs root and is
skipped only where /dev/kmsg is not writable, or through a FIFO named with
--kmsg, fed records in the /dev/kmsg format, which runs everywhere."""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import SOURCE_ROOT, deadline_poll, wait_for_files, write_exec
from test_operator import Agent

EXAMPLES = Path(SOURCE_ROOT) / "examples" / "node-problem"
NEURON = EXAMPLES / "neuron.json"
XID = EXAMPLES / "nvidia-xid.json"
EFA = EXAMPLES / "efa.json"
NODE_FAULT_EXIT = 123

# As the Neuron runtime has the driver print it, and as the Neuron docs
# inject it (echo ... > /dev/kmsg): the record starts with it.
DMA = "NEURON_HW_ERR=DMA_ERROR instance-id=i-0592464924bd45322 nd-id=0 nc-id=3"
XID79 = ("NVRM: Xid (PCI:0000:10:1c): 79, pid=4242, name=python, "
         "GPU has fallen off the bus.")
XID13 = ("NVRM: Xid (PCI:0000:10:1c): 13, pid=4242, name=python, "
         "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)")
# What the kernel printed (x86-64, Linux 6.18) when an unprivileged binary
# named "NVRM: Xid (PCI:0000:3b:00.0): 79, pid=1" crashed: its command name
# (15 bytes) starts the record, its file name is in the middle, and the
# shipped rules before anchoring took it for an Xid 79.
FORGED_SEGFAULT = ("NVRM: Xid (PCI:[4265]: segfault at 0 ip 000055ab57273139 "
                   "sp 00007ffc97715db0 error 4 in NVRM: Xid "
                   "(PCI:0000:3b:00.0): 79, pid=1[1139,55ab57273000+1000] "
                   "likely on CPU 1 (core 1, socket 0)")
FORGED_CODE = ("Code: 2e 00 00 01 5d c3 0f 1f 00 c3 0f 1f 80 00 00 00 00 f3 "
               "0f 1e fa e9 77 ff ff ff 55 48 89 e5 48 c7 45 f8 00 00 00 00 "
               "48 8b 45 f8 <8b> 00 5d c3 00 00 00 48 83 ec 08 48 83 c4 08 "
               "c3 00 00 00 00 00 00")

WORKER = """#!/usr/bin/env python3
import os, sys, time
d = sys.argv[1]
rank = os.environ["LOCAL_RANK"]
open(os.path.join(d, "started" + rank), "w").close()
end = time.monotonic() + 60
i = 0
while time.monotonic() < end and not os.path.exists(os.path.join(d, "go")):
    print("step", i, flush=True)
    i += 1
    time.sleep(0.02)
"""


def boot_usec():
    """Now on CLOCK_BOOTTIME, the clock of a kmsg record's timestamp."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1e6)


def record(msg, usec=None, seq=1, prio=3):
    return f"{prio},{seq},{boot_usec() if usec is None else usec},-;{msg}\n"


class Fifo:
    """A FIFO standing for /dev/kmsg, and a writer that keeps it open."""

    def __init__(self, path):
        self.path = Path(path)
        os.mkfifo(self.path)

    def write(self, text):
        # hyperpodrun holds the FIFO open for reading from its start, so
        # opening it for writing does not wait.
        fd = os.open(self.path, os.O_WRONLY)
        try:
            data = text.encode()
            while data:
                n = os.write(fd, data)
                data = data[n:]
        finally:
            os.close(fd)


# An old record: logged at boot, so older than the start minus the 1 s
# lookback of lookback_config()'s copies on any machine, booted a minute
# ago or a year ago.
OLD_USEC = 0


def lookback_config(tmp_path, config, lookback="1s"):
    """A copy of an example config with a short lookback window, so that
    an old record needs no long uptime."""
    data = json.loads(Path(config).read_text())
    data["lookback"] = lookback
    copy = tmp_path / f"lookback-{Path(config).name}"
    copy.write_text(json.dumps(data))
    return copy


def worker(tmp_path):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return write_exec(tmp_path / "worker.py", WORKER), work


def start_self_driven(hpr, tmp_path, kmsg, configs, nproc=2, extra=()):
    script, work = worker(tmp_path)
    proc = hpr.start(["--standalone", "--nproc-per-node", nproc,
                      "--max-restarts", "3",
                      "--node-problem-config", ",".join(map(str, configs)),
                      *(["--kmsg", kmsg] if kmsg else []), *extra,
                      script, work])
    wait_for_files([work / f"started{i}" for i in range(nproc)], proc=proc)
    return proc, work


@pytest.mark.parametrize("config,line,reason", [
    (NEURON, DMA, "NodeFault_NeuronHasError_DMA_ERROR"),
    (XID, XID79, "NodeFault_Xid79FallenOffTheBus"),
])
def test_fifo_permanent_self_driven(hpr, tmp_path, config, line, reason):
    fifo = Fifo(tmp_path / "kmsg")
    proc, _ = start_self_driven(hpr, tmp_path, fifo.path, [NEURON, XID])
    fifo.write(record(line) + " SUBSYSTEM=pci\n DEVICE=+pci:0000:10:1c.0\n")
    r = proc.wait(30)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert f"{reason}: the kernel log reports a hardware fault" in r.err
    assert line in r.err
    # No restart on a broken node, whatever --max-restarts says.
    assert "restarting" not in r.err and "attempt 1" not in r.err, r.err


def test_fifo_temporary_counts_and_old_records_ignored(hpr, tmp_path):
    """A temporary rule only logs and counts; a permanent record from
    before the start (minus the config's lookback) is not a fault, nor is
    one whose timestamp is broken (negative, not a number): those are
    counted as malformed and the first is logged."""
    fifo = Fifo(tmp_path / "kmsg")
    configs = [lookback_config(tmp_path, NEURON),
               lookback_config(tmp_path, XID)]
    proc, work = start_self_driven(hpr, tmp_path, fifo.path, configs,
                                   extra=["--server-port", "0",
                                          "--server-host", "127.0.0.1"])
    port = int(deadline_poll(
        lambda: re.search(rb"listening on http://127\.0\.0\.1:(\d+)",
                          proc.console_err()), 10, what="the port").group(1))
    old = OLD_USEC
    fifo.write(record(DMA, usec=old, seq=1) + record(XID79, usec=old, seq=2)
               + record(XID79 + " negative", usec=-129185342, seq=3)
               + record(XID79 + " not a number", usec="12x4", seq=4)
               + record(XID13, seq=5))

    import http.client

    def metrics():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
        c.close()
        return body

    def counted():
        m = metrics()
        return m if 'problem_counter{reason="Xid13GraphicsEngineException"} 1' in m else None

    m = deadline_poll(counted, 15, what="the Xid 13 count")
    assert 'problem_counter{reason="NeuronHasError_DMA_ERROR"} 0' in m
    assert 'problem_counter{reason="Xid79FallenOffTheBus"} 0' in m
    assert ('problem_gauge{type="NeuronHealth",'
            'reason="NeuronHasError_DMA_ERROR"} 0') in m
    # The two old records, once for each config.
    assert 'hyperpodrun_kmsg_records_total{result="old"} 4' in m
    assert 'hyperpodrun_kmsg_records_total{result="read"} 3' in m
    assert 'hyperpodrun_kmsg_records_total{result="malformed"} 2' in m
    (work / "go").touch()
    r = proc.wait(30)
    assert r.rc == 0, r.describe()
    assert "Xid13GraphicsEngineException (temporary)" in r.err
    assert "NodeFault" not in r.err
    assert r.err.count("ignoring a record whose sequence number or "
                       "timestamp is not a decimal number") == 1, r.err
    assert "-129185342" in r.err and "12x4" not in r.err


def test_fifo_burst_then_fault(hpr, tmp_path):
    """10 MB of kernel noise in one go: the workers' output all arrives and
    the permanent record after it is still seen. (How much the burst costs
    the workers is measured in bench/bench_kmsg.py.)"""
    fifo = Fifo(tmp_path / "kmsg")
    proc, work = start_self_driven(hpr, tmp_path, fifo.path, [NEURON, XID])
    noise = "".join(record(f"usb 1-1: noise line {i} " + "x" * 60, seq=i)
                    for i in range(120000))
    assert len(noise) > 10 * 1000 * 1000
    fifo.write(noise + record(DMA, seq=200000))
    r = proc.wait(60)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert "NodeFault_NeuronHasError_DMA_ERROR" in r.err


def test_bad_config_and_kmsg_are_errors(hpr, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules":[{"type":"permanent","reason":"X",'
                   '"pattern":"x"}]}')
    script, work = worker(tmp_path)
    r = hpr.run(["--standalone", "--node-problem-config", bad, script, work])
    assert r.rc == 2
    assert f"--node-problem-config '{bad}': rules[0] is permanent but names " \
           "no \"condition\"" in r.err
    r = hpr.run(["--standalone", "--node-problem-config", NEURON, "--kmsg",
                 tmp_path / "absent", script, work])
    assert r.rc == 2
    assert f"--kmsg: cannot read the kernel log '{tmp_path / 'absent'}'" in r.err
    r = hpr.run(["--standalone", "--kmsg", tmp_path / "x", script, work])
    assert r.rc == 2
    assert "--kmsg was given without --node-problem-config" in r.err
    assert not (work / "started0").exists()


@pytest.mark.parametrize("plugin", ["journald", "filelog"])
def test_other_npd_plugins_are_refused(hpr, tmp_path, plugin):
    """A journald or log-file monitor config is refused, never run
    against the kernel log."""
    conf = json.loads(Path(NEURON).read_text())
    conf["plugin"] = plugin
    conf["logPath"] = "/var/log/journal" if plugin == "journald" \
        else "/var/log/syslog"
    path = tmp_path / f"{plugin}.json"
    path.write_text(json.dumps(conf))
    script, work = worker(tmp_path)
    r = hpr.run(["--standalone", "--node-problem-config",
                 f"{NEURON},{path}", script, work])
    assert r.rc == 2, r.describe()
    assert f"--node-problem-config '{path}': \"plugin\" is '{plugin}': " \
        "hyperpodrun reads only the kernel log" in r.err
    assert not (work / "started0").exists()


def test_unreadable_kmsg_warns_and_runs_on(hpr, tmp_path):
    """An unprivileged container: /dev/kmsg unreadable. Shown without
    CAP_SYSLOG (setpriv), where the kernel restricts it to that."""
    try:
        restrict = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip()
    except OSError:
        restrict = "0"
    if restrict != "1":
        pytest.skip("kernel.dmesg_restrict is 0: every user can read "
                    "/dev/kmsg here")
    script, work = worker(tmp_path)
    (work / "go").touch()
    r = hpr.run(["--standalone", "--node-problem-config", NEURON, script,
                 work], wrapper=["setpriv", "--bounding-set=-syslog",
                                 "--inh-caps=-syslog"])
    assert r.rc == 0, r.describe()
    assert "cannot read the kernel log '/dev/kmsg'" in r.err
    assert "CAP_SYSLOG" in r.err
    assert r.err.count("cannot read the kernel log") == 1


def test_operator_sees_node_fault(hpr, tmp_path):
    fifo = Fifo(tmp_path / "kmsg")
    a = Agent(hpr, tmp_path, ["--node-problem-config", f"{NEURON},{XID}",
                              "--kmsg", fifo.path],
              env={"OPW_MODE": "wait_file"})
    a.start()
    a.wait_status("running")
    fifo.write(record(XID13, seq=1))
    fifo.write(record(XID79, seq=2))
    st = a.wait_status("faulted")
    assert st["reason"] == "NodeFault_Xid79FallenOffTheBus"
    assert XID79 in st["message"]
    assert "hardware fault on this node" in st["message"]
    code, _, body = a.request("GET", "/metrics")
    m = body.decode()
    assert 'problem_counter{reason="Xid79FallenOffTheBus"} 1' in m
    assert 'problem_counter{reason="Xid13GraphicsEngineException"} 1' in m
    assert ('problem_gauge{type="GPUHealth",'
            'reason="Xid79FallenOffTheBus"} 1') in m
    code, _, _ = a.post("/stop")
    assert code == 200
    a.wait_status("ready")
    r = a.shutdown()
    assert r.rc == 0, r.describe()


def kmsg_writable():
    try:
        with open("/dev/kmsg", "w"):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not kmsg_writable(),
                    reason="/dev/kmsg is not writable here (not root, or "
                           "no /dev/kmsg); the FIFO tests cover the rest")
@pytest.mark.parametrize("line,reason", [
    (DMA, "NodeFault_NeuronHasError_DMA_ERROR"),
    (XID79, "NodeFault_Xid79FallenOffTheBus"),
])
def test_dev_kmsg_self_driven(hpr, tmp_path, marker, line, reason):
    """The real kernel log, written by root as the Neuron docs inject a
    fault (`echo "NEURON_HW_ERR=DMA_ERROR ..." > /dev/kmsg`): such a record
    is the echoed text, and the anchored rules take it. The rules are the
    shipped ones, narrowed (narrowed_configs())."""
    configs = narrowed_configs(tmp_path, marker, [NEURON, XID])
    # Written before the start: must not count.
    with open("/dev/kmsg", "w") as k:
        k.write(f"{line} {marker} before\n")
    proc, work = start_self_driven(hpr, tmp_path, None, configs)
    # The seed's fault injection: one write of the message.
    with open("/dev/kmsg", "w") as k:
        k.write(f"{line} {marker} after\n")
    r = proc.wait(30)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert f"{reason}: the kernel log reports a hardware fault" in r.err
    assert f"{marker} after" in r.err
    assert f"{marker} before" not in r.err


def narrowed_configs(tmp_path, marker, sources):
    """The shipped configs, each pattern narrowed to this test's marker so
    that another run's records on the same machine cannot trip it, and
    without the 5 m lookback, so that only records newer than the start
    count."""
    configs = []
    for src in sources:
        conf = json.loads(src.read_text())
        del conf["lookback"]
        for rule in conf["rules"]:
            rule["pattern"] += re.escape(marker) + ".*"
        path = tmp_path / src.name
        path.write_text(json.dumps(conf))
        configs.append(path)
    return configs


def test_fifo_forged_records_are_not_faults(hpr, tmp_path):
    """Records an unprivileged process can cause, carrying a driver's text:
    a crash of a binary named as an Xid line (the kernel's segfault line,
    as it printed it), a user's syslog line forwarded to the kernel log,
    and the text inside another kernel message. None is a node fault with
    the shipped rules; the genuine record after them still is."""
    fifo = Fifo(tmp_path / "kmsg")
    proc, _ = start_self_driven(hpr, tmp_path, fifo.path, [NEURON, XID, EFA])
    forged = [
        FORGED_SEGFAULT, FORGED_CODE,
        f"root[4321]: {XID79}",
        f"python3[4321]: {DMA}",
        "audit: type=1701 audit(1700000000.123:42): auid=1000 uid=1000 "
        f"gid=1000 ses=3 pid=4265 comm=\"NEURON_HW_ERR=D\" exe=\"/tmp/{DMA}\""
        " sig=11 res=1",
        "efa 0: x[4265]: segfault at 0 ip 000055ab57273139 sp "
        "00007ffc97715db0 error 4 in Failed to reset "
        "device[1139,55ab57273000+1000]",
    ]
    # Xid 13 is a temporary rule: logged, and the sign that every record
    # before it was read.
    fifo.write("".join(record(m, seq=i, prio=6) for i, m in enumerate(forged))
               + record(XID13, seq=len(forged)))
    deadline_poll(lambda: b"Xid13GraphicsEngineException (temporary)"
                  in proc.console_err(), 30, what="the Xid 13 record")
    assert proc.poll() is None, proc.describe()
    assert b"NodeFault" not in proc.console_err(), proc.describe()
    fifo.write(record(XID79, seq=len(forged) + 1))
    r = proc.wait(30)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert "NodeFault_Xid79FallenOffTheBus: the kernel log" in r.err
    assert XID79 in r.err and "segfault" not in r.err


def test_unanchored_user_rule_is_warned(hpr, tmp_path):
    """A rule of the user's that any process could trip is named at start
    (the file, the rule and why); it still runs, as NPD runs it. The
    shipped configs draw no warning."""
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"bufferSize": 1, "conditions": [{"type": "C"}],
                                "rules": [{"type": "permanent",
                                           "condition": "C", "reason": "Mine",
                                           "pattern": ".*boom.*"},
                                          {"type": "temporary",
                                           "reason": "Fine",
                                           "pattern": "^boom"}]}))
    fifo = Fifo(tmp_path / "kmsg")
    proc, _ = start_self_driven(hpr, tmp_path, fifo.path,
                                [NEURON, XID, EFA, mine])
    fifo.write(record("python3[4321]: boom"))
    r = proc.wait(30)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert (f"--node-problem-config '{mine}': rules[0] (Mine): the pattern "
            "'.*boom.*' is not anchored at the start of the record") in r.err
    assert r.err.count("is not anchored") == 1, r.err
    assert "bufferSize is" not in r.err


def exception_trace_on():
    try:
        return Path("/proc/sys/debug/exception-trace").read_text().strip() \
            != "0"
    except OSError:
        return False


def kmsg_records(fd, want, timeout):
    """The first record read from fd (/dev/kmsg, non-blocking) whose text
    holds every string of want, within timeout seconds; None if none."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        select.select([fd], [], [], max(0.0, end - time.monotonic()))
        while True:
            try:
                data = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue  # records overwritten before we read them
            text = data.decode(errors="replace")
            if all(w in text for w in want):
                return text
    return None


CRASHER = "int main(void) { volatile int *p = 0; return *p; }\n"


@pytest.mark.skipif(os.geteuid() != 0,
                    reason="needs root: runs the crash as another uid and "
                           "writes /dev/kmsg")
def test_dev_kmsg_forged_segfault_is_not_a_fault(hpr, tmp_path, marker):
    """The attack itself, through the real kernel log: as uid 65534, a
    binary named as an Xid 79 line crashes, and the kernel prints its
    segfault line with that name. The agent reading /dev/kmsg with the
    shipped Xid rules runs on; a genuine-looking Xid 13 written after it
    shows the record was read."""
    if not kmsg_writable():
        pytest.skip("/dev/kmsg is not writable here")
    if not exception_trace_on():
        pytest.skip("debug.exception-trace is 0: the kernel prints no "
                    "segfault lines, so there is nothing to forge")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the crashing binary")
    configs = narrowed_configs(tmp_path, marker, [XID])
    # Another uid must reach the binary: not under pytest's 0700 tmp_path.
    d = tempfile.mkdtemp(prefix="hprtest-forge-")
    try:
        os.chmod(d, 0o755)
        exe = os.path.join(d, f"NVRM: Xid (PCI:0000:3b:00.0): 79, pid=1 "
                              f"{marker}")
        subprocess.run([cc, "-O0", "-x", "c", "-o", exe, "-"], input=CRASHER,
                       text=True, check=True)
        os.chmod(exe, 0o755)
        proc, work = start_self_driven(hpr, tmp_path, None, configs)
        kfd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        try:
            os.lseek(kfd, 0, os.SEEK_END)
            seen = None
            # The kernel rate-limits segfault lines (printk_ratelimit):
            # a few tries, each waited for.
            for _ in range(5):
                p = subprocess.run([exe], user=65534, group=65534,
                                   extra_groups=[], cwd="/")
                assert p.returncode == -signal.SIGSEGV, p.returncode
                seen = kmsg_records(kfd, ["segfault", marker], 10)
                if seen is not None:
                    break
            if seen is None:
                pytest.skip("the kernel printed no segfault line for the "
                            "crash (rate-limited?)")
        finally:
            os.close(kfd)
        # It is the attack: the driver's text, in the middle of the record.
        assert re.search(r";NVRM: Xid \(PCI:\[\d+\]: segfault at .* in "
                         r"NVRM: Xid \(PCI:0000:3b:00\.0\): 79, pid=1 ",
                         seen), seen
        with open("/dev/kmsg", "w") as k:
            k.write(f"{XID13} {marker} sync\n")
        deadline_poll(lambda: b"Xid13GraphicsEngineException (temporary)"
                      in proc.console_err(), 30, what="the Xid 13 record")
        assert proc.poll() is None, proc.describe()
        (work / "go").touch()
        r = proc.wait(30)
        assert r.rc == 0, r.describe()
        assert "NodeFault" not in r.err
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("mode,said", [
    ("fail", "--node-fault-action: scontrol failed with exit status 3"),
    ("hang", "--node-fault-action: scontrol was killed by SIGKILL (timed out)"),
])
def test_node_fault_action_failure_is_reported(hpr, tmp_path, mode, said):
    """An scontrol that fails or hangs: the failure is logged as one, the
    hang is cut at scontrol_timeout, and the node fault still ends the run
    with its own status. (The real scontrol is in test_slurm.py.)"""
    calls = tmp_path / "calls"
    scontrol = write_exec(tmp_path / "scontrol", f"""#!/bin/sh
echo "$@" >> {calls}
[ "$1" = update ] || exit 1
[ {mode} = hang ] && exec sleep 60
exit 3
""")
    env = {"SLURM_JOB_ID": 4242, "SLURM_JOBID": 4242, "SLURM_NNODES": 1,
           "SLURM_JOB_NUM_NODES": 1, "SLURM_JOB_NODELIST": "127.0.0.1",
           "SLURM_NODELIST": "127.0.0.1", "SLURM_STEP_NUM_NODES": 1,
           "SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_NODEID": 0,
           "SLURMD_NODENAME": "127.0.0.1", "SLURM_PROCID": 0,
           "SLURM_LOCALID": 0}
    fifo = Fifo(tmp_path / "kmsg")
    script, work = worker(tmp_path)
    proc = hpr.start(["--rdzv-backend", "slurm", "--rdzv-conf",
                      f"scontrol={scontrol},scontrol_timeout=1",
                      "--nproc-per-node", 1, "--node-problem-config", NEURON,
                      "--kmsg", fifo.path, "--node-fault-action", "reboot",
                      script, work], env=env)
    wait_for_files([work / "started0"], proc=proc)
    fifo.write(record(DMA))
    r = proc.wait(30)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert said in r.err, r.err
    assert "update nodename=127.0.0.1 state=fail reason=Action:Reboot" \
        in calls.read_text()


# ---- --preflight nccl, with the stand-in library --------------------------
#
# No GPU here: the all-reduce runs against libnccl-double.so, a test double
# for libnccl and libcudart (tests/fakes/), through --preflight-library.

from conftest import HYPERPODRUN  # noqa: E402

NCCL_DOUBLE = os.environ.get("HYPERPODRUN_NCCL_DOUBLE") or str(
    Path(HYPERPODRUN).resolve().parents[2] / "tests" / "libnccl-double.so")
PREFLIGHT_FAULT = "NodeFault_NCCLPreflight"


def preflight_args(*extra, library=None):
    return ["--preflight", "nccl", "--preflight-library",
            library or NCCL_DOUBLE, "--preflight-max-bytes", 1048576, *extra]


def run_preflight(hpr, tmp_path, mode, *extra, library=None):
    script, work = worker(tmp_path)
    (work / "go").touch()
    r = hpr.run(["--standalone", "--nproc-per-node", 2,
                 *preflight_args(*extra, library=library), script, work],
                env={"NCCL_DOUBLE_MODE": mode}, timeout=60)
    return r, work


def test_preflight_passes_and_workers_start(hpr, tmp_path):
    if not Path(NCCL_DOUBLE).exists():
        pytest.fail(f"{NCCL_DOUBLE} is not built (ninja -C build)")
    r, work = run_preflight(hpr, tmp_path, "ok", "--preflight-min-busbw", 1)
    assert r.rc == 0, r.describe()
    assert re.search(r"preflight: all-reduce of 1048576 bytes: [\d.]+ us, "
                     r"[\d.]+ GB/s algorithm, [\d.]+ GB/s bus bandwidth", r.err)
    assert "preflight passed: NCCL all-reduce over 2 GPUs" in r.err
    assert (work / "started0").exists() and (work / "started1").exists()
    # The check ran before the first stage.
    assert r.err.index("preflight passed") < r.err.index("attempt 0:")


@pytest.mark.parametrize("mode,extra,said", [
    ("fail", (), "the NCCL all-reduce failed: ncclAllReduce: unhandled "
                 "system error (libnccl-double)"),
    ("hang", ("--preflight-timeout", "1"),
     "the NCCL all-reduce did not finish within 1 s (--preflight-timeout) "
     "and measured nothing"),
    ("slow", ("--preflight-min-busbw", "5"),
     "reached 0.0"),
    ("nogpu", (), "no GPU visible"),
])
def test_preflight_failure_is_a_node_fault(hpr, tmp_path, mode, extra, said):
    r, work = run_preflight(hpr, tmp_path, mode, *extra)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert f"{PREFLIGHT_FAULT}: " in r.err
    assert said in r.err, r.err
    # No worker ever started on the node.
    assert not (work / "started0").exists()
    assert "attempt 0:" not in r.err


def test_preflight_missing_library_is_named(hpr, tmp_path):
    missing = tmp_path / "libnccl.so.2"
    r, work = run_preflight(hpr, tmp_path, "ok", library=missing)
    assert r.rc == 2, r.describe()
    assert f"--preflight nccl: cannot load {missing}" in r.err
    assert PREFLIGHT_FAULT not in r.err
    assert not (work / "started0").exists()


def test_preflight_operator_sees_node_fault(hpr, tmp_path):
    a = Agent(hpr, tmp_path, preflight_args("--preflight-min-busbw", 5),
              env={"OPW_MODE": "wait_file", "NCCL_DOUBLE_MODE": "slow"})
    a.start()
    st = a.wait_status("faulted")
    assert st["reason"] == PREFLIGHT_FAULT
    assert "under --preflight-min-busbw 5.000" in st["message"]
    # The source is the pre-flight check, not the kernel log.
    assert st["message"].startswith("The NCCL pre-flight check failed on "
                                    "this node (--preflight nccl): "), st
    assert "kernel log" not in st["message"], st
    code, _, body = a.request("GET", "/metrics")
    m = body.decode()
    assert "hyperpodrun_preflight_passed 0" in m
    assert 'hyperpodrun_preflight_busbw_bytes_per_second{size_bytes="1048576"}' in m
    assert "hyperpodrun_preflight_min_busbw_bytes_per_second 5000000000\n" in m
    assert not list(a.work.glob("rank*.json")), "a worker started"
    code, _, _ = a.post("/stop")
    assert code == 200
    a.wait_status("ready")
    r = a.shutdown()
    assert r.rc == 0, r.describe()


def test_operator_fault_before_start(hpr, tmp_path):
    """A fault read while READY: the next /start starts no worker and says
    FAULTED with the node fault at once."""
    fifo = Fifo(tmp_path / "kmsg")
    a = Agent(hpr, tmp_path, ["--node-problem-config", str(NEURON),
                              "--kmsg", fifo.path],
              env={"OPW_MODE": "wait_file"})
    fifo.write(record(DMA))

    def counted():
        _, _, body = a.request("GET", "/metrics")
        return 'problem_counter{reason="NeuronHasError_DMA_ERROR"} 1' in \
            body.decode()
    deadline_poll(counted, 15, what="the record to be read")
    assert a.status()["status"] == "ready"
    a.start()
    st = a.wait_status("faulted")
    assert st["reason"] == "NodeFault_NeuronHasError_DMA_ERROR"
    assert DMA in st["message"]
    assert not list(a.work.glob("rank*.json")), "a worker started"
    code, _, _ = a.post("/stop")
    assert code == 200
    a.wait_status("ready")
    assert a.shutdown().rc == 0


def test_operator_start_waits_for_preflight(hpr, tmp_path):
    """A /start that comes while the check runs: the workers start once it
    has passed."""
    a = Agent(hpr, tmp_path, preflight_args(),
              env={"OPW_MODE": "wait_file", "NCCL_DOUBLE_MODE": "slow"})
    a.start()
    deadline_poll(lambda: (a.work / "rank0-attempt0.json").exists(), 30,
                  what="the first worker")
    err = a.proc.console_err().decode()
    assert "preflight passed" in err
    code, _, body = a.request("GET", "/metrics")
    assert "hyperpodrun_preflight_passed 1" in body.decode()
    (a.work / "finish").touch()
    a.wait_status("completed")
    assert a.shutdown().rc == 0


def test_regular_file_is_tailed(hpr, tmp_path):
    """--kmsg naming a file (a saved kernel log): read from its start,
    records outside the window ignored, then followed as it grows."""
    log = tmp_path / "kern.log"
    log.write_text(record(XID79 + " old", usec=OLD_USEC, seq=1)
                   + "plain text line\n")
    proc, _ = start_self_driven(hpr, tmp_path, log,
                                [lookback_config(tmp_path, XID)])
    with open(log, "a") as f:
        f.write(record(XID79 + " new", seq=2))
    r = proc.wait(30)
    assert r.rc == NODE_FAULT_EXIT, r.describe()
    assert r.err.count("NodeFault_Xid79FallenOffTheBus: the kernel log") == 1
    assert f"{XID79} new" in r.err and f"{XID79} old" not in r.err
