/*
 * Idempotency-Key (docs/api.md §6).
 *
 * A POST that carries the header is handled in three steps, each one
 * statement of src/sql/003_idempotency.sql:
 *
 *   1. claim: (project, key) with the request's fingerprint (method, the
 *      normalised path with the query as received, SHA-256 of the body).
 *      A new claim runs the endpoint; an existing key answers at once:
 *      the stored answer again (Idempotent-Replayed: true), 409 while the
 *      first request runs, 422 for another request under the same key;
 *   2. the endpoint runs as it would without the header, except that an
 *      endpoint that does work (create, complete, upload, ack) sends the
 *      keyed variant of its statement: the work is done only while the
 *      claim is still this request's, and its answer (status, Location,
 *      the resource as answered) is stored by the same statement, so
 *      that the work and its answer commit together or not at all,
 *      whatever happens to the worker or the connection afterwards;
 *   3. any other answer is stored (2xx and 4xx but 429) or the claim
 *      given up (429, 5xx: a retry runs again) before it is sent, so that
 *      a client that saw an answer finds it kept.  Those answers did no
 *      work: losing one (the worker dies first) only makes the retry run
 *      again.
 *
 * A replay sends the stored body, or renders the stored resource again
 * with the code that rendered it the first time.
 */

#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_idemkey.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"


/*
 * A claim whose request never answered is free again after its lease:
 * twice session_db_timeout (the endpoint's statement waits for a
 * connection and runs within those), at least this long.  Taking a claim
 * over early is safe: the keyed statements work only for the claim's
 * holder, so the request that lost it does nothing (and answers 409).
 */
#define NGX_HTTP_SESSION_IDEM_LEASE_MIN   1

/*
 * The claim's columns: outcome, claim, status, location, body, then the
 * session and the image of an answer of work
 */
#define NGX_HTTP_SESSION_IDEM_COL_SESSION  5
#define NGX_HTTP_SESSION_IDEM_COL_IMAGE                                       \
    (NGX_HTTP_SESSION_IDEM_COL_SESSION + NGX_HTTP_SESSION_SESSION_NCOLS)
#define NGX_HTTP_SESSION_IDEM_NCOLS                                           \
    (NGX_HTTP_SESSION_IDEM_COL_IMAGE + NGX_HTTP_SESSION_IMAGE_NCOLS)

#define NGX_HTTP_SESSION_IDEM_READ_CHUNK  65536


struct ngx_http_session_idem_s {
    /* the header's value, NUL-terminated for the query */
    u_char                     *key;
    u_char                      claim[16];

    /* the answer held back while it is stored */
    ngx_uint_t                  status;
    ngx_buf_t                  *answer;

    /* the stage the claim wraps: the endpoint */
    ngx_http_session_next_pt    next;
};


static ngx_table_elt_t *ngx_http_session_idem_find(ngx_list_t *headers,
    ngx_str_t *name, ngx_uint_t *n);
static void ngx_http_session_idem_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_idem_claim(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
static void ngx_http_session_idem_claimed(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_idem_replay(ngx_http_request_t *r,
    PGresult *res);
static ngx_int_t ngx_http_session_idem_answer(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t status, ngx_buf_t *b);
static void ngx_http_session_idem_settled(ngx_http_session_db_query_t *q,
    PGresult *res);


static ngx_str_t  ngx_http_session_idem_key = ngx_string("Idempotency-Key");
static ngx_str_t  ngx_http_session_idem_replayed =
    ngx_string("Idempotent-Replayed");


ngx_int_t
ngx_http_session_idempotency(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_next_pt next)
{
    off_t                         limit;
    ngx_int_t                     rc;
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
     * limit.  One announced over it is not read at all: the endpoint
     * answers 413 without a claim (the same request always gets it).
     */

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    limit = (ctx->route.id == NGX_HTTP_SESSION_ROUTE_IMAGES)
            ? slcf->image_max_size : NGX_HTTP_SESSION_JSON_BODY_MAX;

    if (r->headers_in.content_length_n > limit) {
        return NGX_DECLINED;
    }

    ctx->body_limit = limit;

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

    rc = ngx_http_read_client_request_body(r, ngx_http_session_idem_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
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
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash != 0
            && h[i].key.len == name->len
            && ngx_strncasecmp(h[i].key.data, name->data, name->len) == 0)
        {
            (*n)++;
            found = &h[i];
        }
    }

    return found;
}


static void
ngx_http_session_idem_body(ngx_http_request_t *r)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    ngx_http_finalize_request(r, ngx_http_session_idem_claim(r, ctx));
}


