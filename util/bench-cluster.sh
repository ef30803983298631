#!/usr/bin/env bash
# Three nodes on one PostgreSQL, the cluster part of "make bench"
# (util/bench.sh calls it); on its own:
#
#   bash util/bench-cluster.sh             a throw-away PostgreSQL
#   BENCH_SESSION_DB="host=... dbname=..." bash util/bench-cluster.sh
#
# Two sets of three nginx nodes run side by side on 127.0.0.1 against the
# one database: one with session_limit_scope node (the default), one with
# session_limit_scope cluster (docs/decisions.md (qa)).  Each node has
# BENCH_CLUSTER_WORKERS (1) workers.  The client is one wrk with three
# threads, thread i connected to node i of the set under test
# (bench/cluster.lua), BENCH_CLUSTER_CONNECTIONS (48) connections in all:
# every node gets a third of the load, as behind a round-robin balancer.
# The two sets take turns, run by run, BENCH_CLUSTER_ROUNDS (5) times,
# every other round the cluster set first; medians are reported, and
# each ratio is the median of the rounds' own ratios (the two runs of a
# round are next to each other, so the machine's drift cancels).
#
# 1. Requests/s and p99 (wrk's latency distribution, all threads
#    together), BENCH_CLUSTER_DURATION (5s) a run, on the cheapest
#    admitted request (GET of an unknown route: 404, class other, no
#    endpoint statement, so the leases' cost shows in full):
#      - one busy key, limits that never trip (1,000,000,000 a minute:
#        leases grow to a tenth of that);
#      - BENCH_CLUSTER_KEYS (1000) keys, each request the next key;
#      - one key past its limit: 429 (other=200, spent before the run);
#    each run inside one window, after a second of the same load; then,
#    BENCH_CLUSTER_TURN (2) times per set (0: not), the 1,000 keys for
#    13 s across the turn of a minute, from second 49, which a node-local
#    counter does not notice and a lease does (the keys lease their first
#    block of the new window in the last seconds of the old one).
# 2. Requests admitted in one window, the sum of the nodes' 404s from
#    session_status, beside the limit, with the lease statements they
#    took: one busy key at limits 100, 200 and 300 (the defaults of
#    create, other and list; the class does not matter to a lease), and
#    the 1,000 keys at other=20 (every key spent within the run); each
#    run 8 s, shorter than what is left of its minute, with keys of its
#    own.
#
# 3. CPU per 1,000 requests of each run of part 1: the scheduler's time
#    of the set's nginx workers and of every PostgreSQL process (a
#    database of BENCH_SESSION_DB on another machine: nginx's only).
#
# BENCH_CLUSTER_ONLY=turn runs the turn of a minute alone (the warm-up,
# then BENCH_CLUSTER_TURN runs of each set).  BENCH_CLUSTER_TURN_KEYS=new
# gives each run of the turn 1,000 keys of its own, busy from second 47
# (no block leased yet, no rate known: the keys wake up just before the
# turn) instead of the 1,000 keys of the other runs (same).  BENCH_CLUSTER_TRACE=FILE
# appends a line a second of each run of part 1 to FILE (second of the
# minute; the set's 404s, lease statements and requests that waited; CPU
# ms of its nginx and of PostgreSQL), and after each run what
# pg_stat_statements and pg_stat_wal counted in it (the throw-away
# PostgreSQL then loads pg_stat_statements).  BENCH_PORTS (bench-lib.sh)
# is the range of the ports it picks.
#
# On a 2-CPU machine the six nginx, PostgreSQL and wrk share two CPUs:
# what counts is each ratio of the two sets in the same run, not the
# absolute figures.  Prints a Markdown section on stdout
# (BENCH_CLUSTER_OUT: to that file), progress on stderr.  Loopback only;
# every row it adds is deleted at the end.  BENCH_KEEP keeps the scratch
# directory.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${BENCH_NGINX:-/usr/sbin/nginx}
MODULE=${SESSION_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl
DB=${BENCH_SESSION_DB:-}

WORKERS=${BENCH_CLUSTER_WORKERS:-1}
CONNS=${BENCH_CLUSTER_CONNECTIONS:-48}
DURATION=${BENCH_CLUSTER_DURATION:-5s}
ROUNDS=${BENCH_CLUSTER_ROUNDS:-5}
NKEYS=${BENCH_CLUSTER_KEYS:-1000}
ONLY=${BENCH_CLUSTER_ONLY:-}
TRACE=${BENCH_CLUSTER_TRACE:-}
OUT=${BENCH_CLUSTER_OUT:--}
NODES=3

die() {
    echo "bench-cluster.sh: $*" >&2
    exit 1
}

log() {
    echo "bench-cluster.sh: $*" >&2
}

# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

[ -f "$MODULE" ] && [ -x "$SESSIONCTL" ] || die "run make first"
command -v wrk >/dev/null 2>&1 || die "wrk not found"
command -v curl >/dev/null 2>&1 || die "curl not found"


# without a database: the same script inside a throw-away cluster
if [ -z "$DB" ] && [ "${1:-}" != --inside-pg-virtualenv ]; then
    pgss=()
    if [ -n "$TRACE" ]; then
        pgss=(-o shared_preload_libraries=pg_stat_statements
              -o track_wal_io_timing=on -o pg_stat_statements.track=all)
    fi
    pg_cluster_report "$OUT" BENCH_CLUSTER_OUT "$ROOT/util/bench-cluster.sh" \
        -o fsync=on "${pgss[@]}"
    exit $?
fi

if [ -z "$DB" ]; then
    DB=$(pg_virtualenv_conninfo)
fi

W=$(mktemp -d /tmp/ngx-session-bench-cluster.XXXXXX)
chmod 755 "$W"
ACCOUNT=
PROJECT=

declare -A PORTS

cleanup() {
    local rc=$? d

    for d in "$W"/node/* "$W"/cluster/*; do
        if [ -f "$d/nginx.pid" ]; then
            "$NGINX" -p "$d/" -c "$d/nginx.conf" -s stop 2>/dev/null || true
        fi
    done

    if [ -n "$PROJECT" ]; then
        psql -X -q -d "$DB" -c "DELETE FROM rate_leases WHERE key_hash IN
                (SELECT key_hash FROM api_keys
                  WHERE project_id = '$PROJECT')" >/dev/null 2>&1 || true
        delete_rows "$PROJECT" "$ACCOUNT"
    fi

    if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
        echo "bench-cluster.sh: kept $W (nginx.conf, error.log)" >&2
    else
        rm -rf "$W"
    fi

    exit "$rc"
}

trap cleanup EXIT


# --- the nodes ------------------------------------------------------------

# node_start SCOPE I: node I of the set of session_limit_scope SCOPE
node_start() {
    local scope=$1 i=$2 d port
    d=$W/$scope/$i
    mkdir -p "$d"
    port=$(free_port) || die "no free port"
    PORTS[$scope]+="$port "

    # the head's paths are the node's ($W for the function), the module
    # the bench's copy
    # shellcheck disable=SC2097,SC2098 # the argument's $W is the bench's
    cat > "$d/nginx.conf" <<EOF
$(W=$d nginx_conf_head "$W/ngx_http_session_module.so" "$WORKERS")
    session_limit_scope $scope;

    server {
        listen 127.0.0.1:$port backlog=4096;

        location = /ok {
            return 200;
        }

        location = /status {
            session_status;
        }

        # limits that never trip
        location /api/ {
            session_api;
            session_limits create=1000000000 list=1000000000
                           other=1000000000;
        }

        # the default limit of class other, and those of create and list
        location /dl/ {
            session_api;
            session_limits other=200;
        }

        location /l100/ {
            session_api;
            session_limits other=100;
        }

        location /l300/ {
            session_api;
            session_limits other=300;
        }

        # a low one, which every one of the 1,000 keys reaches in a run
        location /lo/ {
            session_api;
            session_limits other=20;
        }
    }
}
EOF
    nginx_start "$d" "http://127.0.0.1:$port/ok" "node $scope/$i"
}


# sum SCOPE WHAT: over the set's nodes, from session_status: "404", "429"
# (answers), or a figure of rate_limit ("leases", "waits", ...)
sum() {
    local scope=$1 what=$2 port total=0 v
    for port in ${PORTS[$scope]}; do
        v=$(curl -s "http://127.0.0.1:$port/status" | perl -MJSON::PP -e '
                local $/;
                my $j = JSON::PP->new->decode(<STDIN>);
                my $w = $ARGV[0];
                my $r = $j->{rate_limit};
                print exists $r->{$w} ? $r->{$w}
                                      : $j->{requests}{by_status}{$w};' \
                "$what")
        total=$((total + v))
    done
    echo "$total"
}


# --- CPU time --------------------------------------------------------------

POSTMASTER=

# the local PostgreSQL's postmaster (the checkpointer's parent), if any
find_postmaster() {
    local p
    p=$(sql "SELECT pid FROM pg_stat_activity
             WHERE backend_type = 'checkpointer'" 2>/dev/null) || p=
    [ -n "$p" ] || return 0
    p=$(ps -o ppid= -p "$p" 2>/dev/null || true)
    p=${p// /}
    if [ -n "$p" ] && grep -q postgres "/proc/$p/cmdline" 2>/dev/null; then
        POSTMASTER=$p
    fi
}

# cpu_snap SCOPE: "GROUP PID NS" for the set's nginx workers (nginx) and
# every PostgreSQL process (pg): the scheduler's nanoseconds on a CPU
# (/proc/PID/task/*/schedstat), as in bench-db.sh
cpu_snap() {
    local scope=$1 d p
    local -a files=()

    for d in "$W/$scope"/*; do
        for p in $(pgrep -P "$(cat "$d/nginx.pid")"); do
            files+=(/proc/"$p"/task/*/schedstat)
        done
    done
    if [ -n "$POSTMASTER" ]; then
        for p in "$POSTMASTER" $(pgrep -P "$POSTMASTER"); do
            files+=(/proc/"$p"/task/*/schedstat)
        done
    fi

    # a process that ended since: skipped, not an error (grep's status 2)
    { grep -s -H '' "${files[@]}" || true; } | awk '
        { split($0, a, "/"); split($0, b, ":"); split(b[2], v, " ");
          s[a[3]] += v[1] }
        END { for (p in s) print p, s[p] }' \
        | while read -r p ns; do
            if grep -qs '^nginx' "/proc/$p/comm"; then
                echo "nginx $p $ns"
            else
                echo "pg $p $ns"
            fi
        done
}

# cpu_delta BEFORE AFTER: "NGINX_MS PG_MS", CPU time between two cpu_snap
# (a process that ended in between is left out, a new one counted whole)
cpu_delta() {
    awk 'NR == FNR { b[$2] = $3; next }
         { d = $3 - ($2 in b ? b[$2] : 0); t[$1] += d }
         END { printf "%.1f %.1f\n", t["nginx"] / 1e6, t["pg"] / 1e6 }' \
        "$1" "$2"
}


# trace NAME SCOPE SECONDS: a line a second to BENCH_CLUSTER_TRACE, for
# SECONDS: the second of the minute, then over the set's nodes the 404s,
# lease statements and requests that waited in that second, and the CPU
# milliseconds of its nginx workers and of PostgreSQL (one perl for all
# of it, not a curl a node each second)
trace() {
    local name=$1 scope=$2 secs=$3 d pids=
    for d in "$W/$scope"/*; do
        pids+="$(pgrep -P "$(cat "$d/nginx.pid")" | tr '\n' ' ')"
    done
    perl -MHTTP::Tiny -MJSON::PP -MTime::HiRes=time,sleep -e '
        my ($name, $scope, $secs, $ports, $pids, $pm) = @ARGV;
        my @ports = split " ", $ports;
        my @ngx = split " ", $pids;
        my $http = HTTP::Tiny->new(timeout => 2);
        sub ns {
            my $t = 0;
            for my $p (@_) {
                for my $f (glob "/proc/$p/task/*/schedstat") {
                    open my $h, "<", $f or next;
                    my $l = <$h>;
                    $t += (split " ", $l)[0];
                }
            }
            return $t;
        }
        sub pgpids {
            return () unless $pm;
            my @c = ($pm);
            for my $s (glob "/proc/[0-9]*/stat") {
                open my $h, "<", $s or next;
                my $l = <$h>;
                push @c, $1 if $l =~ /^(\d+) \(.*\) \S (\d+)/ && $2 == $pm;
            }
            return @c;
        }
        sub snap {
            my %v = (a => 0, l => 0, w => 0);
            for my $p (@ports) {
                my $r = $http->get("http://127.0.0.1:$p/status");
                next unless $r->{success};
                my $j = JSON::PP->new->decode($r->{content});
                $v{a} += $j->{requests}{by_status}{404} // 0;
                $v{l} += $j->{rate_limit}{leases} // 0;
                $v{w} += $j->{rate_limit}{waits} // 0;
            }
            $v{n} = ns(@ngx);
            $v{p} = ns(pgpids());
            return \%v;
        }
        open my $out, ">>", $ENV{BENCH_CLUSTER_TRACE} or die;
        my $t0 = time;
        my $prev = snap();
        for my $i (1 .. $secs) {
            sleep($t0 + $i - time) if $t0 + $i > time;
            my $cur = snap();
            printf $out "%s\t%s\t%02d\t%d\t%d\t%d\t%.0f\t%.0f\n",
                $name, $scope, int(time) % 60,
                $cur->{a} - $prev->{a}, $cur->{l} - $prev->{l},
                $cur->{w} - $prev->{w}, ($cur->{n} - $prev->{n}) / 1e6,
                ($cur->{p} - $prev->{p}) / 1e6;
            $prev = $cur;
        }' "$name" "$scope" "$secs" "${PORTS[$scope]}" "$pids" \
        "$POSTMASTER"
}


