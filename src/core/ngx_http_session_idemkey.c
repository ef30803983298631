/*
 * Idempotency-Key syntax and the request fingerprint's path.
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


size_t
ngx_http_session_idem_escape(unsigned char *dst, const unsigned char *src,
    size_t len)
{
    size_t                      i, n;
    static const unsigned char  hex[] = "0123456789ABCDEF";

    n = 0;

    for (i = 0; i < len; i++) {
        if (src[i] >= 0x21 && src[i] <= 0x7e && src[i] != '%') {
            if (dst) {
                dst[n] = src[i];
            }

            n++;
            continue;
        }

        if (dst) {
            dst[n] = '%';
            dst[n + 1] = hex[src[i] >> 4];
            dst[n + 2] = hex[src[i] & 0x0f];
        }

        n += 3;
    }

    return n;
}
