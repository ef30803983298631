/*
 * The content handler of session_api locations.
 */

#include "ngx_http_session_handler.h"
#include "ngx_http_session_auth.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_images.h"
#include "ngx_http_session_limit.h"
#include "ngx_http_session_sessions.h"


static ngx_int_t ngx_http_session_pipeline(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_int_t rc);
static ngx_int_t ngx_http_session_method_not_allowed(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);


static ngx_str_t  ngx_http_session_allow = ngx_string("Allow");


ngx_int_t
ngx_http_session_handler(ngx_http_request_t *r)
{
    ngx_int_t                rc;
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_session_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD)) {
        ctx->method = NGX_HTTP_SESSION_METHOD_GET;

    } else if (r->method == NGX_HTTP_POST) {
        ctx->method = NGX_HTTP_SESSION_METHOD_POST;

    } else {
        ctx->method = NGX_HTTP_SESSION_METHOD_OTHER;
    }

    (void) ngx_http_session_route_match(r->uri.data, r->uri.len, &ctx->route);

    rc = ngx_http_session_auth(r, ctx);

    if (rc == NGX_AGAIN) {
        /* the lookup's completion finalizes the request */
        r->main->count++;
        return NGX_DONE;
    }

    return ngx_http_session_pipeline(r, ctx, rc);
}


void
ngx_http_session_resume(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    ngx_http_finalize_request(r, ngx_http_session_pipeline(r, ctx, rc));
}


static ngx_int_t
ngx_http_session_pipeline(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx,
    ngx_int_t rc)
{
    /* stage 1: authentication */

    if (rc != NGX_OK) {
        return ngx_http_session_error(r, ctx->err);
    }

    /* stage 2: rate limit; from here on every answer has the headers */

    if (ngx_http_session_limit(r, ctx) != NGX_OK) {
        return ngx_http_session_error(r, ctx->err);
    }

    /* stage 3: route */

    if (ctx->route.id == NGX_HTTP_SESSION_ROUTE_NONE) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_ROUTE_NOT_FOUND);
    }

    if (!(ctx->route.methods & ctx->method)) {
        return ngx_http_session_method_not_allowed(r, ctx);
    }

    /*
     * A POST with an Idempotency-Key: the key is checked, the body read
     * and the key claimed first; the claim's answer dispatches (or
     * replays what the first request answered).
     */

    if (ctx->method == NGX_HTTP_SESSION_METHOD_POST) {
        rc = ngx_http_session_idempotency(r, ctx);

        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    return ngx_http_session_dispatch(r, ctx);
}


/* stages 4 to 6: the endpoint; NGX_DONE when it answers later */

ngx_int_t
ngx_http_session_dispatch(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    switch (ctx->route.id) {

    case NGX_HTTP_SESSION_ROUTE_SESSIONS:
        return (ctx->method == NGX_HTTP_SESSION_METHOD_POST)
               ? ngx_http_session_create(r, ctx)
               : ngx_http_session_list(r, ctx);

    case NGX_HTTP_SESSION_ROUTE_SESSION:
        return ngx_http_session_get(r, ctx);

    case NGX_HTTP_SESSION_ROUTE_COMPLETE:
        return ngx_http_session_complete(r, ctx);

    case NGX_HTTP_SESSION_ROUTE_IMAGES:
        return (ctx->method == NGX_HTTP_SESSION_METHOD_POST)
               ? ngx_http_session_image_upload(r, ctx)
               : ngx_http_session_image_list(r, ctx);

    case NGX_HTTP_SESSION_ROUTE_IMAGE:
    case NGX_HTTP_SESSION_ROUTE_IMAGE_ACK:
        return ngx_http_session_image_get(r, ctx);

    case NGX_HTTP_SESSION_ROUTE_IMAGE_CONTENT:
        return ngx_http_session_image_content(r, ctx);

    default:
        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_NOT_IMPLEMENTED);
    }
}


static ngx_int_t
ngx_http_session_method_not_allowed(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    u_char  *allow;

    allow = (u_char *) ngx_http_session_route_allow(ctx->route.methods);

    if (ngx_http_session_header_add(r, &ngx_http_session_allow, allow,
                                    ngx_strlen(allow))
        == NULL)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_METHOD_NOT_ALLOWED);
}
