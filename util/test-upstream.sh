#!/usr/bin/env bash
# make test-upstream: the module and nginx built from one upstream nginx
# source tree, then the whole Test::Nginx suite against that nginx.
#
#   bash util/test-upstream.sh NGINX_SRC_DIR [util/test.sh arguments]
#   make test-upstream UPSTREAM_SRC=NGINX_SRC_DIR
#
# NGINX_SRC_DIR: a release tarball extracted, or a tree from nginx's git
# repository (its configure is auto/configure).  Both are built in
# build/upstream-VERSION/ (UPSTREAM_BUILD: another directory) with the
# flags below (UPSTREAM_FLAGS replaces them; without --with-debug the
# blocks that read debug-level lines skip, saying so), through the
# Makefile's own rule (NGINX_SRC and BUILD),
# so that the module is configured as a Debian build is.  Not in CI: it
# needs nginx's sources.  The results of the last runs, with their date,
# are in docs/operations.md, "Supported versions".
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

FLAGS=${UPSTREAM_FLAGS:-"--with-compat --with-debug --with-http_ssl_module \
--with-http_v2_module --with-http_v3_module"}

die() {
    echo "test-upstream: $*" >&2
    exit 1
}

[ "$#" -ge 1 ] || die "usage: $0 NGINX_SRC_DIR [util/test.sh arguments]"
src=$(cd "$1" && pwd) || die "$1: no such directory"
shift

[ -f "$src/src/core/nginx.h" ] || die "$src: no nginx source tree"
version=$(sed -n 's/^#define NGINX_VERSION  *"\(.*\)"$/\1/p' \
              "$src/src/core/nginx.h")
[ -n "$version" ] || die "$src/src/core/nginx.h: no NGINX_VERSION"

OUT=${UPSTREAM_BUILD:-build/upstream-$version}
mkdir -p "$OUT"

# the tree the Makefile copies: configure at the top (a git tree has it
# in auto/) and the flags in conf_flags, as Debian's nginx-dev has them
if [ ! -f "$OUT/src/conf_flags" ] || [ "$(cat "$OUT/src/.flags")" != "$FLAGS" ]
then
    rm -rf "$OUT/src" "$OUT/nginx"
    cp -r "$src" "$OUT/src"
    [ -f "$OUT/src/configure" ] || cp "$OUT/src/auto/configure" \
                                      "$OUT/src/configure"
    # shellcheck disable=SC2086 # configure's options, one a word
    printf 'NGX_CONF_FLAGS=(%s)\n' "$(printf '%q ' $FLAGS)" \
        > "$OUT/src/conf_flags"
    echo "$FLAGS" > "$OUT/src/.flags"
fi

echo "test-upstream: nginx $version, $FLAGS"
start=$(date +%s)
rc=0
{
    make --no-print-directory NGINX_SRC="$ROOT/$OUT/src" BUILD="$OUT" \
        "$OUT/ngx_http_session_module.so" &&
    make --no-print-directory build/sessionctl &&
    make --no-print-directory -C "$OUT/nginx" -f objs/Makefile -j2 binary
} > "$OUT/build.log" 2>&1 || rc=$?
secs=$(( $(date +%s) - start ))
warnings=$(cat "$OUT/build.log" "$OUT/configure.log" | grep -c 'warning:' \
               || true)
if [ "$rc" -ne 0 ]; then
    tail -40 "$OUT/build.log"
    die "nginx $version: build failed (${secs}s, $OUT/build.log)"
fi
echo "test-upstream: nginx $version built in ${secs}s," \
     "$warnings compiler warnings ($OUT/build.log)"

"$OUT/nginx/objs/nginx" -V

start=$(date +%s)
rc=0
TEST_NGINX_BINARY=$ROOT/$OUT/nginx/objs/nginx \
SESSION_MODULE=$ROOT/$OUT/ngx_http_session_module.so \
    bash util/test.sh "$@" 2>&1 | tee "$OUT/test.log" || rc=$?
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
secs=$(( $(date +%s) - start ))

read -r files tests failed < <(perl -ne '
    if (/^Files=(\d+), Tests=(\d+)/) { $f += $1; $t += $2 }
    $x += $1 while /Failed: (\d+)\)/g;
    END { printf "%d %d %d\n", $f, $t, $x }' "$OUT/test.log")
# the tests skipped for want of --with-debug (t/lib/SessionTest.pm) or
# of HTTP/3 say so on stderr
skipped=$(grep -c '^# skipped: ' "$OUT/test.log" || true)

echo "test-upstream: nginx $version: $files scripts, $tests tests," \
     "$failed failed, $skipped skipped, ${secs}s ($OUT/test.log)"
[ "$rc" -eq 0 ] || die "nginx $version: the suite FAILED"
echo "test-upstream: nginx $version passed"
