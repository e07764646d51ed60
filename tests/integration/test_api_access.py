# SPDX-License-Identifier: Apache-2.0
"""Who can reach the HTTP API: the optional shared secret of operator mode
(--server-token-file) and the loopback default of the self-driven modes'
read-only routes."""

import errno
import os
import re
import signal
import socket

import pytest

from conftest import deadline_poll
from test_operator import Agent

TOKEN = "s3cr3t-Token_0123456789abcdef"


def token_file(tmp_path, text=TOKEN + "\n", mode=0o600):
    path = tmp_path / "token"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_token_required_for_every_route_but_healthz(hpr, tmp_path):
    a = Agent(hpr, tmp_path, ["--server-token-file", token_file(tmp_path)])
    # No header, another scheme, a wrong token, a prefix of the right one,
    # the right one with something after it: 401, and nothing happens.
    for hdrs in ({}, {"Authorization": f"Basic {TOKEN}"},
                 {"Authorization": "Bearer wrong"},
                 {"Authorization": f"Bearer {TOKEN[:-1]}"},
                 {"Authorization": f"Bearer {TOKEN}x"},
                 {"Authorization": f"Bearer{TOKEN}"}):
        for method, path in (("GET", "/status"), ("GET", "/metrics"),
                             ("POST", "/start"), ("POST", "/shutdown"),
                             ("POST", "/debug/stacks"), ("GET", "/nope")):
            code, h, body = a.request(method, path, headers=hdrs)
            assert code == 401, (hdrs, method, path, code, body)
            assert h["www-authenticate"] == "Bearer"
            assert b"--server-token-file" in body
    assert a.proc.poll() is None
    # The kubelet's probes carry no secret.
    code, _, body = a.request("GET", "/healthz")
    assert (code, body) == (200, b"ok\n")
    good = {"Authorization": f"Bearer {TOKEN}"}
    code, _, body = a.request("GET", "/status", headers=good)
    assert code == 200, body
    # The scheme in any case, blanks around the token.
    code, _, _ = a.request("GET", "/status",
                           headers={"Authorization": f"bearer   {TOKEN} "})
    assert code == 200
    err = a.proc.console_err().decode()
    # Logged at 1, 2, 4, 8, ...: a flood does not fill the log.
    assert "GET /status from 127.0.0.1:" in err
    assert "401, no Authorization header (1 such request so far)" in err
    assert err.count(": 401, ") == 6, err
    code, _, _ = a.request("POST", "/shutdown", headers=good)
    assert code == 200
    assert a.proc.wait(30).rc == 0


@pytest.mark.parametrize("mode,why", [
    (0o644, "readable by others"),
    (0o602, "writable by its group or others"),
    (0o620, "writable by its group or others")])
def test_token_file_others_can_use_is_refused(hpr, tmp_path, mode, why):
    path = token_file(tmp_path, mode=mode)
    r = hpr.run(["--server-host", "127.0.0.1", "--server-port", "0",
                 "--rdzv-conf", f"resource_config_dir={tmp_path / 'rc'}",
                 "--server-token-file", path, "--no-python", "true"])
    assert r.rc == 2, r.describe()
    assert f"--server-token-file '{path}' (mode {mode:04o}" in r.err
    assert why in r.err and "chmod 600" in r.err


@pytest.mark.parametrize("text,why", [("", "is empty"),
                                      ("two words\n", "visible ASCII")])
def test_token_file_bad_content_is_refused(hpr, tmp_path, text, why):
    path = token_file(tmp_path, text=text)
    r = hpr.run(["--standalone", "--server-port", "0",
                 "--server-token-file", path, "--no-python", "true"])
    assert r.rc == 2, r.describe()
    assert f"--server-token-file '{path}'" in r.err and why in r.err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown the file "
                    "to another uid")
def test_token_file_of_another_user_is_refused(hpr, tmp_path):
    path = token_file(tmp_path)
    os.chown(path, 65534, 65534)
    r = hpr.run(["--standalone", "--server-port", "0",
                 "--server-token-file", path, "--no-python", "true"])
    assert r.rc == 2, r.describe()
    assert "owner uid 65534) is owned by another user" in r.err


def non_loopback_ip():
    """An IPv4 address of this machine that is not loopback, or None."""
    candidates = set()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # No packet is sent: this only picks the outgoing address.
            s.connect(("10.255.255.255", 1))
            candidates.add(s.getsockname()[0])
    except OSError:
        pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None,
                                       socket.AF_INET):
            candidates.add(info[4][0])
    except OSError:
        pass
    for ip in sorted(candidates):
        if not ip.startswith("127.") and ip != "0.0.0.0":
            return ip
    return None


def connect(ip, port):
    """0, or the errno of a TCP connect to ip:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        return s.connect_ex((ip, port))


def test_self_driven_api_binds_loopback_by_default(hpr, tmp_path):
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    done = tmp_path / "done"
    script = tmp_path / "w.py"
    script.write_text("import os, time\n"
                      "while not os.path.exists(os.environ['DONE']):\n"
                      "    time.sleep(0.02)\n")
    p = hpr.start(["--standalone", "--nproc-per-node", "1",
                   "--server-port", "0", script], env={"DONE": done})
    m = deadline_poll(lambda: re.search(
        rb"read-only API \(/status, /metrics, /healthz\) listening on "
        rb"http://([0-9.]+):(\d+)", p.console_err()), 15, what="the API")
    port = int(m.group(2))
    assert connect(ip, port) == errno.ECONNREFUSED, \
        f"another host reaches the API through {ip}:{port}"
    assert connect("127.0.0.1", port) == 0
    assert m.group(1) == b"127.0.0.1", p.console_err()
    done.write_text("")
    assert p.wait(60).rc == 0


def test_operator_mode_still_binds_every_address(hpr, tmp_path):
    """The operator reaches the agent from its own pod, as with the
    reference: 0.0.0.0 stays the default there."""
    p = hpr.start(["--server-port", "0", "--rdzv-conf",
                   f"resource_config_dir={tmp_path / 'rc'}",
                   "--no-python", "true"])
    deadline_poll(lambda: re.search(rb"operator API listening on "
                                    rb"http://0\.0\.0\.0:\d+",
                                    p.console_err()), 15, what="the API")
    p.signal(signal.SIGTERM)
    p.wait(30)
