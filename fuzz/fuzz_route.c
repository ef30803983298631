/*
 * libFuzzer: the route table (ngx_http_session_route_match) on any path,
 * and the integer query parameters (ngx_http_session_parse_int).
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_session_body.h"
#include "ngx_http_session_route.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                        id, cls;
    long long                  v;
    unsigned                   m;
    unsigned char             *path;
    ngx_http_session_route_t   rt;

    path = malloc(size ? size : 1);
    if (path == NULL) {
        return 0;
    }

    memcpy(path, data, size);
    memset(&rt, 0, sizeof(rt));

    id = ngx_http_session_route_match(path, size, &rt);

    if (id < NGX_HTTP_SESSION_ROUTE_NONE || id > NGX_HTTP_SESSION_ROUTE_POLL
        || (rt.sid_len && (rt.sid < path || rt.sid + rt.sid_len
                                             > path + size))
        || (rt.iid_len && (rt.iid < path || rt.iid + rt.iid_len
                                             > path + size)))
    {
        abort();
    }

    for (m = NGX_HTTP_SESSION_METHOD_GET;
         m <= NGX_HTTP_SESSION_METHOD_OTHER;
         m <<= 1)
    {
        cls = ngx_http_session_route_class(&rt, m);

        if (cls < 0 || cls >= NGX_HTTP_SESSION_NCLASSES) {
            abort();
        }
    }

    if (id != NGX_HTTP_SESSION_ROUTE_NONE
        && ngx_http_session_route_allow(rt.methods) == NULL)
    {
        abort();
    }

    if (ngx_http_session_parse_int(path, size, 0, 3600, &v) == 0
        && (v < 0 || v > 3600))
    {
        abort();
    }

    free(path);

    return 0;
}
