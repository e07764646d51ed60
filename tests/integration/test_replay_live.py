# SPDX-License-Identifier: Apache-2.0
"""The property replay exists for: for a log hyperpodrun itself recorded,
--replay reaches the verdict the live run reached, on the same rule,
local rank, state and line, at the same time to the millisecond where the
log has a clock, in every format the console is kept in. Each scenario
runs live (two --no-python workers), then its console is replayed as it
is (with ${time}), as kubectl logs --timestamps would re-emit it, as
srun --label would, without ${time}, and rank 0's own stdout.log."""

import datetime
import json
import re
import subprocess

import pytest

from conftest import HYPERPODRUN, SOURCE_ROOT, write_exec

TEMPLATE = "${time} [${role_name}${local_rank}]:"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) ")
LIVE_VERDICT = re.compile(r"log rule verdict ((\S+) \((\w+)\) by rule (.+?) "
                          r"on local rank (\d+) at (\S+Z): .*?); judged "
                          r"[\d.]+ s later(?:; last matching line: (.*)|; "
                          r"no line matched the rule yet)$")

RULES = [
    {"name": "JobStart", "logPattern": ".*Experiment configuration.*",
     "expectedStartCutOffInSeconds": 3},
    {"name": "JobHangingDetection",
     "logPattern": r".*\[Epoch 0 Batch \d+.*'training_loss_step': "
                   r"(\d+(\.\d+)?).*",
     "expectedRecurringFrequencyInSeconds": 1},
    {"name": "LowThroughputDetection",
     "logPattern": r".*\[Epoch 0 Batch \d+.*'samples\/sec': (\d+(\.\d+)?).*",
     "metricThreshold": 80, "operator": "lteq",
     "metricEvaluationDataPoints": 3},
]

# Rank 0 alone prints the banner, as real jobs do: live watches local rank
# 0 by default, and so must replay, or rank 1 would be HANGING.
BANNER = ("if rank == '0':\n"
          "    print('Experiment configuration: {}', flush=True)\n")
PROGRESS = ("for i in range({n}):\n"
            "    print(f\"[Epoch 0 Batch {{i}}] {{{{'training_loss_step': "
            "1.5, 'samples/sec': {rate}}}}}\", flush=True)\n"
            "    time.sleep(0.15)\n")
SCENARIOS = {
    "healthy": BANNER + PROGRESS.format(n=5, rate=99),
    "hung": BANNER + PROGRESS.format(n=3, rate=99) +
            "if rank == '0':\n    time.sleep(30)\n",
    "slow": BANNER + PROGRESS.format(n=2, rate=99) +
            PROGRESS.format(n=3, rate=50) + "time.sleep(30)\n",
    "never_started": "time.sleep(30)\n",
}


def run_live(hpr, tmp_path, scenario):
    script = write_exec(tmp_path / "worker.py", (
        "#!/usr/bin/python3\nimport os, time\n"
        "rank = os.environ['LOCAL_RANK']\n" + SCENARIOS[scenario]))
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    # The console as a pod's log has it: the agent's stderr and the
    # workers' tee'd stdout in one stream.
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--tee", "3", "--log-line-prefix-template", TEMPLATE,
                 "--log-monitoring-config", rules, script], timeout=60,
                wrapper=("/bin/sh", "-c", 'exec "$@" 2>&1', "sh"))
    console = r.stdout.decode(errors="replace")
    return r, rules, console


def live_verdict(console):
    found = [m for m in map(LIVE_VERDICT.search, console.splitlines()) if m]
    assert len(found) <= 1, console
    if not found:
        return None
    m = found[0]
    return {"message": m.group(1), "state": m.group(3), "rule": m.group(4),
            "local_rank": int(m.group(5)), "wall": m.group(6),
            "last_line": m.group(7)}


def replay(hpr, rules, log, *args):
    r = subprocess.run([HYPERPODRUN, "--replay", log,
                        "--log-monitoring-config", rules,
                        "--replay-format", "json", *map(str, args)],
                       capture_output=True, timeout=60, env=hpr.env)
    assert r.returncode == 0, r.stderr.decode()
    lines = [json.loads(line) for line in r.stdout.decode().splitlines()]
    return lines[:-1], lines[-1]["summary"], r.stderr.decode()


