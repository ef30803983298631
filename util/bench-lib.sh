# shellcheck shell=bash
# Shell functions shared by util/test.sh, the benchmarks (util/bench*.sh)
# and the loopback runs of flood.sh, chaos.sh and failover.sh; sourced,
# not run.  The
# caller defines die() and log() and sets what a function names: NGINX,
# SESSIONCTL, DB, W (the scratch directory), PORT, NGINX_UP.

# a double-quoted nginx string
nginx_quote() {
    local v=$1
    v=${v//\\/\\\\}
    v=${v//\"/\\\"}
    printf '"%s"' "$v"
}


# libpq conninfo value: bare when safe, else single-quoted with \ and '
# escaped
conninfo_value() {
    local v=$1
    if [[ $v =~ ^[A-Za-z0-9_.:/@+-]+$ ]]; then
        printf '%s' "$v"
    else
        v=${v//\\/\\\\}
        v=${v//\'/\\\'}
        printf "'%s'" "$v"
    fi
}


# the conninfo of the cluster pg_virtualenv made (its PG* variables)
pg_virtualenv_conninfo() {
    local v
    for v in PGHOST PGPORT PGDATABASE PGUSER PGPASSWORD; do
        [ -n "${!v:-}" ] || die "pg_virtualenv did not set $v"
    done
    printf 'host=%s port=%s dbname=%s user=%s password=%s' \
        "$(conninfo_value "$PGHOST")" "$(conninfo_value "$PGPORT")" \
        "$(conninfo_value "$PGDATABASE")" "$(conninfo_value "$PGUSER")" \
        "$(conninfo_value "$PGPASSWORD")"
}


# before pg_virtualenv: nothing of the caller's libpq environment (PG*,
# SESSION_DB), and TMPDIR a directory the postgres user can use
pg_env_clear() {
    local v
    for v in $(compgen -e); do
        case $v in
            PG*|SESSION_DB) unset "$v" ;;
        esac
    done
    export TMPDIR=/tmp
}


# the locale for initdb: C.UTF-8 where it exists, else C
utf8_locale() {
    if locale -a 2>/dev/null | grep -qix 'c\.utf-\?8'; then
        echo C.UTF-8
    else
        echo C
    fi
}


# pg_cluster_tries TRIES FIRST_PORT COMMAND...: COMMAND (pg_virtualenv
# running this script again) with PGPORT exported, a free port (or
# FIRST_PORT, then the ports after it); tried again on another port while
# the cluster did not come up, at most TRIES times.  The run inside calls
# pg_cluster_up once it has its cluster, which tells a failed run apart
# from a cluster that did not start.  Returns COMMAND's status.
pg_cluster_tries() {
    local tries=$1 first=$2 attempt rc marker
    shift 2
    marker=$(mktemp /tmp/ngx-session-cluster-marker.XXXXXX)
    rm -f "$marker"
    export PG_CLUSTER_MARKER=$marker

    for attempt in $(seq "$tries"); do
        if [ -n "$first" ]; then
            PGPORT=$((first + attempt - 1))
        else
            PGPORT=$(free_port) || die "no free TCP port for PostgreSQL"
        fi
        export PGPORT
        rc=0
        "$@" || rc=$?
        if [ "$rc" -eq 0 ] || [ -e "$marker" ]; then
            rm -f "$marker"
            return "$rc"
        fi
        log "the PostgreSQL cluster did not start (attempt $attempt)"
    done

    die "could not start a throw-away PostgreSQL cluster"
}


# pg_cluster_report OUT VAR SCRIPT PG_VIRTUALENV_OPTION...: SCRIPT run
# again with --inside-pg-virtualenv in a throw-away cluster (on PGPORT if
# set, else a free port); it writes its report to the file named by its
# variable VAR (pg_virtualenv talks on stdout, so the report goes through
# a file), which lands on standard output (OUT "-") or in OUT once the
# run succeeded.  Returns the run's status.
pg_cluster_report() {
    local out=$1 var=$2 script=$3 given=${PGPORT:-} report rc=0
    shift 3
    command -v pg_virtualenv >/dev/null 2>&1 || die "pg_virtualenv not found"
    pg_env_clear
    PGPORT=${given:-$(free_port)} || die "no free port for PostgreSQL"
    export PGPORT
    report=$(mktemp "/tmp/ngx-session-${script##*/}-report.XXXXXX")
    env "$var=$report" pg_virtualenv -t "$@" -- \
        bash "$script" --inside-pg-virtualenv >&2 || rc=$?
    if [ "$rc" -eq 0 ]; then
        if [ "$out" = - ]; then
            cat "$report"
        else
            cp "$report" "$out"
        fi
    fi
    rm -f "$report"
    return "$rc"
}


# inside pg_virtualenv, for pg_cluster_tries: the cluster is up
pg_cluster_up() {
    : > "$PG_CLUSTER_MARKER"
}


# nginx.conf from its first line to "session_db ...;" inside http{}:
# nginx_conf_head MODULE WORKERS [AFFINITY]
nginx_conf_head() {
    cat <<EOF
load_module $1;

worker_processes $2;
${3:+worker_cpu_affinity $3;}
master_process on;
daemon on;
pid $W/nginx.pid;
error_log $W/error.log warn;

events {
    worker_connections 4096;
}

http {
    access_log off;
    keepalive_requests 1000000;

$(nginx_temp_paths)

    session_db $(nginx_quote "$DB");
EOF
}


# one SQL statement against $DB, its rows unaligned; stops at an error
sql() {
    psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" -c "$1"
}


# the EXIT trap of a script with a scratch directory $W: nginx stopped,
# $W removed unless the run failed or BENCH_KEEP is set
scratch_cleanup() {
    local rc=$?
    nginx_down
    if [ -n "$W" ]; then
        if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
            log "kept $W"
        else
            rm -rf "$W"
        fi
    fi
    exit "$rc"
}


# a free loopback port, away from a PostgreSQL socket of the same number;
# BENCH_PORTS ("LOW-HIGH", default 20000-39999) is the range it is drawn
# from
free_port() {
    local range=${BENCH_PORTS:-20000-39999}
    [[ $range =~ ^([0-9]+)-([0-9]+)$ ]] || die "bad BENCH_PORTS: $range"
    perl -MIO::Socket::INET -e '
        my ($lo, $hi) = @ARGV;
        for (1 .. 200) {
            my $p = $lo + int(rand($hi - $lo + 1));
            next if -e "/var/run/postgresql/.s.PGSQL.$p"
                    || -e "/tmp/.s.PGSQL.$p";
            my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1",
                                          LocalPort => $p, Listen => 1,
                                          ReuseAddr => 1) or next;
            close $s;
            print "$p\n";
            exit 0;
        }
        exit 1;' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
}


# json_field NAME: the field of the JSON object on standard input
json_field() {
    perl -MJSON::PP -e '
        local $/; my $j = JSON::PP->new->decode(<STDIN>);
        defined $j->{$ARGV[0]} or die "no field $ARGV[0]\n";
        print $j->{$ARGV[0]};' "$1"
}


# sessionctl --json against the bench's database
ctl() {
    "$SESSIONCTL" --json -d "$DB" "$@"
}


# the median of the numbers on standard input (spaces or new lines)
median() {
    tr ' ' '\n' | grep . | sort -g | awk '
        { v[NR] = $1 }
        END { if (NR % 2) print v[(NR + 1) / 2];
              else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}


ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
}


goal() {
    awk -v v="$1" -v g="$2" 'BEGIN { print (v >= g) ? "met" : "NOT met" }'
}


# the temp paths of an nginx.conf's http{} block, all under $W
nginx_temp_paths() {
    printf '    client_body_temp_path %s/body;\n' "$W"
    local t
    for t in proxy fastcgi uwsgi scgi; do
        printf '    %s_temp_path %s/%s;\n' "$t" "$W" "$t"
    done
}


# nginx_start DIR URL WHAT: an nginx of DIR/nginx.conf (master and
# daemon, prefix DIR/, its error_log DIR/error.log) started, then URL
# asked every 0.1 s, START_WAIT (50) times, until it answers, or die
# naming WHAT; SERVER_PIN, when set, is the command that runs it (taskset)
nginx_start() {
    local dir=$1 url=$2 what=$3 addr

    addr=${url#http://}
    addr=${addr%%/*}
    : > "$dir/error.log"
    ${SERVER_PIN:-} "$NGINX" -p "$dir/" -c "$dir/nginx.conf" -q \
        || { cat "$dir/error.log" >&2; die "$what did not start"; }

    for _ in $(seq "${START_WAIT:-50}"); do
        curl -s -o /dev/null "$url" && return 0
        sleep 0.1
    done
    die "$what does not answer on $addr"
}


# nginx from $W/nginx.conf, until /ok answers; NGINX_UP before it starts,
# so that nginx_down stops it if it never answers
start_nginx() {
    NGINX_UP=1
    nginx_start "$W" "http://127.0.0.1:$PORT/ok" nginx
}


stop_nginx() {
    "$NGINX" -p "$W/" -c "$W/nginx.conf" -s stop
    for _ in $(seq 50); do
        [ -f "$W/nginx.pid" ] || break
        sleep 0.1
    done
    NGINX_UP=
}


# on the way out: nginx stopped if it runs, whatever state it is in
nginx_down() {
    if [ -n "$NGINX_UP" ] && [ -f "$W/nginx.pid" ]; then
        "$NGINX" -p "$W/" -c "$W/nginx.conf" -s stop 2>/dev/null || true
        sleep 0.5
    fi
}


# the summed VmRSS of the workers (the children of $W/nginx.pid), kB
workers_rss() {
    local master pid sum=0 kb
    master=$(cat "$W/nginx.pid")
    for pid in $(pgrep -P "$master"); do
        kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null \
             || echo 0)
        sum=$((sum + ${kb:-0}))
    done
    echo "$sum"
}


# the server every benchmark of the API runs, on 127.0.0.1:$PORT: /ok,
# nginx's baseline, and /api/, every stage with the limiter counting but
# never refusing; $1 more directives of /api/, $2 more locations:
# bench_api_server [API_DIRECTIVES] [LOCATIONS]
bench_api_server() {
    cat <<EOF
    server {
        listen 127.0.0.1:$PORT;

        # baseline
        location = /ok {
            return 200;
        }

        # every stage, the limiter counting but never refusing
        location /api/ {
            session_api;
            session_limits create=1000000000 list=1000000000
                           other=1000000000;
            ${1:-}
        }
${2:-}
    }
EOF
}


# the server of util/bench.sh's scenarios, on 127.0.0.1:$PORT, and the
# limit_req zone its /lr/ uses, inside http{} (util/bench-ir.sh counts
# the same locations)
bench_server() {
    cat <<EOF
    # nginx's own limiter on the same key, the Authorization header; its
    # refusals are logged at info, below error_log, as ours are not at all
    limit_req_zone \$http_authorization zone=lr:10m rate=1r/m;
    limit_req_log_level info;

    # the unknown key's scenario sends one key from one address without
    # end: the failure limit would answer it 429 after 100 a minute
    # (docs/api.md §10.12), and the row measures the cached 401
    session_auth_fail_limit off;

EOF
    bench_api_server "" '
        # the zone figures (the zone-capacity run reads its evictions)
        location = /status {
            session_status;
        }

        # the 429 path: class other (an unknown route), limit 1
        location /sl/ {
            session_api;
            session_limits other=1;
        }

        # a content handler, not "return": return answers in the rewrite
        # phase, before limit_req (preaccess) would run
        location /lr/ {
            limit_req zone=lr;
            limit_req_status 429;
            empty_gif;
        }'
}


now() {
    date +%s.%N
}


# elapsed START END: the seconds from START to END (of now), one decimal
elapsed() {
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'
}


# wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds, tried every
# WAIT_STEP (0.1) s, or die
wait_for() {
    local secs=$1 what=$2 end
    shift 2
    end=$(( $(date +%s) + secs ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || die "no $what within $secs s"
        sleep "${WAIT_STEP:-0.1}"
    done
}


# initdb and the server refuse to run as root: COMMAND as postgres then
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}


# delete_rows PROJECT ACCOUNT: what a bench added to a database that
# outlives it
delete_rows() {
    [ -n "$1" ] || return 0
    psql -X -q -d "$DB" -c "
        DELETE FROM webhook_outbox WHERE project_id = '$1';
        DELETE FROM idempotency_keys WHERE project_id = '$1';
        DELETE FROM sessions WHERE project_id = '$1';
        DELETE FROM monthly_usage WHERE account_id = '$2';
        DELETE FROM api_keys WHERE project_id = '$1';
        DELETE FROM projects WHERE id = '$1';
        DELETE FROM accounts WHERE id = '$2';" \
        >/dev/null 2>&1 || true
}
