#!/usr/bin/env bash
# Unknown keys against valid ones, on loopback and bounded in time.
#
# bash util/flood.sh: an unknown-key flood beside a steady client (issue
# 14, item 1):
#
#   - a steady client: FLOOD_RATE requests/s (default 100) of
#     GET /api/v1/sessions/{sid} (a database read each) with a valid key,
#     on keep-alive connections, for FLOOD_SECONDS (default 10), once
#     alone and once beside the flood;
#   - the flood: wrk at full speed (FLOOD_CONNECTIONS, default 32), every
#     request with a fresh random well-formed key, from FLOOD_ADDRESSES
#     (default 16, at most 256) client addresses (X-Real-IP through the
#     realip module, as behind a load balancer).
#
# Reports the steady client's rate and answers alone and beside the
# flood, the flood's requests/s, and the key lookups the database got
# per second (statements counted by session_status, less the steady
# client's), against the bound session_auth_fail_limit x addresses / 60.
#
# bash util/flood.sh mixed: one client on one address: wrk
# with FLOOD_CONNECTIONS connections for FLOOD_SECONDS (15 here unless
# given), 1 request in 11 with a fresh random unknown key, the other 10
# with a valid key used once before the run: 4 creates, 2 reads of one
# session, 2 of its image list, 2 of an image's content.  Reports the
# valid key's answers by endpoint (from the access log) and the key
# lookups the database ran (pg_stat_statements).
#
# A throw-away PostgreSQL as util/test.sh makes one.  Not part of make test.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${FLOOD_NGINX:-/usr/sbin/nginx}
MODULE=${FLOOD_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl
MODE=${FLOOD_MODE:-${1:-flood}}
if [ "$MODE" = mixed ]; then
    SECS=${FLOOD_SECONDS:-15}
else
    SECS=${FLOOD_SECONDS:-10}
fi
RATE=${FLOOD_RATE:-100}
CONNS=${FLOOD_CONNECTIONS:-32}
ADDRS=${FLOOD_ADDRESSES:-16}
LIMIT=${FLOOD_FAIL_LIMIT:-100}
WORKERS=${FLOOD_WORKERS:-2}

die() {
    echo "flood.sh: $*" >&2
    exit 1
}

log() {
    echo "flood.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

W=
NGINX_UP=

cleanup() {
    local rc=$?
    nginx_down
    if [ -n "$W" ]; then
        if [ "$rc" -ne 0 ]; then
            echo "flood.sh: kept $W" >&2
        else
            rm -rf "$W"
        fi
    fi
    exit "$rc"
}

# session_status's database statements
queries() {
    curl -s "http://127.0.0.1:$PORT/status" \
        | perl -MJSON::PP -e 'local $/; print JSON::PP->new->decode(<STDIN>)
                                  ->{database}{queries}'
}

# steady SECONDS: FLOOD_RATE requests/s with the valid key; prints
# "sent answered_2xx 503s other seconds"
steady() {
    perl -MHTTP::Tiny -MTime::HiRes=time,sleep -e '
        my ($url, $key, $rate, $secs) = @ARGV;
        my $http = HTTP::Tiny->new(keep_alive => 1, timeout => 5);
        my %h = (Authorization => "Bearer $key");
        my ($n, $ok, $u, $other) = (0, 0, 0, 0);
        my $t0 = time;
        while (time - $t0 < $secs) {
            my $due = $t0 + $n / $rate;
            my $now = time;
            sleep($due - $now) if $due > $now;
            my $r = $http->get($url, { headers => \%h });
            $n++;
            if ($r->{status} =~ /^2/) { $ok++ }
            elsif ($r->{status} == 503) { $u++ }
            else { $other++ }
        }
        printf "%d %d %d %d %.2f\n", $n, $ok, $u, $other, time - $t0;
    ' "http://127.0.0.1:$PORT/api/v1/sessions/$SID" "$KEY" "$RATE" "$SECS"
}

inside() {
    DB=$(pg_virtualenv_conninfo)

    "$SESSIONCTL" -d "$DB" migrate >/dev/null || die "migrate failed"
    sql "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null

    W=$(mktemp -d /tmp/ngx-session-flood.XXXXXX)
    trap cleanup EXIT
    cp "$MODULE" "$W/ngx_http_session_module.so"
    PORT=${FLOOD_PORT:-$(free_port)} || die "no free port"

    local account project
    account=$(ctl account create "flood-$$" --plan unlimited \
                  | json_field account_id)
    project=$(ctl project create "$account" "flood-$$" | json_field project_id)
    KEY=$(ctl key create "$project" | json_field key)
    SID=$(psql -X -q -At -d "$DB" -c "INSERT INTO sessions (project_id,
              delivery_mode, expires_at) VALUES ('$project', 'long_poll',
              now() + interval '1 day') RETURNING id" | head -1)

    cat > "$W/nginx.conf" <<CONF
load_module $W/ngx_http_session_module.so;
worker_processes $WORKERS;
daemon on;
pid $W/nginx.pid;
error_log $W/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    log_format mix '\$request_method \$uri \$status';
$(nginx_temp_paths)
    session_db $(nginx_quote "$DB");
    session_auth_fail_limit $LIMIT;
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;
    server {
        listen 127.0.0.1:$PORT;
        location = /ok { return 200; }
        location = /status { session_status; }
        location /api/ {
            session_api;
            session_limits create=1000000000 list=1000000000
                           other=1000000000;
            $([ "$MODE" != mixed ] \
                  || echo "access_log $W/mix.log mix buffer=64k;")
        }
    }
}
CONF
    start_nginx

    if [ "$MODE" = mixed ]; then
        mixed_run "$project"
    else
        flood_run
    fi
}

flood_run() {
    cat > "$W/flood.lua" <<'LUA'
local hex = "0123456789abcdef"
local naddr = tonumber(os.getenv("FLOOD_ADDRESSES") or "16")
math.randomseed(os.time())
request = function()
    local t = {}
    for i = 1, 32 do
        local k = math.random(16)
        t[i] = hex:sub(k, k)
    end
    local a = "10.0.0." .. math.random(0, naddr - 1)
    return wrk.format("GET", "/api/v1/nope", {
        ["Authorization"] = "Bearer sess_" .. table.concat(t),
        ["X-Real-IP"] = a })
end
LUA

    log "steady client alone: $RATE requests/s for ${SECS}s"
    read -r n0 ok0 u0 o0 s0 < <(steady)

    log "steady client beside the flood (wrk -c$CONNS, $ADDRS addresses)"
    local q0 q1 k0 k1 wout
    q0=$(queries)
    k0=$(key_lookups)
    FLOOD_ADDRESSES=$ADDRS wrk -t1 -c"$CONNS" -d"${SECS}s" -s "$W/flood.lua" \
        "http://127.0.0.1:$PORT/" > "$W/wrk.out" 2>&1 &
    local wpid=$!
    read -r n1 ok1 u1 o1 s1 < <(steady)
    wait "$wpid" || true
    q1=$(queries)
    k1=$(key_lookups)
    wout=$(cat "$W/wrk.out")

    local frps ftotal lookups bound
    frps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$wout")
    ftotal=$(awk '/requests in/ { print $1 }' <<<"$wout")
    # every steady request is one statement; the rest are key lookups
    lookups=$(awk -v q=$((q1 - q0)) -v n="$n1" -v s="$s1" \
                  'BEGIN { printf "%.1f", (q - n) / s }')
    bound=$(awk -v l="$LIMIT" -v a="$ADDRS" -v s="$s1" \
                'BEGIN { printf "%d per minute, %.1f/s if all spent in these %.0f s", l * a, l * a / s, s }')

    cat <<REPORT

flood.sh: nginx $WORKERS workers, session_auth_fail_limit $LIMIT, loopback
  steady client alone        : $(awk -v n="$n0" -v s="$s0" 'BEGIN { printf "%.1f", n / s }') requests/s, $ok0 2xx, $u0 x 503, $o0 other
  steady client beside flood : $(awk -v n="$n1" -v s="$s1" 'BEGIN { printf "%.1f", n / s }') requests/s, $ok1 2xx, $u1 x 503, $o1 other
  ratio                      : $(awk -v a="$n1" -v b="$n0" -v sa="$s1" -v sb="$s0" 'BEGIN { printf "%.2f", (a / sa) / (b / sb) }')
  flood                      : $frps requests/s ($ftotal requests, $ADDRS addresses)
  key lookups in the database: $lookups/s during the flood
                               ($((k1 - k0)) by pg_stat_statements, the steady
                               key's included)
  bound (limit x addresses)  : $bound
                               (plus the steady key's own lookups, one per
                               session_auth_cache_ttl, and the sweep)
REPORT

    if [ "$u1" -ne 0 ]; then
        die "the steady client got $u1 x 503 beside the flood"
    fi
}

# the key lookups PostgreSQL ran (pg_stat_statements)
key_lookups() {
    psql -X -q -At -d "$DB" -c "SELECT coalesce(sum(calls), 0)
        FROM pg_stat_statements WHERE query LIKE '%FROM api_keys k%'"
}

# the answers of a run's access log ("METHOD URI STATUS"), by endpoint
mix_answers() {
    awk '
        { if ($2 ~ /nope$/) e = "unknown key"
          else if ($1 == "POST" && $2 == "/api/v1/sessions") e = "create"
          else if ($1 != "GET") e = "before the run"
          else if ($2 ~ /\/content$/) e = "image content"
          else if ($2 ~ /\/images$/) e = "image list"
          else if ($2 ~ /^\/api\/v1\/sessions\/[^\/]+$/) e = "read"
          else e = "before the run"
          n[e]++
          if ($3 ~ /^2/) ok[e]++
          else if ($3 == 429) lim[e]++
          else if ($3 == 401) inv[e]++
          else other[e]++
          if (e != "unknown key" && e != "before the run") {
              vn++
              if ($3 ~ /^2/) vok++
          } }
        END {
          m = split("create,read,image list,image content,unknown key," \
                    "before the run", order, ",")
          for (i = 1; i <= m; i++) {
              e = order[i]
              printf "  %-27s: %d requests, %d 2xx, %d x 429, %d x 401, " \
                     "%d other\n", e, n[e], ok[e], lim[e], inv[e], other[e]
          }
          printf "  %-27s: %d requests, %d 2xx (%.1f %%)\n", "valid key, all",
                 vn, vok, vn ? 100 * vok / vn : 0
        }' "$1"
}

mixed_run() {
    local project=$1 iid l0 l1 wout rps total

    printf '\x89PNG\r\n\x1a\n' > "$W/image.png"
    iid=$(curl -s -X POST -H "Authorization: Bearer $KEY" \
              -H 'Content-Type: image/png' --data-binary @"$W/image.png" \
              "http://127.0.0.1:$PORT/api/v1/sessions/$SID/images" \
          | json_field id) || die "no image"

    cat > "$W/mixed.lua" <<'LUA'
local hex = "0123456789abcdef"
local key = "Bearer " .. os.getenv("MIX_KEY")
local sid = "/api/v1/sessions/" .. os.getenv("MIX_SID")
local auth = { ["Authorization"] = key }
local json = { ["Authorization"] = key,
               ["Content-Type"] = "application/json" }
local valid

-- formatted in init(): wrk knows the Host header only then
init = function(args)
    valid = {
        wrk.format("POST", "/api/v1/sessions", json,
                   '{"delivery_mode": "long_poll"}'),
        wrk.format("GET", sid, auth),
        wrk.format("GET", sid .. "/images", auth),
        wrk.format("GET", sid .. "/images/" .. os.getenv("MIX_IID")
                          .. "/content", auth),
    }
end

-- 0: an unknown key; 1 create, 2 read, 3 image list, 4 image content
local cycle = { 0, 1, 2, 1, 3, 1, 4, 1, 2, 3, 4 }
local n = 0
math.randomseed(os.time())
request = function()
    local c = cycle[n % #cycle + 1]
    n = n + 1
    if c > 0 then
        return valid[c]
    end
    local t = {}
    for i = 1, 32 do
        local k = math.random(16)
        t[i] = hex:sub(k, k)
    end
    return wrk.format("GET", "/api/v1/nope",
                      { ["Authorization"] = "Bearer sess_" .. table.concat(t) })
end
LUA

    # the valid key in use before the run
    curl -s -o /dev/null -H "Authorization: Bearer $KEY" \
        "http://127.0.0.1:$PORT/api/v1/sessions"

    log "mixed: wrk -t1 -c$CONNS -d${SECS}s, 1 request in 11 an unknown key"
    l0=$(key_lookups)
    MIX_KEY=$KEY MIX_SID=$SID MIX_IID=$iid \
        wrk -t1 -c"$CONNS" -d"${SECS}s" -s "$W/mixed.lua" \
        "http://127.0.0.1:$PORT/" > "$W/wrk.out" 2>&1 || true
    l1=$(key_lookups)
    wout=$(cat "$W/wrk.out")
    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$wout")
    total=$(awk '/requests in/ { print $1 }' <<<"$wout")

    # the access log is written out when nginx stops
    stop_nginx

    cat <<REPORT

flood.sh mixed: nginx $WORKERS workers, session_auth_fail_limit $LIMIT, one address, loopback
  wrk                        : $rps requests/s ($total requests in ${SECS} s, $CONNS connections)
$(mix_answers "$W/mix.log")
  key lookups in the database: $((l1 - l0)) in the run
  bound for unknown keys     : $LIMIT per minute (session_auth_fail_limit), plus
                               the valid key's own, about one per
                               session_auth_cache_ttl and worker
REPORT
}

if [ "${1:-}" = --inside ]; then
    inside
    exit $?
fi

[ -f "$MODULE" ] || die "$MODULE not built (run make)"
command -v wrk >/dev/null || die "wrk not found (make deps)"

pg_env_clear
LC_ALL=$(utf8_locale)
export LC_ALL
case $MODE in
    flood|mixed) ;;
    *) die "unknown mode $MODE (flood or mixed)" ;;
esac
export FLOOD_MODE=$MODE
PGPORT=${FLOOD_PGPORT:-$(free_port)} || die "no free port for PostgreSQL"
export PGPORT
exec pg_virtualenv -t -o shared_preload_libraries=pg_stat_statements \
    -- bash "$ROOT/util/flood.sh" --inside
