/*
 * libFuzzer: webhook_url (ngx_http_session_url_parse and _check).  What
 * the parser returns points into the URL.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ngx_http_session_url.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void
ngx_http_session_fuzz_within(const unsigned char *base, size_t size,
    const unsigned char *p, size_t len)
{
    if (len && (p < base || p + len > base + size)) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                      rc, strict, loose;
    unsigned char           *url;
    ngx_http_session_url_t   u;

    url = malloc(size ? size : 1);
    if (url == NULL) {
        return 0;
    }

    memcpy(url, data, size);

    rc = ngx_http_session_url_parse(url, size, &u);

    if (rc == NGX_HTTP_SESSION_URL_OK) {
        if (size > NGX_HTTP_SESSION_URL_MAX_LEN || u.port < 1
            || u.port > 65535 || u.host_len == 0)
        {
            abort();
        }

        ngx_http_session_fuzz_within(url, size, u.host, u.host_len);
        ngx_http_session_fuzz_within(url, size, u.authority,
                                     u.authority_len);
        ngx_http_session_fuzz_within(url, size, u.path, u.path_len);

        if (u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV4) {
            (void) ngx_http_session_addr_private(AF_INET, u.addr);

        } else if (u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV6) {
            (void) ngx_http_session_addr_private(AF_INET6, u.addr);

        } else {
            (void) ngx_http_session_host_private(u.host, u.host_len);
        }

    } else if (rc != NGX_HTTP_SESSION_URL_INVALID) {
        abort();
    }

    strict = ngx_http_session_url_check(url, size, 0);
    loose = ngx_http_session_url_check(url, size, 1);

    /* allowing private addresses only turns PRIVATE into OK */

    if ((rc == NGX_HTTP_SESSION_URL_OK) != (loose == NGX_HTTP_SESSION_URL_OK)
        || (strict != loose && !(strict == NGX_HTTP_SESSION_URL_PRIVATE
                                 && loose == NGX_HTTP_SESSION_URL_OK)))
    {
        abort();
    }

    free(url);

    return 0;
}