def replay_expect(hpr, rules, log, path, expectation):
    """--replay log --expect (expectation written to path), as a CI
    check runs it: the completed process."""
    path.write_text(expectation)
    return subprocess.run([HYPERPODRUN, "--replay", log,
                           "--log-monitoring-config", rules, "--expect",
                           path], capture_output=True, env=hpr.env,
                          timeout=60)


def kubectl_timestamps(console):
    """Every line behind the time the runtime read it, with nanoseconds,
    as kubectl logs --timestamps writes it."""
    out, last = [], "1970-01-01T00:00:00.000Z"
    for line in console.splitlines():
        m = STAMP.match(line)
        if m:
            last = m.group(1)
        out.append(f"{last[:-1]}123456Z {line}")
    return "\n".join(out) + "\n"


def without_time(console):
    return "\n".join(STAMP.sub("", line) for line in console.splitlines()) + "\n"


def srun_label(console):
    return "\n".join(f"0: {line}" for line in console.splitlines()) + "\n"


FORMATS = {
    "console with ${time}": (lambda c: c, "console with ${time}", True),
    "kubectl --timestamps": (kubectl_timestamps,
                             "console with kubectl --timestamps", True),
    "srun --label": (srun_label, "srun --label with ${time}", True),
    "console": (without_time, "console", False),
}


def check_formats(hpr, tmp_path, rules, console, live, stdout_log):
    """Replays console in every format, and rank 0's stdout.log, and
    compares what they reach with the live verdict."""
    has_worker_lines = "[default0]:" in console
    for name, (convert, detected, clocked) in FORMATS.items():
        log = tmp_path / f"{name.replace(' ', '_')}.log"
        log.write_text(convert(console))
        changes, summary, err = replay(hpr, rules, log)
        if has_worker_lines:  # else nothing tells the format
            assert summary["format"] == detected, (name, summary)
            assert f"read as a {detected} log" in err, err
        got = summary["verdict"]
        if live is None:
            assert got is None, (name, got)
            assert summary["state"] in ("HEALTHY", "WAITING"), (name, summary)
            # The agent's line that the job ended stops the clocks, as
            # the live rules stopped: no deadline is left pending.
            assert summary["agent_ended"] is True, (name, summary)
            assert summary["pending"] == [], (name, summary)
            if not clocked:  # --expect refuses timed rules there
                continue
            p = replay_expect(hpr, rules, log, tmp_path / "none.expect",
                              '{"state": "HEALTHY", "pending_deadline": false}')
            assert p.returncode == 0, (name, p.stdout.decode(),
                                       p.stderr.decode())
            continue
        assert got is not None, (name, console, changes)
        assert (got["rule"], got["local_rank"], got["state"]) == (
            live["rule"], live["local_rank"], live["state"]), (name, got)
        if live["state"] == "SLOW":
            assert got["line"] == live["last_line"], (name, got)
        if clocked:
            # The same words: the same times to the millisecond, the same
            # elapsed time against the same limit.
            assert got["wall"] == live["wall"], (name, got, live)
            assert got["message"] == live["message"], (name, got, live)

    # Rank 0's own stdout.log: a plain log, always judged; it has no clock,
    # so only a verdict a line makes can be reached, and --expect refuses
    # to judge the timed rules.
    changes, summary, _ = replay(hpr, rules, stdout_log)
    assert summary["format"] == "plain"
    if live is not None and live["state"] == "SLOW":
        assert (summary["verdict"]["rule"], summary["verdict"]["line"]) == (
            live["rule"], live["last_line"])
    p = replay_expect(hpr, rules, stdout_log, tmp_path / "healthy.expect",
                      '{"state": "HEALTHY"}')
    assert p.returncode == 2, p.stderr.decode()
    assert ("rule 0 (JobStart) has a time limit, but no line of "
            f"{stdout_log} has a timestamp") in p.stderr.decode()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_replay_reaches_the_live_verdict_in_every_format(hpr, tmp_path,
                                                         scenario):
    r, rules, console = run_live(hpr, tmp_path, scenario)
    live = live_verdict(console)
    if scenario == "healthy":
        assert r.rc == 0 and live is None, r.describe()
    else:
        assert r.rc == 124 and live is not None, r.describe()
        expected_rule = {"hung": "JobHangingDetection",
                         "slow": "LowThroughputDetection",
                         "never_started": "JobStart"}[scenario]
        assert (live["rule"], live["local_rank"]) == (expected_rule, 0)
    if scenario == "slow":
        # The line that made the verdict is on the console before it.
        lines = console.splitlines()
        verdict_at = next(i for i, line in enumerate(lines)
                          if "log rule verdict" in line)
        assert any(line.endswith(live["last_line"])
                   for line in lines[:verdict_at]), console
    stdout_log = hpr.only_train_dir() / "attempt_0" / "0" / "stdout.log"
    check_formats(hpr, tmp_path, rules, console, live, stdout_log)
    # The attempt directory: every rank's stdout.log, one stream each.
    _, summary, _ = replay(hpr, rules, hpr.only_train_dir() / "attempt_0")
    assert summary["format"] == "per-rank files"
    assert [s["stream"] for s in summary["streams"]] == ["0", "1"]
    if live is not None and live["state"] == "SLOW":
        assert (summary["verdict"]["rule"], summary["verdict"]["line"]) == (
            live["rule"], live["last_line"])


