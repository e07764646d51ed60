#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# deb.sh CJSON_SOURCE OUT_DIR: the Debian package, hyperpodrun_VERSION-N_ARCH.deb,
# built by debhelper (debian/rules: dh --buildsystem=meson, the static
# agent) from a copy of the tree in build-deb/, then checked by lintian,
# which must report no error. CJSON_SOURCE is the cjson directory that
# ./dev.sh static unpacked (build-static/deps/cjson): offline.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cjson=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
version=$(dpkg-parsechangelog -l "$root/debian/changelog" -S Version)
arch=$(dpkg --print-architecture)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

# dpkg-buildpackage writes beside the source tree: a copy of the tracked
# and new files (not the build directories) under build-deb/.
work="$root/build-deb"
src="$work/hyperpodrun-${version%-*}"
rm -rf "$work"
mkdir -p "$src"
(cd "$root" && git ls-files -co --exclude-standard -z |
        xargs -0 tar --no-recursion -cf -) | tar -xf - -C "$src"
(cd "$src" && HP_CJSON_SOURCE="$cjson" dpkg-buildpackage -b -us -uc \
        >"$work/build.log" 2>&1) || { tail -n 40 "$work/build.log" >&2
        echo "dpkg-buildpackage failed: $work/build.log" >&2; exit 1; }
deb="hyperpodrun_${version}_$arch.deb"
# Errors fail the package; warnings are printed. The overrides (static
# linking) are in debian/hyperpodrun.lintian-overrides, each with its reason.
lintian --fail-on error \
        "$work/$deb" >"$work/lintian.log" 2>&1 ||
        { cat "$work/lintian.log" >&2
          echo "lintian found errors in $deb" >&2; exit 1; }
cat "$work/lintian.log" >&2
cp "$work/$deb" "$out/"
echo "$out/$deb"
