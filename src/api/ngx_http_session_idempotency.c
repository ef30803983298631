/*
 * Idempotency-Key (docs/api.md §6).
 *
 * A POST that carries the header reads its body first (its SHA-256 is
 * part of the request's fingerprint: method, the normalised path with
 * the query as received, the body), then runs the endpoint with the key
 * (decisions (xa)-(xe), src/sql/012_idempotent_commit.sql):
 *
 *   1. an endpoint that does work (create, complete, upload, ack) sends
 *      the keyed variant of its statement: in that one statement, so in
 *      one transaction with one commit, the key's advisory lock is tried
 *      (held until the commit: a repeat meanwhile answers 409 at once),
 *      the key's row is read (a kept answer: replayed with
 *      Idempotent-Replayed: true; another request under the key: 422),
 *      and otherwise the work is done and its answer (status, Location,
 *      the resource as answered) inserted as the key's row (a streamed
 *      upload: the same pieces in the first and the last statement of
 *      its transaction, decision (zd)).  The work and its answer commit
 *      together or not at all, whatever happens to the worker or the
 *      connection: a worker that dies, or a 503 after the module gave up
 *      on the statement, leaves either nothing (the retry runs once) or
 *      the answer (the retry replays it).  The create of a plan without
 *      a quota inserts the key's row first and reads nothing before its
 *      work (decision (xf)); when it did nothing (the lock held
 *      elsewhere, a row of the key) it returns no row, and the key's
 *      answer is read as for a replay;
 *   2. an answer that did no work (a 4xx but 429, before any statement
 *      or from the keyed one: 400, 404, 409, 410, 403 ...) is kept
 *      before it is sent, by one statement of the same shape, which
 *      answers the kept answer instead when there is one;
 *   3. 429 and 5xx are sent as they are: there is no claim to give up,
 *      so a retry runs again.
 *
 * A replay sends the stored body, or renders the stored resource again
 * with the code that rendered it the first time.  Nothing is claimed
 * before the work any more: a claim row (status NULL) is only ever one
 * of a node of the previous version, honoured until its lease ends.
 */

#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_escape.h"
#include "ngx_http_session_idemkey.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"


/*
 * A claim of a node of the previous version whose request never answered
 * is free again after its lease: twice session_db_timeout, at least this
 * long (decision (hc); the same lease those nodes use).
 */
#define NGX_HTTP_SESSION_IDEM_LEASE_MIN   1

#define NGX_HTTP_SESSION_IDEM_READ_CHUNK  65536

/* the SQLSTATE of idempotency_conflict(): serialization_failure */
#define NGX_HTTP_SESSION_IDEM_CONFLICT    "40001"

/* the columns of NGX_HTTP_SESSION_SQL_IDEM_READ */
#define NGX_HTTP_SESSION_IDEM_R_OUTCOME   0
#define NGX_HTTP_SESSION_IDEM_R_STATUS    1
#define NGX_HTTP_SESSION_IDEM_R_LOCATION  2
#define NGX_HTTP_SESSION_IDEM_R_BODY      3
#define NGX_HTTP_SESSION_IDEM_R_SESSION   4
#define NGX_HTTP_SESSION_IDEM_R_IMAGE                                         \
    (NGX_HTTP_SESSION_IDEM_R_SESSION + NGX_HTTP_SESSION_SESSION_NCOLS)
#define NGX_HTTP_SESSION_IDEM_R_NCOLS                                         \
    (NGX_HTTP_SESSION_IDEM_R_IMAGE + NGX_HTTP_SESSION_IMAGE_NCOLS)


struct ngx_http_session_idem_s {
    /* the header's value, the path with its query, the lease: parameters */
    u_char                     *key;
    u_char                     *path;
    u_char                     *lease;

    /* the answer held back while it is kept */
    ngx_uint_t                  status;
    ngx_buf_t                  *answer;

