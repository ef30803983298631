#!/usr/bin/env bash
# "make bench": wrk against nginx with the module on 127.0.0.1, then the
# capacity of a 10m session_limit_zone.  Prints a table and writes it,
# with the command and the machine, to docs/benchmarks.md.
#
#   bash util/bench.sh
#   bash util/bench.sh --page    bench/*.md (kept by hand) into the page
#                                again, without a run (make bench-page)
#
# Everything is local and bounded: a throw-away PostgreSQL (pg_virtualenv,
# as util/test.sh does), nginx on a free loopback port, each wrk run
# BENCH_DURATION long; the whole run takes about 27 minutes (the
# fixed-rate runs of util/bench-db.sh, every endpoint and nginx's
# "return 200" at a fixed rate beside pgbench -R, about 8 of them).
#
# Environment:
#   BENCH_SESSION_DB     use this (migrated or not) database instead of a
#                        throw-away one; the rows the bench adds are
#                        deleted at the end
#   BENCH_DURATION       one wrk run (default 5s)
#   BENCH_THREADS        wrk threads (default 2; 1 when pinned)
#   BENCH_PIN            1: the hot-path scenarios run one nginx worker
#                        pinned to the last CPU and wrk pinned to CPU 0,
#                        so that the worker is the bottleneck and what is
#                        measured is its cost, not the client's; 0: both
#                        float over all CPUs with BENCH_WORKERS workers.
#                        Default 1 with 2 CPUs or more.
#   BENCH_CONNECTIONS    wrk connections (default 50)
#   BENCH_ROUNDS         runs of each scenario, the median is reported
#                        (default 3)
#   BENCH_WORKERS        nginx worker_processes (default 2; the hot-path
#                        scenarios use 1 when pinned)
#   BENCH_CAPACITY_KEYS  keys for the zone-capacity run (default 100000;
#                        0 skips it)
#   BENCH_PAIRS          extra runs of the two 429 scenarios side by side,
#                        in alternating order (default 30), for the 429
#                        goal's ratio; BENCH_PAIR_DURATION each (1s)
#   BENCH_OUT            the report (default docs/benchmarks.md; "-" for
#                        none)
#   BENCH_IMAGES         0 skips util/bench-images.sh (image uploads
#                        and worker memory; see its header)
#   BENCH_WEBHOOK        0 skips util/bench-webhook.sh (webhook
#                        deliveries/s and latency; see its header)
#   BENCH_CLUSTER        0 skips util/bench-cluster.sh (three nodes of
#                        each session_limit_scope on one database; about
#                        5 minutes; see its header)
#   BENCH_KEEP           keep the temporary directory (nginx.conf,
#                        error.log); it is always kept after a failure
#   BENCH_DB_CONNECTIONS session_db_connections per worker (default 4);
#                        pgbench runs with workers x this many clients
#   BENCH_PGBENCH        0 skips the database scenarios (every endpoint
#                        against pgbench, util/bench-db.sh, whose header
#                        lists its own settings); default 1
#   BENCH_INSTRUCTIONS   0 skips the instruction counts of
#                        util/bench-ir.sh (valgrind); default 1
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
MODULE=$ROOT/build/ngx_http_session_module.so
SESSIONCTL=$ROOT/build/sessionctl

DURATION=${BENCH_DURATION:-5s}
THREADS=${BENCH_THREADS:-2}
CONNS=${BENCH_CONNECTIONS:-50}
ROUNDS=${BENCH_ROUNDS:-5}
WORKERS=${BENCH_WORKERS:-2}
CAPACITY_KEYS=${BENCH_CAPACITY_KEYS:-100000}
DB_CONNS_PER_WORKER=${BENCH_DB_CONNECTIONS:-4}
PGBENCH_ON=${BENCH_PGBENCH:-1}
INSTRUCTIONS_ON=${BENCH_INSTRUCTIONS:-1}
OUT=${BENCH_OUT:-docs/benchmarks.md}
PAIRS=${BENCH_PAIRS:-30}
PAIR_DURATION=${BENCH_PAIR_DURATION:-1s}

NCPU=$(nproc)
PIN=${BENCH_PIN:-$([ "$NCPU" -ge 2 ] && echo 1 || echo 0)}
if [ "$PIN" = 1 ]; then
    # wrk on CPU 0, the one worker on the last CPU
    HOT_WORKERS=1
    HOT_THREADS=${BENCH_THREADS:-1}
    HOT_AFFINITY=1$(printf '%*s' $((NCPU - 1)) '' | tr ' ' 0)
    CLIENT=(taskset -c 0)
else
    HOT_WORKERS=$WORKERS
    HOT_THREADS=$THREADS
    HOT_AFFINITY=
    CLIENT=()
fi

die() {
    echo "bench.sh: $*" >&2
    exit 1
}

