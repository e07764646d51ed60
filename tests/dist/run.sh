#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run.sh DIST_DIR: proof that what ./dev.sh dist wrote works where a user
# puts it. SHA256SUMS verifies; each tarball holds a static, stripped agent
# of its architecture; the x86_64 wheel installs into a fresh venv with no
# index and runs a 2-worker job through the venv's hyperpodrun; python/
# installs offline as docs/install.md says; the .deb
# installs into the Debian 11 root that tests/static/run.sh made and runs
# a job there; the aarch64 agent from its tarball runs under qemu-user a
# job of 2 workers, an exit status and a SIGTERM stop. Under qemu the
# workers are this machine's /bin/sh and sleep (no binfmt_misc is needed):
# the agent's loop, spawn, pipes and signals are what is tried.
# One line per check, then "dist proof: N passed, N failed" (./dev.sh test
# counts it).
#
# Needs root for the Debian 11 root (chroot, mount), qemu-user, python3-venv.
set -u

dist=$(readlink -f "${1:?usage: run.sh DIST_DIR}")
root=${HYPERPODRUN_BULLSEYE_ROOT:-$HOME/.cache/hyperpodrun/bullseye-root}
work=$(mktemp -d "${TMPDIR:-/tmp}/hyperpodrun-dist.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 1' HUP INT TERM

passed=0
failed=0
pass() { echo "ok - $1"; passed=$((passed + 1)); }
fail() { echo "FAIL - $1"; failed=$((failed + 1)); }
summary() { echo "dist proof: $passed passed, $failed failed"; }
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

one() { # one GLOB: the one file of dist matching GLOB
        set -- "$dist"/$1
        [ $# -eq 1 ] && [ -f "$1" ] && echo "$1"
}
tar_x86=$(one 'hyperpodrun-*-linux-x86_64.tar.gz')
tar_arm=$(one 'hyperpodrun-*-linux-aarch64.tar.gz')
whl_x86=$(one 'hyperpodrun-*-py3-none-manylinux_2_17_x86_64.whl')
whl_arm=$(one 'hyperpodrun-*-py3-none-manylinux_2_17_aarch64.whl')
deb=$(one 'hyperpodrun_*_amd64.deb')

sums() {
        local f
        for f in "$tar_x86" "$tar_arm" "$whl_x86" "$whl_arm" "$deb"; do
                [ -n "$f" ] || { ls -l "$dist"; return 1; }
                grep -q " $(basename "$f")\$" "$dist/SHA256SUMS" ||
                        { echo "$f is not in SHA256SUMS"; return 1; }
        done
        (cd "$dist" && sha256sum --strict -c SHA256SUMS)
}
check "SHA256SUMS lists every artifact and verifies" sums

# tarball ARCH FILE_ARCH: the agent in it is static, stripped, of the
# architecture; the man page, LICENSE, README and its docs pages are there.
tarball() {
        local t=$1 arch=$2 dir
        mkdir -p "$work/$3" && tar -xzf "$t" -C "$work/$3" || return 1
        dir=$(echo "$work/$3"/hyperpodrun-*)
        ls -l "$dir"
        for f in hyperpodrun hyperpodrun-nccl-check hyperpodrun.1 LICENSE \
                 README.md NEWS.md THIRD-PARTY-LICENSES docs/usage.md \
                 docs/ARCHITECTURE.md docs/monitoring-panels.png; do
                [ -f "$dir/$f" ] || { echo "no $f"; return 1; }
        done
        file "$dir/hyperpodrun" | tee /dev/stderr |
                grep -q "$arch.*statically linked.*, stripped"
}
check "x86_64 tarball: static stripped agent, man page, licenses" \
        tarball "$tar_x86" x86-64 x86_64
check "aarch64 tarball: static stripped agent, man page, licenses" \
        tarball "$tar_arm" "ARM aarch64" aarch64
agent_arm=$(echo "$work"/aarch64/hyperpodrun-*/hyperpodrun)

wheel_arm() {
        /usr/bin/python3 -m zipfile -l "$whl_arm" | tee /dev/stderr |
                grep -q '\.data/scripts/hyperpodrun ' &&
        /usr/bin/python3 -m zipfile -e "$whl_arm" "$work/whl-arm" &&
        file "$work"/whl-arm/*.data/scripts/hyperpodrun |
                grep -q 'ARM aarch64.*statically linked'
}
check "aarch64 wheel: the aarch64 agent as its script" wheel_arm

# A fresh venv, no index: pip installs the wheel alone (nothing to
# download), hyperpodrun is on the venv's PATH, and its 2 Python workers
# import the wheel's packages.
venv_job() {
        local v=$work/venv out rc r
        /usr/bin/python3 -m venv "$v" || return 1
        "$v/bin/pip" install --no-index --disable-pip-version-check -q \
                "$whl_x86" || return 1
        [ "$(PATH=$v/bin:/usr/bin:/bin command -v hyperpodrun)" = \
          "$v/bin/hyperpodrun" ] || { echo "hyperpodrun not on the venv's PATH"
                                       return 1; }
        cat >"$work/train.py" <<'EOT'
import os, hyperpodrun_client, hyperpod_elastic_agent
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}",
      hyperpodrun_client.__name__, hyperpod_elastic_agent.__name__)
EOT
        out=$(env -i PATH="$v/bin:/usr/bin:/bin" HOME="$work" \
                hyperpodrun --standalone --nproc-per-node 2 --tee 3 \
                --log-dir "$work/venv-logs" "$work/train.py" 2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 0 ] || { echo "exit status $rc"; return 1; }
        for r in 0 1; do
                printf '%s\n' "$out" | grep -qx "\[default$r\]:rank $r of 2 hyperpodrun_client hyperpod_elastic_agent" ||
                        { echo "no line of rank $r"; return 1; }
        done
        "$v/bin/hyperpodrun" --version | head -n 1 | grep -q ', static)$'
}
check "wheel: pip --no-index into a fresh venv, a 2-worker job" venv_job

# python/ alone, offline, as docs/install.md says: a venv that
# sees Debian's setuptools and wheel, and no build isolation (which would
# download them). A copy, so that the build leaves nothing in the tree.
python_dir() {
        local v=$work/venv-src
        cp -r "$(dirname "$0")/../../python" "$work/python-src" &&
        /usr/bin/python3 -m venv --system-site-packages "$v" &&
        "$v/bin/pip" install --no-index --no-build-isolation \
                --disable-pip-version-check -q "$work/python-src" &&
        "$v/bin/python" -c 'import hyperpodrun_client, hyperpod_elastic_agent
print(hyperpodrun_client.__file__)' | tee /dev/stderr | grep -q "^$v/"
}
check "pip install --no-index --no-build-isolation ./python" python_dir

# The .deb in the Debian 11 root of tests/static/run.sh (./dev.sh test runs
# that first), installed with the root's own dpkg, then removed again.
deb_job() {
        local out rc chroot
        chroot=$(command -v chroot)
        [ -x "$root/usr/bin/dpkg" ] ||
                { echo "no Debian 11 root at $root (tests/static/run.sh makes it)"
                  return 1; }
        exec 9>"$root.lock"
        flock 9
        cp "$deb" "$root/tmp/hyperpodrun.deb" || return 1
        mount -t proc proc "$root/proc" || return 1
        in11() { env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME=/root \
                        LANG=C.UTF-8 "$chroot" "$root" "$@"; }
        out=$(in11 dpkg -i /tmp/hyperpodrun.deb 2>&1 &&
              [ -f "$root/usr/share/man/man1/hyperpodrun.1.gz" ] &&
              in11 /usr/bin/hyperpodrun --standalone --nproc-per-node 2 \
                --tee 3 --log-dir /tmp/deb-job --no-python /bin/sh -c \
                'echo "deb rank $RANK"' 2>&1)
        rc=$?
        printf '%s\n' "$out"
        in11 dpkg --purge hyperpodrun
        rm -rf "$root/tmp/hyperpodrun.deb" "$root/tmp/deb-job"
        umount "$root/proc"
        [ $rc -eq 0 ] &&
        printf '%s\n' "$out" | grep -qx '\[default0\]:deb rank 0' &&
        printf '%s\n' "$out" | grep -qx '\[default1\]:deb rank 1'
}
check ".deb: dpkg -i in Debian 11, a 2-worker job, dpkg --purge" deb_job

# The aarch64 agent under qemu-user (static: no -L root needed).
qemu_job() {
        local out rc r
        out=$(qemu-aarch64 "$agent_arm" --standalone --nproc-per-node 2 \
                --tee 3 --log-dir "$work/qemu-logs" --no-python /bin/sh -c \
                'echo "rank $RANK of $WORLD_SIZE"; echo "err $RANK" >&2' 2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 0 ] || { echo "exit status $rc"; return 1; }
        for r in 0 1; do
                printf '%s\n' "$out" | grep -qx "\[default$r\]:rank $r of 2" &&
                printf '%s\n' "$out" | grep -qx "\[default$r\]:err $r" ||
                        { echo "console lacks rank $r's lines"; return 1; }
                [ "$(cat "$work"/qemu-logs/*/attempt_0/$r/stdout.log)" = \
                  "rank $r of 2" ] || { echo "rank $r's file"; return 1; }
        done
}
check "aarch64 under qemu: 2 workers, console and per-rank files" qemu_job

qemu_exit() {
        local out rc
        out=$(qemu-aarch64 "$agent_arm" --standalone --nproc-per-node 2 \
                --log-dir /dev/null --no-python /bin/sh -c \
                'if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 60' 2>&1)
        rc=$?
        printf '%s\n' "$out"
        [ $rc -eq 3 ] || { echo "exit status $rc, not 3"; return 1; }
        printf '%s\n' "$out" | grep -q 'rank      : 1 '
}
check "aarch64 under qemu: rank 1 exits 3, the agent exits 3" qemu_exit

# SIGTERM to the agent once both workers have said they run: it stops
# them and exits 128+15.
qemu_sigterm() {
        local pid rc i w log=$work/qemu-term.log
        qemu-aarch64 "$agent_arm" --standalone --nproc-per-node 2 --tee 3 \
                --log-dir /dev/null --no-python /bin/sh -c \
                'echo "running $RANK $$"; exec sleep 120' >"$log" 2>&1 &
        pid=$!
        for i in $(seq 600); do
                [ "$(grep -c '^\[default.\]:running' "$log")" -eq 2 ] && break
                sleep 0.1
        done
        kill -TERM "$pid"
        wait "$pid"
        rc=$?
        cat "$log"
        [ $rc -eq 143 ] || { echo "exit status $rc, not 143"; return 1; }
        # The workers' pids (each sh exec'd sleep): gone with the agent.
        for w in $(sed -n 's/^\[default.\]:running . //p' "$log"); do
                ! kill -0 "$w" 2>/dev/null || { echo "worker $w lives"
                                                return 1; }
        done
}
check "aarch64 under qemu: SIGTERM stops the workers, exit 143" qemu_sigterm

summary
[ "$failed" -eq 0 ]
