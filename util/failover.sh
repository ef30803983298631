#!/bin/bash
# make failover: a primary and a hot standby (pg_basebackup) on loopback,
# nginx with
#
#     session_db "host=127.0.0.1,127.0.0.1 port=P1,P2
#                 target_session_attrs=read-write ...";
#
# and a few requests per second (creates and lists, alternating).  The
# standby is promoted and the old primary stopped (-m immediate, as a
# crash): the module must follow the new primary by itself, without a
# reload, within a bound; no worker may crash and nothing may be logged
# at [alert] or worse.  Then a new nginx: the first host of the list is
# down and the module connects to the second.  Prints the figures.
#
# Ports FAILOVER_PORT (default 2420) and the two after it.  Everything
# lives in a scratch directory that is removed at the end (kept when the
# run fails, or with BENCH_KEEP=1).  Bounded: every wait has a deadline.

set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${TEST_NGINX_BINARY:-/usr/sbin/nginx}
MODULE=${SESSION_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl
P1=${FAILOVER_PORT:-2420}
P2=$((P1 + 1))
PORT=$((P1 + 2))
# the bound on the time from the old primary's stop to the first create
# answered by the new one
BOUND=${FAILOVER_BOUND:-10}

die() {
    echo "failover: $*" >&2
    exit 1
}

log() {
    echo "failover: $*"
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

BIN=$(pg_config --bindir 2>/dev/null || true)
[ -x "$BIN/pg_ctl" ] || BIN=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
[ -x "$BIN/pg_basebackup" ] || die "no PostgreSQL server binaries"
[ -x "$MODULE" ] || die "no $MODULE (make build)"

W=$(mktemp -d /tmp/session-failover.XXXXXX)
NGINX_UP=
LOAD_PID=

cleanup() {
    local rc=$? d
    set +e
    [ -z "$LOAD_PID" ] || kill "$LOAD_PID" 2>/dev/null
    nginx_down
    for d in p1 p2; do
        [ -f "$W/$d/postmaster.pid" ] \
            && as_pg "$BIN/pg_ctl" -D "$W/$d" -m immediate stop \
                   >/dev/null 2>&1
    done
    if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
        log "kept $W"
    else
        rm -rf "$W"
    fi
    exit "$rc"
}

trap cleanup EXIT

[ "$(id -u)" = 0 ] && chown postgres "$W"
chmod 755 "$W"


# --- the primary and its standby

log "primary on 127.0.0.1:$P1, standby on 127.0.0.1:$P2, under $W"

as_pg "$BIN/initdb" -D "$W/p1" -U postgres -A trust --no-sync \
    >"$W/initdb.log" 2>&1 || { cat "$W/initdb.log"; die "initdb failed"; }

cat >>"$W/p1/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $P1
unix_socket_directories = '$W'
fsync = off
wal_level = replica
max_wal_senders = 4
hot_standby = on
EOF

as_pg "$BIN/pg_ctl" -D "$W/p1" -l "$W/p1.log" -w -t 30 start >/dev/null \
    || { cat "$W/p1.log"; die "the primary did not start"; }

# standby NEW_DIR NEW_PORT OF_PORT: a hot standby made with pg_basebackup
standby() {
    rm -rf "${W:?}/${1:?}"
    as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$3" -U postgres -D "$W/$1" \
        -R -X stream --checkpoint=fast >"$W/basebackup.log" 2>&1 \
        || { cat "$W/basebackup.log"; die "pg_basebackup failed"; }

    echo "port = $2" >>"$W/$1/postgresql.conf"

    as_pg "$BIN/pg_ctl" -D "$W/$1" -l "$W/$1.log" -w -t 30 start >/dev/null \
        || { cat "$W/$1.log"; die "the standby did not start"; }
}

standby p2 "$P2" "$P1"

DB="host=127.0.0.1 port=$P1 dbname=postgres user=postgres"

"$SESSIONCTL" -d "$DB" migrate >/dev/null || die "migrate failed"

acct=$(ctl account create failover --plan unlimited | json_field account_id)
proj=$(ctl project create "$acct" failover | json_field project_id)
KEY=$(ctl key create "$proj" | json_field key)

in_recovery() {
    psql -X -At -d "host=127.0.0.1 port=$1 dbname=postgres user=postgres" \
        -c 'SELECT pg_is_in_recovery()'
}

# the standby on port $1 has the fixture: replication runs
standby_has_key() {
    [ "$(psql -X -At -d "host=127.0.0.1 port=$1 dbname=postgres \
user=postgres" -c "SELECT count(*) FROM projects WHERE id = '$proj'")" = 1 ]
}

wait_for 30 "replication to the standby" standby_has_key "$P2"
[ "$(in_recovery "$P2")" = t ] || die "the standby is not in recovery"


# --- nginx on the host list

DB="host=127.0.0.1,127.0.0.1 port=$P1,$P2 target_session_attrs=read-write"
DB="$DB dbname=postgres user=postgres"

{
    nginx_conf_head "$MODULE" 2
    cat <<EOF
    session_db_timeout 2s;
    session_db_idle_check 1s;

    server {
        listen 127.0.0.1:$PORT;

        location = /ok {
            return 200;
        }

        location /api/ {
            session_api;
        }
    }
}
EOF
} >"$W/nginx.conf"

start_nginx

# its status, or with $1 "status seconds"
api_create() {
    curl -s -o /dev/null -w "%{http_code}${1:+ %{time_total\}}" -m 5 -X POST \
        -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d '{"delivery_mode": "long_poll"}' \
        "http://127.0.0.1:$PORT/api/v1/sessions"
}

created() {
    [ "$(api_create)" = 201 ]
}

wait_for 20 "first create" created

# the load: a create and a list every ~0.2 s, one line per answer:
# "<epoch> create|list <status> <seconds>"
load() {
    local st
    while :; do
        st=$(api_create t) || st="000 5"
        echo "$(now) create $st"
        st=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -m 5 \
                 -H "Authorization: Bearer $KEY" \
                 "http://127.0.0.1:$PORT/api/v1/sessions?limit=1") \
            || st="000 5"
        echo "$(now) list $st"
        sleep 0.2
    done
}

