#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# dist.sh ARCH BUILD_DIR OUT_DIR: the release tarball and the binary wheel
# of one architecture, from a static build (./dev.sh static, or the aarch64
# cross build) whose meson introspection gives the version:
#   OUT_DIR/hyperpodrun-VERSION-linux-ARCH.tar.gz
#   OUT_DIR/hyperpodrun-VERSION-py3-none-manylinux_2_17_ARCH.whl
# Offline: the wheel is built by Debian's setuptools and wheel
# (python3 -m build --no-isolation), nothing is downloaded.
set -eu
arch=$1
build=$2
out=$3
case $arch in
x86_64) strip=strip ;;
aarch64) strip=aarch64-linux-gnu-strip ;;
*) echo "dist.sh: unknown architecture '$arch' (x86_64 or aarch64)" >&2
   exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(meson introspect --projectinfo "$build" |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
bin="$build/cmd/hyperpodrun"
for f in "$bin/hyperpodrun" "$bin/hyperpodrun-nccl-check" "$build/hyperpodrun.1"; do
        [ -f "$f" ] || { echo "dist.sh: $f is missing (build $build first)" >&2
                         exit 1; }
done
if ! file -L "$bin/hyperpodrun" | grep -q 'statically linked'; then
        echo "dist.sh: $bin/hyperpodrun is not statically linked" >&2
        exit 1
fi
# The same bytes from the same commit: every file's time is the commit's.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage="$build/dist-stage"
rm -rf "$stage"

# The libraries the static agent carries, with their terms.
notices() {
        for p in libuv1 libpcre2-8-0 libcjson1 libyaml-0-2 libhttp-parser2.9 libc6; do
                echo "==== $p (Debian's /usr/share/doc/$p/copyright) ===="
                cat "/usr/share/doc/$p/copyright"
                echo
        done
}

# The tarball: one directory, the programs flat in it (the agent finds
# hyperpodrun-nccl-check beside itself).
name="hyperpodrun-$version-linux-$arch"
mkdir -p "$stage/$name"
cp "$bin/hyperpodrun" "$bin/hyperpodrun-nccl-check" "$stage/$name/"
$strip "$stage/$name/hyperpodrun" "$stage/$name/hyperpodrun-nccl-check"
cp "$build/hyperpodrun.1" "$root/LICENSE" "$root/README.md" "$root/NEWS.md" \
        "$stage/$name/"
mkdir -p "$stage/$name/docs"    # the pages README.md links, with their pictures
cp "$root"/docs/*.md "$root"/docs/*.png "$stage/$name/docs/"
notices >"$stage/$name/THIRD-PARTY-LICENSES"
chmod 0755 "$stage/$name/hyperpodrun" "$stage/$name/hyperpodrun-nccl-check"
(cd "$stage" && tar --sort=name --owner=0 --group=0 --numeric-owner \
        --mtime="@$SOURCE_DATE_EPOCH" -cf - "$name") |
        gzip -9 -n >"$out/$name.tar.gz"

# The wheel: python/'s two packages, built by setuptools, then the two
# programs added as the wheel's scripts (NAME-VERSION.data/scripts/), which
# pip installs into the environment's bin/, on its PATH. setuptools itself
# cannot carry them: its build_scripts reads every script as Python text.
# The binary is not Python code, so the tag names its platform:
# py3-none-manylinux_2_17_ARCH (the agent is static and needs no glibc).
w="$stage/wheel"
mkdir -p "$w/src" "$w/out" "$w/unpacked"
cp -r "$root/python/hyperpodrun_client" "$root/python/hyperpod_elastic_agent" \
        "$root/LICENSE" "$root/README.md" "$w/src/"
find "$w/src" -name __pycache__ -prune -exec rm -rf {} +
cat >"$w/src/pyproject.toml" <<EOT
[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "hyperpodrun"
version = "$version"
description = "Launch agent for distributed PyTorch jobs (a static binary), its Python client and the hyperpod_elastic_agent compatibility package"
readme = "README.md"
license = { text = "Apache-2.0" }
requires-python = ">=3.8"

[tool.setuptools]
packages = ["hyperpodrun_client", "hyperpod_elastic_agent"]
EOT
cat >"$w/src/setup.cfg" <<EOT
[bdist_wheel]
python_tag = py3
plat_name = manylinux_2_17_$arch
EOT
whl="hyperpodrun-$version-py3-none-manylinux_2_17_$arch.whl"
/usr/bin/python3 -m build --wheel --no-isolation --outdir "$w/out" "$w/src" \
        >"$stage/wheel.log" 2>&1 || { cat "$stage/wheel.log" >&2; exit 1; }
/usr/bin/python3 -m wheel unpack --dest "$w/unpacked" "$w/out/$whl" >/dev/null
scripts="$w/unpacked/hyperpodrun-$version/hyperpodrun-$version.data/scripts"
mkdir -p "$scripts"
cp -p "$stage/$name/hyperpodrun" "$stage/$name/hyperpodrun-nccl-check" "$scripts/"
rm "$w/out/$whl"
/usr/bin/python3 -m wheel pack --dest-dir "$w/out" \
        "$w/unpacked/hyperpodrun-$version" >/dev/null
[ -f "$w/out/$whl" ] || { ls "$w/out" >&2
        echo "dist.sh: the build made no $whl" >&2; exit 1; }
cp "$w/out/$whl" "$out/"
echo "$out/$name.tar.gz"
echo "$out/$whl"
