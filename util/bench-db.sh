#!/usr/bin/env bash
# The database paths against their anchor: every endpoint that
# touches PostgreSQL, driven by wrk, beside pgbench running the plainest
# statement that does the same database work, with as many clients as
# the module holds connections (worker_processes x
# session_db_connections), in one run, rounds alternating in order.
# Prints a Markdown table of requests/s and p99 with their ratios.
#
#   bash util/bench-db.sh                 a throw-away PostgreSQL
#   BENCH_SESSION_DB="..." bash util/bench-db.sh    an existing one
#
# util/bench.sh runs it as part of "make bench".  The throw-away cluster
# runs with fsync=on, as a real one does (pg_virtualenv's default is
# off), so that a commit waits for its flush on both sides.  Everything
# is on loopback and bounded: each run is BENCH_DURATION long, 60 runs a
# round.
#
# Two more tables put the p99 at 8 connections in context (decision (ne)):
# the floor, nginx alone serving each read's answer from a file with the
# same wrk (no module, no database: what no HTTP answer here can beat),
# and the reads at one fixed rate below saturation, bench/http-rate beside
# "pgbench -R", both timed from each request's scheduled start.
#
# Environment:
#   BENCH_DURATION        one run (default 5s)
#   BENCH_DB_ROUNDS       rounds; the median is reported (default 3)
#   BENCH_WORKERS         nginx worker_processes (default 2)
#   BENCH_DB_CONNECTIONS  session_db_connections (default 4)
#   BENCH_DB_BATCH        session_db_batch (default 16, the directive's;
#                         1 sends every statement alone)
#   BENCH_DB_WRK_CONNECTIONS  wrk connections of the throughput runs
#                         (default 64: a busy service, more requests
#                         than database connections)
#   BENCH_DB_LAT_CONNECTIONS  wrk connections of the latency runs
#                         (default: as many as pgbench has clients)
#   BENCH_THREADS         wrk threads and pgbench jobs (default 2)
#   BENCH_DB_ONLY         a comma list of scenario names (create,
#                         create-key, create-quota, list, get, complete,
#                         upload, image-list, image, content, ack, poll)
#   BENCH_DB_OUT          write the table here (default: standard output)
#   BENCH_KEEP            keep the scratch directory
#   BENCH_DB_HOLD         a file name: after the set-up, write there the
#                         shell variables of the stack (PORT, W, DB, the
#                         fixtures' ids) and keep it up while the file
#                         exists (at most 30 minutes), for experiments;
#                         no runs
#   BENCH_DB_RATE         requests/s: every endpoint also runs at a fixed
#                         rate, bench/http-rate against "pgbench -R", the
#                         p50, p99 and the servers' CPU time per request
#                         of both at the same load; the reads
#                         at this rate (default 5000, a fifth of what the
#                         module does at 8 connections; 0: no fixed-rate
#                         runs)
#   BENCH_DB_WRITE_RATE   the rate of the endpoints that commit (default
#                         1000: half of what the slowest, the upload,
#                         does at 64 connections)
#   BENCH_DB_MODE         "cost": only the fixed-rate runs (no wrk), for
#                         the CPU-per-request table alone: 2 runs of
#                         BENCH_DURATION per endpoint and one per rate of
#                         "return 200", about 2.5 minutes a round at 5 s
#                         (default "all": everything)
#   BENCH_DB_CLIENT_CPUS  a CPU list (taskset -c): wrk, bench/http-rate and
#                         pgbench run there, and everything else (nginx,
#                         PostgreSQL) on the other CPUs, so that the load
#                         generators do not take CPU time from what they
#                         measure (default 0 when there are 2 CPUs or
#                         more, decision (nh); "none": no pinning)
#   BENCH_PORTS           LOW-HIGH: the range nginx's and the throw-away
#                         cluster's ports are drawn from (default
#                         20000-39999)
#   BENCH_DB_PERF         a path prefix: "perf record -a" (the whole
#                         machine) for 3 s in the middle of each run, to
#                         PREFIX.RUN (for "perf report -i ... --sort
#                         comm,dso"; needs perf)
#   BENCH_DB_ANCHOR_NOTIFY  1 (default): pgbench's complete and upload
#                         send the NOTIFY a plain server would send for
#                         every write; 0: the bare statements, without
#                         it, as the module's writes into sessions no
#                         poll marked (decision (yf))
#   BENCH_DB_SOCKET       a directory (/var/run/postgresql): the module and
#                         pgbench reach the throw-away cluster through its
#                         Unix socket there, not TCP on 127.0.0.1, as a
#                         node beside its database may
#   SESSION_MODULE        another build of the module (as util/chaos.sh):
#                         an older one runs on this tree's schema, which
#                         is how a migration's additivity is exercised and
#                         how before and after are measured alike
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
MODULE=${SESSION_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl

DURATION=${BENCH_DURATION:-5s}
ROUNDS=${BENCH_DB_ROUNDS:-3}
WORKERS=${BENCH_WORKERS:-2}
DB_CONNS_PER_WORKER=${BENCH_DB_CONNECTIONS:-4}
DB_BATCH=${BENCH_DB_BATCH:-16}
CLIENTS=$((WORKERS * DB_CONNS_PER_WORKER))
WRK_CONNS=${BENCH_DB_WRK_CONNECTIONS:-64}
LAT_CONNS=${BENCH_DB_LAT_CONNECTIONS:-$CLIENTS}
THREADS=${BENCH_THREADS:-2}
ONLY=${BENCH_DB_ONLY:-}
OUT=${BENCH_DB_OUT:--}
PERF_OUT=${BENCH_DB_PERF:-}
RATE=${BENCH_DB_RATE:-5000}
WRITE_RATE=${BENCH_DB_WRITE_RATE:-1000}
MODE=${BENCH_DB_MODE:-all}
# the anchors' NOTIFY of a complete and an upload (see above)
NOTIFY_COMPLETE=", pg_notify('session_events', 'completed:' || id::text)"
NOTIFY_UPLOAD=", pg_notify('session_events', 'uploaded:' || session_id::text)"
if [ "${BENCH_DB_ANCHOR_NOTIFY:-1}" = 0 ]; then
    NOTIFY_COMPLETE=
    NOTIFY_UPLOAD=
fi
case $MODE in
    all|cost) ;;
    *) echo "bench-db.sh: BENCH_DB_MODE is all or cost" >&2; exit 1 ;;
esac
# the load generators on CPU 0, the servers on the others, when there are
# others (decision (nh)); "none": no pinning
CLIENT_CPUS=${BENCH_DB_CLIENT_CPUS:-auto}
if [ "$CLIENT_CPUS" = auto ]; then
    CLIENT_CPUS=
    [ "$(nproc)" -ge 2 ] && CLIENT_CPUS=0
elif [ "$CLIENT_CPUS" = none ]; then
    CLIENT_CPUS=
fi
# resolved once: the run inside pg_virtualenv has only the servers' CPUs
export BENCH_DB_CLIENT_CPUS=${CLIENT_CPUS:-none}
[ "$RATE" != 0 ] || RATE=

# accounts of the quota scenario, and rows a "once" scenario may use up
QUOTA_ACCOUNTS=40
ONCE_ROWS=${BENCH_DB_ONCE_ROWS:-40000}

die() {
    echo "bench-db.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-db.sh: $*" >&2
}

# cpu_list SPEC: the CPUs of a taskset list ("0-2,5"), one a line
cpu_list() {
    local part
    local -a parts
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        [[ $part =~ ^([0-9]+)(-([0-9]+))?$ ]] || return 1
        seq "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}"
    done
}

