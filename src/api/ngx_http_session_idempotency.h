/*
 * Idempotency-Key on POST requests (docs/api.md §6).
 */

#ifndef _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_
#define _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * A wrapper around the endpoint (next), for a POST: NGX_DECLINED without
 * an Idempotency-Key (the caller runs next as usual); otherwise checks
 * the key, reads the body, claims the key and then either runs next,
 * whose answer the response room hands back here to be kept before it
 * is sent, or answers itself (replay, 409, 422, 400).
 */
ngx_int_t ngx_http_session_idempotency(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_next_pt next);

/* SHA-256 of the request body that nginx has read (memory or file) */
ngx_int_t ngx_http_session_body_sha256(ngx_http_request_t *r, u_char *hash);


#endif /* _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_ */
