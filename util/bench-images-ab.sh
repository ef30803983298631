#!/usr/bin/env bash
# Two builds or two configurations of the module side by side, for the
# images: on a shared machine the rate of either (and of PostgreSQL
# alone) moves by a third from one minute to the next, so each round
# runs A, then B, then PostgreSQL alone, and prints the three rates with
# the CPU each transfer cost (utime + stime from /proc of the nginx
# workers, of PostgreSQL's processes, and of the client), which the load
# disturbs far less:
#
#   PGPORT=5499 pg_virtualenv -t -o fsync=on -- bash util/bench-images-ab.sh
#
# AB_MODE ("down"): "down", N (AB_N, 50) downloads of 10 MB at once
#   (bench/image-load.pl) against 4 clients selecting them
#   (bench/pg-insert read, 2 s); "up", wrk with 16 connections POSTing
#   AB_SIZE (102400) bytes for AB_DURATION (3) s against 16 clients
#   inserting them.
# AB_MODULE_A, AB_MODULE_B: the builds (default: build/'s for both);
# AB_HTTP_A, AB_HTTP_B, AB_LOCATION_A, AB_LOCATION_B: directives added to
# the http{} block and to the session_api location of each, e.g.
# AB_LOCATION_B='session_image_chunk_size 128k;' for the downloads (in
# "up", an AB_SIZE body up to session_body_buffer_size, 128k, is
# gathered and sent whole whatever the chunk: compare
# AB_LOCATION_B='session_body_buffer_size 0;' there).  AB_ROUNDS (5).
# Runs inside pg_virtualenv (its PG* variables); 127.0.0.1 only, ports
# from BENCH_PORTS as the other benchmarks.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
SESSIONCTL=$ROOT/build/sessionctl
MODE=${AB_MODE:-down}
ROUNDS=${AB_ROUNDS:-5}
N=${AB_N:-50}
SIZE=${AB_SIZE:-102400}
DURATION=${AB_DURATION:-3}
BIG=$((10 * 1024 * 1024))

die() {
    echo "bench-images-ab.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-images-ab.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

DB=$(pg_virtualenv_conninfo)
DATA=$(psql -X -At -c 'SHOW data_directory')

W=$(mktemp -d /tmp/ngx-session-bench-ab.XXXXXX)
chmod 755 "$W"
NGINX_UP=
PORT=

cleanup() {
    local d
    for d in A B; do
        if [ -f "$W/$d/nginx.pid" ]; then
            "$NGINX" -p "$W/$d/" -c "$W/$d/nginx.conf" -s stop || true
        fi
    done
    sleep 0.5
    rm -rf "$W"
}

trap cleanup EXIT

# ticks of CPU (user + system, with reaped children) of the PIDS; the
# client's are those of the subshell that ran it ($BASHPID)
cpu_of() {
    local s=0 p
    for p in "$@"; do
        if [ -r "/proc/$p/stat" ]; then
            s=$((s + $(awk '{ print $14 + $15 + $16 + $17 }' \
                           "/proc/$p/stat")))
        fi
    done
    echo "$s"
}

# pg_cpu: cpu_of PostgreSQL's processes (the postmaster and its children)
pg_cpu() {
    local pm
    local -a kids
    pm=$(head -1 "$DATA/postmaster.pid")
    mapfile -t kids < <(pgrep -P "$pm")
    cpu_of "$pm" "${kids[@]}"
}

# µs of CPU per transfer: ticks (1/100 s) over count
per() {
    awk -v t="$1" -v n="$2" 'BEGIN { printf "%.0f", t * 10000 / n }'
}

# start NAME MODULE HTTP LOCATION: nginx in $W/NAME, its port in PORT_NAME
start() {
    local d=$1
    W=$W/$d start_one "$@"
}

start_one() {
    mkdir -p "$W"
    chmod 755 "$W"
    cp "$2" "$W/m.so"
    PORT=$(free_port) || die "no free port"
    cat > "$W/nginx.conf" <<EOF
$(nginx_conf_head "$W/m.so" 2)
    session_limit_zone ab_$1:10m;
    $3

$(bench_api_server "$4")
}
EOF
    start_nginx
    echo "$PORT" > "$W/port"
}

"$SESSIONCTL" -d "$DB" migrate >/dev/null || die "sessionctl migrate failed"
cc -O2 -I"$(pg_config --includedir)" -o "$W/pg-insert" \
    "$ROOT/bench/pg-insert.c" -lpq || die "cannot build bench/pg-insert.c"
psql -X -q -d "$DB" -c "CREATE TABLE ab_blob (content bytea NOT NULL);
    ALTER TABLE ab_blob ALTER COLUMN content SET STORAGE EXTERNAL" >/dev/null

ACCOUNT=$(ctl account create "bench-ab-$$" --plan unlimited \
              | json_field account_id)
PROJECT=$(ctl project create "$ACCOUNT" "bench-ab-$$" | json_field project_id)
KEY=$(ctl key create "$PROJECT" | json_field key)

start A "${AB_MODULE_A:-$ROOT/build/ngx_http_session_module.so}" \
    "${AB_HTTP_A:-}" "${AB_LOCATION_A:-}"
