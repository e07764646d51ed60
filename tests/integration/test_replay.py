# SPDX-License-Identifier: Apache-2.0
"""hyperpodrun --replay, --replay-rate and --expect on the real binary:
every sample log of examples/rules against its expectations, the diff and
exit status of an unmet expectation, standard input, a replay rate, the
console layout, and each way the command line or its files can be wrong,
with the exact message."""

import json
import subprocess

import pytest

from conftest import HYPERPODRUN, SOURCE_ROOT

EXAMPLES = SOURCE_ROOT / "examples" / "rules"
RULES = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
SAMPLES = [(rule, sample) for rule in RULES
           for sample in ("healthy", "failing")]

HEARTBEAT = [{"name": "Beat", "logPattern": r".*loss (\S+)",
              "expectedStartCutOffInSeconds": 10,
              "expectedRecurringFrequencyInSeconds": 5,
              "metricThreshold": 5, "operator": "gt"}]


def replay(hpr, *args, stdin=None):
    """Runs hyperpodrun with args; returns (rc, stdout, stderr)."""
    r = subprocess.run([HYPERPODRUN] + [str(a) for a in args],
                       input=stdin, capture_output=True, timeout=60,
                       env=hpr.env, cwd=hpr.tmp)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def events(stdout, values=False):
    """The JSON lines: (state changes and other events, summary); the
    metric "value" events only with values."""
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert lines and "summary" in lines[-1], stdout
    assert all("summary" not in line for line in lines[:-1]), stdout
    return ([e for e in lines[:-1]
             if values == (e.get("event") == "value")],
            lines[-1]["summary"])


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, (list, dict)):
        content = json.dumps(content)
    path.write_bytes(content if isinstance(content, bytes)
                     else content.encode())
    return path


def test_every_example_rule_is_present():
    assert RULES == ["JobHangingDetection", "JobStart", "LossSpikeDetection",
                     "LowThroughputDetection", "NoS3CheckpointingDetection",
                     "TFLOPs"]


@pytest.mark.parametrize("rule,sample", SAMPLES)
def test_example_sample_meets_its_expectation(hpr, rule, sample):
    d = EXAMPLES / rule
    rc, out, err = replay(hpr, "--replay", d / f"{sample}.log",
                          "--log-monitoring-config", d / "rule.json",
                          "--expect", d / f"{sample}.expect.json")
    assert rc == 0, err
    assert f"{sample}.expect.json: expectation met by " in err
    changes, summary = events(out)
    expected = json.loads((d / f"{sample}.expect.json").read_text())
    assert summary["state"] == expected["state"]
    got = [(c["rule"], c["state"], c["line_no"]) for c in changes]
    assert got == [(t["rule"], t["state"], t.get("line_no"))
                   for t in expected["transitions"]]
    for change in changes:
        assert set(change) == {"time", "stream", "rule", "from", "state",
                               "line_no", "line"}

    # The other sample's expectation is not met: status 1 and a diff.
    other = "failing" if sample == "healthy" else "healthy"
    rc, out, err = replay(hpr, "--replay", d / f"{sample}.log",
                          "--log-monitoring-config", d / "rule.json",
                          "--expect", d / f"{other}.expect.json")
    assert rc == 1, err
    assert f"final state of rule {rule} on " in err
    assert f"{other}.expect.json: expectation not met by " in err


@pytest.mark.parametrize("rule,sample", SAMPLES)
def test_example_sample_through_job_yaml(hpr, rule, sample):
    # The job.yaml users apply gives the rule the same final state.
    d = EXAMPLES / rule
    expected = json.loads((d / f"{sample}.expect.json").read_text())
    expect = write(hpr.tmp, "final.json", {"final": expected["final"]})
    rc, _, err = replay(hpr, "--replay", d / f"{sample}.log",
                        "--log-monitoring-config", EXAMPLES / "job.yaml",
                        "--expect", expect)
    assert rc == 0, err