RECORDED = SOURCE_ROOT / "tests" / "replay"


@pytest.mark.parametrize("scenario", ["healthy", "hung", "slow",
                                      "never_started"])
def test_recorded_pytorch_jobs_replay_to_their_live_verdict(hpr, tmp_path,
                                                            scenario):
    # Real PyTorch jobs (gloo, two ranks) recorded live by
    # tests/replay/record.py: the verdict in each console is the agent's.
    console = (RECORDED / scenario / "console.log").read_text()
    live = live_verdict(console)
    expected = {"healthy": None, "hung": ("JobHangingDetection", "HANGING"),
                "slow": ("LowThroughputDetection", "SLOW"),
                "never_started": ("JobStart", "HANGING")}[scenario]
    assert (live and (live["rule"], live["state"])) == expected, console
    check_formats(hpr, tmp_path, RECORDED / "rules.json", console, live,
                  RECORDED / scenario / "stdout.log")


def test_a_hung_console_fails_a_healthy_expectation(hpr, tmp_path):
    # The case that passed before: a hung job's console checked against
    # "healthy" in CI.
    r, rules, console = run_live(hpr, tmp_path, "hung")
    assert r.rc == 124, r.describe()
    log = tmp_path / "console.log"
    log.write_text(console)
    expect = tmp_path / "healthy.expect.json"
    expect.write_text('{"state": "HEALTHY"}')
    p = subprocess.run([HYPERPODRUN, "--replay", log,
                        "--log-monitoring-config", rules, "--expect",
                        expect], capture_output=True, env=hpr.env,
                       timeout=60)
    assert p.returncode == 1, p.stderr.decode()
    assert "state of default0: expected HEALTHY, got HANGING" in \
        p.stderr.decode()

    # --replay-until verdict: judged up to where the live run stopped.
    _, summary, _ = replay(hpr, rules, log, "--replay-until", "verdict")
    assert summary["agent_verdict"] is True
    assert summary["verdict"]["rule"] == "JobHangingDetection"


@pytest.mark.parametrize("scenario", ["healthy", "hung", "slow",
                                      "never_started"])