# with BENCH_DB_CLIENT_CPUS: SERVER_PIN, the taskset for nginx and the
# cluster, on the CPUs of this process that the clients leave (the clients
# pin themselves again)
pin_setup() {
    local mine clients rest

    SERVER_PIN=
    SERVER_CPUS=
    [ -n "$CLIENT_CPUS" ] || return 0

    command -v taskset >/dev/null 2>&1 || die "taskset not found (util-linux)"
    mine=$(cpu_list "$(taskset -cp $$ | sed 's/.*: //')") \
        || die "cannot read this process's CPUs"
    clients=$(cpu_list "$CLIENT_CPUS") \
        || die "bad BENCH_DB_CLIENT_CPUS: $CLIENT_CPUS"
    rest=$(comm -23 <(sort <<<"$mine") <(sort <<<"$clients") \
           | sort -n | paste -sd,)
    [ -n "$rest" ] || die "BENCH_DB_CLIENT_CPUS leaves no CPU for the servers"

    SERVER_CPUS=$rest
    SERVER_PIN="taskset -c $rest"
    export SERVER_PIN
    log "clients on CPUs $CLIENT_CPUS, nginx and PostgreSQL on $rest"
}

# pin_cluster: with SERVER_PIN, PostgreSQL's postmaster and the processes
# it has started there too (its backends to come inherit it): a cluster
# given by BENCH_SESSION_DB was not started under SERVER_PIN
pin_cluster() {
    local backend postmaster p

    [ -n "$SERVER_PIN" ] || return 0

    # the checkpointer lives as long as the postmaster, its parent
    backend=$(sql "SELECT pid FROM pg_stat_activity
                   WHERE backend_type = 'checkpointer'") || backend=
    postmaster=
    if [ -n "$backend" ]; then
        postmaster=$(ps -o ppid= -p "$backend" 2>/dev/null || true)
        postmaster=${postmaster// /}
    fi

    # a cluster on another machine: no local postmaster of that pid
    [ -n "$postmaster" ] \
        && grep -q postgres "/proc/$postmaster/cmdline" 2>/dev/null \
        || { log "PostgreSQL's processes not found: left unpinned"; return 0; }

    for p in "$postmaster" $(pgrep -P "$postmaster"); do
        taskset -c -p "$SERVER_CPUS" "$p" >/dev/null 2>&1 || true
    done
}

# client COMMAND...: a load generator, on BENCH_DB_CLIENT_CPUS if given
client() {
    if [ -n "$CLIENT_CPUS" ]; then
        taskset -c "$CLIENT_CPUS" "$@"
    else
        "$@"
    fi
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

W=
DB=
PORT=
NGINX_UP=


wanted() {
    [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]
}


# --- fixtures --------------------------------------------------------------

# new_project PLAN NAME: "account project key" of a new account
new_project() {
    local a p k
    a=$(ctl account create "$2" --plan "$1" | json_field account_id)
    p=$(ctl project create "$a" "$2" | json_field project_id)
    k=$(ctl key create "$p" | json_field key)
    echo "$a $p $k"
}

# sessions PROJECT N FILE: N open long_poll sessions, their ids to FILE
sessions() {
    sql "INSERT INTO sessions (project_id, delivery_mode, expires_at)
         SELECT '$1', 'long_poll', now() + interval '1 day'
         FROM generate_series(1, $2) RETURNING id" > "$3"
}

# images SESSIONS_FILE PER FILE [paths]: PER unacknowledged images in each
# session of SESSIONS_FILE (image_count kept right), their ids to FILE
# (with "paths": "<sid>/images/<iid>")
images() {
    local list ret=id
    [ "${4:-}" = paths ] && ret="session_id || '/images/' || id"
    list=$(sed "s/.*/'&'/" "$1" | paste -sd,)
    sql "UPDATE sessions SET image_count = image_count + $2
         WHERE id IN ($list)" >/dev/null
    sql "INSERT INTO images (session_id, sequence, content_type, size,
                             sha256, content)
         SELECT s.id, g, 'image/gif', $BODY_LEN,
                sha256('\\x$BODY_HEX'::bytea), '\\x$BODY_HEX'::bytea
         FROM unnest(ARRAY[$list]::uuid[]) s(id),
              generate_series(1, $2) g
         RETURNING $ret" > "$3"
}

fixtures() {
    local i

    # a 1 KiB GIF: the signature, then filler
    BODY=$W/body.gif
    { printf 'GIF89a'; head -c 1018 /dev/zero | tr '\0' 'x'; } > "$BODY"
    BODY_LEN=$(stat -c %s "$BODY")
    BODY_HEX=$(od -An -v -tx1 "$BODY" | tr -d ' \n')

    read -r _ PROJECT KEY <<<"$(new_project unlimited bench-db)"
    echo "$KEY" > "$W/key"

    ctl plan set bench-quota --quota 1000000000 \
        --features long_poll,webhook >/dev/null
    : > "$W/quota-keys"
    : > "$W/quota-projects"
    for i in $(seq "$QUOTA_ACCOUNTS"); do
        read -r a p k <<<"$(new_project bench-quota "bench-db-quota-$i")"
        echo "$k" >> "$W/quota-keys"
        echo "$a $p" >> "$W/quota-projects"
    done

    # the rest of a busy service, so that both sides query tables of a
    # real size (a table of a hundred rows gets a sequential scan and a
    # sort): 500 sessions in each quota project, 10 images in 2,000 of them
    cut -d' ' -f2 "$W/quota-projects" > "$W/quota-project-ids"
    while read -r p; do
        sessions "$p" 500 "$W/other-$p"
    done < "$W/quota-project-ids"
    cat "$W"/other-* | awk 'NR % 10 == 0' > "$W/image-others"
    images "$W/image-others" 10 /dev/null
    rm -f "$W"/other-* "$W/image-others"

    # 100 sessions to list and read, 8 to upload into
    sessions "$PROJECT" 100 "$W/sessions"
    head -8 "$W/sessions" > "$W/get-ids"
    sessions "$PROJECT" 8 "$W/upload-ids"

    # a session of 30 images: listed, read, downloaded and polled
    sessions "$PROJECT" 1 "$W/image-session"
    IMAGE_SESSION=$(cat "$W/image-session")
    images "$W/image-session" 30 "$W/image-all"
    head -8 "$W/image-all" > "$W/image-ids"

    # the anchor's fixed rows for complete and ack: 8 each
    sessions "$PROJECT" 8 "$W/pg-complete-ids"
    sessions "$PROJECT" 8 "$W/pg-ack-sessions"
    images "$W/pg-ack-sessions" 1 "$W/pg-ack-ids"

    sql "ANALYZE" >/dev/null
}

# fresh rows for a "once" scenario of the module, vacuumed and analyzed,
# so that autovacuum does not take them on in the middle of a run
fresh_complete() {
    sessions "$PROJECT" "$ONCE_ROWS" "$W/once-ids"
    sql "VACUUM ANALYZE sessions" >/dev/null
}

fresh_ack() {
    sessions "$PROJECT" $((ONCE_ROWS / 100)) "$W/once-sessions"
    images "$W/once-sessions" 100 "$W/once-ids" paths
    sql "VACUUM ANALYZE sessions" >/dev/null
    sql "VACUUM ANALYZE images" >/dev/null
}

# fresh_pg KEY: for the fixed-rate runs of complete and ack, fresh rows
# for pgbench too, as many as the module gets, so that both sides change
# rows nobody has changed since the checkpoint before the run (the
# throughput anchor repeats the change on 8 fixed rows, which stay in
# cache and take a full-page image in the WAL once); their ids are made
# from a number, "00000000-0000-4000-8000-<12 digits>" (sessions) and
# "...-9000-..." (images), which pgbench draws at random and the statement
# turns into the uuid; pg-KEY-fresh.sql is the script
PG_FRESH=0
fresh_pg() {
    local key=$1 lo hi s i

    # the uuid of number N: "(S || lpad(N::text, 12, '0'))::uuid"
    s="'00000000-0000-4000-8000-'"
    i="'00000000-0000-4000-9000-'"
    lo=$((PG_FRESH + 1))
    hi=$((PG_FRESH + ONCE_ROWS))
    PG_FRESH=$hi

    case $key in
    complete)
        sql "INSERT INTO sessions (id, project_id, delivery_mode, expires_at)
             SELECT ($s || lpad(g::text, 12, '0'))::uuid,
                    '$PROJECT', 'long_poll', now() + interval '1 day'
             FROM generate_series($lo, $hi) g" >/dev/null
        script complete-fresh "\\set n random($lo, $hi)
UPDATE sessions
    SET status = 'completed', completed_at = now()
    WHERE id = ($s || lpad(:n::text, 12, '0'))::uuid
    RETURNING $SESSION_COLS$NOTIFY_COMPLETE;" ;;
    ack)
        # a session for every 100 images, as the module's fresh rows
        sql "INSERT INTO sessions (id, project_id, delivery_mode, expires_at,
                                   image_count)
             SELECT ($s || lpad(g::text, 12, '0'))::uuid,
                    '$PROJECT', 'long_poll', now() + interval '1 day', 100
             FROM generate_series($lo, $hi, 100) g" >/dev/null
        sql "INSERT INTO images (id, session_id, sequence, content_type, size,
                                 sha256, content)
             SELECT ($i || lpad(g::text, 12, '0'))::uuid,
                    ($s || lpad(($lo + (g - $lo) / 100 * 100)::text,
                                 12, '0'))::uuid,
                    (g - $lo) % 100 + 1, 'image/gif', $BODY_LEN,
                    sha256('\\x$BODY_HEX'::bytea), '\\x$BODY_HEX'::bytea
             FROM generate_series($lo, $hi) g" >/dev/null
        script ack-fresh "\\set n random($lo, $hi)
