/*
 * Stage 2 of the pipeline: per-key per-minute rate limits.
 */

#ifndef _NGX_HTTP_SESSION_LIMIT_H_INCLUDED_
#define _NGX_HTTP_SESSION_LIMIT_H_INCLUDED_


#include "ngx_http_session_common.h"


#define NGX_HTTP_SESSION_LIMIT_MAX  1000000000

/* session_auth_fail_limit's default */
#define NGX_HTTP_SESSION_AUTH_FAIL_LIMIT  100


/*
 * Fills ctx->take (class, limit, now) once the route is known, so that
 * an auth cache hit can count the request under the same mutex turn.
 */
void ngx_http_session_limit_prepare(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/*
 * Counts the request (unless stage 1 already did) and adds the
 * X-RateLimit-* headers.  NGX_OK: admitted; NGX_DECLINED: refused,
 * ctx->err says how to answer; NGX_AGAIN (session_limit_scope cluster):
 * the node holds none of the key's budget, the request waits for a lease
 * (ngx_http_session_lease_wait()), then comes back here.
 */
ngx_int_t ngx_http_session_limit(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/* slcf->limit_text from slcf->limits, when the configuration is merged */
ngx_int_t ngx_http_session_limit_texts(ngx_conf_t *cf,
    ngx_http_session_loc_conf_t *slcf);

char *ngx_http_session_limits(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* "create", "list" or "other" */
const char *ngx_http_session_limit_class_name(ngx_uint_t cls);

/* session_limit_scope node | cluster; */
char *ngx_http_session_limit_scope(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* session_auth_fail_limit <n> | off; */
char *ngx_http_session_auth_fail_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_SESSION_LIMIT_H_INCLUDED_ */
