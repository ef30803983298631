#!/bin/bash
# make upgrade-test: upgrades without downtime (docs/operations.md
# "Upgrading"), on loopback, about two minutes:
#
# 1. Version skew.  The module of the last commit before the newest
#    migration (OLD: the parent of the commit that added the newest
#    src/sql/*.sql, built under build/upgrade/) and this tree's (NEW), as
#    two nginx nodes on one PostgreSQL whose schema is OLD's.
#    util/upgrade-skew.pl sends mixed traffic to both for
#    UPGRADE_SKEW_SECONDS (30); at a third of it the new sessionctl
#    migrate runs while both nodes run OLD, 2 s later node B goes from
#    OLD to NEW by a binary upgrade (kill -USR2, then QUIT of its old
#    master), and at two thirds node A does, the rolling upgrade's last
#    step: migrate first, then the nodes one by one (docs/operations.md,
#    "Upgrading"; a new module may need the newest migration, as this
#    release's keyed statements need 12 and 17).  UPGRADE_SKEW=new-first
#    runs node B as NEW from the start, on OLD's schema, for a migration
#    the new module does not need.  No 5xx, every 2xx in the database
#    and nothing more, every keyed POST replayed by the other node, polls
#    on each node woken by uploads on the other, every webhook event
#    delivered once.
# 2. A reload and a binary upgrade under load.  Node B (NEW) holds
#    UPGRADE_POLLS (1,000) long polls and serves a steady stream of
#    creates, uploads, acks and lists (bench/upgrade-load.c), with
#    worker_shutdown_timeout 10s; nginx -s reload, then kill -USR2 and
#    QUIT of the old master.  Zero failed requests, every poll answered,
#    the old workers gone within 5 s of the QUIT or reload (by
#    themselves, well before worker_shutdown_timeout), and a key at 90 of
#    100 stays at 90.
#
# Both nodes' error logs must have no [error], [crit], [alert] or [emerg].
#
# Ports UPGRADE_PORT (2430) and the four after it: PostgreSQL, node A,
# node B, the webhook receiver, node B's limited server.  Scratch under
# /tmp, removed at the end (kept when the run fails, or with BENCH_KEEP=1).
#
# OLD needs the repository's history.  A shallow clone (CI's default depth
# of 1) is deepened with git fetch --unshallow when it has a remote; else,
# or to test another pair, UPGRADE_OLD_REF=<commit> names OLD.
#
# UPGRADE_RUNS="skew load" (the default) picks the runs.
# UPGRADE_SCOPE=cluster runs both nodes with session_limit_scope cluster
# (node by default): the leases of OLD and NEW on one database while the
# migration runs, for a migration of the leases (21: its new function,
# which a NEW node on OLD's schema finds missing and does without).
#
# Hidden subcommand, for upgrade-skew.pl: util/upgrade.sh usr2 DIR MODULE
# upgrades the nginx of DIR to MODULE by USR2 and QUIT.

set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${TEST_NGINX_BINARY:-/usr/sbin/nginx}
MODULE=$ROOT/build/ngx_http_session_module.so
SESSIONCTL=$ROOT/build/sessionctl
BASE=${UPGRADE_PORT:-2430}
PGPORT_=$BASE
PORT_A=$((BASE + 1))
PORT_B=$((BASE + 2))
HOOK_PORT=$((BASE + 3))
PORT_L=$((BASE + 4))
SKEW_SECONDS=${UPGRADE_SKEW_SECONDS:-30}
LOAD_SECONDS=${UPGRADE_LOAD_SECONDS:-30}
POLLS=${UPGRADE_POLLS:-1000}
POLL_TIMEOUT=15
OVERLAP=${UPGRADE_OVERLAP:-3}
RUNS=${UPGRADE_RUNS:-skew load}
SKEW_ORDER=${UPGRADE_SKEW:-rolling}
case $SKEW_ORDER in
    rolling|new-first) ;;
    *) echo "upgrade: UPGRADE_SKEW is rolling or new-first" >&2; exit 1 ;;
