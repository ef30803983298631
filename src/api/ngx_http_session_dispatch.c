/*
 * Dispatch: the last stage of the pipeline, the endpoint of a routed,
 * admitted request (stages 4 to 6 are the endpoint's).  It imports the
 * endpoints and nothing above them.
 */

#include "ngx_http_session_dispatch.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_images.h"
#include "ngx_http_session_poll.h"
#include "ngx_http_session_sessions.h"


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

    case NGX_HTTP_SESSION_ROUTE_POLL:
        return ngx_http_session_poll(r, ctx);

    default:
        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_NOT_IMPLEMENTED);
    }
}