static ngx_int_t
ngx_http_session_idem_claim(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    size_t                         len;
    u_char                        *hash, *path, *p, *lease;
    ngx_msec_t                     lease_sec;
    ngx_http_session_idem_t       *idem;
    ngx_http_session_db_query_t   *q;
    ngx_http_session_main_conf_t  *smcf;

    idem = ctx->idem;

    /* until the claim is ours, an answer is sent as it is */

    hash = ctx->body_sha256;

    if (ngx_http_session_body_sha256(r, hash) != NGX_OK) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ctx->body_hashed = 1;

    /* the path as nginx normalised it, "?" and the query as received */

    len = ngx_http_session_idem_escape(NULL, r->uri.data, r->uri.len);

    if (r->args.len) {
        len += 1 + ngx_http_session_idem_escape(NULL, r->args.data,
                                                r->args.len);
    }

    path = ngx_pnalloc(r->pool, len + 1);
    lease = ngx_pnalloc(r->pool, NGX_INT_T_LEN + 1);

    if (path == NULL || lease == NULL
        || ngx_http_session_project(r, ctx) == NULL)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    p = path + ngx_http_session_idem_escape(path, r->uri.data, r->uri.len);

    if (r->args.len) {
        *p++ = '?';
        p += ngx_http_session_idem_escape(p, r->args.data, r->args.len);
    }

    *p = '\0';

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    lease_sec = (smcf->db_timeout * 2 + 999) / 1000;
    if (lease_sec < NGX_HTTP_SESSION_IDEM_LEASE_MIN) {
        lease_sec = NGX_HTTP_SESSION_IDEM_LEASE_MIN;
    }

    *ngx_sprintf(lease, "%M", lease_sec) = '\0';

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IDEM_CLAIM,
                                       ngx_http_session_idem_claimed);
    if (q == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(q, idem->key, 0, 0);
    ngx_http_session_db_param(q, "POST", 0, 0);
    ngx_http_session_db_param(q, path, 0, 0);
    ngx_http_session_db_param(q, hash, 32, 1);
    ngx_http_session_db_param(q, lease, 0, 0);

    /* prepared, so results come in binary: the stored body as its bytes */

    return ngx_http_session_run(r, q);
}


static void
ngx_http_session_idem_claimed(ngx_http_session_db_query_t *q, PGresult *res)
{
    char                     *outcome;
    ngx_int_t                 rc;
    ngx_http_request_t       *r;
    ngx_http_session_ctx_t   *ctx;
    ngx_http_session_idem_t  *idem;

    r = q->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    idem = ctx->idem;

    if (res == NULL) {
        rc = ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE);
        goto done;
    }

    if (ngx_http_session_db_result_ok(q, res) != NGX_OK
        || PQntuples(res) != 1
        || PQnfields(res) != NGX_HTTP_SESSION_IDEM_NCOLS)
    {
        rc = ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        goto done;
    }

    outcome = PQgetvalue(res, 0, 0);

    if (ngx_strcmp(outcome, "new") == 0) {

        if (PQgetlength(res, 0, 1) != 16) {
            rc = ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
            goto done;
        }

        ngx_memcpy(idem->claim, PQgetvalue(res, 0, 1), 16);

        /* the endpoint's statement works under the claim */
        ctx->idem_key = idem->key;
        ctx->idem_claim = idem->claim;

        /* the endpoint's answer is kept for the key first, then sent */
        ctx->answer_hook = ngx_http_session_idem_answer;

        rc = idem->next(r, ctx);

    } else if (ngx_strcmp(outcome, "replay") == 0) {
        rc = ngx_http_session_idem_replay(r, res);

    } else if (ngx_strcmp(outcome, "running") == 0) {
        rc = ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IDEM_RUNNING);

    } else if (ngx_strcmp(outcome, "mismatch") == 0) {
        rc = ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IDEM_MISMATCH);

    } else {
        rc = ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

done:

    ngx_http_finalize_request(r, rc);
}


/* the first request's answer, again */

