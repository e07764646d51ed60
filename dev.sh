#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# hyperpodrun's entry points on a fresh Debian machine:
#   ./dev.sh demo   install what is missing, build, run a 2-worker demo job
#   ./dev.sh test   install what is missing, build, run the whole test suite
#                   (then again under ASan+UBSan, the fuzz targets for a
#                   short time, the unit tests under valgrind, and the
#                   benchmarks' smoke run, the static binary in a Debian 11
#                   root, dist/ installed and run: the wheel in a venv, the
#                   .deb in Debian 11, the aarch64 binary under qemu-user),
#                   ending with one "N passed, N failed" line
#   ./dev.sh test-loaded   the same build, then the unit and integration
#                   tests while busy loops keep every core saturated
#                   (what a shared CI runner sees), ending with the same
#                   kind of line
#   ./dev.sh bench  install what is missing, build, run the benchmarks
#                   against torchrun (about 15 minutes) and regenerate
#                   BENCHMARKS.md from bench/results/
#   ./dev.sh bench-smoke   each benchmark at a tiny size (seconds)
#   ./dev.sh static install what the static build needs, build the one
#                   self-contained binary build-static/cmd/hyperpodrun/
#                   hyperpodrun (what examples/eks/Dockerfile runs)
#   ./dev.sh dist   install what is missing, build the static binaries for
#                   x86_64 and aarch64 (cross), write the release into dist/:
#                   tarballs, wheels, the .deb and SHA256SUMS (offline once
#                   the Debian packages are installed)
set -eu
cd "$(dirname "$0")"

# slurmctld, slurmd, slurm-client and munge: tests/integration/test_slurm.py
# starts a private one-node Slurm cluster from them.
PACKAGES="meson ninja-build pkg-config gcc libc6-dev libuv1-dev libpcre2-dev
libcjson-dev libhttp-parser-dev libyaml-dev libcmocka-dev python3 python3-pytest
python3-torch valgrind mandoc man-db procps slurmctld slurmd slurm-client munge
time python3-matplotlib python3-yaml"
# promtool and the Prometheus server: tests/integration/test_metrics.py
# and the alerting rules' unit tests (examples/monitoring).
PACKAGES="$PACKAGES prometheus"
# etcd with its v2 API: tests/integration/test_etcd.py starts one for
# --rdzv-backend etcd-v2.
PACKAGES="$PACKAGES etcd-server"
# clang with libFuzzer, for the fuzz targets of tests/fuzz.
PACKAGES="$PACKAGES clang-14 libclang-rt-14-dev"
# clang-format: the house style check (tools/check_format.sh, .clang-format).
PACKAGES="$PACKAGES clang-format"
# The static build: Debian's static archives come with the -dev packages
# above; cJSON's source comes through apt-get source (dpkg-dev), the commit
# through git. The bullseye proof (tests/static/run.sh) needs debootstrap,
# curl, file and binutils.
STATIC_PACKAGES="meson ninja-build pkg-config gcc libc6-dev libuv1-dev
libpcre2-dev libcjson-dev libhttp-parser-dev libyaml-dev dpkg-dev git"
PACKAGES="$PACKAGES dpkg-dev git debootstrap curl file binutils"
# The release (./dev.sh dist, tests/dist/run.sh): debhelper and lintian for
# the .deb; Debian's build, wheel and setuptools make the wheel with no
# download; python3-venv for the proof. aarch64: the cross compiler, the
# arm64 libraries beside the native ones (multiarch: dpkg
# --add-architecture arm64) and qemu-user to run the result.
# libhttp-parser-dev is not Multi-Arch: same, so its arm64 .deb is only
# unpacked, under build-static/deps/arm64 (build_aarch64).
DIST_PACKAGES="debhelper lintian python3-build python3-wheel python3-setuptools
python3-venv gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
libuv1-dev:arm64 libpcre2-dev:arm64 libyaml-dev:arm64"

