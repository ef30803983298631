#!/usr/bin/env bash
# The local stack behind "make run" / "make stop":
#
#   util/run.sh start    PostgreSQL cluster in .run/pg, schema, demo
#                        account/project/key (kept in .run/demo.env),
#                        nginx with the module on 127.0.0.1:8080
#                        (RUN_ADDR=ADDR:PORT listens elsewhere, e.g.
#                        a second clone beside the first)
#   util/run.sh stop     stop nginx, then PostgreSQL
#   util/run.sh status   say what runs
#
# Both commands are idempotent: start while running keeps PostgreSQL and
# restarts nginx (so a new build of the module is loaded; a reload would
# keep the old .so mapped), stop while stopped does nothing.
#
# PostgreSQL listens on a Unix socket in .run/pg/sock and on no TCP port
# at all: nothing can collide with a system cluster on 5432 or with the
# throw-away clusters of "make test", and nothing is reachable from the
# network.  Port 54329 only names the socket file (.s.PGSQL.54329).  The
# socket directory is private (0700), so "trust" for local connections
# lets in only its owner (and root).  nginx and sessionctl connect as the
# role "session", which owns the database "session" and is no superuser.
#
# initdb and pg_ctl refuse to run as root: as root the cluster belongs to
# the "postgres" system user (created if missing) and they run through
# runuser.  When that user cannot reach the repository (e.g. it lives
# under /root), the cluster goes to /var/lib/postgresql/ngx-session-run/
# and .run/pg is a symlink to it.  As any other user the cluster is
# simply that user's.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
RUN=$ROOT/.run

NGINX=${NGINX:-/usr/sbin/nginx}
MODULE=$ROOT/build/ngx_http_session_module.so
SESSIONCTL=$ROOT/build/sessionctl
HTTP_ADDR=${RUN_ADDR:-127.0.0.1:8080}
PG_PORT=54329
DB_NAME=session
DB_USER=session

log() { echo "run.sh: $*"; }
die() { echo "run.sh: $*" >&2; exit 1; }

case $ROOT in
    *[[:space:]\"\'\\\$\;]*)
        die "the repository path must not contain blanks, quotes, \\, \$ or ;"
        ;;
esac

if [ "$(id -u)" = 0 ]; then
    AS_ROOT=1
    PG_OWNER=postgres
else
    AS_ROOT=
    PG_OWNER=$(id -un)
fi


# Runs a command as the owner of the cluster, from "/" so that a
# working directory it cannot read does not matter, and without fd 9 (the
# lock of this script, which the postmaster would otherwise keep).
as_owner() {
    if [ -n "$AS_ROOT" ]; then
        (cd / && runuser -u "$PG_OWNER" -- "$@" 9>&-)
    else
        (cd / && "$@" 9>&-)
    fi
}


pg_bindir() {
    local d
    # the newest installed server version
    d=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -1)
    if [ ! -x "$d/pg_ctl" ]; then
        d=$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent)")
    fi
    if [ ! -x "$d/pg_ctl" ] || [ ! -x "$d/initdb" ]; then
        die "PostgreSQL server binaries not found (package postgresql)"
    fi
    echo "$d"
}


# Where the cluster lives: .run/pg, or what the symlink .run/pg points to.
pg_base() {
    if [ -L "$RUN/pg" ]; then
        readlink -f "$RUN/pg"
    else
        echo "$RUN/pg"
    fi
}


