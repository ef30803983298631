#!/usr/bin/env bash
# The long-poll fan-out benchmark, "make bench-poll":
# N polls wait (N = 1,000 and 10,000), on one session and spread over
# 1,000 sessions, then one upload per session wakes them; and the same
# fan-out against nchan (Debian libnginx-mod-nchan: a long-poll
# subscriber location and a publisher location) and against the floor,
# bench/poll-floor.c (no HTTP server, no database: it holds the
# connections and writes one prepared answer of the module's size to
# each, one write a socket), in the same run, with the same worker count,
# limits and client.  Spread over sessions, the wake-up is also set
# beside what PostgreSQL needs to commit the uploads: pgbench running the
# upload's statement once per session with as many clients as the module
# has connections.
#
#   bash util/bench-poll.sh                 a throw-away PostgreSQL
#   BENCH_SESSION_DB="..." bash util/bench-poll.sh    an existing one
#
# The client is bench/poll-fanout.c (epoll, one process): it opens the N
# connections, waits until the server says all N wait (session_status
# long_poll.waiting, nchan_stub_status subscribers), then sends the
# uploads (publishes) and takes each answer's latency from its upload's
# send to the kernel's receive timestamp of the answer.  Worker memory
# per waiting poll is the growth of the workers' VmRSS (private and
# shared pages they touched) from an idle, warmed-up nginx to all N
# waiting, divided by N.  A fresh nginx serves every run.
#
# Loopback only, bounded: every run ends within BENCH_POLL_TIMEOUT.
#
# Environment:
#   BENCH_POLL_SIZES     the N to run (default "1000 10000")
#   BENCH_POLL_SPREAD    sessions of the "spread" runs (default 1000; 0:
#                        none)
#   BENCH_POLL_KINDS     the servers (default "module nchan floor"; the
#                        floor's answer is the size of the module's, or
#                        600 bytes without a module run)
#   BENCH_POLL_COMMITS   0: no pgbench run beside the spread fan-outs
#   BENCH_POLL_ROUNDS    rounds; each figure is the median (default 1)
#   BENCH_POLL_TIMEOUT   seconds a run may take (default 60)
#   BENCH_WORKERS        worker_processes, and the floor's processes
#                        (default 2)
#   BENCH_DB_CONNECTIONS session_db_connections, and pgbench's clients per
#                        worker (default 4, the directive's)
#   BENCH_POLL_TUNED     set: request_pool_size 1k and
#                        client_header_buffer_size 512 on both servers
#   BENCH_POLL_OUT       write the Markdown table here (default stdout)
#   BENCH_POLL_PARK      "off": session_poll_park off (polls keep their
#                        requests while they wait)
#   BENCH_POLL_FSYNC     the throw-away cluster's fsync (default on, as a
#                        real one runs; before decision (yc) it ran off,
#                        pg_virtualenv's default)
#   BENCH_POLL_SYNC_OFF  set: the module's connections run with
#                        synchronous_commit off (no fsync wait in an
#                        upload's commit: shows what the disk costs)
#   BENCH_POLL_PERF      a path prefix: "perf record -g" of the workers
#                        for 3 s from just before the uploads, written to
#                        PREFIX.KIND.N (for "perf report -i"; needs perf)
#   BENCH_POLL_CALLGRIND a path prefix: the servers' processes run under
#                        valgrind's callgrind (nchan's too if in
#                        BENCH_POLL_KINDS; set BENCH_POLL_TIMEOUT high);
#                        the counts are zeroed once all N wait and dumped
#                        2 s after the last answer (the clients' closes
#                        counted on both sides), to PREFIX.KIND.N.PID
#                        (for callgrind_annotate); the table gains the
#                        instructions per woken poll (user space only:
#                        the kernel's share of each write is not in it)
#   BENCH_POLL_CALLGRIND_OPTS  more options of valgrind (--cache-sim=yes)
#   BENCH_POLL_STRACE    a path prefix: "strace -c" of the workers for
#                        3 s from just before the uploads (the system calls
#                        of the wake-up), written to PREFIX.KIND.N
#   BENCH_MODULE         the module to load (default build/'s), say a
#                        copy of another commit's for an A/B run
#   BENCH_POLL_PORT      nginx's port (default: a free one, drawn from
#                        BENCH_PORTS, LOW-HIGH, default 20000-39999)
#   BENCH_POLL_PGPORT    the throw-away PostgreSQL's port (default: a free
#                        one; attempts 2 and 3 take the next ones)
#   BENCH_KEEP           keep the scratch directory
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
MODULE=${BENCH_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl
NCHAN=/usr/lib/nginx/modules/ngx_nchan_module.so

SIZES=${BENCH_POLL_SIZES:-1000 10000}
SPREAD=${BENCH_POLL_SPREAD:-1000}
PERF_OUT=${BENCH_POLL_PERF:-}
CG_OUT=${BENCH_POLL_CALLGRIND:-}
STRACE_OUT=${BENCH_POLL_STRACE:-}
KINDS=${BENCH_POLL_KINDS:-module nchan floor}
COMMITS=${BENCH_POLL_COMMITS:-1}
DB_CONNS_PER_WORKER=${BENCH_DB_CONNECTIONS:-4}
ROUNDS=${BENCH_POLL_ROUNDS:-1}
TIMEOUT=${BENCH_POLL_TIMEOUT:-60}
WORKERS=${BENCH_WORKERS:-2}
# tenths of a second a server may take to answer after its start
START_WAIT=50
OUT=${BENCH_POLL_OUT:--}

# connections per worker: the largest N and the publishers, twice over
WORKER_CONNECTIONS=32768

die() {
    echo "bench-poll.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-poll.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

W=
DB=
PORT=
NGINX_UP=


# --- dependencies ------------------------------------------------------------

deps() {
    if [ ! -f "$NCHAN" ]; then
        log "installing libnginx-mod-nchan"
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
            install -y -q libnginx-mod-nchan >/dev/null \
            || die "cannot install libnginx-mod-nchan"
    fi

    [ -f "$NCHAN" ] || die "$NCHAN not found"

    cc -O2 -Wall -Wextra -o "$W/poll-fanout" "$ROOT/bench/poll-fanout.c" \
        || die "cannot build bench/poll-fanout.c"
    cc -O2 -Wall -Wextra -o "$W/poll-floor" "$ROOT/bench/poll-floor.c" \
        || die "cannot build bench/poll-floor.c"
}


# --- servers ---------------------------------------------------------------

conf_head() {
    cat <<EOF
$1
worker_processes $WORKERS;
worker_rlimit_nofile $((WORKER_CONNECTIONS * 2));
error_log $W/error.log warn;
pid $W/nginx.pid;
events {
    worker_connections $WORKER_CONNECTIONS;
}
http {
    access_log off;
    keepalive_requests 1000000;
$(conf_tuned)
$(nginx_temp_paths)
EOF
}

# BENCH_POLL_TUNED=1: smaller request pools and header buffers (both servers)
conf_tuned() {
    if [ -n "${BENCH_POLL_TUNED:-}" ]; then
        printf '    request_pool_size 1k;\n'
        printf '    client_header_buffer_size 512;\n'
    fi
}

conf_module() {
    {
        conf_head "load_module $MODULE;"
        cat <<EOF
    session_db $(nginx_quote "$DB");
    session_db_connections $DB_CONNS_PER_WORKER;
    session_poll_max_timeout 120s;
    session_poll_park ${BENCH_POLL_PARK:-on};
    server {
        listen 127.0.0.1:$PORT backlog=16384;
        location = /ok { return 204; }
        location = /status { session_status; }
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

conf_nchan() {
    {
        conf_head "load_module $NCHAN;"
        cat <<EOF
    nchan_shared_memory_size 256m;
    server {
        listen 127.0.0.1:$PORT backlog=16384;
        location = /ok { return 204; }
        location = /status { nchan_stub_status; }
        location = /sub {
            nchan_subscriber longpoll;
            nchan_channel_id \$arg_id;
            nchan_subscriber_timeout 120s;
        }
        location = /pub {
            nchan_publisher;
            nchan_channel_id \$arg_id;
            nchan_message_buffer_length 10;
            nchan_message_timeout 5m;
        }
    }
}
EOF
    } > "$W/nginx.conf"
}

# the floor: bench/poll-floor with as many processes as nginx has
# workers, its answer of ANSWER_BYTES; its parent's pid in $W/nginx.pid
start_floor() {
    rm -f "$W/nginx.pid"
    ${SERVER_PIN:-} "$W/poll-floor" "$PORT" "$WORKERS" "$1" "$W/nginx.pid" \
        </dev/null >>"$W/error.log" 2>&1 &
    for _ in $(seq "$START_WAIT"); do
        [ -f "$W/nginx.pid" ] \
            && curl -s -o /dev/null "http://127.0.0.1:$PORT/status" \
            && return 0
        sleep 0.1
    done
    die "poll-floor does not answer on 127.0.0.1:$PORT"
}

stop_floor() {
    kill "$(cat "$W/nginx.pid")"
    for _ in $(seq 50); do
        [ -f "$W/nginx.pid" ] || return 0
        sleep 0.1
    done
    die "poll-floor did not stop"
}


# cpu_ns: the CPU time (user and system, from schedstat) of the workers
# (the floor's processes), then of the cluster's processes, ns
cpu_ns() {
    local master p t a=0 b=0
    master=$(cat "$W/nginx.pid")
    for p in $(pgrep -P "$master"); do
        for t in /proc/$p/task/*/schedstat; do
            a=$((a + $(cut -d' ' -f1 "$t" 2>/dev/null || echo 0)))
        done
    done
    for p in $(psql -X -At -d "$DB" -c "SELECT pid FROM pg_stat_activity" \
               2>/dev/null); do
        for t in /proc/$p/task/*/schedstat; do
            b=$((b + $(cut -d' ' -f1 "$t" 2>/dev/null || echo 0)))
        done
    done
    echo "$a $b"
}


# --- runs ------------------------------------------------------------------

# ready.sh: exits 0 once N wait (and notes the workers' RSS then)
ready_script() {
    local kind=$1 n=$2
    cat > "$W/ready.sh" <<EOF
#!/usr/bin/env bash
set -u
# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"
W=$W
$(declare -f cpu_ns)
DB=$(printf '%q' "$DB")
if [ "$kind" = module ]; then
    # steady: every poll waits and, unless it has been 5 s since they all
    # did, is parked (its request freed once its first read is over)
    set -- \$(curl -s "http://127.0.0.1:$PORT/status" \\
         | perl -MJSON::PP -e 'local \$/; my \$l = JSON::PP->new->decode(<STDIN>)->{long_poll}; print "\$l->{waiting} \$l->{parked}"')
    w=\${1:-0}
    if [ "\$w" -ge $n ] && [ "\${2:-0}" -lt $n ]; then
        [ -f "$W/all-waiting" ] || date +%s > "$W/all-waiting"
        [ \$(( \$(date +%s) - \$(cat "$W/all-waiting") )) -ge 5 ] || exit 1
    fi
else
    curl -s "http://127.0.0.1:$PORT/status" > "$W/status-ready"
    w=\$(awk '/^subscribers:/ { print \$2 }' "$W/status-ready")
fi
[ "\${w:-0}" -ge $n ] || exit 1
# what the servers free after a burst (both alike) is not counted
sleep 1
workers_rss > "$W/rss-ready"
# the open files of each worker: how the connections fell to them
for p in \$(pgrep -P "\$(cat "$W/nginx.pid")"); do
    ls /proc/\$p/fd | wc -l
done | paste -sd' ' > "$W/fds-ready"
if [ -n "$PERF_OUT" ]; then
    # the workers' profile over the wake-up that follows
    pids=\$(pgrep -P "\$(cat "$W/nginx.pid")" | paste -sd, -)
    setsid perf record -q -g -F 4999 -p "\$pids" \\
        -o "$PERF_OUT.$kind.$n" -- sleep 3 </dev/null >/dev/null 2>&1 &
    sleep 0.3
fi
if [ -n "$STRACE_OUT" ]; then
    # the workers' system calls over the wake-up that follows
    pids=\$(pgrep -P "\$(cat "$W/nginx.pid")" | sed 's/^/-p /' | paste -sd' ' -)
    setsid timeout -s INT 3 strace -c -f \$pids \
        -o "$STRACE_OUT.$kind.$n" </dev/null >/dev/null 2>&1 &
    sleep 0.5
fi
# the CPU time from here to the fan-out's end; each worker's schedstat
# (on a CPU, waiting for one, time slices)
cpu_ns > "$W/cpu-ready"
for p in \$(pgrep -P "\$(cat "$W/nginx.pid")"); do
    echo "\$p \$(cat /proc/\$p/schedstat)"
done > "$W/sched-ready"
exit 0
EOF
}

# the module's poll and upload requests for $W/ids (the floor gets the
# same bytes)
module_requests() {
    printf 'GET /api/v1/sessions/@ID@/poll?timeout=100 HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer %s\r\n\r\n' \
        "$KEY" > "$W/sub"
    {
        printf 'POST /api/v1/sessions/@ID@/images HTTP/1.1\r\nHost: b\r\n'
        printf 'Authorization: Bearer %s\r\nContent-Type: image/png\r\n' \
            "$KEY"
        printf 'Content-Length: %s\r\nConnection: close\r\n\r\n' \
            "$(stat -c %s "$W/png")"
        cat "$W/png"
    } > "$W/pub"
}

# run KIND N SESSIONS: one fan-out; appends "key value" lines to $W/run
run() {
    local kind=$1 n=$2 nsess=$3 base ready size

    case $kind in
    module)
        conf_module
        sessions "$nsess" > "$W/ids"
        module_requests ;;
    floor)
        sessions "$nsess" > "$W/ids"
        module_requests ;;
    *)
        conf_nchan
        seq -f "ch%g" "$nsess" > "$W/ids"
        printf 'GET /sub?id=@ID@ HTTP/1.1\r\nHost: b\r\n\r\n' > "$W/sub"
        printf 'POST /pub?id=@ID@ HTTP/1.1\r\nHost: b\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello' \
            > "$W/pub" ;;
    esac

    if [ -n "$CG_OUT" ]; then
        SERVER_PIN="valgrind -q --tool=callgrind --dump-instr=no"
        SERVER_PIN="$SERVER_PIN --compress-strings=no"
        SERVER_PIN="$SERVER_PIN ${BENCH_POLL_CALLGRIND_OPTS:-}"
        SERVER_PIN="$SERVER_PIN --callgrind-out-file=$CG_OUT.$kind.$n.%p"
        START_WAIT=600
    fi

    if [ "$kind" = floor ]; then
        size=$(cat "$W/answer-size.$n.$nsess" 2>/dev/null || echo 600)
        start_floor "$size"
    else
        start_nginx
    fi

    # warmed up: every worker has answered and connected to the database
    for _ in $(seq 20); do
        curl -s -o /dev/null "http://127.0.0.1:$PORT/status"
    done
    if [ "$kind" = module ]; then
        curl -s -o /dev/null -H "Authorization: Bearer $KEY" \
            "http://127.0.0.1:$PORT/api/v1/sessions?limit=1"
    fi

    base=$(workers_rss)
    ready_script "$kind" "$n"
    rm -f "$W/rss-ready" "$W/all-waiting"

    "$W/poll-fanout" "$PORT" "$n" "$W/ids" "$W/sub" "$W/pub" \
        "bash $W/ready.sh" "$TIMEOUT" > "$W/out" \
        || die "poll-fanout failed"

    ready=$(cat "$W/rss-ready" 2>/dev/null || echo "$base")
    cpu_ns > "$W/cpu-done"
    sched_log "$kind" "$n"


    if [ "$kind" = module ]; then
        # the size of a woken poll's answer (headers and body): the
        # session's unacknowledged images, as a poll now finds them
        curl -s -o /dev/null -w '%{size_header} %{size_download}\n' \
            -H "Authorization: Bearer $KEY" \
            "http://127.0.0.1:$PORT/api/v1/sessions/$(head -1 "$W/ids")/poll?timeout=0" \
            | awk '{ print $1 + $2 }' > "$W/answer-size.$n.$nsess"
    fi

    log "$kind: open files by worker: $(cat "$W/fds-ready" 2>/dev/null)"
    if [ "$kind" = floor ]; then
        stop_floor
    else
        stop_nginx
    fi

    if [ -n "$CG_OUT" ]; then
        cg_count "$kind" "$n"
    fi

    {
        cat "$W/out"
        awk -v b="$base" -v r="$ready" -v n="$n" \
            'BEGIN { printf "rss_kb_per_poll %.2f\n", (r - b) / n }'
        # CPU time per woken poll, microseconds: the server's processes,
        # the cluster's (the upload, its notifications and the read)
        paste -d' ' "$W/cpu-ready" "$W/cpu-done" | awk -v n="$n" \
            '{ printf "cpu_us_per_poll %.2f\ncpu_db_us_per_poll %.2f\n",
                      ($3 - $1) / n / 1000, ($4 - $2) / n / 1000 }'
        [ -z "$CG_OUT" ] || echo "ir_per_poll $(cat "$W/cg-ir")"
        [ "$kind" = nchan ] \
            || echo "answer_bytes $(cat "$W/answer-size.$n.$nsess" 2>/dev/null || echo 600)"
    } > "$W/run.$kind.$n.$nsess.$ROUND"

    log "$kind N=$n sessions=$nsess: $(tr '\n' ' ' < "$W/run.$kind.$n.$nsess.$ROUND")"

    if [ "$kind" = module ] && [ "$nsess" -gt 1 ]; then
        commits "$n" "$nsess"
    fi
}

# sched_log KIND N: each worker's (main thread's) time on a CPU and time
# runnable but waiting for one, from all N waiting to the fan-out's end:
# a worker that answers late for want of a CPU shows in the second
sched_log() {
    local p line out=
    [ -f "$W/sched-ready" ] || return 0
    for p in $(pgrep -P "$(cat "$W/nginx.pid")"); do
        line=$(grep "^$p " "$W/sched-ready") || continue
        out="$out $(awk -v p="$p" -v a="$line" '{
                       split(a, r, " ")
                       printf "%s: on a CPU %.1f ms, waiting %.1f ms;", p,
                           ($1 - r[2]) / 1e6, ($2 - r[3]) / 1e6 }' \
                   "/proc/$p/schedstat")"
    done
    log "$1 N=$2: workers:$out"
}