def test_unmet_expectation_shows_an_aligned_diff(hpr, tmp_path):
    d = EXAMPLES / "JobHangingDetection"
    expect = write(tmp_path, "expect.json", {
        "final": {"JobHangingDetection": "HEALTHY"},
        "transitions": [
            {"rule": "JobHangingDetection", "state": "HEALTHY",
             "line_no": 4},
            {"rule": "JobHangingDetection", "state": "SLOW"}]})
    rc, out, err = replay(hpr, "--replay", d / "failing.log",
                          "--log-monitoring-config", d / "rule.json",
                          "--expect", expect)
    assert rc == 1
    diff = [line for line in err.splitlines()
            if not line.startswith("hyperpodrun[")]
    assert diff == [
        "final state of rule JobHangingDetection on (log): expected "
        "HEALTHY, got HANGING",
        "transitions (- expected, + got):",
        "- expected #2: JobHangingDetection -> SLOW",
        "+ got #2:      JobHangingDetection HEALTHY -> HANGING on (log) at "
        "t=989.871 (deadline)",
    ]
    assert err.splitlines()[-1].endswith(
        f"error: {expect}: expectation not met by {d / 'failing.log'}: "
        "3 differences (above)")
    # The JSON lines are still all there.
    changes, summary = events(out)
    assert [c["state"] for c in changes] == ["HEALTHY", "HANGING"]
    assert summary["state"] == "HANGING"


def test_standard_input_and_replay_rate(hpr, tmp_path):
    rules = write(tmp_path, "rules.json", HEARTBEAT)
    # No timestamps; at 2 lines per second line 3 is at 1 s, and the
    # 5 s frequency runs out at 6.001 s, between lines 3 and 16.
    log = "".join(f"loss {v}\n" for v in [1, 1, 9] + [1] * 12 + [2])
    rc, out, err = replay(hpr, "--replay", "-", "--log-monitoring-config",
                          rules, "--replay-rate", "2",
                          stdin=log.encode())
    assert rc == 0, err
    changes, summary = events(out)
    assert [(c["state"], c["time"], c["line_no"]) for c in changes] == [
        ("HEALTHY", 0.0, 1), ("SLOW", 1.0, 3), ("HEALTHY", 1.5, 4)]
    assert summary["clock"] == "rate"
    assert summary["lines"] == 16
    assert summary["time"] == 7.5
    # At one line every 10 s, the frequency runs out between any two.
    rc, out, err = replay(hpr, "--replay", "-", "--log-monitoring-config",
                          rules, "--replay-rate", "0.1",
                          stdin=log.encode())
    assert rc == 0, err
    changes, summary = events(out)
    assert [(c["state"], c["time"], c["line_no"]) for c in changes][:5] == [
        ("HEALTHY", 0.0, 1), ("HANGING", 5.001, None), ("HEALTHY", 10.0, 2),
        ("HANGING", 15.001, None), ("SLOW", 20.0, 3)]


def test_log_without_timestamps_warns(hpr, tmp_path):
    rules = write(tmp_path, "rules.json", HEARTBEAT)
    log = write(tmp_path, "train.log", "loss 1\nloss 2\n")
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules)
    assert rc == 0, err
    assert (f"warning: {log}: no line starts with a timestamp and "
            "--replay-rate was not given: time stood still, so no cut-off "
            "or recurring frequency could expire") in err
    assert events(out)[1]["clock"] == "none"


