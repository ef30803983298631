#!/usr/bin/env bash
# The image part of "make bench" (util/bench.sh calls it; it also runs on
# its own against an existing database):
#
#   BENCH_SESSION_DB="host=... dbname=..." bash util/bench-images.sh
#
# 1. Upload throughput: wrk POSTs one image of 100 KB, then of 2 MB, with
#    BENCH_IMAGES_CLIENTS (16) connections spread over as many sessions,
#    against bench/pg-insert: the same bytes, as many clients, each an
#    autocommitted INSERT of a binary bytea parameter into a table stored
#    like images.content.  Reported in MB/s (10^6 bytes), median of
#    BENCH_ROUNDS runs of BENCH_DURATION each.
# 2. Worker memory: the summed RSS of nginx's workers before, during (the
#    highest sample) and after BENCH_IMAGES_RSS_UPLOADS (200) uploads of
#    5 MB, 8 at a time, and after as many downloads of them.  Goal: back
#    within 10% of where it started.
#
# 3. Streamed transfers (docs/decisions.md "Images"): for each N of
#    BENCH_IMAGES_CONCURRENCY ("50 500"), N uploads of 10 MB at once
#    (bench/image-load.pl: one process, every connection written
#    together), then N downloads of them at once: MB/s and the workers'
#    RSS growth per transfer in flight (peak of 0.1 s samples less the
#    idle RSS before, over N; goal <= 256 KB), beside PostgreSQL's own
#    rate for the same bytes (bench/pg-insert, BENCH_IMAGES_PG_CLIENTS (4,
#    the upload connections of 2 workers) clients inserting, then
#    selecting, a 10 MB bytea; goal >= 0.6), and the time to the first
#    byte of a 10 MB download beside a 1 KB one (curl, median of 20 one
#    after another; goal <= 2x).  The downloads run BENCH_IMAGES_DOWN_ROUNDS
#    (4) times more, each followed by the SELECTs for BENCH_IMAGES_PG_READ
#    (2) seconds: the row is the median of the downloads beside the median
#    of those SELECTs.
#
# Prints a Markdown section on stdout (BENCH_IMAGES_OUT: to that file),
# progress on stderr.  Loopback only; every row it adds is deleted at the
# end.  Environment as util/bench.sh: BENCH_DURATION (5s), BENCH_ROUNDS
# (3), BENCH_WORKERS (2), BENCH_THREADS (2), BENCH_KEEP.
# BENCH_IMAGES_CHUNK and BENCH_IMAGES_UPLOAD_CONNECTIONS set
# session_image_chunk_size and session_image_upload_connections.
# BENCH_IMAGES_PARTS ("upload memory stream"): the parts to run, for a
# quicker measure of one of them.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
# BENCH_IMAGES_MODULE: another build of the module (e.g. main's, for the
# figures before a change), run the same way
MODULE=${BENCH_IMAGES_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl
DB=${BENCH_SESSION_DB:-}

DURATION=${BENCH_DURATION:-5s}
ROUNDS=${BENCH_ROUNDS:-3}
WORKERS=${BENCH_WORKERS:-2}
THREADS=${BENCH_THREADS:-2}
CLIENTS=${BENCH_IMAGES_CLIENTS:-16}
RSS_UPLOADS=${BENCH_IMAGES_RSS_UPLOADS:-200}
CONCURRENCY=${BENCH_IMAGES_CONCURRENCY:-50 500}
PG_CLIENTS=${BENCH_IMAGES_PG_CLIENTS:-4}
# downloads of N at once measured this many times more, PostgreSQL's
# SELECT for PG_READ seconds after each
DOWN_ROUNDS=${BENCH_IMAGES_DOWN_ROUNDS:-4}
PG_READ=${BENCH_IMAGES_PG_READ:-2}
BIG=$((10 * 1024 * 1024))
# session_image_chunk_size, when not the default
CHUNK=${BENCH_IMAGES_CHUNK:-}
# session_image_upload_connections, when not the default
UPLOAD_CONNS=${BENCH_IMAGES_UPLOAD_CONNECTIONS:-}
OUT=${BENCH_IMAGES_OUT:--}
PARTS=" ${BENCH_IMAGES_PARTS:-upload memory stream} "

die() {
    echo "bench-images.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-images.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

[ -n "$DB" ] || die "set BENCH_SESSION_DB (util/bench.sh does)"
command -v wrk >/dev/null 2>&1 || die "wrk not found"
[ -f "$MODULE" ] && [ -x "$SESSIONCTL" ] || die "run make first"

W=$(mktemp -d /tmp/ngx-session-bench-images.XXXXXX)
# workers (not root) write request bodies under it
chmod 755 "$W"
PORT=
ACCOUNT=
PROJECT=
NGINX_UP=
BLOB=bench_images_blob_$$

cleanup() {
    local rc=$?

    nginx_down

    psql -X -q -d "$DB" -c "DROP TABLE IF EXISTS $BLOB" >/dev/null 2>&1 \
        || true

    if [ -n "$PROJECT" ]; then
        delete_rows "$PROJECT" "$ACCOUNT"
    fi

    if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
        echo "bench-images.sh: kept $W (nginx.conf, error.log)" >&2
    else
        rm -rf "$W"
    fi

    exit "$rc"
}

trap cleanup EXIT

# a file of N bytes that passes as a PNG: the signature, then random bytes
image_file() {
    local n=$1 f=$2
    { printf '\x89PNG\r\n\x1a\n'; head -c $((n - 8)) /dev/urandom; } > "$f"
}


# --- nginx -------------------------------------------------------------

write_conf() {
    cat > "$W/nginx.conf" <<EOF
$(nginx_conf_head "$W/ngx_http_session_module.so" "$WORKERS")
    session_limit_zone bench_images:10m;
    ${UPLOAD_CONNS:+session_image_upload_connections $UPLOAD_CONNS;}

$(bench_api_server "${CHUNK:+session_image_chunk_size $CHUNK;}")
}
EOF
}

new_session() {
    curl -s -X POST -H "Authorization: Bearer $KEY" \
         -H 'Content-Type: application/json' \
         -d '{"delivery_mode": "long_poll", "expires_in": 86400}' \
         "http://127.0.0.1:$PORT/api/v1/sessions" | json_field id
}

# each side of a measure starts from the same state: no dead rows of the
# run before and a checkpoint just made (a checkpoint inside one side's
# run moved PostgreSQL alone between 170 and 310 MB/s)
purge_images() {
    psql -X -q -d "$DB" -c "
        DELETE FROM images i USING sessions s
         WHERE s.id = i.session_id AND s.project_id = '$PROJECT';
        TRUNCATE $BLOB;" -c "VACUUM images" -c "CHECKPOINT" >/dev/null
}


# --- 1. upload throughput ----------------------------------------------

declare -A OURS BASE

# wrk (bench/image-upload.lua): every connection's requests are built
# once, round robin over the sessions (one session per client: uploads
# into one session serialize on its row, by design)

throughput() {
    local label=$1 size=$2 out n total non2xx secs ours base sids

    image_file "$size" "$W/img-$label"

    sids=
    for _ in $(seq "$CLIENTS"); do
        sids+="${sids:+,}$(new_session)"
    done

    for _ in $(seq "$ROUNDS"); do
        purge_images

        out=$(BENCH_FILE="$W/img-$label" BENCH_SIDS="$sids" BENCH_KEY="$KEY" \
              wrk -t"$THREADS" -c"$CLIENTS" -d"$DURATION" \
                  -s "$ROOT/bench/image-upload.lua" \
                  "http://127.0.0.1:$PORT/" 2>&1) \
            || { echo "$out" >&2; die "wrk failed ($label)"; }

        total=$(awk '/requests in/ { print $1 }' <<<"$out")
        secs=$(awk '/requests in/ { sub(/s,$/, "", $4); print $4 }' <<<"$out")
        non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $5 }' <<<"$out")
        [ -z "$non2xx" ] || die "$label: $non2xx of $total uploads failed"
        [ "${total:-0}" -gt 0 ] || { echo "$out" >&2; die "$label: none"; }

        ours=$(awk -v n="$total" -v s="$size" -v t="$secs" \
                   'BEGIN { printf "%.1f", n * s / t / 1e6 }')
        OURS[$label]+="$ours "

        purge_images

        read -r n secs < <("$W/pg-insert" "$DB" "$W/img-$label" "$CLIENTS" \
                               "${DURATION%s}" "$BLOB") \
            || die "pg-insert failed ($label)"
        base=$(awk -v n="$n" -v s="$size" -v t="$secs" \
                   'BEGIN { printf "%.1f", n * s / t / 1e6 }')
        BASE[$label]+="$base "

        log "upload $label: nginx $ours MB/s ($total in ${secs}s)," \
            "PostgreSQL INSERT $base MB/s ($n)"
    done

    purge_images
}