# cg_count KIND N: from the callgrind file of the busiest process (the
# one worker with BENCH_WORKERS=1), the instructions of the wake-up over
# N in $W/cg-ir: the inclusive cost of the function that answers the
# waiters (the module's result of the poll's read, with the rendering and
# every answer; the floor's wake()); the clients' closes are not in it
# (nginx's handler of them is static, nameless in a stripped binary).
# valgrind's gdbserver (callgrind_control) is not needed.
cg_count() {
    local kind=$1 n=$2 f wake
    for _ in $(seq 100); do
        ! pgrep -f "callgrind-out-file=$CG_OUT.$kind.$n" >/dev/null && break
        sleep 0.2
    done
    f=$(ls -S "$CG_OUT.$kind.$n".* | head -1)
    case $kind in
    module) wake=ngx_http_session_poll_result ;;
    floor)  wake=wake ;;
    *)      wake=none ;;
    esac
    # inclusive cost of a function: the cost line after each "calls="
    # line of a call to it
    awk -v n="$n" -v wake="$wake" '
        /^cfn=/ { fn = substr($0, 5); next }
        /^calls=/ { want = (fn == wake); next }
        want && /^[0-9+*-]/ { s += $2; want = 0 }
        END { printf "%.0f\n", s / n }' "$f" > "$W/cg-ir"
    log "$kind N=$n: $(cat "$W/cg-ir") instructions per woken poll" \
        "(callgrind, $f)"
}