def test_recorded_expectations_are_met_and_emitted_again(hpr, tmp_path,
                                                         scenario):
    # Golden files: each expect.json was written by --emit-expect from its
    # console, reviewed and committed. The replay must still meet it, and
    # emitting again must give the same file.
    d = RECORDED / scenario
    emitted = tmp_path / "expect.json"
    p = subprocess.run([HYPERPODRUN, "--replay", d / "console.log",
                        "--log-monitoring-config", RECORDED / "rules.json",
                        "--expect", d / "expect.json", "--emit-expect",
                        emitted, "--replay-format", "json"],
                       capture_output=True, env=hpr.env, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert f"{d / 'expect.json'}: expectation met by " in p.stderr.decode()
    assert emitted.read_text() == (d / "expect.json").read_text()


# ---- State changes: at debug, the live agent logs each one in the words
# a text replay prints it, for lines the rule threads judged as well. ------

LIVE_CHANGE = re.compile(r"hyperpodrun\[\d+\]: debug: log rule state change "
                         r"(rule .+? on local rank \d+: \w+ -> \w+ at \S+)"
                         r"(?:; line: (.*))?$")
REPLAY_CHANGE = re.compile(r"^  log rule state change (rule .+? on local "
                           r"rank \d+: \w+ -> \w+ at \S+)$")
FLOOD_RULES = [
    {"name": "Progress", "logPattern": r".*flood line \d+.*"},
    {"name": "Mark", "logPattern": r".*mark here.*"},
    {"name": "Tput", "logPattern": r".*rate (\d+).*",
     "metricThreshold": 10, "operator": "lteq",
     "metricEvaluationDataPoints": 1},
]


def by_rule(changes):
    out = {}
    for text in changes:
        m = re.match(r"rule (.+?) on local rank (\d+):", text)
        out.setdefault((m.group(1), int(m.group(2))), []).append(text)
    return out


def test_state_changes_are_logged_live_as_a_replay_prints_them(hpr,
                                                               tmp_path):
    # 20,000 lines in one write on each rank: past the first iteration's
    # lines the rules run on their own threads, which must carry each
    # state change back to the loop's log. Rank 0's rate drops to 5 for
    # one line deep in the flood (HEALTHY -> SLOW -> HEALTHY there), and
    # a mark comes late on both ranks (WAITING -> HEALTHY).
    # Rank 0's SLOW line is a verdict, which stops the job: rank 0 writes
    # it only once rank 1 has written all of its lines, so that rank 1's
    # mark is in its pipe, however the two ranks are scheduled.
    n = 20000
    done = tmp_path / "rank1-written"
    script = write_exec(tmp_path / "worker.py", (
        "#!/usr/bin/python3\nimport os, sys, time\n"
        "rank = os.environ['LOCAL_RANK']\n"
        f"lines = [f'flood line {{i}} rate ' + ('5' if i == 15000 and "
        f"rank == '0' else '50') + (' mark here' if i == 18000 else '')"
        f" for i in range({n})]\n"
        "cut = 15000 if rank == '0' else len(lines)\n"
        "sys.stdout.write('\\n'.join(lines[:cut]) + '\\n')\n"
        "sys.stdout.flush()\n"
        "if rank == '1':\n"
        f"    open({str(done)!r}, 'w').close()\n"
        "else:\n"
        f"    while not os.path.exists({str(done)!r}):\n"
        "        time.sleep(0.01)\n"
        "    sys.stdout.write('\\n'.join(lines[cut:]) + '\\n')\n"
        "    sys.stdout.flush()\n"))
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(FLOOD_RULES))
    console = tmp_path / "console.log"
    # A file takes every line, where a pipe nobody drains fast enough
    # could drop some from the console.
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--tee", "3", "--log-line-prefix-template", TEMPLATE,
                 "--log-monitor-ranks", "all",
                 "--log-monitoring-config", rules, script],
                env={"LOGLEVEL": "DEBUG"}, timeout=60,
                wrapper=("/bin/sh", "-c", f'exec "$@" >{console} 2>&1',
                         "sh"))
    text = console.read_text(errors="replace")
    assert "console lines dropped" not in text, text[-2000:]
    live = [m.group(1) for m in map(LIVE_CHANGE.search, text.splitlines())
            if m]
    p = subprocess.run([HYPERPODRUN, "--replay", console,
                        "--log-monitoring-config", rules,
                        "--log-monitor-ranks", "all",
                        "--replay-format", "text"],
                       capture_output=True, timeout=60, env=hpr.env)
    assert p.returncode in (0, 1), p.stderr.decode()
    replayed = [m.group(1) for m in
                map(REPLAY_CHANGE.match, p.stdout.decode().splitlines())
                if m]
    assert by_rule(live) == by_rule(replayed), (r.describe(), live,
                                                replayed)
    got = by_rule(live)
    # The agent's own warnings and verdicts, for a failure's message.
    said = [ln for ln in text.splitlines()
            if re.search(r"hyperpodrun\[\d+\]: (warning|error|info)", ln)]
    assert [c.split(": ")[1].split(" at ")[0]
            for c in got.get(("Tput", 0), [])] == [
        "WAITING -> HEALTHY", "HEALTHY -> SLOW", "SLOW -> HEALTHY"], (
            got, said, r.describe())
    assert [c.split(": ")[1].split(" at ")[0]
            for c in got.get(("Mark", 1), [])] == ["WAITING -> HEALTHY"], (
                got, said, r.describe())
    # The mark came on a rule thread: its line is far past the first
    # iteration's HP_RULE_INLINE_MAX lines, in the line logged with it.
    assert any(m.group(2) and "flood line 18000 " in m.group(2)
               for m in map(LIVE_CHANGE.search, text.splitlines()) if m)