# --- 2. worker memory ----------------------------------------------------

RSS_BEFORE=
RSS_PEAK=
RSS_AFTER_UP=
RSS_AFTER_DOWN=

rss_run() {
    local sid sampler ids f=$W/img-5m

    image_file $((5 * 1024 * 1024)) "$f"
    sid=$(new_session)

    # warm: every connection open, a small upload and download done
    for _ in $(seq 20); do
        curl -s -o /dev/null -X POST -H "Authorization: Bearer $KEY" \
             -H 'Content-Type: image/png' --data-binary @"$W/img-100k" \
             "http://127.0.0.1:$PORT/api/v1/sessions/$sid/images"
    done
    sleep 1
    RSS_BEFORE=$(workers_rss)

    ( while :; do workers_rss; sleep 0.2; done ) > "$W/rss-samples" &
    sampler=$!

    seq "$RSS_UPLOADS" | xargs -P 8 -I{} curl -s -o /dev/null \
        -w '%{http_code}\n' -X POST -H "Authorization: Bearer $KEY" \
        -H 'Content-Type: image/png' --data-binary @"$f" \
        "http://127.0.0.1:$PORT/api/v1/sessions/$sid/images" \
        > "$W/rss-codes"

    [ "$(grep -c '^201$' "$W/rss-codes")" = "$RSS_UPLOADS" ] \
        || die "5 MB uploads: $(sort "$W/rss-codes" | uniq -c | tr '\n' ' ')"

    sleep 1
    RSS_AFTER_UP=$(workers_rss)

    ids=$(psql -X -At -d "$DB" -c "SELECT id FROM images
                                   WHERE session_id = '$sid'
                                     AND size = 5242880")
    xargs -P 8 -I{} curl -s -o /dev/null -w '%{http_code}\n' \
        -H "Authorization: Bearer $KEY" \
        "http://127.0.0.1:$PORT/api/v1/sessions/$sid/images/{}/content" \
        <<<"$ids" > "$W/rss-codes"

    [ "$(grep -c '^200$' "$W/rss-codes")" = "$RSS_UPLOADS" ] \
        || die "5 MB downloads: $(sort "$W/rss-codes" | uniq -c | tr '\n' ' ')"

    kill "$sampler"
    wait "$sampler" 2>/dev/null || true
    sleep 1
    RSS_AFTER_DOWN=$(workers_rss)
    RSS_PEAK=$(sort -n "$W/rss-samples" | tail -1)

    log "worker RSS (kB): before $RSS_BEFORE, peak $RSS_PEAK, after uploads" \
        "$RSS_AFTER_UP, after downloads $RSS_AFTER_DOWN"

    purge_images
}


# --- 3. streamed transfers ------------------------------------------------

restart_nginx() {
    "$NGINX" -p "$W/" -c "$W/nginx.conf" -s stop
    for _ in $(seq 50); do
        [ -f "$W/nginx.pid" ] || break
        sleep 0.1
    done
    start_nginx
}

declare -A ST_UP ST_DOWN ST_RSS_UP ST_RSS_DOWN ST_DOWN_RUNS ST_PG_RUNS
declare -A ST_PG_DOWN
PG_UP=
PG_DOWN=
TTFB_BIG=
TTFB_SMALL=
SMALL_N=
SMALL_UP=
SMALL_RSS=

# the peak of the workers' summed RSS while CMD runs, less $1 (kB), in
# $PEAK; CMD's output in $RUN_OUT
sampled() {
    local idle=$1 sampler
    shift

    ( while :; do workers_rss; sleep 0.1; done ) > "$W/rss-samples" &
    sampler=$!

    RUN_OUT=$("$@") || { kill "$sampler"; die "$* failed"; }

    kill "$sampler"
    wait "$sampler" 2>/dev/null || true
    PEAK=$(( $(sort -n "$W/rss-samples" | tail -1) - idle ))
}

# median of 20 times to the first byte of PATH, ms
ttfb() {
    local path=$1

    for _ in $(seq 20); do
        curl -s -o /dev/null -w '%{time_starttransfer}\n' \
             -H "Authorization: Bearer $KEY" "http://127.0.0.1:$PORT$path"
    done | awk '{ printf "%.2f ", $1 * 1000 }' | median
}

# DOWN_ROUNDS more downloads of N at once, each followed by PostgreSQL
# alone selecting the same 10 MB for PG_READ seconds: the rate of either
# moves by a third from one minute to the next on a shared machine, so
# the row is the median of the module's runs (the first one's included)
# beside the median of the SELECTs run between them
down_rounds() {
    local n=$1 f=$2 paths=$3 r ok failed secs bytes mine base rows

    rows=$(psql -X -At -d "$DB" -c "SELECT count(*) FROM $BLOB")
    if [ "$rows" = 0 ]; then
        psql -X -q -d "$DB" -c "INSERT INTO $BLOB SELECT content FROM images
                                 WHERE size = $BIG LIMIT 1" >/dev/null
    fi

    mine=${ST_DOWN[$n]}
    base=

    for r in $(seq 0 "$DOWN_ROUNDS"); do
        if [ "$r" -gt 0 ]; then
            read -r ok failed secs bytes _ < <(perl \
                "$ROOT/bench/image-load.pl" down "$PORT" "$KEY" "$n" - \
                "$paths")
            [ "$failed" = 0 ] || die "$n downloads of 10 MB: $failed failed"
            mine+=" $(awk -v b="$bytes" -v t="$secs" \
                          'BEGIN { printf "%.1f", b / t / 1e6 }')"
        fi

        read -r ok secs < <("$W/pg-insert" "$DB" "$f" "$PG_CLIENTS" \
                                "$PG_READ" "$BLOB" read) \
            || die "pg-insert read failed (10 MB)"
        base+="${base:+ }$(awk -v n="$ok" -v s="$BIG" -v t="$secs" \
                               'BEGIN { printf "%.1f", n * s / t / 1e6 }')"
    done

    ST_DOWN_RUNS[$n]=$mine
    ST_PG_RUNS[$n]=$base
    ST_DOWN[$n]=$(median <<<"$mine")
    ST_PG_DOWN[$n]=$(median <<<"$base")
    log "$n downloads of 10 MB at once, rounds: $mine MB/s;" \
        "PostgreSQL alone between them: $base MB/s"
}

# load_run up|down N FILE|- TARGETS WHAT: N transfers at once
# (bench/image-load.pl) from a settled nginx; their MB/s in $LOAD_MBS and
# the workers' RSS growth per transfer (kB) in $LOAD_RSS, logged as "N
# WHAT at once"
load_run() {
    local mode=$1 n=$2 file=$3 targets=$4 what=$5 idle ok failed secs bytes

    sleep 1
    idle=$(workers_rss)

    sampled "$idle" perl "$ROOT/bench/image-load.pl" "$mode" "$PORT" \
        "$KEY" "$n" "$file" "$targets"
    read -r ok failed secs bytes _ <<<"$RUN_OUT"
    [ "$failed" = 0 ] || die "$n $what: $failed failed"
    LOAD_MBS=$(awk -v b="$bytes" -v t="$secs" \
                   'BEGIN { printf "%.1f", b / t / 1e6 }')
    LOAD_RSS=$(awk -v p="$PEAK" -v n="$n" 'BEGIN { printf "%.0f", p / n }')
    log "$n $what at once: $LOAD_MBS MB/s in ${secs}s," \
        "RSS growth ${PEAK} kB ($LOAD_RSS kB each)"
}

stream_run() {
    local f=$W/img-10m n sids paths secs sid small

    image_file "$BIG" "$f"
    image_file 1024 "$W/img-1k"

    sids=
    for _ in $(seq 50); do
        sids+="${sids:+,}$(new_session)"
    done

    for n in $CONCURRENCY; do
        purge_images
        restart_nginx
        load_run up "$n" "$f" "$sids" "uploads of 10 MB"
        ST_UP[$n]=$LOAD_MBS
        ST_RSS_UP[$n]=$LOAD_RSS

        # a fresh nginx: what the uploads left in the heap is not reused
        restart_nginx

        paths=$(psql -X -At -d "$DB" -c "
            SELECT string_agg('/api/v1/sessions/' || i.session_id
                              || '/images/' || i.id || '/content', ',')
              FROM images i JOIN sessions s ON s.id = i.session_id
             WHERE s.project_id = '$PROJECT' AND i.size = $BIG")

        load_run down "$n" - "$paths" "downloads of 10 MB"
        ST_DOWN[$n]=$LOAD_MBS
        ST_RSS_DOWN[$n]=$LOAD_RSS

        down_rounds "$n" "$f" "$paths"
    done

    # the time to the first byte: 10 MB beside 1 KB

    sid=${sids%%,*}
    small=$(curl -s -X POST -H "Authorization: Bearer $KEY" \
                 -H 'Content-Type: image/png' --data-binary @"$W/img-1k" \
                 "http://127.0.0.1:$PORT/api/v1/sessions/$sid/images" \
            | json_field id)
    paths=${paths%%,*}

    TTFB_BIG=$(ttfb "$paths")
    TTFB_SMALL=$(ttfb "/api/v1/sessions/$sid/images/$small/content")
    log "time to the first byte: 10 MB $TTFB_BIG ms, 1 KB $TTFB_SMALL ms"

    # as many uploads of 100 KB at once as the largest N: each gathered
    # in memory (session_body_buffer_size) and sent whole

    SMALL_N=${CONCURRENCY##* }
    purge_images
    restart_nginx
    load_run up "$SMALL_N" "$W/img-100k" "$sids" "uploads of 100 KB"
    SMALL_UP=$LOAD_MBS
    SMALL_RSS=$LOAD_RSS

    purge_images

    # PostgreSQL alone with the same bytes

    read -r n secs < <("$W/pg-insert" "$DB" "$f" "$PG_CLIENTS" \
                           "${DURATION%s}" "$BLOB") \
        || die "pg-insert failed (10 MB)"
    PG_UP=$(awk -v n="$n" -v s="$BIG" -v t="$secs" \
                'BEGIN { printf "%.1f", n * s / t / 1e6 }')

    psql -X -q -d "$DB" -c "DELETE FROM $BLOB WHERE ctid <> (SELECT min(ctid)
                                                            FROM $BLOB)" \
        >/dev/null
    read -r n secs < <("$W/pg-insert" "$DB" "$f" "$PG_CLIENTS" \
                           "${DURATION%s}" "$BLOB" read) \
        || die "pg-insert read failed (10 MB)"
    PG_DOWN=$(awk -v n="$n" -v s="$BIG" -v t="$secs" \
                  'BEGIN { printf "%.1f", n * s / t / 1e6 }')
    log "PostgreSQL alone, $PG_CLIENTS clients, 10 MB: INSERT $PG_UP MB/s," \
        "SELECT $PG_DOWN MB/s"

    purge_images
}


# --- run -------------------------------------------------------------------

"$SESSIONCTL" -d "$DB" migrate >/dev/null || die "sessionctl migrate failed"

cc -O2 -I"$(pg_config --includedir)" -o "$W/pg-insert" \
    "$ROOT/bench/pg-insert.c" -lpq || die "cannot build bench/pg-insert.c"

psql -X -q -d "$DB" -c "CREATE TABLE $BLOB (content bytea NOT NULL);
    ALTER TABLE $BLOB ALTER COLUMN content SET STORAGE EXTERNAL" >/dev/null

cp "$MODULE" "$W/ngx_http_session_module.so"
PORT=$(free_port) || die "no free port"

ACCOUNT=$(ctl account create "bench-images-$$" --plan unlimited \
              | json_field account_id)
PROJECT=$(ctl project create "$ACCOUNT" "bench-images-$$" \
              | json_field project_id)
KEY=$(ctl key create "$PROJECT" | json_field key)

write_conf
start_nginx

image_file 102400 "$W/img-100k"

part() {
    [[ $PARTS == *" $1 "* ]]
}

if part upload; then
    log "upload throughput: $ROUNDS x $DURATION, $CLIENTS clients," \
        "100 KB and 2 MB"
    throughput 100KB 102400
    throughput 2MB $((2 * 1024 * 1024))
fi

if part memory; then
    # a fresh nginx: "before" is a worker that has carried no large image
    restart_nginx

    log "worker RSS: $RSS_UPLOADS uploads of 5 MB, 8 at a time, then" \
        "downloads"
    rss_run
fi

if part stream; then
    log "streamed: $CONCURRENCY transfers of 10 MB at once, up then down"
    stream_run
fi

grep -E '\[(alert|crit|emerg)\]|signal [0-9]' "$W/error.log" >&2 \
    && die "the error log has alerts (above)"

report() {
    local l o b r growth

    echo "## Images"
    echo
    part upload || echo "(Not run: upload throughput.)"
    part memory || echo "(Not run: worker memory.)"
    part stream || echo "(Not run: streamed transfers.)"
    part upload && part memory && part stream || echo

    part upload || { report_memory; return; }

    echo "Upload throughput (\`util/bench-images.sh\`): wrk, $CLIENTS"
    echo "connections (one session each), POST of the same file for"
    echo "$DURATION; against \`bench/pg-insert\`, $CLIENTS clients each"
    echo "inserting the same bytes as a binary \`bytea\` parameter (autocommit,"
    echo "\`STORAGE EXTERNAL\` as \`images.content\`). MB = 10^6 bytes;"
    echo "median of $ROUNDS runs; nginx with $WORKERS workers, 4 database"
    echo "connections each."
    echo
    echo "| image | nginx upload MB/s | PostgreSQL INSERT MB/s | ratio | goal ≥ 0.6 | runs nginx / PostgreSQL |"
    echo "|---|---:|---:|---:|---|---|"
    for l in 100KB 2MB; do
        o=$(median <<<"${OURS[$l]}")
        b=$(median <<<"${BASE[$l]}")
        r=$(ratio "$o" "$b")
        printf '| %s | %s | %s | %s | %s | %s/ %s|\n' "$l" "$o" "$b" "$r" \
            "$(goal "$r" 0.6)" "${OURS[$l]}" "${BASE[$l]}"
    done
    echo
    report_memory
}

report_memory() {
    local growth n

    part memory || { report_stream; return; }

    growth=$(awk -v a="$RSS_AFTER_DOWN" -v b="$RSS_BEFORE" \
                 'BEGIN { printf "%.1f", (a - b) * 100 / b }')
    echo "Worker memory: summed RSS of the $WORKERS workers (kB) around"
    echo "$RSS_UPLOADS uploads of 5 MB (8 at a time) and as many downloads:"
    echo
    echo "| before | peak (0.2 s samples) | after the uploads | after the downloads | growth | goal ≤ 10% |"
    echo "|---:|---:|---:|---:|---:|---|"
    printf '| %s | %s | %s | %s | %s%% | %s |\n' "$RSS_BEFORE" "$RSS_PEAK" \
        "$RSS_AFTER_UP" "$RSS_AFTER_DOWN" "$growth" \
        "$(awk -v g="$growth" 'BEGIN { print (g <= 10) ? "met" : "NOT met" }')"
    echo
    report_stream
}

report_stream() {
    local n

    part stream || return 0

    echo "Streamed transfers of 10 MB (\`bench/image-load.pl\`): N at once,"
    echo "uploads then downloads of the same images; MB/s of the whole run;"
    echo "the workers' RSS growth (peak of 0.1 s samples less the idle RSS)"
    echo "over N. PostgreSQL alone: \`bench/pg-insert\`, $PG_CLIENTS clients"
    echo "inserting (selecting) the same 10 MB as a binary \`bytea\` for"
    echo "$DURATION: $PG_UP MB/s in, $PG_DOWN MB/s out. Downloads: the"
    echo "median of $((DOWN_ROUNDS + 1)) runs, each followed by the \`SELECT\`s"
    echo "for ${PG_READ}s, whose median is the row's anchor."
    echo
    echo "| N at once | upload MB/s | ratio to INSERT (≥ 0.6) | RSS per upload KB (≤ 256) | download MB/s | ratio to SELECT (≥ 0.6) | RSS per download KB (≤ 256) |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    for n in $CONCURRENCY; do
        printf '| %s | %s | %s %s | %s %s | %s | %s %s | %s %s |\n' "$n" \
            "${ST_UP[$n]}" "$(ratio "${ST_UP[$n]}" "$PG_UP")" \
            "$(goal "$(ratio "${ST_UP[$n]}" "$PG_UP")" 0.6)" \
            "${ST_RSS_UP[$n]}" "$(le "${ST_RSS_UP[$n]}" 256)" \
            "${ST_DOWN[$n]}" "$(ratio "${ST_DOWN[$n]}" "${ST_PG_DOWN[$n]}")" \
            "$(goal "$(ratio "${ST_DOWN[$n]}" "${ST_PG_DOWN[$n]}")" 0.6)" \
            "${ST_RSS_DOWN[$n]}" "$(le "${ST_RSS_DOWN[$n]}" 256)"
    done
    echo
    for n in $CONCURRENCY; do
        echo "Downloads of $n at once, MB/s: ${ST_DOWN_RUNS[$n]}; the"
        echo "\`SELECT\`s after each: ${ST_PG_RUNS[$n]}."
    done
    echo
    echo "Time to the first byte of a download (curl, median of 20 one after"
    echo "another): 10 MB $TTFB_BIG ms, 1 KB $TTFB_SMALL ms, ratio"
    echo "$(ratio "$TTFB_BIG" "$TTFB_SMALL") (goal ≤ 2:"
    echo "$(le "$(ratio "$TTFB_BIG" "$TTFB_SMALL")" 2))."
    echo
    echo "$SMALL_N uploads of 100 KB at once (each gathered in memory,"
    echo "\`session_body_buffer_size\`, and sent whole): $SMALL_UP MB/s, RSS"
    echo "growth $SMALL_RSS KB per upload (≤ 256:"
    echo "$(le "$SMALL_RSS" 256))."
}

# "met" when $1 <= $2
le() {
    awk -v v="$1" -v g="$2" 'BEGIN { print (v <= g) ? "met" : "NOT met" }'
}

if [ "$OUT" = - ]; then
    report
else
    report > "$OUT"
fi
