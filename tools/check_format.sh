#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Checks C files against the house style: clang-format (.clang-format at
# the top of the tree) would change nothing, and no line passes 80
# columns. Usage: tools/check_format.sh FILE...
# Exits 0 when every file passes, 1 naming the lines that do not, 2 for a
# bad command line or a missing clang-format.
set -u

if [ $# -eq 0 ]; then
        echo "usage: $0 FILE..." >&2
        exit 2
fi
format=${CLANG_FORMAT:-clang-format}
if ! command -v "$format" >/dev/null 2>&1; then
        echo "$0: $format not found (Debian package clang-format)" >&2
        exit 2
fi

status=0
for file in "$@"; do
        if [ ! -f "$file" ]; then
                echo "$0: $file: no such file" >&2
                exit 2
        fi
        if ! "$format" --dry-run -Werror "$file"; then
                status=1
        fi
        # Columns, not bytes: a multi-byte character is one column.
        long=$(LC_ALL=C.UTF-8 grep -nE '^.{81,}' "$file")
        if [ -n "$long" ]; then
                printf '%s\n' "$long" | sed "s|^\([0-9]*\):.*|$file:\\1: \
line over 80 columns|"
                status=1
        fi
done
exit $status
