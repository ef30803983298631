#!/usr/bin/env bash
# What a transaction pooler costs (docs/decisions.md (pc)): a
# few endpoints driven by wrk against the module in three set-ups, on one
# throw-away PostgreSQL, rounds alternating in order:
#
#   named     session_db straight to PostgreSQL, the default: statements
#             prepared once per connection, sent by name
#   unnamed   session_db straight to PostgreSQL with "session_db_pooler
#             transaction": each statement sent with its text (Parse, Bind
#             and Execute in one round trip, planned every time)
#   pgbouncer session_db through PgBouncer in transaction mode (as many
#             server connections as the module has clients), the same
#             unnamed statements, LISTEN straight to PostgreSQL; a
#             PgBouncer that keeps no prepared statement for its clients
#             (1.18, or max_prepared_statements = 0)
#   pgbouncer-kept
#             the same through a PgBouncer that keeps them
#             (max_prepared_statements = 100, PgBouncer 1.21 and later
#             only; left out before): the statements are prepared, each
#             sent by name (decisions.md (pg))
#
# Prints a Markdown table: requests/s and the servers' CPU time per
# request (nginx's workers, every PostgreSQL process, PgBouncer: the
# scheduler's count in /proc/PID/task/*/schedstat over the whole run).
# wrk runs on CPU 0, the servers on the others (2 CPUs or more).
#
#   bash util/bench-pooler.sh
#
# Environment:
#   BENCH_DURATION     one run (default 5s)
#   BENCH_ROUNDS       rounds; the median is reported (default 3)
#   BENCH_WORKERS      nginx worker_processes (default 2)
#   BENCH_DB_CONNECTIONS  session_db_connections (default 4)
#   BENCH_CONNECTIONS  wrk connections (default 32)
#   BENCH_ONLY         a comma list of endpoints (get, list, image-list,
#                      create)
#   BENCH_KEEP         keep the scratch directory
# Everything is on loopback and bounded: 3 or 4 set-ups x 4 endpoints x
# BENCH_ROUNDS runs of BENCH_DURATION.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
MODULE=$ROOT/build/ngx_http_session_module.so
SESSIONCTL=$ROOT/build/sessionctl

DURATION=${BENCH_DURATION:-5s}
ROUNDS=${BENCH_ROUNDS:-3}
WORKERS=${BENCH_WORKERS:-2}
CONNS=${BENCH_DB_CONNECTIONS:-4}
WRK_CONNS=${BENCH_CONNECTIONS:-32}
ONLY=${BENCH_ONLY:-}
SETUPS="named unnamed pgbouncer"
ENDPOINTS="get list image-list create"

die() {
    echo "bench-pooler.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-pooler.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

W=
DB=
PORT=
NGINX_UP=
PGB_PIDS=()


wanted() {
    [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]
}

client() {
    if [ "$(nproc)" -ge 2 ]; then
        taskset -c 0 "$@"
    else
        "$@"
    fi
}

servers() {
    if [ "$(nproc)" -ge 2 ]; then
        taskset -c "1-$(($(nproc) - 1))" "$@"
    else
        "$@"
    fi
}

cleanup() {
    local rc=$?
    nginx_down
    if [ "${#PGB_PIDS[@]}" -gt 0 ]; then
        kill "${PGB_PIDS[@]}" 2>/dev/null || true
        wait "${PGB_PIDS[@]}" 2>/dev/null || true
    fi
    if [ -n "$W" ]; then
        if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
            log "kept $W"
        else
            rm -rf "$W"
        fi
    fi
    exit "$rc"
}


# --- set-up ---------------------------------------------------------------

# does this PgBouncer know max_prepared_statements (1.21 and later)?
pgbouncer_keeps() {
    pgbouncer --version 2>/dev/null | awk '
        /^PgBouncer / && match($0, /[0-9]+\.[0-9]+/) {
            split(substr($0, RSTART, RLENGTH), v, ".")
            found = v[1] * 1000 + v[2] >= 1021
        }
        END { exit !found }'
}

# pgbouncer_start DIR PORT KEPT: PgBouncer on PORT in front of $DB,
# transaction mode, its files in $W/DIR; KEPT: max_prepared_statements
# (where it has the setting)
pgbouncer_start() {
    local dir=$W/$1 port=$2 kept=$3 runas=()

    [ "$(id -u)" != 0 ] || runas=(-u postgres)

    mkdir -p "$dir"
    printf '"%s" "%s"\n' "$PGUSER" "$PGPASSWORD" > "$dir/userlist.txt"
    cat > "$dir/pgbouncer.ini" <<EOF
[databases]
pooled = host=$PGHOST port=$PGPORT dbname=$PGDATABASE connect_query='SET statement_timeout = 5000'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = md5
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = $((WORKERS * CONNS))
max_client_conn = 1000
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
    if pgbouncer_keeps; then
        echo "max_prepared_statements = $kept" >> "$dir/pgbouncer.ini"
    fi
    [ "$(id -u)" != 0 ] || chown -R postgres "$dir"

    pgbouncer "${runas[@]}" "$dir/pgbouncer.ini" \
        > "$dir/stdout.log" 2>&1 &
    PGB_PIDS+=($!)

    for _ in $(seq 50); do
        psql -X -q -At -d "$(pgb_db "$port")" -c 'SELECT 1' >/dev/null 2>&1 \
            && return 0
        sleep 0.1
    done
    cat "$dir/pgbouncer.log" >&2
    die "PgBouncer did not start"
}

# the conninfo of the database through the PgBouncer on PORT
pgb_db() {
    echo "host=127.0.0.1 port=$1 dbname=pooled user=$PGUSER password=$PGPASSWORD"
}

fixtures() {
    local a p

    a=$(ctl account create bench-pooler --plan unlimited | json_field account_id)
    p=$(ctl project create "$a" bench-pooler | json_field project_id)
    ctl key create "$p" | json_field key > "$W/key"

    sql "INSERT INTO sessions (project_id, delivery_mode, expires_at)
         SELECT '$p', 'long_poll', now() + interval '1 day'
         FROM generate_series(1, 100) RETURNING id" > "$W/sessions"

    head -1 "$W/sessions" > "$W/image-session"
    sql "UPDATE sessions SET image_count = 30
         WHERE id = '$(cat "$W/image-session")'" >/dev/null
    sql "INSERT INTO images (session_id, sequence, content_type, size,
                             sha256, content)
         SELECT '$(cat "$W/image-session")', g, 'image/gif', 6,
                sha256('GIF89a'::bytea), 'GIF89a'::bytea
         FROM generate_series(1, 30) g" >/dev/null

    printf '{"delivery_mode": "long_poll"}' > "$W/create.json"
    sql "ANALYZE" >/dev/null
}

