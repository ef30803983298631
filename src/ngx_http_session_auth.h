/*
 * Stage 1 of the pipeline: who is calling.
 */

#ifndef _NGX_HTTP_SESSION_AUTH_H_INCLUDED_
#define _NGX_HTTP_SESSION_AUTH_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * NGX_OK: ctx->principal is set; NGX_AGAIN: a database lookup runs and
 * ngx_http_session_resume() follows; NGX_DECLINED: ctx->err says why not.
 */
ngx_int_t ngx_http_session_auth(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/* seeds and wipes the per-worker memo of key hashes */
void ngx_http_session_auth_init_process(void);
void ngx_http_session_auth_exit_process(void);


#endif /* _NGX_HTTP_SESSION_AUTH_H_INCLUDED_ */