log() {
    echo "bench.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"


# --- the part that runs with a database --------------------------------

W=
NGINX_UP=
DB=
PROJECT=
ACCOUNT=
PORT=
cmd_line="${CLIENT[*]}${CLIENT[*]:+ }wrk -t$HOT_THREADS -c$CONNS -d$DURATION"

cleanup() {
    local rc=$?

    nginx_down

    # a database that outlives the bench keeps none of its rows
    if [ -n "$PROJECT" ] && [ -n "${BENCH_SESSION_DB:-}" ]; then
        delete_rows "$PROJECT" "$ACCOUNT"
    fi

    if [ -n "$W" ]; then
        if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
            echo "bench.sh: kept $W (nginx.conf, error.log)" >&2
        else
            rm -rf "$W"
        fi
    fi

    exit "$rc"
}


# write_conf ZONE [WORKERS [AFFINITY]]
write_conf() {
    local zone=$1 workers=${2:-$WORKERS} affinity=${3:-}

    cat > "$W/nginx.conf" <<EOF
$(nginx_conf_head "$W/ngx_http_session_module.so" "$workers" "$affinity")
    session_db_connections $DB_CONNS_PER_WORKER;
    session_limit_zone $zone;

$(bench_server)
}
EOF
}


# status PATH [KEY]: the status of one request
status_of() {
    local path=$1 auth=${2:-}
    local -a hdr=()
    [ -n "$auth" ] && hdr=(-H "Authorization: Bearer $auth")
    curl -s -o /dev/null -w '%{http_code}' "${hdr[@]}" \
         "http://127.0.0.1:$PORT$path"
}


expect_status() {
    local want=$1 what=$2 path=$3 auth=${4:-} got
    got=$(status_of "$path" "$auth")
    [ "$got" = "$want" ] || die "$what: $path answered $got, expected $want"
}


# name, expected status, path, key (or "-")
SCENARIOS=(
    "return 200 (baseline)|200|/ok|-"
    "401 malformed key|401|/api/v1/nope|MALFORMED"
    "401 unknown key (cached)|401|/api/v1/nope|UNKNOWN"
    "404 valid key (cached), limiter counting|404|/api/v1/nope|ADMIT"
    "429 session_limits|429|/sl/x|LIMITED"
    "429 limit_req|429|/lr/x|LR"
)

declare -A KEY
declare -A RPS
declare -A LAT
declare -A ALLRPS
declare -A ALLCPU
declare -A CPU

# nanoseconds nginx's worker processes have run on a CPU so far (the
# scheduler's own count, /proc/PID/schedstat: exact, where the user and
# system times of /proc/PID/stat are sampled at the clock tick)
worker_ns() {
    local master pid sum=0 t
    master=$(cat "$W/nginx.pid")
    for pid in $(pgrep -P "$master"); do
        t=$(awk '{ print $1 }' "/proc/$pid/schedstat" 2>/dev/null || echo 0)
        sum=$((sum + t))
    done
    echo "$sum"
}


