/*
 * Idempotency-Key syntax (the fingerprint's path is written by
 * ngx_http_session_escape.c).
 */

#include "ngx_http_session_idemkey.h"


int
ngx_http_session_idem_key_valid(const unsigned char *key, size_t len)
{
    size_t  i;

    if (len == 0 || len > NGX_HTTP_SESSION_IDEM_KEY_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (key[i] < 0x21 || key[i] > 0x7e) {
            return 0;
        }
    }

    return 1;
}
