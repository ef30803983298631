#!/usr/bin/env bash
# Memory of a waiting long poll on each protocol: N polls wait
# on one session over plain HTTP/1.1, HTTP/1.1 over TLS, HTTP/2 (100
# streams a connection) and HTTP/3 (100 streams a connection, where nginx
# has HTTP/3), and the workers' growth of VmRSS from an idle nginx,
# warmed up on that protocol, to all N waiting (the parked ones parked),
# divided by N, as util/bench-poll.sh takes it.  Not part of make test.
#
#   bash util/bench-poll-proto.sh           a throw-away PostgreSQL
#   BENCH_NGINX=build/upstream-1.30.4/nginx/objs/nginx \
#   BENCH_MODULE=build/upstream-1.30.4/ngx_http_session_module.so \
#       bash util/bench-poll-proto.sh       an nginx built from source
#
# Clients (from Debian's packages): curl -Z (one process per 250
# HTTP/1.1 connections, one HTTP/2 connection per process), and ngtcp2's
# gtlsclient with t/lib/h3-headers.c (one HTTP/3 connection per process).
#
# Environment:
#   BENCH_PROTO_N       waiting polls (default 1000; a multiple of 250)
#   BENCH_PROTOS        default "h1 h1-tls h2 h3 tls-idle" (h3 only where
#                       nginx has HTTP/3; tls-idle: no poll, N idle
#                       keepalive TLS connections after one request each,
#                       what TLS alone costs nginx)
#   BENCH_PROTO_ROUNDS  rounds, each figure the median (default 3)
#   BENCH_POLL_PARK     "off": session_poll_park off
#   BENCH_PROTO_PORT    the first of the 2 ports nginx listens on
#                       (default: a free one)
#   BENCH_KEEP          keep the scratch directory
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
MODULE=${BENCH_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl

N=${BENCH_PROTO_N:-1000}
PROTOS=${BENCH_PROTOS:-h1 h1-tls h2 h3 tls-idle}
ROUNDS=${BENCH_PROTO_ROUNDS:-3}

die() {
    echo "bench-poll-proto.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-poll-proto.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

W=
DB=
PORT=
NGINX_UP=
CLIENTS=()


http3() {
    "$NGINX" -V 2>&1 | grep -q -- --with-http_v3_module
}

conf() {
    local listen

    if [ "$($NGINX -v 2>&1 | perl -ne \
             '/(\d+)\.(\d+)\.(\d+)/ and print $1 * 1e6 + $2 * 1e3 + $3')" \
         -ge 1025001 ]
    then
        listen="listen 127.0.0.1:$((PORT + 1)) ssl; http2 on;"
    else
        listen="listen 127.0.0.1:$((PORT + 1)) ssl http2;"
    fi

    if http3; then
        listen="$listen listen 127.0.0.1:$((PORT + 1)) quic reuseport;"
        listen="$listen http3 on;"
    fi

    {
        nginx_conf_head "$MODULE" 1 | sed 's/worker_connections 4096/worker_connections 8192/'
        cat <<EOF
    session_poll_max_timeout 120s;
    session_poll_park ${BENCH_POLL_PARK:-on};
    server {
        listen 127.0.0.1:$PORT backlog=4096;
        location = /ok { return 204; }
        location = /status { session_status; }
        location /api/ {
            session_api;
            session_limits create=100000000 list=100000000
                           other=100000000;
        }
    }
    server {
        $listen
        ssl_certificate $W/cert.pem;
        ssl_certificate_key $W/key.pem;
        keepalive_timeout 300s;
        location = /ok { return 204; }
        location /api/ {
            session_api;
            session_limits create=100000000 list=100000000
                           other=100000000;
        }
    }
}
EOF
    } > "$W/nginx.conf"
}

# waiting and parked polls
long_poll() {
    curl -s "http://127.0.0.1:$PORT/status" | perl -MJSON::PP -e '
        local $/; my $l = JSON::PP->new->decode(<STDIN>)->{long_poll};
        print "$l->{waiting} $l->{parked}\n"'
}

# clients PROTO COUNT URL_PATH: COUNT polls of PROTO, in the background
clients() {
    local proto=$1 count=$2 path=$3 per i j args url

    case $proto in
        h1) per=250; url="http://127.0.0.1:$PORT$path" ;;
        h1-tls) per=250; url="https://127.0.0.1:$((PORT + 1))$path" ;;
        h2|h3) per=100; url="https://127.0.0.1:$((PORT + 1))$path" ;;
    esac

    if [ "$proto" = tls-idle ]; then
        # one request each, then the connections stay open
        python3 -c '
import socket, ssl, sys, time
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
held = []
for i in range(int(sys.argv[2])):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))))
    s.sendall(b"GET /ok HTTP/1.1\r\nHost: b\r\n\r\n")
    s.recv(4096)
    held.append(s)
open(sys.argv[3], "w").close()
time.sleep(300)
' "$((PORT + 1))" "$count" "$W/idle-ready" >/dev/null 2>&1 &
        CLIENTS+=($!)
        return
    fi

    for ((i = 0; i < count; i += per)); do
        if [ "$proto" = h3 ]; then
            H3_HEADERS="authorization: Bearer $KEY" \
            LD_PRELOAD=$W/h3-headers.so \
                gtlsclient -q --timeout=150s --exit-on-all-streams-close \
                    -n "$per" 127.0.0.1 "$((PORT + 1))" "$url" \
                    >/dev/null 2>&1 &
        else
            args=()
            for ((j = 0; j < per; j++)); do
                [ "$j" -eq 0 ] || args+=(--next)
                args+=(-s -k -o /dev/null
                       "$([ "$proto" = h2 ] && echo --http2 || echo --http1.1)"
                       -H "Authorization: Bearer $KEY" "$url")
            done
            curl -Z --parallel-max "$per" --max-time 150 "${args[@]}" \
                >/dev/null 2>&1 &
        fi
        CLIENTS+=($!)
    done
}

