/*
 * Stage 2 with session_limit_scope cluster: the lease statements that
 * fill the node's share of a key's budget (src/zone/ngx_http_session_
 * zone_lease.c holds it), and the requests that wait for one.
 */

#ifndef _NGX_HTTP_SESSION_LEASE_H_INCLUDED_
#define _NGX_HTTP_SESSION_LEASE_H_INCLUDED_


#include "ngx_http_session_common.h"


void ngx_http_session_lease_init_process(void);

/*
 * ctx->take found no budget (NGX_AGAIN): the request waits for a lease,
 * one statement per key and class per worker however many wait.  Returns
 * NGX_AGAIN, and resume(r, rc) is called once ctx->take is decided (the
 * request is then counted, or refused: NGX_BUSY, or NGX_ABORT when the
 * database gave no lease); or NGX_DECLINED with ctx->err when no
 * statement could be sent.
 */
ngx_int_t ngx_http_session_lease_wait(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_resume_pt resume);

/* take->lease of an admitted request: the next block, ahead of need */
void ngx_http_session_lease_ahead(u_char *hash,
    ngx_http_session_take_t *take);


#endif /* _NGX_HTTP_SESSION_LEASE_H_INCLUDED_ */