WITH a AS (
    UPDATE images SET acknowledged_at = now()
    WHERE id = ($i || lpad(:n::text, 12, '0'))::uuid
    RETURNING session_id)
UPDATE sessions SET acknowledged_count = acknowledged_count + 1
WHERE id IN (SELECT session_id FROM a);"
        sql "VACUUM ANALYZE images" >/dev/null ;;
    esac

    sql "VACUUM ANALYZE sessions" >/dev/null
}

# before each run: the dirty pages of the runs and fixtures before it
# written out, so that no checkpoint they started lands in this run
# (the commits of whichever side ran then would wait for its I/O)
settle() {
    sql "CHECKPOINT" >/dev/null 2>&1 || true
}


# --- pgbench scripts ---------------------------------------------------------

# script NAME SQL: bench/ scratch file NAME.sql
script() {
    printf '%s\n' "$2" > "$W/pg-$1.sql"
}

# scripts NAME IDS_FILE TEMPLATE: one script per id ("@ID@" in TEMPLATE),
# chosen at random by pgbench
scripts() {
    local name=$1 ids=$2 tpl=$3 n=0 id
    while read -r id; do
        n=$((n + 1))
        printf '%s\n' "${tpl//@ID@/$id}" > "$W/pg-$name-$n.sql"
    done < "$ids"
}

SESSION_COLS="id, project_id, delivery_mode, webhook_url, status,
    image_count, acknowledged_count, created_at, expires_at, completed_at"
IMAGE_COLS="id, session_id, sequence, content_type, size, sha256,
    created_at, acknowledged_at"

pg_scripts() {
    local n a p

    script create "INSERT INTO sessions (project_id, delivery_mode,
        created_at, expires_at)
    VALUES ('$PROJECT', 'long_poll', clock_timestamp(),
            clock_timestamp() + interval '1 hour')
    RETURNING $SESSION_COLS;"

    # the quota: the account's usage row counted, then the insert
    n=0
    while read -r a p; do
        n=$((n + 1))
        script "create-quota-$n" "WITH u AS (
        INSERT INTO monthly_usage AS u (account_id, month, sessions_created)
        VALUES ('$a', date_trunc('month', now() AT TIME ZONE 'UTC')::date, 1)
        ON CONFLICT (account_id, month) DO UPDATE
            SET sessions_created = u.sessions_created + 1
            WHERE u.sessions_created < 1000000000
        RETURNING 1)
    INSERT INTO sessions (project_id, delivery_mode, created_at, expires_at)
    SELECT '$p', 'long_poll', clock_timestamp(),
           clock_timestamp() + interval '1 hour' FROM u
    RETURNING $SESSION_COLS;"
    done < "$W/quota-projects"

    script list "SELECT $SESSION_COLS FROM sessions
    WHERE project_id = '$PROJECT'
    ORDER BY created_at DESC, id DESC LIMIT 21;"

    scripts get "$W/get-ids" "SELECT $SESSION_COLS FROM sessions
    WHERE id = '@ID@';"

    scripts complete "$W/pg-complete-ids" "UPDATE sessions
    SET status = 'completed', completed_at = now() WHERE id = '@ID@'
    RETURNING $SESSION_COLS$NOTIFY_COMPLETE;"

    scripts upload "$W/upload-ids" "WITH s AS (
        UPDATE sessions SET image_count = image_count + 1
        WHERE id = '@ID@' RETURNING id, image_count)
    INSERT INTO images (session_id, sequence, content_type, size, sha256,
                        content)
    SELECT s.id, s.image_count, 'image/gif', octet_length(:body::bytea),
           sha256(:body::bytea), :body::bytea FROM s
    RETURNING $IMAGE_COLS$NOTIFY_UPLOAD;"

    script image-list "SELECT $IMAGE_COLS FROM images
    WHERE session_id = '$IMAGE_SESSION' ORDER BY sequence LIMIT 21;"

    scripts image "$W/image-ids" "SELECT $IMAGE_COLS FROM images
    WHERE id = '@ID@';"

    scripts content "$W/image-ids" "SELECT content_type, sha256, size,
    content FROM images WHERE id = '@ID@';"

    scripts ack "$W/pg-ack-ids" "WITH a AS (
        UPDATE images SET acknowledged_at = now() WHERE id = '@ID@'
        RETURNING session_id)
    UPDATE sessions SET acknowledged_count = acknowledged_count + 1
    WHERE id IN (SELECT session_id FROM a);"

    script poll "SELECT s.id, s.project_id, s.delivery_mode, s.webhook_url,
        s.status, s.image_count, s.acknowledged_count, s.created_at,
        s.expires_at, s.completed_at, i.*
    FROM sessions s
    LEFT JOIN LATERAL (SELECT $IMAGE_COLS FROM images
                       WHERE session_id = s.id AND acknowledged_at IS NULL
                       ORDER BY sequence LIMIT 100) i ON true
    WHERE s.id = '$IMAGE_SESSION';"
}


# --- runs ----------------------------------------------------------------------

declare -A RPS P99 P50 ACH CPU_N CPU_P CPU_B CPU_T CPU_L

# "1.23ms" / "456.78us" / "1.01s" -> milliseconds
to_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0;
        if (v ~ /us$/) n /= 1000;
        else if (v ~ /ms$/) n = n;
        else if (v ~ /m$/) n *= 60000;
        else if (v ~ /s$/) n *= 1000;
        printf "%.2f", n }'
}

duration_s() {
    case $1 in
        *ms) echo 1 ;;
        *s) echo "${1%s}" ;;
        *m) echo $(( ${1%m} * 60 )) ;;
        *) echo "$1" ;;
    esac
}

# profile NAME: with BENCH_DB_PERF, a whole-machine profile of 3 s from
# 1 s into the run that starts now, in the background
profile() {
    [ -n "$PERF_OUT" ] || return 0
    ( sleep 1
      perf record -q -a -g -F 1999 -o "$PERF_OUT.$1" -- sleep 3 \
          </dev/null >/dev/null 2>&1 ) &
}

