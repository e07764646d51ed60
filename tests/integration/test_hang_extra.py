# SPDX-License-Identifier: Apache-2.0
"""Hang reports, the NCCL parts (--hang-dump full): torch's NCCL flight
recorder and NCCL's RAS report. No GPU here: the other side of each
protocol is a stand-in (helpers/fake_flight_recorder.py plays
ProcessGroupNCCL's dump pipe, helpers/fake_nccl_ras.py NCCL's RAS
thread), written from the protocols in torch's and NCCL's sources.
Then POST /debug/stacks, the SIGUSR2 report asked over HTTP."""

import http.client
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys

import pytest

from conftest import SOURCE_ROOT, deadline_poll, helper

TOOLS = SOURCE_ROOT / "tools"

HANG_RULE = {
    "name": "JobHangingDetection",
    "logPattern": r".*\[Epoch 0 Batch \d+.*'training_loss_step': "
                  r"(\d+(\.\d+)?).*",
    "expectedRecurringFrequencyInSeconds": 2,
    "expectedStartCutOffInSeconds": 120,
}


FR_VARS = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_BUFFER_SIZE",
           "TORCH_FR_DUMP_TEMP_FILE", "NCCL_RAS_ENABLE")


def rules(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([HANG_RULE]))
    return path


def report_of(hpr):
    with open(hpr.only_train_dir() / "attempt_0" / "hang-report.json",
              encoding="utf-8") as f:
        return json.load(f)


def refused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def ras_server(tmp_path):
    procs = []

    def start(mode, size=0):
        port_file = tmp_path / f"ras-port-{len(procs)}"
        p = subprocess.Popen([sys.executable, helper("fake_nccl_ras.py"),
                              str(port_file), mode, str(size)])
        procs.append(p)
        deadline_poll(lambda: port_file.exists() or p.poll() is not None,
                      timeout=10, what="the RAS stand-in's port")
        assert p.poll() is None
        return int(port_file.read_text())

    yield start
    for p in procs:
        p.kill()
        p.wait()


def run_fr(hpr, tmp_path, mode, extra=(), env=None, nproc=2):
    env = dict(env or {})
    env.setdefault("NCCL_RAS_ADDR", f"127.0.0.1:{refused_port()}")
    return hpr.run(["--standalone", "--nproc-per-node", str(nproc),
                    "--tee", "3", "--hang-dump", "full", *extra,
                    "--log-monitoring-config", rules(tmp_path),
                    helper("fake_flight_recorder.py"), mode],
                   env=env, unset=[v for v in FR_VARS if v not in env],
                   timeout=60)