# commits N SESSIONS: what PostgreSQL needs to commit one upload into
# each of the sessions of $W/ids, the upload's statement (as
# util/bench-db.sh's anchor writes it) run by pgbench with as many clients
# as the module holds connections, each session drawn at random; the
# time of SESSIONS transactions at pgbench's rate
commits() {
    local n=$1 nsess=$2 clients out tps ids

    [ "$COMMITS" != 0 ] || return 0
    command -v pgbench >/dev/null 2>&1 || { log "no pgbench: no commits"; return 0; }

    clients=$((WORKERS * DB_CONNS_PER_WORKER))
    ids=$(sed "s/.*/'&'/" "$W/ids" | paste -sd,)
    cat > "$W/pg-upload.sql" <<EOF
\set n random(1, $nsess)
WITH s AS (
    UPDATE sessions SET image_count = image_count + 1
    WHERE id = (ARRAY[$ids]::uuid[])[:n] RETURNING id, image_count)
INSERT INTO images (session_id, sequence, content_type, size, sha256,
                    content)
SELECT s.id, s.image_count, 'image/png', octet_length(:body::bytea),
       sha256(:body::bytea), :body::bytea FROM s
RETURNING id, session_id, sequence, content_type, size, sha256, created_at,
          acknowledged_at,
          pg_notify('session_events', 'uploaded:' || session_id::text);
EOF
    out=$(pgbench -n -M prepared -c "$clients" -j 2 \
              -t $(( (nsess + clients - 1) / clients )) \
              -D body="\\x$(od -An -v -tx1 "$W/png" | tr -d ' \n')" \
              -f "$W/pg-upload.sql" "$DB" 2>&1) \
        || { echo "$out" >&2; die "pgbench (commits) failed"; }
    tps=$(awk '/^tps = / { print $3; exit }' <<<"$out")
    [ -n "$tps" ] || { echo "$out" >&2; die "pgbench (commits): no tps"; }

    awk -v t="$tps" -v s="$nsess" \
        'BEGIN { printf "commits_ms %.2f\ncommits_tps %.0f\n", s / t * 1000, t }' \
        > "$W/run.commits.$n.$nsess.$ROUND"
    log "commits of $nsess uploads: $(tr '\n' ' ' < "$W/run.commits.$n.$nsess.$ROUND")"
}

