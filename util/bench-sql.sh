#!/usr/bin/env bash
# Instructions per execution of the module's statements in PostgreSQL,
# counted by valgrind's callgrind: repeatable to a few hundred where CPU
# time on a shared machine swings by a third (docs/decisions.md (xf)).
#
#   bash util/bench-sql.sh
#
# A throw-away cluster (pg_virtualenv) gets the schema, one project on a
# plan without a quota and BENCH_SQL_ROWS (100,000) sessions and
# Idempotency-Key rows, so that the indexes are of a real depth; then it
# is stopped, and for each statement a copy of its data directory runs a
# single-user backend under callgrind: the statement's text from
# src/db/ngx_http_session_sql.h prepared (plan_cache_mode
# force_generic_plan, as the module's connections have it), then
# executed 100 times and, in another copy, 600 times, each with a new
# key; the difference over 500 is what one more execution costs (the
# executor's start, the statement, its triggers, the commit), without
# what the first executions pay once (catalog caches, the plan).  Only
# PortalRun and the transaction's start and commit are counted, less the
# single-user backend's printing of the rows, so the protocol and the
# kernel are not (pgbench and util/bench-db.sh measure those).  Also the
# WAL bytes an execution writes, the same way.
#
# Prints one line per statement on standard output:
#
#     NAME|instructions per execution|WAL bytes per execution
#
#   create             NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE
#   create-key         NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE_KEYED
#   create-quota       NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED
#   create-quota-key   NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED_KEYED
#
# Environment: BENCH_SQL_ONLY (a comma list of the names above),
# BENCH_SQL_ROWS, BENCH_SQL_PRELUDE (SQL run after the fixtures: to try
# an index or a function; the statements still come from the header),
# BENCH_KEEP (keep the scratch directory).  Needs valgrind; about a
# minute.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
SESSIONCTL=$ROOT/build/sessionctl
ROWS=${BENCH_SQL_ROWS:-100000}
ONLY=${BENCH_SQL_ONLY:-}
N1=100
N2=600

