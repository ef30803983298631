/*
 * Rate limits: fixed one-minute windows aligned to the UTC minute, one
 * counter per key and class in session_limit_zone; with
 * session_limit_scope cluster, the node's lease of the key's budget
 * instead (ngx_http_session_lease.c).
 */

#include "ngx_http_session_limit.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_json.h"
#include "ngx_http_session_lease.h"
#include "ngx_http_session_zone_rate.h"
#include "ngx_http_session_stats.h"
#include "ngx_http_session_window.h"


static size_t ngx_http_session_limit_reset(time_t now, u_char *p);


static const char  *ngx_http_session_class_names[] = {
    "create", "list", "other"
};


/*
 * Output header names are never hashed nor looked up by nginx: a header
 * is sent when its hash is not 0.  Static names, no copies.
 */
static ngx_str_t  ngx_http_session_rl_limit = ngx_string("X-RateLimit-Limit");
static ngx_str_t  ngx_http_session_rl_remaining =
    ngx_string("X-RateLimit-Remaining");
static ngx_str_t  ngx_http_session_rl_reset = ngx_string("X-RateLimit-Reset");
static ngx_str_t  ngx_http_session_retry_after = ngx_string("Retry-After");


void
ngx_http_session_limit_prepare(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    ngx_uint_t                     cls;
    ngx_http_session_loc_conf_t   *slcf;
    ngx_http_session_main_conf_t  *smcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);
    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    cls = ngx_http_session_route_class(&ctx->route, ctx->method);

    ctx->take.cls = cls;
    ctx->take.limit = slcf->limits[cls];
    ctx->take.now = ngx_time();
    ctx->take.rc = NGX_DECLINED;

    if (smcf->limit_scope == NGX_HTTP_SESSION_SCOPE_CLUSTER) {
        ctx->take.cluster = 1;

        /* a lease's answer (or its timeout) comes within session_db_timeout */
        ctx->take.stale = (uint32_t) smcf->db_timeout + 1000;
    }
}


ngx_int_t
ngx_http_session_limit(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    u_char                        *p;
    size_t                         len;
    ngx_time_t                    *tp;
    ngx_str_t                     *limit;
    ngx_http_session_take_t       *take;
    ngx_http_session_loc_conf_t   *slcf;
    ngx_http_session_main_conf_t  *smcf;

    take = &ctx->take;
    tp = ngx_timeofday();

    if (take->rc == NGX_DECLINED) {
        /* not counted with the auth cache hit: after a database lookup */

        smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

        take->now = tp->sec;
        (void) ngx_http_session_rate_take(smcf->shm_zone,
                                          ctx->principal.hash, take);
    }

    if (take->rc == NGX_AGAIN) {
        /* session_limit_scope cluster: the node holds no budget */
        return NGX_AGAIN;
    }

    if (take->lease) {
        /* the node's block runs low: the next one, ahead of need */
        ngx_http_session_lease_ahead(ctx->principal.hash, take);
        take->lease = 0;
    }

    if (take->rc == NGX_ERROR) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    if (take->rc == NGX_ABORT) {
        /* no lease: the database is unavailable, nothing was counted */
        ctx->err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        return NGX_DECLINED;
    }

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    /* the limit's text was written with the configuration */
    limit = &slcf->limit_text[take->cls];

    if (ngx_http_session_header_add(r, &ngx_http_session_rl_limit,
                                      limit->data, limit->len)
        == NULL)
    {
        goto failed;
    }

    p = ctx->rl_buf;
    len = ngx_http_session_decimal(p, take->remaining) - p;

    if (ngx_http_session_header_add(r, &ngx_http_session_rl_remaining,
                                      p, len)
        == NULL)
    {
        goto failed;
    }

    p += len;
    len = ngx_http_session_limit_reset(take->now, p);

    if (ngx_http_session_header_add(r, &ngx_http_session_rl_reset, p, len)
        == NULL)
    {
        goto failed;
    }

    if (take->rc == NGX_OK) {
        return NGX_OK;
    }

    /* the instant of the count: take->now is this second */

    p += len;
    len = ngx_http_session_decimal(p,
                   ngx_http_session_window_retry_after(take->now, tp->msec))
          - p;

    if (ngx_http_session_header_add(r, &ngx_http_session_retry_after,
                                      p, len)
        == NULL)
    {
        goto failed;
    }

    ctx->err = NGX_HTTP_SESSION_ERR_RATE_LIMITED;

    ngx_http_session_stat(rate_limited, 1);

    return NGX_DECLINED;

failed:

    ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;

    return NGX_DECLINED;
}