def test_each_attempt_of_a_restarted_job_replays_to_its_live_verdict(
        hpr, tmp_path):
    # Three attempts (--max-restarts 2), each hung after a few steps: live,
    # every attempt starts its rules afresh and ends in its own verdict;
    # the replay of the console must start afresh at each attempt's
    # "clock started" line too, and reach the same verdicts, to the ms.
    script = write_exec(tmp_path / "worker.py", (
        "#!/usr/bin/python3\nimport os, time\n"
        "rank = os.environ['LOCAL_RANK']\n" + BANNER +
        PROGRESS.format(n=3, rate=99) +
        "if rank == '0':\n    time.sleep(30)\n"))
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python",
                 "--max-restarts", "2", "--tee", "3",
                 "--log-line-prefix-template",
                 TEMPLATE, "--log-monitoring-config", rules, script],
                timeout=90, wrapper=("/bin/sh", "-c", 'exec "$@" 2>&1', "sh"))
    console = r.stdout.decode(errors="replace")
    live = [m.group(1) for m in map(LIVE_VERDICT.search,
                                    console.splitlines()) if m]
    assert len(live) == 3, r.describe()
    assert console.count("log rules: clock started at ") == 3, console
    log = tmp_path / "console.log"
    log.write_text(console)
    _, summary, _ = replay(hpr, rules, log)
    assert [v["message"] for v in summary["verdicts"]] == live, (
        summary, live)
    assert summary["verdict"]["message"] == live[0]


# ---- Captures whose stamps lag the agent, and logs that end before a
# deadline. ----------------------------------------------------------------

AGENT_AT = re.compile(r"^hyperpodrun\[\d+\]: .* at (\d{4}-\d\d-\d\dT\d\d:\d\d:"
                      r"\d\d\.\d{3}Z)")


def kubectl_late(console, skew_ms):
    """The console of a job recorded without ${time}, as kubectl logs
    --timestamps writes it: each line stamped (RFC 3339, nanoseconds) when
    the runtime read it, skew_ms after the agent wrote it. When the agent
    wrote a line is taken from the run itself: its ${time}, or the time in
    the agent's own line, or the line before's."""
    def parse(text):
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")

    lines = console.splitlines()
    first = next(m.group(1) for m in map(
        lambda s: STAMP.match(s) or AGENT_AT.match(s), lines) if m)
    out, last = [], parse(first)
    for line in lines:
        m = STAMP.match(line) or AGENT_AT.match(line)
        if m:
            last = parse(m.group(1))
        stamp = last + datetime.timedelta(milliseconds=skew_ms)
        out.append(stamp.strftime("%Y-%m-%dT%H:%M:%S.%f") + "789Z " +
                   STAMP.sub("", line))
    return "\n".join(out) + "\n"


def expect_rc(hpr, rules, log, expect, *args):
    p = subprocess.run([HYPERPODRUN, "--replay", log,
                        "--log-monitoring-config", rules, "--expect", expect,
                        *map(str, args)],
                       capture_output=True, env=hpr.env, timeout=60)
    return p.returncode, p.stderr.decode()


