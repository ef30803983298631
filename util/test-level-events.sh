#!/usr/bin/env bash
# make test-level-events: the module under nginx's level-triggered event
# methods (events { use poll; } and use select;), which an nginx built
# --with-poll_module or --with-select_module offers; Debian's has
# neither, so t/057-level-events.t skips against it.
#
#   bash util/test-level-events.sh [t/NNN-x.t ...]
#
# nginx from its own sources (util/nginx-source.sh: NGINX_SRC, else the
# upstream tarball of Debian's source package) with Debian's configure
# flags and both modules, in build/level/, through util/test-upstream.sh;
# then, for each method of LEVEL_EVENTS (default "poll select"), the
# scripts named (default t/057-level-events.t, which measures the
# worker's CPU while it waits, and the scripts of the long poll, the
# uploads and the webhooks, run under that method: TEST_NGINX_EVENT_TYPE).
# Not in CI: it builds nginx (about a minute and a half on two cores).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
OUT=build/level

# shellcheck source=util/nginx-source.sh
. "$ROOT/util/nginx-source.sh"

flags="--with-compat --with-http_ssl_module"
if [ -f "$NGINX_SRC/conf_flags" ]; then
    # shellcheck disable=SC1091 # a file of the nginx source tree
    . "$NGINX_SRC/conf_flags"
    flags="${NGX_CONF_FLAGS[*]}"
fi

src=$(nginx_source "$OUT-src" test-level-events)

if [ "$#" -eq 0 ]; then
    set -- t/057-level-events.t t/012-poll.t t/015-webhooks.t \
           t/051-body-memory.t t/053-wakeups.t
fi

for ev in ${LEVEL_EVENTS:-poll select}; do
    echo "test-level-events: events { use $ev; }"
    TEST_NGINX_EVENT_TYPE=$ev TEST_NGINX_LEVEL_EVENT=$ev \
    UPSTREAM_FLAGS="$flags --with-poll_module --with-select_module" \
    UPSTREAM_BUILD=$OUT \
        bash util/test-upstream.sh "$src" "$@"
done
