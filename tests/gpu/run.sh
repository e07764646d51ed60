#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/gpu/run.sh [BINDIR]: the checks that need a real GPU, in one pass
# of under 5 minutes, on a machine with NVIDIA GPU(s), torch and the pip
# NCCL (see tests/gpu/README.md):
#   1. --preflight nccl: hyperpodrun-nccl-check on the real libnccl.so.2
#      and CUDA runtime, alone and under the agent, with /metrics;
#   2. an NCCL hang on the GPU under --hang-dump full: the hang report with
#      the Python stacks, /proc states, torch's flight recorder and NCCL's
#      RAS report, then exit 124;
#   3. tools/fr_dump.py on the flight recorder dump the report names.
# BINDIR (default .gpu, from the repository root) holds hyperpodrun and
# hyperpodrun-nccl-check side by side. Results go to $OUT (a new
# directory in /tmp without it): summary.txt (one PASS/FAIL line per
# check, INFO lines with facts), gpu-results.tar.gz (everything), and a
# few files copied out of it for a quick look. Every step is bounded in
# time and a failed step never stops the next. Exit status: 0 when every
# check passed, 1 otherwise.
#
# Rehearsal without a GPU: HPGPU_MODE=cpu (gloo, a Python-level hang),
# PYTHON=/usr/bin/python3 and HPGPU_PREFLIGHT_LIBRARY=<libnccl-double.so>.
# shellcheck disable=SC2012,SC1091
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
BIN=${1:-.gpu}
case $BIN in /*) ;; *) BIN=$ROOT/$BIN ;; esac
HPR=$BIN/hyperpodrun
HELPER=$BIN/hyperpodrun-nccl-check
WORKER=$ROOT/tests/gpu/worker.py
CHECK=$ROOT/tests/gpu/check.py
RULES=$ROOT/tests/gpu/rules.json
MODE=${HPGPU_MODE:-gpu}
# The interpreter: $PYTHON, else the first python3 that has torch.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
        for c in "$(command -v python3)" /opt/torch/.venv/bin/python3 /usr/bin/python3; do
                if [ -x "$c" ] && "$c" -c 'import importlib.util as u, sys
sys.exit(u.find_spec("torch") is None)' 2>/dev/null; then
                        PY=$c
                        break
                fi
        done
        PY=${PY:-$(command -v python3)}
fi
PFLIB=${HPGPU_PREFLIGHT_LIBRARY:-}
BUDGET=${HPGPU_BUDGET:-280}
STEPS=5
START=$(date +%s)
OUT=${OUT:-$(mktemp -d /tmp/hpgpu-out.XXXXXX)}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/hpgpu.XXXXXX)
SUMMARY=$W/summary.txt
: > "$SUMMARY"

log() { printf '[%3ds] %s\n' "$(($(date +%s) - START))" "$*" | tee -a "$W/run.log"; }
# note KIND NAME DETAIL: one summary line (KIND is PASS, FAIL, SKIP, INFO).
note() {
        local kind=$1 name=$2
        shift 2
        printf '%s %s: %s\n' "$kind" "$name" "$*" >> "$SUMMARY"
        log "$kind $name: $*"
}
# Adds check.py's lines to the summary.
judge() {
        local lines
        lines=$(timeout -k 5 60 "$PY" "$CHECK" "$@" 2>&1) ||
                lines="FAIL check_$1: check.py $1 failed: $lines"
        printf '%s\n' "$lines" >> "$SUMMARY"
        printf '%s\n' "$lines" | while IFS= read -r l; do log "$l"; done
}
# Seconds left of the budget.
left() { echo $((BUDGET - ($(date +%s) - START))); }
# bound N: N, or less when the budget runs short (0: no time left).
bound() {
        local l
        l=$(($(left) - 15))
        if [ "$l" -lt 10 ]; then echo 0; elif [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}
# alive PID: the process still runs.
alive() { kill -0 "$1" 2>/dev/null; }
# finish_bg PID SECONDS: waits for a background run (which its own
# timeout(1) bounds; this is the backstop), its exit status in RC.
finish_bg() {
        local pid=$1 until=$(($(date +%s) + $2))
        while alive "$pid" && [ "$(date +%s)" -lt "$until" ]; do sleep 0.2; done
        if alive "$pid"; then
                log "backstop: killing $pid"
                kill -KILL "$pid" 2>/dev/null
        fi
        wait "$pid"
        RC=$?
}
# A timeout(1) --verbose that fired says so on the run's stderr.
timed_out() { grep -q "^timeout: sending signal" "$1" 2>/dev/null; }
first() { for f in "$@"; do [ -e "$f" ] && { echo "$f"; return 0; }; done; return 1; }

log "tests/gpu/run.sh: mode $MODE, binaries $BIN, python $PY, work $W, out $OUT"
note INFO start "$(date -u +%FT%TZ) on $(cat /proc/sys/kernel/hostname), mode $MODE"

# ---- 0. facts ---------------------------------------------------------
log "== facts"
{
        echo "## uname"; uname -a
        echo "## os-release"; cat /etc/os-release 2>&1
        echo "## glibc"; ldd --version 2>&1 | head -1
        echo "## id"; id
        echo "## cpus"; nproc
        echo "## memory"; free -g 2>&1
        echo "## /usr/local/cuda*"; ls -ld /usr/local/cuda* 2>&1
        echo "## /proc/driver/nvidia/gpus"; ls /proc/driver/nvidia/gpus 2>&1
        echo "## /etc/hosts"; cat /etc/hosts 2>&1
        echo "## getent ahosts localhost"; getent ahosts localhost 2>&1
        echo "## environment (TORCH/NCCL/CUDA/LD_/PYTHON)"
        env | grep -E '^(TORCH|NCCL|CUDA|LD_LIBRARY|PYTHON|OMP)' | sort
        echo "## cgroup"; cat /proc/self/cgroup 2>&1; ls /sys/fs/cgroup 2>&1 | head -5
        echo "## hyperpodrun --version"; "$HPR" --version 2>&1
        echo "## ldd hyperpodrun"; ldd "$HPR" 2>&1
        echo "## ldd hyperpodrun-nccl-check"; ldd "$HELPER" 2>&1
        echo "## listening on 28028 before"; awk 'NR > 1 && $2 ~ /:6D9C$/' /proc/net/tcp /proc/net/tcp6 2>&1
} > "$W/facts.txt" 2>&1
timeout -k 5 30 nvidia-smi > "$W/nvidia-smi.txt" 2>&1
note INFO gpu "$(timeout -k 5 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4 | tr '\n' ';')"
note INFO os "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"), $(ldd --version 2>&1 | head -1), kernel $(uname -r)"
note INFO cuda_dir "$(ls -d /usr/local/cuda* 2>/dev/null | tr '\n' ' ' || true)$([ -e /usr/local/cuda ] || echo 'no /usr/local/cuda')"
note INFO python "$PY: $("$PY" --version 2>&1)"
note INFO hyperpodrun "$("$HPR" --version 2>&1 | head -2 | tr '\n' ' ')"
note INFO localhost "$(getent ahosts localhost 2>&1 | awk '{print $1}' | sort -u | tr '\n' ' ')"
timeout -k 5 40 "$PY" -c 'import importlib.metadata as m
for d in sorted(m.distributions(), key=lambda d: str(d.metadata["Name"]).lower()):
    n = str(d.metadata["Name"])
    if n.lower().startswith(("torch", "nvidia", "triton")):
        print(n, d.version)' > "$W/pip-list.txt" 2>&1
note INFO pip "$(tr -s ' ' < "$W/pip-list.txt" | tr '\n' ';')"

# The pip NCCL and CUDA runtime, found without importing torch.
timeout -k 5 30 "$PY" - > "$W/libs.txt" 2>&1 <<'EOF'
import glob, importlib.util, os, site, sys
roots = []
for p in list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path:
    if p and os.path.isdir(p) and p not in roots:
        roots.append(p)
seen = []
for r in roots:
    for pat in ("nvidia/**/libnccl.so*", "nvidia/**/libcudart.so*"):
        for f in sorted(glob.glob(os.path.join(r, pat), recursive=True)):
            if f not in seen:
                seen.append(f)
                kind = "nccl" if "libnccl" in f else "cudart"
                print(kind, f)
