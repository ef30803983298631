#!/usr/bin/env bash
# Debian roots made with debootstrap, for what this machine's own Debian
# cannot show: the module built and tested as another release ships
# nginx, and the package installed into a clean system of its release.
#
#   bash util/debroot.sh test-debian13                 (make test-debian13)
#       In a Debian 13 (trixie) root: make deps, then make test (the
#       module built against trixie's nginx-dev, the Check unit tests,
#       the whole Test::Nginx suite against trixie's /usr/sbin/nginx and
#       a PostgreSQL 17 cluster), then make deb (trixie's package, its
#       lintian); then that package in a clean trixie root, as below.
#       The package is left in build/deb-trixie/.
#   bash util/debroot.sh test-debian13 t/012-poll.t ...
#       make build and only those scripts (util/test.sh) in the root
#   bash util/debroot.sh run-debian13 COMMAND [ARG...]
#       make build, then COMMAND in /src of the same root (for example
#       bash util/bench-pooler.sh, with Debian 13's PgBouncer 1.24)
#   bash util/debroot.sh deb-test [SUITE [DEB]]        (make deb-test)
#       build/deb/*.deb (made by make deb on this machine), or DEB, in a
#       clean root of this machine's release (or SUITE): apt-get update,
#       then util/deb.sh test there: apt-get install ./the.deb, nginx -t
#       with the module enabled, a session created and a long poll
#       answered by a private nginx, against a PostgreSQL of that
#       release.
#
# The roots live in build/roots/ (make clean removes them):
#   SUITE-base    debootstrap --variant=minbase from the machine's own
#                 Debian mirror (util/debian-mirror.sh), a policy-rc.d
#                 that lets no package start a daemon; never used itself,
#                 only copied, so it stays clean
#   trixie-test   a copy of trixie-base with the build and test
#                 dependencies (util/install-deps.sh run inside); kept
#                 and reused by the next run, which only copies the work
#                 tree in again (into /src, with its own build/)
#   SUITE-pkg     a copy of SUITE-base for one package test, removed
#                 afterwards
#   apt-SUITE     the .deb files apt downloaded, shared by that
#                 release's roots (bind-mounted as /var/cache/apt/archives)
# DEBROOT_FRESH=1 makes every root anew first, as on a fresh CI machine.
#
# Every command in a root runs in a private mount namespace (unshare):
# /proc, /sys, /dev, /dev/pts and a /dev/shm are mounted there and are
# unmounted when the command ends, fails or is interrupted; whatever
# happens, no mount of a root is ever seen outside that namespace, so
# "rm -rf build" cannot reach the machine's /dev.  The steps that need
# no download (the builds, the tests, the package's installation from
# apt's cache) also get a network namespace of their own with just a
# loopback: their ports cannot meet anything else on the machine.
# Processes left inside a root when its command ends are stopped.
#
# Needs root (debootstrap, chroot, mounts); installs debootstrap, rsync
# and iproute2 on this machine when missing.
set -euo pipefail

cd "$(dirname "$0")/.."
# without symbolic links: a process's /proc/PID/root is compared with it
ROOT=$(pwd -P)
SELF=$ROOT/util/debroot.sh
ROOTS=$ROOT/build/roots

die() {
    echo "debroot.sh: $*" >&2
    exit 1
}

say() {
    echo "debroot.sh: [$(elapsed)] $*"
}

START=$SECONDS

elapsed() {
    local s=$((SECONDS - START))
    printf '%d:%02d' $((s / 60)) $((s % 60))
}

