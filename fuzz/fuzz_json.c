/*
 * libFuzzer: JSON string escaping of client bytes
 * (ngx_http_session_json_escape), as error messages quote them: the
 * result fits the bound, counting and writing agree, and jansson reads
 * it back as a valid string.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ngx_http_session_json.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t          n, w;
    json_t         *j;
    unsigned char  *src, *dst;
    json_error_t    err;

    if (size > 4096) {
        return 0;
    }

    src = malloc(size ? size : 1);
    dst = malloc(NGX_HTTP_SESSION_JSON_ESCAPED_MAX(size) + 2);

    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return 0;
    }

    memcpy(src, data, size);

    n = ngx_http_session_json_escape(NULL, src, size);

    dst[0] = '"';
    w = ngx_http_session_json_escape(dst + 1, src, size);
    dst[w + 1] = '"';

    if (n != w || w > NGX_HTTP_SESSION_JSON_ESCAPED_MAX(size)) {
        abort();
    }

    j = json_loadb((const char *) dst, w + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL,
                   &err);

    if (j == NULL || !json_is_string(j)) {
        abort();
    }

    json_decref(j);

    /* valid UTF-8 comes back as it was */

    j = json_stringn((const char *) src, size);

    if (j) {
        json_decref(j);
        j = json_loadb((const char *) dst, w + 2,
                       JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);

        if (j == NULL
            || json_string_length(j) != size
            || memcmp(json_string_value(j), src, size) != 0)
        {
            abort();
        }

        json_decref(j);
    }

    free(src);
    free(dst);

    return 0;
}