def test_a_late_stamped_capture_of_a_hung_job_reaches_the_live_verdict(
        hpr, tmp_path):
    # The CI check that passed a hung job: kubectl stamps each line a few
    # ms after the agent read it, so the hang deadline the last progress
    # line set came just after the agent's verdict, where --replay-until
    # verdict stopped: "verdict: none", and HEALTHY met.
    r, rules, console = run_live(hpr, tmp_path, "hung")
    live = live_verdict(console)
    assert r.rc == 124 and live is not None, r.describe()
    healthy = tmp_path / "healthy.expect.json"
    healthy.write_text('{"state": "HEALTHY"}')
    live_wall = datetime.datetime.strptime(live["wall"],
                                           "%Y-%m-%dT%H:%M:%S.%fZ")
    for skew in (1, 5, 40, 99):
        log = tmp_path / f"kubectl-{skew}ms.log"
        log.write_text(kubectl_late(console, skew))
        for until in ((), ("--replay-until", "verdict")):
            changes, summary, _ = replay(hpr, rules, log, *until)
            assert summary["format"] == "console with kubectl --timestamps"
            got = summary["verdict"]
            assert got is not None, (skew, until, summary, changes)
            assert (got["rule"], got["local_rank"], got["state"]) == (
                live["rule"], live["local_rank"], live["state"]), got
            # The capture's own times: as late as its stamps, no later.
            wall = datetime.datetime.strptime(got["wall"],
                                              "%Y-%m-%dT%H:%M:%S.%fZ")
            lag = (wall - live_wall).total_seconds() * 1000
            assert 0 <= lag <= skew + 1, (skew, got, live)
            assert summary["pending"] == [], summary
            rc, err = expect_rc(hpr, rules, log, healthy, *until)
            assert rc == 1, (skew, until, err)
            assert "state of default0: expected HEALTHY, got HANGING" in err
        text = subprocess.run(
            [HYPERPODRUN, "--replay", log, "--log-monitoring-config", rules,
             "--replay-until", "verdict", "--replay-format", "text"],
            capture_output=True, env=hpr.env, timeout=60).stdout.decode()
        assert re.search(r"^verdict: LogHang_JobHangingDetection .*\(due "
                         r"\d+ ms after the agent's verdict, within the "
                         r"100 ms", text, re.M), text


def test_a_log_that_ends_before_a_deadline_says_so(hpr, tmp_path):
    # The hung job's stdout alone (the agent's own lines went elsewhere):
    # the log ends a second before the hang deadline. It is not HEALTHY,
    # nor HANGING: the replay says a deadline is pending, and an
    # expectation decides.
    r, rules, console = run_live(hpr, tmp_path, "hung")
    assert r.rc == 124, r.describe()
    worker = [line for line in console.splitlines()
              if not line.startswith("hyperpodrun[")]
    for name, text in (("time", "\n".join(worker) + "\n"),
                       ("kubectl", kubectl_late("\n".join(worker), 5))):
        log = tmp_path / f"stdout-{name}.log"
        log.write_text(text)
        _, summary, _ = replay(hpr, rules, log)
        assert summary["verdict"] is None, summary
        pending = summary["pending"]
        assert [(p["stream"], p["rule"]) for p in pending] == [
            ("default0", "JobHangingDetection")], summary
        # The hang rule's limit is 1 s: due 1.001 s after rank 0's last
        # match; the log ends with it or with rank 1's last line, after.
        assert 0 < pending[0]["past_end"] <= 1.001, pending
        assert pending[0]["deadline"] == pytest.approx(
            summary["time"] + pending[0]["past_end"], abs=0.0015)
        assert pending[0]["wall"].endswith("Z")

        text = subprocess.run(
            [HYPERPODRUN, "--replay", log, "--log-monitoring-config", rules,
             "--replay-format", "text"],
            capture_output=True, env=hpr.env, timeout=60).stdout.decode()
        assert re.search(r"^pending: rule JobHangingDetection on default0: "
                         r"deadline at [\d.]+ s \(\S+Z\), [01]\.\d{3} s past "
                         r"the end of the log", text, re.M), text

        expect = tmp_path / "e.json"
        expect.write_text('{"state": "HEALTHY"}')
        rc, err = expect_rc(hpr, rules, log, expect)
        assert rc == 0, err
        assert ("ends with 1 rule deadline still to come" in err and
                '"pending_deadline": false' in err), err
        expect.write_text('{"state": "HEALTHY", "pending_deadline": false}')
        rc, err = expect_rc(hpr, rules, log, expect)
        assert rc == 1, err
        assert re.search(r"pending deadline of rule JobHangingDetection on "
                         r"default0: expected none, got one at t=[\d.]+, "
                         r"[01]\.\d{3} s past where the log ends", err), err
        expect.write_text('{"pending_deadline": true}')
        assert expect_rc(hpr, rules, log, expect)[0] == 0
        emitted = tmp_path / "emitted.json"
        p = subprocess.run([HYPERPODRUN, "--replay", log,
                            "--log-monitoring-config", rules,
                            "--emit-expect", emitted],
                           capture_output=True, env=hpr.env, timeout=60)
        assert p.returncode == 0, p.stderr.decode()
        assert json.loads(emitted.read_text())["pending_deadline"] is True
        assert expect_rc(hpr, rules, log, emitted)[0] == 0

    # The whole console reaches the verdict: nothing is pending, and an
    # expectation of no pending deadline holds.
    log = tmp_path / "console.log"
    log.write_text(console)
    _, summary, _ = replay(hpr, rules, log)
    assert summary["pending"] == [] and summary["verdict"] is not None
    expect.write_text('{"state": "HANGING", "pending_deadline": false}')
    assert expect_rc(hpr, rules, log, expect)[0] == 0
    expect.write_text('{"pending_deadline": "no"}')
    rc, err = expect_rc(hpr, rules, log, expect)
    assert rc == 2 and "pending_deadline: expected true or false" in err, err