# module NAME CONNECTIONS: wrk with the request shape in the BENCH_*
# environment
module() {
    local name=$1 conns=$2 out rps p99 total non2xx

    settle
    profile "$name"
    out=$(BENCH_THREADS=$THREADS client wrk -t"$THREADS" -c"$conns" \
              -d"$DURATION" --latency -s "$ROOT/bench/db-request.lua" \
              "http://127.0.0.1:$PORT" 2>&1) \
        || { echo "$out" >&2; die "wrk failed ($name)"; }

    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    total=$(awk '/requests in/ { print $1 }' <<<"$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $5 }' <<<"$out")

    [ -n "$rps" ] && [ -n "$p99" ] \
        || { echo "$out" >&2; die "no Requests/sec or p99 ($name)"; }
    [ -z "$non2xx" ] \
        || die "$name: $non2xx of $total answers were not 2xx"

    p99=$(to_ms "$p99")
    RPS[$name]+="$rps "
    P99[$name]+="$p99 "
    log "$name: $rps requests/s, p99 $p99 ms"
}

# pgbench_p99 DECIMALS: the p99 in ms of the transaction log pgbench
# left in $W/pgb.* (its third column, microseconds), which goes
pgbench_p99() {
    local p99

    p99=$(cat "$W"/pgb.* | awk '{ print $3 }' | sort -n | awk -v d="$1" '
        { v[NR] = $1 }
        END { if (NR == 0) exit 1;
              i = int(NR * 0.99); if (i < NR * 0.99) i++;
              printf "%.*f", d, v[i] / 1000 }') || return 1
    rm -f "$W"/pgb.*
    echo "$p99"
}

# pgbench_run NAME FILE_PREFIX [ARGS...]: pgbench over every
# pg-FILE_PREFIX*.sql with the anchor's clients, threads and duration, its
# transaction log in $W/pgb.* (see pgbench_p99), ARGS added; its output
pgbench_run() {
    local name=$1 prefix=$2 f
    local -a files=()

    shift 2

    for f in "$W"/pg-"$prefix".sql "$W"/pg-"$prefix"-[0-9]*.sql; do
        [ -f "$f" ] && files+=(-f "$f@1")
    done
    [ "${#files[@]}" -gt 0 ] || die "no pgbench script for $name"

    rm -f "$W"/pgb.*
    settle
    profile "$name"
    (cd "$W" && client pgbench -n -M prepared -c "$CLIENTS" \
         -j "$(( THREADS < CLIENTS ? THREADS : CLIENTS ))" \
         -T "$(duration_s "$DURATION")" -l --log-prefix=pgb \
         -D body="\\x$BODY_HEX" "$@" "${files[@]}" "$DB" 2>&1)
}

# anchor NAME FILE_PREFIX: pgbench over every pg-FILE_PREFIX*.sql
anchor() {
    local name=$1 prefix=$2 out tps p99

    out=$(pgbench_run "$name" "$prefix") \
        || { echo "$out" >&2; die "pgbench failed ($name)"; }

    if grep -Eq '^number of failed transactions: [1-9]' <<<"$out"; then
        echo "$out" >&2
        die "$name: pgbench transactions failed"
    fi

    tps=$(awk '/^tps = / { print $3; exit }' <<<"$out")
    p99=$(pgbench_p99 2) || die "$name: no pgbench transaction log"

    [ -n "$tps" ] || { echo "$out" >&2; die "no tps ($name)"; }

    RPS[$name]+="$tps "
    P99[$name]+="$p99 "
    log "$name: $tps transactions/s, p99 $p99 ms"
}

# FLOOR_KEYS: the scenarios whose answer nginx also serves alone, from a
# file of the same bytes: what no HTTP answer on this machine can beat
FLOOR_KEYS=" list get image-list image content poll "

# floor KEY: one answer of the scenario (its shape exported) saved, then
# wrk for it from nginx alone at both concurrencies
floor() {
    local key=$1 path id

    [[ $FLOOR_KEYS == *" $key "* ]] || return 0

    path=$BENCH_PATH
    if [ -n "$BENCH_IDS" ]; then
        id=$(head -1 "$BENCH_IDS")
        path=${path//%s/$id}
    fi
    mkdir -p "$W/floor"
    curl -sf -o "$W/floor/$key" \
        -H "Authorization: Bearer $(head -1 "$BENCH_KEYS")" \
        "http://127.0.0.1:$PORT$path" || die "floor: no answer for $key"

    export BENCH_PATH="/floor/$key" BENCH_IDS=
    module "floor-$key" "$WRK_CONNS"
    module "floorlat-$key" "$LAT_CONNS"
    shape "$key"
}

# --- the fixed rate: latency and CPU time per request -----------

# WRITE_KEYS: the scenarios that commit; they run at BENCH_DB_WRITE_RATE,
# the others at BENCH_DB_RATE
WRITE_KEYS=" create create-key create-quota complete upload ack "

rate_of() {
    if [[ $WRITE_KEYS == *" $1 "* ]]; then
        echo "$WRITE_RATE"
    else
        echo "$RATE"
    fi
}

# cpu_snap GROUP PID...: "GROUP PID NS" for each process still there: the
# scheduler's own count of nanoseconds on a CPU of all its threads
# (/proc/PID/task/*/schedstat; exact, where the user and system times of
# /proc/PID/stat are sampled at the clock tick)
cpu_snap() {
    local g=$1 p f
    local -a files=()

    shift
    for p in "$@"; do
        for f in /proc/"$p"/task/*/schedstat; do
            [ -e "$f" ] && files+=("$f")
        done
    done
    [ "${#files[@]}" -gt 0 ] || return 0

    # grep -s: a process that ended since is skipped, not an error
    grep -s -H '' "${files[@]}" | awk -v g="$g" '
        { split($0, a, "/"); split($0, b, ":"); split(b[2], v, " ");
          s[a[3]] += v[1] }
        END { for (p in s) print g, p, s[p] }'
}

# the PostgreSQL processes of a kind, by pg_stat_activity (psql's own
# backend is none of them)
pg_pids() {
    case $1 in
    module)
        sql "SELECT pid FROM pg_stat_activity
             WHERE application_name = 'nginx session pool'" ;;
    listen)
        sql "SELECT pid FROM pg_stat_activity
             WHERE application_name = 'nginx session listen'" ;;
    pgbench)
        sql "SELECT pid FROM pg_stat_activity
             WHERE application_name = 'pgbench'" ;;
    background)
        sql "SELECT pid FROM pg_stat_activity WHERE backend_type IN
             ('checkpointer', 'background writer', 'walwriter',
              'autovacuum launcher')" ;;
    esac
}

# cpu_pids SIDE: "GROUP PID" of what serves SIDE (module: nginx's workers,
# the backends of the module's pool and those of its LISTEN connections;
# pgbench: pgbench's backends; floor: nginx's workers), and of
# PostgreSQL's background writers
cpu_pids() {
    case $1 in
    module|floor) pgrep -P "$(cat "$W/nginx.pid")" | sed 's/^/nginx /' ;;
    esac
    case $1 in
    module|pgbench) pg_pids "$1" | sed 's/^/pg /' ;;
    esac
    [ "$1" != module ] || pg_pids listen | sed 's/^/pgl /'
    pg_pids background | sed 's/^/bg /'
}

# cpu_snapshot PIDS_FILE: the time, then the CPU counts of its processes
cpu_snapshot() {
    local g
    local -a pids
    date +%s.%N
    for g in nginx pg pgl bg; do
        mapfile -t pids < <(awk -v g="$g" '$1 == g { print $2 }' "$1")
        cpu_snap "$g" "${pids[@]}"
    done
}

# sleep_until EPOCH: sleeps until that time (seconds since the epoch)
sleep_until() {
    sleep "$(awk -v t="$1" -v n="$(date +%s.%N)" \
                 'BEGIN { d = t - n; printf "%.3f", (d > 0 ? d : 0) }')"
}

# cpu_window SIDE START OUT NAME: the CPU counts from 1 s after START
# (seconds since the epoch: when the run began) to 0.6 s before its end
# (BENCH_DURATION after START), kept in $W/cpu-NAME.*; OUT gets "T0 T1
# NGINX_NS PG_NS BACKGROUND_NS LISTEN_NS" (PG_NS with LISTEN_NS).  The
# processes of nginx's side are named before its run ($W/cpu-NAME.pids,
# cpu_pids_before), pgbench's backends 1 s into its run (they come with
# it): nothing connects to PostgreSQL inside the window but the sides
# (a psql there held the module's writes for 50-150 ms, decision (yd))
cpu_window() {
    local side=$1 start=$2 out=$3 snap=$W/cpu-$4

    sleep_until "$(awk -v s="$start" 'BEGIN { printf "%.3f", s + 1 }')"
    [ "$side" != pgbench ] || cpu_pids "$side" > "$snap.pids"
    cpu_snapshot "$snap.pids" > "$snap.0"
    sleep_until "$(awk -v s="$start" -v d="$(duration_s "$DURATION")" \
                       'BEGIN { printf "%.3f", s + d - 0.6 }')"
    cpu_snapshot "$snap.pids" > "$snap.1"
    awk 'FNR == 1 { t[FILENAME == ARGV[1]] = $1; next }
         FILENAME == ARGV[1] { c[$1 " " $2] = $3; next }
         { d[$1] += $3 - c[$1 " " $2] }
         END { printf "%s %s %.0f %.0f %.0f %.0f\n", t[1], t[0],
                      d["nginx"], d["pg"] + d["pgl"], d["bg"], d["pgl"] }' \
        "$snap.0" "$snap.1" > "$out"
}

# lat_pcts COLUMN FILE...: "p50 p99" in ms of the latencies in
# microseconds in COLUMN of the logs, both sides counted alike
lat_pcts() {
    local col=$1
    shift
    awk -v c="$col" '{ print $c }' "$@" | sort -n | awk '
        { v[NR] = $1 }
        END { if (NR == 0) exit 1;
              k = int(NR * 0.99); if (k < NR * 0.99) k++;
              printf "%.3f %.3f", v[int(NR / 2) + 1] / 1000, v[k] / 1000 }'
}

# rate_record NAME ANSWERS_IN_WINDOW ACHIEVED P50 P99: the CPU window of
# $W/cpu per answer, and the latencies, appended to NAME's lists
rate_record() {
    local name=$1 n=$2 t0 t1 ng pg bg pl

    [ "$n" -gt 0 ] || die "$name: no answers in the CPU window (from 1 s" \
        "into the run to 0.6 s before its end: BENCH_DURATION=$DURATION" \
        "leaves too little; 3s or more)"
    read -r t0 t1 ng pg bg pl < "$W/cpu"

    CPU_N[$name]+="$(per_req "$ng" "$n") "
    CPU_P[$name]+="$(per_req "$pg" "$n") "
    CPU_B[$name]+="$(per_req "$bg" "$n") "
    CPU_L[$name]+="$(per_req "$pl" "$n") "
    CPU_T[$name]+="$(per_req $((ng + pg)) "$n") "
    ACH[$name]+="$3 "
    P50[$name]+="$4 "
    P99[$name]+="$5 "
    log "$name: $n answers in" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s" \
        "of CPU window: nginx $ng ns, PostgreSQL $pg ns (LISTEN $pl)," \
        "background $bg ns; $3/s; p50 $4, p99 $5 ms"
}

# per_req NS N: microseconds per request
per_req() {
    awk -v v="$1" -v n="$2" 'BEGIN { printf "%.1f", v / 1000 / n }'
}

# rate_http NAME SIDE RATE: bench/http-rate at RATE with the shape in the
# BENCH_* environment, the CPU counted in the middle of the run
rate_http() {
    local name=$1 side=$2 rate=$3 out n sampler p50 p99
    local -a args=()

    if [ -n "$BENCH_IDS" ]; then
        awk -v p="$BENCH_PATH" '{ s = p; sub(/%s/, $0, s); print s }' \
            "$BENCH_IDS" > "$W/rate-paths"
    else
        echo "$BENCH_PATH" > "$W/rate-paths"
    fi

    [ "$BENCH_METHOD" = GET ] || args+=(-m "$BENCH_METHOD")
    [ -z "$BENCH_BODY" ] || args+=(-b "$BENCH_BODY")
    [ -z "$BENCH_CTYPE" ] || args+=(-t "$BENCH_CTYPE")
    [ "$(wc -l < "$BENCH_KEYS")" -le 1 ] || args+=(-K "$BENCH_KEYS")
    [ -z "$BENCH_IDEM" ] || args+=(-i)
    [ "$BENCH_PICK" != once ] || args+=(-o)

    settle
    rm -f "$W/rate.log" "$W/cpu"
    cpu_pids "$side" > "$W/cpu-$name.pids"
    ( cpu_window "$side" "$(date +%s.%N)" "$W/cpu" "$name" ) &
    sampler=$!
    out=$(client "$W/http-rate" "${args[@]}" -l "$W/rate.log" "$PORT" \
              "$rate" "$(duration_s "$DURATION")" "$LAT_CONNS" \
              "$(head -1 "$BENCH_KEYS")" "$W/rate-paths") \
        || { wait "$sampler" || true; die "http-rate failed ($name)"; }
    wait "$sampler" || die "$name: no CPU counts"

    # a process that came during the run (a connection opened again) is
    # not counted: said, not hidden
    cpu_pids "$side" | sort | cmp -s - <(sort "$W/cpu-$name.pids") \
        || log "$name: nginx's or PostgreSQL's processes changed during" \
               "the run; its CPU figures miss the new ones"

    read -r _ _ _ _ bad achieved <<<"$out"
    [ "$bad" = 0 ] || die "$name: $bad answers were not 2xx"

    n=$(awk -v a="$(cut -d' ' -f1 "$W/cpu")" -v b="$(cut -d' ' -f2 "$W/cpu")" \
            '$1 >= a && $1 < b { n++ } END { print n + 0 }' "$W/rate.log")
    read -r p50 p99 <<<"$(lat_pcts 2 "$W/rate.log")"
    rate_record "$name" "$n" "$achieved" "$p50" "$p99"
}

# rate_pgbench NAME FILE_PREFIX RATE: pgbench -R RATE over the scripts,
# its backends' CPU counted in the middle of the run (from 1 s after its
# log files appear)
rate_pgbench() {
    local name=$1 prefix=$2 rate=$3 out n tps sampler p50 p99

    rm -f "$W"/pgb.* "$W/cpu"
    ( for _ in $(seq 600); do
          compgen -G "$W/pgb.*" >/dev/null && break
          sleep 0.05
      done
      cpu_window pgbench "$(date +%s.%N)" "$W/cpu" "$name" ) &
    sampler=$!
    out=$(pgbench_run "$name" "$prefix" -R "$rate") \
        || { echo "$out" >&2; wait "$sampler" || true
             die "pgbench -R failed ($name)"; }
    wait "$sampler" || die "$name: no CPU counts"

    if grep -Eq '^number of failed transactions: [1-9]' <<<"$out"; then
        echo "$out" >&2
        die "$name: pgbench transactions failed"
    fi
    tps=$(awk '/^tps = / { printf "%.1f", $3; exit }' <<<"$out")

    # pgbench's log: client, transaction, latency (us, from the scheduled
    # start under -R), script, end time (s, us), lag
    n=$(cat "$W"/pgb.* | awk -v a="$(cut -d' ' -f1 "$W/cpu")" \
            -v b="$(cut -d' ' -f2 "$W/cpu")" \
            '{ t = $5 + $6 / 1e6 } t >= a && t < b { n++ }
             END { print n + 0 }')
    read -r p50 p99 <<<"$(lat_pcts 3 "$W"/pgb.*)"
    rate_record "$name" "$n" "$tps" "$p50" "$p99"
    rm -f "$W"/pgb.*
}

# rated KEY FILE_PREFIX [FIRST]: with BENCH_DB_RATE, the scenario at its
# fixed rate (rate_of): bench/http-rate with as many connections as the
# latency runs, and pgbench -R with its clients, FIRST (module or
# pgbench) first; p50, p99 and CPU time per request of both
rated() {
    local key=$1 prefix=$2 first=${3:-module} rate pg

    [ -n "$RATE" ] || return 0
    rate=$(rate_of "$key")

    # complete and ack change fresh rows on both sides (fresh_pg)
    case $key in
    complete|ack) pg=$key-fresh ;;
    *) pg=$prefix ;;
    esac

    if [ "$first" = pgbench ]; then
        [ "$pg" = "$prefix" ] || fresh_pg "$key"
        rate_pgbench "pgrate-$key" "$pg" "$rate"
    fi

    # fresh rows for a "once" scenario
    shape "$key"
    rate_http "rate-$key" module "$rate"

    if [ "$first" != pgbench ]; then
        [ "$pg" = "$prefix" ] || fresh_pg "$key"
        rate_pgbench "pgrate-$key" "$pg" "$rate"
    fi
}

# rated_floor: nginx's "return 200" at each rate of the fixed-rate runs,
# its workers' CPU per request: the floor of the nginx column
rated_floor() {
    local r

    [ -n "$RATE" ] || return 0

    for r in $(printf '%s\n' "$RATE" "$WRITE_RATE" | sort -nu); do
        export BENCH_METHOD=GET BENCH_PICK=random BENCH_IDS='' BENCH_BODY='' \
               BENCH_CTYPE='' BENCH_KEYS="$W/key" BENCH_IDEM='' BENCH_PATH=/ok
        rate_http "floor-ok-$r" floor "$r"
    done
}

# the request shape of a scenario, as db-request.lua reads it
shape() {
    local scenario=$1
    export BENCH_METHOD=GET BENCH_PICK=random BENCH_IDS='' BENCH_BODY='' \
           BENCH_CTYPE='' BENCH_KEYS="$W/key" BENCH_IDEM=''

    case $scenario in
    create)
        export BENCH_METHOD=POST BENCH_PATH=/api/v1/sessions \
               BENCH_BODY="$W/create.json" BENCH_CTYPE=application/json ;;
    create-key)
        export BENCH_METHOD=POST BENCH_PATH=/api/v1/sessions \
               BENCH_BODY="$W/create.json" BENCH_CTYPE=application/json \
               BENCH_IDEM=1 ;;
    create-quota)
        export BENCH_METHOD=POST BENCH_PATH=/api/v1/sessions \
               BENCH_BODY="$W/create.json" BENCH_CTYPE=application/json \
               BENCH_KEYS="$W/quota-keys" ;;
    list)
        export BENCH_PATH='/api/v1/sessions?limit=20' ;;
    get)
        export BENCH_PATH=/api/v1/sessions/%s BENCH_IDS="$W/get-ids" ;;
    complete)
        fresh_complete
        export BENCH_METHOD=POST BENCH_PATH=/api/v1/sessions/%s/complete \
               BENCH_IDS="$W/once-ids" BENCH_PICK=once ;;
    upload)
        export BENCH_METHOD=POST BENCH_PATH=/api/v1/sessions/%s/images \
               BENCH_IDS="$W/upload-ids" BENCH_BODY="$BODY" \
               BENCH_CTYPE=image/gif ;;
    image-list)
        export BENCH_PATH="/api/v1/sessions/$IMAGE_SESSION/images?limit=20" ;;
    image)
        export BENCH_PATH="/api/v1/sessions/$IMAGE_SESSION/images/%s" \
               BENCH_IDS="$W/image-ids" ;;
    content)
        export BENCH_PATH="/api/v1/sessions/$IMAGE_SESSION/images/%s/content" \
               BENCH_IDS="$W/image-ids" ;;
    ack)
        # each image in its own session: "<sid>/images/<iid>"
        fresh_ack
        export BENCH_METHOD=POST BENCH_PATH=/api/v1/sessions/%s/ack \
               BENCH_IDS="$W/once-ids" BENCH_PICK=once ;;
    poll)
        export BENCH_PATH="/api/v1/sessions/$IMAGE_SESSION/poll?timeout=0" ;;
    esac
}

SCENARIOS=(
    "create|POST /api/v1/sessions, one key, plan unlimited|create"
    "create-key|POST /api/v1/sessions, a new Idempotency-Key each (anchor: the plain insert)|create"
    "create-quota|POST /api/v1/sessions, $QUOTA_ACCOUNTS accounts, plan with a quota|create-quota"
    "list|GET /api/v1/sessions?limit=20|list"
    "get|GET /api/v1/sessions/{sid}|get"
    "complete|POST /api/v1/sessions/{sid}/complete|complete"
    "upload|POST /api/v1/sessions/{sid}/images (1 KiB)|upload"
    "image-list|GET /api/v1/sessions/{sid}/images?limit=20|image-list"
    "image|GET /api/v1/sessions/{sid}/images/{iid}|image"
    "content|GET /api/v1/sessions/{sid}/images/{iid}/content (1 KiB)|content"
    "ack|POST /api/v1/sessions/{sid}/images/{iid}/ack|ack"
    "poll|GET /api/v1/sessions/{sid}/poll, answered at once (30 images)|poll"
)

write_conf() {
    cat > "$W/nginx.conf" <<EOF
$(nginx_conf_head "$MODULE" "$WORKERS")
    session_db_connections $DB_CONNS_PER_WORKER;
    session_db_batch $DB_BATCH;
    session_limit_zone benchdb:10m;

    server {
        listen 127.0.0.1:$PORT reuseport;

        location = /ok {
            return 200;
        }

        # the floor: nginx alone serving the same answer from a file
        location /floor/ {
            root $W;
            default_type application/json;
            open_file_cache max=64 inactive=1h;
            open_file_cache_valid 1h;
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

# with BENCH_DB_RATE: the fixed-rate table, the servers' CPU
# time per request and the latency of every endpoint at one rate below
# saturation, beside pgbench -R running the plain statement
cost_report() {
    local s key name rest rate r ng pm tot pb bm bp m50 m99 a50 a99
    local cr lr ok am ap fl short
    local met=0 all=0

    [ -n "$RATE" ] || return 0

    echo
    echo "Cost per request at a fixed rate: every endpoint at" \
         "$RATE requests/s (the reads) or $WRITE_RATE (the writes), open" \
         "loop with Poisson arrivals, bench/http-rate with $LAT_CONNS" \
         "connections beside pgbench -R at the same rate with $CLIENTS" \
         "clients running the plain statement, latency from each" \
         "request's scheduled time. CPU time: the scheduler's count" \
         "(/proc/PID/task/*/schedstat) over the middle of each run (from" \
         "1 s in to 0.6 s before its end), over the answers or" \
         "transactions completed in that stretch; nginx: its workers;" \
         "PostgreSQL (module): the backends of the module's pool and LISTEN" \
         "connection (a NOTIFY of a complete or an upload wakes the node's" \
         "one LISTEN backend); PostgreSQL (pgbench): pgbench's" \
         "backends; the" \
         "clients are not counted. Background: PostgreSQL's checkpointer," \
         "background writer, WAL writer and autovacuum launcher in the" \
         "same stretch, per request of each side, outside the ratio."
    echo
    echo "| endpoint | rate/s | achieved/s module / pgbench | nginx µs/req | PG µs/req (module) | of which LISTEN | server µs/req | PG µs/tx (pgbench) | CPU ratio (≤ 1.5) | module p50 / p99 ms | pgbench p50 / p99 ms | p99 ratio (≤ 1.5) | goals | background µs module / pgbench |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"

    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r key name rest <<<"$s"
        [ -n "${CPU_N[rate-$key]:-}" ] || continue

        rate=$(rate_of "$key")
        ng=$(median <<<"${CPU_N[rate-$key]}")
        pm=$(median <<<"${CPU_P[rate-$key]}")
        tot=$(median <<<"${CPU_T[rate-$key]}")
        pb=$(median <<<"${CPU_P[pgrate-$key]}")
        bm=$(median <<<"${CPU_B[rate-$key]}")
        bp=$(median <<<"${CPU_B[pgrate-$key]}")
        m50=$(median <<<"${P50[rate-$key]}")
        m99=$(median <<<"${P99[rate-$key]}")
        a50=$(median <<<"${P50[pgrate-$key]}")
        a99=$(median <<<"${P99[pgrate-$key]}")
        am=$(median <<<"${ACH[rate-$key]}")
        ap=$(median <<<"${ACH[pgrate-$key]}")
        cr=$(ratio "$tot" "$pb")
        lr=$(ratio "$m99" "$a99")

        # a side that fell behind its rate measured saturation, not cost
        short=$(awk -v r="$rate" -v a="$am" -v b="$ap" \
                    'BEGIN { print (a < 0.9 * r || b < 0.9 * r) ? 1 : 0 }')
        ok=$(awk -v c="$cr" -v l="$lr" \
                 'BEGIN { print (c <= 1.5 && l <= 1.5) ? "met" : "NOT met" }')
        [ "$short" = 0 ] || ok="$ok (below the rate)"
        all=$((all + 1))
        [ "$ok" = met ] && met=$((met + 1))

        printf '| %s | %s | %.0f / %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.2f / %.2f | %.2f / %.2f | %s | %s | %.1f / %.1f |\n' \
            "$name" "$rate" "$am" "$ap" "$ng" "$pm" \
            "$(median <<<"${CPU_L[rate-$key]}")" "$tot" "$pb" "$cr" \
            "$m50" "$m99" "$a50" "$a99" "$lr" "$ok" "$bm" "$bp"
    done

    for r in $(printf '%s\n' "$RATE" "$WRITE_RATE" | sort -nu); do
        [ -n "${CPU_N[floor-ok-$r]:-}" ] || continue
        fl=$(median <<<"${CPU_N[floor-ok-$r]}")
        printf '| floor: nginx `return 200` (GET /ok) | %s | %.0f | %.1f | | | %.1f | | | %.2f / %.2f | | | | %.1f |\n' \
            "$r" "$(median <<<"${ACH[floor-ok-$r]}")" "$fl" "$fl" \
            "$(median <<<"${P50[floor-ok-$r]}")" \
            "$(median <<<"${P99[floor-ok-$r]}")" \
            "$(median <<<"${CPU_B[floor-ok-$r]}")"
    done

    echo
    echo "$met of $all endpoints meet both goals at a fixed rate (server CPU" \
         "per request ≤ 1.5x PostgreSQL's per plain transaction, p99 ≤ 1.5x" \
         "pgbench's). Medians of $ROUNDS rounds of $DURATION, the module" \
         "or pgbench first in turn."
    echo
    echo "Per core, from the same medians (1 s of CPU over the µs per" \
         "request): what one core of nginx's workers and one core of" \
         "PostgreSQL's backends answer at most, the inputs of a capacity" \
         "plan (docs/benchmarks.md, \"Planning capacity\"):"
    echo
    echo "| endpoint | nginx requests/s per core | PostgreSQL requests/s per core (module) | PostgreSQL transactions/s per core (pgbench) | nginx share of the server's CPU |"
    echo "|---|---:|---:|---:|---:|"

    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r key name rest <<<"$s"
        [ -n "${CPU_N[rate-$key]:-}" ] || continue

        ng=$(median <<<"${CPU_N[rate-$key]}")
        pm=$(median <<<"${CPU_P[rate-$key]}")
        pb=$(median <<<"${CPU_P[pgrate-$key]}")
        awk -v k="$key" -v n="$ng" -v p="$pm" -v b="$pb" 'BEGIN {
            printf "| %s | %.0f | %.0f | %.0f | %.0f %% |\n", k,
                1e6 / n, 1e6 / p, 1e6 / b, 100 * n / (n + p) }'
    done
    for r in $(printf '%s\n' "$RATE" "$WRITE_RATE" | sort -nu); do
        [ -n "${CPU_N[floor-ok-$r]:-}" ] || continue
        awk -v r="$r" -v n="$(median <<<"${CPU_N[floor-ok-$r]}")" 'BEGIN {
            printf "| floor: return 200 at %s/s | %.0f | | | |\n", r, 1e6 / n }'
    done

    goal_room

    echo
    echo "Runs (µs of server CPU per request, module: nginx + PostgreSQL;" \
         "pgbench: PostgreSQL; p99 ms), round by round:"
    echo
    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r key name rest <<<"$s"
        [ -n "${CPU_N[rate-$key]:-}" ] || continue
        printf -- '- %s: module %s/ pgbench %s; p99 %s/ %s\n' "$key" \
            "${CPU_T[rate-$key]}" "${CPU_P[pgrate-$key]}" \
            "${P99[rate-$key]}" "${P99[pgrate-$key]}"
    done
}