# A Unix socket path is at most 107 bytes; a deep checkout falls back to
# a private directory in /tmp named after the repository.
sock_dir() {
    local d
    d=$(pg_base)/sock
    if [ $(( ${#d} + 18 )) -gt 107 ]; then
        d=/tmp/ngx-session-$(id -u)-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)
    fi
    echo "$d"
}


conninfo() {
    echo "host=$(sock_dir) port=$PG_PORT dbname=$DB_NAME user=$DB_USER"
}


su_psql() {
    psql -X -q -At -v ON_ERROR_STOP=1 -h "$(sock_dir)" -p "$PG_PORT" \
         -U postgres "$@"
}


pg_running() {
    local base=$1
    [ -f "$base/data/PG_VERSION" ] || return 1
    as_owner "$PGBIN/pg_ctl" -D "$base/data" status >/dev/null 2>&1
}


ensure_pg_owner() {
    [ -n "$AS_ROOT" ] || return 0
    if ! getent passwd postgres >/dev/null; then
        log "creating the system user postgres"
        useradd --system --user-group --home-dir /var/lib/postgresql \
                --shell /bin/bash --comment "PostgreSQL administrator" \
                postgres
        mkdir -p /var/lib/postgresql
        chown postgres:postgres /var/lib/postgresql
    fi
}


# Makes the cluster's directory, owned by its owner, reachable by it.
prepare_pg_dir() {
    local base fallback

    if [ -e "$RUN/pg" ]; then
        base=$(pg_base)
        [ -d "$base" ] || die "$RUN/pg points to a missing $base"
    else
        base=$RUN/pg
        mkdir -p "$base"
        if [ -n "$AS_ROOT" ]; then
            chown "$PG_OWNER": "$base"
            if ! runuser -u "$PG_OWNER" -- test -w "$base" 2>/dev/null; then
                rmdir "$base"
                fallback=/var/lib/postgresql/ngx-session-run/$(printf %s \
                    "$ROOT" | cksum | cut -d' ' -f1)
                log "$PG_OWNER cannot reach $RUN; cluster in $fallback"
                mkdir -p "$fallback"
                chown "$PG_OWNER": "$(dirname "$fallback")" "$fallback"
                ln -s "$fallback" "$RUN/pg"
                base=$fallback
            fi
        fi
    fi

    if [ -n "$AS_ROOT" ]; then
        chown "$PG_OWNER": "$base"
    elif [ ! -O "$base" ]; then
        die "$base belongs to another user (started as root?):" \
            "run as that user, or remove .run"
    fi
    chmod 0700 "$base"
}


start_pg() {
    local base data sock conf

    ensure_pg_owner
    prepare_pg_dir

    base=$(pg_base)
    data=$base/data
    sock=$(sock_dir)

    if [ ! -f "$data/PG_VERSION" ]; then
        log "creating the PostgreSQL cluster in $data"
        rm -rf "$data"
        as_owner "$PGBIN/initdb" -D "$data" -U postgres -E UTF8 --no-locale \
            --auth-local=trust --auth-host=reject >"$RUN/initdb.log" 2>&1 \
            || { cat "$RUN/initdb.log" >&2; die "initdb failed"; }
        printf "\ninclude_if_exists = 'run.conf'\n" \
            | as_owner tee -a "$data/postgresql.conf" >/dev/null
    fi

    if [ ! -d "$sock" ]; then
        mkdir -p "$sock"
        [ -n "$AS_ROOT" ] && chown "$PG_OWNER": "$sock"
    fi
    chmod 0700 "$sock"

    # rewritten at every start: the settings follow this script
    conf="# written by util/run.sh at every start
listen_addresses = ''
port = $PG_PORT
unix_socket_directories = '$sock'
unix_socket_permissions = 0700
logging_collector = off
log_min_messages = warning
"
    printf '%s' "$conf" | as_owner tee "$data/run.conf" >/dev/null

    if pg_running "$base"; then
        log "PostgreSQL is running ($sock)"
    else
        log "starting PostgreSQL ($sock, no TCP)"
        as_owner "$PGBIN/pg_ctl" -D "$data" -l "$base/postgresql.log" \
            -w -t 60 start >/dev/null \
            || { tail -20 "$base/postgresql.log" >&2;
                 die "PostgreSQL did not start"; }
    fi

    if [ "$(su_psql -d postgres -c \
            "SELECT 1 FROM pg_roles WHERE rolname = '$DB_USER'")" != 1 ]; then
        su_psql -d postgres -c "CREATE ROLE $DB_USER LOGIN"
    fi
    if [ "$(su_psql -d postgres -c \
            "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]
    then
        log "creating database $DB_NAME"
        su_psql -d postgres -c "CREATE DATABASE $DB_NAME OWNER $DB_USER"
    fi
}


stop_pg() {
    local base
    base=$(pg_base)

    if [ -n "$AS_ROOT" ] && ! getent passwd "$PG_OWNER" >/dev/null; then
        return 0
    fi
    if pg_running "$base"; then
        log "stopping PostgreSQL"
        as_owner "$PGBIN/pg_ctl" -D "$base/data" -m fast -w -t 60 stop \
            >/dev/null
    else
        log "PostgreSQL is not running"
    fi
}


json_field() {
    perl -MJSON::PP -e '
        local $/; my $j = eval { JSON::PP->new->decode(<STDIN>) }
            or die "not JSON\n";
        defined $j->{$ARGV[0]} or die "no field $ARGV[0]\n";
        print $j->{$ARGV[0]};' "$1"
}


ctl() {
    "$SESSIONCTL" --json -d "$(conninfo)" "$@"
}


# The demo account, project and key: made once, kept in .run/demo.env,
# made again only when the database no longer knows the key.
ensure_demo() {
    local env=$RUN/demo.env out hash ok account project key key_id secret

    if [ -f "$env" ]; then
        # shellcheck disable=SC1090,SC1091
        . "$env"
        hash=$(printf %s "${SESSION_DEMO_KEY:-}" | tr 'A-F' 'a-f' \
               | sha256sum | cut -d' ' -f1)
        ok=$(psql -X -At -d "$(conninfo)" -c "
            SELECT count(*) FROM api_keys k
              JOIN projects p ON p.id = k.project_id
             WHERE k.id::text = '${SESSION_DEMO_KEY_ID:-}'
               AND k.deleted_at IS NULL
               AND k.key_hash = decode('$hash', 'hex')" 2>/dev/null || true)
        if [ "$ok" = 1 ]; then
            log "reusing the demo key of .run/demo.env"
            return 0
        fi
        log "the key of .run/demo.env is not in the database: new demo data"
    fi

    out=$(ctl account create demo --plan pro) || die "account create failed"
    account=$(json_field account_id <<<"$out")
    out=$(ctl project create "$account" demo) || die "project create failed"
    project=$(json_field project_id <<<"$out")
    secret=$(json_field webhook_secret <<<"$out" 2>/dev/null || true)
    out=$(ctl key create "$project") || die "key create failed"
    key=$(json_field key <<<"$out")
    key_id=$(json_field key_id <<<"$out")

    (
        umask 077
        {
            echo "# demo data of util/run.sh; reused by the next make run"
            printf 'SESSION_DEMO_ACCOUNT_ID=%q\n' "$account"
            printf 'SESSION_DEMO_PROJECT_ID=%q\n' "$project"
            printf 'SESSION_DEMO_KEY_ID=%q\n' "$key_id"
            printf 'SESSION_DEMO_KEY=%q\n' "$key"
            printf 'SESSION_DEMO_WEBHOOK_SECRET=%q\n' "$secret"
            printf 'SESSION_DB=%q\n' "$(conninfo)"
        } > "$env.tmp"
        mv "$env.tmp" "$env"
    )
    log "created the demo account (plan pro), project and key"
}


write_nginx_conf() {
    local user_line=""

    # As root the master would start its workers as "nobody", who may not
    # reach the repository, .run/tmp (request bodies) or the PostgreSQL
    # socket, which is private to its owner: this local stack keeps them
    # as root.  Not as root, workers simply run as the same user.
    if [ -n "$AS_ROOT" ]; then
        user_line="user root;"
    fi

    mkdir -p "$RUN/tmp"
    cat > "$RUN/nginx.conf.tmp" <<EOF
# written by util/run.sh at every "make run"
load_module $MODULE;

$user_line
worker_processes 2;
pid $RUN/nginx.pid;
error_log $RUN/error.log info;

events {}

http {
    access_log $RUN/access.log;

    client_body_temp_path $RUN/tmp/body;
    proxy_temp_path $RUN/tmp/proxy;
    fastcgi_temp_path $RUN/tmp/fastcgi;
    uwsgi_temp_path $RUN/tmp/uwsgi;
    scgi_temp_path $RUN/tmp/scgi;

    session_db "$(conninfo)";

    server {
        listen $HTTP_ADDR;

        location /api/ {
            session_api;
        }

        location = /session-status {
            session_status;
            allow 127.0.0.1;
            deny all;
        }
    }
}
EOF
    mv "$RUN/nginx.conf.tmp" "$RUN/nginx.conf"
}


# The pid of our nginx master, if it runs.
nginx_pid() {
    local pid
    [ -f "$RUN/nginx.pid" ] || return 1
    pid=$(cat "$RUN/nginx.pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # a stale pid file may name an unrelated process
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q nginx \
        || return 1
    echo "$pid"
}


stop_nginx() {
    local pid i quiet=${1:-}

    if ! pid=$(nginx_pid); then
        [ -n "$quiet" ] || log "nginx is not running"
        rm -f "$RUN/nginx.pid"
        return 0
    fi

    log "stopping nginx (pid $pid)"
    kill -QUIT "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        # long polls may hold a graceful shutdown; do not wait for them
        [ "$i" = 30 ] && kill -TERM "$pid" 2>/dev/null
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$RUN/nginx.pid"
}


start_nginx() {
    local i code key

    [ -x "$NGINX" ] || die "$NGINX not found (package nginx)"
    [ -f "$MODULE" ] || die "$MODULE not built (run make)"

    write_nginx_conf

    if ! "$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" -t -q; then
        die "nginx refuses $RUN/nginx.conf (see above)"
    fi

    stop_nginx quiet

    log "starting nginx on $HTTP_ADDR"
    echo "$HTTP_ADDR" > "$RUN/addr"
    # fd 9 holds the lock of this script: the daemons must not keep it
    if ! "$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" 9>&-; then
        tail -20 "$RUN/error.log" >&2 || true
        die "nginx did not start"
    fi

    for i in $(seq 1 50); do
        nginx_pid >/dev/null && break
        sleep 0.1
    done
    nginx_pid >/dev/null || { tail -20 "$RUN/error.log" >&2;
                             die "nginx did not start"; }

    # shellcheck disable=SC1090,SC1091
    . "$RUN/demo.env"
    key=$SESSION_DEMO_KEY
    if command -v curl >/dev/null; then
        for i in $(seq 1 20); do
            code=$(curl -s -o /dev/null -w '%{http_code}' \
                   -H "Authorization: Bearer $key" \
                   "http://$HTTP_ADDR/api/v1/sessions" || true)
            [ "$code" != 000 ] && break
            sleep 0.1
        done
        if [ "$code" != 200 ]; then
            log "warning: GET /api/v1/sessions answered $code" \
                "(see .run/error.log)"
        fi
    fi

    cat <<EOF

Session Service is running on http://$HTTP_ADDR/api/v1/
  (PostgreSQL on $(sock_dir), database $DB_NAME)

  export KEY=$key

  curl -s -H "Authorization: Bearer \$KEY" http://$HTTP_ADDR/api/v1/sessions

  curl -s -X POST -H "Authorization: Bearer \$KEY" \\
       -H 'Content-Type: application/json' \\
       -d '{"delivery_mode": "long_poll", "expires_in": 600}' \\
       http://$HTTP_ADDR/api/v1/sessions

  status: curl -s http://$HTTP_ADDR/session-status
  admin:  build/sessionctl -d "$(conninfo)" key list $SESSION_DEMO_PROJECT_ID
  logs:   .run/error.log  .run/access.log  .run/pg/postgresql.log
  stop:   make stop
EOF
}


status() {
    local pid
    if [ -z "${RUN_ADDR:-}" ] && [ -f "$RUN/addr" ]; then
        HTTP_ADDR=$(cat "$RUN/addr")
    fi
    if pid=$(nginx_pid); then
        log "nginx is running (pid $pid) on $HTTP_ADDR"
    else
        log "nginx is not running"
    fi
    if [ -e "$RUN/pg" ] && pg_running "$(pg_base)"; then
        log "PostgreSQL is running ($(sock_dir))"
    else
        log "PostgreSQL is not running"
    fi
}


lock() {
    mkdir -p "$RUN"
    exec 9>"$RUN/.lock"
    flock -w 120 9 || die "another util/run.sh is still running"
}


case "${1:-}" in
    start)
        lock
        PGBIN=$(pg_bindir)
        command -v psql >/dev/null || die "psql not found (postgresql-client)"
        [ -x "$SESSIONCTL" ] || die "$SESSIONCTL not built (run make)"
        start_pg
        "$SESSIONCTL" -d "$(conninfo)" migrate >/dev/null \
            || die "sessionctl migrate failed"
        log "schema up to date"
        ensure_demo
        start_nginx
        ;;
    stop)
        [ -d "$RUN" ] || { log "nothing to stop"; exit 0; }
        lock
        stop_nginx
        if [ -e "$RUN/pg" ]; then
            PGBIN=$(pg_bindir)
            stop_pg
        else
            log "PostgreSQL is not running"
        fi
        ;;
    status)
        [ -d "$RUN" ] || { log "nothing runs"; exit 0; }
        PGBIN=$(pg_bindir)
        status
        ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 2
        ;;
esac
