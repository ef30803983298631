/*
 * webhook_url syntax, private addresses, and the URL as the log writes it.
 *
 * The syntax is deliberately narrower than RFC 3986 where a looser
 * reading would let one URL name different hosts to different parsers:
 * hosts that only some resolvers read as IPv4 addresses ("2130706433",
 * "0x7f.1", "127.1", "010.0.0.1") are refused, as are user info, zone
 * ids and anything that is not visible ASCII.
 */

#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "ngx_http_session_url.h"


/* the longest IPv6 text inet_pton() can accept, without its NUL */
#define NGX_HTTP_SESSION_URL_IPV6_TEXT_MAX  45
#define NGX_HTTP_SESSION_URL_NAME_MAX       253
#define NGX_HTTP_SESSION_URL_LABEL_MAX      63


static int ngx_http_session_url_ipv4(const unsigned char *p, size_t len,
    unsigned char *addr);
static int ngx_http_session_url_ipv6(const unsigned char *p, size_t len,
    unsigned char *addr);
static int ngx_http_session_url_name(const unsigned char *p, size_t len);
static int ngx_http_session_url_numeric(const unsigned char *p, size_t len);
static int ngx_http_session_url_prefix(const unsigned char *p, size_t len,
    const char *prefix);


int
ngx_http_session_url_parse(const unsigned char *url, size_t len,
    ngx_http_session_url_t *u)
{
    size_t                i, n;
    unsigned              port;
    const unsigned char  *p, *end, *host_end;

    if (len == 0 || len > NGX_HTTP_SESSION_URL_MAX_LEN) {
        return NGX_HTTP_SESSION_URL_INVALID;
    }

    /* spaces, control bytes, DEL and non-ASCII anywhere; fragments */

    for (i = 0; i < len; i++) {
        if (url[i] <= 0x20 || url[i] >= 0x7f || url[i] == '#') {
            return NGX_HTTP_SESSION_URL_INVALID;
        }
    }

    memset(u, 0, sizeof(ngx_http_session_url_t));

    if (ngx_http_session_url_prefix(url, len, "http://")) {
        n = sizeof("http://") - 1;
        u->https = 0;
        u->port = 80;

    } else if (ngx_http_session_url_prefix(url, len, "https://")) {
        n = sizeof("https://") - 1;
        u->https = 1;
        u->port = 443;

    } else {
        return NGX_HTTP_SESSION_URL_INVALID;
    }

    /* the authority runs to the first '/' or '?' */

    p = url + n;
    end = url + len;

    u->authority = p;

    while (p < end && *p != '/' && *p != '?') {
        if (*p == '@') {
            return NGX_HTTP_SESSION_URL_INVALID;
        }

        p++;
    }

    u->authority_len = p - u->authority;
    u->path = p;
    u->path_len = end - p;

    p = u->authority;
    end = u->authority + u->authority_len;

    if (p == end) {
        return NGX_HTTP_SESSION_URL_INVALID;
    }

    if (*p == '[') {
        host_end = memchr(p, ']', end - p);
        if (host_end == NULL) {
            return NGX_HTTP_SESSION_URL_INVALID;
        }

        u->host = p + 1;
        u->host_len = host_end - u->host;
        u->host_type = NGX_HTTP_SESSION_URL_HOST_IPV6;

        if (ngx_http_session_url_ipv6(u->host, u->host_len, u->addr) != 0) {
            return NGX_HTTP_SESSION_URL_INVALID;
        }

        p = host_end + 1;

    } else {
        host_end = memchr(p, ':', end - p);
        if (host_end == NULL) {
            host_end = end;
        }

        u->host = p;
        u->host_len = host_end - p;

        if (u->host_len == 0) {
            return NGX_HTTP_SESSION_URL_INVALID;
        }

        if (ngx_http_session_url_ipv4(u->host, u->host_len, u->addr) == 0) {
            u->host_type = NGX_HTTP_SESSION_URL_HOST_IPV4;

        } else if (ngx_http_session_url_name(u->host, u->host_len) == 0) {
            u->host_type = NGX_HTTP_SESSION_URL_HOST_NAME;

        } else {
            return NGX_HTTP_SESSION_URL_INVALID;
        }

        p = host_end;
    }

    if (p == end) {
        return NGX_HTTP_SESSION_URL_OK;
    }

    if (*p++ != ':' || p == end) {
        return NGX_HTTP_SESSION_URL_INVALID;
    }

    /* digits only; leading zeros are allowed, as in RFC 3986 */

    port = 0;

    while (p < end) {
        if (*p < '0' || *p > '9') {
            return NGX_HTTP_SESSION_URL_INVALID;
        }

        port = port * 10 + (*p++ - '0');

        if (port > 65535) {
            return NGX_HTTP_SESSION_URL_INVALID;
        }
    }

    if (port == 0) {
        return NGX_HTTP_SESSION_URL_INVALID;
    }

    u->port = port;

    return NGX_HTTP_SESSION_URL_OK;
}