    /* the stage the key wraps: the endpoint */
    ngx_http_session_next_pt    next;
};


static ngx_table_elt_t *ngx_http_session_idem_find(ngx_list_t *headers,
    ngx_str_t *name, ngx_uint_t *n);
static void ngx_http_session_idem_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_idem_start(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
static void ngx_http_session_idem_done(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_idem_replay(ngx_http_request_t *r,
    ngx_http_session_db_query_t *q, PGresult *res);
static ngx_int_t ngx_http_session_idem_answer(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t status, ngx_buf_t *b);
static ngx_int_t ngx_http_session_idem_settle(ngx_http_request_t *r,
    ngx_http_session_db_query_t *q, PGresult *res);


static ngx_str_t  ngx_http_session_idem_key = ngx_string("Idempotency-Key");
static ngx_str_t  ngx_http_session_idem_replayed =
    ngx_string("Idempotent-Replayed");


ngx_int_t
ngx_http_session_idempotency(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_next_pt next)
{
    off_t                         limit;
    ngx_uint_t                    n;
    ngx_table_elt_t              *h;
    ngx_http_session_idem_t      *idem;
    ngx_http_session_loc_conf_t  *slcf;

    h = ngx_http_session_idem_find(&r->headers_in.headers,
                                   &ngx_http_session_idem_key, &n);

    if (n == 0) {
        return NGX_DECLINED;
    }

    if (n > 1
        || !ngx_http_session_idem_key_valid(h->value.data, h->value.len))
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IDEM_MALFORMED);
    }

    /*
     * The body is read here, before the endpoint, under the endpoint's
     * limit.  One announced over it is not read at all: the create and
     * the upload answer their own 413 without the key (the same request
     * always gets it).  The complete and the ack ignore their body, and
     * would run without the key: their 413 is answered here, as for a
     * chunked body that runs over (decision (am)).
     */

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    limit = (ctx->route.id == NGX_HTTP_SESSION_ROUTE_IMAGES)
            ? slcf->image_max_size : NGX_HTTP_SESSION_JSON_BODY_MAX;

    if (r->headers_in.content_length_n > limit) {
        if (ctx->route.id == NGX_HTTP_SESSION_ROUTE_SESSIONS
            || ctx->route.id == NGX_HTTP_SESSION_ROUTE_IMAGES)
        {
            return NGX_DECLINED;
        }

        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_BODY_TOO_LARGE);
    }

    idem = ngx_pcalloc(r->pool, sizeof(ngx_http_session_idem_t));
    if (idem == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    idem->key = ngx_pnalloc(r->pool, h->value.len + 1);
    if (idem->key == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    *ngx_cpymem(idem->key, h->value.data, h->value.len) = '\0';

    idem->next = next;
    ctx->idem = idem;

    return ngx_http_session_body_start(r, ctx, limit,
                                       ngx_http_session_idem_body);
}


/* the last header called name (any case) and how many there are */

static ngx_table_elt_t *
ngx_http_session_idem_find(ngx_list_t *headers, ngx_str_t *name,
    ngx_uint_t *n)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h, *found;

    *n = 0;
    found = NULL;

    part = &headers->part;
    i = 0;

    while ((h = ngx_http_session_list_next(headers, &part, &i)) != NULL) {

        if (h->hash != 0
            && h->key.len == name->len
            && ngx_strncasecmp(h->key.data, name->data, name->len) == 0)
        {
            (*n)++;
            found = h;
        }
    }

    return found;
}


static void
ngx_http_session_idem_body(ngx_http_request_t *r)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    ngx_http_finalize_request(r, ngx_http_session_idem_start(r, ctx));
}


/* the fingerprint's parameters, then the endpoint under the key */

