#!/usr/bin/env bash
# The extra packages of "make fuzz" (clang and its libFuzzer and sanitizer
# runtimes) and "make asan" (gcc's AddressSanitizer runtime, which
# build-essential brings).  Not needed by "make test".  Non-interactive; a
# no-op when everything is present.
set -euo pipefail

PKGS="clang libclang-rt-dev build-essential"

SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
         | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

export DEBIAN_FRONTEND=noninteractive

if [ -n "$missing" ]; then
    echo "install-sanitizer-deps: installing:$missing"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends $missing
fi

echo "install-sanitizer-deps: all dependencies present"