# with BENCH_CLUSTER_TRACE, pg_stat_statements and pg_stat_wal over each
# run, to the trace (a database of BENCH_SESSION_DB may lack them)
pgss_reset() {
    sql "CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
         SELECT pg_stat_statements_reset();
         SELECT pg_stat_reset_shared('wal')" >/dev/null 2>&1 || true
}

pgss_dump() {
    {
        echo "# $1, $2: statements (calls, ms in all, rows), WAL"
        sql "SELECT calls, round(total_exec_time::numeric, 1), rows,
                    left(regexp_replace(query, '\s+', ' ', 'g'), 70)
               FROM pg_stat_statements
              WHERE query NOT LIKE '%pg_stat%'
              ORDER BY total_exec_time DESC LIMIT 6;
             SELECT 'wal', wal_records, wal_fpi, wal_bytes, wal_write,
                    wal_sync, round(wal_sync_time::numeric, 1)
               FROM pg_stat_wal" 2>&1 | sed 's/^/#   /'
    } >> "$TRACE"
}


# keys N FILE: N new keys of the bench's project, one a line in FILE
keys() {
    psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" -o "$2" -c "
        WITH k AS (
            SELECT 'sess_' || md5(random()::text || i::text) AS key
            FROM generate_series(1, $1) AS i
        ), ins AS (
            INSERT INTO api_keys (project_id, key_hash, prefix, hint)
            SELECT '$PROJECT', sha256(convert_to(key, 'UTF8')), 'sess',
                   right(key, 4)
            FROM k
        )
        SELECT key FROM k" || die "inserting $1 keys failed"
}


