#!/usr/bin/env bash
# The integration part of "make test": a throw-away PostgreSQL cluster
# (pg_virtualenv), the schema (sessionctl migrate), then the Test::Nginx
# suite against the stock /usr/sbin/nginx with the freshly built module.
#
#   bash util/test.sh                  every t/**/*.t
#   bash util/test.sh t/001-auth.t     some scripts (any prove arguments)
#   PROVE_OPTS=-v bash util/test.sh    more prove options
#
# Exits non-zero when anything fails.  The cluster is dropped on exit.
#
# pg_virtualenv runs with -t, so that as root too the cluster lives in a
# private temporary directory (owned by the postgres user) rather than
# under /etc/postgresql: a cluster left over by an interrupted run, or
# another run at the same time, cannot make it refuse ("Cluster
# 15/regress exists"), and the system's pg_service.conf is not touched.
# It runs the cluster as "postgres" when we are root and as ourselves
# otherwise, and does its own work from "/", so a working directory the
# postgres user cannot read is fine.  It sets PGHOST=localhost, PGPORT,
# PGDATABASE=postgres, PGUSER (postgres when root, else our user) and a
# random PGPASSWORD; those become the libpq conninfo of the tests.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${TEST_NGINX_BINARY:-/usr/sbin/nginx}
# SESSION_MODULE: another build of the module (make asan)
MODULE=${SESSION_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl

die() {
    echo "test.sh: $*" >&2
    exit 1
}

# conninfo_value, pg_virtualenv_conninfo, free_port
. "$ROOT/util/bench-lib.sh"

inside() {
    local conninfo

    : > "$TEST_SH_MARKER"

    conninfo=$(pg_virtualenv_conninfo)

    export TEST_NGINX_SESSION_DB=$conninfo
    # sessionctl's default database, for t/lib/Session.pm and by hand
    export SESSION_DB=$conninfo
    export TEST_NGINX_BINARY=$NGINX
    export TEST_NGINX_LOAD_MODULES=$MODULE

    echo "test.sh: PostgreSQL $PGVERSION on $PGHOST:$PGPORT," \
         "database $PGDATABASE, user $PGUSER"

    "$SESSIONCTL" -d "$conninfo" migrate \
        || die "sessionctl migrate failed"

    local -a args
    if [ "$#" -gt 0 ]; then
        args=("$@")
    else
        args=(-r t/)
    fi

    # shellcheck disable=SC2086
    prove ${PROVE_OPTS:-} "${args[@]}"
}

if [ "${1:-}" = --inside-pg-virtualenv ]; then
    shift
    inside "$@"
    exit $?
fi

# Preconditions, checked before a cluster is made.
command -v pg_virtualenv >/dev/null 2>&1 \
    || die "pg_virtualenv not found (package postgresql-common; make deps)"
command -v prove >/dev/null 2>&1 || die "prove not found (package perl)"
perl -MTest::Nginx::Socket -e 1 2>/dev/null \
    || die "Test::Nginx is not installed (libtest-nginx-perl; make deps)"
[ -x "$NGINX" ] || die "$NGINX not found (package nginx; make deps)"
[ -f "$MODULE" ] || die "$MODULE not built (run make)"
[ -x "$SESSIONCTL" ] || die "$SESSIONCTL not built (run make)"

if [ "$#" -eq 0 ] && [ -z "$(find t -name '*.t' -print -quit)" ]; then
    die "no Test::Nginx scripts (t/*.t) found"
fi

# The module must load into the stock binary (same version and --with-compat
# signature); say so clearly rather than through every test failing.
chk=$(mktemp -d)
trap 'rm -rf "$chk"' EXIT
mkdir -p "$chk/logs"
cat > "$chk/nginx.conf" <<EOF
load_module $MODULE;
error_log stderr;
pid $chk/nginx.pid;
events {}
http {
    access_log off;
    client_body_temp_path $chk/body;
    proxy_temp_path $chk/proxy;
    fastcgi_temp_path $chk/fastcgi;
    uwsgi_temp_path $chk/uwsgi;
    scgi_temp_path $chk/scgi;
}
EOF
if ! "$NGINX" -p "$chk/" -c "$chk/nginx.conf" -t -q; then
    die "$MODULE does not load into $NGINX"
fi

# Nothing of the caller's libpq environment may reach the throw-away
# cluster (pg_virtualenv would, for instance, reuse PGPORT; we set our
# own below).
for v in $(compgen -e); do
    case $v in
        PG*|SESSION_DB) unset "$v" ;;
    esac
done

# pg_virtualenv takes its temporary directory from TMPDIR, which must be
# usable by the postgres user; initdb needs a locale that exists.
export TMPDIR=/tmp
if locale -a 2>/dev/null | grep -qix 'c\.utf-\?8'; then
    export LC_ALL=C.UTF-8
else
    export LC_ALL=C
fi

# pg_createcluster picks the first port it believes free, so two runs at
# the same time (or a cluster it cannot see, e.g. another -t run) collide
# on 5432.  Pick a random free port instead, and try again with another
# one when the cluster did not come up (the marker tells that case apart
# from a failing test run).  free_port is bench-lib.sh's.

marker="$chk/inside"
export TEST_SH_MARKER=$marker

for attempt in 1 2 3 4 5; do
    PGPORT=$(free_port) || die "no free TCP port for PostgreSQL"
    export PGPORT
    rc=0
    pg_virtualenv -t -- bash "$ROOT/util/test.sh" --inside-pg-virtualenv \
        "$@" || rc=$?
    if [ "$rc" -eq 0 ] || [ -e "$marker" ]; then
        exit "$rc"
    fi
    echo "test.sh: the PostgreSQL cluster did not start (attempt $attempt)" >&2
done

die "could not start a throw-away PostgreSQL cluster"
