/*
 * Idempotency-Key on POST requests (API.md section 6).
 */

#ifndef _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_
#define _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * Stage 4 of a POST: NGX_DECLINED without an Idempotency-Key (the
 * endpoint runs as usual); otherwise checks the key, reads the body,
 * claims the key and then either dispatches the request or answers
 * (replay, 409, 422, 400).
 */
ngx_int_t ngx_http_session_idempotency(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/* the request holds a claim whose answer is not stored yet */
ngx_int_t ngx_http_session_idempotency_pending(ngx_http_session_ctx_t *ctx);

/*
 * Keeps (or, for 429 and 5xx, gives up) the claim, then sends the answer;
 * returns what the caller's handler should return.
 */
ngx_int_t ngx_http_session_idempotency_answer(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t status, ngx_buf_t *b);

/* SHA-256 of the request body that nginx has read (memory or file) */
ngx_int_t ngx_http_session_body_sha256(ngx_http_request_t *r, u_char *hash);


#endif /* _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_ */
