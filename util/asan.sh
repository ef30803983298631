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
#   3. every Test::Nginx script but t/019-openapi.t (which starts no
#      nginx) against that nginx, through util/test.sh with its own
#      throw-away PostgreSQL (ASAN_TESTS="t/001-auth.t ..." for some);
#      (ASAN_BUILD_ONLY=1 stops here: make fuzz-http builds this way);
#   4. a summary: scripts run, tests passed, sanitizer reports found
#      (ASan, UBSan, LeakSanitizer; each process writes its reports to
#      build/asan/reports/).
#
# A sanitizer report stops the process that makes it; the run fails when
# a test fails or any report is found.  UBSan reports about nginx's own
# code are suppressed (util/asan-ubsan.supp), and so are the leaks nginx
# itself leaves at exit (util/asan-lsan.supp); nothing of the module is.
# About 15 minutes on a busy two-core machine once nginx is built.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
OUT=build/asan
NGX=$OUT/nginx
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
WARN="-Wall -Wextra -Werror -Wno-unused-parameter"

mkdir -p "$OUT"

# 1. unit tests

if [ "${ASAN_UNIT:-1}" != 0 ]; then
    echo "asan: unit tests"
    # shellcheck disable=SC2046,SC2086 # lists of flags, one a word
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

# nginx's own sources (util/nginx-source.sh), extracted in build/asan/
# shellcheck source=util/nginx-source.sh
. "$ROOT/util/nginx-source.sh"

# a dlclose() that keeps modules mapped (util/asan-keep-modules.c)
KEEP=$ROOT/$OUT/asan-keep-modules.o
${CC:-cc} -c -O1 -fPIC $WARN -o "$KEEP" util/asan-keep-modules.c

if [ ! -f "$NGX/objs/Makefile" ] || [ config -nt "$NGX/objs/Makefile" ] \
   || ! grep -q asan-keep-modules "$NGX/objs/Makefile"
then
    src=$(nginx_source "$OUT" asan)
    echo "asan: configuring nginx from $src in $NGX"
    rm -rf "$NGX"
    cp -r "$src" "$NGX"
    (
        cd "$NGX"
        flags="--with-compat --with-http_ssl_module --with-http_realip_module"
        if [ -f conf_flags ]; then
            # shellcheck disable=SC1091 # a file of the nginx source tree
            . ./conf_flags
            flags="${NGX_CONF_FLAGS[*]}"
        elif [ -f "$NGINX_SRC/conf_flags" ]; then
            # Debian's flags, for the same modules as the stock binary
            # shellcheck disable=SC1091 # a file of the nginx source tree
            . "$NGINX_SRC/conf_flags"
            flags="${NGX_CONF_FLAGS[*]}"
        fi
        eval ./configure $flags \
            --with-cc-opt="'-g -O1 -fPIC $SAN -DNGX_DEBUG_PALLOC=1 $WARN'" \
            --with-ld-opt="'-fPIC $SAN $KEEP'" \
            --add-dynamic-module="$ROOT" >"$ROOT/$OUT/configure.log" 2>&1
    ) || { tail -30 "$OUT/configure.log"; exit 1; }
fi

echo "asan: building nginx and the module"
make -C "$NGX" -f objs/Makefile -j2 >"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 1; }
# a new file, not an overwrite: a running nginx maps the old one
cp "$NGX/objs/ngx_http_session_module.so" "$OUT/ngx_http_session_module.so.tmp"
mv -f "$OUT/ngx_http_session_module.so.tmp" "$OUT/ngx_http_session_module.so"

# ASAN_BUILD_ONLY=1: nginx and the module built, nothing run (util/fuzz-http.sh)
if [ "${ASAN_BUILD_ONLY:-0}" = 1 ]; then
    echo "asan: built $NGX/objs/nginx and $OUT/ngx_http_session_module.so"
    exit 0
fi

# 3. Test::Nginx

# every script of t/ by default; t/019-openapi.t checks a document and
# starts no nginx
tests=${ASAN_TESTS:-all}
if [ "$tests" = all ]; then
    tests=
    for t in t/*.t; do
        [ "$t" = t/019-openapi.t ] || tests+="$t "
    done
fi

# Sanitizer reports go to files of their own (log_path: one file per
# process, name.PID), not to stderr: nginx sends a worker's stderr to the
# error log of the test block, which the next block overwrites.
REPORTS=$ROOT/$OUT/reports
rm -rf "$REPORTS"
mkdir -p "$REPORTS"

echo "asan: Test::Nginx $tests"
start=$(date +%s)
rc=0
# A sanitizer error stops the process with SIGABRT (ASan always does;
# UBSan is told to), so that a worker's report also fails the block's
# tests (a worker that exits on a signal) and counts as a crash below:
# UBSan's reports from a worker reach the block's error log rather than
# the log_path file.  Leaks are reported at every process's exit
# (LeakSanitizer); the ones nginx itself leaves by design are suppressed
# by util/asan-lsan.supp, which names nginx's own functions only.  A
# dynamic module defines ngx_module_names and the like again, by design,
# which ASan would take for an ODR violation.  UBSan reports about
# nginx's own code are suppressed (util/asan-ubsan.supp).
# shellcheck disable=SC2086 # $tests is a list of scripts
ASAN_OPTIONS=detect_leaks=1:detect_odr_violation=0:abort_on_error=1:log_path=$REPORTS/asan \
LSAN_OPTIONS=suppressions=$ROOT/util/asan-lsan.supp:print_suppressions=0 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$REPORTS/ubsan:suppressions=$ROOT/util/asan-ubsan.supp \
TEST_NGINX_SERVROOT=$ROOT/$OUT/servroot \
TEST_NGINX_BINARY=$ROOT/$NGX/objs/nginx \
SESSION_MODULE=$ROOT/$OUT/ngx_http_session_module.so \
    bash util/test.sh $tests 2>&1 | tee "$OUT/test.log" || rc=$?
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
secs=$(( $(date +%s) - start ))

# 4. the summary: scripts, tests, reports (the report files, and any
# report that reached the test output or an error log still on disk)

pattern='ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer'
scripts=$(wc -w <<<"$tests")
read -r total failed < <(perl -ne '
    $t = $1 if /^Files=\d+, Tests=(\d+)/;
    $f += $1 while /Failed: (\d+)\)/g;
    END { printf "%d %d\n", $t // 0, $f // 0 }' "$OUT/test.log")
files=$(grep -l -E "$pattern" "$REPORTS"/* 2>/dev/null | wc -l || true)
inlogs=$(cat "$OUT/test.log" "$OUT"/servroot/logs/error.log 2>/dev/null \
             | grep -c -E "$pattern" || true)
reports=$((files + inlogs))
# a worker that a test kills on purpose (t/011: SIGKILL) is no crash
crashes=$(grep -c -P 'exited on signal (?!9\b)' "$OUT/test.log" || true)

cat <<SUMMARY
asan: summary (${secs}s)
asan:   scripts run       $scripts
asan:   tests passed      $((total - failed)) of $total
asan:   reports found     $reports (report files $files, in the output $inlogs)
asan:   worker crashes    $crashes
SUMMARY
for f in $(grep -l -E "$pattern" "$REPORTS"/* 2>/dev/null || true); do
    echo "asan: --- $f"
    grep -E -A12 "$pattern" "$f" | head -30
done

if [ "$reports" -ne 0 ] || [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    echo "asan: FAILED (tests rc $rc, reports $reports)" >&2
    exit 1
fi

echo "asan: passed"