# run_wrk NAME STATUS PATH KEY [DURATION]: one wrk run, its requests/s,
# latency and worker CPU per request appended to the lists of NAME
run_wrk() {
    local name=$1 want=$2 path=$3 key=$4 duration=${5:-$DURATION}
    local out rps lat non2xx total t0 t1 cpu
    local -a hdr=()

    if [ "$key" != - ]; then
        hdr=(-H "Authorization: Bearer ${KEY[$key]}")
    fi

    t0=$(worker_ns)
    out=$("${CLIENT[@]}" wrk -t"$HOT_THREADS" -c"$CONNS" -d"$duration" \
              "${hdr[@]}" "http://127.0.0.1:$PORT$path" 2>&1) \
        || { echo "$out" >&2; die "wrk failed ($name)"; }
    t1=$(worker_ns)

    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    lat=$(awk '$1 == "Latency" { print $2 }' <<<"$out")
    total=$(awk '/requests in/ { print $1 }' <<<"$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $5 }' <<<"$out")
    non2xx=${non2xx:-0}

    [ -n "$rps" ] || { echo "$out" >&2; die "no Requests/sec ($name)"; }

    # every answer of the run is of the expected kind
    if [ "$want" = 200 ] && [ "$non2xx" != 0 ]; then
        die "$name: $non2xx of $total answers were not 2xx"
    fi
    # (limit_req at 1r/m lets one request a minute through, so a run may
    # hold one or two 2xx)
    if [ "$want" != 200 ] && [ $((total - non2xx)) -gt 2 ]; then
        die "$name: only $non2xx of $total answers were $want"
    fi
    if grep -q 'socket errors' <<<"$out"; then
        log "$name: $(grep 'socket errors' <<<"$out")"
    fi

    # the workers' CPU time per request, in microseconds
    cpu=$(awk -v d=$((t1 - t0)) -v n="$total" \
              'BEGIN { printf "%.2f", d / 1000 / n }')

    ALLRPS[$name]+="$rps "
    ALLCPU[$name]+="$cpu "
    LAT[$name]+="$lat "
    log "$name: $rps requests/s, latency $lat, worker CPU $cpu us/request"
}


inside() {
    local i

    [ -n "${DB:-}" ] || die "no database"

    "$SESSIONCTL" -d "$DB" migrate >/dev/null || die "sessionctl migrate failed"

    LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
    W=$(mktemp -d /tmp/ngx-session-bench.XXXXXX)
    trap cleanup EXIT

    # a copy: "make" copies the new module over build/'s file in place,
    # which would crash an nginx that has it mapped
    cp "$MODULE" "$W/ngx_http_session_module.so"
    PORT=$(free_port) || die "no free port"

    ACCOUNT=$(ctl account create "bench-$$" --plan unlimited \
                  | json_field account_id)
    PROJECT=$(ctl project create "$ACCOUNT" "bench-$$" | json_field project_id)

    for i in ADMIT LIMITED; do
        KEY[$i]=$(ctl key create "$PROJECT" | json_field key)
    done
    KEY[MALFORMED]=sess_not-a-key
    KEY[UNKNOWN]=sess_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    # limit_req's key has the shape of ours
    KEY[LR]=sess_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

    write_conf bench:10m "$HOT_WORKERS" "$HOT_AFFINITY"
    start_nginx

    # what every scenario answers; the first request of the two limited
    # keys passes, every later one is refused
    expect_status 200 baseline /ok
    expect_status 401 "malformed key" /api/v1/nope "${KEY[MALFORMED]}"
    expect_status 401 "unknown key" /api/v1/nope "${KEY[UNKNOWN]}"
    expect_status 404 "valid key" /api/v1/nope "${KEY[ADMIT]}"
    expect_status 404 "session_limits, 1st" /sl/x "${KEY[LIMITED]}"
    expect_status 429 "session_limits, 2nd" /sl/x "${KEY[LIMITED]}"
    expect_status 200 "limit_req, 1st" /lr/x "${KEY[LR]}"
    expect_status 429 "limit_req, 2nd" /lr/x "${KEY[LR]}"

    log "$((ROUNDS * ${#SCENARIOS[@]})) runs of $cmd_line on 127.0.0.1:$PORT," \
        "nginx with $HOT_WORKERS workers${HOT_AFFINITY:+ (affinity $HOT_AFFINITY)}"

    # warm-up (not reported): connections, caches, CPU frequency
    "${CLIENT[@]}" wrk -t"$HOT_THREADS" -c"$CONNS" -d1s \
        "http://127.0.0.1:$PORT/ok" >/dev/null
    "${CLIENT[@]}" wrk -t"$HOT_THREADS" -c"$CONNS" -d1s \
        -H "Authorization: Bearer ${KEY[ADMIT]}" \
        "http://127.0.0.1:$PORT/api/v1/nope" >/dev/null

    # the scenarios in turn, ROUNDS times, every other round backwards:
    # drift of the machine's load is spread over all of them, and the two
    # 429 scenarios, side by side, are compared round by round
    local s name want path key round order
    for round in $(seq "$ROUNDS"); do
        order=("${SCENARIOS[@]}")
        if [ $((round % 2)) = 0 ]; then
            order=()
            for ((i = ${#SCENARIOS[@]} - 1; i >= 0; i--)); do
                order+=("${SCENARIOS[$i]}")
            done
        fi
        for s in "${order[@]}"; do
            IFS='|' read -r name want path key <<<"$s"
            # the limited keys stay refused: a window that ended between
            # two runs would let one request through
            if [ "$key" = LIMITED ] || [ "$key" = LR ]; then
                status_of "$path" "${KEY[$key]}" >/dev/null
            fi
            run_wrk "$name" "$want" "$path" "$key"
        done
    done

    # the two 429 paths once more, PAIRS times next to each other, which
    # one first alternating: the machine drifts by more than the two
    # differ, so the goal's ratio is taken pair by pair
    local p
    for p in $(seq "$PAIRS"); do
        order=("429 session_limits|429|/sl/x|LIMITED"
               "429 limit_req|429|/lr/x|LR")
        if [ $((p % 2)) = 0 ]; then
            order=("${order[1]}" "${order[0]}")
        fi
        for s in "${order[@]}"; do
            IFS='|' read -r name want path key <<<"$s"
            status_of "$path" "${KEY[$key]}" >/dev/null
            run_wrk "pair: $name" "$want" "$path" "$key" "$PAIR_DURATION"
        done
    done

    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r name want path key <<<"$s"
        RPS[$name]=$(median <<<"${ALLRPS[$name]}")
        CPU[$name]=$(median <<<"${ALLCPU[$name]}")
    done

    grep -E '\[(alert|crit|emerg)\]|signal [0-9]' "$W/error.log" >&2 \
        && die "the error log has alerts (above)"

    stop_nginx

    # every database path against pgbench running the plainest statement
    # that does the same work (util/bench-db.sh), with BENCH_WORKERS
    # workers; wrk and pgbench on CPU 0, nginx and PostgreSQL on the
    # others (BENCH_DB_CLIENT_CPUS, decision (nh))
    if [ "$PGBENCH_ON" != 0 ]; then
        BENCH_SESSION_DB=$DB BENCH_DB_OUT="$W/db.md" \
            bash "$ROOT/util/bench-db.sh" \
            || die "the database benchmark failed"
    fi

    # instructions per request under callgrind (util/bench-ir.sh)
    instructions

    capacity

    images

    webhooks

    cluster

    report
}


# --- three nodes on one database (util/bench-cluster.sh) -----------------

cluster() {
    [ "${BENCH_CLUSTER:-1}" != 0 ] || return 0

    log "three nodes of each session_limit_scope (util/bench-cluster.sh)"
    BENCH_SESSION_DB=$DB BENCH_CLUSTER_OUT="$W/cluster.md" \
        bash "$ROOT/util/bench-cluster.sh" \
        || die "the cluster benchmark failed"
}


# --- images (util/bench-images.sh): upload throughput, worker RSS -------

images() {
    [ "${BENCH_IMAGES:-1}" != 0 ] || return 0

    BENCH_SESSION_DB=$DB BENCH_IMAGES_OUT="$W/images.md" \
        bash "$ROOT/util/bench-images.sh" \
        || die "the image benchmark failed"
}


# --- webhooks (util/bench-webhook.sh): deliveries/s, latency ------------

webhooks() {
    [ "${BENCH_WEBHOOK:-1}" != 0 ] || return 0

    log "webhook delivery (util/bench-webhook.sh)"
    BENCH_SESSION_DB=$DB BENCH_WEBHOOK_OUT="$W/webhook.md" \
        bash "$ROOT/util/bench-webhook.sh" \
        || die "the webhook benchmark failed"
}


# --- instructions per request (callgrind) -------------------------------

instructions() {
    [ "$INSTRUCTIONS_ON" != 0 ] || return 0
    if ! command -v valgrind >/dev/null 2>&1; then
        log "valgrind not found: no instruction counts"
        return 0
    fi

    log "instructions per request under callgrind (util/bench-ir.sh)"
    : > "$W/ir.txt"
    BENCH_SESSION_DB=$DB BENCH_NGINX=$NGINX IR_OUT="$W/ir.txt" \
        bash "$ROOT/util/bench-ir.sh" >/dev/null \
        || die "util/bench-ir.sh failed"

    local name ir lim base lr ours adm unk
    {
        echo "| scenario | instructions/request | of which the limiter's code |"
        echo "|---|---:|---:|"
        while IFS='|' read -r name ir _ lim; do
            printf '| %s | %s | %s |\n' "$name" "$ir" "$lim"
        done < "$W/ir.txt"
    } > "$W/ir.md"

    ir_of() {
        awk -F'|' -v n="$1" '$1 == n { print $2 }' "$W/ir.txt"
    }
    lim_of() {
        awk -F'|' -v n="$1" '$1 == n { print $4 }' "$W/ir.txt"
    }

    ours=$(ir_of "429 session_limits")
    lr=$(ir_of "429 limit_req")
    adm=$(ir_of "404 valid key (cached), limiter counting")
    unk=$(ir_of "401 unknown key (cached)")
    lim=$(lim_of "404 valid key (cached), limiter counting")
    local list list_lim
    list=$(ir_of "200 GET /api/v1/sessions?limit=20 (a database query)")
    list_lim=$(lim_of "200 GET /api/v1/sessions?limit=20 (a database query)")

    {
        echo
        echo "- 429: limit_req / session_limits instructions: $(ratio "$lr" "$ours") (≥ 1.00 means ours takes no more)"
        echo "- Limiter on an admitted request (404 valid key): its own code $lim of $adm instructions, $(awk -v a="$lim" -v b="$adm" 'BEGIN { printf "%.1f", 100 * a / (b - a) }') % over the request without it; the whole difference to a 401 unknown key (same stage 1, no stage 2, answered in the access phase) is $((adm - unk)), $(awk -v a="$adm" -v b="$unk" 'BEGIN { printf "%.1f", 100 * (a - b) / b }') %"
        echo "- Limiter on an admitted request that does an endpoint's work (GET /api/v1/sessions?limit=20, 20 sessions): $list_lim of $list instructions, $(awk -v a="$list_lim" -v b="$list" 'BEGIN { printf "%.1f", 100 * a / (b - a) }') %"
    } >> "$W/ir.md"
}


CAP_SENT=
CAP_ALERT=
CAP_EVICTED=
CAP_ROUND=
CAP_SECONDS=
CAP_STATUSES=
CAP_ALERT_LINE=
CAP_NOTE=
LOAD_BEFORE=

capacity() {
    [ "$CAPACITY_KEYS" -gt 0 ] || return 0

    log "zone capacity: inserting $CAPACITY_KEYS keys"

    psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" -o "$W/keys" -c "
        WITH k AS (
            SELECT 'sess_' || md5(random()::text || i::text) AS key
            FROM generate_series(1, $CAPACITY_KEYS) AS i
        ), ins AS (
            INSERT INTO api_keys (project_id, key_hash, prefix, hint)
            SELECT '$PROJECT', sha256(convert_to(key, 'UTF8')), 'sess',
                   right(key, 4)
            FROM k
        )
        SELECT key FROM k" || die "inserting the keys failed"

    # a fresh 10m zone; the counters of a minute that is over are dropped
    # from the cold end as new keys come, so the whole fill must run in
    # one minute: start it at a minute's beginning unless 40 s are left
    write_conf bench:10m
    start_nginx

    local now left
    now=$(date +%s)
    left=$(( 60 - now % 60 ))
    if [ "$left" -lt 40 ]; then
        log "zone capacity: waiting $left s for the next minute"
        sleep "$left"
    fi

    log "zone capacity: one request per key until the zone-full ALERT"

    local res
    res=$(perl "$ROOT/bench/fill-keys.pl" "$PORT" "$W/keys" "$W/error.log") \
        || die "the zone-capacity client failed"

    CAP_SENT=$(json_field sent <<<"$res")
    CAP_ROUND=$(json_field round <<<"$res")
    CAP_SECONDS=$(json_field seconds <<<"$res")
    CAP_EVICTED=$(perl -MJSON::PP -e 'local $/; my $j = decode_json(<STDIN>);
                   print $j->{evicted_after} // "none"' <<<"$res")
    CAP_ALERT=$(perl -MJSON::PP -e 'local $/; my $j = decode_json(<STDIN>);
                   print $j->{alert_after} // "none"' <<<"$res")
    CAP_STATUSES=$(perl -MJSON::PP -e 'local $/; my $j = decode_json(<STDIN>);
                   print join ", ", map { "$_: $j->{statuses}{$_}" }
                                    sort keys %{$j->{statuses}}' <<<"$res")
    local start end
    start=$(json_field start <<<"$res")
    end=$(json_field end <<<"$res")
    if [ "$(( ${start%.*} / 60 ))" != "$(( ${end%.*} / 60 ))" ]; then
        CAP_NOTE=" The fill crossed a minute boundary: counters of the minute before were dropped while it ran, so the figure is an upper bound."
        log "zone capacity: the fill crossed a minute boundary"
    fi
    CAP_ALERT_LINE=$(grep -m1 'is full: evicted the counters' "$W/error.log" \
                     | sed 's/^[0-9\/]* [0-9:]* //' || true)

    grep -E '\[crit\]|signal [0-9]' "$W/error.log" >&2 \
        && die "the error log of the capacity run has crit/crash lines"

    stop_nginx
}


# pair_ratios A B [LIST]: the ratio A/B of each pair of runs, from the
# lists of requests/s (ALLRPS, or the one named)
pair_ratios() {
    local -n list=${3:-ALLRPS}
    paste -d' ' <(tr ' ' '\n' <<<"${list[$1]:-}" | grep .) \
                <(tr ' ' '\n' <<<"${list[$2]:-}" | grep .) \
        | awk '{ printf "%.2f ", $1 / $2 }'
}


# the requests/s of each run, whole numbers
runs_of() {
    local v out=
    for v in ${ALLRPS[$1]}; do
        out+="${out:+, }${v%.*}"
    done
    printf '%s' "$out"
}


# the page's section on instruction counts
ir_section() {
    echo "## Instructions per request (callgrind)"
    echo
    if [ ! -f "$W/ir.md" ]; then
        echo "Not measured in this run (BENCH_INSTRUCTIONS=0 or no valgrind)."
        return 0
    fi
    cat <<'EOT'
`util/bench-ir.sh`: one nginx process (`master_process off`) under
valgrind's callgrind, the locations above, 2000 requests per scenario
on one keep-alive connection after 200 of warm-up, counters zeroed in
between; `session_auth_cache_ttl 1h` so that no database lookup falls
inside a measured stretch.  The count is every user-space instruction
of the process per request (event loop, parsing, the handler, filters,
the `writev`), not the kernel's.  Unlike requests/s on a shared
machine it repeats to within a few instructions, so it is the figure
to compare the two 429 paths by.  "The limiter's code" is the
inclusive count of `ngx_http_session_limit_prepare`,
`ngx_http_session_rate_take_locked` (the check-and-increment under the
zone mutex) and `ngx_http_session_limit` (its headers); nginx's header
filter then spends some more writing those headers out.

EOT
    cat "$W/ir.md"
    cat <<'EOT'

How "the limiter's overhead on an admitted request" (goal ≤ 5 %)
is read: the stage cannot be switched off (the contract puts the three
X-RateLimit headers on every answer from stage 2 on), and with a limit
that never trips it does exactly the work it does with any other limit
on an admitted request, so a run "with limits" against one "with a limit
so high it never trips" differs by nothing.  The overhead is therefore
the work stage 2 adds to an admitted request: its code's instructions
against the rest of the request, and, as an upper bound that also counts
the header filter's share, the difference between the admitted 404 and
a cached 401 for an unknown key (the same stage 1 and a JSON error of
the same size, no stage 2).  That difference also holds nginx's
post-access, pre-content and content phases, which an admitted request
goes through and a refusal in the access phase does not
(docs/decisions.md, (bc)).  The 404 of an unknown route is the
cheapest admitted request there is, so this is the worst case: on a
request that does an endpoint's work the same few hundred instructions
are a far smaller share (see docs/decisions.md).
EOT
}


# the page's section on the database scenarios
db_section() {
    echo "## The database: every endpoint against the plain statement"
    echo
    if [ ! -f "$W/db.md" ]; then
        echo "Not measured in this run (BENCH_PGBENCH=0)."
        echo
        hand cost
        return 0
    fi
    cat <<EOT
Every endpoint that touches PostgreSQL, driven by wrk
(\`bench/db-request.lua\`), beside pgbench running the plainest
statement that does the same database work (written out by
\`util/bench-db.sh\`, which holds each one), with as many clients as
the module holds connections ($WORKERS workers x
session_db_connections $DB_CONNS_PER_WORKER), rounds alternating in
order.  \`bash util/bench-db.sh\` runs this part alone.  Requests/s
are measured with 64 wrk connections (a busy service: more requests
than database connections, so that statements wait for one and reads
go in pipelines, decision (na)); p99 with as many wrk connections as
pgbench has clients, so that both sides have the same number of
requests in flight (with 64 the module's p99 is mostly its queue, see
the last column).  The load generators (wrk, \`bench/http-rate\`,
pgbench) run on CPU 0 and nginx and PostgreSQL on the others, the same
for both sides, so that neither side's client takes CPU time from what
it measures (decision (nh); \`BENCH_DB_CLIENT_CPUS=none\` runs them
unpinned).  Under the table, two more put that p99 in context
(decision (ne)): the floor, nginx alone serving each read's answer
from a file to the same wrk, and every endpoint at one fixed rate below
saturation (\`bench/http-rate\` beside \`pgbench -R\`) with the CPU
time nginx and PostgreSQL spend per request (decision (ya);
\`BENCH_DB_MODE=cost bash util/bench-db.sh\` runs that part alone, about
10 minutes; see "Cost per request at a fixed rate" below).

EOT
    cat "$W/db.md"
    echo

    # the fixed-rate runs of dated builds, the method and how to plan
    # capacity with it
    hand cost
}


# hand NAME: bench/NAME.md, kept by hand, as it is, between two marks
# (HTML comments, not shown) by which "bash util/bench.sh --page" puts a
# later edit of the file in and t/000-layout.t checks the page against
# the file.  Every part of the page that no run writes lives in such a
# file: an edit made in docs/benchmarks.md alone is lost at the next
# "make bench".  The files, in the page's order:
#   cost        the fixed-rate cost of dated runs, method, planning
#   notes       what the figures were found to mean
#   images      the image runs of dated builds, streamed images
#   webhook     where the time of a delivery goes
#   cluster     the cluster run of 05:15, the turn of a minute
#   pooler      through PgBouncer (util/bench-pooler.sh)
#   poll        the long poll fan-out, "make bench-poll", a run of its own
#   poll-proto  a waiting long poll per protocol, "make bench-poll-proto"
hand() {
    [ -f "$ROOT/bench/$1.md" ] || return 0
    echo "<!-- kept by hand: bench/$1.md -->"
    cat "$ROOT/bench/$1.md"
    echo "<!-- end of bench/$1.md -->"
}


# part NAME HEADING SWITCH: the section a script wrote into $W/NAME.md
# (or HEADING and a line saying it was skipped), then bench/NAME.md
part() {
    if [ -f "$W/$1.md" ]; then
        cat "$W/$1.md"
    else
        printf '%s\n\nNot measured in this run (%s=0).\n' "$2" "$3"
    fi
    echo
    hand "$1"
}


# bash util/bench.sh --page: the files kept by hand put into the page
# again as they are now, without a run (the rest of the page stays)
page() {
    local f name

    case $OUT in
        -) die "--page writes the page: BENCH_OUT=- makes no sense" ;;
        /*) ;;
        *) OUT=$ROOT/$OUT ;;
    esac
    [ -f "$OUT" ] || die "$OUT: no page yet (make bench)"

    perl -0777 -pi -e '
        s{(<!-- kept by hand: (bench/[\w.-]+\.md) -->\n).*?(<!-- end of \2 -->)}{
            open my $fh, "<", $2 or die "$2: $!\n";
            local $/;
            $1 . <$fh> . $3
        }gse' "$OUT" || die "--page: $OUT not rewritten"

    for f in "$ROOT"/bench/*.md; do
        name=bench/${f##*/}
        grep -qF "<!-- kept by hand: $name -->" "$OUT" \
            || log "$name has no place in $OUT yet: util/bench.sh places it, make bench writes it"
    done
    log "put bench/*.md into $OUT"
}


cpu_of() {
    printf '%s' "${CPU[$1]}"
}


report() {
    local base=${RPS["return 200 (baseline)"]}
    local lr=${RPS["429 limit_req"]}
    local ours=${RPS["429 session_limits"]}
    local cpu machine s name want path key

    cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    machine="$(nproc) CPUs ($cpu), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), Linux $(uname -r)"

    {
        echo "| scenario | answer | requests/s (median of $ROUNDS) | × return 200 | runs (requests/s) | worker CPU µs/request (median) |"
        echo "|---|---|---:|---:|---|---:|"
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r name want path key <<<"$s"
            printf '| %s | %s | %.0f | %s | %s | %s |\n' "$name" "$want" \
                "${RPS[$name]}" "$(ratio "${RPS[$name]}" "$base")" \
                "$(runs_of "$name")" "${CPU[$name]}"
        done
    } > "$W/table.md"

    local r401 r404 r429 r429m pairs cpairs c429
    r401=$(ratio "${RPS["401 malformed key"]}" "$base")
    r404=$(ratio "${RPS["404 valid key (cached), limiter counting"]}" "$base")
    r429m=$(ratio "$ours" "$lr")

    # the two 429 scenarios ran next to each other in every round and in
    # the extra pairs: the ratio of each pair, and their median
    pairs="$(pair_ratios "429 session_limits" "429 limit_req") $(pair_ratios "pair: 429 session_limits" "pair: 429 limit_req")"
    r429=$(median <<<"$pairs")
    r429=$(awk -v v="$r429" 'BEGIN { printf "%.2f", v }')
    cpairs="$(pair_ratios "429 limit_req" "429 session_limits" ALLCPU) $(pair_ratios "pair: 429 limit_req" "pair: 429 session_limits" ALLCPU)"
    c429=$(awk -v v="$(median <<<"$cpairs")" 'BEGIN { printf "%.2f", v }')

    {
        echo
        echo "Goals:"
        echo "- 401 (malformed key) ≥ 0.8 × return 200: $r401 ($(goal "$r401" 0.8))"
        echo "- 404 (valid cached key) ≥ 0.6 × return 200: $r404 ($(goal "$r404" 0.6))"
        echo "- 429 session_limits ≥ 1.0 × 429 limit_req: $r429 ($(goal "$r429" 1.0)): the median of the requests/s ratios of $(wc -w <<<"$pairs") pairs of runs side by side (the $ROUNDS rounds above, then $PAIRS more of $PAIR_DURATION): $(tr -s ' ' <<<"$pairs" | sed 's/^ //; s/ $//; s/ /, /g'); the ratio of the two medians in the table is $r429m"
        echo "- Worker CPU per request, limit_req / session_limits, pair by pair: median $c429 (above 1.00: ours costs less)"
        echo
        echo "Worker CPU per request against return 200: 401 malformed $(ratio "${CPU["401 malformed key"]}" "${CPU["return 200 (baseline)"]}")×, 404 valid key $(ratio "${CPU["404 valid key (cached), limiter counting"]}" "${CPU["return 200 (baseline)"]}")×; 429 session_limits against 429 limit_req: $(ratio "$(cpu_of "429 session_limits")" "$(cpu_of "429 limit_req")")×."
        if [ "$CAPACITY_KEYS" -gt 0 ]; then
            echo
            echo "Zone capacity (session_limit_zone 10m): first counter evicted in the round of $CAP_ROUND keys that ended with key $CAP_EVICTED (the ALERT by key $CAP_ALERT), $CAP_SENT keys sent in $CAP_SECONDS s ($CAP_STATUSES).$CAP_NOTE"
        fi
    } > "$W/goals.md"

    echo
    cat "$W/table.md" "$W/goals.md"
    [ -f "$W/ir.md" ] && { echo; cat "$W/ir.md"; }
    [ -f "$W/db.md" ] && { echo; cat "$W/db.md"; }
    echo
    [ -f "$W/images.md" ] && { cat "$W/images.md"; echo; }
    [ -f "$W/webhook.md" ] && { cat "$W/webhook.md"; echo; }
    [ -f "$W/cluster.md" ] && { cat "$W/cluster.md"; echo; }

    [ "$OUT" = - ] && return 0

    case $OUT in
        /*) ;;
        *) OUT=$ROOT/$OUT ;;
    esac

    local placement
    if [ "$PIN" = 1 ]; then
        placement="one nginx worker pinned to CPU $((NCPU - 1)) (\`worker_cpu_affinity $HOT_AFFINITY\`), wrk pinned to CPU 0 (\`taskset -c 0\`): the worker is the bottleneck, so requests/s is what the server can answer, not what the client can parse (a 429 with the contract's four headers costs wrk more to read than nginx's bare 429 page)"
    else
        placement="$WORKERS nginx workers and wrk sharing all CPUs (BENCH_PIN=0)"
    fi

    cat > "$OUT" <<EOF
# Benchmarks

Written by \`make bench\` (\`bash util/bench.sh\`); run it again to
refresh this page.  The sections that say they are kept by hand come
from bench/*.md as those files are (edit them there, then
\`bash util/bench.sh --page\` puts them in without a run); every other
number here comes from the run below, on one machine: compare the
ratios, which hold across machines far better than the absolute
figures.

## The run

- Machine: $machine
- nginx $("$NGINX" -v 2>&1 | sed 's/^nginx version: nginx\///'), \`master_process on\`, \`access_log off\`,
  \`keepalive_requests 1000000\`, error log at \`warn\`
- Hot-path scenarios (the first table): $placement; the database
  scenarios: $WORKERS workers and every client unpinned
- PostgreSQL: $(psql -X -At -d "$DB" -c 'SHOW server_version' 2>/dev/null | sed 's/ .*//') on the same machine
  ($( [ -n "${BENCH_SESSION_DB:-}" ] && echo "given by BENCH_SESSION_DB" || echo "a throw-away pg_virtualenv cluster"))
- Date: $(date -u +%Y-%m-%dT%H:%M:%SZ); load average before the run
  $LOAD_BEFORE, after $(cut -d' ' -f1-3 /proc/loadavg) (anything else
  running on the machine shows in the spread of the runs)
- Each scenario: \`$cmd_line\` against \`http://127.0.0.1:PORT<path>\`,
  $ROUNDS runs, taken in turn (scenario 1 … 6, then 6 … 1, and so on), the median reported

$(cat "$W/table.md")
$(cat "$W/goals.md")

$(ir_section)

$(db_section)

## What each scenario measures

| scenario | request | what runs |
|---|---|---|
| return 200 (baseline) | \`GET /ok\` | \`location = /ok { return 200; }\`: nginx alone |
| 401 malformed key | \`GET /api/v1/nope\`, \`Authorization: Bearer sess_not-a-key\` | stage 1 up to the key syntax check: no hash, no shared memory, no database; the JSON 401 |
| 401 unknown key (cached) | a well-formed key that does not exist | stage 1: SHA-256 of the key (from the worker's memo after the first request), a lookup in the shared auth cache (the database is asked once, the "invalid" answer is cached for \`session_auth_cache_ttl\`, 5 s, so about once per 5 s) |
| 404 valid key (cached), limiter counting | a valid key, limits of 1000000000 | stages 1 to 3: the auth cache hit, the rate-limit check-and-increment under the zone mutex (it never refuses), the three X-RateLimit headers, the route table, the JSON 404 |
| 429 session_limits | \`GET /sl/x\`, a valid key over \`session_limits other=1\` | stages 1 and 2: the key's hash (from the worker's memo), the auth cache hit and the counter check in one turn of the zone mutex, four headers (with Retry-After), the JSON 429 rendered at start-up |
| 429 limit_req | \`GET /lr/x\` (a path of the same shape), \`limit_req zone=lr\` (burst 0), key \`\$http_authorization\` (the same header value shape, rate 1r/m), \`limit_req_status 429\` | nginx's own limiter refusing: its shared-memory lookup and nginx's built-in 429 page |

The rate-limit stage cannot be switched off for a \`session_api\`
location (docs/decisions.md, (ay)), so "the cost of the limiter" is read
from differences and from instruction counts (the section above) rather
than measured alone:

- *401 unknown key (cached)* → *404 valid key*: what the limiter (the
  counter update in the auth cache's turn of the zone mutex, three more
  headers) adds to an authenticated request;
- *404 valid key* against *return 200*: the whole module on an admitted
  request, minus the endpoint itself.

\`limit_req\` logs each refusal at \`error\` by default and our module logs
none; the comparison sets \`limit_req_log_level info\` (below the
\`warn\` error log), so neither side writes to the log per request.

## Zone capacity

A fresh nginx with \`session_limit_zone bench:10m\`; $CAPACITY_KEYS keys
inserted with SQL, then \`bench/fill-keys.pl\` sends one request per key,
16 keep-alive connections with 16 pipelined requests each per round, and
after each round reads the zone's evictions from \`session_status\` and
looks for the zone-full ALERT in the error log; the fill
starts at the beginning of a minute so that no counter expires while it
runs.  Each new key also takes an entry in the auth cache, which shares
the zone, and one among the keys seen valid (128 bytes, at most a
quarter of the zone, never evicted by counters: decision (ua)); when the
slab is full, auth cache entries are evicted first (no ALERT), and only
then the counters of the least recently used keys, with the ALERT.  So
the figure is the number of keys whose counters fit when the zone holds
nothing else but its quarter of keys seen valid: one 128-byte slab chunk
per key (all three classes), about 3/4 x 10 MiB / 128 B = 61440 minus
the slab's own pages (81920 before decision (ua)).

- First counter evicted in the round that ended with key
  **$CAP_EVICTED**: the zone held the counters of at most that many
  keys, and of more than $CAP_ROUND fewer; answers: $CAP_STATUSES;
  $CAP_SENT keys sent in $CAP_SECONDS s.$CAP_NOTE
- The ALERT that says it, first seen after key $CAP_ALERT ("none": not
  by the end of that round). One ALERT a second per zone says the
  counters evicted and the keys seen valid forgotten since the last, so
  once keys seen valid are being forgotten (from about 20,000 keys on)
  the first eviction is said in the next second, which at this fill's
  pace is up to some 25,000 keys later: \`$CAP_ALERT_LINE\`

$(hand notes)

$(part images "## Images" BENCH_IMAGES)

$(part webhook "## Webhook delivery" BENCH_WEBHOOK)

$(part cluster "## Three nodes on one PostgreSQL (session_limit_scope)" BENCH_CLUSTER)

## Reproduce

    make bench                                     # or: bash util/bench.sh
    BENCH_DURATION=10s BENCH_ROUNDS=5 bash util/bench.sh
    BENCH_SESSION_DB="host=... dbname=..." bash util/bench.sh   # an existing database
    bash util/bench-webhook.sh                     # the webhook section alone
    bash util/bench-cluster.sh                     # three nodes, both scopes, alone
    BENCH_DB_MODE=cost bash util/bench-db.sh       # CPU per request at a fixed rate alone
    make bench-poll                                # the long poll beside nchan and its floor
    bash util/bench-pooler.sh                      # named, unnamed and through PgBouncer
    bash util/debroot.sh run-debian13 bash util/bench-pooler.sh   # and PgBouncer 1.24 keeping them

\`BENCH_OUT=-\` prints the table without writing this page.

$(hand pooler)

$(hand poll)

$(hand poll-proto)
EOF

    log "wrote $OUT"
}


if [ "${1:-}" = --page ]; then
    page
    exit 0
fi

if [ "${1:-}" = --inside-pg-virtualenv ]; then
    shift
    DB=$(pg_virtualenv_conninfo)
    export PGCONNECT_TIMEOUT=5
    pg_cluster_up
    inside
    exit $?
fi


# Preconditions
command -v wrk >/dev/null 2>&1 || die "wrk not found (package wrk; make deps)"
command -v curl >/dev/null 2>&1 || die "curl not found (package curl)"
command -v psql >/dev/null 2>&1 \
    || die "psql not found (package postgresql-client)"
[ -x "$NGINX" ] || die "$NGINX not found (package nginx)"
[ -f "$MODULE" ] || die "$MODULE not built (run make)"
[ -x "$SESSIONCTL" ] || die "$SESSIONCTL not built (run make)"

if [ -n "${BENCH_SESSION_DB:-}" ]; then
    DB=$BENCH_SESSION_DB
    inside
    exit $?
fi

command -v pg_virtualenv >/dev/null 2>&1 \
    || die "pg_virtualenv not found (package postgresql-common; make deps)"

# as util/test.sh: nothing of the caller's libpq environment, a TMPDIR the
# postgres user can use, a locale that exists, a random free port
pg_env_clear
LC_ALL=$(utf8_locale)
export LC_ALL

pg_cluster_tries 3 "" pg_virtualenv -t -o fsync=on -- \
    bash "$ROOT/util/bench.sh" --inside-pg-virtualenv
