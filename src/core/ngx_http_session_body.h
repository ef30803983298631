/*
 * The body of POST /api/v1/sessions (docs/api.md §5 and §10) and the
 * integer query parameters (limit, timeout).
 *
 * Pure C with no nginx types, shared by the module and sessionctl, and
 * unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_BODY_H_INCLUDED_
#define _NGX_HTTP_SESSION_BODY_H_INCLUDED_


#include <stddef.h>


#define NGX_HTTP_SESSION_MODE_WEBHOOK      1
#define NGX_HTTP_SESSION_MODE_LONG_POLL    2

/* the results of ngx_http_session_create_parse() */
#define NGX_HTTP_SESSION_CREATE_OK         0
/* 400 with the message written to msg */
#define NGX_HTTP_SESSION_CREATE_INVALID   -1
/* out of memory: 500; msg says "internal server error" */
#define NGX_HTTP_SESSION_CREATE_ERROR     -2

/*
 * The msg buffer to give ngx_http_session_create_parse(), and its
 * smallest size.  Every message fits whole but "unknown field: <name>"
 * with a name of more than 496 bytes, which is cut at a character
 * boundary; a buffer of the body's length plus this size never cuts one,
 * as a decoded name is never longer than its JSON text.
 */
#define NGX_HTTP_SESSION_BODY_MSG_MAX      512


typedef struct {
    /* NGX_HTTP_SESSION_MODE_WEBHOOK or NGX_HTTP_SESSION_MODE_LONG_POLL */
    int            delivery_mode;
    /* malloc()ed, NUL-terminated, or NULL for long_poll */
    char          *webhook_url;
    size_t         webhook_url_len;
    /* seconds; 0 when absent */
    long long      expires_in;
    int            has_expires_in;
} ngx_http_session_create_t;


/*
 * Checks the body in the order of docs/api.md §5 and fills *out, or
 * writes the exact message of the first failure, NUL-terminated, to msg
 * (msg_size at least NGX_HTTP_SESSION_BODY_MSG_MAX).  An unknown field
 * is named raw, as decoded: the caller escapes the message for JSON.
 * Returns NGX_HTTP_SESSION_CREATE_OK, _INVALID or _ERROR; on failure
 * *out is all zero and holds nothing to free (calling
 * ngx_http_session_create_free() on it is harmless).
 */
int ngx_http_session_create_parse(const unsigned char *body, size_t len,
    long long max_ttl, int allow_private, ngx_http_session_create_t *out,
    char *msg, size_t msg_size);

void ngx_http_session_create_free(ngx_http_session_create_t *c);

/*
 * A decimal integer of digits only (no sign, no spaces; leading zeros
 * allowed: "007" is 7) between min and max.  Returns 0 and sets *out, or
 * -1 for anything else, the empty string and overflow included.
 */
int ngx_http_session_parse_int(const unsigned char *s, size_t len,
    long long min, long long max, long long *out);


#endif /* _NGX_HTTP_SESSION_BODY_H_INCLUDED_ */