install_missing() { # install_missing [PACKAGES]
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        case " $(echo ${1:-$PACKAGES}) " in
        *:arm64*)
                dpkg --print-foreign-architectures | grep -qx arm64 ||
                        $SUDO dpkg --add-architecture arm64 ;;
        esac
        missing=""
        for p in ${1:-$PACKAGES}; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
                        grep -q "install ok installed" || missing="$missing $p"
        done
        [ -z "$missing" ] && return 0
        echo "dev.sh: installing:$missing"
        $SUDO apt-get update
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y \
                --no-install-recommends $missing
}

build() { # build DIR [meson options...]
        dir=$1
        shift
        if [ ! -f "$dir/build.ninja" ]; then
                meson setup "$dir" "$@"
        fi
        ninja -C "$dir"
}

# The static binary in build-static/. cJSON's source is Debian's, unpacked
# under build-static/deps (Debian ships no libcjson.a); the code includes
# <cjson/cJSON.h>, hence the link named cjson.
build_static() {
        tree=$(tools/apt-source.sh libcjson-dev build-static/deps)
        ln -sfn "$(basename "$tree")" build-static/deps/cjson
        build build-static -Dstatic=true -Dtests=disabled \
                -Dbuildtype=release -Dstrip=true \
                -Dcjson_source="$PWD/build-static/deps/cjson"
}

# The aarch64 static binary in build-aarch64/, cross-built with Debian's
# gcc-aarch64-linux-gnu (cross/aarch64-linux-gnu.ini) and the arm64 static
# archives; cJSON's source is the one build_static unpacked. The arm64
# libhttp-parser-dev is unpacked, not installed (it would replace the native
# one), and a second cross file tells meson where.
build_aarch64() {
        tree=$(tools/apt-source.sh libcjson-dev build-static/deps)
        ln -sfn "$(basename "$tree")" build-static/deps/cjson
        deps=build-static/deps/arm64
        version=$(dpkg-query -W -f='${Version}' \
                "libhttp-parser-dev:$(dpkg --print-architecture)")
        if [ ! -f "$deps/root/usr/lib/aarch64-linux-gnu/libhttp_parser.a" ] ||
           [ "$(cat "$deps/version" 2>/dev/null)" != "$version" ]; then
                rm -rf "$deps"
                mkdir -p "$deps"
                (cd "$deps" && apt-get -q -o APT::Sandbox::User="$(id -un)" \
                        download "libhttp-parser-dev:arm64=$version")
                dpkg-deb -x "$deps"/libhttp-parser-dev_*_arm64.deb "$deps/root"
                echo "$version" >"$deps/version"
        fi
        printf "[properties]\nhttp_parser_libdir = ['%s']\n" \
                "$PWD/$deps/root/usr/lib/aarch64-linux-gnu" >"$deps/paths.ini"
        build build-aarch64 --cross-file cross/aarch64-linux-gnu.ini \
                --cross-file "$deps/paths.ini" -Dstatic=true -Dtests=disabled \
                -Dbuildtype=release -Dstrip=true \
                -Dcjson_source="$PWD/build-static/deps/cjson"
}

# dist/: both tarballs and wheels (tools/dist.sh), the .deb (tools/deb.sh,
# lintian clean of errors) and SHA256SUMS, from build-static/ and
# build-aarch64/.
make_dist() {
        rm -rf dist
        mkdir -p dist
        tools/dist.sh x86_64 build-static dist &&
        tools/dist.sh aarch64 build-aarch64 dist &&
        tools/deb.sh build-static/deps/cjson dist &&
        (cd dist && sha256sum -- *.tar.gz *.whl *.deb >SHA256SUMS) &&
        ls -l dist
}

# build-hardened/: dpkg-buildflags' flags with every hardening feature,
# warnings still errors. Built, not tested: the code is build-release's.
build_hardened() (
        export DEB_BUILD_MAINT_OPTIONS=hardening=+all
        CFLAGS="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
        LDFLAGS="$(dpkg-buildflags --get LDFLAGS)"
        export CFLAGS LDFLAGS
        build build-hardened -Dbuildtype=plain -Dtests=disabled
)

