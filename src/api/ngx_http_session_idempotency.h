/*
 * Idempotency-Key on POST requests (docs/api.md §6).
 */

#ifndef _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_
#define _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_


#include "ngx_http_session_common.h"

#include <libpq-fe.h>

#include "ngx_http_session_db.h"


/*
 * The key's two columns at the end of a keyed statement's row (the whole
 * row of NGX_HTTP_SESSION_SQL_IDEM_STORE): outcome, kept
 */
#define NGX_HTTP_SESSION_IDEM_COL_OUTCOME   0
#define NGX_HTTP_SESSION_IDEM_COL_KEPT      1
#define NGX_HTTP_SESSION_IDEM_NCOLS         2


/*
 * A wrapper around the endpoint (next), for a POST: NGX_DECLINED without
 * an Idempotency-Key (the caller runs next as usual); otherwise checks
 * the key, reads the body and runs next under the key: its statement of
 * work is the keyed one, and any other answer the response room hands
 * back here to be kept before it is sent.  Or answers itself (400).
 */
ngx_int_t ngx_http_session_idempotency(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_next_pt next);

/* the key's parameters of a keyed statement: key, path, SHA-256, lease */
void ngx_http_session_idem_params(ngx_http_session_db_query_t *q);

/*
 * The key's part of a keyed statement's result: NGX_OK when the endpoint
 * answers from the row (ctx->idem_kept set when the work's answer was
 * kept with it) or from the failure; NGX_DONE when the key answers
 * instead (the first answer again, 409, 422) with *rc for the caller to
 * finalize the request with.
 */
ngx_int_t ngx_http_session_idem_worked(ngx_http_session_db_query_t *q,
    PGresult *res, ngx_int_t *rc);

/*
 * The outcome of a keyed statement: NGX_DECLINED when the request went
 * on ("new"), else the key answers: the first answer again (read first),
 * 409 ("running"), 422 ("mismatch"); what to finalize the request with
 */
ngx_int_t ngx_http_session_idem_outcome(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, char *outcome);

/* SHA-256 of the request body that nginx has read (memory or file) */
ngx_int_t ngx_http_session_body_sha256(ngx_http_request_t *r, u_char *hash);


/*
 * The statement of an endpoint that does work: the keyed one (see
 * NGX_HTTP_SESSION_SQL_IDEM_SEEN) for a request with an Idempotency-Key,
 * else the plain one.
 */
ngx_http_session_db_query_t *ngx_http_session_work_query(
    ngx_http_request_t *r, ngx_http_session_stmt_e plain,
    ngx_http_session_stmt_e keyed, ngx_http_session_db_handler_pt handler);

/* after the endpoint's own parameters: the key's, if keyed */
void ngx_http_session_work_params(ngx_http_session_db_query_t *q);

/*
 * The columns that a keyed statement adds at the end (the key's, see
 * NGX_HTTP_SESSION_IDEM_NCOLS): 0 for a plain one.
 */
int ngx_http_session_work_ncols(ngx_http_session_db_query_t *q);

/*
 * Reads the key's columns of a keyed statement's result first: NGX_OK
 * for the endpoint to answer from the result as usual (a plain statement
 * always; a keyed one that did its work sets ctx->idem_kept); NGX_DONE
 * when the key answered instead (its first answer again, 409 while
 * another request holds it, 422 for another request under it), the
 * request then being finalized with what sending returned.
 */
ngx_int_t ngx_http_session_work_held(ngx_http_session_db_query_t *q,
    PGresult *res);


#endif /* _NGX_HTTP_SESSION_IDEMPOTENCY_H_INCLUDED_ */