def test_console_capture(hpr, tmp_path):
    # kubectl logs of a pod: hyperpodrun's own messages go to no rule; each
    # rank is its own stream, and as live only local rank 0 is judged
    # unless --log-monitor-ranks says otherwise.
    rules = write(tmp_path, "rules.json", HEARTBEAT)
    log = write(tmp_path, "console.log", (
        "hyperpodrun[7]: info: attempt 0: 2 workers\n"
        "[default0]:2025-06-17 05:51:00,000 loss 1\n"
        "[default1]:2025-06-17 05:51:00,500 loss 1\n"
        "[default0]:2025-06-17 05:51:04,000 loss 1\n"
        "hyperpodrun[7]: warning: something\n"
        "a container's prelude\n"
        "[default0]:2025-06-17 05:51:08,000 loss 1\n"))
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules, "--log-monitor-ranks", "all")
    assert rc == 0, err
    changes, summary = events(out)
    assert [(c["stream"], c["state"], c["time"]) for c in changes] == [
        ("default0", "HEALTHY", 0.0), ("default1", "HEALTHY", 0.5),
        ("default1", "HANGING", 5.501)]
    assert changes[0]["line"] == "2025-06-17 05:51:00,000 loss 1"
    assert summary["layout"] == "console"
    assert summary["format"] == "console"
    assert summary["unprefixed_lines"] == 1
    assert summary["agent_lines"] == 2
    assert [s["stream"] for s in summary["streams"]] == ["default0",
                                                          "default1"]
    assert f"info: {log}: 1 line without a console prefix" in err
    assert f"info: {log}: 2 lines of hyperpodrun's own went to no rule" in err

    # The default, as live: local rank 0 alone.
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules)
    assert rc == 0, err
    changes, summary = events(out)
    assert [(c["stream"], c["state"]) for c in changes] == [
        ("default0", "HEALTHY")]
    assert [(s["stream"], s["judged"]) for s in summary["streams"]] == [
        ("default0", True), ("default1", False)]
    assert summary["verdict"] is None


def test_output_is_valid_json_for_any_bytes(hpr, tmp_path):
    rules = write(tmp_path, "rules.json", [
        {"name": "Any", "logPattern": ".*x", "faultOnMatch": False}])
    log = write(tmp_path, "bin.log",
                b"\xff\xfe x\n\x00\x01\"\\ x\r\xe2\x82 x\n")
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules)
    assert rc == 0, err
    changes, _ = events(out)
    assert changes[0]["line"] == "\ufffd\ufffd x"


def test_replay_starts_nothing(hpr, tmp_path):
    rules = write(tmp_path, "rules.json", HEARTBEAT)
    log = write(tmp_path, "train.log", "1750000000 loss 1\n")
    rc, _, err = replay(hpr, "--standalone", "--nproc-per-node", "4",
                        "--log-dir", tmp_path / "logs", "--replay", log,
                        "--log-monitoring-config", rules)
    assert rc == 0, err
    assert not (tmp_path / "logs").exists()
    assert list(hpr.tmpdir.iterdir()) == []


BAD = [
    (["--replay", "{log}"],
     "--replay was given without --log-monitoring-config, the rules to "
     "replay the log through"),
    (["--expect", "{expect}", "--log-monitoring-config", "{rules}", "x.py"],
     "--expect was given without --replay"),
    (["--replay-rate", "2", "x.py"],
     "--replay-rate was given without --replay"),
    (["--replay", "", "--log-monitoring-config", "{rules}"],
     "empty value for --replay (a log file, or - for standard input)"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--expect", ""],
     "empty value for --expect"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}", "train.py"],
     "--replay runs no training script, but 'train.py' was given"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--log-monitor-ranks", "x"],
     "invalid value 'x' for --log-monitor-ranks: 'x' is not a local rank"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--replay-until", "soon"],
     "invalid value 'soon' for --replay-until: expected an ISO 8601 time "
     "such as 2025-06-17T05:51:29.300Z, +SECONDS after the last line such "
     "as +600, or verdict"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--replay-input", "xml"],
     "invalid value 'xml' for --replay-input: expected one of auto, plain, "
     "console, srun"),
    (["--replay-until", "+5", "x.py"],
     "--replay-until was given without --replay"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--replay-rate", "0"],
     "invalid value '0' for --replay-rate: expected lines per second, a "
     "number above 0 such as 10 or 0.5"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--replay-rate", "-3"],
     "invalid value '-3' for --replay-rate: expected lines per second, a "
     "number above 0 such as 10 or 0.5"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--replay-rate", "fast"],
     "invalid value 'fast' for --replay-rate: expected lines per second, a "
     "number above 0 such as 10 or 0.5"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--replay-rate", "inf"],
     "invalid value 'inf' for --replay-rate: expected lines per second, a "
     "number above 0 such as 10 or 0.5"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--replay-rate", "nan"],
     "invalid value 'nan' for --replay-rate: expected lines per second, a "
     "number above 0 such as 10 or 0.5"),
    (["--replay", "{tmp}/missing.log", "--log-monitoring-config",
      "{rules}"],
     "--replay {tmp}/missing.log: No such file or directory"),
    (["--replay", "{tmp}", "--log-monitoring-config", "{rules}"],
     "--replay {tmp}: is a directory with no <local_rank>/stdout.log in it "
     "(an attempt directory of per-rank files)"),
    (["--replay", "{log}", "--log-monitoring-config", "{tmp}/none.json"],
     "{tmp}/none.json: No such file or directory"),
    (["--replay", "{log}", "--log-monitoring-config", "{badrules}"],
     "{badrules}: rule 0 (Bad): logPattern: missing closing parenthesis "
     "at offset 4 in \"(abc\""),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--expect", "{tmp}/none.json"],
     "{tmp}/none.json: No such file or directory"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--expect", "{badjson}"],
     "{badjson}:1:11: invalid JSON"),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--expect", "{badkey}"],
     "{badkey}: expect: unknown key \"finale\""),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--expect", "{badrule}"],
     "{badrule}: expect: final: no rule named \"Nope\""),
    (["--replay", "{log}", "--log-monitoring-config", "{rules}",
      "--expect", "{badstate}"],
     "{badstate}: expect: transitions[0]: expected {{\"rule\": NAME, "
     "\"state\": STATE, ...}}"),
]


