#!/usr/bin/env bash
# The webhook part of "make bench" (util/bench.sh calls it); on its own:
#
#   bash util/bench-webhook.sh             a throw-away PostgreSQL
#   BENCH_SESSION_DB="host=... dbname=..." bash util/bench-webhook.sh
#
# The receiver is a second nginx on 127.0.0.1 answering every request
# with "return 204" and logging $msec and the webhook-id header.  The
# nginx under test has BENCH_WORKERS (2) workers and the module's
# defaults (session_webhook_concurrency 64).
#
# 1. Throughput: BENCH_WEBHOOK_EVENTS (10000) events queued by one INSERT
#    while nginx is idle (its trigger's NOTIFY wakes the workers); from
#    the moment that INSERT returned to the moment the database holds
#    every event as delivered (delivered_at of the last one).  Each
#    round checks that the receiver got every event exactly once and
#    that every row took one attempt.  Median of BENCH_WEBHOOK_ROUNDS (3).
# 2. Latency on an idle server: BENCH_WEBHOOK_UPLOADS (200) image uploads
#    through the API, one at a time, BENCH_WEBHOOK_SPACING (0.05) s
#    apart, each into its own webhook session; for each image.uploaded
#    event, the receiver's $msec (written once its 204 is sent) minus
#    the event's created_at (the start of the upload's transaction, so
#    a little before its commit: the figure errs high).  p50, p99, max.
#
# Prints a Markdown section on stdout (BENCH_WEBHOOK_OUT: to that file),
# progress on stderr.  Loopback only; ports from free_port unless
# BENCH_WEBHOOK_PORT and BENCH_WEBHOOK_RECEIVER_PORT are given; every row
# it adds is deleted at the end.  BENCH_KEEP keeps the scratch directory.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
MODULE=${SESSION_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl
DB=${BENCH_SESSION_DB:-}

WORKERS=${BENCH_WORKERS:-2}
EVENTS=${BENCH_WEBHOOK_EVENTS:-10000}
ROUNDS=${BENCH_WEBHOOK_ROUNDS:-3}
UPLOADS=${BENCH_WEBHOOK_UPLOADS:-200}
SPACING=${BENCH_WEBHOOK_SPACING:-0.05}
RECEIVER_WORKERS=${BENCH_WEBHOOK_RECEIVER_WORKERS:-1}
# session_webhook_concurrency, when not the module's default
CONCURRENCY=${BENCH_WEBHOOK_CONCURRENCY:-}
OUT=${BENCH_WEBHOOK_OUT:--}

die() {
    echo "bench-webhook.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-webhook.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

[ -f "$MODULE" ] && [ -x "$SESSIONCTL" ] || die "run make first"
command -v curl >/dev/null 2>&1 || die "curl not found"


# without a database: the same script inside a throw-away cluster, as
# util/bench.sh does (fsync on: commits cost what they cost)
if [ -z "$DB" ] && [ "${1:-}" != --inside-pg-virtualenv ]; then
    pg_cluster_report "$OUT" BENCH_WEBHOOK_OUT "$ROOT/util/bench-webhook.sh" \
        -o fsync=on
    exit $?
fi

if [ -z "$DB" ]; then
    DB=$(pg_virtualenv_conninfo)
fi

W=$(mktemp -d /tmp/ngx-session-bench-webhook.XXXXXX)
chmod 755 "$W"
R=$W/receiver
PORT=
RPORT=
ACCOUNT=
PROJECT=
NGINX_UP=

cleanup() {
    local rc=$?

    nginx_down

    if [ -f "$R/nginx.pid" ]; then
        "$NGINX" -p "$R/" -c "$R/nginx.conf" -s stop 2>/dev/null || true
    fi

    if [ -n "$PROJECT" ]; then
        delete_rows "$PROJECT" "$ACCOUNT"
    fi

    if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
        echo "bench-webhook.sh: kept $W (nginx.conf, error.log)" >&2
    else
        rm -rf "$W"
    fi

    exit "$rc"
}

trap cleanup EXIT


# --- the receiver and nginx ---------------------------------------------

receiver_start() {
    mkdir -p "$R"
    cat > "$R/nginx.conf" <<EOF
worker_processes $RECEIVER_WORKERS;
master_process on;
daemon on;
pid $R/nginx.pid;
error_log $R/error.log warn;

events {
    worker_connections 4096;
}

http {
$(W=$R nginx_temp_paths)

    log_format hook '\$msec \$http_webhook_id \$request_uri';
    access_log $R/access.log hook;
    keepalive_requests 1000000;

    server {
        listen 127.0.0.1:$RPORT backlog=4096;

        location / {
            return 204;
        }
    }
}
EOF
    nginx_start "$R" "http://127.0.0.1:$RPORT/" "the receiver"
}

write_conf() {
    cat > "$W/nginx.conf" <<EOF
$(nginx_conf_head "$W/ngx_http_session_module.so" "$WORKERS")
    session_limit_zone bench_webhook:10m;
    session_webhook_allow_private on;
    ${CONCURRENCY:+session_webhook_concurrency $CONCURRENCY;}

    server {
        listen 127.0.0.1:$PORT;

        location = /ok {
            return 200;
        }

        location = /status {
            session_status;
        }

        location /api/ {
            session_api;
            session_limits create=1000000000 list=1000000000
                           other=1000000000;
        }
    }
}
EOF
}

# now, Unix time with microseconds
now() {
    date +%s.%6N
}

pending() {
    sql "SELECT count(*) FROM webhook_outbox
          WHERE project_id = '$PROJECT' AND delivered_at IS NULL"
}


# --- 1. throughput ---------------------------------------------------------

declare -a RATES CPU_SEND CPU_RECV CPU_PG COMMITS

# statements the nginx under test has had answered so far (session_status)
commits() {
    curl -s "http://127.0.0.1:$PORT/status?format=json" | perl -MJSON::PP \
        -e 'local $/; print JSON::PP->new->decode(<STDIN>)->{database}{queries}'
}

# CPU time (clock ticks) of the children of process $1
children_ticks() {
    local pid sum=0 t
    for pid in $(pgrep -P "$1"); do
        t=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null \
            || echo 0)
        sum=$((sum + ${t:-0}))
    done
    echo "$sum"
}