# nginx.conf for SETUP
nginx_conf() {
    local setup=$1

    {
        nginx_conf_head "$MODULE" "$WORKERS" | sed '/session_db /d'
        case $setup in
        named)
            echo "    session_db $(nginx_quote "$DB");" ;;
        unnamed)
            echo "    session_db $(nginx_quote "$DB");"
            echo "    session_db_pooler transaction;"
            echo "    session_db_listen $(nginx_quote "$DB");" ;;
        pgbouncer)
            echo "    session_db $(nginx_quote "$(pgb_db "$PGB_PORT")");"
            echo "    session_db_pooler transaction;"
            echo "    session_db_listen $(nginx_quote "$DB");" ;;
        pgbouncer-kept)
            echo "    session_db $(nginx_quote "$(pgb_db "$PGBK_PORT")");"
            echo "    session_db_pooler transaction;"
            echo "    session_db_listen $(nginx_quote "$DB");" ;;
        esac
        cat <<EOF
    session_db_connections $CONNS;
    session_auth_cache_ttl 1h;
    session_expiry_sweep_interval 30s;

$(bench_api_server)
}
EOF
    } > "$W/nginx.conf"
}


# --- runs -----------------------------------------------------------------

declare -A RPS CPU NG PG PB

# cpu_snap: "GROUP PID NS" for nginx's workers, every process of this
# PostgreSQL cluster and PgBouncer: the CPU nanoseconds so far of all
# their threads
cpu_snap() {
    local g p f

    for g in nginx pg pgbouncer; do
        case $g in
        nginx)      set -- $(pgrep -P "$(cat "$W/nginx.pid")") ;;
        pg)         set -- "$POSTMASTER" $(pgrep -P "$POSTMASTER") ;;
        pgbouncer)  set -- "${PGB_PIDS[@]}" ;;
        esac
        for p in "$@"; do
            for f in /proc/"$p"/task/*/schedstat; do
                [ -e "$f" ] || continue
                awk -v g="$g" -v p="$p" '{ print g, p, $1 }' "$f" \
                    2>/dev/null || true
            done
        done
    done | awk '{ s[$1 " " $2] += $3 } END { for (k in s) print k, s[k] }'
}

# cpu_delta BEFORE AFTER: "NGINX_NS PG_NS PGBOUNCER_NS" between the two
# snapshots, of the processes in AFTER (those gone since BEFORE are left
# out, those new counted whole)
cpu_delta() {
    awk 'FILENAME == ARGV[1] { c[$1 " " $2] = $3; next }
         { d[$1] += $3 - c[$1 " " $2] }
         END { printf "%.0f %.0f %.0f\n", d["nginx"], d["pg"],
                      d["pgbouncer"] }' "$1" "$2"
}

# endpoint NAME: its request shape, exported for bench/db-request.lua
endpoint() {
    export BENCH_KEYS=$W/key BENCH_METHOD=GET BENCH_IDS='' BENCH_BODY='' \
           BENCH_CTYPE='' BENCH_PICK=random
    case $1 in
    get)        BENCH_PATH=/api/v1/sessions/%s BENCH_IDS=$W/sessions ;;
    list)       BENCH_PATH='/api/v1/sessions?limit=20' ;;
    image-list) BENCH_PATH='/api/v1/sessions/%s/images?limit=20'
                BENCH_IDS=$W/image-session ;;
    create)     BENCH_PATH=/api/v1/sessions BENCH_METHOD=POST
                BENCH_BODY=$W/create.json BENCH_CTYPE=application/json ;;
    esac
    export BENCH_PATH BENCH_IDS BENCH_METHOD BENCH_BODY BENCH_CTYPE
}

run() {
    local setup=$1 ep=$2 out ng pg pb rps total non2xx

    endpoint "$ep"
    sql "CHECKPOINT" >/dev/null

    cpu_snap > "$W/cpu.0"
    out=$(BENCH_THREADS=2 client wrk -t2 -c"$WRK_CONNS" -d"$DURATION" \
              -s "$ROOT/bench/db-request.lua" "http://127.0.0.1:$PORT" 2>&1) \
        || { echo "$out" >&2; die "wrk failed ($setup $ep)"; }
    cpu_snap > "$W/cpu.1"
    read -r ng pg pb <<<"$(cpu_delta "$W/cpu.0" "$W/cpu.1")"

    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    total=$(awk '/requests in/ { print $1 }' <<<"$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $5 }' <<<"$out")

    [ -n "$rps" ] && [ -n "$total" ] || { echo "$out" >&2; die "no result"; }
    [ -z "$non2xx" ] || die "$setup $ep: $non2xx of $total not 2xx"

    per() { awk -v c="$1" -v n="$total" 'BEGIN { printf "%.1f", c / n / 1000 }'; }

    RPS[$setup.$ep]+="$rps "
    CPU[$setup.$ep]+="$(per $((ng + pg + pb))) "
    NG[$setup.$ep]+="$(per "$ng") "
    PG[$setup.$ep]+="$(per "$pg") "
    PB[$setup.$ep]+="$(per "$pb") "
    log "$setup $ep: $rps requests/s, µs/request: nginx $(per "$ng")," \
        "PostgreSQL $(per "$pg"), PgBouncer $(per "$pb")"
}

inside() {
    local round setup ep

    W=$(mktemp -d /tmp/ngx-session-bench-pooler.XXXXXX)
    chmod 755 "$W"
    trap cleanup EXIT

    PORT=$(free_port) || die "no free port"
    PGB_PORT=$(free_port) || die "no free port"
    PGBK_PORT=$(free_port) || die "no free port"

    "$SESSIONCTL" -d "$DB" migrate >/dev/null || die "migrate failed"
    fixtures
    pgbouncer_start pgb "$PGB_PORT" 0

    if pgbouncer_keeps; then
        pgbouncer_start pgbk "$PGBK_PORT" 100
        SETUPS+=" pgbouncer-kept"
    else
        log "PgBouncer before 1.21 keeps no prepared statement:" \
            "no pgbouncer-kept set-up"
    fi

    # the checkpointer lives as long as the postmaster, its parent
    POSTMASTER=$(ps -o ppid= -p "$(sql "SELECT pid FROM pg_stat_activity
                     WHERE backend_type = 'checkpointer'")" | tr -d ' ')
    grep -q postgres "/proc/$POSTMASTER/cmdline" 2>/dev/null \
        || die "PostgreSQL's postmaster not found"

    for round in $(seq "$ROUNDS"); do
        for setup in $SETUPS; do
            nginx_conf "$setup"
            start_nginx
            # every pool connection up before the first run
            sleep 1
            for ep in $ENDPOINTS; do
                wanted "$ep" || continue
                run "$setup" "$ep"
            done
            stop_nginx
        done
        log "round $round of $ROUNDS done"
    done

    echo "| endpoint | set-up | requests/s | server µs/request" \
         "| nginx µs | PostgreSQL µs | PgBouncer µs |"
    echo "|---|---|---|---|---|---|---|"
    for ep in $ENDPOINTS; do
        wanted "$ep" || continue
        for setup in $SETUPS; do
            printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$ep" "$setup" \
                "$(median <<<"${RPS[$setup.$ep]}")" \
                "$(median <<<"${CPU[$setup.$ep]}")" \
                "$(median <<<"${NG[$setup.$ep]}")" \
                "$(median <<<"${PG[$setup.$ep]}")" \
                "$(median <<<"${PB[$setup.$ep]}")"
        done
    done
}


if [ "${1:-}" = --inside-pg-virtualenv ]; then
    DB=$(pg_virtualenv_conninfo)
    inside
    exit $?
fi

command -v wrk >/dev/null 2>&1 || die "wrk not found (make deps)"
command -v pgbouncer >/dev/null 2>&1 \
    || [ -x /usr/sbin/pgbouncer ] || die "pgbouncer not found (make deps)"
[ -f "$MODULE" ] || die "$MODULE not built (run make)"

pg_env_clear
export LC_ALL=C PATH=$PATH:/usr/sbin

PGPORT=$(free_port) || die "no free TCP port for PostgreSQL"
export PGPORT
servers pg_virtualenv -t -o fsync=on -- \
    bash "$ROOT/util/bench-pooler.sh" --inside-pg-virtualenv
