# SPDX-License-Identifier: Apache-2.0
"""/metrics as Prometheus sees it.

Scrapes from every mode (operator, self-driven with --server-port, the
NCCL pre-flight, in-process restart) go through Debian's promtool, which
must find nothing but node-problem-detector's own names; the table of
metrics in docs/observability.md, the example dashboard and the example
alerting rules must name exactly what those scrapes hold. Then a real
Prometheus server, started on loopback, scrapes a running agent and is
asked through its HTTP API what it saw: the target up, the build info, a
restart counted after a fault, and a rule's compared value following the
worker's log."""

import http.client
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import PYTHON, SOURCE_ROOT, deadline_poll, helper
from test_inprocess import agent as ipr_agent
from test_inprocess import wait_event
from test_node_health import NCCL_DOUBLE, XID13, preflight_args, record
from test_api_access import TOKEN, token_file
from test_operator import Agent, free_port

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
MONITORING = Path(SOURCE_ROOT) / "examples" / "monitoring"
XID = Path(SOURCE_ROOT) / "examples" / "node-problem" / "nvidia-xid.json"
# node-problem-detector's names, kept so that NPD dashboards read them.
NPD_NAMES = {"problem_counter", "problem_gauge"}
METRICS_LISTEN_RE = re.compile(
    rb"metrics \(GET /metrics only\) listening on http://127\.0\.0\.1:(\d+)")
API_LISTEN_RE = re.compile(
    rb"read-only API \(/status, /metrics, /healthz\) listening on "
    rb"http://127\.0\.0\.1:(\d+)")
THROUGHPUT_RULE = {"name": "Throughput",
                   "logPattern": r".*throughput ([0-9.]+).*",
                   "metricThreshold": 10, "operator": "lt",
                   "metricEvaluationDataPoints": 3}


def get(port, path="/metrics", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def sample(text, series):
    """The value of one series ("name" or 'name{labels}'), or None."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split(" ")[-1])
    return None


def families(text):
    return {line.split()[2] for line in text.splitlines()
            if line.startswith("# TYPE ")}


def promtool_problems(text):
    """What promtool check metrics says of a scrape, NPD's names aside."""
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                       capture_output=True, text=True, timeout=60)
    said = [line for line in (r.stdout + r.stderr).splitlines()
            if line.strip()]
    others = [line for line in said if line.split()[0] not in NPD_NAMES]
    # Without NPD's names nothing at all, and then promtool exits 0.
    if not families(text) & NPD_NAMES:
        assert r.returncode == 0, said
    return others


def listen_port(proc, pattern, what):
    def listening():
        if proc.poll() is not None:
            pytest.fail(f"hyperpodrun exited before {what}\n"
                        + proc.describe())
        return pattern.search(proc.console_err())
    return int(deadline_poll(listening, 30, what=what).group(1))


def worker_env(work, **extra):
    env = {"MW_DIR": work, "PYTHONPATH": Path(SOURCE_ROOT) / "python",
           "MW_CKPT": work / "ckpt"}
    env.update(extra)
    return env