# sender workers, receiver workers, PostgreSQL's backends (when local)
ticks() {
    echo "$(children_ticks "$(cat "$W/nginx.pid")")" \
         "$(children_ticks "$(cat "$R/nginx.pid")")" \
         "$( [ -n "$POSTMASTER" ] && children_ticks "$POSTMASTER" \
             || echo 0)"
}

# milliseconds of CPU per 1000 deliveries from two tick counts
per_1000() {
    awk -v a="$1" -v b="$2" -v n="$EVENTS" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.0f", (b - a) * 1000 / hz * 1000 / n }'
}

throughput_round() {
    local round=$1 t0 t1 secs rate got distinct tries s0 r0 p0 s1 r1 p1 x0 x1

    : > "$R/access.log"
    read -r s0 r0 p0 < <(ticks)
    x0=$(commits)

    # one statement, one commit, one NOTIFY; a payload of the size of a
    # session.completed event, with the event's id as the body's
    sql "INSERT INTO webhook_outbox (id, project_id, session_id,
                                     event_type, url, payload)
         SELECT u, '$PROJECT', '$SID', 'session.completed',
                'http://127.0.0.1:$RPORT/bench/$round',
                json_build_object('id', u, 'type', 'session.completed',
                    'created_at', '2026-11-25T09:00:00Z',
                    'data', json_build_object('id', '$SID',
                        'project_id', '$PROJECT',
                        'delivery_mode', 'webhook',
                        'webhook_url', 'http://127.0.0.1:$RPORT/bench',
                        'status', 'completed', 'image_count', 3,
                        'acknowledged_count', 0,
                        'created_at', '2026-11-25T08:59:00Z',
                        'expires_at', '2026-11-25T09:59:00Z',
                        'completed_at', '2026-11-25T09:00:00Z'))::text
           FROM (SELECT gen_random_uuid() u
                   FROM generate_series(1, $EVENTS)) g" >/dev/null
    t0=$(now)

    tries=0
    while [ "$(pending)" != 0 ]; do
        tries=$((tries + 1))
        [ "$tries" -lt 1200 ] || die "round $round: not delivered in 120 s"
        sleep 0.1
    done

    read -r s1 r1 p1 < <(ticks)
    x1=$(commits)
    t1=$(sql "SELECT extract(epoch FROM max(delivered_at))
                FROM webhook_outbox WHERE project_id = '$PROJECT'")
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    rate=$(awk -v n="$EVENTS" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')

    # every event once at the receiver, one attempt each
    sleep 0.2
    got=$(grep -c " /bench/$round\$" "$R/access.log" || true)
    distinct=$(awk -v p="/bench/$round" '$3 == p { print $2 }' \
                   "$R/access.log" | sort -u | wc -l)
    [ "$got" = "$EVENTS" ] && [ "$distinct" = "$EVENTS" ] \
        || die "round $round: the receiver got $got requests," \
               "$distinct distinct events, for $EVENTS"
    [ "$(sql "SELECT count(*) FROM webhook_outbox
               WHERE project_id = '$PROJECT' AND attempts <> 1")" = 0 ] \
        || die "round $round: events with more than one attempt"

    CPU_SEND+=("$(per_1000 "$s0" "$s1")")
    CPU_RECV+=("$(per_1000 "$r0" "$r1")")
    CPU_PG+=("$(per_1000 "$p0" "$p1")")
    COMMITS+=("$(( (x1 - x0) * 1000 / EVENTS ))")

    log "round $round: $EVENTS events in $secs s: $rate deliveries/s;" \
        "CPU ms per 1000: sender ${CPU_SEND[-1]}, receiver ${CPU_RECV[-1]}," \
        "PostgreSQL ${CPU_PG[-1]}; ${COMMITS[-1]} statements per 1000"
    RATES+=("$rate")

    sql "DELETE FROM webhook_outbox WHERE project_id = '$PROJECT'" >/dev/null
    sql "VACUUM webhook_outbox" >/dev/null
}


# --- 2. latency --------------------------------------------------------------

P50=
P99=
PMAX=
LAT_N=

latency() {
    local i sid code

    printf '\x89PNG\r\n\x1a\n' > "$W/img.png"
    head -c 1000 /dev/urandom >> "$W/img.png"

    : > "$W/sids"
    for i in $(seq "$UPLOADS"); do
        curl -s -X POST -H "Authorization: Bearer $KEY" \
             -H 'Content-Type: application/json' \
             -d "{\"delivery_mode\": \"webhook\", \"webhook_url\":
                  \"http://127.0.0.1:$RPORT/latency/$i\"}" \
             "http://127.0.0.1:$PORT/api/v1/sessions" | json_field id \
             >> "$W/sids"
        echo >> "$W/sids"
    done

    : > "$R/access.log"

    while read -r sid; do
        code=$(curl -s -o /dev/null -w '%{http_code}' -X POST \
                    -H "Authorization: Bearer $KEY" \
                    -H 'Content-Type: image/png' \
                    --data-binary @"$W/img.png" \
                    "http://127.0.0.1:$PORT/api/v1/sessions/$sid/images")
        [ "$code" = 201 ] || die "upload: $code"
        sleep "$SPACING"
    done < "$W/sids"

    local tries=0
    while [ "$(pending)" != 0 ]; do
        tries=$((tries + 1))
        [ "$tries" -lt 100 ] || die "latency: not delivered in 10 s"
        sleep 0.1
    done

    sleep 0.2

    sql "SELECT id, extract(epoch FROM created_at) FROM webhook_outbox
          WHERE project_id = '$PROJECT'
            AND event_type = 'image.uploaded'" \
        | tr '|' ' ' > "$W/created"

    # milliseconds from the event's transaction to the receiver's answer
    awk 'NR == FNR { c[$1] = $2; next }
         $3 ~ /^\/latency\// && ($2 in c) {
             printf "%.3f\n", ($1 - c[$2]) * 1000 }' \
        "$W/created" "$R/access.log" | sort -g > "$W/latency"

    LAT_N=$(wc -l < "$W/latency")
    [ "$LAT_N" = "$UPLOADS" ] \
        || die "latency: $LAT_N of $UPLOADS events matched at the receiver"

    P50=$(awk -v n="$LAT_N" 'NR == int((n + 1) * 0.50) { print }' \
              "$W/latency")
    P99=$(awk -v n="$LAT_N" 'NR == int(n * 0.99 + 0.5) { print }' \
              "$W/latency")
    PMAX=$(tail -1 "$W/latency")

    log "latency over $LAT_N events: p50 $P50 ms, p99 $P99 ms, max $PMAX ms"
}


