#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Renders docs/monitoring-panels.png, docs/observability.md's picture of the
# dashboard's panels, from a real run: hyperpodrun --standalone with two
# workers (tests/integration/helpers/metrics_worker.py) whose throughput
# drops under the rule's threshold for a while, so the rule goes SLOW, the
# agent stops and restarts the group, and training goes on; Debian's
# Prometheus scrapes --metrics-port every 250 ms and tools/plot_metrics.py
# draws the panels from it.
#
# Usage: tools/monitoring_demo.sh [BUILD_DIR] [OUT.png]
# Needs prometheus and python3-matplotlib; takes about a minute.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${2:-$root/docs/monitoring-panels.png}
dir=$(mktemp -d)
trap 'kill $agent $prom 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

cat > "$dir/rules.json" <<'RULES'
[{"name": "Throughput", "logPattern": ".*throughput ([0-9.]+).*",
  "metricThreshold": 50, "operator": "lt", "metricEvaluationDataPoints": 20},
 {"name": "Step", "logPattern": ".*step \\d+.*",
  "expectedRecurringFrequencyInSeconds": 30}]
RULES
mkdir "$dir/work"
echo 120 > "$dir/work/throughput"
MW_DIR=$dir/work MW_PERIOD=0.2 MW_CKPT=$dir/ckpt \
PYTHONPATH=$root/python PYTHON_EXEC=/usr/bin/python3 \
"$build/cmd/hyperpodrun/hyperpodrun" --standalone --nproc-per-node 2 \
        --max-restarts 1 --log-monitor-ranks all --metrics-port 0 \
        --log-dir "$dir/logs" --log-monitoring-config "$dir/rules.json" \
        "$root/tests/integration/helpers/metrics_worker.py" \
        >"$dir/agent.out" 2>"$dir/agent.err" &
agent=$!
port=""
while [ -z "$port" ]; do
        sleep 0.2
        port=$(sed -n 's/.*metrics (GET \/metrics only) listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$dir/agent.err")
done
prom_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$dir/prometheus.yml" <<CONF
global: {scrape_interval: 250ms, scrape_timeout: 250ms}
scrape_configs:
  - job_name: hyperpodrun
    static_configs: [{targets: ['127.0.0.1:$port']}]
CONF
prometheus --config.file="$dir/prometheus.yml" \
        --storage.tsdb.path="$dir/data" \
        --web.listen-address=127.0.0.1:$prom_port >"$dir/prom.log" 2>&1 &
prom=$!
# From Prometheus' first scrape on.
until /usr/bin/python3 -c "
import json, urllib.request as u
r = json.load(u.urlopen('http://127.0.0.1:$prom_port/api/v1/query?query=up', timeout=1))
assert r['data']['result']" 2>/dev/null; do
        sleep 0.5
done
start=$(date +%s)
# Healthy; under the threshold for 20 data points (4 s), so the rule goes
# SLOW and the agent restarts the group; healthy again.
sleep 12; echo 20 > "$dir/work/throughput"
sleep 2;  echo 35 > "$dir/work/throughput"
sleep 3;  echo 120 > "$dir/work/throughput"
sleep 15
end=$(date +%s)
"$root/tools/plot_metrics.py" "http://127.0.0.1:$prom_port" "$out" \
        --start "$start" --end "$end" --step 0.5 --rate-interval 2s \
        --panel "Compared value against its threshold" \
        --panel "Rule states" \
        --panel "Rule verdicts" \
        --panel "Output lines per second, per rank" \
        --panel "Faults and restarts"
touch "$dir/work/finish"
