/*
 * Rate limits: fixed one-minute windows aligned to the UTC minute, one
 * counter per key and class in session_limit_zone.
 */

#include "ngx_http_session_limit.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_shm.h"
#include "ngx_http_session_window.h"


static ngx_int_t ngx_http_session_limit_header(ngx_http_request_t *r,
    const char *name, size_t len, ngx_uint_t value);


static const char  *ngx_http_session_class_names[] = {
    "create", "list", "other"
};


ngx_int_t
ngx_http_session_limit(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    time_t                         reset;
    ngx_int_t                      rc;
    ngx_uint_t                     cls, limit, remaining;
    ngx_time_t                    *tp;
    ngx_http_session_loc_conf_t   *slcf;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);
    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    cls = ngx_http_session_route_class(&ctx->route, ctx->method);
    limit = slcf->limits[cls];

    tp = ngx_timeofday();

    rc = ngx_http_session_rate_take(smcf->shm_zone, ctx->principal.hash, cls,
                                    limit, tp->sec, &remaining);

    if (rc == NGX_ERROR) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    reset = ngx_http_session_window_reset(tp->sec);

    if (ngx_http_session_limit_header(r, "X-RateLimit-Limit",
                                      sizeof("X-RateLimit-Limit") - 1, limit)
        != NGX_OK
        || ngx_http_session_limit_header(r, "X-RateLimit-Remaining",
                                         sizeof("X-RateLimit-Remaining") - 1,
                                         remaining)
           != NGX_OK
        || ngx_http_session_limit_header(r, "X-RateLimit-Reset",
                                         sizeof("X-RateLimit-Reset") - 1,
                                         (ngx_uint_t) reset)
           != NGX_OK)
    {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    if (rc == NGX_OK) {
        return NGX_OK;
    }

    if (ngx_http_session_limit_header(r, "Retry-After",
                                      sizeof("Retry-After") - 1,
                        ngx_http_session_window_retry_after(tp->sec, tp->msec))
        != NGX_OK)
    {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    ctx->err = NGX_HTTP_SESSION_ERR_RATE_LIMITED;

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_session_limit_header(ngx_http_request_t *r, const char *name,
    size_t len, ngx_uint_t value)
{
    u_char           *p;
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = len;
    h->value.data = p;
    h->value.len = ngx_sprintf(p, "%ui", value) - p;

    return NGX_OK;
}


/* session_limits create=N list=N other=N; any subset, each at most once */

char *
ngx_http_session_limits(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_loc_conf_t  *slcf = conf;

    size_t       len;
    u_char      *eq;
    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t   i, c, seen;

    value = cf->args->elts;

    for (c = 0; c < NGX_HTTP_SESSION_NCLASSES; c++) {
        if (slcf->limits[c] != NGX_CONF_UNSET_UINT) {
            return "is duplicate";
        }
    }

    seen = 0;

    for (i = 1; i < cf->args->nelts; i++) {

        eq = (u_char *) ngx_strchr(value[i].data, '=');

        if (eq == NULL) {
            goto invalid;
        }

        len = eq - value[i].data;

        for (c = 0; c < NGX_HTTP_SESSION_NCLASSES; c++) {
            if (ngx_strlen(ngx_http_session_class_names[c]) == len
                && ngx_strncmp(value[i].data, ngx_http_session_class_names[c],
                               len)
                   == 0)
            {
                break;
            }
        }

        if (c == NGX_HTTP_SESSION_NCLASSES || (seen & (1 << c))) {
            goto invalid;
        }

        seen |= 1 << c;

        n = ngx_atoi(eq + 1, value[i].data + value[i].len - eq - 1);

        if (n == NGX_ERROR || n < 1 || n > NGX_HTTP_SESSION_LIMIT_MAX) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid limit \"%V\" in \"%V\", it must be "
                               "an integer between 1 and %d",
                               &value[i], &cmd->name,
                               NGX_HTTP_SESSION_LIMIT_MAX);
            return NGX_CONF_ERROR;
        }

        slcf->limits[c] = (ngx_uint_t) n;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\", expected "
                       "create=N, list=N or other=N, each at most once",
                       &value[i], &cmd->name);

    return NGX_CONF_ERROR;
}
