#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run.sh BINARY: proof that the static binary runs where the build machine's
# glibc is not. It checks that BINARY is static, then runs it in a minimal
# Debian 11 root (glibc 2.31, as Ubuntu 20.04) made by debootstrap: a job
# with tee'd console and files, a log-rule verdict, the operator API driven
# over loopback from outside the root, host names and addresses for
# --master-addr, and a missing program. One line per check, then
# "static proof: N passed, N failed" (./dev.sh test counts it).
#
# Needs root (debootstrap, chroot, mount), debootstrap, curl, file and
# binutils. The root is kept in HYPERPODRUN_BULLSEYE_ROOT (default
# ~/.cache/hyperpodrun/bullseye-root) and made again when it is missing or
# was made from another mirror.
set -u

binary=$(readlink -f "${1:?usage: run.sh BINARY}")
root=${HYPERPODRUN_BULLSEYE_ROOT:-$HOME/.cache/hyperpodrun/bullseye-root}
here=$(cd "$(dirname "$0")" && pwd)

passed=0
failed=0
pass() { echo "ok - $1"; passed=$((passed + 1)); }
fail() { echo "FAIL - $1"; failed=$((failed + 1)); }
summary() { echo "static proof: $passed passed, $failed failed"; }
# check NAME COMMAND...: one check, passed when COMMAND succeeds; its
# output is shown only when it fails.
check() {
        local name=$1 out
        shift
        if out=$("$@" 2>&1); then
                pass "$name"
        else
                fail "$name"
                printf '%s\n' "$out" | sed 's/^/    /'
        fi
}

# The Debian archive this machine installs its own release from (not the
# -security or -updates suites): the root comes from the same mirror. No
# release files are read, so it works before any apt-get update.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
mirror=$(apt-get indextargets --no-release-info \
                --format '$(RELEASE) $(REPO_URI)' |
        awk -v c="$codename" '$1 == c { print $2; exit }')
if [ -z "$mirror" ]; then
        fail "find the mirror of '$codename' in this machine's apt sources"
        summary
        exit 1
fi
key="bullseye minbase $mirror"

# One run at a time per root: another would share its /proc mount and
# its /tmp/proof.
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9

make_root() {
        if [ -f "$root/.hyperpodrun-root" ] &&
           [ "$(cat "$root/.hyperpodrun-root")" = "$key" ]; then
                return 0
        fi
        echo "run.sh: debootstrap --variant=minbase bullseye $root ($mirror)"
        rm -rf "$root" "$root.new"
        # Into a new directory, renamed when complete: an interrupted run
        # leaves nothing that looks like a root.
        debootstrap --variant=minbase bullseye "$root.new" "$mirror" \
                >"$root.log" 2>&1 || { tail -n 20 "$root.log"; return 1; }
        echo "$key" >"$root.new/.hyperpodrun-root"
        mv "$root.new" "$root"
}

is_static() {
        file -L "$binary" | grep -q 'statically linked' &&
        { LC_ALL=C ldd "$binary" 2>&1 || true; } |
                grep -q 'not a dynamic executable' &&
        ! readelf -lW "$binary" | grep -qE '^ *(INTERP|DYNAMIC) ' &&
        ! readelf -d "$binary" | grep -q 'Dynamic section'
}
check "the binary has no interpreter and no dynamic section" is_static

# examples/eks/Dockerfile's build stage runs ./dev.sh static in WORKDIR: what
# its COPY --from=build takes must exist in the checkout after that command
# (tests/integration/test_examples.py checks the rest of the file).
dockerfile_copies() {
        local top dockerfile workdir src n=0
        top=$(cd "$here/../.." && pwd)
        dockerfile=$top/examples/eks/Dockerfile
        workdir=$(sed -n 's/^WORKDIR //p' "$dockerfile" | head -n 1)
        for src in $(sed -n 's/^COPY --from=build \([^ ]*\) .*/\1/p' \
                        "$dockerfile"); do
                echo "$src -> $top/${src#"$workdir"/}"
                [ -f "$top/${src#"$workdir"/}" ] || return 1
                n=$((n + 1))
        done
        [ $n -gt 0 ]
}
check "the Dockerfile's COPY --from=build paths exist" dockerfile_copies