esac
SCOPE=${UPGRADE_SCOPE:-node}
case $SCOPE in
    node|cluster) ;;
    *) echo "upgrade: UPGRADE_SCOPE is node or cluster" >&2; exit 1 ;;
esac
T_START=$(date +%s)

die() {
    echo "upgrade: $*" >&2
    exit 1
}

log() {
    echo "upgrade: $*"
}

# now, elapsed, wait_for (every 0.05 s here), as_pg, json_field
WAIT_STEP=0.05
# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

alive() {
    kill -0 "$1" 2>/dev/null
}

gone() {
    ! alive "$1"
}

# the nginx of a node directory: DIR/nginx.conf, DIR/nginx.pid
master_of() {
    cat "$1/nginx.pid"
}

workers_of() {
    pgrep -P "$1" -f 'nginx: worker' | tr '\n' ' '
}

# usr2 DIR [MODULE]: a binary upgrade of the nginx of DIR (to MODULE when
# given): USR2, the new master's workers up, OVERLAP seconds of both,
# QUIT of the old master; prints the seconds the old master took to go
usr2() {
    local dir=$1 module=${2:-} old new t0 t1

    if [ -n "$module" ]; then
        sed -i "s|^load_module .*;|load_module $module;|" "$dir/nginx.conf"
    fi

    old=$(master_of "$dir")
    kill -USR2 "$old"

    new_master() {
        [ -f "$dir/nginx.pid.oldbin" ] && [ -s "$dir/nginx.pid" ] \
            && [ "$(master_of "$dir")" != "$old" ] \
            && [ "$(workers_of "$(master_of "$dir")" | wc -w)" -ge 2 ]
    }
    wait_for 20 "new master in $dir" new_master
    new=$(master_of "$dir")

    sleep "$OVERLAP"

    t0=$(now)
    kill -QUIT "$old"
    wait_for 20 "exit of the old master $old" gone "$old"
    t1=$(now)

    echo "usr2 old $old new $new quit_seconds $(elapsed "$t0" "$t1")"
}

if [ "${1:-}" = usr2 ]; then
    shift
    usr2 "$@"
    exit 0
fi


# --- OLD: the module of the last commit before the newest migration -------

git rev-parse --git-dir >/dev/null 2>&1 || die "not a git checkout"

if [ "$(git rev-parse --is-shallow-repository)" = true ] \
   && [ -z "${UPGRADE_OLD_REF:-}" ]
then
    log "a shallow clone: git fetch --unshallow for the newest migration's" \
        "parent"
    git fetch -q --unshallow 2>/dev/null \
        || die "a shallow clone without the history (git fetch" \
               "--unshallow failed): fetch it, or give UPGRADE_OLD_REF"
fi

# the commit that added the newest migration (not one that only touched
# a comment or src/sql/README.md)
MIG_COMMIT=$(git log -1 --format=%H --diff-filter=A -- 'src/sql/*.sql')
MIG_FILE=$(git show --format= --name-only --diff-filter=A "$MIG_COMMIT" \
               -- 'src/sql/*.sql' | sort | tail -1)
OLD_REF=${UPGRADE_OLD_REF:-$MIG_COMMIT^}
OLD_SHA=$(git rev-parse --verify -q "$OLD_REF^{commit}") \
    || die "no commit $OLD_REF in this clone (fetch it, or give" \
           "UPGRADE_OLD_REF)"
OLD_DIR=$ROOT/build/upgrade/${OLD_SHA:0:12}

log "newest migration: ${MIG_FILE:-?} in ${MIG_COMMIT:0:12}; OLD is" \
    "${OLD_SHA:0:12}, NEW is this tree"

if [ ! -f "$OLD_DIR/build/ngx_http_session_module.so" ] \
   || [ ! -x "$OLD_DIR/build/sessionctl" ]
then
    log "building OLD under $OLD_DIR"
    rm -rf "$OLD_DIR"
    mkdir -p "$OLD_DIR"
    git archive "$OLD_SHA" | tar -x -C "$OLD_DIR"
    make -C "$OLD_DIR" build >"$ROOT/build/upgrade/old-build.log" 2>&1 \
        || { tail -20 "$ROOT/build/upgrade/old-build.log"; die "OLD's" \
             "build failed"; }