# goal_room: per endpoint of the fixed-rate table, the nginx CPU per
# request that the CPU goal leaves (1.5 x pgbench's backends, less the
# module's own backends), beside nginx's `return 200` at the same rate:
# where the room is below that floor, no module that answers through
# nginx can meet the goal while PostgreSQL does the statement's work at
# the cost it has for the module
goal_room() {
    local s key name rest rate ng pm pb fl

    echo
    echo "What the CPU goal leaves nginx (1.5 x PostgreSQL's µs per pgbench" \
         "transaction, less the module's PostgreSQL µs per request), beside" \
         "nginx's own \`return 200\` at the same rate:"
    echo
    echo "| endpoint | nginx µs/req | room for nginx µs/req | return 200 µs/req | room over return 200 | verdict |"
    echo "|---|---:|---:|---:|---:|---|"

    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r key name rest <<<"$s"
        [ -n "${CPU_N[rate-$key]:-}" ] || continue

        rate=$(rate_of "$key")
        [ -n "${CPU_N[floor-ok-$rate]:-}" ] || continue
        ng=$(median <<<"${CPU_N[rate-$key]}")
        pm=$(median <<<"${CPU_T[rate-$key]}")
        pm=$(awk -v t="$pm" -v n="$ng" 'BEGIN { printf "%.3f", t - n }')
        pb=$(median <<<"${CPU_P[pgrate-$key]}")
        fl=$(median <<<"${CPU_N[floor-ok-$rate]}")
        awk -v k="$key" -v n="$ng" -v p="$pm" -v b="$pb" -v f="$fl" 'BEGIN {
            room = 1.5 * b - p
            if (n <= room) {
                v = "met"
            } else if (room < f) {
                v = "out of reach: less than `return 200`"
            } else {
                v = sprintf("nginx %.1f µs over the room", n - room)
            }
            printf "| %s | %.1f | %.1f | %.1f | %.1f | %s |\n",
                k, n, room, f, room - f, v }'
    done
}