if ! make_root; then
        fail "debootstrap bullseye"
        summary
        exit 1
fi
pass "a Debian 11 root ($root)"

install -m 755 "$binary" "$root/usr/local/bin/hyperpodrun"
rm -rf "$root/tmp/proof"
mkdir -p "$root/tmp/proof"
cp "$here"/*.sh "$here"/*.json "$root/tmp/proof/" 2>/dev/null
mount -t proc proc "$root/proc"
trap 'umount "$root/proc"' EXIT
# A signal ends the script through its EXIT trap, which unmounts /proc.
trap 'exit 1' HUP INT TERM
chroot=$(command -v chroot)

# in_root COMMAND...: COMMAND in the root, with a clean environment.
in_root() {
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
                "$chroot" "$root" "$@"
}

check "the root's glibc is 2.31" \
        sh -c "env -i '$chroot' '$root' ldd --version | head -n 1 |
               grep -q ' 2\.31\$'"

version() {
        local out
        out=$(in_root hyperpodrun --version) || return 1
        printf '%s\n' "$out"
        printf '%s\n' "$out" | head -n 1 | grep -q ', static)$' &&
        printf '%s\n' "$out" | grep -q '^PCRE2 .* (JIT yes)$' &&
        printf '%s\n' "$out" | grep -q '^libuv ' &&
        printf '%s\n' "$out" | grep -q '^cJSON ' &&
        printf '%s\n' "$out" | grep -q '^libyaml ' &&
        printf '%s\n' "$out" | grep -q '^http-parser '
}
check "--version: static, PCRE2 with JIT, the libraries" version

# Two /bin/sh workers, each writing a line to stdout and one to stderr.
tee_job() {
        local out rc dir r
        out=$(in_root hyperpodrun --standalone --nproc-per-node 2 --tee 3 \
                --log-dir /tmp/proof/job --no-python /bin/sh -c \
                'echo "out of $RANK"; echo "err of $RANK" >&2' 2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 0 ] || { echo "exit status $rc"; return 1; }
        for r in 0 1; do
                printf '%s\n' "$out" | grep -qx "\[default$r\]:out of $r" &&
                printf '%s\n' "$out" | grep -qx "\[default$r\]:err of $r" ||
                        { echo "console lacks rank $r's lines"; return 1; }
                dir=$(echo "$root"/tmp/proof/job/*/attempt_0/$r)
                [ "$(cat "$dir/stdout.log")" = "out of $r" ] &&
                [ "$(cat "$dir/stderr.log")" = "err of $r" ] ||
                        { echo "rank $r's files in $dir"; return 1; }
        done
}
check "2 /bin/sh workers, --tee 3: console and per-rank files" tee_job

# A throughput rule judged on the first data point: the job ends 124.
verdict() {
        local out rc
        out=$(in_root hyperpodrun --standalone --nproc-per-node 1 \
                --log-dir /tmp/proof/verdict \
                --log-monitoring-config /tmp/proof/slow-rule.json \
                --no-python /bin/sh -c \
                "echo \"[Epoch 0 Batch 1] {'samples/sec': 3}\"; exec sleep 60" \
                2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 124 ] || { echo "exit status $rc, not 124"; return 1; }
        printf '%s\n' "$out" | grep -q 'LogSlow_LowThroughputDetection'
}
check "a log-rule verdict: LogSlow, exit status 124" verdict