static ngx_int_t
ngx_http_session_idem_start(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    size_t                         len;
    u_char                        *p;
    ngx_msec_t                     lease;
    ngx_http_session_idem_t       *idem;
    ngx_http_session_main_conf_t  *smcf;

    idem = ctx->idem;

    if (ngx_http_session_body_sha256(r, ctx->body_sha256) != NGX_OK) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ctx->body_hashed = 1;

    /* the path as nginx normalised it, "?" and the query as received */

    len = ngx_http_session_escape(NULL, r->uri.data, r->uri.len,
                                  NGX_HTTP_SESSION_ESCAPE_PATH);

    if (r->args.len) {
        len += 1 + ngx_http_session_escape(NULL, r->args.data, r->args.len,
                                           NGX_HTTP_SESSION_ESCAPE_PATH);
    }

    idem->path = ngx_pnalloc(r->pool, len + 1);
    idem->lease = ngx_pnalloc(r->pool, NGX_INT_T_LEN + 1);

    if (idem->path == NULL || idem->lease == NULL
        || ngx_http_session_project(r, ctx) == NULL)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    p = idem->path + ngx_http_session_escape(idem->path, r->uri.data,
                                             r->uri.len,
                                             NGX_HTTP_SESSION_ESCAPE_PATH);

    if (r->args.len) {
        *p++ = '?';
        p += ngx_http_session_escape(p, r->args.data, r->args.len,
                                     NGX_HTTP_SESSION_ESCAPE_PATH);
    }

    *p = '\0';

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    lease = (smcf->db_timeout * 2 + 999) / 1000;
    if (lease < NGX_HTTP_SESSION_IDEM_LEASE_MIN) {
        lease = NGX_HTTP_SESSION_IDEM_LEASE_MIN;
    }

    *ngx_sprintf(idem->lease, "%M", lease) = '\0';

    /* the endpoints that do work send their keyed statements */
    ctx->idem_key = idem->key;

    /* any other answer is kept for the key first, then sent */
    ctx->answer_hook = ngx_http_session_idem_answer;

    return idem->next(r, ctx);
}


void
ngx_http_session_idem_params(ngx_http_session_db_query_t *q)
{
    ngx_http_session_ctx_t   *ctx;
    ngx_http_session_idem_t  *idem;

    ctx = ngx_http_get_module_ctx(q->request, ngx_http_session_module);
    idem = ctx->idem;

    ngx_http_session_db_param(q, idem->key, 0, 0);
    ngx_http_session_db_param(q, idem->path, 0, 0);
    ngx_http_session_db_param(q, ctx->body_sha256, 32, 1);
    ngx_http_session_db_param(q, idem->lease, 0, 0);
}


