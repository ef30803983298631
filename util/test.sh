#!/usr/bin/env bash
# The integration part of "make test": a throw-away PostgreSQL cluster
# (pg_virtualenv), the schema (sessionctl migrate), then the Test::Nginx
# suite against the stock /usr/sbin/nginx with the freshly built module.
#
#   bash util/test.sh                  every t/**/*.t
#   bash util/test.sh t/001-auth.t     some scripts (any prove arguments)
#   PROVE_OPTS=-v bash util/test.sh    more prove options
#   TEST_JOBS=1 bash util/test.sh      every script in one lane
#
# Exits non-zero when anything fails.  The cluster is dropped on exit.
#
# The whole suite runs in TEST_JOBS lanes (default 2) at the same time:
# each lane has its own cluster, its own Test::Nginx port (TEST_NGINX_PORT,
# default 1984, plus 10 per lane) and server root, so lanes share nothing
# (t/004 stops its lane's cluster; webhook dispatchers claim only their
# own lane's events).  Most of the suite's time is spent waiting (timers,
# retries, long polls), so two lanes on two CPUs take about half as long.
# Scripts are dealt to lanes by the weights below, longest first.
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

log() {
    echo "test.sh: $*" >&2
}

# pg_virtualenv_conninfo, pg_env_clear, utf8_locale, pg_cluster_tries
# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

inside() {
    local conninfo

    pg_cluster_up

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

    # shellcheck disable=SC2086 # PROVE_OPTS: options, one a word
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
# own below).  pg_virtualenv takes its temporary directory from TMPDIR,
# which must be usable by the postgres user; initdb needs a locale that
# exists.
pg_env_clear
LC_ALL=$(utf8_locale)
export LC_ALL

# pg_createcluster picks the first port it believes free, so two runs at
# the same time (or a cluster it cannot see, e.g. another -t run) collide
# on 5432.  Pick a random free port instead, and try again with another
# one when the cluster did not come up (the marker tells that case apart
# from a failing test run): pg_cluster_tries.
# run_cluster ARGS...: the suite (or ARGS) inside a new cluster
run_cluster() {
    pg_cluster_tries 5 "" pg_virtualenv -t -- \
        bash "$ROOT/util/test.sh" --inside-pg-virtualenv "$@"
}

# Seconds each script took in one lane on the 2-CPU development machine
# (prove --timer); a script not listed counts as 30.
weight() {
    case ${1##*/} in
        006-ratelimit.t)    echo 75 ;;
        007-sessions.t)     echo 45 ;;
        012-poll.t)         echo 40 ;;
        015-webhooks.t)     echo 40 ;;
        009-expiry.t)       echo 30 ;;
        008-images.t)       echo 30 ;;
        011-idempotency.t)  echo 22 ;;
        021-retention.t)    echo 20 ;;
        001-auth.t)         echo 15 ;;
        000-layout.t)       echo 1 ;;
        035-auth-seen.t)    echo 15 ;;
        023-db-connect.t)   echo 15 ;;
        010-sessionctl.t)   echo 12 ;;
        002-errors.t)       echo 12 ;;
        024-db-tls.t)       echo 12 ;;
        025-sweep.t)        echo 11 ;;
        022-poll-scale.t)   echo 10 ;;
        026-db-batch.t)     echo 6 ;;
        027-plan-cache.t)   echo 3 ;;
        016-webhook-wakeup.t) echo 1 ;;
        037-upgrade.t)      echo 20 ;;
        045-cluster.t)      echo 45 ;;
        046-lease.t)        echo 40 ;;
        038-db-gss.t)       echo 3 ;;
        030-http2.t)        echo 20 ;;
        031-http3.t)        echo 15 ;;
        048-pgbouncer.t)    echo 15 ;;
        049-pooler.t)       echo 10 ;;
        004-db-outage.t)    echo 10 ;;
        014-hostile.t)      echo 8 ;;
        019-openapi.t)      echo 6 ;;
        003-config.t)       echo 4 ;;
        013-status.t)       echo 4 ;;
        005-revocation.t)   echo 4 ;;
        020-documents.t)    echo 3 ;;
        054-contract-audit.t) echo 10 ;;
        056-images-stream-lost.t) echo 6 ;;
        057-level-events.t) echo 1 ;;
        058-db-bounds.t)    echo 5 ;;
        *)                  echo 30 ;;
    esac
}