die() {
    echo "bench-sql.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-sql.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

# the body's SHA-256 of a create ('{"delivery_mode": "long_poll"}')
SHA=8420636b19f7951fa7ab72525576f0425ef34923a87aea1337336d76f010e3d5

# name|statement macro|parameters of execution I (@I@ in them)
STATEMENTS=(
    "create|SESSION_CREATE_FREE|'@P@', 'long_poll', NULL, 3600"
    "create-key|SESSION_CREATE_FREE_KEYED|'@P@', 'long_poll', NULL, 3600, 'bench-sql-@I@', '/api/v1/sessions', '\\x$SHA', 2"
    "create-quota|SESSION_CREATE_COUNTED|'@P@', 'long_poll', NULL, 3600, '@A@', 1000000000"
    "create-quota-key|SESSION_CREATE_COUNTED_KEYED|'@P@', 'long_poll', NULL, 3600, '@A@', 1000000000, 'bench-sql-@I@', '/api/v1/sessions', '\\x$SHA', 2"
)

wanted() {
    [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]
}

sql() {
    psql -X -q -v ON_ERROR_STOP=1 -At -d "$DB" -c "$1"
}

# run NAME MACRO PARAMS N: callgrind's total and the WAL bytes of N
# executions in a copy of the stopped cluster
run() {
    local name=$1 macro=$2 params=$3 n=$4 d i out total w0 w1

    d=$W/run-$name-$n
    cp -a "$DATA" "$d"
    # the server's settings are the defaults; its own files stay out
    rm -f "$d/postmaster.pid"
    : > "$d/postgresql.conf"
    : > "$d/pg_hba.conf"
    : > "$d/pg_ident.conf"
    chown "$OWNER" "$d"/*.conf

    {
        echo "SET plan_cache_mode = force_generic_plan"
        echo "PREPARE k AS $("$W/stmt" "$macro")"
        echo "SELECT 'wal:' || pg_current_wal_insert_lsn()"
        for i in $(seq "$n"); do
            local p=${params//@P@/$PROJECT}
            p=${p//@A@/$ACCOUNT}
            echo "EXECUTE k(${p//@I@/$name-$n-$i})"
        done
        echo "SELECT 'wal:' || pg_current_wal_insert_lsn()"
    } > "$d.in"

    as_owner valgrind --tool=callgrind \
        --callgrind-out-file="$d.cg" --toggle-collect=PortalRun \
        --toggle-collect=StartTransactionCommand \
        --toggle-collect=CommitTransactionCommand \
        --toggle-collect=debugStartup --toggle-collect=debugtup \
        "$BINDIR/postgres" --single -D "$d" \
        -c shared_preload_libraries= "$DBNAME" \
        < "$d.in" > "$d.out" 2> "$d.err" \
        || { tail -5 "$d.err" >&2; die "$name: the backend failed"; }

    grep -q ERROR "$d.out" && { grep -m3 ERROR "$d.out" >&2
                                die "$name: a statement failed"; }

    total=$(awk '/^(summary|totals):/ { print $2; exit }' "$d.cg")
    w0=$(grep -o 'wal:[0-9A-F/]*' "$d.out" | head -1 | cut -c5-)
    w1=$(grep -o 'wal:[0-9A-F/]*' "$d.out" | tail -1 | cut -c5-)
    [ -n "$total" ] && [ -n "$w0" ] && [ -n "$w1" ] \
        || die "$name: no count in $d"

    rm -rf "$d"
    echo "$total $(lsn "$w1") $(lsn "$w0")"
}

# as_owner COMMAND...: as the cluster's owner (pg_virtualenv runs the
# cluster as postgres when we are root)
as_owner() {
    if [ "$(id -un)" = "$OWNER" ]; then
        "$@"
    else
        runuser -u "$OWNER" -- "$@"
    fi
}

# lsn X/Y: the byte position
lsn() {
    local hi=${1%/*} lo=${1#*/}
    echo $(( (16#$hi << 32) + 16#$lo ))
}

inside() {
    local s name macro params a b

    W=$(mktemp -d /tmp/ngx-session-bench-sql.XXXXXX)
    chmod 755 "$W"
    trap 'rc=$?; [ -n "${BENCH_KEEP:-}" ] || rm -rf "$W"; exit $rc' EXIT

    # the statements' text, from the header the module is built with
    cat > "$W/stmt.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include "ngx_http_session_sql.h"

#define S(m)  if (strcmp(argv[1], #m) == 0) { puts(NGX_HTTP_SESSION_SQL_##m); return 0; }

int
main(int argc, char **argv)
{
    if (argc != 2) {
        return 2;
    }

    S(SESSION_CREATE_FREE)
    S(SESSION_CREATE_FREE_KEYED)
    S(SESSION_CREATE_COUNTED)
    S(SESSION_CREATE_COUNTED_KEYED)

    return 1;
}
EOF
    cc -I"$ROOT/src/db" -o "$W/stmt" "$W/stmt.c" \
        || die "cannot build the statements' printer"

    "$SESSIONCTL" -d "$DB" migrate >/dev/null || die "migrate failed"

    ACCOUNT=$(ctl account create bench-sql --plan unlimited \
                  | json_field account_id)
    PROJECT=$(ctl project create "$ACCOUNT" bench-sql | json_field project_id)

    log "fixtures: $ROWS sessions and keys"
    sql "INSERT INTO sessions (project_id, delivery_mode, expires_at)
         SELECT '$PROJECT', 'long_poll', now() + interval '1 day'
         FROM generate_series(1, $ROWS)"
    sql "INSERT INTO idempotency_keys (project_id, key, method, path,
                                       body_sha256, status, content_type,
                                       location, answer_session, expires_at)
         SELECT s.project_id, 'fixture-' || s.n, 'POST', '/api/v1/sessions',
                '\\x$SHA', 201, 'application/json',
                '/api/v1/sessions/' || s.id,
                ROW(s.id, s.project_id, 'long_poll', NULL, 'open', 0, 0,
                    s.created_at, s.expires_at,
                    NULL)::idempotency_session_answer,
                now() + interval '24 hours' + s.n * interval '1 ms'
         FROM (SELECT *, row_number() OVER () AS n FROM sessions) s"
    [ -z "${BENCH_SQL_PRELUDE:-}" ] || sql "$BENCH_SQL_PRELUDE"
    sql "VACUUM ANALYZE"
    sql "CHECKPOINT"

    DATA=$(sql "SHOW data_directory")
    BINDIR=$(pg_config --bindir)
    DBNAME=$PGDATABASE
    OWNER=$(stat -c %U "$DATA")
    [ "$(id -u)" = 0 ] || [ "$OWNER" = "$(id -un)" ] \
        || die "the cluster belongs to $OWNER"
    chown "$OWNER" "$W"

    # stopped for the single-user backends (pg_virtualenv drops it after)
    pg_ctlcluster "$(ls "$PG_CLUSTER_CONF_ROOT")" regress stop \
        || die "cannot stop the cluster"

    for s in "${STATEMENTS[@]}"; do
        IFS='|' read -r name macro params <<<"$s"
        wanted "$name" || continue

        read -r a a1 a0 <<<"$(run "$name" "$macro" "$params" "$N1")"
        read -r b b1 b0 <<<"$(run "$name" "$macro" "$params" "$N2")"

        awk -v n="$name" -v a="$a" -v b="$b" -v wa=$((a1 - a0)) \
            -v wb=$((b1 - b0)) -v d=$((N2 - N1)) 'BEGIN {
                printf "%s|%.0f|%.0f\n", n, (b - a) / d, (wb - wa) / d }'
    done
}


if [ "${1:-}" = --inside-pg-virtualenv ]; then
    DB=$(pg_virtualenv_conninfo)
    inside
    exit $?
fi

command -v valgrind >/dev/null 2>&1 || die "valgrind not found"
command -v pg_virtualenv >/dev/null 2>&1 || die "pg_virtualenv not found"
[ -x "$SESSIONCTL" ] || die "$SESSIONCTL not built (run make)"

pg_env_clear
export LC_ALL=C

pg_virtualenv -t -- bash "$ROOT/util/bench-sql.sh" --inside-pg-virtualenv
