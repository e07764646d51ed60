#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Draws the example Grafana dashboard's time-series panels from a
Prometheus server that scraped hyperpodrun, to a PNG: the same queries
(examples/monitoring/dashboard.json) over Prometheus' HTTP API, without
Grafana. For docs/observability.md's picture of the panels, and to look
at a run.

Usage:
  tools/plot_metrics.py PROMETHEUS_URL out.png [--start T] [--end T]
      [--step SECONDS] [--rate-interval DURATION] [--dashboard FILE]
      [--panel TITLE]...

T is seconds since the epoch (default: the last 5 minutes). The
dashboard's variables match everything; $__rate_interval is
--rate-interval (default 4 steps). Panels of type timeseries and
state-timeline are drawn, each with its own axes; --panel keeps those
titles only. Needs python3-matplotlib.
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DASHBOARD = Path(__file__).resolve().parent.parent / "examples" / \
    "monitoring" / "dashboard.json"
STATES = {0: ("waiting", "#bdbdbd"), 1: ("healthy", "#4caf50"),
          2: ("slow", "#ff9800"), 3: ("hanging", "#e53935"),
          4: ("faulted", "#8e24aa")}


def query_range(url, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end,
                                "step": step})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}",
                                    timeout=30) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit(f"plot_metrics: {expr}: HTTP {e.code}: "
                 f"{e.read().decode(errors='replace')}")
    except (OSError, ValueError) as e:
        sys.exit(f"plot_metrics: cannot query {url}: {e}")
    if body.get("status") != "success":
        sys.exit(f"plot_metrics: {expr}: {body.get('error')}")
    return body["data"]["result"]


def expand(expr, rate_interval):
    for var in ("$namespace", "$pod", "$rule"):
        expr = expr.replace(f'"{var}"', '".*"')
    return expr.replace("$__rate_interval", rate_interval)


def legend(fmt, labels):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items())
                        if k != "__name__") or "value"
    out = fmt
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    # Labels a series lacks (pod, outside Kubernetes) leave no braces.
    while "{{" in out:
        a, b = out.index("{{"), out.index("}}") + 2
        out = out[:a] + out[b:]
    return " ".join(out.split()) or labels.get("__name__", "value")


def draw_series(ax, panel, results, start):
    for target, series in results:
        for s in series:
            xs = [float(t) - start for t, _ in s["values"]]
            ys = [float(v) for _, v in s["values"]]
            name = legend(target.get("legendFormat"), s["metric"])
            dashed = "threshold" in name or "floor" in name
            ax.plot(xs, ys, "--" if dashed else "-", label=name,
                    drawstyle="steps-post")
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    if unit:
        ax.set_ylabel(unit)
    if ax.lines:
        ax.legend(fontsize=7, loc="best")


def draw_states(ax, results, start, step):
    rows = []
    for target, series in results:
        for s in series:
            rows.append((legend(target.get("legendFormat"), s["metric"]),
                         s["values"]))
    for i, (name, values) in enumerate(rows):
        for t, v in values:
            label, colour = STATES.get(int(float(v)), ("?", "black"))
            ax.broken_barh([(float(t) - start, step)], (i - 0.4, 0.8),
                           color=colour)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([n for n, _ in rows], fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for _, c in
               STATES.values()]
    ax.legend(handles, [n for n, _ in STATES.values()], fontsize=7,
              loc="upper left", ncol=5)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prometheus")
    p.add_argument("out")
    p.add_argument("--start", type=float)
    p.add_argument("--end", type=float)
    p.add_argument("--step", type=float, default=1.0)
    p.add_argument("--rate-interval")
    p.add_argument("--dashboard", default=str(DASHBOARD))
    p.add_argument("--panel", action="append", default=[])
    a = p.parse_args()
    end = a.end or time.time()
    start = a.start or end - 300
    if start >= end or a.step <= 0:
        sys.exit("plot_metrics: --start must come before --end, and "
                 "--step be positive")
    rate = a.rate_interval or f"{max(1, round(4 * a.step))}s"
    try:
        dash = json.loads(Path(a.dashboard).read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"plot_metrics: {a.dashboard}: {e}")
    panels = [q for q in dash["panels"]
              if q["type"] in ("timeseries", "state-timeline") and
              (not a.panel or q["title"] in a.panel)]
    missing = set(a.panel) - {q["title"] for q in panels}
    if missing:
        sys.exit(f"plot_metrics: no time-series panel titled "
                 f"{', '.join(sorted(missing))} in {a.dashboard}")
    fig, axes = plt.subplots(len(panels), 1, sharex=True, squeeze=False,
                             figsize=(10, 2.6 * len(panels)))
    drawn = 0
    for ax, panel in zip(axes[:, 0], panels):
        results = [(t, query_range(a.prometheus,
                                   expand(t["expr"], rate), start, end,
                                   a.step))
                   for t in panel["targets"]]
        drawn += sum(len(s) for _, s in results)
        ax.set_title(panel["title"], fontsize=10, loc="left")
        if panel["type"] == "state-timeline":
            draw_states(ax, results, start, a.step)
        else:
            draw_series(ax, panel, results, start)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print(f"{a.out}: {len(panels)} panels, {drawn} series")
    if drawn == 0:
        sys.exit("plot_metrics: no series in that window")


if __name__ == "__main__":
    main()
