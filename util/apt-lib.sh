# shellcheck shell=bash
# Shell functions of util/install-deps.sh and util/install-sanitizer-deps.sh
# (Debian packages, installed non-interactively); sourced, not run.

SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive


# not_installed PKG...: those of the packages that dpkg does not have
# installed, each after a space
not_installed() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
            | grep -q "install ok installed" || printf ' %s' "$p"
    done
}


# apt_install WHO PKGS: the packages of the list PKGS (" a b"; none is no
# work) installed without their recommends, after an apt-get update; the
# line it prints names WHO
apt_install() {
    local who=$1 pkgs=$2
    [ -n "$pkgs" ] || return 0
    echo "$who: installing:$pkgs"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    # shellcheck disable=SC2086 # a list of packages, one a word
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends $pkgs
}