# --master-addr reaches the workers as given: the agent resolves no name
# (a static glibc could not without the NSS modules of its own version).
master_addr() {
        local addr=$1 out rc
        out=$(in_root hyperpodrun --rdzv-backend static --nnodes 1 \
                --node-rank 0 --master-addr "$addr" --master-port 29511 \
                --nproc-per-node 1 --tee 3 --log-dir /dev/null --no-python \
                /bin/sh -c 'echo "master=$MASTER_ADDR:$MASTER_PORT"' 2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 0 ] &&
        printf '%s\n' "$out" | grep -qx "\[default0\]:master=$addr:29511"
}
check "--master-addr localhost reaches the worker" master_addr localhost
check "--master-addr 10.1.2.3 reaches the worker" master_addr 10.1.2.3

# A program that is nowhere: refused before anything starts.
missing_program() {
        local out rc
        out=$(in_root hyperpodrun --standalone --nproc-per-node 1 \
                --log-dir /dev/null --no-python no-such-program 2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 2 ] || { echo "exit status $rc, not 2"; return 1; }
        printf '%s\n' "$out" | grep -q \
                "training program 'no-such-program' was not found in PATH"
}
check "a missing program: exit status 2 and the message" missing_program

# A script whose interpreter the image lacks (minbase has no python3): the
# worker's exec fails, and the job ends with its 127.
missing_interpreter() {
        local out rc
        printf '#!/usr/bin/python3\nprint("never")\n' \
                >"$root/tmp/proof/train.py"
        chmod 755 "$root/tmp/proof/train.py"
        out=$(in_root hyperpodrun --standalone --nproc-per-node 1 \
                --log-dir /dev/null --no-python /tmp/proof/train.py 2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 127 ] || { echo "exit status $rc, not 127"; return 1; }
        printf '%s\n' "$out" | grep -q \
                "cannot execute '/tmp/proof/train.py': no such file or directory"
}
check "a missing #! interpreter: exit status 127 and the message" \
        missing_interpreter

# Operator mode in the root, driven with curl from outside it: the root
# shares this machine's network.
operator() {
        local port pid st i rc
        port=$(/usr/bin/python3 -c 'import socket; s = socket.socket();
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        in_root hyperpodrun --nproc-per-node 1 --server-host 127.0.0.1 \
                --server-port "$port" --log-dir /tmp/proof/operator \
                --rdzv-conf resource_config_dir=/tmp/proof/rc --no-python \
                /bin/sh -c 'echo started >/tmp/proof/operator-ran; exec sleep 60' \
                >"$root/tmp/proof/operator.log" 2>&1 &
        pid=$!
        # Bounded: curl retries the connection for up to 10 s.
        st=$(curl -sS --retry 100 --retry-connrefused --retry-delay 1 \
                --retry-max-time 10 --max-time 10 \
                "http://127.0.0.1:$port/status") ||
                { kill "$pid"; wait "$pid"; return 1; }
        echo "status before /start: $st"
        case $st in
        *'"status":"ready"'*) ;;
        *) kill "$pid"; wait "$pid"; return 1 ;;
        esac
        curl -sS --fail --max-time 10 -XPOST \
                -H 'content-type: application/json' \
                -d '{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"127.0.0.1","master_port":29512}' \
                "http://127.0.0.1:$port/start" ||
                { kill "$pid"; wait "$pid"; return 1; }
        # RUNNING once the stage has started; bounded like the rest.
        for i in $(seq 100); do
                st=$(curl -sS --max-time 10 "http://127.0.0.1:$port/status")
                case $st in *'"status":"running"'*) break ;; esac
                sleep 0.1
        done
        echo "status after /start: $st"
        curl -sS --fail --max-time 10 -XPOST \
                "http://127.0.0.1:$port/shutdown" ||
                { kill "$pid"; wait "$pid"; return 1; }
        wait "$pid"
        rc=$?
        cat "$root/tmp/proof/operator.log"
        [ -f "$root/tmp/proof/operator-ran" ] &&
        case $st in *'"status":"running"'*) true ;; *) false ;; esac &&
        [ $rc -eq 0 ]
}
check "operator mode: /status, /start, /shutdown over loopback" operator

summary
[ "$failed" -eq 0 ]