# Runs one meson test pass and adds its test cases to the totals.
PASSED=0
FAILED=0
run_suite() { # run_suite LABEL BUILD_DIR [meson test options...]
        label=$1
        dir=$2
        shift 2
        echo "==> $label"
        rm -f "$dir"/meson-logs/testlog*.json
        $SUITE_WRAPPER meson test -C "$dir" --print-errorlogs "$@" || true
        # The log is testlog.json, or testlog-SETUP.json with --setup.
        log=$(ls "$dir"/meson-logs/testlog*.json 2>/dev/null | head -n 1)
        if [ -n "$log" ]; then
                set -- $(/usr/bin/python3 tools/count_tests.py "$log")
        else
                set -- 0 1
        fi
        echo "==> $label: $1 passed, $2 failed"
        PASSED=$((PASSED + $1))
        FAILED=$((FAILED + $2))
}

# The first pass sees the clocks of a machine booted a minute ago: a time
# namespace sets CLOCK_MONOTONIC and CLOCK_BOOTTIME to FRESH_BOOT_SECONDS,
# whatever the uptime, so that code or a test that needs a long uptime
# fails here and not on a CI runner that just started. It needs root (or
# CAP_SYS_ADMIN) and Linux 5.6; without it, the pass counts one failure
# unless HP_TEST_NO_TIMENS=1 says to run on the real clocks.
FRESH_BOOT_SECONDS=60
SUITE_WRAPPER=""
fresh_boot_wrapper() {
        up=$(cut -d. -f1 /proc/uptime)
        offset=$((FRESH_BOOT_SECONDS - up))
        wrapper="unshare --time --monotonic $offset --boottime $offset"
        if $wrapper true 2>/dev/null; then
                echo "$wrapper"
                return 0
        fi
        return 1
}

