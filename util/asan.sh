#!/usr/bin/env bash
# make asan: the module and nginx under AddressSanitizer and
# UndefinedBehaviorSanitizer.
#
#   1. the Check unit tests of src/core, built with
#      -fsanitize=address,undefined (ASAN_UNIT=0 skips them);
#   2. nginx and the module from one source tree (NGINX_SRC when it has
#      nginx's sources, else the upstream tarball of Debian's nginx source
#      package, fetched once with apt), with Debian's configure flags, both
#      built with the sanitizers and NGX_DEBUG_PALLOC (every pool
#      allocation its own malloc, so that ASan sees overruns inside
#      pools), in build/asan/;
#   3. Test::Nginx scripts against that nginx (util/test.sh with its own
#      throw-away PostgreSQL): ASAN_TESTS="t/001-auth.t t/014-hostile.t"
#      by default, ASAN_TESTS=all for the whole suite.
#
# A sanitizer report stops the process that makes it; the run fails when
# a test fails or a report shows in the output.  UBSan reports about
# nginx's own code are suppressed (util/asan-ubsan.supp).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
OUT=build/asan
NGX=$OUT/nginx
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
WARN="-Wall -Wextra -Werror -Wno-unused-parameter"
PQ_INC=$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)

mkdir -p "$OUT"

# 1. unit tests

if [ "${ASAN_UNIT:-1}" != 0 ]; then
    echo "asan: unit tests"
    # shellcheck disable=SC2046,SC2086
    ${CC:-cc} -g -O1 $SAN $WARN -Isrc/core -It/unit -o "$OUT/unit_tests" \
        t/unit/*.c src/core/*.c $(pkg-config --cflags --libs check) \
        -ljansson -lcrypto
    # in one process: a fork per test of a sanitized process is slow
    CK_FORK=no \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$OUT/unit_tests"
fi

# 2. nginx and the module

# Debian's nginx-dev tree has the headers only: nginx's own sources then
# come from the Debian source package of the installed version (its
# upstream tarball), fetched once with apt from the mirror the machine
# already uses, into build/asan/.
nginx_source() {
    local tmp uri suite tarball

    if [ -f "$NGINX_SRC/src/core/nginx.c" ]; then
        echo "$NGINX_SRC"
        return
    fi

    tarball=$(ls "$OUT"/nginx_*.orig.tar.gz 2>/dev/null | head -1 || true)

    if [ -z "$tarball" ]; then
        uri=$(awk '/^URIs:/ { print $2; exit }' \
                  /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
        if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
            uri=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list)
        fi
        [ -n "$uri" ] || { echo "asan: no Debian mirror in apt sources" >&2;
                           exit 1; }
        # shellcheck disable=SC1091
        suite=$(. /etc/os-release && echo "$VERSION_CODENAME")

        tmp=$(mktemp -d)
        mkdir -p "$tmp/lists/partial" "$tmp/etc"
        printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\n' \
            "$uri" "$suite" > "$tmp/etc/src.sources"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            >> "$tmp/etc/src.sources"
        local -a aptopts=(-o "Dir::Etc::sourcelist=-"
                          -o "Dir::Etc::sourceparts=$tmp/etc"
                          -o "Dir::State::Lists=$tmp/lists"
                          -o "Dir::Cache::pkgcache=$tmp/pkgcache.bin"
                          -o "Dir::Cache::srcpkgcache=$tmp/srcpkgcache.bin"
                          -o "APT::Get::List-Cleanup=0"
                          -o "APT::Sandbox::User=root")
        apt-get "${aptopts[@]}" update -qq >&2
        # only the upstream tarball is needed: a missing Debian part is
        # no failure here
        (cd "$OUT" && apt-get "${aptopts[@]}" source --download-only \
            nginx >&2) || true
        rm -rf "$tmp"
        tarball=$(ls "$OUT"/nginx_*.orig.tar.gz 2>/dev/null | head -1 || true)
        [ -n "$tarball" ] || { echo "asan: no nginx source" >&2; exit 1; }
    fi

    rm -rf "$OUT/src"
    mkdir -p "$OUT/src"
    tar -xzf "$tarball" -C "$OUT/src"
    ls -d "$ROOT/$OUT"/src/nginx-*/
}

if [ ! -f "$NGX/objs/Makefile" ] || [ config -nt "$NGX/objs/Makefile" ]; then
    src=$(nginx_source)
    echo "asan: configuring nginx from $src in $NGX"
    rm -rf "$NGX"
    cp -r "$src" "$NGX"
    (
        cd "$NGX"
        flags="--with-compat --with-http_ssl_module --with-http_realip_module"
        if [ -f conf_flags ]; then
            # shellcheck disable=SC1091
            . ./conf_flags
            flags="${NGX_CONF_FLAGS[*]}"
        elif [ -f "$NGINX_SRC/conf_flags" ]; then
            # Debian's flags, for the same modules as the stock binary
            # shellcheck disable=SC1091
            . "$NGINX_SRC/conf_flags"
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
# A sanitizer error stops the process (ASan always does; UBSan is told
# to), so that a worker's report, which nginx writes into the block's
# error log, also fails the block's tests (a worker that exits on a
# signal).  nginx frees little at exit by design: leaks are not
# reports; a dynamic module defines ngx_module_names and the like again,
# by design, which ASan would take for an ODR violation.  UBSan reports
# about nginx's own code are suppressed (util/asan-ubsan.supp).
# shellcheck disable=SC2086
ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$ROOT/util/asan-ubsan.supp \
TEST_NGINX_BINARY=$ROOT/$NGX/objs/nginx \
SESSION_MODULE=$ROOT/$OUT/ngx_http_session_module.so \
    bash util/test.sh $tests 2>&1 | tee "$OUT/test.log" || rc=$?
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

# 4. the reports that reached the test's output (nginx -t, the master)

reports=$(grep -c -E 'runtime error|ERROR: AddressSanitizer|exited on signal' \
              "$OUT/test.log" || true)

echo "asan: $reports sanitizer report(s) or worker crash(es) in the output"
grep -E 'runtime error|ERROR: AddressSanitizer|exited on signal' \
    "$OUT/test.log" | head -20 || true

if [ "$reports" -ne 0 ] || [ "$rc" -ne 0 ]; then
    echo "asan: FAILED (tests rc $rc, reports $reports)" >&2
    exit 1
fi

echo "asan: passed"
