#!/usr/bin/env bash
# Runs Test::Nginx scripts against a PostgreSQL you already have, for
# quick development loops (make test makes its own throw-away cluster).
#
#   DEVTEST_DB='host=/tmp/pg port=5432 dbname=x user=postgres' \
#       bash util/devtest.sh t/007-sessions.t
#
# The database is migrated first.  TEST_NGINX_PORT (default 1984) and
# the checkout's own t/servroot keep parallel runs apart.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

[ -n "${DEVTEST_DB:-}" ] || { echo "devtest.sh: set DEVTEST_DB" >&2; exit 2; }

export TEST_NGINX_SESSION_DB=$DEVTEST_DB
export SESSION_DB=$DEVTEST_DB
export TEST_NGINX_BINARY=${TEST_NGINX_BINARY:-/usr/sbin/nginx}
export TEST_NGINX_LOAD_MODULES=$ROOT/build/ngx_http_session_module.so

"$ROOT/build/sessionctl" -d "$DEVTEST_DB" migrate >/dev/null

[ "$#" -gt 0 ] || set -- -r t/

# shellcheck disable=SC2086 # PROVE_OPTS: options, one a word
exec prove ${PROVE_OPTS:-} "$@"
