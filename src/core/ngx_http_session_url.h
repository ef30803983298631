/*
 * webhook_url: the syntax of docs/api.md §5 and the private address
 * ranges of section 10, checked when a session is created and, for the
 * addresses a host name resolves to, again when a webhook is delivered.
 *
 * Pure C with no nginx types, shared by the module and sessionctl, and
 * unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_URL_H_INCLUDED_
#define _NGX_HTTP_SESSION_URL_H_INCLUDED_


#include <stddef.h>


#define NGX_HTTP_SESSION_URL_MAX_LEN      2048

/* the results of ngx_http_session_url_check() and _url_parse() */
#define NGX_HTTP_SESSION_URL_OK           0
/* "webhook_url must be an absolute http or https URL" */
#define NGX_HTTP_SESSION_URL_INVALID      1
/* "webhook_url must not point to a private address" */
#define NGX_HTTP_SESSION_URL_PRIVATE      2

/* ngx_http_session_url_t.host_type */
#define NGX_HTTP_SESSION_URL_HOST_NAME    0
#define NGX_HTTP_SESSION_URL_HOST_IPV4    1
#define NGX_HTTP_SESSION_URL_HOST_IPV6    2


/* the parts of a valid URL; every pointer points into the URL */
typedef struct {
    /* 1 for https, 0 for http */
    int                   https;
    int                   host_type;
    /*
     * A host name as written (case and a trailing dot kept) or an IP
     * literal without its brackets.
     */
    const unsigned char  *host;
    size_t                host_len;
    /* host[:port] as written: the value of a Host header */
    const unsigned char  *authority;
    size_t                authority_len;
    /* the explicit port, else 80 or 443 */
    unsigned              port;
    /*
     * The path and query as written, possibly empty or starting with '?':
     * the request target is "/" followed by the path when the path does
     * not start with '/'.
     */
    const unsigned char  *path;
    size_t                path_len;
    /* an IP literal in network order: 4 or 16 bytes */
    unsigned char         addr[16];
} ngx_http_session_url_t;


/*
 * The syntax alone: an absolute http or https URL (scheme in any case) of
 * at most NGX_HTTP_SESSION_URL_MAX_LEN bytes of visible ASCII, without '#'
 * anywhere, without user info, with a host that is a DNS name, a
 * dotted-quad IPv4 literal or a bracketed IPv6 literal without a zone,
 * and an optional port 1..65535.  Returns NGX_HTTP_SESSION_URL_OK and
 * fills *u, or NGX_HTTP_SESSION_URL_INVALID.
 */
int ngx_http_session_url_parse(const unsigned char *url, size_t len,
    ngx_http_session_url_t *u);

/*
 * The syntax, then, unless allow_private, the host: an IP literal in a
 * private range or the name "localhost" or "*.localhost" is
 * NGX_HTTP_SESSION_URL_PRIVATE.
 */
int ngx_http_session_url_check(const unsigned char *url, size_t len,
    int allow_private);

/*
 * 1 when the address (AF_INET: 4 bytes, AF_INET6: 16 bytes, network
 * order) is in one of the private ranges of docs/api.md §10; an IPv6
 * address that carries an IPv4 address (mapped, translated, compatible,
 * NAT64, 6to4, Teredo) is judged by that address.  Any other family is
 * private: the check fails closed.
 */
int ngx_http_session_addr_private(int family, const unsigned char *addr);

/* 1 when the host name is "localhost" or ends in ".localhost" */
int ngx_http_session_host_private(const unsigned char *host, size_t len);


#endif /* _NGX_HTTP_SESSION_URL_H_INCLUDED_ */