# the floor's table: nginx alone serving each answer from a file, beside
# the module and pgbench of the same scenario
floor_report() {
    local s key name rest fm fl m pa

    [ -n "$(for k in "${!RPS[@]}"; do [[ $k == floor-* ]] && echo y; done)" ] \
        || return 0

    echo
    echo "The floor: nginx alone (no module, no database) serving the same" \
         "answer from a file (open_file_cache), with the same wrk and" \
         "request shape:"
    echo
    echo "| endpoint | nginx alone req/s (wrk -c$WRK_CONNS) | module over it | nginx alone p99 ms (wrk -c$LAT_CONNS) | its p99 over pgbench's |"
    echo "|---|---:|---:|---:|---:|"

    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r key name rest <<<"$s"
        [ -n "${RPS[floor-$key]:-}" ] || continue

        fm=$(median <<<"${RPS[floor-$key]}")
        fl=$(median <<<"${P99[floorlat-$key]}")
        m=$(median <<<"${RPS[module-$key]}")
        pa=$(median <<<"${P99[pgbench-$key]}")
        printf '| %s | %.0f | %s | %s | %s |\n' "$key" "$fm" \
            "$(ratio "$m" "$fm")" "$fl" "$(ratio "$fl" "$pa")"
    done
}

report() {
    local s key name rest m a rm ra pm pa pb rr rp ok
    local goals_met=0 goals=0

    if [ "$MODE" = cost ]; then
        cost_report | sed '1{/^$/d;}'
        echo
        echo "nginx $WORKERS workers x session_db_connections" \
             "$DB_CONNS_PER_WORKER, session_db_batch $DB_BATCH;" \
             "pgbench -M prepared -c $CLIENTS -j $THREADS.${CLIENT_CPUS:+" bench/http-rate and pgbench on CPU $CLIENT_CPUS, nginx and PostgreSQL on the others."}"
        return 0
    fi

    echo "| endpoint | module req/s (wrk -c$WRK_CONNS) | pgbench TPS | ratio (≥ 0.7) | module p99 ms (wrk -c$LAT_CONNS) | pgbench p99 ms | p99 ratio (≤ 2) | goal | module p99 ms (wrk -c$WRK_CONNS) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|---:|"

    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r key name rest <<<"$s"
        wanted "$key" || continue
        [ -n "${RPS[module-$key]:-}" ] || continue

        rm=$(median <<<"${RPS[module-$key]}")
        ra=$(median <<<"${RPS[pgbench-$key]}")
        pm=$(median <<<"${P99[lat-$key]}")
        pb=$(median <<<"${P99[module-$key]}")
        pa=$(median <<<"${P99[pgbench-$key]}")
        rr=$(ratio "$rm" "$ra")
        rp=$(ratio "$pm" "$pa")
        ok=$(awk -v r="$rr" -v p="$rp" \
                 'BEGIN { print (r >= 0.7 && p <= 2) ? "met" : "NOT met" }')
        if [ "$key" = create-key ]; then
            # not one of the database-paths goal rows: what a key costs, shown
            ok="(no goal: ${ok})"
        else
            goals=$((goals + 1))
            [ "$ok" = met ] && goals_met=$((goals_met + 1))
        fi

        printf '| %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s |\n' \
            "$name" "$rm" "$ra" "$rr" "$pm" "$pa" "$rp" "$ok" "$pb"
    done

    echo
    local pinned=
    [ -z "$CLIENT_CPUS" ] || pinned="wrk, pgbench and bench/http-rate on CPU"
    [ -z "$CLIENT_CPUS" ] \
        || pinned+=" $CLIENT_CPUS, nginx and PostgreSQL on the others. "
    echo "$goals_met of $goals endpoints meet both goals (the create with a" \
         "new Idempotency-Key each is shown without one). ${pinned}Medians of $ROUNDS" \
         "rounds of $DURATION; wrk -t$THREADS -c$WRK_CONNS for requests/s and" \
         "-c$LAT_CONNS for p99, --latency;" \
         "pgbench -M prepared -c $CLIENTS -j $THREADS -l; nginx" \
         "$WORKERS workers x session_db_connections $DB_CONNS_PER_WORKER," \
         "session_db_batch $DB_BATCH."
    floor_report
    cost_report

    echo
    echo "Runs (module at -c$WRK_CONNS / module at -c$LAT_CONNS / pgbench," \
         "requests or transactions per second):"
    echo
    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r key name rest <<<"$s"
        wanted "$key" || continue
        [ -n "${RPS[module-$key]:-}" ] || continue
        printf -- '- %s: %s/ %s/ %s\n' "$key" "${RPS[module-$key]}" \
            "${RPS[lat-$key]}" "${RPS[pgbench-$key]}"
    done
}

