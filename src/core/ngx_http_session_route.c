/*
 * The API's route table.
 */

#include <string.h>

#include "ngx_http_session_route.h"


#define NGX_HTTP_SESSION_ROUTE_BASE  "/api/v1/sessions"


typedef struct {
    const char  *name;
    int          id;
    unsigned     methods;
} ngx_http_session_subroute_t;


/* /api/v1/sessions/{sid}/<name> */
static const ngx_http_session_subroute_t  ngx_http_session_session_routes[] = {
    { "complete", NGX_HTTP_SESSION_ROUTE_COMPLETE,
      NGX_HTTP_SESSION_METHOD_POST },
    { "images", NGX_HTTP_SESSION_ROUTE_IMAGES,
      NGX_HTTP_SESSION_METHOD_GET | NGX_HTTP_SESSION_METHOD_POST },
    { "poll", NGX_HTTP_SESSION_ROUTE_POLL, NGX_HTTP_SESSION_METHOD_GET },
    { NULL, 0, 0 }
};


/* /api/v1/sessions/{sid}/images/{iid}/<name> */
static const ngx_http_session_subroute_t  ngx_http_session_image_routes[] = {
    { "content", NGX_HTTP_SESSION_ROUTE_IMAGE_CONTENT,
      NGX_HTTP_SESSION_METHOD_GET },
    { "ack", NGX_HTTP_SESSION_ROUTE_IMAGE_ACK, NGX_HTTP_SESSION_METHOD_POST },
    { NULL, 0, 0 }
};


/*
 * A level of the path: an id, which alone names a resource (GET), and
 * after it a name of the level's table; the name "down" goes on to the
 * next level.
 */
typedef struct {
    int                                 id;
    const ngx_http_session_subroute_t  *names;
    int                                 down;
} ngx_http_session_level_t;


static const ngx_http_session_level_t  ngx_http_session_levels[] = {
    { NGX_HTTP_SESSION_ROUTE_SESSION, ngx_http_session_session_routes,
      NGX_HTTP_SESSION_ROUTE_IMAGES },
    { NGX_HTTP_SESSION_ROUTE_IMAGE, ngx_http_session_image_routes,
      NGX_HTTP_SESSION_ROUTE_NONE },
    { 0, NULL, 0 }
};


static size_t ngx_http_session_segment(const unsigned char *p,
    const unsigned char *end);
static const ngx_http_session_subroute_t *ngx_http_session_subroute(
    const ngx_http_session_subroute_t *table, const unsigned char *name,
    size_t len);


int
ngx_http_session_route_match(const unsigned char *path, size_t len,
    ngx_http_session_route_t *rt)
{
    size_t                             *id_len, n, base;
    const unsigned char                *p, *end, **id;
    const ngx_http_session_level_t     *level;
    const ngx_http_session_subroute_t  *sub;

    memset(rt, 0, sizeof(ngx_http_session_route_t));

    base = sizeof(NGX_HTTP_SESSION_ROUTE_BASE) - 1;

    if (len < base || memcmp(path, NGX_HTTP_SESSION_ROUTE_BASE, base) != 0) {
        return NGX_HTTP_SESSION_ROUTE_NONE;
    }

    p = path + base;
    end = path + len;

    if (p == end) {
        rt->id = NGX_HTTP_SESSION_ROUTE_SESSIONS;
        rt->methods = NGX_HTTP_SESSION_METHOD_GET
                      | NGX_HTTP_SESSION_METHOD_POST;
        return rt->id;
    }

    id = &rt->sid;
    id_len = &rt->sid_len;

    for (level = ngx_http_session_levels; level->names; level++) {

        /* "/{sid}", "/images/{iid}" */

        if (*p++ != '/' || (n = ngx_http_session_segment(p, end)) == 0) {
            return NGX_HTTP_SESSION_ROUTE_NONE;
        }

        *id = p;
        *id_len = n;
        p += n;

        if (p == end) {
            rt->id = level->id;
            rt->methods = NGX_HTTP_SESSION_METHOD_GET;
            return rt->id;
        }

        /* "/{sid}/complete", "/images/{iid}/content", ... */

        if (*p++ != '/' || (n = ngx_http_session_segment(p, end)) == 0) {
            return NGX_HTTP_SESSION_ROUTE_NONE;
        }

        sub = ngx_http_session_subroute(level->names, p, n);
        if (sub == NULL) {
            return NGX_HTTP_SESSION_ROUTE_NONE;
        }

        p += n;

        if (p == end) {
            rt->id = sub->id;
            rt->methods = sub->methods;
            return rt->id;
        }

        if (sub->id != level->down) {
            return NGX_HTTP_SESSION_ROUTE_NONE;
        }

        id = &rt->iid;
        id_len = &rt->iid_len;
    }

    return NGX_HTTP_SESSION_ROUTE_NONE;
}


const char *
ngx_http_session_route_allow(unsigned methods)
{
    switch (methods & (NGX_HTTP_SESSION_METHOD_GET
                       | NGX_HTTP_SESSION_METHOD_POST))
    {
    case NGX_HTTP_SESSION_METHOD_GET:
        return "GET, HEAD";

    case NGX_HTTP_SESSION_METHOD_POST:
        return "POST";

    case NGX_HTTP_SESSION_METHOD_GET | NGX_HTTP_SESSION_METHOD_POST:
        return "GET, HEAD, POST";

    default:
        return "";
    }
}


int
ngx_http_session_route_class(const ngx_http_session_route_t *rt,
    unsigned method)
{
    if (rt->id == NGX_HTTP_SESSION_ROUTE_SESSIONS) {

        if (method == NGX_HTTP_SESSION_METHOD_POST) {
            return NGX_HTTP_SESSION_CLASS_CREATE;
        }

        if (method == NGX_HTTP_SESSION_METHOD_GET) {
            return NGX_HTTP_SESSION_CLASS_LIST;
        }
    }

    return NGX_HTTP_SESSION_CLASS_OTHER;
}


static size_t
ngx_http_session_segment(const unsigned char *p, const unsigned char *end)
{
    const unsigned char  *s;

    for (s = p; s < end && *s != '/'; s++) {
        /* void */
    }

    return (size_t) (s - p);
}


static const ngx_http_session_subroute_t *
ngx_http_session_subroute(const ngx_http_session_subroute_t *table,
    const unsigned char *name, size_t len)
{
    for ( /* void */ ; table->name; table++) {
        if (strlen(table->name) == len && memcmp(table->name, name, len) == 0)
        {
            return table;
        }
    }

    return NULL;
}