def start_self_driven(hpr, tmp_path, extra=(), **env):
    """--standalone, two workers, the throughput rule, the Xid rules on an
    empty kernel log, the API and --metrics-port on free ports."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([THROUGHPUT_RULE]))
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    proc = hpr.start(["--standalone", "--nproc-per-node", "2",
                      "--server-port", "0", "--metrics-port", "0",
                      "--log-monitoring-config", rules,
                      "--node-problem-config", XID, "--kmsg", kmsg, *extra,
                      helper("metrics_worker.py")],
                     env=worker_env(work, **env))
    port = listen_port(proc, METRICS_LISTEN_RE, "--metrics-port")
    return proc, work, port


def finish(proc, work, timeout=60):
    (work / "finish").touch()
    r = proc.wait(timeout)
    assert r.rc == 0, r.describe()


# ---- A scrape from each mode ---------------------------------------------

def scrape_self_driven(hpr, tmp_path):
    """Two faults under --max-restarts 2: counted as the operator's are."""
    before = time.time()
    proc, work, port = start_self_driven(
        hpr, tmp_path, ["--max-restarts", "2"], MW_FAIL="2")

    def third_attempt():
        code, text = get(port)
        assert code == 200
        return text if (sample(text, "hyperpodrun_attempts_total") == 3 and
                        sample(text, "hyperpodrun_checkpoint_step") and
                        sample(text, 'hyperpodrun_rule_value{local_rank="0",'
                                     'rule="Throughput"}')) else None
    text = deadline_poll(third_attempt, 60, interval=0.1,
                         what="the third attempt's checkpoint in /metrics")
    assert sample(text, "hyperpodrun_restarts_total") == 2
    assert sample(text, 'hyperpodrun_faults_total{cause="worker"}') == 2
    # Points in time are wall-clock timestamps of this run.
    now = time.time()
    for series in ("process_start_time_seconds",
                   "hyperpodrun_checkpoint_timestamp_seconds",
                   'hyperpodrun_rule_last_match_timestamp_seconds{'
                   'local_rank="0",rule="Throughput"}'):
        assert before - 1 <= sample(text, series) <= now + 1, (series, text)
    assert sample(text, "process_start_time_seconds") <= \
        sample(text, "hyperpodrun_checkpoint_timestamp_seconds")
    assert sample(text, 'hyperpodrun_faults_total{cause="rule"}') == 0
    assert sample(text, 'hyperpodrun_build_info{version="'
                  + re.search(r'version="([^"]+)"', text).group(1)
                  + '",mode="standalone"}') == 1
    # Every attempt's lines, not the last one's alone.
    lines = sample(text, 'hyperpodrun_stream_lines_total{local_rank="1",'
                         'stream="stdout"}')
    assert lines >= 3 + 3 + 1, text
    # The same text on the API port; the metrics port serves nothing else.
    api = listen_port(proc, API_LISTEN_RE, "the API")
    code, on_api = get(api)
    assert code == 200 and families(on_api) == families(text)
    assert get(port, "/status")[0] == 404
    finish(proc, work)
    return text