@pytest.mark.parametrize("args,message", BAD)
def test_bad_input_is_refused_with_status_2(hpr, tmp_path, args, message):
    files = {
        "tmp": tmp_path,
        "log": write(tmp_path, "train.log", "1750000000 loss 1\n"),
        "rules": write(tmp_path, "rules.json", HEARTBEAT),
        "expect": write(tmp_path, "expect.json", {}),
        "badrules": write(tmp_path, "bad.json",
                          [{"name": "Bad", "logPattern": "(abc"}]),
        "badjson": write(tmp_path, "badjson.json", '{"final": }'),
        "badkey": write(tmp_path, "badkey.json", {"finale": {}}),
        "badrule": write(tmp_path, "badrule.json",
                         {"final": {"Nope": "HEALTHY"}}),
        "badstate": write(tmp_path, "badstate.json",
                          {"transitions": [{"rule": "Beat",
                                            "state": "STUCK"}]}),
    }
    rc, out, err = replay(hpr, *[a.format(**files) for a in args])
    assert rc == 2, err
    assert err == f"hyperpodrun: error: {message.format(**files)}\n"
    assert out == ""


CASES = SOURCE_ROOT / "tests" / "logmon" / "cases"
# A file that holds one object is read as an object with
# logMonitoringConfiguration or as a job, before any rule is looked at.
FILE_ERRORS = {
    "error-001-not-a-list": "no rule list: expected a list of rules, an "
                            "object with logMonitoringConfiguration or a job "
                            "with spec.runPolicy.logMonitoringConfiguration",
}


def broken_rule_files():
    """Every invalid rule file of the engine's case corpus: its rules, its
    options and the error the engine gives."""
    for path in sorted(CASES.glob("error-*.txt")):
        sections, key = {}, None
        for line in path.read_text().splitlines():
            if line.startswith("%"):
                key, _, rest = line.partition(" ")
                sections[key] = rest
            elif key is not None:
                sections[key] = (sections[key] + "\n" + line).strip("\n")
        yield pytest.param(sections["%rules"],
                           FILE_ERRORS.get(path.stem, sections["%error"]),
                           "strict" in sections.get("%opts", ""),
                           id=path.stem)


@pytest.mark.parametrize("rules,error,strict", list(broken_rule_files()))
def test_check_rules_refuses_every_broken_rule_file(hpr, tmp_path, rules,
                                                    error, strict):
    path = write(tmp_path, "rules.json", rules)
    rc, out, err = replay(hpr, "--check-rules", path,
                          *(["--strict"] if strict else []))
    assert rc == 2, err
    assert err == f"hyperpodrun: error: {path}: {error}\n"
    assert out == ""