fi

OLD_MODULE=$OLD_DIR/build/ngx_http_session_module.so
OLD_SESSIONCTL=$OLD_DIR/build/sessionctl

[ -f "$MODULE" ] && [ -x "$SESSIONCTL" ] || die "no NEW build (make build)"


# --- the scratch directory, PostgreSQL ---------------------------------------

BIN=$(pg_config --bindir 2>/dev/null || true)
[ -x "$BIN/pg_ctl" ] || BIN=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
[ -x "$BIN/initdb" ] || die "no PostgreSQL server binaries"

W=$(mktemp -d /tmp/session-upgrade.XXXXXX)
LOAD_PID=

cleanup() {
    local rc=$? d p
    set +e
    [ -z "$LOAD_PID" ] || kill "$LOAD_PID" 2>/dev/null
    for d in "$W/a" "$W/b"; do
        for p in "$d/nginx.pid.oldbin" "$d/nginx.pid"; do
            [ -f "$p" ] && kill -TERM "$(cat "$p")" 2>/dev/null
        done
    done
    sleep 0.5
    [ -f "$W/pg/postmaster.pid" ] \
        && as_pg "$BIN/pg_ctl" -D "$W/pg" -m immediate stop >/dev/null 2>&1
    if [ "$rc" -ne 0 ] || [ -n "${BENCH_KEEP:-}" ]; then
        log "kept $W"
    else
        rm -rf "$W"
    fi
    exit "$rc"
}

trap cleanup EXIT

[ "$(id -u)" = 0 ] && chown postgres "$W"
chmod 755 "$W"

as_pg "$BIN/initdb" -D "$W/pg" -U postgres -A trust --no-sync \
    >"$W/initdb.log" 2>&1 || { cat "$W/initdb.log"; die "initdb failed"; }

cat >>"$W/pg/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PGPORT_
unix_socket_directories = '$W'
fsync = off
max_connections = 200
EOF

as_pg "$BIN/pg_ctl" -D "$W/pg" -l "$W/pg.log" -w -t 30 start >/dev/null \
    || { cat "$W/pg.log"; die "PostgreSQL did not start"; }

DB="host=127.0.0.1 port=$PGPORT_ dbname=postgres user=postgres"

OLD_VERSION=$("$OLD_SESSIONCTL" -d "$DB" migrate) \
    || die "OLD's sessionctl migrate failed"
log "schema by OLD's sessionctl: $OLD_VERSION"

ctl() {
    "$OLD_SESSIONCTL" --json -d "$DB" "$@"
}

ACCT=$(ctl account create upgrade --plan unlimited | json_field account_id)
PROJ=$(ctl project create "$ACCT" upgrade | json_field project_id)
KEY=$(ctl key create "$PROJ" | json_field key)
KEY_LIMITED=$(ctl key create "$PROJ" | json_field key)


# --- the nodes ---------------------------------------------------------------

# node_conf DIR MODULE PORT: an nginx of two workers
node_conf() {
    local dir=$1
    mkdir -p "$dir"
    cat >"$dir/nginx.conf" <<EOF
load_module $2;

worker_processes 2;
worker_rlimit_nofile 8192;
worker_shutdown_timeout 10s;
pid $dir/nginx.pid;
error_log $dir/error.log notice;

events {
    worker_connections 4096;
}

http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;

    session_db "$DB";
    session_limits create=1000000 list=1000000 other=1000000;
    session_limit_scope $SCOPE;
    session_webhook_allow_private on;
    session_poll_max_timeout 60;

    server {
        listen 127.0.0.1:$3;

        location = /ok {
            return 200;
        }

        location /api/ {
            session_api;
        }

        location = /status {
            session_status;
        }
    }

    # a key at 90 of 100: counters belong to the key, the zone is shared
    server {
        listen 127.0.0.1:$PORT_L;

        location /api/ {
            session_api;
            session_limits other=100;
        }
    }
}
EOF
    # node A has no limited server
    [ "$3" = "$PORT_B" ] || sed -i "/key at 90/,/^    }$/d" "$dir/nginx.conf"
}

