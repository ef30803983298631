#!/usr/bin/env bash
# The extra packages of "make fuzz" (clang and its libFuzzer and sanitizer
# runtimes) and "make asan" (gcc's AddressSanitizer runtime, which
# build-essential brings).  Not needed by "make test".  Non-interactive; a
# no-op when everything is present.
set -euo pipefail

PKGS="clang libclang-rt-dev build-essential"

# not_installed, apt_install
# shellcheck source=util/apt-lib.sh
. "$(dirname "$0")/apt-lib.sh"

# shellcheck disable=SC2086 # a list of packages, one a word
apt_install install-sanitizer-deps "$(not_installed $PKGS)"

echo "install-sanitizer-deps: all dependencies present"
