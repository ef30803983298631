#!/usr/bin/env bash
# Installs every package the build, the local stack and the tests need.
# Non-interactive; a no-op when everything is present.
#
#   bash util/install-deps.sh            build, local stack, tests (make deps)
#   bash util/install-deps.sh --deb      what "make deb" needs, nothing else
#   bash util/install-deps.sh --packages the Debian packages of both, one a
#                                        line, installing nothing (for
#                                        util/debroot.sh)
set -euo pipefail

MODE=${1:-all}

ALL_PKGS="build-essential nginx nginx-dev libjansson-dev libpq-dev libssl-dev
          postgresql postgresql-common check pkg-config wrk
          curl perl libwww-perl liblist-moreutils-perl libtext-diff-perl
          libipc-run-perl libhttp-parser-perl cppcheck shellcheck
          netcat-openbsd openssl ca-certificates libio-socket-ssl-perl
          pgbouncer"

# debian/control's Build-Depends, and the tools of util/deb.sh
DEB_PKGS="build-essential nginx-dev libjansson-dev libpq-dev libssl-dev
          pkg-config debhelper dpkg-dev lintian rsync"

case $MODE in
    --deb) PKGS=$DEB_PKGS ;;
    --packages)
        # shellcheck disable=SC2086 # lists of packages, one a word
        printf '%s\n' $ALL_PKGS $DEB_PKGS nodejs | sort -u
        exit 0
        ;;
    *) PKGS=$ALL_PKGS ;;
esac

# SUDO, not_installed, apt_install
# shellcheck source=util/apt-lib.sh
. "$(dirname "$0")/apt-lib.sh"

# shellcheck disable=SC2086 # a list of packages, one a word
apt_install install-deps "$(not_installed $PKGS)"

if [ "$MODE" = --deb ]; then
    echo "install-deps: all dependencies of make deb present"
    exit 0
fi

# The HTTP/3 client of t/031-http3.t (ngtcp2's gtlsclient, and the
# headers of libnghttp3 for t/lib/h3-headers.c): only an nginx with
# HTTP/3 needs it, and t/031 says so and skips without it, so a release
# without these packages is no failure here.
h3=$(not_installed ngtcp2-client libnghttp3-dev)
if [ -n "$h3" ]; then
    echo "install-deps: installing (for HTTP/3 tests):$h3"
    # shellcheck disable=SC2086 # a list of packages, one a word
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends $h3 \
        || echo "install-deps: no$h3 here: t/031-http3.t will skip"
fi

# Test::Nginx is in neither bookworm nor trixie; Debian unstable ships it
# as an arch-all package whose dependencies are in both.  Fetch it from
# the mirror the machine already uses (util/debian-mirror.sh), through a
# private apt configuration.
if [ -n "$(not_installed libtest-nginx-perl)" ]; then
    uri=$(bash "$(dirname "$0")/debian-mirror.sh") || exit 1
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/lists/partial" "$tmp/archives/partial" "$tmp/etc"
    printf 'Types: deb\nURIs: %s\nSuites: unstable\nComponents: main\n' \
        "$uri" > "$tmp/etc/unstable.sources"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        >> "$tmp/etc/unstable.sources"
    aptopts=(-o "Dir::Etc::sourcelist=-"
             -o "Dir::Etc::sourceparts=$tmp/etc"
             -o "Dir::State::Lists=$tmp/lists"
             -o "Dir::Cache::archives=$tmp/archives"
             -o "Dir::Cache::pkgcache=$tmp/pkgcache.bin"
             -o "Dir::Cache::srcpkgcache=$tmp/srcpkgcache.bin"
             -o "APT::Get::List-Cleanup=0")
    if ! $SUDO apt-get "${aptopts[@]}" update -qq; then
        echo "install-deps: signed update failed; retrying unverified" >&2
        printf 'Types: deb\nURIs: %s\nSuites: unstable\nComponents: main\nTrusted: yes\n' \
            "$uri" > "$tmp/etc/unstable.sources"
        $SUDO apt-get "${aptopts[@]}" -o Acquire::AllowInsecureRepositories=1 \
            update -qq
    fi
    (cd "$tmp" && $SUDO apt-get "${aptopts[@]}" \
        -o APT::Sandbox::User=root download libtest-nginx-perl)
    $SUDO apt-get install -y -qq --no-install-recommends \
        "$tmp"/libtest-nginx-perl_*.deb
fi

# The OpenAPI validator of make test (t/019-openapi.t): Redocly CLI from
# the npm registry, at the version util/openapi/package-lock.json pins,
# into util/openapi/node_modules (nothing global).  Node.js, and npm when
# that directory must be (re)made, come from Debian when the machine has
# none.
tools="$(cd "$(dirname "$0")" && pwd)/openapi"
current=no
if cmp -s "$tools/package-lock.json" \
       "$tools/node_modules/.installed-lock.json" \
   && [ -x "$tools/node_modules/.bin/redocly" ]; then
    current=yes
fi
missing=""
command -v node >/dev/null 2>&1 || missing=" nodejs"
if [ "$current" = no ] && ! command -v npm >/dev/null 2>&1; then
    missing="$missing npm"
fi
apt_install install-deps "$missing"
if [ "$current" = no ]; then
    echo "install-deps: installing Redocly CLI into $tools/node_modules"
    (cd "$tools" && npm ci --no-audit --no-fund --ignore-scripts \
        --loglevel=error)
    cp "$tools/package-lock.json" "$tools/node_modules/.installed-lock.json"
fi

echo "install-deps: all dependencies present"