static ngx_int_t
ngx_http_session_idem_replay(ngx_http_request_t *r, PGresult *res)
{
    int          len;
    u_char      *p;
    uint32_t     status;
    ngx_buf_t   *b;

    if (PQgetlength(res, 0, 2) != 4) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    p = (u_char *) PQgetvalue(res, 0, 2);
    status = ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
             | ((uint32_t) p[2] << 8) | p[3];

    if (status < 200 || status > 499) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    if (!PQgetisnull(res, 0, 3)) {
        len = PQgetlength(res, 0, 3);

        p = ngx_pnalloc(r->pool, len);
        if (p == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        ngx_memcpy(p, PQgetvalue(res, 0, 3), len);

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

    if (!PQgetisnull(res, 0, 4)) {
        len = PQgetlength(res, 0, 4);

        b = ngx_create_temp_buf(r->pool, len ? len : 1);
        if (b == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        b->last = ngx_cpymem(b->last, PQgetvalue(res, 0, 4), len);

    } else if (!PQgetisnull(res, 0, NGX_HTTP_SESSION_IDEM_COL_SESSION)) {
        /* the answer of work: the resource as it was answered */
        b = ngx_http_session_render_session(r, res, 0,
                                            NGX_HTTP_SESSION_IDEM_COL_SESSION);

    } else if (!PQgetisnull(res, 0, NGX_HTTP_SESSION_IDEM_COL_IMAGE)) {
        b = ngx_http_session_render_image(r, res, 0,
                                          NGX_HTTP_SESSION_IDEM_COL_IMAGE);

    } else {
        b = NULL;
    }

    if (b == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    return ngx_http_session_send_json(r, status, b);
}


/*
 * The answer hook of a claimed key (set above, called once by the
 * response room): keeps the answer (or, for 429 and 5xx, gives the
 * claim up), then sends it.
 */

static ngx_int_t
ngx_http_session_idem_answer(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t status, ngx_buf_t *b)
{
    u_char                       *st, *p;
    ngx_uint_t                    keep, n;
    ngx_table_elt_t              *loc;
    ngx_http_session_idem_t      *idem;
    ngx_http_session_db_query_t  *q;

    idem = ctx->idem;

    if (ctx->idem_kept) {
        /* stored with the work, by the endpoint's statement */
        return ngx_http_session_send_json(r, status, b);
    }

    idem->status = status;
    idem->answer = b;

    keep = (status >= 200 && status < 300)
           || (status >= 400 && status < 500
               && status != NGX_HTTP_TOO_MANY_REQUESTS);

    q = ngx_http_session_db_query_create(r,
                                         keep ? NGX_HTTP_SESSION_SQL_IDEM_STORE
                                         : NGX_HTTP_SESSION_SQL_IDEM_RELEASE,
                                         ngx_http_session_idem_settled);
    st = ngx_pnalloc(r->pool, NGX_INT_T_LEN + 1);

    if (q == NULL || st == NULL) {
        return ngx_http_session_send_json(r, status, b);
    }

    ngx_http_session_db_param(q, ctx->project, 0, 0);
    ngx_http_session_db_param(q, idem->key, 0, 0);
    ngx_http_session_db_param(q, idem->claim, 16, 1);

    if (keep) {
        *ngx_sprintf(st, "%ui", status) = '\0';
        ngx_http_session_db_param(q, st, 0, 0);
        ngx_http_session_db_param(q, "application/json", 0, 0);

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

        ngx_http_session_db_param(q, p, 0, 0);

        ngx_http_session_db_param(q, b->pos ? (char *) b->pos : "",
                                  b->last - b->pos, 1);
    }

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


static void
ngx_http_session_idem_settled(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_http_request_t       *r;
    ngx_http_session_ctx_t   *ctx;
    ngx_http_session_idem_t  *idem;

    r = q->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    idem = ctx->idem;

    if (res == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "session idempotency: the database is unavailable, "
                      "the answer is sent without being kept");

    } else if (ngx_http_session_db_result_ok(q, res) == NGX_OK
               && PQntuples(res) == 1
               && PQgetvalue(res, 0, 0)[0] != 't')
    {
        /* past its lease, another request took the key over */
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "session idempotency: the claim was lost before "
                      "the answer was kept");
    }

    ngx_http_finalize_request(r, ngx_http_session_send_json(r, idem->status,
                                                            idem->answer));
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