# The environment a root's commands get: nothing of this machine's but
# what the project's scripts read.
root_env() {
    local v
    ENV=(HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive
         PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
    for v in CI TEST_JOBS TEST_NGINX_PORT PROVE_OPTS TERM; do
        if [ -n "${!v:-}" ]; then
            ENV+=("$v=${!v}")
        fi
    done
}

# ---- inside the namespaces (util/debroot.sh --ns ...) ----

MOUNTED=()
NS_DIR=""

ns_mount() {
    mount "$@"
    MOUNTED=("${@: -1}" "${MOUNTED[@]}")
}

# stop what still runs inside the root (a daemon a test left behind):
# those processes, and no other, have it as their root directory
ns_reap() {
    local dir=$1 p r try
    local -a pids

    for try in $(seq 1 20); do
        pids=()
        for p in /proc/[0-9]*; do
            r=$(readlink "$p/root" 2>/dev/null) || continue
            if [ "$r" = "$dir" ]; then
                pids+=("${p#/proc/}")
            fi
        done
        [ "${#pids[@]}" -gt 0 ] || return 0
        if [ "$try" -eq 1 ]; then
            echo "debroot.sh: stopping what is left in the root:" \
                 "${pids[*]}" >&2
        fi
        if [ "$try" -lt 20 ]; then
            kill -TERM "${pids[@]}" 2>/dev/null || true
        else
            kill -KILL "${pids[@]}" 2>/dev/null || true
        fi
        sleep 0.5
    done
}

ns_cleanup() {
    local m
    [ -z "$NS_DIR" ] || ns_reap "$NS_DIR"
    for m in "${MOUNTED[@]}"; do
        umount "$m" 2>/dev/null || umount -l "$m" \
            || echo "debroot.sh: cannot unmount $m" >&2
    done
    MOUNTED=()
}

ns_run() {
    local dir=$1 cache=$2 net=$3 script=$4

    trap ns_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM HUP
    NS_DIR=$dir

    ns_mount -t proc proc "$dir/proc"
    ns_mount --bind /sys "$dir/sys"
    ns_mount --bind /dev "$dir/dev"
    ns_mount --bind /dev/pts "$dir/dev/pts"
    ns_mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$dir/dev/shm"
    ns_mount --bind "$cache" "$dir/var/cache/apt/archives"
    if [ "$net" = private ]; then
        ip link set lo up
    fi

    root_env
    chroot "$dir" /usr/bin/env -i "${ENV[@]}" \
        /bin/bash -euo pipefail -c "$script"
}

# ---- on the machine ----

# in_root SUITE DIR NET SCRIPT: the bash SCRIPT as root inside DIR; NET
# is "host" (apt needs the mirror) or "private" (a loopback of its own)
in_root() {
    local suite=$1 dir=$2 net=$3 script=$4
    local -a ns=(--mount --propagation private)

    if [ "$net" = private ]; then
        ns+=(--net)
    fi
    mkdir -p "$ROOTS/apt-$suite/partial"
    unshare "${ns[@]}" -- bash "$SELF" --ns "$dir" "$ROOTS/apt-$suite" \
        "$net" "$script"
}

# rm -rf of a root, after making sure that nothing is mounted below it
remove_root() {
    local dir
    for dir in "$@"; do
        [ -e "$dir" ] || continue
        if findmnt -rn -o TARGET | awk -v d="$dir" \
               'index($0, d "/") == 1 || $0 == d { found = 1 }
                END { exit !found }'; then
            die "something is mounted below $dir; not removing it"
        fi
        rm -rf "$dir"
    done
}

host_tools() {
    local p missing=""
    for p in debootstrap rsync iproute2 util-linux; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
            | grep -q "install ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        say "installing on this machine:$missing"
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        # shellcheck disable=SC2086 # a list of packages, one a word
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
            install -y -qq --no-install-recommends $missing
    fi
}

# base SUITE: build/roots/SUITE-base, made when missing
base() {
    local suite=$1 dir=$ROOTS/$1-base mirror

    [ -f "$dir/.debroot-base" ] && return 0

    mirror=$(bash "$ROOT/util/debian-mirror.sh") \
        || die "no Debian mirror in this machine's apt sources"
    remove_root "$dir" "$dir.tmp"
    say "debootstrap --variant=minbase $suite (log: $ROOTS/$suite-base.log)"
    debootstrap --variant=minbase "$suite" "$dir.tmp" "$mirror" \
        > "$ROOTS/$suite-base.log" 2>&1 \
        || { tail -20 "$ROOTS/$suite-base.log"; die "debootstrap failed"; }

    # no package's maintainer script may start a daemon here: it would
    # run in this machine's network (nginx on port 80, PostgreSQL on 5432)
    printf '#!/bin/sh\n# util/debroot.sh: no daemon starts in this root\n%s\n' \
        'exit 101' > "$dir.tmp/usr/sbin/policy-rc.d"
    chmod 755 "$dir.tmp/usr/sbin/policy-rc.d"
    # apt as this machine's is set up to reach the mirror (a mirror whose
    # Release files carry an old Valid-Until, a proxy), no translations;
    # dpkg without fsync (a root is thrown away, never crash-recovered)
    {
        apt-config dump | grep -E \
            '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ' || true
        echo 'Acquire::Languages "none";'
    } > "$dir.tmp/etc/apt/apt.conf.d/90debroot"
    echo force-unsafe-io > "$dir.tmp/etc/dpkg/dpkg.cfg.d/90debroot"
    # the certificate authorities this machine added locally (one that
    # reaches the registries through a proxy of its own): the root's
    # ca-certificates takes them in when it is installed
    if [ -d /usr/local/share/ca-certificates ]; then
        mkdir -p "$dir.tmp/usr/local/share/ca-certificates"
        cp -a /usr/local/share/ca-certificates/. \
            "$dir.tmp/usr/local/share/ca-certificates/"
    fi
    touch "$dir.tmp/.debroot-base"
    mv "$dir.tmp" "$dir"
    say "$suite-base ready"
}

# copy_base SUITE DIR: DIR becomes a copy of SUITE-base
copy_base() {
    local suite=$1 dir=$2
    base "$suite"
    remove_root "$dir" "$dir.tmp"
    cp -a "$ROOTS/$suite-base" "$dir.tmp"
    mv "$dir.tmp" "$dir"
}

# the work tree as git would see it (tracked and new files, not ignored
# ones) into DIR/src; what is ignored there (its build/, node_modules) is
# kept for the next run
copy_tree() {
    local dir=$1
    mkdir -p "$dir/src"
    rsync -a --delete --exclude=/.git --filter=':- .gitignore' \
        "$ROOT/" "$dir/src/"
    # the OpenAPI validator that make deps installed here (JavaScript, the
    # same on any Node.js): the root then needs no npm, nor its 360 Debian
    # packages; without it make deps installs them in the root
    if [ -x "$ROOT/util/openapi/node_modules/.bin/redocly" ]; then
        rsync -a --delete "$ROOT/util/openapi/node_modules/" \
            "$dir/src/util/openapi/node_modules/"
    fi
}

# pkg_test SUITE DEB: DEB installed and tried in a clean SUITE root
pkg_test() {
    local suite=$1 deb=$2 dir=$ROOTS/$1-pkg

    [ -f "$deb" ] || die "no package $deb"
    say "package test: $(basename "$deb") in a clean $suite root"
    copy_base "$suite" "$dir"
    mkdir -p "$dir/pkgtest/util" "$dir/pkgtest/build/deb"
    cp "$ROOT/util/deb.sh" "$dir/pkgtest/util/"
    cp "$deb" "$dir/pkgtest/build/deb/"

    # the downloads with the mirror; the installation and the test
    # offline, in a network of their own
    in_root "$suite" "$dir" host '
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        apt-get install -y -qq --download-only --no-install-recommends \
            postgresql postgresql-common curl perl \
            /pkgtest/build/deb/*.deb >/dev/null'
    # shellcheck disable=SC2016 # expanded in the root
    in_root "$suite" "$dir" private '
        echo "debroot.sh: in the clean root: Debian $(cat /etc/debian_version)"
        bash /pkgtest/util/deb.sh test'

    remove_root "$dir"
    say "package test in a clean $suite root passed"
}

# test_debian13 [SCRIPT...]: with scripts, only those (util/test.sh in
# the root after make build), no package
test_debian13() {
    local dir=$ROOTS/trixie-test deb run=""

    if [ ! -f "$dir/.debroot-test" ]; then
        copy_base trixie "$dir"
        # nothing here reads manuals or documentation: not unpacked, and
        # no man-db trigger after every install
        printf 'path-exclude=/usr/share/%s/*\n' man doc info locale \
            >> "$dir/etc/dpkg/dpkg.cfg.d/90debroot"
        printf 'path-include=/usr/share/doc/*/copyright\n' \
            >> "$dir/etc/dpkg/dpkg.cfg.d/90debroot"
        touch "$dir/.debroot-test"
        say "trixie-test made from trixie-base"
    else
        say "trixie-test reused (DEBROOT_FRESH=1 makes it anew)"
    fi

    copy_tree "$dir"

    # every Debian package in one apt transaction (make deps would make
    # four, each with its own apt-get update), then make deps, which then
    # only adds Test::Nginx (from unstable, as on Debian 12)
    say "make deps in the root"
    # shellcheck disable=SC2016 # expanded in the root
    in_root trixie "$dir" host '
        cd /src
        missing=""
        for p in $(bash util/install-deps.sh --packages); do
            dpkg-query -W -f="\${Status}" "$p" 2>/dev/null \
                | grep -q "install ok installed" || missing="$missing $p"
        done
        if [ -n "$missing" ]; then
            echo "debroot.sh: apt-get install$missing"
            apt-get -o DPkg::Lock::Timeout=600 update -qq
            apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
                --no-install-recommends $missing >/dev/null
        fi
        bash util/install-deps.sh
        bash util/install-deps.sh --deb'

    if [ -n "${DEBROOT_COMMAND:-}" ]; then
        run="make build && $DEBROOT_COMMAND"
    elif [ "$#" -gt 0 ]; then
        run="make build && bash util/test.sh$(printf ' %q' "$@")"
    fi
    say "${run:-make test} in the root"
    # shellcheck disable=SC2016 # expanded in the root
    in_root trixie "$dir" private '
        cd /src
        echo "debroot.sh: Debian $(cat /etc/debian_version)"
        /usr/sbin/nginx -V 2>&1
        dpkg-query -W -f="\${Package} \${Version}\n" nginx nginx-dev \
            postgresql libpq5 openssl libssl3t64 libjansson4 check \
            libtest-nginx-perl gcc || true
        '"${run:-make test}"
    if [ -n "$run" ]; then
        say "$run: done in the Debian 13 root"
        return 0
    fi

    say "make deb in the root"
    in_root trixie "$dir" private '
        cd /src
        make deb'

    rm -rf "$ROOT/build/deb-trixie"
    mkdir -p "$ROOT/build/deb-trixie"
    cp "$dir"/src/build/deb/*.deb "$ROOT/build/deb-trixie/"
    deb=$(ls "$ROOT"/build/deb-trixie/libnginx-mod-http-session_*.deb)
    say "Debian 13 package: $deb"

    pkg_test trixie "$deb"
    say "test-debian13 passed"
}

case ${1:-} in
    --ns)
        shift
        ns_run "$@"
        exit $?
        ;;
esac

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"
mkdir -p "$ROOTS"
exec 9>"$ROOTS/.lock"
flock -n 9 || { say "another debroot.sh runs here; waiting"; flock 9; }

if [ "${DEBROOT_FRESH:-}" = 1 ]; then
    say "DEBROOT_FRESH=1: removing every root"
    for d in "$ROOTS"/*; do
        [ -d "$d" ] && remove_root "$d"
    done
fi

host_tools

case ${1:-} in
    test-debian13)
        shift
        test_debian13 "$@"
        ;;
    run-debian13)
        shift
        [ "$#" -gt 0 ] || die "usage: util/debroot.sh run-debian13 COMMAND"
        DEBROOT_COMMAND=$(printf '%q ' "$@") test_debian13
        ;;
    deb-test)
        suite=${2:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
        [ -n "$suite" ] || die "cannot tell this machine's release"
        deb=${3:-$(ls "$ROOT"/build/deb/libnginx-mod-http-session_*.deb \
                      2>/dev/null | head -1)}
        [ -n "$deb" ] || die "no package in build/deb: run make deb"
        pkg_test "$suite" "$(realpath "$deb")"
        ;;
    *)
        die "usage: util/debroot.sh test-debian13 [SCRIPT...] |" \
            "run-debian13 COMMAND [ARG...] | deb-test [SUITE [DEB]]"
        ;;
esac