ngx_int_t
ngx_http_session_idem_worked(ngx_http_session_db_query_t *q, PGresult *res,
    ngx_int_t *rc)
{
    int                      col;
    char                    *state, *outcome;
    ngx_http_request_t      *r;
    ngx_http_session_ctx_t  *ctx;

    r = q->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (res == NULL) {
        return NGX_OK;
    }

    if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
        state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

        if (state == NULL
            || ngx_strcmp(state, NGX_HTTP_SESSION_IDEM_CONFLICT) != 0)
        {
            return NGX_OK;
        }

        /* idempotency_conflict(): the work was undone */

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "session idempotency: another request with the key "
                      "answered first, nothing done");

        ctx->answer_hook = NULL;
        *rc = ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IDEM_RUNNING);

        return NGX_DONE;
    }

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 0) {
        /*
         * a statement that returns no row when it did nothing (the
         * keyed create of a plan without a quota): the key's lock is
         * held elsewhere, or the key has a row; its answer is read
         */
        *rc = ngx_http_session_idem_outcome(r, ctx, "replay");
        return NGX_DONE;
    }

    if (PQresultStatus(res) != PGRES_TUPLES_OK
        || PQntuples(res) != 1
        || PQnfields(res) < NGX_HTTP_SESSION_IDEM_NCOLS)
    {
        /* the endpoint's checks refuse it */
        return NGX_OK;
    }

    col = PQnfields(res) - NGX_HTTP_SESSION_IDEM_NCOLS;
    outcome = PQgetvalue(res, 0, col + NGX_HTTP_SESSION_IDEM_COL_OUTCOME);

    *rc = ngx_http_session_idem_outcome(r, ctx, outcome);

    if (*rc != NGX_DECLINED) {
        return NGX_DONE;
    }

    if (PQgetlength(res, 0, col + NGX_HTTP_SESSION_IDEM_COL_KEPT) == 1
        && PQgetvalue(res, 0, col + NGX_HTTP_SESSION_IDEM_COL_KEPT)[0])
    {
        /* the answer of the work is the key's row: sent as it is */
        ctx->idem_kept = 1;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_session_idem_outcome(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, char *outcome)
{
    ngx_http_session_db_query_t  *q;

    if (ngx_strcmp(outcome, "new") == 0) {
        return NGX_DECLINED;
    }

    /* none of these is the request's own answer: nothing to keep */
    ctx->answer_hook = NULL;

    if (ngx_strcmp(outcome, "running") == 0) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IDEM_RUNNING);
    }

    if (ngx_strcmp(outcome, "mismatch") == 0) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IDEM_MISMATCH);
    }

    if (ngx_strcmp(outcome, "replay") != 0) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    /*
     * the kept answer is read on its own: a replay is rare.  The read
     * also settles what a statement that returned no row left open:
     * "running" when the key has no kept answer
     */

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IDEM_READ,
                                       ngx_http_session_idem_done);
    if (q == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(q, ctx->project, 0, 0);
    ngx_http_session_idem_params(q);

    return ngx_http_session_run(r, q);
}


/* either statement's handler: the kept answer read, or this one kept */

static void
ngx_http_session_idem_done(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_http_request_t  *r;

    r = q->request;

    ngx_http_finalize_request(r, (q->stmt == NGX_HTTP_SESSION_STMT_IDEM_READ)
                                 ? ngx_http_session_idem_replay(r, q, res)
                                 : ngx_http_session_idem_settle(r, q, res));
}


/* the first request's answer, again */