def scrape_operator(hpr, tmp_path):
    """A crash, /stop, a /start with faultCount 1, scraped on
    --metrics-port."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    work = tmp_path / "opwork"
    work.mkdir()
    a = Agent(hpr, tmp_path, ["--metrics-port", "0",
                              "--node-problem-config", XID, "--kmsg", kmsg],
              env=worker_env(work, MW_FAIL="1"),
              script=helper("metrics_worker.py"))
    port = listen_port(a.proc, METRICS_LISTEN_RE, "--metrics-port")
    a.start(log_monitoring_configuration=[THROUGHPUT_RULE])
    a.wait_status("faulted")
    assert a.post("/stop")[0] == 200
    a.wait_status("ready")
    a.start(fault_count=1, log_monitoring_configuration=[THROUGHPUT_RULE])
    a.wait_status("running")

    def running():
        code, text = get(port)
        assert code == 200
        return text if (sample(text, "hyperpodrun_checkpoint_step") and
                        sample(text, 'hyperpodrun_rule_value{local_rank="0",'
                                     'rule="Throughput"}')) else None
    text = deadline_poll(running, 60, interval=0.1,
                         what="the second attempt's checkpoint")
    assert sample(text, "hyperpodrun_attempts_total") == 2
    assert sample(text, "hyperpodrun_restarts_total") == 1
    assert sample(text, 'hyperpodrun_faults_total{cause="worker"}') == 1
    assert 'mode="operator"' in text
    (work / "finish").touch()
    a.wait_status("completed")
    assert a.shutdown().rc == 0
    return text


def scrape_preflight(hpr, tmp_path):
    if not Path(NCCL_DOUBLE).exists():
        pytest.fail(f"{NCCL_DOUBLE} is not built (ninja -C build)")
    work = tmp_path / "pfwork"
    work.mkdir()
    proc = hpr.start(["--standalone", "--nproc-per-node", "2",
                      "--server-port", "0",
                      *preflight_args("--preflight-min-busbw", 1),
                      helper("metrics_worker.py")],
                     env={"MW_DIR": work, "NCCL_DOUBLE_MODE": "ok"})
    port = listen_port(proc, API_LISTEN_RE, "the API")

    def measured():
        text = get(port)[1]
        return text if sample(text, "hyperpodrun_preflight_passed") == 1 \
            else None
    text = deadline_poll(measured, 60, interval=0.1, what="the pre-flight")
    assert sample(text, "hyperpodrun_preflight_min_busbw_bytes_per_second") \
        == 1e9
    best = sample(text, "hyperpodrun_preflight_best_busbw_bytes_per_second")
    assert best > 0, text
    # The best is one of the sizes', in the same unit.
    sizes = [float(v) for v in re.findall(
        r'^hyperpodrun_preflight_busbw_bytes_per_second\{size_bytes="\d+"\} '
        r'(\S+)$', text, re.M)]
    assert sizes and best == max(sizes), text
    finish(proc, work)
    return text


def scrape_inprocess(hpr, tmp_path):
    a = ipr_agent(hpr, tmp_path, ["--metrics-port", "0"])
    port = listen_port(a.proc, METRICS_LISTEN_RE, "--metrics-port")
    a.wait_status("ready")
    a.start()
    for lr in range(2):
        wait_event(a, lr, "job_start")
    a.wait_status("running")
    code, text = get(port)
    assert code == 200
    assert 'mode="inprocess"' in text
    assert sample(text, 'hyperpodrun_agent_state{state="running"}') == 1
    assert a.shutdown().rc == 0
    return text


def scrape_rank_monitor(hpr, tmp_path):
    """The rank monitor's straggler windows: each rank's relative speed."""
    proc = hpr.start(["--standalone", "--nproc-per-node", "2",
                      "--server-port", "0", "--straggler-window", "1",
                      helper("ft_worker.py")],
                     env={"PYTHONPATH": Path(SOURCE_ROOT) / "python",
                          "FT_MODE": "straggler", "FT_BAD": "1",
                          "FT_STEPS": "2000", "FT_PERIOD": "0.02"})
    port = listen_port(proc, API_LISTEN_RE, "the API")

    def measured():
        text = get(port)[1]
        return text if sample(text, 'hyperpodrun_rank_relative_speed{'
                                    'local_rank="1"}') else None
    text = deadline_poll(measured, 60, interval=0.2,
                         what="the ranks' speeds in /metrics")
    # Rank 1 beats four times slower than rank 0.
    assert sample(text, 'hyperpodrun_rank_relative_speed{local_rank="1"}') \
        < sample(text, 'hyperpodrun_rank_relative_speed{local_rank="0"}')
    proc.signal(__import__("signal").SIGTERM)
    r = proc.wait(60)
    assert r.rc == 128 + 15, r.describe()
    return text


MODES = {
    "operator": scrape_operator,
    "self-driven": scrape_self_driven,
    "preflight": scrape_preflight,
    "inprocess": scrape_inprocess,
    "rank monitor": scrape_rank_monitor,
}


def documented_metrics():
    text = (Path(SOURCE_ROOT) / "docs" / "observability.md").read_text()
    section = text[text.index("\n## Metrics\n"):]
    section = section[:section.index("\n\n", section.index("| Metric |"))]
    return {m.group(1) for m in
            re.finditer(r"^\| `([a-z_:]+)` \|", section, re.M)}


# Words of PromQL that are not metric names.
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring",
                "group_left", "group_right", "bool", "offset", "inf", "nan"}


def promql_metrics(expr):
    """The metric names an expression selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)     # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)                # matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)               # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)"
                  r"\s*\([^)]*\)", " ", expr)            # label lists
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        word = m.group(0)
        after = expr[m.end():].lstrip()
        if word.lower() in PROMQL_WORDS or after.startswith("("):
            continue
        if expr[:m.start()].endswith("$"):                # a variable
            continue
        names.add(word)
    return names