def test_check_rules_prints_the_rules_as_understood(hpr, tmp_path):
    rules = write(tmp_path, "rules.json", [
        {"name": "Hang", "logPattern": ".*loss (\\S+)",
         "expectedStartCutOffInSeconds": 10,
         "expectedRecurringFrequencyInSeconds": 5,
         "metricThreshold": 5, "operator": "gt",
         "expectedStartCutoffInSeconds": 3}])
    rc, out, err = replay(hpr, "--check-rules", rules)
    assert rc == 0, err
    assert out == (
        "rule 0: Hang\n"
        "  logPattern: .*loss (\\S+)\n"
        "  stopPattern: none (the rule never retires)\n"
        "  expectedStartCutOffInSeconds: 10.000 s (HANGING when no line "
        "matches within it)\n"
        "  expectedRecurringFrequencyInSeconds: 5.000 s (HANGING when a "
        "match is not followed by another within it)\n"
        "  metric: capture 1 gt 5 in 1 data point in a row makes it SLOW\n"
        "  faultOnMatch: false\n"
        f"{rules}: 1 rule, valid, with the warnings above\n")
    assert ("rule 0 (Hang): expectedStartCutoffInSeconds: unknown key, "
            "ignored; did you mean \"expectedStartCutOffInSeconds\"?") in err

    # --strict: the same key is an error, in --check-rules and --replay.
    message = (f"hyperpodrun: error: {rules}: rule 0 (Hang): "
               "expectedStartCutoffInSeconds: unknown key (--strict); did "
               "you mean \"expectedStartCutOffInSeconds\"?\n")
    rc, out, err = replay(hpr, "--check-rules", rules, "--strict")
    assert (rc, out, err) == (2, "", message)
    log = write(tmp_path, "train.log", "1750000000 loss 1\n")
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules, "--strict")
    assert (rc, out, err) == (2, "", message)


def test_summary_names_rules_that_never_matched(hpr, tmp_path):
    rules = write(tmp_path, "rules.json", HEARTBEAT + [
        {"name": "Typo", "logPattern": ".*losss.*"}])
    log = write(tmp_path, "train.log", "1750000000 loss 1\n")
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules)
    assert rc == 0, err
    assert events(out)[1]["never_matched"] == ["Typo"]
    assert f"warning: {log}: rule 1 (Typo) matched no line\n" in err
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules, "--replay-format", "text")
    assert rc == 0, err
    assert "rules that never matched a line: Typo\n" in out


def test_replay_until(hpr, tmp_path):
    # A log that ends in silence reaches the deadline after it only when
    # told to run on; a time cuts the lines after it.
    rules = write(tmp_path, "rules.json", HEARTBEAT)
    log = write(tmp_path, "train.log", "1750000000 loss 1\n"
                                       "1750000004 loss 1\n"
                                       "1750000020 loss 1\n")
    rc, out, _ = replay(hpr, "--replay", log, "--log-monitoring-config",
                        rules, "--replay-until", "2025-06-15T15:06:42Z")
    changes, summary = events(out)
    assert [(c["state"], c["time"]) for c in changes] == [
        ("HEALTHY", 0.0)]
    assert summary["lines_after_until"] == 2
    assert summary["time"] == 2.0
    rc, out, _ = replay(hpr, "--replay", log, "--log-monitoring-config",
                        rules, "--replay-until", "2025-06-15T15:06:50Z")
    changes, summary = events(out)
    assert [(c["state"], c["time"]) for c in changes] == [
        ("HEALTHY", 0.0), ("HANGING", 9.001)]
    rc, out, _ = replay(hpr, "--replay", log, "--log-monitoring-config",
                        rules, "--replay-until", "+10")
    changes, summary = events(out)
    assert [(c["state"], c["time"]) for c in changes] == [
        ("HEALTHY", 0.0), ("HANGING", 9.001), ("HEALTHY", 20.0),
        ("HANGING", 25.001)]
    assert summary["time"] == 30.0


