/*
 * Stage 1 of the pipeline: who is calling.
 */

#ifndef _NGX_HTTP_SESSION_AUTH_H_INCLUDED_
#define _NGX_HTTP_SESSION_AUTH_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * From the Authorization header to the auth cache, with stage 2's count
 * when the cache knows the key as valid.  NGX_OK: ctx->principal is set;
 * NGX_DECLINED: ctx->err says why not; NGX_BUSY: the key is well formed,
 * its hash is in ctx->principal, and only the database can tell.
 */
ngx_int_t ngx_http_session_auth(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/*
 * After NGX_BUSY: asks the database.  NGX_AGAIN: the lookup runs and
 * resume(r, rc) follows with the outcome (NGX_OK, or NGX_DECLINED with
 * ctx->err); NGX_DECLINED: ctx->err says why not.
 */
ngx_int_t ngx_http_session_auth_lookup(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_resume_pt resume);

/* seeds and wipes the per-worker memo of key hashes */
void ngx_http_session_auth_init_process(void);
void ngx_http_session_auth_exit_process(void);


#endif /* _NGX_HTTP_SESSION_AUTH_H_INCLUDED_ */