# The benchmarks' smoke run as one more pass: each benchmark and the report
# count as one test case (bench/run.py prints "bench: N passed, N failed").
run_bench_smoke() {
        echo "==> benchmarks (smoke)"
        out=$(/usr/bin/python3 bench/run.py --smoke 2>&1) || true
        printf '%s\n' "$out"
        set -- $(printf '%s\n' "$out" |
                sed -n 's/^bench: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
        [ $# -eq 2 ] || set -- 0 1
        echo "==> benchmarks (smoke): $1 passed, $2 failed"
        PASSED=$((PASSED + $1))
        FAILED=$((FAILED + $2))
}

# The static binary's proof in a Debian 11 root (tests/static/run.sh) as
# one more pass: each of its checks counts as one test case.
run_static_proof() {
        echo "==> static binary in Debian 11"
        # debootstrap, chroot and mount need root.
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        out=$($sudo tests/static/run.sh \
                build-static/cmd/hyperpodrun/hyperpodrun 2>&1) || true
        printf '%s\n' "$out"
        set -- $(printf '%s\n' "$out" | sed -n \
                's/^static proof: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
        [ $# -eq 2 ] || set -- 0 1
        echo "==> static binary in Debian 11: $1 passed, $2 failed"
        PASSED=$((PASSED + $1))
        FAILED=$((FAILED + $2))
}

# What dist/ holds, installed and run (tests/dist/run.sh), as one more pass.
run_dist_proof() {
        echo "==> release artifacts (dist/)"
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        out=$($sudo tests/dist/run.sh dist 2>&1) || true
        printf '%s\n' "$out"
        set -- $(printf '%s\n' "$out" | sed -n \
                's/^dist proof: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
        [ $# -eq 2 ] || set -- 0 1
        echo "==> release artifacts (dist/): $1 passed, $2 failed"
        PASSED=$((PASSED + $1))
        FAILED=$((FAILED + $2))
}

case "${1:-}" in
demo)
        install_missing
        build build
        rm -rf /tmp/hyperpod-demo
        PYTHON_EXEC=/usr/bin/python3 exec build/cmd/hyperpodrun/hyperpodrun \
                --standalone --nproc-per-node 2 --tee 3 \
                --log-dir /tmp/hyperpod-demo examples/demo_train.py 20
        ;;
test)
        install_missing "$PACKAGES $DIST_PACKAGES"
        build build
        # -O3 sees what -O2 does not: a release build must build too.
        build build-release -Dbuildtype=release -Dtests=disabled
        # So must one with Debian's hardening flags, as a package is built
        # (_FORTIFY_SOURCE's unused-result checks see what others do not).
        build_hardened
        if SUITE_WRAPPER=$(fresh_boot_wrapper); then
                run_suite "tests (clocks of a machine up ${FRESH_BOOT_SECONDS} s)" build
        elif [ "${HP_TEST_NO_TIMENS:-0}" = 1 ]; then
                echo "==> no time namespace (HP_TEST_NO_TIMENS=1): real clocks"
                run_suite "tests" build
        else
                echo "==> tests: 'unshare --time' failed (needs root and" \
                     "Linux >= 5.6); HP_TEST_NO_TIMENS=1 runs on the real" \
                     "clocks: 0 passed, 1 failed"
                FAILED=$((FAILED + 1))
        fi
        SUITE_WRAPPER=""
        # Sanitizers: any report fails the test that triggered it.
        build build-asan -Db_sanitize=address,undefined -Db_lundef=false \
                -Dbuildtype=debug
        ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
                run_suite "tests under ASan+UBSan" build-asan
        # The rule parser and evaluator under libFuzzer (clang, ASan and
        # UBSan), each target for a fixed time (tests/fuzz/meson.build).
        if [ ! -f build-fuzz/build.ninja ]; then
                CC=clang-14 meson setup build-fuzz \
                        -Db_sanitize=address,undefined -Db_lundef=false
        fi
        ninja -C build-fuzz fuzz
        run_suite "fuzz (libFuzzer)" build-fuzz --suite fuzz --no-rebuild
        # The C unit tests leak-free under valgrind.
        run_suite "unit tests under valgrind" build --suite unit \
                --setup valgrind
        # One file that runs on an older distribution: the static build
        # (./dev.sh static), then the binary in a debootstrapped Debian 11.
        if build_static; then
                run_static_proof
        else
                echo "==> static build: 0 passed, 1 failed"
                FAILED=$((FAILED + 1))
        fi
        # The release from the same static build (its Debian 11 root too):
        # dist/ written, then installed and run.
        if build_aarch64 && make_dist; then
                run_dist_proof
        else
                echo "==> dist/: 0 passed, 1 failed"
                FAILED=$((FAILED + 1))
        fi
        # The benchmarks cannot rot: each runs at a tiny size (static vs
        # dynamic compares build-static/ with build-release/).
        run_bench_smoke
        echo "$PASSED passed, $FAILED failed"
        [ "$FAILED" -eq 0 ]
        ;;
test-loaded)
        install_missing
        build build
        # One busy loop per core and as many again: the tests get about a
        # third of the machine, as on a runner shared with other jobs.
        burners=""
        trap 'kill $burners 2>/dev/null' EXIT INT TERM
        for _ in $(seq $(($(nproc) * 2))); do
                sh -c 'while :; do :; done' &
                burners="$burners $!"
        done
        echo "==> $(($(nproc) * 2)) busy loops on $(nproc) cores;" \
             "load: $(cut -d' ' -f1-3 /proc/loadavg)"
        run_suite "tests on saturated cores" build --suite unit \
                --suite integration
        echo "==> load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "$PASSED passed, $FAILED failed"
        [ "$FAILED" -eq 0 ]
        ;;
bench)
        install_missing
        build build
        build build-release -Dbuildtype=release -Dtests=disabled
        build_static
        exec /usr/bin/python3 bench/run.py
        ;;
static)
        install_missing "$STATIC_PACKAGES"
        build_static
        ;;
dist)
        install_missing "$STATIC_PACKAGES $DIST_PACKAGES"
        build_static
        build_aarch64
        make_dist
        ;;
bench-smoke)
        install_missing
        build build
        build build-release -Dbuildtype=release -Dtests=disabled
        build_static
        exec /usr/bin/python3 bench/run.py --smoke
        ;;
*)
        echo "usage: ./dev.sh demo|test|test-loaded|bench|bench-smoke|static|dist" >&2
        exit 2
        ;;
esac
