#!/usr/bin/env bash
# make lint: the layout rules of docs/development.md (no tabs, at most 80 columns)
# for every *.c and *.h outside build/ and .run/, then cppcheck, then
# every shell script through shellcheck at severity warning: each *.sh
# and each file whose first line is a shell's #! (.ci/run).
#
# cppcheck findings that are false positives are silenced where they
# occur, with a comment saying why:
#     /* cppcheck-suppress <id> */
# and shellcheck's where the construct is meant, with the reason on the
# line of the directive:
#     # shellcheck disable=SCnnnn # why
set -euo pipefail

cd "$(dirname "$0")/.."

NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
status=0

mapfile -d '' files < <(find . \( -path ./build -o -path ./.run \
                                  -o -path ./.git -o -path './t/servroot*' \
                               \) -prune -o \
                               -type f \( -name '*.c' -o -name '*.h' \) \
                               -print0 | sort -z)

if [ "${#files[@]}" -eq 0 ]; then
    echo "lint: no C sources found" >&2
    exit 1
fi

# Columns are counted in characters with gawk, in bytes with mawk.
for f in "${files[@]}"; do
    f=${f#./}
    if grep -n -P '\t' "$f" | sed "s|^|$f:|; s|$| (tab)|" | grep .; then
        status=1
    fi
    if LC_ALL=C.UTF-8 awk -v f="$f" 'length($0) > 80 {
            printf "%s:%d: %d columns (max 80)\n", f, FNR, length($0);
            bad = 1 }
            END { exit bad }' "$f"; then
        :
    else
        status=1
    fi
done

if [ "$status" -ne 0 ]; then
    echo "lint: layout errors (tabs or lines over 80 columns)" >&2
fi

# nginx's headers come before any system or library header in every file
# of the module (not src/core or src/cli, which are pure C): nginx
# defines _GNU_SOURCE in <ngx_config.h>, and once <stdio.h> has been read
# without it glibc hides what newer nginx needs (1.26's ngx_event_udp.h
# wants struct in6_pktinfo).  So a module header's first include is the
# common header, and a module source's first include is a module header.
mapfile -t modfiles < <(find ngx_http_session_module.c src \
                             \( -path src/core -o -path src/cli \
                                -o -path src/sql \) -prune -o \
                             -type f \( -name '*.c' -o -name '*.h' \) \
                             -print | sort)
for f in "${modfiles[@]}"; do
    first=$(grep -m1 -o '^#include *[<"][^>"]*[>"]' "$f" || true)
    [ -n "$first" ] || continue
    name=${first#*[<\"]}
    name=${name%[>\"]}
    case $f in
        */ngx_http_session_common.h) want='<ngx_config.h>' ;;
        *.h) want='"ngx_http_session_common.h"' ;;
        *) want='a module header' ;;
    esac
    ok=0
    case $f:$first in
        */ngx_http_session_common.h:*'<ngx_config.h>') ok=1 ;;
        *.h:*'"ngx_http_session_common.h"') ok=1 ;;
        *.c:*'"'*)
            if [ -n "$(find src -path src/core -prune -o -path src/cli \
                            -prune -o -name "$name" -print -quit)" ]; then
                ok=1
            fi ;;
    esac
    if [ "$ok" -eq 0 ]; then
        echo "$f: first include is $first, expected $want" >&2
        status=1
    fi
done

if ! command -v cppcheck >/dev/null 2>&1; then
    echo "lint: cppcheck is not installed (apt-get install cppcheck)" >&2
    exit 1
fi

# shellcheck disable=SC2054 # the commas belong to --enable=
cppcheck_opts=(--error-exitcode=1 --enable=warning,portability --quiet
               --inline-suppr --std=c99
               --suppress=missingIncludeSystem --suppress=toomanyconfigs)

# The pure-C parts: core, the admin tool, the unit tests and the fuzz
# harnesses.
pure=()
for d in src/core src/cli t/unit fuzz; do
    [ -d "$d" ] && pure+=("$d")
done
if ! cppcheck "${cppcheck_opts[@]}" -Isrc/core -Isrc/cli -Ibuild -It/unit \
        "${pure[@]}"; then
    echo "lint: cppcheck found problems in ${pure[*]}" >&2
    status=1
fi

# The module itself, against nginx's headers (and the configured tree's
# ngx_auto_config.h when make has been run), one configuration only:
# nginx's #if forest would otherwise take minutes.  Its sources are those
# of the folders of src/ but src/cli and src/core (pure C, checked above);
# a file includes another by its bare name (config's SESSION_INCS), so
# every folder but src/cli and src/sql is an include folder.
mod=()
inc=(-Isrc)
for f in ngx_http_session_module.c src/*/*.c; do
    case $f in src/cli/*|src/core/*) continue ;; esac
    [ -f "$f" ] && mod+=("$f")
done
for d in src/*/; do
    d=${d%/}
    case $d in src/cli|src/sql) continue ;; esac
    inc+=("-I$d")
done
if [ "${#mod[@]}" -gt 0 ]; then
    [ -d build/nginx/objs ] && inc+=(-Ibuild/nginx/objs)
    for d in core event event/modules os/unix http http/modules; do
        [ -d "$NGINX_SRC/src/$d" ] && inc+=("-I$NGINX_SRC/src/$d")
    done
    if ! cppcheck "${cppcheck_opts[@]}" --max-configs=1 "${inc[@]}" \
            "${mod[@]}"; then
        echo "lint: cppcheck found problems in the module sources" >&2
        status=1
    fi
fi

# Shell scripts, from the top of the tree: a sourced file is followed
# (-x) where a "# shellcheck source=util/NAME.sh" line names it, so that
# what the scripts set for util/bench-lib.sh's functions counts as used.
if ! command -v shellcheck >/dev/null 2>&1; then
    echo "lint: shellcheck is not installed (apt-get install shellcheck)" >&2
    exit 1
fi

mapfile -d '' shells < <(find . \( -path ./build -o -path ./.run \
                                   -o -path ./.git -o -path './t/servroot*' \
                                   -o -name node_modules \) -prune -o \
                                -type f -print0 \
                         | xargs -0 awk 'FNR == 1 {
                               if (FILENAME ~ /\.sh$/ ||
                                   $0 ~ /^#!.*[\/ ](ba|da|k)?sh( |$)/)
                                   printf "%s%c", substr(FILENAME, 3), 0
                               nextfile }' \
                         | sort -z)

if [ "${#shells[@]}" -eq 0 ]; then
    echo "lint: no shell scripts found" >&2
    exit 1
fi

if ! shellcheck -x -S warning "${shells[@]}"; then
    echo "lint: shellcheck found problems in the shell scripts" >&2
    status=1
fi

if [ "$status" -eq 0 ]; then
    echo "lint: ${#files[@]} C files, no tabs, 80 columns, cppcheck clean;" \
         "${#shells[@]} shell scripts, shellcheck clean"
fi

exit "$status"
