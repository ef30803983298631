/*
 * libFuzzer: Idempotency-Key (ngx_http_session_idem_key_valid) and the
 * escaping of the request fingerprint's path (ngx_http_session_escape(),
 * NGX_HTTP_SESSION_ESCAPE_PATH): counting and writing agree, the text is
 * printable, and it decodes back.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_session_escape.h"
#include "ngx_http_session_idemkey.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static int
ngx_http_session_fuzz_xdigit(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }

    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }

    return -1;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int             valid, hi, lo;
    size_t          n, w, i, j;
    unsigned char  *src, *dst;

    src = malloc(size ? size : 1);
    dst = malloc(3 * size + 1);

    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return 0;
    }

    memcpy(src, data, size);

    valid = ngx_http_session_idem_key_valid(src, size);

    if (valid) {
        if (size < 1 || size > NGX_HTTP_SESSION_IDEM_KEY_MAX) {
            abort();
        }

        for (i = 0; i < size; i++) {
            if (src[i] < 0x21 || src[i] > 0x7e) {
                abort();
            }
        }
    }

    n = ngx_http_session_escape(NULL, src, size,
                                NGX_HTTP_SESSION_ESCAPE_PATH);
    w = ngx_http_session_escape(dst, src, size,
                                NGX_HTTP_SESSION_ESCAPE_PATH);

    if (n != w || w > 3 * size) {
        abort();
    }

    for (i = 0, j = 0; i < w; j++) {
        if (dst[i] < 0x21 || dst[i] > 0x7e || j >= size) {
            abort();
        }

        if (dst[i] == '%') {
            if (i + 2 >= w) {
                abort();
            }

            hi = ngx_http_session_fuzz_xdigit(dst[i + 1]);
            lo = ngx_http_session_fuzz_xdigit(dst[i + 2]);

            if (hi < 0 || lo < 0 || (unsigned) (hi << 4 | lo) != src[j]) {
                abort();
            }

            i += 3;
            continue;
        }

        if (dst[i] != src[j]) {
            abort();
        }

        i++;
    }

    if (j != size) {
        abort();
    }

    free(src);
    free(dst);

    return 0;
}