def test_flight_recorder_dump_of_every_rank_is_in_the_report(hpr, tmp_path):
    r = run_fr(hpr, tmp_path, "serve")
    assert r.rc == 124, r.describe()
    # The workers were given the variables torch reads.
    assert "buffer=2000" in r.out, r.out
    report = report_of(hpr)
    attempt = hpr.only_train_dir() / "attempt_0"
    for x in report["ranks"]:
        fr = x["nccl_flight_recorder"]
        assert fr["status"] == "complete", x
        assert fr["pipe"].endswith(f"nccl-fr-{x['rank']}.pipe")
        assert fr["path"] == \
            str(attempt / f"nccl-flight-recorder-rank-{x['rank']}")
        with open(fr["path"], "rb") as f:
            data = f.read()
        assert fr["size"] == len(data)
        assert pickle.loads(data)["rank"] == x["rank"]
    # tools/fr_dump.py shows it, refusing anything but plain data.
    shown = subprocess.run([sys.executable, TOOLS / "fr_dump.py", fr["path"],
                            "--last", "2"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "version 2.4, 64 entries",
        "    62 pg 0 seq 62 nccl:all_reduce scheduled in [[1024]]",
        "    63 pg 0 seq 63 nccl:all_reduce scheduled in [[1024]]"]
    evil = tmp_path / "evil"
    evil.write_bytes(pickle.dumps(subprocess.Popen))
    shown = subprocess.run([sys.executable, TOOLS / "fr_dump.py", evil],
                           capture_output=True, text=True)
    assert shown.returncode == 1
    assert "refusing subprocess.Popen" in shown.stderr
    # Collected in the window, well before --hang-dump-timeout (10 s).
    assert report["collect_ms"] < 5000, report
    # Never on the console.
    assert "nccl:all_reduce" not in r.out + r.err


@pytest.mark.parametrize("mode,status", [("deaf", "no reader"),
                                         ("none", "no pipe")])
def test_a_missing_flight_recorder_costs_nothing(hpr, tmp_path, mode,
                                                 status):
    r = run_fr(hpr, tmp_path, mode, extra=("--hang-dump-timeout", "20"))
    assert r.rc == 124, r.describe()
    report = report_of(hpr)
    for x in report["ranks"]:
        fr = x["nccl_flight_recorder"]
        assert fr["status"] == status, x
        assert "path" not in fr
        assert x["python"]["status"] == "complete"
    # Nothing waited on the absent reader: the stacks' time only.
    assert report["collect_ms"] < 5000, report


@pytest.mark.parametrize("names", [
    ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
    # torch 2.8's names, which torch 2.11 reads first.
    ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"),
])
def test_the_users_flight_recorder_variables_are_kept(hpr, tmp_path, names):
    own = tmp_path / "fr"
    own.mkdir()
    buffer_name, dump_name = names
    r = run_fr(hpr, tmp_path, "serve", nproc=1, env={
        buffer_name: "7",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{own}/pipe-",
        dump_name: f"{own}/dump-"})
    assert r.rc == 124, r.describe()
    assert f"fifo stem={own}/pipe- buffer=7 dump={own}/dump-0" in r.out
    fr = report_of(hpr)["ranks"][0]["nccl_flight_recorder"]
    assert fr["status"] == "complete", fr
    assert fr["pipe"] == f"{own}/pipe-0.pipe"
    assert fr["path"] == f"{own}/dump-0"


def test_stacks_mode_leaves_the_flight_recorder_alone(hpr, tmp_path):
    r = hpr.run(["--standalone", "--tee", "3", "--log-monitoring-config",
                 rules(tmp_path), helper("fake_flight_recorder.py"), "serve"],
                unset=("TORCH_NCCL_TRACE_BUFFER_SIZE",
                       "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), timeout=60)
    assert r.rc == 124, r.describe()
    assert "fifo stem=unset buffer=0" in r.out
    report = report_of(hpr)
    assert "nccl_flight_recorder" not in report["ranks"][0]
    assert "nccl_ras" not in report


def test_the_nccl_ras_report_is_in_the_report(hpr, tmp_path, ras_server):
    port = ras_server("answer")
    r = run_fr(hpr, tmp_path, "none", nproc=1,
               env={"NCCL_RAS_ADDR": f"127.0.0.1:{port}"})
    assert r.rc == 124, r.describe()
    ras = report_of(hpr)["nccl_ras"]
    assert ras["address"] == f"127.0.0.1:{port}"
    assert ras["status"] == "complete", ras
    assert ras["report"].startswith("Job summary\n")
    assert "RUNNING" in ras["report"]
    assert "Job summary" not in r.out + r.err


def test_a_long_nccl_ras_report_is_cut_at_1_mib(hpr, tmp_path, ras_server):
    port = ras_server("answer", size=3 * 1024 * 1024)
    r = run_fr(hpr, tmp_path, "none", nproc=1,
               env={"NCCL_RAS_ADDR": f"127.0.0.1:{port}"})
    assert r.rc == 124, r.describe()
    ras = report_of(hpr)["nccl_ras"]
    assert ras["status"] == "cut at 1 MiB", ras
    assert len(ras["report"]) == 1024 * 1024


def test_a_silent_nccl_ras_is_bounded_by_the_timeout(hpr, tmp_path,
                                                     ras_server):
    port = ras_server("silent")
    r = run_fr(hpr, tmp_path, "none", nproc=1,
               extra=("--hang-dump-timeout", "2"),
               env={"NCCL_RAS_ADDR": f"127.0.0.1:{port}"})
    assert r.rc == 124, r.describe()
    report = report_of(hpr)
    assert report["nccl_ras"]["status"] == "no answer", report["nccl_ras"]
    assert "report" not in report["nccl_ras"]
    assert 2000 <= report["collect_ms"] < 4000, report


def test_no_nccl_ras_is_not_available(hpr, tmp_path):
    port = refused_port()
    r = run_fr(hpr, tmp_path, "none", nproc=1,
               env={"NCCL_RAS_ADDR": f"localhost:{port}"})
    assert r.rc == 124, r.describe()
    report = report_of(hpr)
    assert report["nccl_ras"]["status"] == "not available", report
    assert report["collect_ms"] < 5000, report


def test_a_bad_nccl_ras_addr_is_named(hpr, tmp_path):
    r = run_fr(hpr, tmp_path, "none", nproc=1,
               env={"NCCL_RAS_ADDR": "nowhere"})
    assert r.rc == 124, r.describe()
    ras = report_of(hpr)["nccl_ras"]
    assert ras["status"] == "error"
    assert ras["detail"] == ("NCCL_RAS_ADDR 'nowhere' (from the environment) "
                             "is not <ip>:<port>")


def test_nccl_ras_enable_0_is_respected(hpr, tmp_path, ras_server):
    port = ras_server("answer")
    r = run_fr(hpr, tmp_path, "none", nproc=1,
               env={"NCCL_RAS_ADDR": f"127.0.0.1:{port}",
                    "NCCL_RAS_ENABLE": "0"})
    assert r.rc == 124, r.describe()
    assert "nccl_ras" not in report_of(hpr)


# ---- POST /debug/stacks ----

READONLY_RE = re.compile(rb"read-only API \(/status, /metrics, /healthz\) "
                         rb"listening on http://127\.0\.0\.1:(\d+)")


def http_get(port, path, method="GET", headers=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    conn.request(method, path)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    hdrs = {k.lower(): v for k, v in resp.getheaders()}
    conn.close()
    return out + (hdrs,) if headers else out


def stacks(port):
    return http_get(port, "/debug/stacks", method="POST")


def stacks_taken(port, p, timeout=30):
    """POSTs until a report is taken (at most one a second): its path."""
    def taken():
        if p.poll() is not None:
            pytest.fail("hyperpodrun exited\n" + p.describe())
        code, body = stacks(port)
        if code == 202:
            return json.loads(body)["report"]
        assert code == 429, body
        return None
    return deadline_poll(taken, timeout, interval=0.1,
                         what="a stacks report taken")


def start_with_api(hpr, tmp_path, extra=(), script=None):
    if script is None:
        script = tmp_path / "w.py"
        script.write_text(
            "import os, time\n"
            "print('up', flush=True)\n"
            "while not os.path.exists(os.environ['DONE']):\n"
            "    time.sleep(0.02)\n")
    p = hpr.start(["--standalone", "--nproc-per-node", "2", "--tee", "3",
                   "--server-host", "127.0.0.1", "--server-port", "0",
                   *extra, script],
                  env={"DONE": tmp_path / "done"})
    m = deadline_poll(lambda: READONLY_RE.search(p.console_err()), 15,
                      what="the read-only API")
    deadline_poll(lambda: p.console_out().count(b"up\n") == 2 or p.poll(),
                  timeout=30, what="both workers")
    return p, int(m.group(1))


def test_debug_stacks_writes_a_report_and_stops_nothing(hpr, tmp_path):
    p, port = start_with_api(hpr, tmp_path)
    code, body = stacks(port)
    assert code == 202, body
    path = json.loads(body)["report"]
    assert path.endswith("/attempt_0/stacks-report-1.json"), path
    deadline_poll(lambda: os.path.exists(path) or p.poll() is not None,
                  timeout=30, what=path)
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    assert report["reason"] == "request"
    assert sorted(x["rank"] for x in report["ranks"]) == [0, 1]
    for x in report["ranks"]:
        assert x["python"]["status"] == "complete", x
    # The next one is numbered on.
    assert stacks_taken(port, p).endswith("stacks-report-2.json")
    # The job ran on and ends as it would have.
    assert p.poll() is None
    (tmp_path / "done").write_text("")
    r = p.wait(60)
    assert r.rc == 0, r.describe()
    assert "most recent call first" not in r.out + r.err


def test_a_second_debug_stacks_while_one_is_collected_is_429(hpr, tmp_path):
    # A worker that never answers keeps the first collection open for the
    # whole --hang-dump-timeout.
    script = tmp_path / "deaf.py"
    script.write_text(
        "import os, signal, time\n"
        "signal.signal(signal.SIGRTMIN + 6, signal.SIG_IGN)\n"
        "print('up', flush=True)\n"
        "while not os.path.exists(os.environ['DONE']):\n"
        "    time.sleep(0.02)\n")
    p, port = start_with_api(hpr, tmp_path, ("--hang-dump-timeout", "5"),
                             script=script)
    code, body = stacks(port)
    assert code == 202, body
    path = json.loads(body)["report"]

    # First the rate limit answers, then (a second on, the report not
    # written) the collection in progress.
    def busy():
        code, body, hdrs = http_get(port, "/debug/stacks", method="POST",
                                    headers=True)
        assert code == 429, body
        assert int(hdrs["retry-after"]) >= 1
        return b"being collected" in body
    deadline_poll(busy, 30, interval=0.1, what="429 being collected")
    assert not os.path.exists(path)
    deadline_poll(lambda: os.path.exists(path) or p.poll() is not None,
                  timeout=30, what=path)
    # Once written, a new one is taken.
    assert stacks_taken(port, p).endswith("stacks-report-2.json")
    (tmp_path / "done").write_text("")
    assert p.wait(60).rc == 0


@pytest.mark.parametrize("extra,detail", [
    (("--hang-dump", "off"), b"--hang-dump off"),
    (("--log-dir", "/dev/null"), b"no log files"),
])
def test_debug_stacks_is_409_where_it_makes_no_sense(hpr, tmp_path, extra,
                                                     detail):
    p, port = start_with_api(hpr, tmp_path, extra)
    code, body = stacks(port)
    assert code == 409 and detail in body, body
    (tmp_path / "done").write_text("")
    assert p.wait(60).rc == 0
    assert not list(hpr.log_dir.rglob("stacks-report-*.json"))


def test_debug_stacks_without_a_group_is_409(hpr, tmp_path):
    # Operator mode before /start: no worker group runs.
    rc = tmp_path / "rc"
    p = hpr.start(["--server-host", "127.0.0.1", "--server-port", "0",
                   "--rdzv-conf", f"resource_config_dir={rc}",
                   "--no-python", "true"])
    m = deadline_poll(lambda: re.search(
        rb"operator API listening on http://127\.0\.0\.1:(\d+)",
        p.console_err()), 15, what="the API")
    code, body = stacks(int(m.group(1)))
    assert code == 409 and b"no worker group" in body, body
    p.signal(signal.SIGTERM)
    p.wait(30)


def test_debug_stacks_get_is_405(hpr, tmp_path):
    """A report writes a file: GET, which a crawler or a prefetch may
    send, takes none."""
    p, port = start_with_api(hpr, tmp_path)
    code, body, hdrs = http_get(port, "/debug/stacks", headers=True)
    assert code == 405, body
    assert hdrs["allow"] == "POST"
    (tmp_path / "done").write_text("")
    assert p.wait(60).rc == 0
    assert not list(hpr.log_dir.rglob("stacks-report-*.json"))


def report_files(hpr):
    return sorted(hpr.log_dir.rglob("stacks-report-*.json"),
                  key=lambda f: int(f.stem.rsplit("-", 1)[1]))


def test_debug_stacks_is_rate_limited_and_keeps_the_last_reports(
        hpr, tmp_path):
    """50 requests in a burst start one report (the rest 429 with a
    Retry-After); reports taken one after the other keep only the latest
    8 files. On main, 10 s of GETs wrote 4,194 files."""
    p, port = start_with_api(hpr, tmp_path)
    codes = []
    for _ in range(50):
        code, body, hdrs = http_get(port, "/debug/stacks", method="POST",
                                    headers=True)
        codes.append(code)
        if code == 429:
            assert int(hdrs["retry-after"]) == 1, hdrs
    # A burst that outlasts the interval on a slow machine takes a second.
    assert codes[0] == 202 and codes.count(202) <= 2, codes
    assert codes.count(429) >= 48, codes
    taken = codes.count(202)
    last = None
    while taken < 11:
        last = stacks_taken(port, p)
        taken += 1
    assert last.endswith(f"stacks-report-{taken}.json"), last
    deadline_poll(lambda: os.path.exists(last) or p.poll() is not None,
                  timeout=30, what=last)
    names = [f.name for f in report_files(hpr)]
    assert names == [f"stacks-report-{n}.json"
                     for n in range(taken - 7, taken + 1)], names
    err = p.console_err().decode()
    assert err.count("POST /debug/stacks: stacks report to") == taken
    (tmp_path / "done").write_text("")
    assert p.wait(60).rc == 0