/*
 * X-RateLimit-Reset of the window of now, copied to p, which has room for
 * NGX_HTTP_SESSION_DECIMAL_MAX bytes.  The text changes once a minute: a
 * worker keeps the last one (a copy goes out with each request, which may
 * be answered in a later minute).  The whole buffer is copied, a fixed
 * size, whatever the text's length.
 */

static size_t
ngx_http_session_limit_reset(time_t now, u_char *p)
{
    static size_t   len;
    static time_t   start = 1, reset;
    static u_char   text[NGX_HTTP_SESSION_DECIMAL_MAX];

    if (now < start || now >= reset) {
        start = ngx_http_session_window_start(now);
        reset = start + NGX_HTTP_SESSION_WINDOW_SECONDS;
        len = ngx_http_session_decimal(text, (uint64_t) reset) - text;
    }

    ngx_memcpy(p, text, NGX_HTTP_SESSION_DECIMAL_MAX);

    return len;
}


const char *
ngx_http_session_limit_class_name(ngx_uint_t cls)
{
    return ngx_http_session_class_names[cls];
}


/* the text of each class's limit, for X-RateLimit-Limit */

ngx_int_t
ngx_http_session_limit_texts(ngx_conf_t *cf,
    ngx_http_session_loc_conf_t *slcf)
{
    u_char      *p;
    ngx_uint_t   c;

    for (c = 0; c < NGX_HTTP_SESSION_NCLASSES; c++) {
        p = ngx_pnalloc(cf->pool, NGX_HTTP_SESSION_DECIMAL_MAX);
        if (p == NULL) {
            return NGX_ERROR;
        }

        slcf->limit_text[c].data = p;
        slcf->limit_text[c].len = ngx_http_session_decimal(p, slcf->limits[c])
                                  - p;
    }

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


/*
 * session_auth_fail_limit N | off: failed key lookups per client address
 * per minute; "off" (stored as 0) counts nothing.
 */

char *
ngx_http_session_auth_fail_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char  *p = conf;

    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t  *fp;

    fp = (ngx_uint_t *) (p + cmd->offset);

    if (*fp != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0) {
        *fp = 0;
        return NGX_CONF_OK;
    }

    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n < 1 || n > NGX_HTTP_SESSION_LIMIT_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\", it must be "
                           "\"off\" or an integer between 1 and %d",
                           &value[1], &cmd->name,
                           NGX_HTTP_SESSION_LIMIT_MAX);
        return NGX_CONF_ERROR;
    }

    *fp = (ngx_uint_t) n;

    return NGX_CONF_OK;
}


/*
 * session_limit_scope node | cluster: counters in the node's zone, or
 * the node's leases of the budgets in the database (decisions.md (qa))
 */

char *
ngx_http_session_limit_scope(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t   *value;
    ngx_uint_t  *sp;

    sp = (ngx_uint_t *) (p + cmd->offset);

    if (*sp != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == sizeof("node") - 1
        && ngx_strncmp(value[1].data, "node", value[1].len) == 0)
    {
        *sp = NGX_HTTP_SESSION_SCOPE_NODE;
        return NGX_CONF_OK;
    }

    if (value[1].len == sizeof("cluster") - 1
        && ngx_strncmp(value[1].data, "cluster", value[1].len) == 0)
    {
        *sp = NGX_HTTP_SESSION_SCOPE_CLUSTER;
        return NGX_CONF_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\", it must be "
                       "\"node\" or \"cluster\"", &value[1], &cmd->name);

    return NGX_CONF_ERROR;
}
