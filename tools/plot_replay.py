#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Plots a replay: each threshold rule's metric over time against its
threshold, and each rule's state as a band, to a PNG, for tuning rules
such as LowThroughputDetection.

Usage:
  hyperpodrun --replay LOG --log-monitoring-config RULES \\
      --replay-format json | tools/plot_replay.py - out.png [--stream NAME]

The input is --replay's JSON lines: the "value" events (each metric a
threshold rule compared), the state changes and the summary (the rules'
thresholds, the streams). The stream plotted is --stream, else the
verdict's, else the first judged one. Needs python3-matplotlib.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"WAITING": "#bdbdbd", "HEALTHY": "#4caf50", "SLOW": "#ff9800",
           "HANGING": "#e53935", "FAULTED": "#8e24aa"}


def load(path):
    f = sys.stdin if path == "-" else open(path)
    with f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines or "summary" not in lines[-1]:
        sys.exit(f"plot_replay: {path}: not --replay's JSON output "
                 "(no summary line; give --replay-format json)")
    return lines[:-1], lines[-1]["summary"]


def pick_stream(summary, wanted):
    names = [s["stream"] for s in summary["streams"]]
    if wanted is not None:
        if wanted not in names:
            sys.exit(f"plot_replay: --stream {wanted}: not in the replay "
                     f"(streams: {', '.join(map(str, names))})")
        return wanted
    if summary.get("verdict"):
        return summary["verdict"]["stream"]
    judged = [s["stream"] for s in summary["streams"] if s.get("judged")]
    return judged[0] if judged else (names[0] if names else None)


def bands(events, rule, end):
    """(start, length, state) runs of one rule's state."""
    runs, state, since = [], "WAITING", 0.0
    for e in events:
        if e["rule"] == rule and "state" in e:
            runs.append((since, e["time"] - since, state))
            state, since = e["state"], e["time"]
    runs.append((since, max(end - since, 0.0), state))
    return [r for r in runs if r[1] > 0 or r is runs[-1]]


def plot(events, summary, stream, out):
    mine = [e for e in events if e["stream"] == stream]
    rules = summary["rules"]
    # A threshold rule whose pattern matched nothing has nothing to plot:
    # its band says so.
    seen = {e["rule"] for e in mine if e.get("event") == "value"}
    metric = [r for r in rules if "threshold" in r and r["rule"] in seen]
    end = summary["time"]
    fig, axes = plt.subplots(len(metric) + 1, 1, sharex=True,
                             figsize=(9, 2.2 * len(metric) + 0.5 * len(rules)
                                      + 1.2),
                             gridspec_kw={"height_ratios":
                                          [3] * len(metric) +
                                          [max(1, 0.45 * len(rules))]})
    if len(metric) + 1 == 1:
        axes = [axes]
    for ax, rule in zip(axes, metric):
        points = [(e["time"], e["value"]) for e in mine
                  if e.get("event") == "value" and e["rule"] == rule["rule"]
                  and e["value"] is not None]
        if points:
            ax.plot(*zip(*points), marker=".", color="#1e88e5",
                    label="metric")
        ax.axhline(rule["threshold"], color="#e53935", linestyle="--",
                   label=f"threshold ({rule['operator']} "
                         f"{rule['threshold']:g}, "
                         f"{rule['datapoints']} in a row)")
        for e in mine:
            if e["rule"] == rule["rule"] and e.get("state") == "SLOW":
                ax.axvline(e["time"], color="#ff9800", linewidth=1)
        ax.set_ylabel(rule["rule"], fontsize=8)
        ax.legend(loc="best", fontsize=7)
        ax.grid(alpha=0.3)
    ax = axes[-1]
    for i, rule in enumerate(rules):
        for start, length, state in bands(mine, rule["rule"], end):
            ax.broken_barh([(start, max(length, end / 500))], (i - 0.4, 0.8),
                           color=COLOURS.get(state, "black"))
    ax.set_yticks(range(len(rules)))
    ax.set_yticklabels([r["rule"] for r in rules], fontsize=8)
    ax.set_xlabel("seconds since the start of the log")
    ax.set_xlim(0, max(end, 1e-3))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, COLOURS.keys(), loc="upper center", ncol=5,
              fontsize=7, bbox_to_anchor=(0.5, -0.45 if len(rules) < 3
                                          else -0.25))
    verdict = summary.get("verdict")
    title = f"{summary['format']} log, stream {stream or '(log)'}"
    if verdict:
        title += f": {verdict['state']} by {verdict['rule']} at " \
                 f"{verdict['time']:g} s"
    axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("replay", help="--replay's JSON output, or - for stdin")
    p.add_argument("png", help="the PNG to write")
    p.add_argument("--stream", help="the stream to plot")
    args = p.parse_args()
    events, summary = load(args.replay)
    plot(events, summary, pick_stream(summary, args.stream), args.png)


if __name__ == "__main__":
    main()
