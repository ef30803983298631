/*
 * The request pipeline of session_api locations, from the top: stage 1
 * (auth), stage 2 (limit), stage 3 (the route), then the endpoint
 * through dispatch, wrapped by the Idempotency-Key where a POST has one.
 * Each of those files hands the request back through a function it is
 * given, never by importing this one.
 *
 * Stages 1 and 2 run in the access phase, as its last handler, so that
 * the operator's allow/deny, auth_basic or auth_request have refused a
 * request before it is counted, and a refusal (401, 403, 429) is sent
 * from there without the phases that follow.  When the auth cache does
 * not know the key, or the access phase did not run this handler (a
 * subrequest, or "satisfy any" granted access first), the content handler
 * takes the request from where it stands.  So it does when stage 2 must
 * wait for a lease of the key's budget (session_limit_scope cluster).
 */

#include "ngx_http_session_handler.h"
#include "ngx_http_session_auth.h"
#include "ngx_http_session_dispatch.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_lease.h"
#include "ngx_http_session_limit.h"


static void ngx_http_session_resume(ngx_http_request_t *r, ngx_int_t rc);
static ngx_int_t ngx_http_session_wait_lease(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
static void ngx_http_session_leased(ngx_http_request_t *r, ngx_int_t rc);
static ngx_http_session_ctx_t *ngx_http_session_start(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_admit(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_int_t rc);
static ngx_int_t ngx_http_session_route(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
static ngx_int_t ngx_http_session_method_not_allowed(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);


static ngx_str_t  ngx_http_session_allow = ngx_string("Allow");


ngx_int_t
ngx_http_session_access_handler(ngx_http_request_t *r)
{
    ngx_int_t                rc;
    ngx_http_session_ctx_t  *ctx;

    /*
     * Only where this module's content handler serves (not in a location
     * nested in a session_api one that serves something else).  With
     * "satisfy any" an earlier handler may have refused: nginx answers
     * that unless a later one grants, and this one never grants.
     */

    if (r->content_handler != ngx_http_session_handler || r->access_code) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ctx && ctx->stage != NGX_HTTP_SESSION_STAGE_NEW) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_session_start(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_session_auth(r, ctx);

    if (rc == NGX_BUSY) {
        ctx->stage = NGX_HTTP_SESSION_STAGE_KEYED;
        return NGX_DECLINED;
    }

    rc = ngx_http_session_admit(r, ctx, rc);

    if (rc == NGX_OK) {
        ctx->stage = NGX_HTTP_SESSION_STAGE_ADMITTED;
        return NGX_DECLINED;
    }

    if (rc == NGX_AGAIN) {
        ctx->stage = NGX_HTTP_SESSION_STAGE_LEASE;
        return NGX_DECLINED;
    }

    ngx_http_finalize_request(r, ngx_http_session_error(r, ctx->err));

    return NGX_DONE;
}


ngx_int_t
ngx_http_session_handler(ngx_http_request_t *r)
{
    ngx_int_t                rc;
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ctx == NULL || ctx->stage == NGX_HTTP_SESSION_STAGE_NEW) {
        ctx = ngx_http_session_start(r);
        if (ctx == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rc = ngx_http_session_auth(r, ctx);

    } else if (ctx->stage == NGX_HTTP_SESSION_STAGE_ADMITTED) {
        return ngx_http_session_route(r, ctx);

    } else if (ctx->stage == NGX_HTTP_SESSION_STAGE_LEASE) {
        return ngx_http_session_wait_lease(r, ctx);

    } else {
        rc = NGX_BUSY;
    }

    if (rc == NGX_BUSY) {
        rc = ngx_http_session_auth_lookup(r, ctx, ngx_http_session_resume);

        if (rc == NGX_AGAIN) {
            /* the lookup's completion finalizes the request */
            r->main->count++;
            return NGX_DONE;
        }
    }

    rc = ngx_http_session_admit(r, ctx, rc);

    if (rc == NGX_AGAIN) {
        return ngx_http_session_wait_lease(r, ctx);
    }

    if (rc != NGX_OK) {
        return ngx_http_session_error(r, ctx->err);
    }

    return ngx_http_session_route(r, ctx);
}


/* the key's database lookup is over: stages 2 and 3 from there */

static void
ngx_http_session_resume(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    rc = ngx_http_session_admit(r, ctx, rc);

    if (rc == NGX_AGAIN) {
        if (ngx_http_session_lease_wait(r, ctx, ngx_http_session_leased)
            == NGX_AGAIN)
        {
            /* the lookup's hold on the request passes to the lease */
            return;
        }

        rc = ngx_http_session_error(r, ctx->err);

    } else if (rc != NGX_OK) {
        rc = ngx_http_session_error(r, ctx->err);

    } else {
        rc = ngx_http_session_route(r, ctx);
    }

    ngx_http_finalize_request(r, rc);
}


/* stage 2 waits for a lease of the key's budget (session_limit_scope) */

static ngx_int_t
ngx_http_session_wait_lease(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    if (ngx_http_session_lease_wait(r, ctx, ngx_http_session_leased)
        == NGX_AGAIN)
    {
        /* the lease's answer finalizes the request */
        r->main->count++;
        return NGX_DONE;
    }

    return ngx_http_session_error(r, ctx->err);
}


/* the lease is in: stage 2 again (the request is counted now), stage 3 */

static void
ngx_http_session_leased(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ngx_http_session_limit(r, ctx) != NGX_OK) {
        rc = ngx_http_session_error(r, ctx->err);

    } else {
        rc = ngx_http_session_route(r, ctx);
    }

    ngx_http_finalize_request(r, rc);
}


/* the request's context, with what stages 1 to 3 need to know of it */

static ngx_http_session_ctx_t *
ngx_http_session_start(ngx_http_request_t *r)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_session_get_ctx(r);
    if (ctx == NULL) {
        return NULL;
    }

    if (r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD)) {
        ctx->method = NGX_HTTP_SESSION_METHOD_GET;

    } else if (r->method == NGX_HTTP_POST) {
        ctx->method = NGX_HTTP_SESSION_METHOD_POST;

    } else {
        ctx->method = NGX_HTTP_SESSION_METHOD_OTHER;
    }

    (void) ngx_http_session_route_match(r->uri.data, r->uri.len, &ctx->route);

    return ctx;
}


/*
 * Stage 1's outcome, then stage 2: NGX_OK with the rate-limit headers
 * set, NGX_DECLINED with ctx->err to answer, or NGX_AGAIN: stage 2 waits
 * for a lease.
 */

static ngx_int_t
ngx_http_session_admit(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx,
    ngx_int_t rc)
{
    if (rc != NGX_OK) {
        return NGX_DECLINED;
    }

    /* from here on every answer has the headers */

    return ngx_http_session_limit(r, ctx);
}


/* stage 3, then the endpoint */

static ngx_int_t
ngx_http_session_route(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    ngx_int_t  rc;

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
        rc = ngx_http_session_idempotency(r, ctx, ngx_http_session_dispatch);

        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    return ngx_http_session_dispatch(r, ctx);
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
