#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: repeatable
# where wrk's requests/s are not (a shared or busy machine).
#
#   BENCH_SESSION_DB='host=... dbname=...' bash util/bench-ir.sh
#
# One nginx process (master_process off, daemon off) runs under callgrind
# with the locations of util/bench.sh.  For each scenario a client sends
# IR_WARM requests (auth cache, first allocations), the counters are
# zeroed, it sends IR_REQUESTS more on one keep-alive connection, and the
# instructions of that stretch, divided by IR_REQUESTS, are reported: the
# whole user-space work of the worker per request (event loop, parsing,
# the handler, filters, writev), as valgrind counts it (not the kernel's).
#
# session_auth_cache_ttl is 1h here, so that the database is never asked
# inside a measured stretch (with the default 5 s a slow, instrumented
# process would ask it now and then and the figure would wander).
#
# Prints one line per scenario on stdout (with IR_OUT=FILE also to FILE):
#
#     NAME|instructions per request|statuses|limiter
#
# where limiter is the inclusive instructions per request of the module's
# rate-limit code (ngx_http_session_limit_prepare, the check-and-increment
# ngx_http_session_rate_take_locked, ngx_http_session_limit with its
# headers), 0 where it does not run.  Needs valgrind;
# takes about a minute.  The rows it adds to the database are deleted.
#
# Environment: BENCH_SESSION_DB (required), BENCH_NGINX, IR_REQUESTS
# (default 2000), IR_WARM (default 200), IR_KEEP (keep the directory).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
SESSIONCTL=$ROOT/build/sessionctl
N=${IR_REQUESTS:-2000}
WARM=${IR_WARM:-200}
DB=${BENCH_SESSION_DB:-}

