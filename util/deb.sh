#!/usr/bin/env bash
# The Debian package libnginx-mod-http-session (debian/).
#
#   bash util/deb.sh build   build/deb/libnginx-mod-http-session_*.deb from
#                            a copy of the work tree, then lintian (fails
#                            on any error)                     (make deb)
#   bash util/deb.sh test    installs that .deb into the system it runs
#                            in with "apt-get install ./file.deb", checks
#                            the modules-enabled link, "nginx -t" of the
#                            system's configuration with the module
#                            loaded, then a private nginx and a throw-away
#                            PostgreSQL with the packaged sessionctl: a
#                            create, and a long poll that an upload wakes;
#                            purges the package again at the end
#
# "test" changes the system it runs in: make deb-test and make
# test-debian13 run it inside a clean Debian root made for it
# (util/debroot.sh), never on the machine itself.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/deb
PKG=libnginx-mod-http-session

die() {
    echo "deb.sh: $*" >&2
    exit 1
}

SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi

apt_get() {
    $SUDO env DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=600 "$@"
}

build() {
    local src version

    version=$(dpkg-parsechangelog -l debian/changelog -S Version)
    src=$OUT/ngx-http-session-module-$version

    rm -rf "$OUT"
    mkdir -p "$src"

    # the work tree as git sees it (tracked and new files, not ignored
    # ones): no build/, no node_modules, no test leftovers
    if git rev-parse --git-dir >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard \
            | rsync -a --from0 --files-from=- ./ "$src/"
    else
        rsync -a --exclude=/build --exclude=/.run \
            --exclude=node_modules --exclude='t/servroot*' ./ "$src/"
    fi

    # one version per Debian release: the two packages depend on different
    # nginx ABIs, so they must not share a file name or a version in one
    # archive.  "+debNN" (NN this machine's release) sorts the newer
    # release's build above the older's, as an upgrade of the release
    # wants; the stanza goes into the copy, not the work tree.
    local major release_version
    major=$(cut -d. -f1 /etc/debian_version)
    case $major in
        ''|*[!0-9]*) major="" ;;
    esac
    if [ -n "$major" ]; then
        release_version="$version+deb$major"
        {
            printf '%s (%s) %s; urgency=medium\n\n' \
                "$(dpkg-parsechangelog -l debian/changelog -S Source)" \
                "$release_version" \
                "$(. /etc/os-release && echo "${VERSION_CODENAME:-unstable}")"
            printf '  * Built for Debian %s (its nginx ABI).\n\n' "$major"
            # dated by the commit (the same tree builds the same
            # package), later than the entry under it
            printf ' -- %s  %s\n\n' \
                "$(dpkg-parsechangelog -l debian/changelog -S Maintainer)" \
                "$(git log -1 --format=%aD 2>/dev/null || date -R)"
            cat debian/changelog
        } > "$src/debian/changelog"
        echo "deb.sh: version $release_version"
    fi

    echo "deb.sh: dpkg-buildpackage in $src"
    (cd "$src" && dpkg-buildpackage -b -us -uc >"$OUT/build.log" 2>&1) \
        || { tail -40 "$OUT/build.log"; die "dpkg-buildpackage failed" \
             "(log: $OUT/build.log)"; }

    local deb
    deb=$(ls "$OUT"/${PKG}_*.deb)

    echo "deb.sh: built $deb"
    dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
    dpkg-deb --contents "$deb"

    echo "deb.sh: lintian"
    lintian --fail-on error --info "$deb" \
        || die "lintian reports errors"
    echo "deb.sh: lintian: no errors"
}

free_port() {
    perl -MIO::Socket::INET -e '
        for (1 .. 200) {
            my $p = 20000 + int(rand(20000));
            my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1",
                                          LocalPort => $p, Listen => 1,
                                          ReuseAddr => 1) or next;
            close $s;
            print "$p\n";
            exit 0;
        }
        exit 1;'
}

