#!/usr/bin/env bash
# "make fuzz-http": whole HTTP requests, mutated from valid ones, against
# nginx with the module and a real PostgreSQL, on 127.0.0.1 only.
#
# A throw-away PostgreSQL (pg_virtualenv), migrated with sessionctl; an
# account on plan "unlimited" with a project and a key, a second project
# and its key (another project's sessions: 403), a deleted key; nginx with
# 2 workers and the module (and a second server with small limits, where
# one request in ten goes); then util/fuzz-http.pl for FUZZ_HTTP_SECONDS,
# which mutates a valid request of every endpoint of docs/api.md (method,
# path, query, headers, body, framing; sent whole, slowly, pipelined,
# cut short, abandoned) and checks every answer (see its head).  Then:
#
#   a create, an upload and a poll still work, each within a second;
#   no [alert], [crit], [emerg] nor "exited on signal" in the error log;
#   the workers are the ones that started (none died);
#   no AddressSanitizer or UBSan report (when the sanitizer build is used).
#
# The sanitizer build of util/asan.sh (build/asan/: nginx and the module
# with ASan + UBSan) is used when it has been configured once (make
# asan, or ASAN_UNIT=0 ASAN_BUILD_ONLY=1 bash util/asan.sh); the module is
# then rebuilt from the current sources first.  Otherwise the stock nginx
# and build/ngx_http_session_module.so.
#
# Environment:
#   FUZZ_HTTP_SECONDS  how long the generator runs (default 180)
#   FUZZ_HTTP_SEED     the PRNG's seed (default: a new one, printed)
#   FUZZ_HTTP_CLIENTS  clients at once, client k seeded with seed + k
#                      (default 2)
#   FUZZ_HTTP_ASAN     1: the sanitizer build (configured if need be),
#                      0: the normal build; default: the sanitizer build
#                      when build/asan/ has one
#   FUZZ_HTTP_OUTAGES  1 (default when the run is 60 s or longer): stop
#                      PostgreSQL while the clients run (by turns "fast"
#                      and "immediate"), 3 s each time, every 30 s; a
#                      request sent or answered within 12 s of an outage
#                      may get a 503 (a JSON error still) or no answer in
#                      time; 0: never
#   FUZZ_HTTP_SCOPE    node (default) or cluster: session_limit_scope,
#                      so that with cluster the key's budget is leased
#                      (and lost with the database in an outage)
#   FUZZ_HTTP_VERBOSE  1: a line per request (endpoint, delivery,
#                      mutations, statuses)
#   FUZZ_HTTP_PORT     nginx's port (default: a free one, from BENCH_PORTS)
#   FUZZ_HTTP_REPLAY   a file of findings/: its bytes (the key replaced
#                      by this run's) sent on one connection to a fresh
#                      stack, the raw answer printed; no fuzzing
#   BENCH_KEEP         keep the scratch directory (it is kept on failure:
#                      error.log, findings/finding-N.req, the raw bytes of
#                      each request that broke a rule)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

SESSIONCTL=$ROOT/build/sessionctl
SECONDS_RUN=${FUZZ_HTTP_SECONDS:-180}
SEED=${FUZZ_HTTP_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
OUTAGES=${FUZZ_HTTP_OUTAGES:-$([ "$SECONDS_RUN" -ge 60 ] && echo 1 || echo 0)}
SCOPE=${FUZZ_HTTP_SCOPE:-node}
case $SCOPE in
    node|cluster) ;;
    *) echo "fuzz-http: FUZZ_HTTP_SCOPE is node or cluster" >&2; exit 1 ;;
esac
ASAN_DIR=$ROOT/build/asan

W=
NGINX_UP=

die() {
    echo "fuzz-http.sh: $*" >&2
    exit 1
}

log() {
    echo "fuzz-http.sh: $*" >&2
}

# nginx_conf_head, pg_virtualenv_conninfo, scratch_cleanup, free_port,
# json_field, ctl, start_nginx, nginx_down
# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

workers() {
    pgrep -P "$(cat "$W/nginx.pid")" | sort | paste -sd' '
}

pg() {
    pg_ctlcluster "$PGVERSION" regress "$@"
}