load >"$W/load.log" &
LOAD_PID=$!

answers() {
    [ "$(wc -l <"$W/load.log")" -ge "$1" ]
}

wait_for 30 "load" answers 10


# --- failovers

fail=0

# failover OLD_DIR NEW_DIR NEW_PORT ORDER: ORDER "promote": the standby is
# promoted, then the old primary stops (a planned switchover); "crash":
# the old primary stops, the standby is promoted OUTAGE seconds later (a
# crash and a failover manager's reaction time)
failover() {
    local old=$1 new=$2 port=$3 order=$4 t0 t1 t2 n recover total bad \
          bad_after codes slowest on_new

    log "$order: old primary $old, new $new (127.0.0.1:$port)"

    t0=$(now)

    if [ "$order" = promote ]; then
        as_pg "$BIN/pg_ctl" -D "$W/$new" -w -t 30 promote >/dev/null \
            || die "promote failed"
        as_pg "$BIN/pg_ctl" -D "$W/$old" -m immediate -w -t 30 stop \
            >/dev/null || die "stop failed"
        T1=$(now)
    else
        as_pg "$BIN/pg_ctl" -D "$W/$old" -m immediate -w -t 30 stop \
            >/dev/null || die "stop failed"
        # the outage: no primary at all for OUTAGE seconds, on purpose
        sleep "${OUTAGE:-2}"
        t1=$(now)
        as_pg "$BIN/pg_ctl" -D "$W/$new" -w -t 30 promote >/dev/null \
            || die "promote failed"
        T1=$(now)
    fi

    [ "$(in_recovery "$port")" = f ] || die "the new primary is in recovery"

    wait_for 60 "create on the new primary" first_create_after
    t2=$(first_create_after)

    # and then some more, all answered
    n=$(wc -l <"$W/load.log")
    wait_for 30 "load after the failover" answers $((n + 20))

    recover=$(elapsed "$T1" "$t2")
    total=$(awk -v t="$t0" '$1 > t' "$W/load.log" | wc -l)
    bad=$(awk -v t="$t0" '$1 > t && $3 !~ /^2/' "$W/load.log" | wc -l)
    bad_after=$(awk -v t="$t2" '$1 > t && $3 !~ /^2/' "$W/load.log" | wc -l)
    codes=$(awk -v t="$t0" '$1 > t && $3 !~ /^2/ { print $3 }' \
                "$W/load.log" \
            | sort | uniq -c | awk '{ printf "%s%sx%s", s, $1, $2; s = " " }')
    slowest=$(awk -v t="$t0" '$1 > t && $3 !~ /^2/ && $4 > m { m = $4 }
                              END { printf "%.2f", m }' "$W/load.log")

    on_new=$(psql -X -At -d "host=127.0.0.1 port=$port dbname=postgres \
user=postgres" -c "SELECT count(*) FROM sessions WHERE project_id = '$proj'
                   AND created_at > to_timestamp($T1)")

    if [ "$order" = promote ]; then
        log "  promote + stop took $(elapsed "$t0" "$T1") s"
        log "  first create on the new primary $recover s after the old" \
            "one stopped (bound $BOUND s)"
    else
        log "  no primary for $(elapsed "$t0" "$t1") s, promote took" \
            "$(elapsed "$t1" "$T1") s"
        log "  first create on the new primary $recover s after the" \
            "promotion (bound $BOUND s)"
    fi

    log "  answers from the first step on: $total, not 2xx: $bad" \
        "(${codes:-none}), after the first create on the new primary:" \
        "$bad_after"
    log "  the slowest error answer: $slowest s (session_db_timeout 2 s)"
    log "  sessions created on the new primary: $on_new"

    awk -v r="$recover" -v b="$BOUND" 'BEGIN { exit !(r <= b) }' \
        || { log "FAIL: recovery took longer than $BOUND s"; fail=1; }
    [ "$bad_after" -eq 0 ] \
        || { log "FAIL: errors after the recovery"; fail=1; }
    [ "$on_new" -gt 0 ] \
        || { log "FAIL: nothing written on the new primary"; fail=1; }
}

# the first create after $T1 that was answered
first_create_after() {
    awk -v t="$T1" '$1 > t && $2 == "create" && $3 == 201 { print $1; exit }' \
        "$W/load.log" | grep .
}

failover p1 p2 "$P2" promote

# the old primary comes back as a standby of the new one, and fails over
# again, as a crash this time
standby p1 "$P1" "$P2"
wait_for 30 "replication to the standby" standby_has_key "$P1"

failover p2 p1 "$P1" crash

kill "$LOAD_PID"
wait "$LOAD_PID" 2>/dev/null || true
LOAD_PID=

check_log() {
    if grep -E '\[(alert|crit|emerg)\]|exited on signal' "$W/error.log"; then
        log "FAIL: alerts or crashes in the error log"
        fail=1
    else
        log "error log: no [alert], [crit] or worker crash"
    fi

    log "connection errors logged:" \
        "$(grep -c 'session db: cannot connect\|connection lost' \
               "$W/error.log" || true)"
}

check_log


# --- the first host of the list is down: a new nginx, fresh connections

stop_nginx
T3=$(now)
start_nginx
wait_for 20 "create with the first host down" created
log "a new nginx with the first host down: first create answered" \
    "$(elapsed "$T3" "$(now)") s after its start"

check_log

[ "$fail" -eq 0 ] || die "failed"

log "PASS"