# --- run -------------------------------------------------------------------

"$SESSIONCTL" -d "$DB" migrate >/dev/null || die "sessionctl migrate failed"

cp "$MODULE" "$W/ngx_http_session_module.so"
PORT=${BENCH_WEBHOOK_PORT:-$(free_port)} || die "no free port"
RPORT=${BENCH_WEBHOOK_RECEIVER_PORT:-$(free_port)} || die "no free port"

ACCOUNT=$(ctl account create "bench-webhook-$$" --plan unlimited \
              | json_field account_id)
PROJECT=$(ctl project create "$ACCOUNT" "bench-webhook-$$" \
              | json_field project_id)
KEY=$(ctl key create "$PROJECT" | json_field key)

receiver_start
write_conf
start_nginx

SID=$(curl -s -X POST -H "Authorization: Bearer $KEY" \
           -H 'Content-Type: application/json' \
           -d "{\"delivery_mode\": \"webhook\", \"webhook_url\":
                \"http://127.0.0.1:$RPORT/bench\"}" \
           "http://127.0.0.1:$PORT/api/v1/sessions" | json_field id)

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# the postmaster, when PostgreSQL runs here and its files can be read
POSTMASTER=$(head -1 "$(sql 'SHOW data_directory')/postmaster.pid" \
                 2>/dev/null || true)