int
ngx_http_session_url_check(const unsigned char *url, size_t len,
    int allow_private)
{
    int                     rc;
    ngx_http_session_url_t  u;

    rc = ngx_http_session_url_parse(url, len, &u);
    if (rc != NGX_HTTP_SESSION_URL_OK || allow_private) {
        return rc;
    }

    switch (u.host_type) {

    case NGX_HTTP_SESSION_URL_HOST_IPV4:
        rc = ngx_http_session_addr_private(AF_INET, u.addr);
        break;

    case NGX_HTTP_SESSION_URL_HOST_IPV6:
        rc = ngx_http_session_addr_private(AF_INET6, u.addr);
        break;

    default: /* NGX_HTTP_SESSION_URL_HOST_NAME */
        rc = ngx_http_session_host_private(u.host, u.host_len);
        break;
    }

    return rc ? NGX_HTTP_SESSION_URL_PRIVATE : NGX_HTTP_SESSION_URL_OK;
}


int
ngx_http_session_addr_private(int family, const unsigned char *addr)
{
    unsigned char               client[4];
    static const unsigned char  compatible[12] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
    };
    static const unsigned char  mapped[12] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
    };
    static const unsigned char  translated[12] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0
    };
    static const unsigned char  nat64[12] = {
        0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0
    };
    static const unsigned char  discard[8] = {
        0x01, 0, 0, 0, 0, 0, 0, 0
    };

    if (family == AF_INET) {
        switch (addr[0]) {

        case 0:                                     /* 0.0.0.0/8 */
        case 10:                                    /* 10.0.0.0/8 */
        case 127:                                   /* 127.0.0.0/8 */
            return 1;

        case 100:                                   /* 100.64.0.0/10 */
            return (addr[1] & 0xc0) == 64;

        case 169:                                   /* 169.254.0.0/16 */
            return addr[1] == 254;

        case 172:                                   /* 172.16.0.0/12 */
            return (addr[1] & 0xf0) == 16;

        case 192:
            return (addr[1] == 0 && addr[2] == 0)   /* 192.0.0.0/24 */
                   || (addr[1] == 0 && addr[2] == 2) /* 192.0.2.0/24 */
                   || addr[1] == 168;               /* 192.168.0.0/16 */

        case 198:
            return (addr[1] & 0xfe) == 18           /* 198.18.0.0/15 */
                   || (addr[1] == 51 && addr[2] == 100);

        case 203:                                   /* 203.0.113.0/24 */
            return addr[1] == 0 && addr[2] == 113;

        default:
            /* 224.0.0.0/4 and 240.0.0.0/4 */
            return addr[0] >= 224;
        }
    }

    if (family != AF_INET6) {
        return 1;
    }

    /*
     * IPv4-compatible, ::/96 (deprecated, but a host with a SIT tunnel
     * up still sends it to the IPv4 address; :: and ::1 are in it, and
     * fall in 0.0.0.0/8); IPv4-mapped; IPv4-translated, ::ffff:0:0/96,
     * which a stateless translator (SIIT) turns into the IPv4 address;
     * and NAT64's well-known prefix 64:ff9b::/96, through which a
     * network with a NAT64 gateway reaches the IPv4 address in the last
     * 32 bits: judged by that address.  NAT64's prefix for local use,
     * 64:ff9b:1::/48, is private as a whole (decisions.md (jb)).
     */

    if (memcmp(addr, compatible, sizeof(compatible)) == 0
        || memcmp(addr, mapped, sizeof(mapped)) == 0
        || memcmp(addr, translated, sizeof(translated)) == 0
        || memcmp(addr, nat64, sizeof(nat64)) == 0)
    {
        return ngx_http_session_addr_private(AF_INET, addr + 12);
    }

    if (memcmp(addr, nat64, 4) == 0 && addr[4] == 0 && addr[5] == 1) {
        return 1;
    }

    /*
     * 6to4, 2002::/16 (RFC 3056): the 32 bits after the prefix are an
     * IPv4 address, and a host with a 6to4 (sit) interface, or a relay
     * in the operator's network, sends the packet to it inside IPv4:
     * 2002:7f00:1:: is 127.0.0.1 and 2002:a00:1:: is 10.0.0.1.  Judged
     * by that address, as the translated forms above are (decisions.md
     * (jf)).
     */

    if (addr[0] == 0x20 && addr[1] == 0x02) {
        return ngx_http_session_addr_private(AF_INET, addr + 2);
    }

    if (addr[0] == 0x20 && addr[1] == 0x01 && addr[2] == 0 && addr[3] == 0) {

        /*
         * Teredo, 2001::/32 (RFC 4380): the Teredo server's IPv4 address
         * in bytes 4-7, the client's IPv4 address with every bit inverted
         * in bytes 12-15.  A relay sends the packet to the client's
         * address in UDP, and its bubbles through the server's: private
         * when either address is.
         */

        client[0] = (unsigned char) ~addr[12];
        client[1] = (unsigned char) ~addr[13];
        client[2] = (unsigned char) ~addr[14];
        client[3] = (unsigned char) ~addr[15];

        return ngx_http_session_addr_private(AF_INET, addr + 4)
               || ngx_http_session_addr_private(AF_INET, client);
    }

    /*
     * The rest is what IANA's special-purpose registry marks as not
     * globally reachable, which only the operator's own network could
     * deliver: with the contract's ranges, the discard-only 100::/64
     * (RFC 6666); the IETF protocol assignments 2001::/23 as a whole,
     * benchmarking 2001:2::/48 and the retired ORCHID 2001:10::/28 among
     * them (the few blocks in it marked reachable are anycast services
     * and identifiers, never a webhook receiver); the second
     * documentation prefix 3fff::/20 (RFC 9637); and SRv6 segment ids
     * 5f00::/16 (RFC 9602), which address the routers of a segment
     * routing domain.
     */

    return (addr[0] & 0xfe) == 0xfc                 /* fc00::/7 */
           || (addr[0] == 0xfe && (addr[1] & 0xc0) == 0x80) /* fe80::/10 */
           || (addr[0] == 0xfe && (addr[1] & 0xc0) == 0xc0) /* fec0::/10 */
           || addr[0] == 0xff                       /* ff00::/8 */
           || (addr[0] == 0x20 && addr[1] == 0x01   /* 2001::/23 */
               && addr[2] < 0x02)
           || (addr[0] == 0x20 && addr[1] == 0x01   /* 2001:db8::/32 */
               && addr[2] == 0x0d && addr[3] == 0xb8)
           || (addr[0] == 0x3f && addr[1] == 0xff   /* 3fff::/20 */
               && (addr[2] & 0xf0) == 0)
           || (addr[0] == 0x5f && addr[1] == 0)     /* 5f00::/16 */
           || memcmp(addr, discard, sizeof(discard)) == 0; /* 100::/64 */
}


