#!/usr/bin/env bash
# make asan: the module and nginx under AddressSanitizer and
# UndefinedBehaviorSanitizer.
#
#   1. the Check unit tests of src/core, built with
#      -fsanitize=address,undefined;
#   2. nginx from the same source tree as the module (NGINX_SRC, with
#      Debian's configure flags when it has them) and the module, both
#      built with the sanitizers and NGX_DEBUG_PALLOC (every pool
#      allocation its own malloc, so that ASan sees overruns inside
#      pools), in build/asan/;
#   3. Test::Nginx scripts against that nginx (util/test.sh with its own
#      throw-away PostgreSQL): ASAN_TESTS="t/001-auth.t t/014-hostile.t"
#      by default, ASAN_TESTS=all for the whole suite.
#
# Every sanitizer report is written to build/asan/reports/; the run fails
# when a test fails or when any report names a function of the module
# (ngx_http_session_*).  Reports about nginx itself are listed, not
# counted.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
OUT=build/asan
NGX=$OUT/nginx
REPORTS=$ROOT/$OUT/reports
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
WARN="-Wall -Wextra -Werror -Wno-unused-parameter"
PQ_INC=$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)

mkdir -p "$OUT"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"

# 1. unit tests

echo "asan: unit tests"
# shellcheck disable=SC2046,SC2086
${CC:-cc} -g -O1 $SAN $WARN -Isrc/core -It/unit -o "$OUT/unit_tests" \
    t/unit/*.c src/core/*.c $(pkg-config --cflags --libs check) \
    -ljansson -lcrypto
ASAN_OPTIONS=detect_leaks=1:log_path=$REPORTS/unit \
UBSAN_OPTIONS=print_stacktrace=1:log_path=$REPORTS/unit \
    "$OUT/unit_tests"

# 2. nginx and the module

if [ ! -f "$NGX/objs/Makefile" ] || [ config -nt "$NGX/objs/Makefile" ]; then
    echo "asan: configuring nginx in $NGX"
    rm -rf "$NGX"
    cp -r "$NGINX_SRC" "$NGX"
    (
        cd "$NGX"
        flags="--with-compat --with-http_ssl_module --with-http_realip_module"
        if [ -f conf_flags ]; then
            # shellcheck disable=SC1091
            . ./conf_flags
            flags="${NGX_CONF_FLAGS[*]}"
        fi
        eval ./configure $flags \
            --with-cc-opt="'-g -O1 -fPIC $SAN -DNGX_DEBUG_PALLOC=1 $WARN'" \
            --with-ld-opt="'-fPIC $SAN'" \
            --add-dynamic-module="$ROOT" >"$ROOT/$OUT/configure.log" 2>&1
    ) || { tail -30 "$OUT/configure.log"; exit 1; }
fi

echo "asan: building nginx and the module"
make -C "$NGX" -f objs/Makefile -j2 >"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 1; }
cp "$NGX/objs/ngx_http_session_module.so" "$OUT/ngx_http_session_module.so"

# 3. Test::Nginx

tests=${ASAN_TESTS:-t/001-auth.t t/014-hostile.t}
if [ "$tests" = all ]; then
    tests=""
fi

echo "asan: Test::Nginx ${tests:-(every script)}"
rc=0
# nginx frees little at exit by design: leaks are not reports here
# shellcheck disable=SC2086
ASAN_OPTIONS=detect_leaks=0:log_path=$REPORTS/nginx \
UBSAN_OPTIONS=print_stacktrace=1:log_path=$REPORTS/nginx \
TEST_NGINX_BINARY=$ROOT/$NGX/objs/nginx \
SESSION_MODULE=$ROOT/$OUT/ngx_http_session_module.so \
    bash util/test.sh $tests || rc=$?

# 4. the reports

total=$(find "$REPORTS" -type f | wc -l)
ours=$(grep -l 'ngx_http_session_' "$REPORTS"/* 2>/dev/null | wc -l || true)

echo "asan: $total sanitizer report file(s), $ours naming the module"
for f in "$REPORTS"/*; do
    [ -f "$f" ] || continue
    echo "--- $f"
    grep -m5 -E 'ERROR|runtime error|SUMMARY' "$f" || true
done

if [ "$ours" -ne 0 ] || [ "$rc" -ne 0 ]; then
    echo "asan: FAILED (tests rc $rc, module reports $ours)" >&2
    exit 1
fi

echo "asan: passed"