# While the clients run: PostgreSQL stopped for 3 s every 30 s, until 25 s
# before their end.  $W/outage exists from just before a stop to 12 s
# after the server is back (more than session_db_timeout, 10 s here, so
# that what waited through the outage has been answered); the number of
# outages goes to $W/outages.
outages() {
    local n=0 mode end=$((SECONDS + SECONDS_RUN - 25))

    sleep 15
    while [ "$SECONDS" -lt "$end" ]; do
        n=$((n + 1))
        mode=$([ $((n % 2)) -eq 1 ] && echo fast || echo immediate)
        touch "$W/outage"
        log "outage $n: PostgreSQL stops ($mode)"
        pg stop -m "$mode"
        sleep 3
        pg start
        log "outage $n: PostgreSQL is back"
        echo "$n" > "$W/outages"
        sleep 12
        rm -f "$W/outage"
        sleep 15
    done
}


inside() {
    local account project project2 gone_id rc=0 before after reports
    local outages_pid

    NGINX=$FZ_NGINX
    MODULE=$FZ_MODULE
    DB=$(pg_virtualenv_conninfo)
    W=$(mktemp -d /tmp/fuzz-http.XXXXXX)
    trap scratch_cleanup EXIT
    PORT=${FUZZ_HTTP_PORT:-$(free_port)}
    PORT2=$(free_port)
    while [ "$PORT2" = "$PORT" ]; do PORT2=$(free_port); done
    mkdir -p "$W/findings" "$W/reports"
    # nginx's workers (nobody, when started as root) keep request bodies
    # in $W/body
    chmod 755 "$W"

    "$SESSIONCTL" -d "$DB" migrate > /dev/null || die "migrate failed"
    account=$(ctl account create fuzz --plan unlimited | json_field account_id)
    project=$(ctl project create "$account" fuzz | json_field project_id)
    project2=$(ctl project create "$account" fuzz2 | json_field project_id)
    KEY=$(ctl key create "$project" | json_field key)
    KEY2=$(ctl key create "$project2" | json_field key)
    ctl key create "$project" > "$W/gone.json"
    GONE=$(json_field key < "$W/gone.json")
    gone_id=$(json_field key_id < "$W/gone.json")
    ctl key delete "$gone_id" > /dev/null

    {
        nginx_conf_head "$MODULE" 2
        cat <<EOF
    session_db_timeout 10s;
    session_limit_scope $SCOPE;
    session_auth_cache_ttl 60s;
    session_image_max_size 256k;
    session_image_chunk_size 4k;
    session_poll_timeout 1s;
    session_poll_max_timeout 3s;
    session_webhook_allow_private on;
    session_webhook_timeout 1s;
    session_webhook_max_attempts 2;
    client_header_timeout 5s;
    client_body_timeout 5s;

    server {
        listen 127.0.0.1:$PORT;

        location = /ok {
            return 200;
        }

        # where the webhooks of the fuzzed sessions go
        location /hook/ {
            return 204;
        }

        # every other path is the API's, so that every answer is its
        location / {
            session_api;
            session_limits create=1000000000 list=1000000000
                           other=1000000000;
        }
    }

    # the same API with small limits (the key's counters are the same):
    # one request in ten comes here and gets 429 once they are reached
    server {
        listen 127.0.0.1:$PORT2;

        location / {
            session_api;
            session_limits create=20 list=40 other=40;
        }
    }
}
EOF
    } > "$W/nginx.conf"

    if [ -n "$ASAN" ]; then
        export ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0:abort_on_error=1:log_path=$W/reports/asan
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$W/reports/ubsan:suppressions=$ROOT/util/asan-ubsan.supp
    fi
    START_WAIT=200 start_nginx
    before=$(workers)
    log "nginx ($NGINX_KIND) on 127.0.0.1:$PORT, workers $before;" \
        "PostgreSQL $PGVERSION on port $PGPORT; seed $SEED, $SECONDS_RUN s;" \
        "limit scope $SCOPE"

    if [ -n "${FUZZ_HTTP_REPLAY:-}" ]; then
        perl "$ROOT/util/fuzz-http.pl" --port "$PORT" --key "$KEY" \
            --replay "$FUZZ_HTTP_REPLAY"
        grep -E '\[(alert|crit|emerg)\]|exited on signal' "$W/error.log" \
            || true
        return
    fi

    outages_pid=
    if [ "$OUTAGES" = 1 ]; then
        outages &
        outages_pid=$!
    fi

    perl "$ROOT/util/fuzz-http.pl" --port "$PORT" --seed "$SEED" \
        --seconds "$SECONDS_RUN" --key "$KEY" --key2 "$KEY2" \
        --gone "$GONE" --error-log "$W/error.log" \
        --findings "$W/findings" --clients "${FUZZ_HTTP_CLIENTS:-2}" \
        --port2 "$PORT2" ${outages_pid:+--outage "$W/outage"} \
        ${FUZZ_HTTP_VERBOSE:+--verbose} || rc=1

    if [ -n "$outages_pid" ]; then
        wait "$outages_pid" || { log "the outages failed"; rc=1; }
        pg status > /dev/null || { log "PostgreSQL is not running"; rc=1; }
        log "PostgreSQL was stopped $(cat "$W/outages" 2>/dev/null \
              || echo 0) times"
    fi

    # nginx answers within a second
    curl -s -m 1 -o /dev/null "http://127.0.0.1:$PORT/ok" \
        || { log "nginx does not answer within a second"; rc=1; }
    after=$(workers)
    if [ "$before" != "$after" ]; then
        log "workers changed: $before at the start, $after at the end"
        rc=1
    fi
    reports=$(grep -l -E 'ERROR: AddressSanitizer|runtime error:' \
                  "$W"/reports/* 2>/dev/null | wc -l || true)
    if [ "$reports" -ne 0 ]; then
        log "$reports sanitizer reports:"
        grep -h -E -A12 'ERROR: AddressSanitizer|runtime error:' \
            "$W"/reports/* | head -60 >&2
        rc=1
    fi
    echo "fuzz-http: nginx $NGINX_KIND, workers unchanged: $(
          [ "$before" = "$after" ] && echo yes || echo no)," \
         "sanitizer reports: $reports"

    if [ "$rc" -ne 0 ]; then
        log "FAILED (seed $SEED; FUZZ_HTTP_SEED=$SEED make fuzz-http" \
            "repeats it; the requests are in $W/findings)"
        exit 1
    fi
    echo "fuzz-http: PASS"
}


if [ "${1:-}" = "--inside-pg-virtualenv" ]; then
    inside
    exit
fi

[ -x "$SESSIONCTL" ] || die "no $SESSIONCTL: make build first"

use_asan=${FUZZ_HTTP_ASAN:-}
if [ -z "$use_asan" ]; then
    use_asan=0
    [ -f "$ASAN_DIR/nginx/objs/Makefile" ] && use_asan=1
fi
if [ "$use_asan" = 1 ]; then
    log "the sanitizer build: nginx and the module (build/asan/)"
    ASAN_UNIT=0 ASAN_BUILD_ONLY=1 bash "$ROOT/util/asan.sh" >&2 \
        || die "the sanitizer build failed"
    FZ_NGINX=$ASAN_DIR/nginx/objs/nginx
    FZ_MODULE=$ASAN_DIR/ngx_http_session_module.so
    export ASAN=1 NGINX_KIND="ASan + UBSan build"
else
    FZ_NGINX=${FUZZ_HTTP_NGINX:-/usr/sbin/nginx}
    FZ_MODULE=${SESSION_MODULE:-$ROOT/build/ngx_http_session_module.so}
    export ASAN='' NGINX_KIND="$FZ_NGINX, no sanitizer"
    [ -f "$FZ_MODULE" ] || die "no $FZ_MODULE: make build first"
fi
# not NGINX in the environment: nginx reads that as inherited sockets
export SEED SECONDS_RUN OUTAGES FZ_NGINX FZ_MODULE

pg_env_clear
PGPORT=$(free_port) || die "no free port for PostgreSQL"
export PGPORT
exec pg_virtualenv -t -- bash "$ROOT/util/fuzz-http.sh" --inside-pg-virtualenv