def test_metric_values_and_rule_limits_for_plots(hpr, tmp_path):
    rules = write(tmp_path, "rules.json", HEARTBEAT)
    log = write(tmp_path, "train.log", "1750000000 loss 1\n"
                                       "1750000001 loss x\n"
                                       "1750000002 loss 7\n"
                                       "1750000003 loss inf\n")
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules)
    assert rc == 0, err
    values, summary = events(out, values=True)
    # JSON has no infinity: null.
    assert [(v["time"], v["rule"], v["value"], v["line_no"])
            for v in values] == [(0.0, "Beat", 1, 1), (2.0, "Beat", 7, 3),
                                 (3.0, "Beat", None, 4)]
    assert summary["rules"] == [{"rule": "Beat", "threshold": 5,
                                 "operator": "gt", "datapoints": 1,
                                 "cutoff": 10.0, "frequency": 5.0}]


def test_numbers_print_in_their_shortest_form(hpr, tmp_path):
    """A metric and a threshold print as the shortest decimal that reads
    back as the same double (15.96, not 15.960000000000001), in the text
    verdict, the JSON values and the JSON summary alike."""
    rules = write(tmp_path, "rules.json", [{
        "name": "Slow", "logPattern": r".*samples/sec (\S+)",
        "metricThreshold": 217.77, "operator": "lteq",
        "metricEvaluationDataPoints": 1}])
    log = write(tmp_path, "train.log", "1750000000 samples/sec 15.96\n")
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules, "--replay-format", "json")
    assert rc == 0, err
    assert '"value":15.96,' in out, out
    assert '"threshold":217.77,' in out, out
    assert "15.96 lteq threshold 217.77 in" in out, out
    rc, out, err = replay(hpr, "--replay", log, "--log-monitoring-config",
                          rules, "--replay-format", "text")
    assert rc == 0, err
    assert "metric 15.96 lteq threshold 217.77 in 1 data point" in out, out


def test_plot_tool_draws_a_replay(hpr, tmp_path):
    d = EXAMPLES / "LowThroughputDetection"
    rc, out, err = replay(hpr, "--replay", d / "failing.log",
                          "--log-monitoring-config", d / "rule.json",
                          "--replay-format", "json")
    assert rc == 0, err
    png = tmp_path / "plot.png"
    tool = SOURCE_ROOT / "tools" / "plot_replay.py"
    p = subprocess.run(["/usr/bin/python3", tool, "-", png], input=out,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    p = subprocess.run(["/usr/bin/python3", tool, "-", png],
                       input="not json\n", capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0


def test_per_rank_files_of_an_attempt_directory(hpr, tmp_path):
    # torchrun's <attempt>/<local_rank>/stdout.log: each file a stream,
    # merged in time order by the lines' own timestamps, line numbers
    # counted per file; local rank 0 alone is judged by default.
    rules = write(tmp_path, "rules.json", HEARTBEAT)
    attempt = tmp_path / "attempt_0"
    for rank, text in (("0", "1750000000 loss 1\n1750000010 loss 1\n"),
                       ("1", "1750000001 loss 1\n1750000003 loss 1\n")):
        (attempt / rank).mkdir(parents=True)
        (attempt / rank / "stdout.log").write_text(text)
    rc, out, err = replay(hpr, "--replay", attempt,
                          "--log-monitoring-config", rules,
                          "--log-monitor-ranks", "all")
    assert rc == 0, err
    changes, summary = events(out)
    assert [(c["stream"], c["state"], c["time"], c["line_no"])
            for c in changes] == [
        ("0", "HEALTHY", 0.0, 1), ("1", "HEALTHY", 1.0, 1),
        ("0", "HANGING", 5.001, None), ("1", "HANGING", 8.001, None),
        ("0", "HEALTHY", 10.0, 2)]
    assert summary["format"] == "per-rank files"
    assert summary["lines"] == 4
    rc, out, err = replay(hpr, "--replay", attempt,
                          "--log-monitoring-config", rules)
    changes, summary = events(out)
    assert {c["stream"] for c in changes} == {"0"}
    assert [(s["stream"], s["judged"]) for s in summary["streams"]] == [
        ("0", True), ("1", False)]