clients_stop() {
    local pid
    for pid in "${CLIENTS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    CLIENTS=()
}

# run PROTO: one round; prints the kB per waiting poll
run() {
    local proto=$1 sid base ready t0

    conf
    start_nginx

    sid=$(curl -s -X POST -H "Authorization: Bearer $KEY" \
              -H 'Content-Type: application/json' \
              -d '{"delivery_mode": "long_poll"}' \
              "http://127.0.0.1:$PORT/api/v1/sessions" | json_field id)

    # warmed up on the protocol: its first connections' allocations
    # (TLS contexts, session cache, HTTP/2 state) are not the polls'
    rm -f "$W/idle-ready"
    clients "$proto" "$([ "$proto" = h2 ] || [ "$proto" = h3 ] \
                         && echo 100 || echo 250)" \
        "/api/v1/sessions/$sid/poll?timeout=1"
    if [ "$proto" = tls-idle ]; then
        for _ in $(seq 300); do
            [ -f "$W/idle-ready" ] && break
            sleep 0.1
        done
        clients_stop
    fi
    for pid in "${CLIENTS[@]}"; do wait "$pid" || true; done
    CLIENTS=()
    sleep 1

    base=$(workers_rss)

    clients "$proto" "$N" "/api/v1/sessions/$sid/poll?timeout=100"

    # every poll waits and, unless it has been 5 s since they all did, is
    # parked; then a second for what a burst frees
    t0=
    rm -f "$W/idle-ready"
    for _ in $(seq 600); do
        if [ "$proto" = tls-idle ]; then
            [ -f "$W/idle-ready" ] && { w=$N; p=0; break; }
            sleep 0.1
            continue
        fi
        read -r w p < <(long_poll)
        if [ "${w:-0}" -ge "$N" ]; then
            [ -n "$t0" ] || t0=$(date +%s)
            [ "${p:-0}" -ge "$N" ] && break
            [ $(( $(date +%s) - t0 )) -ge 5 ] && break
        fi
        sleep 0.1
    done
    [ "${w:-0}" -ge "$N" ] || die "$proto: only ${w:-0} of $N polls wait"
    sleep 1
    ready=$(workers_rss)
    [ "$proto" = tls-idle ] || read -r w p < <(long_poll)

    clients_stop
    stop_nginx

    awk -v b="$base" -v r="$ready" -v n="$N" -v p="$p" \
        'BEGIN { printf "%.2f %d\n", (r - b) / n, p }'
}

inside() {
    W=$(mktemp -d /tmp/ngx-session-bench-proto.XXXXXX)
    mkdir -p "$W/logs"
    trap 'clients_stop; scratch_cleanup' EXIT
    if [ -n "${BENCH_PROTO_PORT:-}" ]; then
        PORT=$BENCH_PROTO_PORT
    else
        PORT=$(free_port) || die "no free port"
    fi

    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -nodes -days 2 -subj /CN=localhost -keyout "$W/key.pem" \
        -out "$W/cert.pem" 2>/dev/null || die "openssl req failed"

    if http3; then
        cc -O2 -Wall -Wextra -shared -fPIC -o "$W/h3-headers.so" \
            "$ROOT/t/lib/h3-headers.c" -ldl \
            || die "cannot build t/lib/h3-headers.c (libnghttp3-dev)"
        command -v gtlsclient >/dev/null || die "no gtlsclient (ngtcp2-client)"
    fi

    "$SESSIONCTL" -d "$DB" migrate >/dev/null

    local a p k proto r figs parked
    a=$(ctl account create bench-proto --plan unlimited | json_field account_id)
    p=$(ctl project create "$a" bench-proto | json_field project_id)
    k=$(ctl key create "$p" | json_field key)
    ACCOUNT=$a PROJECT=$p KEY=$k

    echo "| protocol | waiting polls | parked | KB per waiting poll (rounds) |"
    echo "|---|---|---|---|"
    for proto in $PROTOS; do
        if [ "$proto" = h3 ] && ! http3; then
            log "h3: $NGINX has no HTTP/3, skipped"
            continue
        fi
        figs=()
        for ((r = 0; r < ROUNDS; r++)); do
            run "$proto" > "$W/fig"
            read -r kb parked < "$W/fig"
            figs+=("$kb")
            log "$proto round $((r + 1)): $kb kB per poll, $parked parked"
        done
        printf '| %s | %s | %s | %s (%s) |\n' "$proto" "$N" "$parked" \
            "$(printf '%s\n' "${figs[@]}" | median)" "${figs[*]}"
    done

    delete_rows "$PROJECT" "$ACCOUNT"
}


if [ "${1:-}" = --inside-pg-virtualenv ]; then
    DB=$(pg_virtualenv_conninfo)
    pg_cluster_up
    inside
    exit $?
fi

[ -f "$MODULE" ] || die "$MODULE not built (run make)"

pg_env_clear
export LC_ALL=C

pg_cluster_tries 3 "" pg_virtualenv -t -- \
    bash "$ROOT/util/bench-poll-proto.sh" --inside-pg-virtualenv