die() {
    echo "bench-ir.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-ir.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

[ -n "$DB" ] || die "set BENCH_SESSION_DB"
command -v valgrind >/dev/null 2>&1 || die "valgrind not found"
command -v callgrind_control >/dev/null 2>&1 \
    || die "callgrind_control not found (package valgrind)"
[ -f "$ROOT/build/ngx_http_session_module.so" ] || die "run make first"

W=
VG_PID=
PROJECT=
ACCOUNT=

cleanup() {
    local rc=$?

    if [ -n "$VG_PID" ]; then
        kill -QUIT "$VG_PID" 2>/dev/null || true
        wait "$VG_PID" 2>/dev/null || true
    fi

    if [ -n "$PROJECT" ]; then
        delete_rows "$PROJECT" "$ACCOUNT"
    fi

    if [ -n "$W" ]; then
        if [ "$rc" -ne 0 ] || [ -n "${IR_KEEP:-}" ]; then
            log "kept $W"
        else
            rm -rf "$W"
        fi
    fi

    exit "$rc"
}

"$SESSIONCTL" -d "$DB" migrate >/dev/null || die "sessionctl migrate failed"

W=$(mktemp -d /tmp/ngx-session-bench-ir.XXXXXX)
trap cleanup EXIT
cp "$ROOT/build/ngx_http_session_module.so" "$W/"
PORT=$(free_port) || die "no free port"

ACCOUNT=$(ctl account create "bench-ir-$$" --plan unlimited \
              | json_field account_id)
PROJECT=$(ctl project create "$ACCOUNT" "bench-ir-$$" | json_field project_id)
KEY_ADMIT=$(ctl key create "$PROJECT" | json_field key)
KEY_LIMITED=$(ctl key create "$PROJECT" | json_field key)
KEY_LR=sess_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
KEY_UNKNOWN=sess_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

cat > "$W/nginx.conf" <<EOF
load_module $W/ngx_http_session_module.so;

worker_processes 1;
master_process off;
daemon off;
pid $W/nginx.pid;
error_log $W/error.log warn;

events {
    worker_connections 64;
}

http {
    access_log off;
    keepalive_requests 1000000;

$(nginx_temp_paths)

    session_db $(nginx_quote "$DB");
    session_db_connections 1;
    session_limit_zone bench:10m;
    session_auth_cache_ttl 1h;

$(bench_server)
}
EOF

valgrind --tool=callgrind --callgrind-out-file="$W/callgrind.out" \
         --dump-instr=no --compress-strings=no \
    "$NGINX" -p "$W/" -c "$W/nginx.conf" 2>"$W/valgrind.log" &
VG_PID=$!

for _ in $(seq 300); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/ok" && break
    kill -0 "$VG_PID" 2>/dev/null || { cat "$W/error.log" >&2; die "nginx died"; }
    sleep 0.2
done
curl -s -o /dev/null "http://127.0.0.1:$PORT/ok" || die "nginx does not answer"

# 20 sessions for the list to show; the last one is read by id
SID=
for _ in $(seq 20); do
    SID=$(curl -s -X POST -H "Authorization: Bearer $KEY_ADMIT" \
              -H 'Content-Type: application/json' \
              -d '{"delivery_mode": "long_poll"}' \
              "http://127.0.0.1:$PORT/api/v1/sessions" | json_field id)
done
[ -n "$SID" ] || die "no session was created"

# name|path|authorization[|post or post-key: a create, with a new
# Idempotency-Key each]
SCENARIOS=(
    "return 200 (baseline)|/ok|"
    "401 unknown key (cached)|/api/v1/nope|Bearer $KEY_UNKNOWN"
    "404 valid key (cached), limiter counting|/api/v1/nope|Bearer $KEY_ADMIT"
    "429 session_limits|/sl/x|Bearer $KEY_LIMITED"
    "429 limit_req|/lr/x|Bearer $KEY_LR"
    "200 GET /api/v1/sessions?limit=20 (a database query)|/api/v1/sessions?limit=20|Bearer $KEY_ADMIT"
    "200 GET /api/v1/sessions/{sid} (a database query)|/api/v1/sessions/$SID|Bearer $KEY_ADMIT"
    "201 POST /api/v1/sessions (a database insert)|/api/v1/sessions|Bearer $KEY_ADMIT|post"
    "201 POST /api/v1/sessions with a new Idempotency-Key each|/api/v1/sessions|Bearer $KEY_ADMIT|post-key"
)

dump=0
for s in "${SCENARIOS[@]}"; do
    IFS='|' read -r name path auth kind <<<"$s"

    unset SEND_BODY SEND_IDEM
    case $kind in
    post|post-key)
        export SEND_BODY='{"delivery_mode": "long_poll"}' ;;
    esac
    [ "$kind" != post-key ] || export SEND_IDEM="bench-ir-$$-warm"

    perl "$ROOT/bench/send-requests.pl" "$PORT" "$path" "$WARM" "$auth" \
        >/dev/null || die "warm-up failed ($name)"

    [ "$kind" != post-key ] || export SEND_IDEM="bench-ir-$$"

    callgrind_control -z "$VG_PID" >/dev/null \
        || die "callgrind_control -z failed"
    res=$(perl "$ROOT/bench/send-requests.pl" "$PORT" "$path" "$N" "$auth") \
        || die "requests failed ($name)"
    callgrind_control -d "$VG_PID" >/dev/null \
        || die "callgrind_control -d failed"
    dump=$((dump + 1))

    f=$(ls -t "$W"/callgrind.out.* | head -1)
    ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$f")
    [ -n "$ir" ] || die "no total in $f"

    statuses=$(perl -MJSON::PP -e 'local $/; my $j = decode_json(<STDIN>);
                   print join ", ", map { "$_: $j->{statuses}{$_}" }
                                    sort keys %{$j->{statuses}}' <<<"$res")
    per=$(awk -v ir="$ir" -v n="$N" 'BEGIN { printf "%.0f", ir / n }')

    # inclusive cost of a function: the cost line after each "calls=" line
    # of a call to it
    lim=$(awk -v n="$N" '
        /^cfn=/ { f = substr($0, 5); next }
        /^calls=/ { want = (f == "ngx_http_session_limit" \
                            || f == "ngx_http_session_limit_prepare" \
                            || f == "ngx_http_session_rate_take_locked");
                    next }
        want && /^[0-9+*-]/ { sum += $2; want = 0 }
        END { printf "%.0f", sum / n }' "$f")

    log "$name: $per instructions/request ($statuses), limiter $lim"
    echo "$name|$per|$statuses|$lim"
    if [ -n "${IR_OUT:-}" ]; then
        echo "$name|$per|$statuses|$lim" >> "$IR_OUT"
    fi
done

grep -E '\[(alert|crit|emerg)\]' "$W/error.log" >&2 \
    && die "the error log has alerts (above)"

exit 0