# inside pg_virtualenv: the packaged sessionctl makes the schema and a
# key; a private nginx that loads the packaged module through the
# package's modules-enabled link creates a session, then answers a long
# poll on it that an upload wakes (the LISTEN/NOTIFY path, through this
# release's libpq and PostgreSQL)
serve_one() {
    local dir=$1 port conninfo key project account code sid waiting pid
    local api

    conninfo="host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"
    conninfo+=" password=$PGPASSWORD"
    export SESSION_DB=$conninfo

    /usr/bin/sessionctl migrate
    account=$(/usr/bin/sessionctl --json account create deb-test \
              --plan free | sed 's/.*"account_id": *"\([^"]*\)".*/\1/')
    project=$(/usr/bin/sessionctl --json project create "$account" p \
              | sed 's/.*"project_id": *"\([^"]*\)".*/\1/')
    key=$(/usr/bin/sessionctl --json key create "$project" \
          | sed 's/.*"key": *"\([^"]*\)".*/\1/')

    port=$(free_port) || die "no free port"
    api=http://127.0.0.1:$port/api/v1
    mkdir -p "$dir/logs"
    cat > "$dir/nginx.conf" <<EOF
include /etc/nginx/modules-enabled/*.conf;
error_log $dir/logs/error.log info;
pid $dir/nginx.pid;
events {}
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    session_db "$conninfo";
    server {
        listen 127.0.0.1:$port;
        location /api/ { session_api; }
        location = /status { session_status; }
    }
}
EOF
    # Debian's prefix, so that "modules/..." of the package's
    # load_module line resolves as it does for the system's nginx
    /usr/sbin/nginx -p /usr/share/nginx/ -c "$dir/nginx.conf" -t
    /usr/sbin/nginx -p /usr/share/nginx/ -c "$dir/nginx.conf"
    # stopped however this ends (pg_virtualenv drops the cluster after)
    # shellcheck disable=SC2064 # $dir now: it is a local
    trap "/usr/sbin/nginx -p /usr/share/nginx/ -c '$dir/nginx.conf' \
              -s quit 2>/dev/null || true" EXIT

    code=""
    for _ in $(seq 1 50); do
        code=$(curl -s -o "$dir/create.json" -w '%{http_code}' \
               --max-time 5 -H "Authorization: Bearer $key" \
               -H 'Content-Type: application/json' \
               --data '{"delivery_mode": "long_poll"}' \
               "$api/sessions" || true)
        [ "$code" = 000 ] || break
        sleep 0.1
    done

    echo "deb.sh: POST /api/v1/sessions -> $code $(cat "$dir/create.json")"
    [ "$code" = 201 ] || { cat "$dir/logs/error.log"; \
                           die "expected 201 from the packaged module"; }
    grep -q '"status" *: *"open"' "$dir/create.json" \
        || die "the answer is not an open session"
    sid=$(sed 's/^{"id": *"\([^"]*\)".*/\1/' "$dir/create.json")

    # the poll waits (the node's gauge says so) until the upload wakes it
    curl -s -o "$dir/poll.json" -w '%{http_code}' --max-time 30 \
        -H "Authorization: Bearer $key" \
        "$api/sessions/$sid/poll?timeout=25" > "$dir/poll.code" &
    pid=$!
    waiting=""
    for _ in $(seq 1 100); do
        waiting=$(curl -s --max-time 5 \
                  "http://127.0.0.1:$port/status?format=prometheus" \
                  | awk '$1 == "session_api_polls_waiting" { print $2 }')
        [ "$waiting" = 1 ] && break
        sleep 0.1
    done
    [ "$waiting" = 1 ] || { kill "$pid" 2>/dev/null; \
                            die "the long poll is not waiting"; }
    # the PNG signature is all the module checks of an image
    printf '\x89PNG\r\n\x1a\n' > "$dir/image.png"
    code=$(curl -s -o "$dir/image.json" -w '%{http_code}' --max-time 5 \
           -H "Authorization: Bearer $key" -H 'Content-Type: image/png' \
           --data-binary @"$dir/image.png" "$api/sessions/$sid/images")
    [ "$code" = 201 ] || die "upload: $code $(cat "$dir/image.json")"
    wait "$pid" || die "the long poll's curl failed"

    echo "deb.sh: GET .../poll -> $(cat "$dir/poll.code")" \
         "$(cat "$dir/poll.json")"
    [ "$(cat "$dir/poll.code")" = 200 ] \
        || die "expected 200 from the long poll"
    grep -q "\"images\": *\[{\"id\": *\"[^\"]*\", *\"session_id\": *\"$sid\"" \
         "$dir/poll.json" \
        || die "the long poll did not answer with the uploaded image"

    if grep -q '\[error\]\|\[alert\]\|\[emerg\]' "$dir/logs/error.log"; then
        cat "$dir/logs/error.log"
        die "errors in nginx's log"
    fi
}