start B "${AB_MODULE_B:-$ROOT/build/ngx_http_session_module.so}" \
    "${AB_HTTP_B:-}" "${AB_LOCATION_B:-}"

PORT=$(cat "$W/A/port")
sids=
for _ in $(seq 16); do
    sid=$(curl -s -X POST -H "Authorization: Bearer $KEY" \
               -H 'Content-Type: application/json' \
               -d '{"delivery_mode": "long_poll", "expires_in": 86400}' \
               "http://127.0.0.1:$PORT/api/v1/sessions" | json_field id)
    sids+="${sids:+,}$sid"
done

image_file() {
    { printf '\x89PNG\r\n\x1a\n'; head -c $(($1 - 8)) /dev/urandom; } > "$2"
}

# each side starts from empty tables and a checkpoint just made: a
# checkpoint that falls inside one side's run, or the deleted rows of
# the run before, moved PostgreSQL alone between 170 and 310 MB/s
purge() {
    psql -X -q -d "$DB" -c "TRUNCATE images, ab_blob" -c "CHECKPOINT" \
        >/dev/null
}

# one side's run: its rate, MB/s, and [nginx / PostgreSQL / client µs]
side() {
    local d=$1 me=$BASHPID port n0 p0 c0 out n secs rate
    local -a ngx
    port=$(cat "$W/$d/port")
    mapfile -t ngx < <(pgrep -P "$(cat "$W/$d/nginx.pid")")
    n0=$(cpu_of "${ngx[@]}")
    p0=$(pg_cpu)
    c0=$(cpu_of "$me")

    if [ "$MODE" = down ]; then
        out=$(perl "$ROOT/bench/image-load.pl" down "$port" "$KEY" "$N" - \
                   "$PATHS")
        read -r _ n secs bytes _ <<<"$out"
        [ "$n" = 0 ] || die "$d: $n downloads failed"
        n=$N
        rate=$(awk -v b="$bytes" -v t="$secs" \
                   'BEGIN { printf "%.0f", b / t / 1e6 }')
    else
        purge
        # each wrk thread its own half of the sessions
        out=$(BENCH_FILE=$W/img BENCH_SIDS=$sids BENCH_KEY=$KEY BENCH_SPLIT=2 \
              wrk -t2 -c16 -d"${DURATION}s" -s "$ROOT/bench/image-upload.lua" \
                  "http://127.0.0.1:$port/" 2>&1)
        ! grep -q 'Non-2xx' <<<"$out" || die "$d: uploads failed: $out"
        n=$(awk '/requests in/ { print $1 }' <<<"$out")
        secs=$(awk '/requests in/ { sub(/s,$/, "", $4); print $4 }' <<<"$out")
        rate=$(awk -v n="$n" -v s="$SIZE" -v t="$secs" \
                   'BEGIN { printf "%.1f", n * s / t / 1e6 }')
    fi

    echo "$d $rate [$(per $(( $(cpu_of "${ngx[@]}") - n0 )) "$n") /" \
         "$(per $(( $(pg_cpu) - p0 )) "$n") /" \
         "$(per $(( $(cpu_of "$me") - c0 )) "$n") µs]"
}

alone() {
    local me=$BASHPID p0 c0 n secs rate
    p0=$(pg_cpu)
    c0=$(cpu_of "$me")

    if [ "$MODE" = down ]; then
        "$W/pg-insert" "$DB" "$W/img" 4 2 ab_blob read > "$W/pg-out"
        read -r n secs < "$W/pg-out"
        rate=$(awk -v n="$n" -v s="$BIG" -v t="$secs" \
                   'BEGIN { printf "%.0f", n * s / t / 1e6 }')
    else
        purge
        "$W/pg-insert" "$DB" "$W/img" 16 "$DURATION" ab_blob > "$W/pg-out"
        read -r n secs < "$W/pg-out"
        rate=$(awk -v n="$n" -v s="$SIZE" -v t="$secs" \
                   'BEGIN { printf "%.1f", n * s / t / 1e6 }')
    fi

    echo "PostgreSQL $rate [- / $(per $(( $(pg_cpu) - p0 )) "$n")" \
         "/ $(per $(( $(cpu_of "$me") - c0 )) "$n") µs]"
}

if [ "$MODE" = down ]; then
    image_file "$BIG" "$W/img"
    perl "$ROOT/bench/image-load.pl" up "$PORT" "$KEY" "$N" "$W/img" "$sids" \
        >/dev/null
    PATHS=$(psql -X -At -d "$DB" -c "
        SELECT string_agg('/api/v1/sessions/' || session_id || '/images/'
                          || id || '/content', ',') FROM images")
    psql -X -q -d "$DB" -c "INSERT INTO ab_blob SELECT content FROM images
                             LIMIT 1" >/dev/null
else
    image_file "$SIZE" "$W/img"
fi

log "$MODE: each round A, B, PostgreSQL alone: MB/s [CPU per transfer:" \
    "nginx / PostgreSQL / client]"

for r in $(seq "$ROUNDS"); do
    echo "round $r: $(side A); $(side B); $(alone);" \
         "load $(cut -d' ' -f1 /proc/loadavg)"
done

purge
delete_rows "$PROJECT" "$ACCOUNT"