# N open long_poll sessions of the bench project, their ids
sessions() {
    sql "INSERT INTO sessions (project_id, delivery_mode, expires_at)
         SELECT '$PROJECT', 'long_poll', now() + interval '1 day'
         FROM generate_series(1, $1) RETURNING id"
}

# the median of a key over the rounds of one configuration
fig() {
    local key=$1 pat=$2
    cat $pat 2>/dev/null | awk -v k="$key" '$1 == k { print $2 }' | median
}

# "200 x 10000, 503 x 12" for the answers of one configuration's rounds
statuses() {
    local pat=$1
    cat $pat | awk '
        $1 == "status" { s[$2] += $3 }
        $1 == "early" { e[$2] += $3 }
        $1 == "unanswered" && $2 > 0 { u += $2 }
        END {
            out = ""
            for (k in s) out = out sprintf("%s%s x %d", out ? ", " : "", k, s[k])
            for (k in e) out = out sprintf("%searly %s x %d", out ? ", " : "", k, e[k])
            if (u) out = out sprintf("%sunanswered x %d", out ? ", " : "", u)
            print out
        }'
}

# the answer's size, but nchan's (the client does not count it)
answer_bytes() {
    [ "$1" = nchan ] && echo - || fig answer_bytes "$2"
}

# over_floor KIND N SESSIONS: the median over the rounds of KIND's p99 over
# the floor's p99 in the same round
over_floor() {
    local kind=$1 n=$2 s=$3
    [[ " $KINDS " == *" floor "* ]] && [ "$kind" != floor ] || return 0
    round_ratios "$kind" floor "$n" "$s" p99_ms | median
}

