# shellcheck shell=bash
# nginx_source DIR WHO: a directory of nginx's own sources (src/core/nginx.c
# and the rest), for the scripts that build nginx itself (util/asan.sh,
# util/test-level-events.sh); sourced, not run.  The caller sets ROOT
# (the repository) and NGINX_SRC; DIR is relative to ROOT, WHO names the
# caller in its messages.
#
# NGINX_SRC when it has them.  Debian's nginx-dev tree has the headers
# only: nginx's own sources then come from the Debian source package of
# the installed version (its upstream tarball), fetched once with apt
# from the mirror the machine already uses into DIR (or taken from
# another build/*/ that has it), and extracted in DIR/src/.
nginx_source() {
    local out=$1 who=$2
    local tmp uri suite tarball

    if [ -f "$NGINX_SRC/src/core/nginx.c" ]; then
        echo "$NGINX_SRC"
        return
    fi

    mkdir -p "$ROOT/$out"

    # shellcheck disable=SC2012 # names of Debian's tarballs: no odd bytes
    tarball=$(ls "$ROOT/$out"/nginx_*.orig.tar.gz \
                 "$ROOT"/build/*/nginx_*.orig.tar.gz 2>/dev/null \
              | head -1 || true)

    if [ -z "$tarball" ]; then
        uri=$(awk '/^URIs:/ { print $2; exit }' \
                  /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
        if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
            uri=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list)
        fi
        [ -n "$uri" ] || { echo "$who: no Debian mirror in apt sources" >&2;
                           exit 1; }
        # shellcheck disable=SC1091 # the system's file, not the repository's
        suite=$(. /etc/os-release && echo "$VERSION_CODENAME")

        tmp=$(mktemp -d)
        mkdir -p "$tmp/lists/partial" "$tmp/etc"
        printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\n' \
            "$uri" "$suite" > "$tmp/etc/src.sources"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            >> "$tmp/etc/src.sources"
        local -a aptopts=(-o "Dir::Etc::sourcelist=-"
                          -o "Dir::Etc::sourceparts=$tmp/etc"
                          -o "Dir::State::Lists=$tmp/lists"
                          -o "Dir::Cache::pkgcache=$tmp/pkgcache.bin"
                          -o "Dir::Cache::srcpkgcache=$tmp/srcpkgcache.bin"
                          -o "APT::Get::List-Cleanup=0"
                          -o "APT::Sandbox::User=root")
        apt-get "${aptopts[@]}" update -qq >&2
        # only the upstream tarball is needed: a missing Debian part is
        # no failure here
        (cd "$ROOT/$out" && apt-get "${aptopts[@]}" source --download-only \
            nginx >&2) || true
        rm -rf "$tmp"
        # shellcheck disable=SC2012 # as above
        tarball=$(ls "$ROOT/$out"/nginx_*.orig.tar.gz 2>/dev/null \
                  | head -1 || true)
        [ -n "$tarball" ] || { echo "$who: no nginx source" >&2; exit 1; }
    fi

    rm -rf "${ROOT:?}/$out/src"
    mkdir -p "$ROOT/$out/src"
    tar -xzf "$tarball" -C "$ROOT/$out/src"
    ls -d "$ROOT/$out"/src/nginx-*/
}
