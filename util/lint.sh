#!/usr/bin/env bash
# make lint: the layout rules of DESIGN.md (no tabs, at most 80 columns)
# for every *.c and *.h outside build/ and .run/, then cppcheck.
#
# cppcheck findings that are false positives are silenced where they
# occur, with a comment saying why:
#     /* cppcheck-suppress <id> */
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
# nginx's #if forest would otherwise take minutes.
mod=()
for f in ngx_http_session_module.c src/*.c; do
    [ -f "$f" ] && mod+=("$f")
done
if [ "${#mod[@]}" -gt 0 ]; then
    inc=(-Isrc -Isrc/core)
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

if [ "$status" -eq 0 ]; then
    echo "lint: ${#files[@]} files, no tabs, 80 columns, cppcheck clean"
fi

exit "$status"
