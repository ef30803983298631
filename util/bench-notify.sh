#!/usr/bin/env bash
# What a NOTIFY costs a write's throughput, in PostgreSQL alone
# (decision (yf)): pgbench updating one row of a table at random, with
# the statement's RETURNING calling pg_notify() (as a complete did for
# every session before schema 20) and without it, while one connection
# LISTENs on the channel (a node's), alternating, in one throw-away
# cluster with fsync on.  A notifying commit holds PostgreSQL's notify
# lock until it ends, flush included, so the notifying commits of the
# whole database go one at a time; the others share their flushes.
#
#   bash util/bench-notify.sh         (make bench-notify)
#
# Environment:
#   BENCH_NOTIFY_CLIENTS   pgbench clients (default 16)
#   BENCH_NOTIFY_ROUNDS    rounds of both (default 3)
#   BENCH_DURATION         each run (default 5s)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

die() { echo "bench-notify.sh: $*" >&2; exit 1; }
log() { echo "bench-notify.sh: $*" >&2; }

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

CLIENTS=${BENCH_NOTIFY_CLIENTS:-16}
ROUNDS=${BENCH_NOTIFY_ROUNDS:-3}
DURATION=${BENCH_DURATION:-5s}
SECS=${DURATION%s}

inside() {
    local w listener round kind tps
    local -a with without

    w=$(mktemp -d /tmp/ngx-session-bench-notify.XXXXXX)

    psql -X -q -v ON_ERROR_STOP=1 -c "CREATE TABLE bench_rows
        (id integer PRIMARY KEY, n integer NOT NULL);
        INSERT INTO bench_rows SELECT g, 0 FROM generate_series(1, 100000) g"

    printf '%s\n' '\set i random(1, 100000)' \
        'UPDATE bench_rows SET n = n + 1 WHERE id = :i' \
        "    RETURNING n, pg_notify('bench_events', 'updated:' || id::text);" \
        > "$w/with.sql"
    printf '%s\n' '\set i random(1, 100000)' \
        'UPDATE bench_rows SET n = n + 1 WHERE id = :i RETURNING n;' \
        > "$w/without.sql"

    # a node's LISTEN connection, for as long as the runs last
    psql -X -q -c 'LISTEN bench_events' \
        -c "SELECT pg_sleep($(( (SECS + 2) * ROUNDS * 2 + 10 )))" \
        >/dev/null 2>&1 &
    listener=$!

    for round in $(seq "$ROUNDS"); do
        for kind in with without; do
            tps=$(pgbench -n -c "$CLIENTS" -j 2 -T "$SECS" -f "$w/$kind.sql" \
                      2>/dev/null | awk '/^tps = /{ printf "%.0f", $3 }')
            [ -n "$tps" ] || die "pgbench gave no tps ($kind)"
            log "round $round: $kind NOTIFY $tps tps"
            if [ "$kind" = with ]; then with+=("$tps"); else without+=("$tps"); fi
        done
    done

    kill "$listener" 2>/dev/null || true
    wait "$listener" 2>/dev/null || true
    rm -rf "$w"

    {
        echo "One row UPDATE at random, $CLIENTS pgbench clients, fsync on," \
             "one LISTEN connection, $ROUNDS rounds of $DURATION each:"
        echo
        echo "| statement | tps per round | ratio to without |"
        echo "|---|---|---:|"
        echo "| with pg_notify() | ${with[*]} |" \
             "$(awk -v a="${with[*]}" -v b="${without[*]}" 'BEGIN {
                 n = split(a, x, " "); split(b, y, " ");
                 for (i = 1; i <= n; i++) { s += x[i]; t += y[i] }
                 printf "%.2f", s / t }') |"
        echo "| without | ${without[*]} | 1.00 |"
    } > "$BENCH_NOTIFY_REPORT"
}

if [ "${1:-}" = --inside-pg-virtualenv ]; then
    inside
    exit 0
fi

command -v pgbench >/dev/null 2>&1 || die "pgbench not found (make deps)"
pg_cluster_report - BENCH_NOTIFY_REPORT "$0" -o fsync=on
