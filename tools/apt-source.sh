#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# apt-source.sh PACKAGE DEST: unpacks the Debian source package of the
# installed binary package PACKAGE (the same version, from the mirror it
# was installed from) into DEST, and prints the source tree's path.
#
# `apt-get source` needs a deb-src line, which a stock Debian machine does
# not have. It is given one in a private sources list, with private package
# lists and cache under DEST, so that nothing under /etc or /var changes.
set -eu
# The native package: with a foreign architecture added (the arm64 build),
# PACKAGE may be installed twice, and dpkg-query would print both.
case $1 in
*:*) pkg=$1 ;;
*) pkg=$1:$(dpkg --print-architecture) ;;
esac
mkdir -p "$2"
dest=$(cd "$2" && pwd)

# The installed version and the first archive line under it in
# `apt-cache policy`, e.g. "500 http://deb.debian.org/debian bookworm/main
# amd64 Packages".
policy=$(apt-cache policy "$pkg")
version=$(printf '%s\n' "$policy" | sed -n 's/^ *Installed: //p')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
        echo "apt-source.sh: $pkg is not installed" >&2
        exit 1
fi
set -- $(printf '%s\n' "$policy" | awk -v v="$version" '
        $1 == "***" && $2 == v { mine = 1; next }
        mine && $2 ~ /^[a-z]+:\/\// { print $2, $3; exit }
        mine && $1 !~ /^[0-9]+$/ { mine = 0 }')
if [ $# -ne 2 ]; then
        echo "apt-source.sh: no archive offers $pkg $version" \
             "(apt-cache policy $pkg)" >&2
        exit 1
fi
uri=$1
suite=${2%%/*}
component=${2#*/}

# dpkg-source unpacks into SOURCE-UPSTREAM_VERSION (no epoch, no revision).
src=$(dpkg-query -W -f='${source:Package}' "$pkg")
srcver=$(dpkg-query -W -f='${source:Version}' "$pkg")
upstream=${srcver#*:}
upstream=${upstream%-*}
if [ -f "$dest/$src-$upstream/debian/changelog" ] &&
   head -n 1 "$dest/$src-$upstream/debian/changelog" | grep -qF "($srcver)"; then
        echo "$dest/$src-$upstream"
        exit 0
fi

mkdir -p "$dest/apt/lists/partial" "$dest/apt/cache/archives/partial" \
        "$dest/apt/sources.list.d"
echo "deb-src $uri $suite $component" >"$dest/apt/sources.list"
apt() {
        apt-get -q \
                -o Dir::Etc::SourceList="$dest/apt/sources.list" \
                -o Dir::Etc::SourceParts="$dest/apt/sources.list.d" \
                -o Dir::State::Lists="$dest/apt/lists" \
                -o Dir::Cache="$dest/apt/cache" \
                -o APT::Sandbox::User="$(id -un)" \
                "$@"
}
apt update >&2
cd "$dest"
rm -rf "${dest:?}/$src-$upstream"
apt source --only-source "$src=$srcver" >&2
if [ ! -d "$dest/$src-$upstream" ]; then
        echo "apt-source.sh: apt-get source left no $dest/$src-$upstream" >&2
        exit 1
fi
echo "$dest/$src-$upstream"