spec = importlib.util.find_spec("torch")
if spec and spec.submodule_search_locations:
    print("torch", list(spec.submodule_search_locations)[0])
EOF
if ! grep -q '^nccl ' "$W/libs.txt"; then
        timeout -k 5 30 find / -xdev \( -name 'libnccl.so*' -o -name 'libcudart.so*' \) \
                -not -path '/proc/*' 2>/dev/null |
                sed -e 's/^\(.*libnccl.*\)$/nccl \1/' -e 's/^\(.*libcudart.*\)$/cudart \1/' >> "$W/libs.txt"
fi
ldconfig -p 2>/dev/null | grep -E 'libnccl|libcudart' > "$W/ldconfig.txt"
NCCL_LIB=$(awk '$1 == "nccl" && $2 ~ /libnccl\.so\.2$/ {print $2; exit}' "$W/libs.txt")
[ -n "$NCCL_LIB" ] || NCCL_LIB=$(awk '$1 == "nccl" {print $2; exit}' "$W/libs.txt")
CUDART_LIB=
for want in 'libcudart\.so\.13$' 'libcudart\.so\.12$' 'libcudart\.so$' 'libcudart\.so'; do
        CUDART_LIB=$(awk -v w="$want" '$1 == "cudart" && $2 ~ w {print $2; exit}' "$W/libs.txt")
        [ -n "$CUDART_LIB" ] && break
