/*
 * Stage 2 of the pipeline: per-key per-minute rate limits.
 */

#ifndef _NGX_HTTP_SESSION_LIMIT_H_INCLUDED_
#define _NGX_HTTP_SESSION_LIMIT_H_INCLUDED_


#include "ngx_http_session_common.h"


#define NGX_HTTP_SESSION_LIMIT_MAX  1000000000


/*
 * Counts the request and adds the X-RateLimit-* headers.  NGX_OK:
 * admitted; NGX_DECLINED: refused, ctx->err says how to answer.
 */
ngx_int_t ngx_http_session_limit(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

char *ngx_http_session_limits(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_SESSION_LIMIT_H_INCLUDED_ */
