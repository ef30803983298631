/*
 * What libpq checks of a connection string's values when it connects
 * (fe-connect.c's connectOptions2() and the checks after it), judged
 * without connecting: the keywords that take one of a few words, the
 * integers, the port list and the numeric host addresses.
 */

#include "ngx_http_session_conninfo.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


typedef struct {
    const char  *keyword;
    /* the words it takes, as libpq compares them; NULL: an integer */
    const char  *words[8];
    /* whether libpq compares the words in any case */
    int          anycase;
    /* the message */
    const char  *expect;
} ngx_http_session_conninfo_rule_t;


static const ngx_http_session_conninfo_rule_t  ngx_http_session_conninfo[] = {

    { "sslmode",
      { "disable", "allow", "prefer", "require", "verify-ca", "verify-full",
        NULL }, 0,
      "one of disable, allow, prefer, require, verify-ca, verify-full" },

    { "gssencmode", { "disable", "prefer", "require", NULL }, 0,
      "one of disable, prefer, require" },

    { "channel_binding", { "disable", "prefer", "require", NULL }, 0,
      "one of disable, prefer, require" },

    { "target_session_attrs",
      { "any", "read-write", "read-only", "primary", "standby",
        "prefer-standby", NULL }, 0,
      "one of any, read-write, read-only, primary, standby, "
      "prefer-standby" },

    { "load_balance_hosts", { "disable", "random", NULL }, 0,
      "one of disable, random" },

    { "sslcertmode", { "disable", "allow", "require", NULL }, 0,
      "one of disable, allow, require" },

    { "sslnegotiation", { "postgres", "direct", NULL }, 0,
      "one of postgres, direct" },

    { "ssl_min_protocol_version",
      { "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3", NULL }, 1,
      "one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3" },

    { "ssl_max_protocol_version",
      { "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3", NULL }, 1,
      "one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3" },

    { "connect_timeout", { NULL }, 0, "an integer" },
    { "keepalives", { NULL }, 0, "an integer" },
    { "keepalives_idle", { NULL }, 0, "an integer" },
    { "keepalives_interval", { NULL }, 0, "an integer" },
    { "keepalives_count", { NULL }, 0, "an integer" },
    { "tcp_user_timeout", { NULL }, 0, "an integer" },

    { NULL, { NULL }, 0, NULL }
};


/* one entry of a list: whether libpq takes it */
typedef int (*ngx_http_session_conninfo_entry_pt)(const char *s, size_t len);


static int ngx_http_session_conninfo_list(const char *value,
    ngx_http_session_conninfo_entry_pt ok);
static int ngx_http_session_conninfo_port(const char *s, size_t len);
static int ngx_http_session_conninfo_addr(const char *s, size_t len);
static int ngx_http_session_conninfo_int(const char *s, size_t len,
    long *n);


const char *
ngx_http_session_conninfo_check(const char *keyword, const char *value)
{
    long                                     n;
    const ngx_http_session_conninfo_rule_t  *r;
    int                                      i;

    if (value == NULL || *value == '\0') {
        return NULL;
    }

    /* lists, one a host, of which an entry may be empty */

    if (strcmp(keyword, "port") == 0) {
        return ngx_http_session_conninfo_list(value,
                                              ngx_http_session_conninfo_port)
               ? NULL : "integers from 1 to 65535, one a host";
    }

    if (strcmp(keyword, "hostaddr") == 0) {
        return ngx_http_session_conninfo_list(value,
                                              ngx_http_session_conninfo_addr)
               ? NULL : "numeric IP addresses, one a host";
    }

    for (r = ngx_http_session_conninfo; r->keyword; r++) {
        if (strcmp(keyword, r->keyword) != 0) {
            continue;
        }

        if (r->words[0] == NULL) {
            return ngx_http_session_conninfo_int(value, strlen(value), &n)
                   == 0 ? NULL : r->expect;
        }

        for (i = 0; r->words[i]; i++) {
            if ((r->anycase ? strcasecmp(value, r->words[i])
                            : strcmp(value, r->words[i]))
                == 0)
            {
                return NULL;
            }
        }

        return r->expect;
    }

    return NULL;
}


/* each entry of a comma-separated value that has one */

static int
ngx_http_session_conninfo_list(const char *value,
    ngx_http_session_conninfo_entry_pt ok)
{
    size_t       len;
    const char  *p, *end;

    for (p = value; ; p = end + 1) {
        end = strchr(p, ',');
        len = end ? (size_t) (end - p) : strlen(p);

        if (len && !ok(p, len)) {
            return 0;
        }

        if (end == NULL) {
            return 1;
        }
    }
}


/* an integer from 1 to 65535 */

static int
ngx_http_session_conninfo_port(const char *s, size_t len)
{
    long  n;

    return ngx_http_session_conninfo_int(s, len, &n) == 0
           && n >= 1 && n <= 65535;
}


/* a numeric IPv4 or IPv6 address */

static int
ngx_http_session_conninfo_addr(const char *s, size_t len)
{
    char            addr[64];
    unsigned char   buf[16];
    struct in_addr  in;

    if (len >= sizeof(addr)) {
        return 0;
    }

    memcpy(addr, s, len);
    addr[len] = '\0';

    /* as getaddrinfo() with AI_NUMERICHOST: "127.1" too */

    return inet_aton(addr, &in) != 0 || inet_pton(AF_INET6, addr, buf) == 1;
}


/*
 * An integer as libpq reads one (parse_int_param()): optional white
 * space, an optional sign, digits, optional white space, nothing else,
 * within an int.  0 and *n, or -1.
 */

static int
ngx_http_session_conninfo_int(const char *s, size_t len, long *n)
{
    char    buf[32], *end;
    size_t  i;

    if (len >= sizeof(buf)) {
        return -1;
    }

    memcpy(buf, s, len);
    buf[len] = '\0';

    for (i = 0; buf[i] == ' ' || buf[i] == '\t'; i++) {
        /* void */
    }

    if (buf[i] == '\0') {
        return -1;
    }

    errno = 0;
    *n = strtol(buf + i, &end, 10);

    if (errno != 0 || end == buf + i || *n < INT_MIN || *n > INT_MAX) {
        return -1;
    }

    while (*end == ' ' || *end == '\t') {
        end++;
    }

    return (*end == '\0') ? 0 : -1;
}