start_node() {
    "$NGINX" -p "$1/" -c "$1/nginx.conf" -q 2>"$1/start.err" \
        || { cat "$1/start.err" "$1/error.log" >&2; die "nginx of $1"; }
    wait_for 10 "nginx on $2" curl -sf -o /dev/null "http://127.0.0.1:$2/ok"
}

node_conf "$W/a" "$OLD_MODULE" "$PORT_A"
if [ "$SKEW_ORDER" = new-first ] || [[ " $RUNS " != *" skew "* ]]; then
    node_conf "$W/b" "$MODULE" "$PORT_B"
else
    # NEW once the migration is in (run_skew)
    node_conf "$W/b" "$OLD_MODULE" "$PORT_B"
fi
start_node "$W/a" "$PORT_A"
start_node "$W/b" "$PORT_B"

fail=0

# check_logs: no [error] or worse in either node's log
check_logs() {
    local d
    for d in a b; do
        if grep -E '\[(error|crit|alert|emerg)\]|exited on signal' \
                "$W/$d/error.log" | head -20 | cut -c1-240 | grep .; then
            log "FAIL: errors in node $d's log"
            fail=1
        fi
    done
}


# --- 1. version skew -------------------------------------------------------

run_skew() {
    local upgrade_new=

    if [ "$SKEW_ORDER" = rolling ]; then
        log "1. version skew: nodes A and B (OLD) on $PORT_A and $PORT_B," \
            "$SKEW_SECONDS s of traffic; migrate at 1/3, node B to NEW by" \
            "USR2 2 s later, node A at 2/3"
        upgrade_new="bash '$ROOT/util/upgrade.sh' usr2 '$W/b' '$MODULE'"
    else
        log "1. version skew: node A (OLD) on $PORT_A, node B (NEW) on" \
            "$PORT_B, $SKEW_SECONDS s of traffic; migrate at 1/3, node A" \
            "to NEW by USR2 at 2/3"
    fi

    mkdir -p "$W/skew"
    rc=0
    SKEW_UPGRADE_NEW=$upgrade_new \
    SKEW_UPGRADE_NEW_AT=$((SKEW_SECONDS / 3 + 2)) \
    SKEW_OLD=http://127.0.0.1:$PORT_A SKEW_NEW=http://127.0.0.1:$PORT_B \
    SKEW_KEY=$KEY SKEW_PROJECT=$PROJ SKEW_DB=$DB SKEW_DIR=$W/skew \
    SKEW_HOOK_PORT=$HOOK_PORT SKEW_SECONDS=$SKEW_SECONDS \
    SKEW_MIGRATE_AT=$((SKEW_SECONDS / 3)) \
    SKEW_MIGRATE="'$SESSIONCTL' -d '$DB' migrate" \
    SKEW_UPGRADE_AT=$((SKEW_SECONDS * 2 / 3)) \
    SKEW_UPGRADE="bash '$ROOT/util/upgrade.sh' usr2 '$W/a' '$MODULE'" \
        perl "$ROOT/util/upgrade-skew.pl" >"$W/skew.out" 2>"$W/skew.err" \
        || rc=$?

    sed 's/^/upgrade:   /' "$W/skew.out"
    if [ "$rc" -ne 0 ]; then
        sed 's/^/upgrade:   /' "$W/skew.err" | head -30
        log "FAIL: the version-skew run"
        fail=1
    fi

    check_logs

    # node A's work is done
    kill -QUIT "$(master_of "$W/a")"
}


# --- 2. a reload and a binary upgrade under load -----------------------------