DIR=""

cleanup() {
    [ -z "$DIR" ] || rm -rf "$DIR"
    if dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null \
       | grep -q "installed"; then
        echo "deb.sh: purging $PKG"
        apt_get purge -y -qq "$PKG" >/dev/null || true
    fi
}

run_test() {
    local deb dir link

    deb=$(ls "$OUT"/${PKG}_*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || die "no package in $OUT: run make deb"

    for p in postgresql postgresql-common curl perl; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
            | grep -q "install ok installed" \
            || apt_get install -y -qq --no-install-recommends "$p"
    done

    echo "deb.sh: apt-get install $deb"
    apt_get install -y -qq --no-install-recommends "$deb"

    dir=$(mktemp -d)
    DIR=$dir
    chmod 755 "$dir"
    trap cleanup EXIT

    [ -f /usr/lib/nginx/modules/ngx_http_session_module.so ] \
        || die "the module is not in /usr/lib/nginx/modules"
    [ -x /usr/bin/sessionctl ] || die "no /usr/bin/sessionctl"
    link=/etc/nginx/modules-enabled/50-mod-http-session.conf
    [ -L "$link" ] || die "postinst made no $link"
    [ "$(readlink "$link")" = \
      /usr/share/nginx/modules-available/mod-http-session.conf ] \
        || die "$link points elsewhere"
    /usr/bin/sessionctl --help >/dev/null || die "sessionctl --help"
    man -w sessionctl >/dev/null 2>&1 \
        || [ -f /usr/share/man/man8/sessionctl.8.gz ] \
        || die "no man page"

    echo "deb.sh: nginx -t (the system's configuration)"
    /usr/sbin/nginx -t
    # (the whole output first: grep -q would end the pipe early)
    /usr/sbin/nginx -T >"$dir/nginx-T.txt" 2>&1
    grep -A1 '^# configuration file .*/50-mod-http-session.conf:' \
         "$dir/nginx-T.txt" \
        | grep -qx 'load_module modules/ngx_http_session_module.so;' \
        || die "the system's nginx does not load the module"

    echo "deb.sh: one request through the packaged module"
    export TMPDIR=/tmp
    PGPORT=$(free_port) || die "no free port for PostgreSQL"
    export PGPORT
    pg_virtualenv -t -- bash "$ROOT/util/deb.sh" --serve-one "$dir"

    echo "deb.sh: removing: the modules-enabled link goes with it"
    apt_get purge -y -qq "$PKG"
    [ ! -e "$link" ] && [ ! -L "$link" ] || die "$link left behind"
    /usr/sbin/nginx -t
    echo "deb.sh: package test passed"
}

case ${1:-} in
    build) build ;;
    test) run_test ;;
    --serve-one) serve_one "$2" ;;
    *) die "usage: util/deb.sh build|test" ;;
esac