[ -n "$POSTMASTER" ] && [ -d "/proc/$POSTMASTER" ] || POSTMASTER=

log "throughput: $ROUNDS rounds of $EVENTS queued events, $WORKERS workers"
for round in $(seq "$ROUNDS"); do
    throughput_round "$round"
done

log "latency: $UPLOADS uploads, $SPACING s apart"
latency

grep -E '\[(alert|crit|emerg)\]|signal [0-9]' "$W/error.log" >&2 \
    && die "the error log has alerts (above)"

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
RATE=$(printf '%s\n' "${RATES[@]}" | median)

report() {
    echo "## Webhook delivery"
    echo
    echo "\`util/bench-webhook.sh\`: nginx with $WORKERS workers"
    echo "(\`session_webhook_concurrency\` 64, its default) sends to a second"
    echo "nginx on 127.0.0.1 (\`return 204\`, $RECEIVER_WORKERS worker);"
    echo "PostgreSQL with \`fsync=on\` on the same machine. Load average"
    echo "$LOAD_BEFORE before, $LOAD_AFTER after."
    echo
    echo "| figure | measured | goal |"
    echo "|---|---:|---|"
    printf '| deliveries/s, %s events queued by one INSERT (median of %s: %s) | %s | ≥ 5000: %s |\n' \
        "$EVENTS" "$ROUNDS" "$(echo "${RATES[*]}" | sed 's/ /, /g')" \
        "$RATE" "$(goal "$RATE" 5000)"
    printf '| CPU per 1000 deliveries (median): nginx sender workers | %s ms | |\n' \
        "$(printf '%s\n' "${CPU_SEND[@]}" | median)"
    printf '| CPU per 1000 deliveries: receiver nginx | %s ms | |\n' \
        "$(printf '%s\n' "${CPU_RECV[@]}" | median)"
    printf '| CPU per 1000 deliveries: PostgreSQL backends | %s ms | |\n' \
        "$(printf '%s\n' "${CPU_PG[@]}" | median)"
    printf '| statements per 1000 deliveries (claims, records, the queue measurement; median) | %s | |\n' \
        "$(printf '%s\n' "${COMMITS[@]}" | median)"
    printf '| latency p50, transaction of the upload to the receiver'"'"'s 204 (%s uploads %s s apart) | %s ms | |\n' \
        "$LAT_N" "$SPACING" "$P50"
    printf '| latency p99 (max %s ms) | %s ms | < 20 ms: %s |\n' \
        "$PMAX" "$P99" \
        "$(awk -v v="$P99" 'BEGIN { print (v < 20) ? "met" : "NOT met" }')"
}

if [ "$OUT" = - ]; then
    report
else
    report > "$OUT"
fi
