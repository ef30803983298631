/*
 * libFuzzer: upload Content-Type values and image signatures
 * (ngx_http_session_image_media_type, _type, _signature_ok).  The first
 * byte picks the type whose signature is checked, the rest is the body,
 * which is also read as a Content-Type value.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_session_imagecheck.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int             type, t;
    size_t          n, len;
    unsigned char  *body;
    unsigned char   media[NGX_HTTP_SESSION_IMAGE_TYPE_MAX];

    if (size == 0) {
        return 0;
    }

    type = 1 + data[0] % NGX_HTTP_SESSION_IMAGE_HEIC;
    n = size - 1;

    body = malloc(n ? n : 1);
    if (body == NULL) {
        return 0;
    }

    memcpy(body, data + 1, n);

    (void) ngx_http_session_image_signature_ok(type, body, n);

    len = ngx_http_session_image_media_type(body, n, media);

    if (len > NGX_HTTP_SESSION_IMAGE_TYPE_MAX) {
        abort();
    }

    t = ngx_http_session_image_type(media, len);

    if (t < NGX_HTTP_SESSION_IMAGE_NONE || t > NGX_HTTP_SESSION_IMAGE_HEIC
        || (t != NGX_HTTP_SESSION_IMAGE_NONE
            && (strlen(ngx_http_session_image_type_name(t)) != len
                || memcmp(ngx_http_session_image_type_name(t), media, len)
                   != 0)))
    {
        abort();
    }

    free(body);

    return 0;
}