static ngx_int_t
ngx_http_session_idem_replay(ngx_http_request_t *r,
    ngx_http_session_db_query_t *q, PGresult *res)
{
    int          len, c;
    char        *outcome;
    u_char      *p;
    uint32_t     status;
    ngx_buf_t   *b;

    if (res == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE);
    }

    if (ngx_http_session_db_result_ok(q, res) != NGX_OK
        || PQntuples(res) != 1
        || PQnfields(res) != NGX_HTTP_SESSION_IDEM_R_NCOLS)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    outcome = PQgetvalue(res, 0, NGX_HTTP_SESSION_IDEM_R_OUTCOME);

    if (ngx_strcmp(outcome, "replay") != 0) {
        /* changed since the statement saw it: gone (409), or taken */
        return ngx_http_session_error(r,
                                   (ngx_strcmp(outcome, "mismatch") == 0)
                                   ? NGX_HTTP_SESSION_ERR_IDEM_MISMATCH
                                   : NGX_HTTP_SESSION_ERR_IDEM_RUNNING);
    }

    c = NGX_HTTP_SESSION_IDEM_R_STATUS;

    if (PQgetlength(res, 0, c) != 4) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    p = (u_char *) PQgetvalue(res, 0, c);
    status = ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
             | ((uint32_t) p[2] << 8) | p[3];

    if (status < 200 || status > 499) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    c = NGX_HTTP_SESSION_IDEM_R_LOCATION;

    if (!PQgetisnull(res, 0, c)) {
        len = PQgetlength(res, 0, c);

        p = ngx_pnalloc(r->pool, len);
        if (p == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        ngx_memcpy(p, PQgetvalue(res, 0, c), len);

        if (ngx_http_session_header_add(r, &ngx_http_session_location, p,
                                        len)
            == NULL)
        {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }
    }

    if (ngx_http_session_header_add(r, &ngx_http_session_idem_replayed,
                                    (u_char *) "true", sizeof("true") - 1)
        == NULL)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    c = NGX_HTTP_SESSION_IDEM_R_BODY;

    if (!PQgetisnull(res, 0, c)) {
        len = PQgetlength(res, 0, c);

        b = ngx_create_temp_buf(r->pool, len ? len : 1);
        if (b == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        b->last = ngx_cpymem(b->last, PQgetvalue(res, 0, c), len);

    } else if (!PQgetisnull(res, 0, NGX_HTTP_SESSION_IDEM_R_SESSION)) {
        /* the answer of work: the resource as it was answered */
        b = ngx_http_session_render_session(r, res, 0,
                                            NGX_HTTP_SESSION_IDEM_R_SESSION);

    } else if (!PQgetisnull(res, 0, NGX_HTTP_SESSION_IDEM_R_IMAGE)) {
        b = ngx_http_session_render_image(r, res, 0,
                                          NGX_HTTP_SESSION_IDEM_R_IMAGE);

    } else {
        b = NULL;
    }

    if (b == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    return ngx_http_session_send_json(r, status, b);
}


/*
 * The answer hook of a keyed request (set above, called once by the
 * response room): an answer that did no work is kept for the key (2xx,
 * 4xx but 429), then sent; the answer of work was kept with it.
 */

static ngx_int_t
ngx_http_session_idem_answer(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t status, ngx_buf_t *b)
{
    u_char                       *st, *p;
    ngx_uint_t                    n;
    ngx_table_elt_t              *loc;
    ngx_http_session_idem_t      *idem;
    ngx_http_session_db_query_t  *q;

    idem = ctx->idem;

    if (ctx->idem_kept
        || status < 200
        || (status >= 300 && status < 400)
        || status == NGX_HTTP_TOO_MANY_REQUESTS
        || status >= 500)
    {
        /* kept with the work already, or not to be kept: a retry runs */
        return ngx_http_session_send_json(r, status, b);
    }

    idem->status = status;
    idem->answer = b;

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IDEM_STORE,
                                       ngx_http_session_idem_done);
    st = ngx_pnalloc(r->pool, NGX_INT_T_LEN + 1);

    if (q == NULL || st == NULL) {
        return ngx_http_session_send_json(r, status, b);
    }

    loc = ngx_http_session_idem_find(&r->headers_out.headers,
                                     &ngx_http_session_location, &n);

    p = NULL;

    if (loc) {
        p = ngx_pnalloc(r->pool, loc->value.len + 1);
        if (p == NULL) {
            return ngx_http_session_send_json(r, status, b);
        }

        *ngx_cpymem(p, loc->value.data, loc->value.len) = '\0';
    }

    *ngx_sprintf(st, "%ui", status) = '\0';

    ngx_http_session_db_param(q, ctx->project, 0, 0);
    ngx_http_session_idem_params(q);
    ngx_http_session_db_param(q, st, 0, 0);
    ngx_http_session_db_param(q, p, 0, 0);
    ngx_http_session_db_param(q, b->pos ? (char *) b->pos : "",
                              b->last - b->pos, 1);

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "session idempotency: the database is unavailable, "
                      "the answer is sent without being kept");
        return ngx_http_session_send_json(r, status, b);
    }

    /* the query's handler sends the answer */
    r->main->count++;

    return NGX_DONE;
}


/*
 * The keep's outcome: this answer was kept ("new", kept), or the key has
 * one already (sent instead), or another request holds the key (409)
 */