int
ngx_http_session_host_private(const unsigned char *host, size_t len)
{
    size_t             i;
    static const char  name[] = "localhost";

    if (len > 0 && host[len - 1] == '.') {
        len--;
    }

    if (len < sizeof(name) - 1) {
        return 0;
    }

    host += len - (sizeof(name) - 1);

    for (i = 0; i < sizeof(name) - 1; i++) {
        if ((host[i] | 0x20) != (unsigned char) name[i]) {
            return 0;
        }
    }

    /* "localhost" itself, or a label boundary before it */

    return len == sizeof(name) - 1 || host[-1] == '.';
}



/*
 * Exactly four decimal parts 0..255 without leading zeros: the only form
 * every resolver reads the same way.
 */

static int
ngx_http_session_url_ipv4(const unsigned char *p, size_t len,
    unsigned char *addr)
{
    size_t    i, parts, digits;
    unsigned  value;

    i = 0;

    for (parts = 0; parts < 4; parts++) {

        if (parts > 0) {
            if (i == len || p[i] != '.') {
                return -1;
            }

            i++;
        }

        value = 0;

        for (digits = 0; i < len && p[i] >= '0' && p[i] <= '9'; digits++) {
            if (digits == 3) {
                return -1;
            }

            value = value * 10 + (p[i++] - '0');
        }

        if (digits == 0 || value > 255 || (digits > 1 && p[i - digits] == '0'))
        {
            return -1;
        }

        addr[parts] = (unsigned char) value;
    }

    return i == len ? 0 : -1;
}


