#!/usr/bin/env bash
# make fuzz: builds every libFuzzer harness of fuzz/ against src/core with
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs each for a
# bounded time from its seed corpus (fuzz/corpus/<name>/).
#
#   bash fuzz/run.sh                    every harness, FUZZ_SECONDS each
#   FUZZ_SECONDS=10 bash fuzz/run.sh    shorter
#   bash fuzz/run.sh key url            some harnesses
#
# The corpus grown by a run stays in build/fuzz/corpus/<name> (not in the
# repository); a crash leaves its input in build/fuzz/crash-<name>-*, and
# the script exits non-zero.  Prints one line per harness: executions,
# and whether it crashed.
set -euo pipefail

cd "$(dirname "$0")/.."

SECONDS_EACH=${FUZZ_SECONDS:-60}
OUT=build/fuzz
CC=${FUZZ_CC:-clang}
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
CORE_SRCS=$(ls src/core/*.c)

command -v "$CC" >/dev/null 2>&1 \
    || { echo "fuzz: $CC not found (bash util/install-sanitizer-deps.sh)" >&2;
         exit 1; }

mkdir -p "$OUT"

if [ "$#" -gt 0 ]; then
    names="$*"
else
    names=$(ls fuzz/fuzz_*.c | sed 's|fuzz/fuzz_||; s|\.c$||')
fi

failed=0
report=""

for name in $names; do
    bin=$OUT/fuzz_$name
    # shellcheck disable=SC2086 # lists of flags and files, one a word
    $CC -g -O1 $SAN -Isrc/core -o "$bin" "fuzz/fuzz_$name.c" $CORE_SRCS \
        -ljansson -lcrypto

    corpus=$OUT/corpus/$name
    mkdir -p "$corpus"
    if [ -d "fuzz/corpus/$name" ]; then
        cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
    fi

    log=$OUT/fuzz_$name.log
    rc=0
    # one process, bounded in time; leaks are reported too
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=1024 \
               -max_len=4096 -print_final_stats=1 \
               -artifact_prefix="$OUT/crash-$name-" "$corpus" \
               >"$log" 2>&1 || rc=$?

    execs=$(awk '/stat::number_of_executed_units:/ { print $2 }' "$log" \
            | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{ print $2 }')
    units=$(ls "$corpus" | wc -l)

    if [ "$rc" -ne 0 ]; then
        failed=1
        line=$(printf '%-8s %12s execs  cov %5s  corpus %5s  CRASH (rc %d, see %s)' \
               "$name" "${execs:-?}" "${cov:-?}" "$units" "$rc" "$log")
        grep -m3 -E 'ERROR|runtime error|SUMMARY' "$log" >&2 || true
    else
        line=$(printf '%-8s %12s execs  cov %5s  corpus %5s  ok' \
               "$name" "${execs:-?}" "${cov:-?}" "$units")
    fi

    echo "fuzz: $line"
    report+="$line"$'\n'
done

echo
echo "fuzz: ${SECONDS_EACH}s each, ASan + UBSan"
printf '%s' "$report"

exit "$failed"