def dashboard_exprs():
    dash = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        m = re.match(r"label_values\((\w+)", q or "")
        if m:
            exprs.append(m.group(1))
    return exprs


def alert_exprs():
    import yaml
    doc = yaml.safe_load((MONITORING / "alerts.rules.yaml").read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def test_every_mode_is_promtool_clean_and_documented(hpr, tmp_path):
    scrapes = {}
    for mode, scrape in MODES.items():
        d = tmp_path / mode
        d.mkdir()
        scrapes[mode] = scrape(hpr, d)
    for mode, text in scrapes.items():
        assert promtool_problems(text) == [], (mode, text)
        # A family's series all carry the same label names.
        by_family = {}
        for line in text.splitlines():
            m = re.match(r"^([a-z_:]+)(?:\{([^}]*)\})? ", line)
            if m:
                labels = tuple(sorted(re.findall(r'(\w+)="', m.group(2) or
                                                 "")))
                by_family.setdefault(m.group(1), set()).add(labels)
        mixed = {f: ls for f, ls in by_family.items() if len(ls) > 1}
        assert not mixed, (mode, mixed)
    exported = set().union(*map(families, scrapes.values()))
    documented = documented_metrics()
    assert documented == exported, (
        f"in docs/observability.md only: {sorted(documented - exported)}; "
        f"scraped only: {sorted(exported - documented)}")
    for where, exprs in (("dashboard.json", dashboard_exprs()),
                         ("alerts.rules.yaml", alert_exprs())):
        named = set().union(*map(promql_metrics, exprs))
        assert named, where
        assert named <= exported, (where, sorted(named - exported))


def test_metrics_port_alone_and_refusals(hpr, tmp_path):
    # In a self-driven mode without --server-port: /metrics alone.
    work = tmp_path / "work"
    work.mkdir()
    proc = hpr.start(["--standalone", "--nproc-per-node", "1",
                      "--metrics-port", "0", helper("metrics_worker.py")],
                     env={"MW_DIR": work})
    port = listen_port(proc, METRICS_LISTEN_RE, "--metrics-port")
    code, text = get(port)
    assert code == 200 and "hyperpodrun_build_info" in text
    assert not API_LISTEN_RE.search(proc.console_err())
    for path in ("/status", "/healthz", "/stop", "/metrics/"):
        assert get(port, path)[0] == 404, path
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    c.request("POST", "/metrics")
    r = c.getresponse()
    assert (r.status, r.getheader("allow")) == (405, "GET")
    c.close()
    code, text = get(port)
    assert sample(text, 'hyperpodrun_http_requests_total{listener="metrics",'
                        'code="4xx"}') == 5
    finish(proc, work)
    # The server port itself, and a port in use, are refused before any
    # worker starts.
    r = hpr.run(["--standalone", "--server-port", "9123", "--metrics-port",
                 "9123", helper("metrics_worker.py")], env={"MW_DIR": work})
    assert r.rc == 2 and "--metrics-port 9123 is the --server-port too" \
        in r.err, r.describe()
    with __import__("socket").socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        r = hpr.run(["--standalone", "--metrics-port", taken,
                     helper("metrics_worker.py")], env={"MW_DIR": work})
    assert r.rc == 2 and f"--metrics-port {taken}: cannot listen on " \
        f"127.0.0.1:{taken}" in r.err, r.describe()
    assert "attempt 0:" not in r.err


def test_node_problem_series_once_per_reason(hpr, tmp_path):
    """Two configs that share reasons (here the same file twice): one
    series per reason, as node-problem-detector keys them, counting the
    matches of both, so that the scrape holds no duplicate."""
    work = tmp_path / "work"
    work.mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(record(XID13))
    proc = hpr.start(["--standalone", "--nproc-per-node", "1",
                      "--metrics-port", "0", "--node-problem-config",
                      f"{XID},{XID}", "--kmsg", kmsg,
                      helper("metrics_worker.py")], env={"MW_DIR": work})
    port = listen_port(proc, METRICS_LISTEN_RE, "--metrics-port")
    series = 'problem_counter{reason="Xid13GraphicsEngineException"}'

    def counted():
        text = get(port)[1]
        return text if sample(text, series) else None
    text = deadline_poll(counted, 30, what="the Xid 13 record counted")
    assert sample(text, series) == 2, text
    samples = [line.split(" ")[0] for line in text.splitlines()
               if line and not line.startswith("#")]
    assert len(samples) == len(set(samples)), sorted(
        s for s in samples if samples.count(s) > 1)
    reasons = {r["reason"] for r in json.loads(XID.read_text())["rules"]}
    assert {s for s in samples if s.startswith("problem_counter")} == \
        {f'problem_counter{{reason="{r}"}}' for r in reasons}
    assert promtool_problems(text) == []
    finish(proc, work)


def test_metrics_port_needs_the_token_too(hpr, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    proc = hpr.start(["--standalone", "--nproc-per-node", "1",
                      "--metrics-port", "0", "--server-token-file",
                      token_file(tmp_path), helper("metrics_worker.py")],
                     env={"MW_DIR": work})
    port = listen_port(proc, METRICS_LISTEN_RE, "--metrics-port")
    assert get(port)[0] == 401
    assert get(port, headers={"Authorization": "Bearer wrong"})[0] == 401
    code, text = get(port, headers={"Authorization": f"Bearer {TOKEN}"})
    assert code == 200 and "hyperpodrun_build_info" in text
    finish(proc, work)


def test_example_manifests_fit_the_job():
    """podmonitor.yaml selects examples/eks/job.yaml's pods on a port
    named metrics, and its NetworkPolicy opens that port alone; the
    dashboard's panels are whole."""
    import yaml
    job = yaml.safe_load((Path(SOURCE_ROOT) / "examples" / "eks" /
                          "job.yaml").read_text())
    labels = job["spec"]["replicaSpecs"][0]["template"]["metadata"]["labels"]
    docs = list(yaml.safe_load_all((MONITORING / "podmonitor.yaml")
                                   .read_text()))
    (mon,) = [d for d in docs if d["kind"] == "PodMonitor"]
    (pol,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert mon["apiVersion"] == "monitoring.coreos.com/v1"
    assert mon["metadata"]["namespace"] == job["metadata"]["namespace"]
    assert mon["spec"]["selector"]["matchLabels"] == labels
    (ep,) = mon["spec"]["podMetricsEndpoints"]
    assert (ep["port"], ep["path"]) == ("metrics", "/metrics")
    assert pol["spec"]["podSelector"]["matchLabels"] == labels
    (rule,) = pol["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8081}]
    # The port the comment tells the pod to open and name.
    text = (MONITORING / "podmonitor.yaml").read_text()
    assert '"--metrics-port", "8081"' in text and \
        "name: metrics\n#           containerPort: 8081" in text
    dash = json.loads((MONITORING / "dashboard.json").read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["title"] and p["targets"] and p["gridPos"]["w"] > 0, p
        for t in p["targets"]:
            assert t["expr"].strip() and t["refId"], (p["title"], t)


# ---- A real Prometheus -----------------------------------------------------

class Prometheus:
    """Debian's Prometheus server on a loopback port, scraping one target
    every 200 ms."""

    def __init__(self, tmp_path, target, marker_env):
        self.dir = tmp_path / "prometheus"
        self.dir.mkdir()
        config = self.dir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\n"
            "scrape_configs:\n  - job_name: hyperpodrun\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n")
        self.port = free_port()
        self.log = open(self.dir / "log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=marker_env)

    def query(self, expr):
        """The instant vector's values, as {frozenset(labels): value}."""
        if self.proc.poll() is not None:
            pytest.fail("prometheus exited:\n" + self.output())
        url = "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            code, body = get(self.port, url)
        except OSError:
            return None     # not listening yet
        if code != 200:
            return None
        data = json.loads(body)["data"]["result"]
        return {frozenset(r["metric"].items()): float(r["value"][1])
                for r in data}

    def wait(self, expr, want, what, timeout=90):
        def check():
            got = self.query(expr)
            return got if got and want(list(got.values())) else None
        try:
            return deadline_poll(check, timeout, interval=0.2, what=what)
        except BaseException:
            print(self.output()[-4000:])
            raise

    def output(self):
        self.log.flush()
        return (self.dir / "log").read_text(errors="replace")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        self.log.close()


def test_prometheus_scrapes_a_running_agent(hpr, tmp_path):
    proc, work, port = start_self_driven(
        hpr, tmp_path, ["--max-restarts", "2"], MW_FAIL="file",
        MW_PERIOD="0.05")
    started = time.time()
    prom = Prometheus(tmp_path, port, hpr.env)
    try:
        prom.wait('up{job="hyperpodrun"}', lambda v: v == [1.0],
                  "the target up")
        got = prom.wait("hyperpodrun_build_info", lambda v: v == [1.0],
                        "hyperpodrun_build_info")
        (labels,) = got
        assert dict(labels)["mode"] == "standalone", got
        assert re.match(r"\d+\.\d+", dict(labels)["version"]), got
        # Before the fault Prometheus has seen no restart...
        prom.wait("hyperpodrun_restarts_total", lambda v: v == [0.0],
                  "no restart yet")
        # ...and the compared value follows the worker's log.
        value = 'hyperpodrun_rule_value{rule="Throughput",local_rank="0"}'
        prom.wait(value, lambda v: v == [100.0], "throughput 100")
        (work / "throughput.tmp").write_text("250.5\n")
        os.rename(work / "throughput.tmp", work / "throughput")
        prom.wait(value, lambda v: v == [250.5], "throughput 250.5")
        prom.wait('hyperpodrun_rule_threshold{rule="Throughput"}',
                  lambda v: v == [10.0], "the threshold")
        # A fault: the restart and the fault are counted.
        (work / "crash").touch()
        prom.wait("hyperpodrun_restarts_total", lambda v: v == [1.0],
                  "the restart")
        prom.wait('hyperpodrun_faults_total{cause="worker"}',
                  lambda v: v == [1.0], "the fault")
        prom.wait("hyperpodrun_attempts_total", lambda v: v == [2.0],
                  "the second attempt")
        # A rule's verdict: the second attempt goes SLOW, the third runs.
        verdicts = 'hyperpodrun_rule_verdicts_total{rule="Throughput",' \
                   'verdict="%s"}'
        for v in ("slow", "hanging", "faulted"):
            prom.wait(verdicts % v, lambda v: v == [0.0], f"no {v} verdict")
        (work / "slow").touch()
        prom.wait(verdicts % "slow", lambda v: v == [1.0], "the verdict")
        prom.wait('hyperpodrun_faults_total{cause="rule"}',
                  lambda v: v == [1.0], "the rule fault")
        prom.wait("hyperpodrun_restarts_total", lambda v: v == [2.0],
                  "the second restart")
        prom.wait("hyperpodrun_attempts_total", lambda v: v == [3.0],
                  "the third attempt")
        prom.wait(value, lambda v: v == [250.5], "throughput 250.5 again")
        # What a dashboard panel draws: a rate over the scraped series.
        prom.wait('sum(rate(hyperpodrun_stream_lines_total{stream="stdout"}'
                  '[2s]))', lambda v: v[0] > 0, "lines per second")
        # The dashboard's panels drawn from what Prometheus holds.
        png = tmp_path / "panels.png"
        r = subprocess.run(
            [PYTHON, Path(SOURCE_ROOT) / "tools" / "plot_metrics.py",
             f"http://127.0.0.1:{prom.port}", png, "--step", "0.2",
             "--start", str(started - 1), "--end", str(time.time())],
            capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        m = re.match(r".*: (\d+) panels, (\d+) series$", r.stdout.strip())
        assert m and int(m.group(1)) >= 6 and int(m.group(2)) >= 6, r.stdout
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        prom.stop()
    finish(proc, work)