# round_ratios A B N SESSIONS KEY: KEY of A over KEY of B, round by round
# (B "commits": the commits' time)
round_ratios() {
    local a=$1 b=$2 n=$3 s=$4 key=$5 bkey=$5 r x y
    [ "$b" != commits ] || bkey=commits_ms
    for r in $(seq "$ROUNDS"); do
        x=$(awk -v k="$key" '$1 == k { print $2 }'                 "$W/run.$a.$n.$s.$r" 2>/dev/null)
        y=$(awk -v k="$bkey" '$1 == k { print $2 }'                 "$W/run.$b.$n.$s.$r" 2>/dev/null)
        [ -n "$x" ] && [ -n "$y" ] && ratio "$x" "$y" && echo
    done
}

# the goals (docs/benchmarks.md), from the rounds' figures
goals() {
    local n r m kb

    [[ " $KINDS " == *" module "* ]] || return 0
    echo
    for n in $SIZES; do
        if [[ " $KINDS " == *" floor "* ]]; then
            r=$(round_ratios module floor "$n" 1 p99_ms | paste -sd' ')
            m=$(median <<<"$r")
            echo "- $n polls on one session: the module's wake-up p99 over the floor's, round by round: $r; median $m ($(awk -v v="$m" 'BEGIN { print (v <= 1.3) ? "goal ≤ 1.3 met" : "goal ≤ 1.3 NOT met" }'))"
        fi
        echo "- $n polls on one session: CPU time per woken poll (from all waiting to the last answer, schedstat): $(for k in $KINDS; do printf '%s %s us ' "$k" "$(fig cpu_us_per_poll "$W/run.$k.$n.1.*")"; done)(the cluster's during the module's: $(fig cpu_db_us_per_poll "$W/run.module.$n.1.*") us)"
        if [ -n "$CG_OUT" ]; then
            echo "- $n polls on one session: instructions per woken poll (callgrind, user space): $(for k in $KINDS; do printf '%s %s ' "$k" "$(fig ir_per_poll "$W/run.$k.$n.1.*")"; done)"
        fi
        kb=$(fig rss_kb_per_poll "$W/run.module.$n.1.*")
        echo "- $n polls on one session: $kb KB of worker memory per waiting poll ($(awk -v v="$kb" 'BEGIN { print (v <= 2) ? "goal ≤ 2 KB met" : "goal ≤ 2 KB NOT met" }'))"
        if ls "$W"/run.commits."$n"."$SPREAD".* >/dev/null 2>&1; then
            r=$(round_ratios module commits "$n" "$SPREAD" p99_ms | paste -sd' ')
            echo "- $n polls over $SPREAD sessions: the module's wake-up p99 $(fig p99_ms "$W/run.module.$n.$SPREAD.*") ms and its uploads' answers, the slowest at $(fig publish_max_ms "$W/run.module.$n.$SPREAD.*") ms, beside PostgreSQL committing $SPREAD uploads (their statement from pgbench, $((WORKERS * DB_CONNS_PER_WORKER)) clients) in $(fig commits_ms "$W/run.commits.$n.$SPREAD.*") ms ($(fig commits_tps "$W/run.commits.$n.$SPREAD.*") a second): wake-up p99 over that, round by round: $r"
        fi
    done
}