jobs=${TEST_JOBS:-2}
case $jobs in
    ''|*[!0-9]*|0) die "TEST_JOBS must be a positive integer" ;;
esac

if [ "$#" -gt 0 ] || [ "$jobs" -eq 1 ]; then
    run_cluster "$@"
    exit $?
fi

# Deal the scripts to the lanes, longest first, each to the lightest lane.
declare -a lane_load lane_files
for ((i = 0; i < jobs; i++)); do
    lane_load[i]=0
    lane_files[i]=
done
while read -r w f; do
    best=0
    for ((i = 1; i < jobs; i++)); do
        [ "${lane_load[i]}" -lt "${lane_load[best]}" ] && best=$i
    done
    lane_load[best]=$((lane_load[best] + w))
    lane_files[best]+=" $f"
done < <(for f in $(find t -name '*.t' | sort); do
             echo "$(weight "$f") $f"
         done | sort -k1,1nr -k2,2)

base_port=${TEST_NGINX_PORT:-1984}
declare -a pids
for ((i = 0; i < jobs; i++)); do
    [ -n "${lane_files[i]}" ] || continue
    mkdir -p "$chk/lane$i"
    (
        export TEST_NGINX_PORT=$((base_port + 10 * i))
        export TEST_NGINX_SERVROOT=$ROOT/t/servroot-lane$i
        # shellcheck disable=SC2086 # a lane's scripts, one a word
        run_cluster ${lane_files[i]}
    ) > "$chk/lane$i/out" 2>&1 &
    pids[i]=$!
    echo "test.sh: lane $i (port $((base_port + 10 * i))," \
         "~${lane_load[i]} s):${lane_files[i]}"
done

status=0
for ((i = 0; i < jobs; i++)); do
    [ -n "${pids[i]:-}" ] || continue
    rc=0
    wait "${pids[i]}" || rc=$?
    echo
    echo "=== lane $i: exit $rc ==="
    cat "$chk/lane$i/out"
    [ "$rc" -eq 0 ] || status=1
done

# The scripts that failed, named last (CI shows the end of the output),
# with their first failed checks.  Each is run once more, alone in one
# lane: the suite has timing checks (an answer "at once", a poll woken
# "within a second") that a loaded machine can miss; a script that passes
# alone is named as a flake here and in build/test-flakes.txt, and one
# that fails again fails the run.  More than three failed scripts are not
# a flake: no second run.
failed=
if [ "$status" -ne 0 ]; then
    failed=$(cat "$chk"/lane*/out \
                 | sed -n 's/^\(t\/[^ ]*\.t\) *(Wstat.*/\1/p' | sort -u)
    echo
    echo "test.sh: failed in the lanes:" $failed
    grep -h -A 2 "^#   Failed test" "$chk"/lane*/out 2>/dev/null \
        | sed "s|^|    |" | head -24
    n=$(echo "$failed" | grep -c . || true)
    if [ "$n" -ge 1 ] && [ "$n" -le 3 ]; then
        echo "test.sh: running again, alone:" $failed
        # shellcheck disable=SC2086 # $failed is a list of scripts
        if (export TEST_NGINX_PORT=$base_port \
                   TEST_NGINX_SERVROOT=$ROOT/t/servroot-lane0
            run_cluster $failed) > "$chk/again.out" 2>&1; then
            mkdir -p "$ROOT/build"
            echo "$(date -u +%FT%TZ) $failed" >> "$ROOT/build/test-flakes.txt"
            echo "test.sh: FLAKY (failed in a lane, passed alone):" $failed
            status=0
        else
            cat "$chk/again.out"
            echo "test.sh: failed again, alone:" $failed >&2
        fi
    fi
fi

if [ "$status" -eq 0 ]; then
    echo "test.sh: all lanes passed"
else
    echo "test.sh: a lane FAILED (see above):" ${failed:-} >&2
fi
exit "$status"