inside() {
    local round s key name rest

    trap scratch_cleanup EXIT
    W=$(mktemp -d /tmp/ngx-session-bench-db.XXXXXX)
    chmod 755 "$W"

    "$SESSIONCTL" -d "$DB" migrate >/dev/null || die "migrate failed"
    pin_cluster

    log "fixtures ($QUOTA_ACCOUNTS accounts, sessions, images)"
    fixtures
    pg_scripts
    printf '{"delivery_mode": "long_poll"}' > "$W/create.json"

    if [ -n "$RATE" ]; then
        cc -O2 -Wall -Wextra -o "$W/http-rate" "$ROOT/bench/http-rate.c" -lm \
            || die "cannot build bench/http-rate.c"
    fi

    PORT=$(free_port) || die "no free port"
    write_conf
    start_nginx

    if [ -n "${BENCH_DB_HOLD:-}" ]; then
        declare -p PORT W DB PROJECT KEY IMAGE_SESSION ROOT > "$BENCH_DB_HOLD"
        log "holding; rm $BENCH_DB_HOLD to stop"
        for round in $(seq 1800); do
            [ -f "$BENCH_DB_HOLD" ] || break
            sleep 1
        done
        stop_nginx
        return 0
    fi

    for round in $(seq "$ROUNDS"); do
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r key name rest <<<"$s"
            wanted "$key" || continue

            if [ "$MODE" = cost ]; then
                if [ $((round % 2)) = 1 ]; then
                    rated "$key" "$rest" module
                else
                    rated "$key" "$rest" pgbench
                fi
                continue
            fi

            shape "$key"

            # the order alternates from round to round; requests/s with
            # many clients, p99 with as many as pgbench has
            if [ $((round % 2)) = 1 ]; then
                module "module-$key" "$WRK_CONNS"
                shape "$key"
                module "lat-$key" "$LAT_CONNS"
                anchor "pgbench-$key" "$rest"
                floor "$key"
                rated "$key" "$rest" module
            else
                rated "$key" "$rest" pgbench
                # fresh rows again: the fixed-rate run used some
                shape "$key"
                floor "$key"
                anchor "pgbench-$key" "$rest"
                module "lat-$key" "$LAT_CONNS"
                shape "$key"
                module "module-$key" "$WRK_CONNS"
            fi
        done
        rated_floor
    done

    grep -E '\[(alert|crit|emerg)\]|signal [0-9]' "$W/error.log" >&2 \
        && die "the error log has alerts (above)"

    stop_nginx

    if [ "$OUT" = - ]; then
        report
    else
        report > "$OUT"
        log "wrote $OUT"
    fi
}