static ngx_int_t
ngx_http_session_idem_settle(ngx_http_request_t *r,
    ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_int_t                 rc;
    ngx_http_session_ctx_t   *ctx;
    ngx_http_session_idem_t  *idem;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    idem = ctx->idem;

    if (res == NULL
        || ngx_http_session_db_result_ok(q, res) != NGX_OK
        || PQntuples(res) != 1
        || PQnfields(res) != NGX_HTTP_SESSION_IDEM_NCOLS)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "session idempotency: the answer could not be kept, "
                      "it is sent without being kept");

        return ngx_http_session_send_json(r, idem->status, idem->answer);
    }

    rc = ngx_http_session_idem_outcome(r, ctx,
                         PQgetvalue(res, 0, NGX_HTTP_SESSION_IDEM_COL_OUTCOME));

    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (PQgetlength(res, 0, NGX_HTTP_SESSION_IDEM_COL_KEPT) != 1
        || !PQgetvalue(res, 0, NGX_HTTP_SESSION_IDEM_COL_KEPT)[0])
    {
        /* another request with the key kept its answer meanwhile */
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IDEM_RUNNING);
    }

    return ngx_http_session_send_json(r, idem->status, idem->answer);
}


ngx_int_t
ngx_http_session_body_sha256(ngx_http_request_t *r, u_char *hash)
{
    off_t          off;
    u_char        *chunk;
    size_t         size;
    ssize_t        n;
    ngx_int_t      rc;
    ngx_buf_t     *b;
    EVP_MD_CTX    *md;
    ngx_chain_t   *cl;
    unsigned int   len;

    md = ngx_http_session_sha256_init();
    if (md == NULL) {
        return NGX_ERROR;
    }

    rc = NGX_ERROR;
    chunk = NULL;

    cl = r->request_body ? r->request_body->bufs : NULL;

    for ( /* void */ ; cl; cl = cl->next) {
        b = cl->buf;

        if (ngx_buf_in_memory(b)) {
            if (EVP_DigestUpdate(md, b->pos, b->last - b->pos) != 1) {
                goto done;
            }

            continue;
        }

        if (!b->in_file) {
            continue;
        }

        /* spooled to a temporary file: read back a piece at a time */

        if (chunk == NULL) {
            chunk = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_IDEM_READ_CHUNK);
            if (chunk == NULL) {
                goto done;
            }
        }

        for (off = b->file_pos; off < b->file_last; off += n) {
            size = (size_t) ngx_min(b->file_last - off,
                                    NGX_HTTP_SESSION_IDEM_READ_CHUNK);

            n = ngx_read_file(b->file, chunk, size, off);

            if (n <= 0 || EVP_DigestUpdate(md, chunk, n) != 1) {
                goto done;
            }
        }
    }

    if (EVP_DigestFinal_ex(md, hash, &len) == 1 && len == 32) {
        rc = NGX_OK;
    }

done:

    if (chunk) {
        ngx_pfree(r->pool, chunk);
    }

    return rc;
}


/* the keyed or the plain statement of an endpoint that does work */

ngx_http_session_db_query_t *
ngx_http_session_work_query(ngx_http_request_t *r,
    ngx_http_session_stmt_e plain, ngx_http_session_stmt_e keyed,
    ngx_http_session_db_handler_pt handler)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    return ngx_http_session_db_query_stmt(r, ctx->idem_key ? keyed : plain,
                                          handler);
}


void
ngx_http_session_work_params(ngx_http_session_db_query_t *q)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(q->request, ngx_http_session_module);

    if (ctx->idem_key) {
        ngx_http_session_idem_params(q);
    }
}


int
ngx_http_session_work_ncols(ngx_http_session_db_query_t *q)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(q->request, ngx_http_session_module);

    return ctx->idem_key ? NGX_HTTP_SESSION_IDEM_NCOLS : 0;
}


ngx_int_t
ngx_http_session_work_held(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_int_t                rc;
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(q->request, ngx_http_session_module);

    if (ctx->idem_key == NULL
        || ngx_http_session_idem_worked(q, res, &rc) != NGX_DONE)
    {
        return NGX_OK;
    }

    ngx_http_finalize_request(q->request, rc);

    return NGX_DONE;
}