run_load() {
    log "2. node B: $POLLS long polls and a steady load for $LOAD_SECONDS s;" \
        "nginx -s reload, then USR2 and QUIT of the old master"

    cc -O2 -Wall -Wextra -o "$W/upgrade-load" "$ROOT/bench/upgrade-load.c" \
        || die "cannot build bench/upgrade-load.c"

    api() {
        curl -s -m 10 -H "Authorization: Bearer $KEY" "$@"
}

: >"$W/ids"
for _ in $(seq 100); do
    api -X POST -H 'Content-Type: application/json' \
        -d '{"delivery_mode": "long_poll"}' \
        "http://127.0.0.1:$PORT_B/api/v1/sessions" | json_field id \
        >>"$W/ids"
    echo >>"$W/ids"
done

waiting() {
    curl -s "http://127.0.0.1:$PORT_B/status" \
        | perl -MJSON::PP -e 'local $/;
              print JSON::PP->new->decode(<STDIN>)->{long_poll}{waiting}'
}

# remaining: X-RateLimit-Remaining of the limited key's request
remaining() {
    curl -s -D - -o /dev/null -H "Authorization: Bearer $KEY_LIMITED" \
        "http://127.0.0.1:$PORT_L/api/v1/nope" \
        | tr -d '\r' | awk -F': ' 'tolower($1) == "x-ratelimit-remaining" {
                                       print $2 }'
}

# the counter's steps must fall in one UTC minute: 40 s of it left
left=$((60 - $(date +%s) % 60))
if [ "$left" -lt 40 ]; then
    log "waiting $left s for the next minute"
    sleep "$left"
fi

"$W/upgrade-load" "$PORT_B" "$KEY" "$W/ids" "$POLLS" 4 40 "$LOAD_SECONDS" \
    "$POLL_TIMEOUT" >"$W/load.out" 2>"$W/load.err" &
LOAD_PID=$!

all_waiting() {
    [ "$(waiting)" -ge "$POLLS" ]
}
wait_for 20 "$POLLS polls waiting" all_waiting
log "  $(waiting) polls wait"

for _ in $(seq 89); do
    remaining >/dev/null
done
r90=$(remaining)

# reload: the old workers must go by themselves, well within
# worker_shutdown_timeout
master=$(master_of "$W/b")
old_workers=$(workers_of "$master")
t0=$(now)
"$NGINX" -p "$W/b/" -c "$W/b/nginx.conf" -s reload 2>/dev/null
for p in $old_workers; do
    wait_for 20 "exit of the old worker $p" gone "$p"
done
t_reload=$(elapsed "$t0" "$(now)")
r_reload=$(remaining)
log "  reload: the old workers ($old_workers) gone ${t_reload} s after" \
    "the reload"

# binary upgrade (same build): the zone carries over
t0=$(now)
usr2_out=$(usr2 "$W/b" "")
log "  $usr2_out"
t_quit=${usr2_out##* }
r_usr2=$(remaining)

wait "$LOAD_PID" || true
LOAD_PID=

log "  key at 90 of 100: remaining $r90 after 90 requests, $r_reload" \
    "after the reload, $r_usr2 after USR2 and QUIT (10, 9, 8 expected)"
[ "$r90/$r_reload/$r_usr2" = 10/9/8 ] \
    || { log "FAIL: the counter did not carry over"; fail=1; }

sed 's/^/upgrade:   load: /' "$W/load.out"
{ grep -v ' s: out ' "$W/load.err" || true; } | head -20 \
    | sed 's/^/upgrade:   /'

field() {
    awk -v k="$1" '$1 == k { print $2 }' "$W/load.out"
}

for k in failed client_timeouts unanswered; do
    [ "$(field "$k")" = 0 ] || { log "FAIL: $k $(field "$k")"; fail=1; }
done

if awk '$1 ~ /^(poll|create|upload|ack|list)$/ && $2 !~ /^20[01]$/' \
        "$W/load.out" | grep .; then
    log "FAIL: answers other than 200 and 201"
    fail=1
fi

# half of worker_shutdown_timeout: they go by themselves, not by force
for t in "$t_reload" "$t_quit"; do
    awk -v t="$t" 'BEGIN { exit !(t < 5) }' \
        || { log "FAIL: old workers took $t s to go (5 s at most)"; fail=1; }
done

check_logs
}

case " $RUNS " in *" skew "*) run_skew ;; esac
case " $RUNS " in *" load "*) run_load ;; esac

log "$(( $(date +%s) - T_START )) s in all, $(date -u '+%Y-%m-%d %H:%M UTC')"

[ "$fail" -eq 0 ] || die "FAILED"

log "PASS"