pin_setup

if [ "${1:-}" = --inside-pg-virtualenv ]; then
    # the cluster's Unix socket instead of TCP on loopback, for both sides
    # (pg_virtualenv lets the socket in by peer only: a password line first)
    if [ -n "${BENCH_DB_SOCKET:-}" ]; then
        hba=$(psql -XAtc 'SHOW hba_file')
        sed -i '1i local all all scram-sha-256' "$hba"
        psql -XAtc 'SELECT pg_reload_conf()' >/dev/null
        export PGHOST=$BENCH_DB_SOCKET
    fi
    DB=$(pg_virtualenv_conninfo)
    pg_cluster_up
    inside
    exit $?
fi

command -v wrk >/dev/null 2>&1 || die "wrk not found (make deps)"
command -v pgbench >/dev/null 2>&1 || die "pgbench not found (make deps)"
[ -f "$MODULE" ] || die "$MODULE not built (run make)"

if [ -n "${BENCH_SESSION_DB:-}" ]; then
    DB=$BENCH_SESSION_DB
    inside
    exit $?
fi

pg_env_clear
export LC_ALL=C

# shellcheck disable=SC2086 # SERVER_PIN is a command and its arguments
pg_cluster_tries 3 "" ${SERVER_PIN:-} pg_virtualenv -t -o fsync=on -- \
    bash "$ROOT/util/bench-db.sh" --inside-pg-virtualenv
