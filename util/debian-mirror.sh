#!/usr/bin/env bash
# Prints the Debian mirror that this machine's apt uses: the first URIs
# of /etc/apt/sources.list.d/*.sources, else the first "deb" line of
# /etc/apt/sources.list, leaving out the security archive.  The project
# names no mirror of its own; whatever the machine is set up with is
# used (util/install-deps.sh for Test::Nginx, util/debroot.sh for
# debootstrap).  Exits 1 when no mirror is found.
set -euo pipefail

uri=""
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    u=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' "$f" \
        | grep -v security | head -1 || true)
    if [ -n "$u" ]; then uri="$u"; break; fi
done
if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ {
               for (i = 2; i <= NF; i++)
                   if ($i ~ /^(https?|file):/) { print $i; exit } }' \
          /etc/apt/sources.list)
fi
if [ -z "$uri" ]; then
    echo "debian-mirror.sh: cannot find the Debian mirror in apt sources" >&2
    exit 1
fi
echo "$uri"