static int
ngx_http_session_url_ipv6(const unsigned char *p, size_t len,
    unsigned char *addr)
{
    char           text[NGX_HTTP_SESSION_URL_IPV6_TEXT_MAX + 1];
    size_t         i;
    unsigned char  c;

    if (len == 0 || len > NGX_HTTP_SESSION_URL_IPV6_TEXT_MAX) {
        return -1;
    }

    /* hex digits, colons and the dots of an embedded IPv4 address only */

    for (i = 0; i < len; i++) {
        c = p[i];

        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
              || (c >= 'A' && c <= 'F') || c == ':' || c == '.'))
        {
            return -1;
        }

        text[i] = (char) c;
    }

    text[len] = '\0';

    return inet_pton(AF_INET6, text, addr) == 1 ? 0 : -1;
}


/*
 * Labels of letters, digits and hyphens, 1..63 bytes, neither starting
 * nor ending with a hyphen, at most 253 bytes in all and an optional
 * trailing dot.  A last label that is a number (decimal, or "0x" and hex)
 * makes a name that inet_aton() and WHATWG URL parsers read as an IPv4
 * address: it is not a DNS name.
 */

static int
ngx_http_session_url_name(const unsigned char *p, size_t len)
{
    size_t         i, start;
    unsigned char  c;

    if (len > 0 && p[len - 1] == '.') {
        len--;
    }

    if (len == 0 || len > NGX_HTTP_SESSION_URL_NAME_MAX) {
        return -1;
    }

    start = 0;

    for (i = 0; i <= len; i++) {

        if (i == len || p[i] == '.') {
            if (i == start || i - start > NGX_HTTP_SESSION_URL_LABEL_MAX
                || p[start] == '-' || p[i - 1] == '-')
            {
                return -1;
            }

            if (i == len) {
                break;
            }

            start = i + 1;
            continue;
        }

        c = p[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '-'))
        {
            return -1;
        }
    }

    return ngx_http_session_url_numeric(p + start, len - start) ? -1 : 0;
}


static int
ngx_http_session_url_numeric(const unsigned char *p, size_t len)
{
    size_t  i;

    if (len >= 2 && p[0] == '0' && (p[1] | 0x20) == 'x') {
        for (i = 2; i < len; i++) {
            if (!((p[i] >= '0' && p[i] <= '9')
                  || ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'f')))
            {
                return 0;
            }
        }

        return 1;
    }

    for (i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return 0;
        }
    }

    return 1;
}


/*
 * A case-insensitive prefix; prefix is lower-case.  The URL holds visible
 * ASCII only by now, so setting bit 0x20 folds letters and nothing else
 * onto the prefix's bytes.
 */

static int
ngx_http_session_url_prefix(const unsigned char *p, size_t len,
    const char *prefix)
{
    size_t  i, n;

    n = strlen(prefix);

    if (len < n) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        if ((p[i] | 0x20) != (unsigned char) prefix[i]) {
            return 0;
        }
    }

    return 1;
}