done
TORCH_DIR=$(awk '$1 == "torch" {print $2; exit}' "$W/libs.txt")
LIBPATH=
[ -n "$NCCL_LIB" ] && LIBPATH=$(dirname "$NCCL_LIB")
if [ -n "$CUDART_LIB" ]; then
        case $(basename "$CUDART_LIB") in
        libcudart.so | libcudart.so.13 | libcudart.so.12 | libcudart.so.11.0)
                [ "$(dirname "$CUDART_LIB")" = "$LIBPATH" ] ||
                        LIBPATH=$LIBPATH:$(dirname "$CUDART_LIB") ;;
        *)      # A name hyperpodrun-nccl-check does not try: link it.
                mkdir -p "$W/libdir"
                ln -sf "$CUDART_LIB" "$W/libdir/libcudart.so"
                LIBPATH=$LIBPATH:$W/libdir ;;
        esac
fi
if [ -n "$NCCL_LIB" ] && [ "$(basename "$NCCL_LIB")" != libnccl.so.2 ]; then
        mkdir -p "$W/libdir"
        ln -sf "$NCCL_LIB" "$W/libdir/libnccl.so.2"
        LIBPATH=$W/libdir:$LIBPATH
fi
LIBPATH=${LIBPATH#:}
note INFO libraries "nccl ${NCCL_LIB:-none}; cudart ${CUDART_LIB:-none}; torch ${TORCH_DIR:-none}; LD_LIBRARY_PATH for the check: ${LIBPATH:-none}"
# shellcheck disable=SC2054 # NCCL_DEBUG_SUBSYS takes a comma list
PF_ENV=(LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV)
PF_ARGS=()
[ -n "$PFLIB" ] && PF_ARGS=(--library "$PFLIB")

# ---- 1a. hyperpodrun-nccl-check alone -----------------------------------
log "== 1a. hyperpodrun-nccl-check alone"
T=$(bound 60)
if [ "$T" -eq 0 ]; then
        note SKIP nccl_check_alone "no time left"
else
        env "${PF_ENV[@]}" NCCL_DEBUG_FILE="$W/nccl-debug-check.%h.%p.log" \
                timeout --verbose -k 5 "$T" "$HELPER" --max-bytes 67108864 "${PF_ARGS[@]}" \
                > "$W/nccl-check.out" 2> "$W/nccl-check.err"
        rc=$?
        last=$(grep -E '"ok":' "$W/nccl-check.out" | tail -1)
        if [ "$rc" -eq 0 ] && printf '%s' "$last" | grep -q '"ok":true'; then
                note PASS nccl_check_alone "$(tail -1 "$W/nccl-check.err") $last"
        else
                note FAIL nccl_check_alone "exit $rc$(timed_out "$W/nccl-check.err" && echo ' (timed out)'): $last $(tail -3 "$W/nccl-check.err" | tr '\n' ' ')"
        fi
        note INFO nccl_check_sizes "$(grep -o '"size":[0-9]*,"time_us":[0-9.]*,"algbw":[0-9.]*,"busbw":[0-9.]*' "$W/nccl-check.out" | tr '\n' ' ')"
fi

# ---- 1b. --preflight nccl under the agent, with /metrics -------------------
log "== 1b. hyperpodrun --preflight nccl"
T=$(bound 75)
if [ "$T" -eq 0 ]; then
        note SKIP preflight "no time left"
else
        mkdir -p "$W/preflight-logs"
        PF_AGENT_ARGS=()
        [ -n "$PFLIB" ] && PF_AGENT_ARGS=(--preflight-library "$PFLIB")
        env "${PF_ENV[@]}" NCCL_DEBUG_FILE="$W/nccl-debug-preflight.%h.%p.log" \
                PYTHON_EXEC="$PY" HPGPU_MODE=wait HPGPU_GO="$W/preflight-go" \
                timeout --verbose -k 5 "$T" "$HPR" --standalone --nproc-per-node 1 \
                --tee 3 --log-dir "$W/preflight-logs" --preflight nccl \
                --preflight-timeout 60 "${PF_AGENT_ARGS[@]}" \
                --server-host 127.0.0.1 --server-port 0 "$WORKER" \
                > "$W/preflight-agent.out" 2> "$W/preflight-agent.err" &
        pid=$!
        until=$(($(date +%s) + T))
        port=
        while alive "$pid" && [ -z "$port" ] && [ "$(date +%s)" -lt "$until" ]; do
                port=$(grep -o -m1 'listening on http://127\.0\.0\.1:[0-9]*' \
                        "$W/preflight-agent.err" 2>/dev/null | sed 's/.*://')
                [ -n "$port" ] || sleep 0.2
        done
        got=
        while [ -n "$port" ] && alive "$pid" && [ "$(date +%s)" -lt "$until" ]; do
                timeout -k 2 8 "$PY" -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
                        "http://127.0.0.1:$port/metrics" > "$W/preflight-metrics.txt" 2>&1
                if grep -q '^hyperpodrun_preflight_passed ' "$W/preflight-metrics.txt"; then
                        got=1
                        break
                fi
                sleep 0.5
        done
        touch "$W/preflight-go"
        finish_bg "$pid" "$((until - $(date +%s) + 10))"
        rc=$RC
        timed_out "$W/preflight-agent.err" && note INFO preflight_timeout "timeout(1) stopped hyperpodrun after $T s"
        [ -n "$got" ] || note INFO preflight_metrics_fetch "no /metrics with the preflight figures (port '${port:-none}')"
        judge metrics "$W/preflight-metrics.txt" "$W/preflight-agent.err" "$rc"
fi

# ---- 2. a hang on the GPU under --hang-dump full --------------------------
log "== 2. NCCL hang, --hang-dump full"
HANG_LINE=$(grep -n '# HANG-HERE$' "$WORKER" | cut -d: -f1)
T=$(bound 150)
REPORT=
if [ "$T" -eq 0 ]; then
        note SKIP hang "no time left"
else
        mkdir -p "$W/hang-logs"
        env PYTHON_EXEC="$PY" HPGPU_MODE="$MODE" HPGPU_STEPS=$STEPS \
                HPGPU_DIAG="$W/worker-facts.json" LOGLEVEL=DEBUG \
                HPGPU_SELF_DUMP="$W/fr-self-dump.pickle" \
                TORCH_CPP_LOG_LEVEL=INFO NCCL_DEBUG=INFO \
                NCCL_DEBUG_SUBSYS=INIT,ENV,RAS \
                NCCL_DEBUG_FILE="$W/nccl-debug-hang.%h.%p.log" \
                timeout --verbose -k 5 "$T" "$HPR" --standalone --nproc-per-node 1 \
                --tee 3 --log-dir "$W/hang-logs" --hang-dump full \
                --hang-dump-timeout 10 --log-monitoring-config "$RULES" "$WORKER" \
                > "$W/hang-agent.out" 2> "$W/hang-agent.err" &
        pid=$!
        until=$(($(date +%s) + T))
        seen=
        while alive "$pid" && [ "$(date +%s)" -lt "$until" ]; do
                if grep -qs '^hpgpu: about to hang' "$W"/hang-logs/*/attempt_0/0/stdout.log; then
                        seen=1
                        break
                fi
                sleep 0.2
        done
        if [ -n "$seen" ]; then
                # While it hangs, before the rule's 10 s: who listens for
                # RAS clients, NCCL's RAS asked directly, the GPU busy.
                log "the worker hangs; looking around"
                sleep 1
                {
                        echo "## listening on 28028 (0x6D9C) during the hang"
                        awk 'NR == 1 || $2 ~ /:6D9C$/' /proc/net/tcp
                        awk 'NR == 1 || $2 ~ /:6D9C$/' /proc/net/tcp6
                        echo "## the dump FIFO"
                        "$PY" -c 'import json, os, sys
d = json.load(open(sys.argv[1]))
stem = d.get("env", {}).get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
print(stem or "(no TORCH_NCCL_DEBUG_INFO_PIPE_FILE)")
if stem:
    os.system("ls -la " + os.path.dirname(stem))' "$W/worker-facts.json" 2>&1
                        echo "## nvidia-smi"
                        timeout -k 2 10 nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>&1
                        timeout -k 2 10 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
                } > "$W/during-hang.txt" 2>&1
                for addr in 127.0.0.1 ::1; do
                        echo "## RAS STATUS asked at $addr:28028" >> "$W/during-hang-ras.txt"
                        timeout -k 2 8 "$PY" "$CHECK" ras "$addr" 28028 >> "$W/during-hang-ras.txt" 2>&1
                done
                note INFO ras_probe_during_hang "$(grep -E '^(127\.0\.0\.1|::1):28028' "$W/during-hang-ras.txt" | tr '\n' ';')"
        else
                note FAIL hang_reached "the worker never printed 'hpgpu: about to hang'"
                note INFO worker_stderr_tail "$(tail -n 6 "$W"/hang-logs/*/attempt_0/0/stderr.log 2>/dev/null | cut -c1-300 | tr '\n' '|')"
        fi
        finish_bg "$pid" "$((until - $(date +%s) + 10))"
        rc=$RC
        timed_out "$W/hang-agent.err" && note INFO hang_timeout "timeout(1) stopped hyperpodrun after $T s"
        REPORT=$(first "$W"/hang-logs/*/attempt_0/hang-report.json)
        judge report "${REPORT:-$W/no-hang-report.json}" "$WORKER" "$HANG_LINE" "$rc" "$W/hang-agent.err"
        note INFO worker_facts "$(timeout -k 2 10 "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
keep = {k: d.get(k) for k in ("torch", "cuda", "nccl", "gpu", "import_s", "init_s")}
for k in ("after_init", "after_first_collective", "before_hang"):
    s = d.get(k) or {}
    keep[k] = {"fifo": s.get("fifo"), "threads": s.get("threads"), "libraries": s.get("libraries")}
print(json.dumps(keep))' "$W/worker-facts.json" 2>&1)"
        note INFO torch_log_lines "$(grep -h -i -E 'pipe file|dump signal|flight recorder|dumping nccl trace|deprecated; use|HeartbeatMonitor environments' \
                "$W"/hang-logs/*/attempt_0/0/stderr.log 2>/dev/null | cut -c1-300 | head -8 | tr '\n' ';')"
        note INFO nccl_ras_debug_lines "$(grep -h -E 'RAS' "$W"/nccl-debug-hang.* 2>/dev/null | cut -c1-200 | head -5 | tr '\n' ';')"