# --- wrk ------------------------------------------------------------------

declare -A ALLRPS ALLP99 ALLWAITS ALLSTMTS ALLCPUN ALLCPUP

# ms VALUE: wrk's "1.23ms", "456.00us", "1.02s" in milliseconds
ms() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
        else printf "%.3f", v }'
}

# wrk_run SCOPE PATH KEY|@FILE DURATION: prints "rps p99ms total"
wrk_run() {
    local scope=$1 path=$2 key=$3 duration=$4 out first
    local -a hdr=()
    local file=

    if [ "${key#@}" != "$key" ]; then
        file=${key#@}
    else
        hdr=(-H "Authorization: Bearer $key")
    fi

    first=$(echo "${PORTS[$scope]}" | awk '{ print $1 }')

    out=$(BENCH_NODE_PORTS="${PORTS[$scope]}" BENCH_KEYS_FILE="$file" \
          wrk -t"$NODES" -c"$CONNS" -d"$duration" --latency \
              -s "$ROOT/bench/cluster.lua" "${hdr[@]}" \
              "http://127.0.0.1:$first$path" 2>&1) \
        || { echo "$out" >&2; die "wrk failed"; }

    local rps p99 total
    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    total=$(awk '/requests in/ { print $1 }' <<<"$out")

    [ -n "$rps" ] && [ -n "$p99" ] \
        || { echo "$out" >&2; die "no figures from wrk"; }

    if grep -q 'socket errors' <<<"$out"; then
        log "$scope $path: $(grep 'socket errors' <<<"$out")"
    fi

    echo "$rps $(ms "$p99") $total"
}


# measure NAME SCOPE PATH KEY: one run, its figures kept under NAME/SCOPE
measure() {
    local name=$1 scope=$2 path=$3 key=$4 rps p99 total s0 s1 want
    local w0 w1 l0 l1 cn cp

    want=404
    [ "$path" = /dl/x ] && want=429

    s0=$(sum "$scope" "$want")
    w0=$(sum "$scope" waits)
    l0=$(sum "$scope" leases)
    if [ -n "$TRACE" ]; then
        pgss_reset
        trace "$name" "$scope" "${DURATION%s}" &
    fi
    cpu_snap "$scope" > "$W/cpu0"
    read -r rps p99 total < <(wrk_run "$scope" "$path" "$key" "$DURATION")
    cpu_snap "$scope" > "$W/cpu1"
    if [ -n "$TRACE" ]; then
        wait
        pgss_dump "$name" "$scope"
    fi
    read -r cn cp < <(cpu_delta "$W/cpu0" "$W/cpu1")
    s1=$(sum "$scope" "$want")
    w1=$(sum "$scope" waits)
    l1=$(sum "$scope" leases)

    # every answer of the run is of the expected kind
    if [ $((s1 - s0)) -lt $((total - 1)) ]; then
        die "$name, $scope: $((s1 - s0)) of $total answers were $want"
    fi

    ALLRPS[$name/$scope]+="$rps "
    ALLP99[$name/$scope]+="$p99 "
    ALLWAITS[$name/$scope]+="$(awk -v w=$((w1 - w0)) -v n="$total" \
                                   'BEGIN { printf "%.3f", 1000 * w / n }') "
    ALLSTMTS[$name/$scope]+="$(awk -v l=$((l1 - l0)) -v n="$total" \
                                   'BEGIN { printf "%.3f", 1000 * l / n }') "
    ALLCPUN[$name/$scope]+="$(awk -v c="$cn" -v n="$total" \
                                   'BEGIN { printf "%.2f", 1000 * c / n }') "
    ALLCPUP[$name/$scope]+="$(awk -v c="$cp" -v n="$total" \
                                   'BEGIN { printf "%.2f", 1000 * c / n }') "
    log "$name, $scope: $rps requests/s, p99 $p99 ms," \
        "$((l1 - l0)) leases, $((w1 - w0)) waited, of $total;" \
        "CPU ms: nginx $cn, PostgreSQL $cp"
}


# wait_window SECONDS: until at least that much of the minute is left
wait_window() {
    local left
    left=$(( 60 - $(date +%s) % 60 ))
    if [ "$left" -lt "$1" ]; then
        log "waiting $left s for the next minute"
        sleep "$left"
    fi
}


declare -A ADMITTED LEASES

# per_minute NAME SCOPE PATH KEY: requests admitted in one window
per_minute() {
    local name=$1 scope=$2 path=$3 key=$4 a0 a1 l0 l1

    wait_window 12
    a0=$(sum "$scope" 404)
    l0=$(sum "$scope" leases)
    wrk_run "$scope" "$path" "$key" 8s >/dev/null
    a1=$(sum "$scope" 404)
    l1=$(sum "$scope" leases)

    ADMITTED[$name/$scope]=$((a1 - a0))
    LEASES[$name/$scope]=$((l1 - l0))
    log "$name, $scope: $((a1 - a0)) admitted, $((l1 - l0)) lease statements"
}


# --- the run ----------------------------------------------------------------

"$SESSIONCTL" -d "$DB" migrate >/dev/null || die "sessionctl migrate failed"
find_postmaster

cp "$MODULE" "$W/ngx_http_session_module.so"

ACCOUNT=$(ctl account create "bench-cluster-$$" --plan unlimited \
              | json_field account_id)
PROJECT=$(ctl project create "$ACCOUNT" "bench-cluster-$$" \
              | json_field project_id)

BUSY=$(ctl key create "$PROJECT" | json_field key)
SPENT=$(ctl key create "$PROJECT" | json_field key)
keys "$NKEYS" "$W/keys"

for scope in node cluster; do
    for i in $(seq 0 $((NODES - 1))); do
        node_start "$scope" "$i"
    done
done

log "two sets of $NODES nodes ($WORKERS worker each), wrk -t$NODES" \
    "-c$CONNS -d$DURATION, $ROUNDS rounds; load average before:" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"

# warm-up, not reported: connections, the auth caches, the first leases
for scope in node cluster; do
    wrk_run "$scope" /api/v1/nope "$BUSY" 1s >/dev/null
    wrk_run "$scope" /api/v1/nope "@$W/keys" 5s >/dev/null
done

SCENARIOS=(
    "one busy key, admitted (404)|/api/v1/nope|$BUSY"
    "$NKEYS keys, admitted (404)|/api/v1/nope|@$W/keys"
    "one key past its limit (429)|/dl/x|$SPENT"
)

# each run in one window, after a second of the same load: what is
# measured is a window's steady state (the turn of the minute is below)
secs=${DURATION%s}

[ "$ONLY" != turn ] || ROUNDS=0

for round in $(seq "$ROUNDS"); do
    order=(node cluster)
    [ $((round % 2)) = 0 ] && order=(cluster node)

    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r name path key <<<"$s"
        for scope in "${order[@]}"; do
            wait_window $((secs + 3))
            wrk_run "$scope" "$path" "$key" 1s >/dev/null
            measure "$name" "$scope" "$path" "$key"
        done
    done
done

# the turn of a minute under load: the 1,000 keys from second 49 of a
# minute to second 2 of the next, after 2 s of the same load (a
# window's budget is the node's until it ends; a busy key leases its
# first block of the next one ahead)

TURN=${BENCH_CLUSTER_TURN:-2}
TURN_KEYS=${BENCH_CLUSTER_TURN_KEYS:-same}

for round in $(seq "$TURN"); do
    order=(node cluster)
    [ $((round % 2)) = 0 ] && order=(cluster node)

    for scope in "${order[@]}"; do
        # new: keys that nothing used before, busy from second 47 on
        turnkeys=$W/keys
        if [ "$TURN_KEYS" = new ]; then
            turnkeys=$W/keys-turn
            keys "$NKEYS" "$turnkeys"
        fi
        left=$(( 60 - $(date +%s) % 60 ))
        if [ "$left" -lt 13 ]; then
            sleep $((left + 47))
        else
            sleep $((left - 13))
        fi
        wrk_run "$scope" /api/v1/nope "@$turnkeys" 2s >/dev/null
        DURATION=13s measure "across a minute's turn" "$scope" \
            /api/v1/nope "@$turnkeys"
    done
done

# requests admitted in a window: keys of their own for each set

PER_MINUTE=(
    "one busy key, limit 100|100|/l100/x"
    "one busy key, limit 200|200|/dl/x"
    "one busy key, limit 300|300|/l300/x"
)

[ "$ONLY" != turn ] || PER_MINUTE=()

for scope in node cluster; do
    [ "$ONLY" != turn ] || break
    for s in "${PER_MINUTE[@]}"; do
        IFS='|' read -r name limit path <<<"$s"
        busy=$(ctl key create "$PROJECT" | json_field key)
        per_minute "$name" "$scope" "$path" "$busy"
    done

    keys "$NKEYS" "$W/keys-$scope"
    per_minute "$NKEYS keys, other=20 each" "$scope" /lo/x "@$W/keys-$scope"
done

for d in "$W"/node/* "$W"/cluster/*; do
    if grep -E '\[(alert|crit|emerg)\]|signal [0-9]' "$d/error.log" >&2; then
        die "the error log of $d has alerts (above)"
    fi
done


# --- the report ---------------------------------------------------------------

# pairs A B: the median of the ratios B_i / A_i of two lists of numbers
pairs() {
    paste <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) \
        | awk '{ printf "%.4f\n", $2 / $1 }' | median
}

# sums A B: the sums A_i + B_i of two lists of numbers
sums() {
    paste <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) \
        | awk '{ printf "%.2f ", $1 + $2 }'
}

report() {
    local s name path key n c rn rc pn pc label

    echo "## Three nodes on one PostgreSQL (session_limit_scope)"
    echo
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) CPUs," \
         "load average before $(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /)" \
         "(other work shares the machine: read the ratios)."
    echo "\`bash util/bench-cluster.sh\`: two sets of $NODES nodes" \
         "($WORKERS worker each) on one database, one wrk" \
         "(-t$NODES -c$CONNS -d$DURATION, thread i on node i)," \
         "median of $([ "$ONLY" = turn ] && echo "$TURN" || echo "$ROUNDS")" \
         "runs each, the sets in turn; a ratio is the" \
         "median of the rounds' cluster/node ratios."
    echo
    echo "| load | node: requests/s | cluster: requests/s | ratio (goal ≥ 0.90) | node: p99 ms | cluster: p99 ms | ratio (goal ≤ 1.20) | cluster: lease statements per 1,000 requests | cluster: requests that waited per 1,000 |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"

    local rows=("${SCENARIOS[@]}")
    [ "$TURN" -gt 0 ] && rows+=("across a minute's turn ($NKEYS keys)")

    for s in "${rows[@]}"; do
        IFS='|' read -r name path key <<<"$s"
        name=${name% ($NKEYS keys)}
        [ -n "${ALLRPS[$name/node]:-}" ] || continue
        rn=$(median <<<"${ALLRPS[$name/node]}")
        rc=$(median <<<"${ALLRPS[$name/cluster]}")
        pn=$(median <<<"${ALLP99[$name/node]}")
        pc=$(median <<<"${ALLP99[$name/cluster]}")
        label=$name
        [ "$name" = "across a minute's turn" ] \
            && label="$NKEYS keys, admitted, across a minute's turn"
        [ "$name" = "across a minute's turn" ] \
            && label+=" (13 s, $TURN times)"
        [ "$name" = "across a minute's turn" ] && [ "$TURN_KEYS" = new ] \
            && label+=", new keys each time"
        printf '| %s | %.0f | %.0f | %.2f | %s | %s | %.2f | %s | %s |\n' \
               "$label" "$rn" "$rc" \
               "$(pairs "${ALLRPS[$name/node]}" "${ALLRPS[$name/cluster]}")" \
               "$pn" "$pc" \
               "$(pairs "${ALLP99[$name/node]}" "${ALLP99[$name/cluster]}")" \
               "$(median <<<"${ALLSTMTS[$name/cluster]}")" \
               "$(median <<<"${ALLWAITS[$name/cluster]}")"
    done

    echo
    echo "CPU per 1,000 requests (the scheduler's time of the set's nginx" \
         "workers and of every PostgreSQL process, during each run), medians:"
    echo
    echo "| load | node: nginx ms | cluster: nginx ms | node: PostgreSQL ms | cluster: PostgreSQL ms | ratio of the sums |"
    echo "|---|---:|---:|---:|---:|---:|"

    for s in "${rows[@]}"; do
        IFS='|' read -r name path key <<<"$s"
        name=${name% ($NKEYS keys)}
        [ -n "${ALLCPUN[$name/node]:-}" ] || continue
        label=$name
        [ "$name" = "across a minute's turn" ] \
            && label="$NKEYS keys, admitted, across a minute's turn"
        printf '| %s | %s | %s | %s | %s | %.2f |\n' "$label" \
               "$(median <<<"${ALLCPUN[$name/node]}")" \
               "$(median <<<"${ALLCPUN[$name/cluster]}")" \
               "$(median <<<"${ALLCPUP[$name/node]}")" \
               "$(median <<<"${ALLCPUP[$name/cluster]}")" \
               "$(pairs "$(sums "${ALLCPUN[$name/node]}" \
                                "${ALLCPUP[$name/node]}")" \
                        "$(sums "${ALLCPUN[$name/cluster]}" \
                                "${ALLCPUP[$name/cluster]}")")"
    done

    [ "$ONLY" != turn ] || return 0

    echo
    echo "| in one window | limit | node: admitted | cluster: admitted (goal: the limit) | cluster: lease statements | admitted per statement |"
    echo "|---|---:|---:|---:|---:|---:|"

    for s in "${PER_MINUTE[@]}" "$NKEYS keys, other=20 each|$((NKEYS * 20))|"
    do
        IFS='|' read -r name limit path <<<"$s"
        n=${ADMITTED[$name/node]}
        c=${ADMITTED[$name/cluster]}
        printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$limit" "$n" \
               "$c" "${LEASES[$name/cluster]}" \
               "$(ratio "$c" "${LEASES[$name/cluster]}")"
    done
}

if [ "$OUT" = - ]; then
    report
else
    report > "$OUT"
fi
