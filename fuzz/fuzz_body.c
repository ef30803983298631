/*
 * libFuzzer: the body of POST /api/v1/sessions
 * (ngx_http_session_create_parse), jansson included.  The first byte
 * picks session_webhook_allow_private.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_session_body.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                         rc, allow;
    size_t                      n;
    unsigned char              *body;
    long long                   v;
    ngx_http_session_create_t   c;
    char                        msg[NGX_HTTP_SESSION_BODY_MSG_MAX];

    if (size == 0) {
        return 0;
    }

    allow = data[0] & 1;
    n = size - 1;

    body = malloc(n ? n : 1);
    if (body == NULL) {
        return 0;
    }

    memcpy(body, data + 1, n);
    memset(msg, 'x', sizeof(msg));

    rc = ngx_http_session_create_parse(body, n, 86400, allow, &c, msg,
                                       sizeof(msg));

    switch (rc) {

    case NGX_HTTP_SESSION_CREATE_OK:
        if (c.delivery_mode != NGX_HTTP_SESSION_MODE_WEBHOOK
            && c.delivery_mode != NGX_HTTP_SESSION_MODE_LONG_POLL)
        {
            abort();
        }

        if ((c.delivery_mode == NGX_HTTP_SESSION_MODE_WEBHOOK)
            != (c.webhook_url != NULL))
        {
            abort();
        }

        if (c.webhook_url && strlen(c.webhook_url) != c.webhook_url_len) {
            abort();
        }

        if (c.has_expires_in && (c.expires_in < 1 || c.expires_in > 86400)) {
            abort();
        }

        break;

    case NGX_HTTP_SESSION_CREATE_INVALID:
    case NGX_HTTP_SESSION_CREATE_ERROR:
        /* a message, NUL-terminated within the buffer */
        if (memchr(msg, '\0', sizeof(msg)) == NULL || msg[0] == '\0') {
            abort();
        }

        break;

    default:
        abort();
    }

    ngx_http_session_create_free(&c);

    /* the integer query parameters, on the same bytes */

    if (ngx_http_session_parse_int(body, n, 1, 100, &v) == 0
        && (v < 1 || v > 100))
    {
        abort();
    }

    free(body);

    return 0;
}