inside() {
    W=$(mktemp -d /tmp/ngx-session-bench-poll.XXXXXX)
    trap scratch_cleanup EXIT
    if [ -n "${BENCH_POLL_PORT:-}" ]; then
        PORT=$BENCH_POLL_PORT
    else
        PORT=$(free_port) || die "no free port"
    fi

    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

    deps

    "$SESSIONCTL" -d "$DB" migrate >/dev/null

    if [ -n "${BENCH_POLL_SYNC_OFF:-}" ]; then
        DB="$DB options='-c synchronous_commit=off'"
    fi
    local a p k
    a=$(ctl account create bench-poll --plan unlimited | json_field account_id)
    p=$(ctl project create "$a" bench-poll | json_field project_id)
    k=$(ctl key create "$p" | json_field key)
    ACCOUNT=$a PROJECT=$p KEY=$k

    { printf '\x89PNG\r\n\x1a\n'; head -c 32 /dev/zero | tr '\0' 'x'; } \
        > "$W/png"

    local n s kind
    for ROUND in $(seq "$ROUNDS"); do
        for n in $SIZES; do
            for s in 1 "$SPREAD"; do
                [ "$s" != 0 ] || continue
                for kind in $KINDS; do
                    run "$kind" "$n" "$s"
                done
            done
        done
    done

    {
        echo "| waiting polls | sessions | server | answers | p50 ms | p99 ms | max ms | upload (publish) answer p50 / max ms | KB per waiting poll | answer bytes | p99 over the floor's |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|"
        for n in $SIZES; do
            for s in 1 "$SPREAD"; do
                [ "$s" != 0 ] || continue
                for kind in $KINDS; do
                    pat="$W/run.$kind.$n.$s.*"
                    printf '| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n' \
                        "$n" "$s" "$kind" "$(statuses "$pat")" \
                        "$(fig p50_ms "$pat")" "$(fig p99_ms "$pat")" \
                        "$(fig max_ms "$pat")" \
                        "$(fig publish_p50_ms "$pat")" \
                        "$(fig publish_max_ms "$pat")" \
                        "$(fig rss_kb_per_poll "$pat")" \
                        "$(answer_bytes "$kind" "$pat")" \
                        "$(over_floor "$kind" "$n" "$s")"
                done
            done
        done
        goals
    } > "$W/table"

    if [ "$OUT" = - ]; then
        cat "$W/table"
    else
        cp "$W/table" "$OUT"
        log "wrote $OUT"
    fi

    delete_rows "$PROJECT" "$ACCOUNT"
}


if [ "${1:-}" = --inside-pg-virtualenv ]; then
    DB=$(pg_virtualenv_conninfo)
    pg_cluster_up
    inside
    exit $?
fi

[ -f "$MODULE" ] || die "$MODULE not built (run make)"

if [ -n "${BENCH_SESSION_DB:-}" ]; then
    DB=$BENCH_SESSION_DB
    inside
    exit $?
fi

pg_env_clear
export LC_ALL=C

# fsync on, as a real cluster runs (pg_virtualenv's default is off): an
# upload's commit waits for its flush
pg_cluster_tries 3 "${BENCH_POLL_PGPORT:-}" \
    pg_virtualenv -t -o "fsync=${BENCH_POLL_FSYNC:-on}" -- \
    bash "$ROOT/util/bench-poll.sh" --inside-pg-virtualenv
