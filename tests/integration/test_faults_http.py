# SPDX-License-Identifier: Apache-2.0
"""Hostile clients and hostile rule files, as a user would meet them: the
operator must still reach the agent while idle sockets or a slowloris
hold its port, a huge invalid body gets a short 422, and rule files that
would expand without bound are refused quickly, naming the file and the
limit. All on loopback, with bounded counts and times."""

import http.client
import json
import os
import socket
import subprocess
import sys
import time

from conftest import HYPERPODRUN, helper
from test_operator import Agent

MAX_CONNECTIONS = 64


def get(port, path, timeout=3.0):
    """The status of GET path on a new connection, or the error."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException) as e:
        return repr(e)
    finally:
        conn.close()


def probe(port, tries, pause):
    """/healthz and, every fourth time, /status, pause seconds apart so
    that they spread over an attack; returns the failures."""
    failures = []
    for i in range(tries):
        path = "/status" if i % 4 == 3 else "/healthz"
        status = get(port, path)
        if status != 200:
            failures.append((path, status))
        time.sleep(pause)
    return failures


def test_idle_sockets_do_not_lock_the_operator_out(hpr, tmp_path):
    a = Agent(hpr, tmp_path)
    idle = []
    try:
        # More sockets than the server serves, none sending a byte.
        for _ in range(MAX_CONNECTIONS + 16):
            idle.append(socket.create_connection(("127.0.0.1", a.port), 5))
        failures = probe(a.port, 20, 0.0)
        assert failures == [], (f"{len(failures)} of 20 failed: "
                                f"{failures[:4]}")
    finally:
        for s in idle:
            s.close()
    assert a.shutdown().rc == 0


def test_slowloris_does_not_lock_the_operator_out(hpr, tmp_path):
    a = Agent(hpr, tmp_path)
    # It stops by itself after 60 s, long after the probes.
    attack = subprocess.Popen(
        [sys.executable, str(helper("slowloris.py")), str(a.port), "200",
         "0.25", "60"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert attack.stdout.readline().strip() == "ready"
        failures = probe(a.port, 20, 0.2)
        # Every probe ran under the attack.
        assert attack.poll() is None, "the slowloris ended early"
        attack.terminate()
        out = attack.communicate(timeout=30)[0]
    finally:
        if attack.poll() is None:
            attack.kill()
            attack.wait()
    print(f"slowloris: {out.strip()}; /healthz and /status: "
          f"{20 - len(failures)} of 20 answered")
    assert failures == [], f"{len(failures)} of 20 failed: {failures[:4]}"
    assert a.status()["status"] == "ready"
    assert a.shutdown().rc == 0


def test_huge_invalid_body_gets_a_short_422(hpr, tmp_path):
    a = Agent(hpr, tmp_path)
    # Valid JSON, but every required field is missing: each of the five
    # errors would echo the whole 900 KB body.
    code, _, body = a.post("/start", {"pad": "x" * 900_000})
    assert code == 422
    assert len(body) < 16 * 1024, f"a {len(body)}-byte 422"
    detail = json.loads(body)["detail"]
    # In the reference validator's order (test_conformance checks it).
    assert [e["loc"][-1] for e in detail] == [
        "rank", "nnodes", "faultCount", "master_addr", "master_port"]
    assert all(e["input"] == "(an object of 1 members, over the 1024-byte "
               "echo limit)" for e in detail), detail[0]
    # Not JSON at all: the start of it, and its size.
    code, _, body = a.post("/start", raw=b"y" * 900_000,
                           headers={"Content-Type": "text/plain"})
    assert code == 422
    text = json.loads(body)["detail"][0]["input"]
    assert text.startswith("y" * 512)
    assert text.endswith("... (900000 bytes in all, over the 1024-byte echo "
                         "limit)")
    # The agent goes on as before.
    assert a.status()["status"] == "ready"
    assert a.shutdown().rc == 0


def alias_bomb():
    """370 KB: one 100 KB anchor aliased 90,000 times (9 GB expanded)."""
    return (b'x: &a "' + b"x" * 100_000 + b'"\nspec:\n  runPolicy:\n'
            b"    logMonitoringConfiguration: [" + b"*a," * 90_000 + b"]\n")


HOSTILE_RULES = [
    # (what, file content, the message after "<file>:")
    ("alias bomb", alias_bomb(),
     "expands to more than 16777216 bytes (aliases included)"),
    ("20,000 nested [", b"logMonitoringConfiguration: " + b"[" * 20_000,
     "1:92: nested deeper than 64 levels"),
    ("over 1 MiB", b"# " + b"x" * (1 << 20) + b"\n",
     " larger than 1048576 bytes"),
]


def test_hostile_rule_files_are_refused(hpr, tmp_path):
    for what, content, message in HOSTILE_RULES:
        rules = tmp_path / "job.yaml"
        rules.write_bytes(content)
        started = time.monotonic()
        with subprocess.Popen([HYPERPODRUN, "--replay", "-",
                               "--log-monitoring-config", str(rules)],
                              stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=hpr.env,
                              cwd=hpr.tmp) as proc:
            stderr = proc.stderr.read()
            # This child's own peak RSS, which wait() does not give.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.monotonic() - started
        rss = usage.ru_maxrss
        err = stderr.decode(errors="replace")
        print(f"{what}: exit {proc.returncode} after {elapsed:.2f} s, "
              f"peak RSS {rss // 1024} MiB: {err.strip()}")
        assert proc.returncode == 2, err
        assert f"{rules}:" in err and message in err, err
        # Far below the gigabytes the file asks for.
        assert rss < 256 * 1024, f"{what}: a peak RSS of {rss} KiB"
