/*
 * Hex escapes: one loop for the fingerprint's path and the error log,
 * which differ in the bytes they keep and in how an escape begins.
 */

#include "ngx_http_session_escape.h"


size_t
ngx_http_session_escape(unsigned char *dst, const unsigned char *src,
    size_t len, ngx_http_session_escape_e how)
{
    int                         keep;
    size_t                      i, n;
    unsigned char               c;
    static const unsigned char  hex[] = "0123456789ABCDEF";

    n = 0;

    for (i = 0; i < len; i++) {
        c = src[i];

        if (how == NGX_HTTP_SESSION_ESCAPE_LOG) {
            keep = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';

        } else {
            keep = c >= 0x21 && c <= 0x7e && c != '%';
        }

        if (keep) {
            if (dst) {
                dst[n] = c;
            }

            n++;
            continue;
        }

        if (how == NGX_HTTP_SESSION_ESCAPE_LOG) {
            if (dst) {
                dst[n] = '\\';
                dst[n + 1] = 'x';
            }

            n += 2;

        } else {
            if (dst) {
                dst[n] = '%';
            }

            n++;
        }

        if (dst) {
            dst[n] = hex[c >> 4];
            dst[n + 1] = hex[c & 0x0f];
        }

        n += 2;
    }

    return n;
}