def test_a_golden_file_is_met_by_another_recording_of_the_same_job(
        hpr, tmp_path):
    # --emit-expect pinned every transition's line and time, so the next
    # healthy recording of the same job failed the golden file. It pins
    # what the run did: states reached, the verdict and its rule.
    def record(scenario, name):
        d = tmp_path / name
        d.mkdir()
        r, rules, console = run_live(hpr, d, scenario)
        log = d / "console.log"
        log.write_text(console)
        return r, rules, log

    r1, rules, first = record("healthy", "healthy1")
    r2, _, second = record("healthy", "healthy2")
    r3, _, hung = record("hung", "hung1")
    r4, _, hung2 = record("hung", "hung2")
    assert (r1.rc, r2.rc, r3.rc, r4.rc) == (0, 0, 124, 124)
    def emit(log, golden):
        p = subprocess.run([HYPERPODRUN, "--replay", log,
                            "--log-monitoring-config", rules,
                            "--emit-expect", golden], capture_output=True,
                           env=hpr.env, timeout=60)
        assert p.returncode == 0, p.stderr.decode()
        return golden.read_text()

    golden = tmp_path / "healthy.expect.json"
    text = emit(first, golden)
    assert text.endswith("}\n"), text
    emitted = json.loads(text)
    assert "transitions" not in emitted, text
    assert emitted["verdict"] is None
    assert emitted["reached"]["JobHangingDetection"] == ["HEALTHY"], text
    rc, err = expect_rc(hpr, rules, second, golden)
    assert rc == 0, (text, err)
    rc, err = expect_rc(hpr, rules, hung, golden)
    assert rc == 1, err
    assert ("verdict: expected none, got default0 (HANGING) by rule "
            "JobHangingDetection") in err, err
    assert ('states rule JobHangingDetection reached: expected '
            '["HEALTHY"], got ["HEALTHY", "HANGING"]') in err, err

    # A hung job's golden file: met by another hung recording; a time
    # pinned with a tolerance is checked within it.
    hung_golden = tmp_path / "hung.expect.json"
    assert json.loads(emit(hung, hung_golden))["verdict"] == {
        "rule": "JobHangingDetection", "state": "HANGING",
        "stream": "default0"}
    assert expect_rc(hpr, rules, hung2, hung_golden)[0] == 0
    assert expect_rc(hpr, rules, second, hung_golden)[0] == 1
    _, summary, _ = replay(hpr, rules, hung2)
    t = summary["verdict"]["time"]
    pinned = tmp_path / "pinned.json"
    pinned.write_text(json.dumps({"verdict": {
        "rule": "JobHangingDetection", "state": "HANGING",
        "time": t + 0.4, "within": 0.5}}))
    assert expect_rc(hpr, rules, hung2, pinned)[0] == 0
    pinned.write_text(json.dumps({"verdict": {
        "rule": "JobHangingDetection", "state": "HANGING",
        "time": t + 0.6, "within": 0.5}}))
    rc, err = expect_rc(hpr, rules, hung2, pinned)
    assert rc == 1 and "(within 0.500 s), got HANGING" in err, err
    pinned.write_text('{"verdict": {"rule": "JobHangingDetection", '
                      '"state": "HANGING", "within": 1}}')
    rc, err = expect_rc(hpr, rules, hung2, pinned)
    assert rc == 2 and "expect: verdict: expected null or" in err, err
