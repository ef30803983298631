/*
 * libFuzzer: list cursors and UUIDs (ngx_http_session_cursor_decode_*,
 * ngx_http_session_uuid_parse).  A cursor has one spelling: whatever the
 * decoder takes encodes back to the same text, and holds a position the
 * server can have issued.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_session_cursor.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t          n, i;
    long long       pos;
    unsigned char  *src;
    unsigned char   uuid[NGX_HTTP_SESSION_UUID_BIN_LEN];
    unsigned char   text[NGX_HTTP_SESSION_UUID_LEN];
    unsigned char   out[NGX_HTTP_SESSION_CURSOR_MAX];

    src = malloc(size ? size : 1);
    if (src == NULL) {
        return 0;
    }

    memcpy(src, data, size);

    if (ngx_http_session_cursor_decode_session(src, size, &pos, uuid) == 0) {
        if (pos < NGX_HTTP_SESSION_CURSOR_US_MIN
            || pos > NGX_HTTP_SESSION_CURSOR_US_MAX)
        {
            abort();
        }

        n = ngx_http_session_cursor_encode_session(out, pos, uuid);

        if (n != size || memcmp(out, src, n) != 0) {
            abort();
        }
    }

    if (ngx_http_session_cursor_decode_image(src, size, &pos) == 0) {
        if (pos < NGX_HTTP_SESSION_CURSOR_SEQ_MIN
            || pos > NGX_HTTP_SESSION_CURSOR_SEQ_MAX)
        {
            abort();
        }

        n = ngx_http_session_cursor_encode_image(out, pos);

        if (n != size || memcmp(out, src, n) != 0) {
            abort();
        }
    }

    if (ngx_http_session_uuid_parse(src, size, uuid) == 0) {
        ngx_http_session_uuid_format(uuid, text);

        for (i = 0; i < NGX_HTTP_SESSION_UUID_LEN; i++) {
            if (text[i] != (src[i] | ((src[i] >= 'A' && src[i] <= 'F')
                                      ? 0x20 : 0)))
            {
                abort();
            }
        }
    }

    free(src);

    return 0;
}