fi

# ---- 3. tools/fr_dump.py on the dump ----------------------------------------
log "== 3. tools/fr_dump.py"
FR=
if [ -n "$REPORT" ]; then
        FR=$(timeout -k 2 10 "$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))["ranks"][0]
print((r.get("nccl_flight_recorder") or {}).get("path") or "")' "$REPORT" 2>/dev/null)
fi
[ -n "$FR" ] && [ -e "$FR" ] || FR=$(first "$W"/hang-logs/*/attempt_0/nccl-flight-recorder-rank-0 \
        "${HOME:-/root}"/.cache/torch/comm_lib_trace_rank_0 /tmp/nccl_trace_rank_0)
if [ -z "$FR" ] || [ "$(bound 60)" -eq 0 ]; then
        note FAIL fr_dump_text "no flight recorder dump to read (or no time left)"
        note FAIL fr_dump_entries "no flight recorder dump to read"
else
        cp "$FR" "$W/flight-recorder.pickle" 2>/dev/null
        timeout -k 5 30 "$PY" "$ROOT/tools/fr_dump.py" "$FR" --last 0 > "$W/fr-dump.txt" 2>&1
        rc1=$?
        timeout -k 5 30 "$PY" "$ROOT/tools/fr_dump.py" "$FR" --json > "$W/fr-dump.json" 2> "$W/fr-dump-json.err"
        rc2=$?
        [ -s "$W/fr-dump-json.err" ] && cat "$W/fr-dump-json.err" >> "$W/fr-dump.json"
        judge fr "$rc1" "$W/fr-dump.txt" "$rc2" "$W/fr-dump.json" "$STEPS"
        judge globals "$FR"
        # The whole dump, unpickled with torch at hand (this run's own file),
        # whatever tools/fr_dump.py made of it.
        timeout -k 5 60 "$PY" -c 'import torch, runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$CHECK" load "$FR" > "$W/fr-full-load.json" 2>&1
        rc3=$?
        if [ "$rc3" -eq 0 ]; then
                timeout -k 5 30 "$PY" "$CHECK" fr 0 /dev/null 0 "$W/fr-full-load.json" "$STEPS" |
                        grep fr_dump_entries | sed 's/^\([A-Z]*\) fr_dump_entries:/INFO fr_full_load_\1:/' >> "$SUMMARY"
        else
                note INFO fr_full_load "exit $rc3: $(tail -2 "$W/fr-full-load.json" | tr '\n' ' ')"
        fi
fi

# torch's own dump, taken by the worker before the hang (gpu mode).
if [ -s "$W/fr-self-dump.pickle" ]; then
        timeout -k 5 30 "$PY" "$ROOT/tools/fr_dump.py" "$W/fr-self-dump.pickle" --last 0 \
                > "$W/fr-dump-self.txt" 2>&1
        note INFO fr_dump_self "exit $?: $(head -3 "$W/fr-dump-self.txt" | tr '\n' '|')"
        note INFO fr_self_pickle_globals "$(timeout -k 5 30 "$PY" "$CHECK" globals "$W/fr-self-dump.pickle" 2>&1 | sed 's/^INFO fr_pickle_globals: //')"
fi

# ---- diagnostics: what the installed torch says about its variables ------------
log "== diagnostics"
if [ -n "$TORCH_DIR" ] && [ "$(bound 40)" -gt 0 ]; then
        mkdir -p "$W/torch-headers"
        grep -l -E 'DEBUG_INFO_PIPE_FILE|TRACE_BUFFER_SIZE|DumpPipe|DEBUG_INFO_TEMP_FILE|FR_BUFFER_SIZE|HeartbeatMonitor' \
                "$TORCH_DIR"/include/torch/csrc/distributed/c10d/*.h* 2>/dev/null |
                while IFS= read -r f; do cp "$f" "$W/torch-headers/"; done
        LIBTC=$(first "$TORCH_DIR"/lib/libtorch_cuda.so "$TORCH_DIR"/lib/libtorch_cuda*.so)
        if [ -n "$LIBTC" ]; then
                timeout -k 5 "$(bound 40)" grep -a -o -E 'TORCH_(NCCL|FR)_[A-Z0-9_]+' "$LIBTC" |
                        sort | uniq -c > "$W/torch-env-names.txt"
                note INFO torch_env_names "$(awk '{print $2}' "$W/torch-env-names.txt" |
                        grep -E 'PIPE|TEMP_FILE|BUFFER_SIZE|MONITORING|DUMP_ON|COORD' | tr '\n' ' ')"
        fi
        note INFO torch_headers "$(ls "$W/torch-headers" 2>/dev/null | tr '\n' ' ')"
fi
timeout -k 2 10 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$W/after-nvidia-smi.txt" 2>&1
# Any process still running the worker (from /proc: ps may be missing).
for c in /proc/[0-9]*/cmdline; do
        if tr '\0' ' ' < "$c" 2>/dev/null | grep -q -F "$WORKER"; then
                p=${c#/proc/}
                echo "${p%/cmdline}: $(tr '\0' ' ' < "$c" 2>/dev/null) state $(awk '{print $3}' "/proc/${p%/cmdline}/stat" 2>/dev/null)"
        fi
done > "$W/leftovers.txt"
if [ -s "$W/leftovers.txt" ]; then
        note FAIL no_leftovers "$(tr '\n' ';' < "$W/leftovers.txt")"
else
        note PASS no_leftovers "no worker process left; GPU apps after: $(tail -n +2 "$W/after-nvidia-smi.txt" | tr '\n' ';')"
fi

# ---- collect ----------------------------------------------------------------
npass=$(grep -c '^PASS ' "$SUMMARY")
nfail=$(grep -c '^FAIL ' "$SUMMARY")
note INFO total "$npass passed, $nfail failed, $(($(date +%s) - START)) s"
# Nothing above 8 MiB goes into the archive whole.
find "$W" -type f -size +8M 2>/dev/null | while IFS= read -r f; do
        head -c 8388608 "$f" > "$f.cut" && rm -f "$f" && mv "$f.cut" "$f.first-8MiB"
done
tar -C "$(dirname "$W")" -czf "$OUT/gpu-results.tar.gz" "$(basename "$W")" 2>/dev/null
if [ "$(stat -c %s "$OUT/gpu-results.tar.gz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
        tar -C "$(dirname "$W")" -czf "$OUT/gpu-results.tar.gz" \
                --exclude='*.pickle' --exclude='nccl-debug-*' "$(basename "$W")" 2>/dev/null
fi
cp "$SUMMARY" "$OUT/summary.txt"
cp "$W/run.log" "$OUT/run.log" 2>/dev/null
[ -n "$REPORT" ] && cp "$REPORT" "$OUT/hang-report.json"
[ -e "$W/fr-dump.txt" ] && cp "$W/fr-dump.txt" "$OUT/fr-dump.txt"
[ -e "$W/worker-facts.json" ] && cp "$W/worker-facts.json" "$OUT/worker-facts.json"
echo
echo "==== summary ($OUT/summary.txt; everything in $OUT/gpu-results.tar.gz) ===="
cat "$SUMMARY"
[ "$nfail" -eq 0 ]
