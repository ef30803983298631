/*
 * Images: each endpoint is one prepared statement (one transaction) that
 * returns rows, rendered in C when PostgreSQL replies; but an upload over
 * session_image_chunk_size is streamed (COPY on a connection of its own,
 * db_copy.c), and a download of more than a chunk is read a slice at a
 * time (decisions (za)-(zd)).
 *
 * The bytes travel as binary parameters and results: no hex or escape
 * encoding on the wire.  A download sends them straight out of the
 * PGresult, which the request's pool frees once the response is over.
 */

#include "ngx_http_session_images.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_cursor.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_imagecheck.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"


#define NGX_HTTP_SESSION_IMAGE_LIST_DEFAULT  100
#define NGX_HTTP_SESSION_IMAGE_LIST_MAX      100

/* If-None-Match tags handed to PostgreSQL; more are not looked at */
#define NGX_HTTP_SESSION_IMAGE_TAGS_MAX      16
#define NGX_HTTP_SESSION_IMAGE_ETAG_LEN      64


/*
 * The first bytes read for the signature, and the start of COPY's data:
 * its header (19), the field count (2), four fields (4 + 16, 4 + 4,
 * 4 + the type's name, 4 + 4) and the length of the bytes (4)
 */
#define NGX_HTTP_SESSION_IMAGE_HEAD          128

/* the SHA-256 field (4 + 32) and the end of the rows (2) */
#define NGX_HTTP_SESSION_IMAGE_TAIL          38


/* a streamed upload, see ngx_http_session_image_stream() */
typedef struct {
    ngx_http_request_t           *request;
    int                           type;
    u_char                        sid[NGX_HTTP_SESSION_UUID_BIN_LEN];
    /* the sequence as after's parameter */
    u_char                        sequence[NGX_INT32_LEN + 1];

    /* the body's size, and the bytes of it read so far */
    off_t                         size;
    off_t                         offset;

    /* the SHA-256 computed as the body is read, when not known yet */
    EVP_MD_CTX                   *md;
    u_char                        sha256[NGX_HTTP_SESSION_IMAGE_SHA256_LEN];

    u_char                        head[NGX_HTTP_SESSION_IMAGE_HEAD];
    size_t                        head_len;
    size_t                        head_pos;
    u_char                        tail[NGX_HTTP_SESSION_IMAGE_TAIL];
    size_t                        tail_len;
    size_t                        tail_pos;

    /*
     * stopped after the first statement: the answer once the transaction
     * is over, the key's outcome ("replay", "running", "mismatch") or err
     */
    ngx_http_session_err_e        err;
    u_char                        outcome[sizeof("mismatch")];
} ngx_http_session_image_up_t;


/* a download in flight, see ngx_http_session_image_download() */
typedef struct {
    ngx_http_request_t           *request;
    /* the first query (its parameters name the image), and the slices' */
    ngx_http_session_db_query_t  *first;
    ngx_http_session_db_query_t  *query;

    /* the result whose bytes are in the output chain, and the next one */
    PGresult                     *sending;
    PGresult                     *ready;
    /* the column of the bytes in ready: 6 in the first result, else 0 */
    int                           ready_col;

    ngx_buf_t                    *buf;
    ngx_chain_t                   out;

    /* the image's size; bytes asked for, and handed to nginx */
    off_t                         size;
    off_t                         asked;
    off_t                         sent;
    size_t                        chunk;
    /* the size of the slice being asked for */
    size_t                        want;

    /* the slice query's parameters $3 and $4 */
    u_char                        from[NGX_OFF_T_LEN + 1];
    u_char                        count[NGX_SIZE_T_LEN + 1];

    unsigned                      querying:1;
} ngx_http_session_image_dl_t;


/* the image list's query parameters */
typedef struct {
    long long                   limit;
    /* "true", "false" or NULL */
    u_char                     *ack;
    /* the sequence of the page's last image, as text, or NULL */
    u_char                     *after;
} ngx_http_session_image_args_t;


static int ngx_http_session_image_type_of(ngx_http_request_t *r,
    ngx_str_t *name);
static ngx_int_t ngx_http_session_image_too_large(ngx_http_request_t *r);
static void ngx_http_session_image_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_image_insert(ngx_http_request_t *r,
    u_char *body, size_t len);
static ngx_int_t ngx_http_session_image_stream(ngx_http_request_t *r,
    off_t size);
static void ngx_http_session_image_copied(ngx_http_session_db_copy_t *cp,
    PGresult *res);
static ngx_http_session_err_e ngx_http_session_image_begun(
    ngx_http_session_db_copy_t *cp, PGresult *res);
static size_t ngx_http_session_image_copy_head(
    ngx_http_session_image_up_t *up, u_char *sequence);
static size_t ngx_http_session_image_copy_tail(
    ngx_http_session_image_up_t *up);
static ssize_t ngx_http_session_image_copy_read(
    ngx_http_session_db_copy_t *cp, u_char *buf, size_t size);
static u_char *ngx_http_session_image_be32(u_char *p, uint32_t v);
static u_char *ngx_http_session_image_be16(u_char *p, uint32_t v);
static void ngx_http_session_image_md_free(void *data);
static void ngx_http_session_image_uploaded(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_image_one(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_image_list_ack(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static ngx_int_t ngx_http_session_image_list_cursor(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static void ngx_http_session_image_listed(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_image_bytes(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_http_session_image_dl_t *ngx_http_session_image_download(
    ngx_http_request_t *r, ngx_http_session_db_query_t *first);
static ngx_int_t ngx_http_session_image_send_bytes(ngx_http_request_t *r,
    ngx_http_session_image_dl_t *dl, PGresult *res);
static ngx_int_t ngx_http_session_image_pump(ngx_http_request_t *r,
    ngx_http_session_image_dl_t *dl);
static void ngx_http_session_image_slice(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_image_writer(ngx_http_request_t *r);
static void ngx_http_session_image_wait(ngx_http_request_t *r);
static ngx_http_session_image_dl_t *ngx_http_session_image_dl(
    ngx_http_request_t *r);
static void ngx_http_session_image_clear(void *data);
static u_char *ngx_http_session_image_uuid(ngx_http_request_t *r,
    const u_char *s, size_t len, ngx_int_t *rc);
static ngx_int_t ngx_http_session_image_ids(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_db_query_t *q);
static u_char *ngx_http_session_image_tags(ngx_http_request_t *r);


static ngx_str_t  ngx_http_session_etag = ngx_string("ETag");

static const ngx_http_session_arg_t  ngx_http_session_image_list_args[] = {

    { ngx_string("limit"), ngx_http_session_arg_limit,
      offsetof(ngx_http_session_image_args_t, limit),
      NGX_HTTP_SESSION_IMAGE_LIST_MAX },

    { ngx_string("acknowledged"), ngx_http_session_image_list_ack,
      offsetof(ngx_http_session_image_args_t, ack), 0 },

    { ngx_string("cursor"), ngx_http_session_image_list_cursor,
      offsetof(ngx_http_session_image_args_t, after), 0 },

    { ngx_null_string, NULL, 0, 0 }
};


/* POST /api/v1/sessions/{sid}/images */

ngx_int_t
ngx_http_session_image_upload(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    ngx_int_t                     rc;
    ngx_str_t                     name;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    /* stage 4 in its order: headers, query, body */

    if (ngx_http_session_image_type_of(r, &name)
        == NGX_HTTP_SESSION_IMAGE_NONE)
    {
        return ngx_http_session_error_value(r,
                                            NGX_HTTP_SESSION_ERR_IMAGE_TYPE,
                                            &name);
    }

    rc = ngx_http_session_no_args(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    /* announced sizes are judged before a byte of the body is read */

    if (r->headers_in.content_length_n == 0
        || (r->headers_in.content_length_n < 0 && !r->headers_in.chunked))
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IMAGE_EMPTY);
    }

    if (r->headers_in.content_length_n > slcf->image_max_size) {
        return ngx_http_session_image_too_large(r);
    }

    /* a chunked body stops at the limit while it is read */
    ctx->body_limit = slcf->image_max_size;

    rc = ngx_http_read_client_request_body(r, ngx_http_session_image_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


/*
 * NGX_HTTP_SESSION_IMAGE_* of the Content-Type; name is the media type
 * as the 415 message names it: lower case, no parameters, "none" when
 * there is none.
 */

static int
ngx_http_session_image_type_of(ngx_http_request_t *r, ngx_str_t *name)
{
    ngx_str_t  *ct;

    ngx_str_set(name, "none");

    if (r->headers_in.content_type == NULL) {
        return NGX_HTTP_SESSION_IMAGE_NONE;
    }

    ct = &r->headers_in.content_type->value;

    name->data = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_IMAGE_TYPE_MAX);
    if (name->data == NULL) {
        ngx_str_set(name, "none");
        return NGX_HTTP_SESSION_IMAGE_NONE;
    }

    name->len = ngx_http_session_image_media_type(ct->data, ct->len,
                                                  name->data);
    if (name->len == 0) {
        ngx_str_set(name, "none");
        return NGX_HTTP_SESSION_IMAGE_NONE;
    }

    return ngx_http_session_image_type(name->data, name->len);
}


/* 413 "image exceeds <n> bytes" */

static ngx_int_t
ngx_http_session_image_too_large(ngx_http_request_t *r)
{
    u_char                       *p;
    ngx_str_t                     n;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    p = ngx_pnalloc(r->pool, NGX_OFF_T_LEN);
    if (p == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    n.data = p;
    n.len = ngx_sprintf(p, "%O", slcf->image_max_size) - p;

    return ngx_http_session_error_value(r,
                                        NGX_HTTP_SESSION_ERR_IMAGE_TOO_LARGE,
                                        &n);
}


static void
ngx_http_session_image_body(ngx_http_request_t *r)
{
    off_t                         size;
    size_t                        len;
    u_char                       *body;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    if (r->request_body == NULL) {
        ngx_http_finalize_request(r, ngx_http_session_error(r,
                                             NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    /* an image over a chunk is streamed, not held whole */

    size = ngx_http_session_body_size(r);

    if (size > (off_t) slcf->image_chunk_size
        && size <= slcf->image_max_size)
    {
        ngx_http_finalize_request(r, ngx_http_session_image_stream(r, size));
        return;
    }

    body = ngx_http_session_read_body(r, (size_t) slcf->image_max_size,
                                      &len);

    if (body == NULL) {
        ngx_http_finalize_request(r, (len > (size_t) slcf->image_max_size)
            ? ngx_http_session_image_too_large(r)
            : ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_session_image_insert(r, body, len));
}


static ngx_int_t
ngx_http_session_image_insert(ngx_http_request_t *r, u_char *body,
    size_t len)
{
    int                            type;
    u_char                        *sid, *sha;
    ngx_int_t                      rc;
    ngx_str_t                      name;
    ngx_http_session_ctx_t        *ctx;
    ngx_http_session_db_query_t   *q;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (len == 0) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IMAGE_EMPTY);
    }

    type = ngx_http_session_image_type_of(r, &name);

    if (!ngx_http_session_image_signature_ok(type, body, len)) {
        return ngx_http_session_error_value(r,
                                          NGX_HTTP_SESSION_ERR_IMAGE_INVALID,
                                          &name);
    }

    /* stage 5 is PostgreSQL's, but for an id that cannot exist */

    sid = ngx_http_session_image_uuid(r, ctx->route.sid, ctx->route.sid_len,
                                      &rc);
    if (sid == NULL) {
        return (rc == NGX_ERROR)
               ? ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL)
               : ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND);
    }

    /* an Idempotency-Key's fingerprint has hashed the body already */

    if (ctx->body_hashed) {
        sha = ctx->body_sha256;

    } else {
        sha = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_IMAGE_SHA256_LEN);
        if (sha == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        if (ngx_http_session_image_sha256(body, len, sha) != 0) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "session image: SHA-256 failed");
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }
    }

    q = ngx_http_session_work_query(r, NGX_HTTP_SESSION_STMT_IMAGE_UPLOAD,
                                    NGX_HTTP_SESSION_STMT_IMAGE_UPLOAD_KEYED,
                                    ngx_http_session_image_uploaded);
    if (q == NULL || ngx_http_session_project(r, ctx) == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(q, sid, 0, 0);
    ngx_http_session_db_param(q, ngx_http_session_image_type_name(type), 0,
                              0);
    ngx_http_session_db_param(q, sha, NGX_HTTP_SESSION_IMAGE_SHA256_LEN, 1);
    ngx_http_session_db_param(q, body, len, 1);
    ngx_http_session_work_params(q);

    q->data = sid;

    return ngx_http_session_run(r, q);
}


/*
 * An upload over session_image_chunk_size: the body, whole in nginx's
 * temporary file, goes to PostgreSQL a chunk at a time in one
 * transaction on a connection of its own (db_copy.c): the session takes
 * the image, the row is copied in COPY's binary format with the bytes
 * read from the file as libpq sends them and their SHA-256 computed on
 * the way, then the image is announced and the transaction commits.
 * The answers are those of the statement of a smaller image.
 */

static ngx_int_t
ngx_http_session_image_stream(ngx_http_request_t *r, off_t size)
{
    int                            type;
    u_char                        *sid;
    ssize_t                        n;
    ngx_int_t                      rc;
    ngx_str_t                      name;
    ngx_pool_cleanup_t            *cln;
    ngx_http_session_ctx_t        *ctx;
    ngx_http_session_db_copy_t    *cp;
    ngx_http_session_image_up_t   *up;
    ngx_http_session_loc_conf_t   *slcf;
    ngx_http_session_db_query_t   *before, *after;
    u_char                         head[NGX_HTTP_SESSION_IMAGE_HEAD];

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    /* the signature, from the first bytes */

    type = ngx_http_session_image_type_of(r, &name);

    for (n = 0; n < (ssize_t) sizeof(head); n += rc) {
        rc = ngx_http_session_body_read(r, n, head + n, sizeof(head) - n);

        if (rc == NGX_ERROR) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        if (rc == 0) {
            break;
        }
    }

    if (!ngx_http_session_image_signature_ok(type, head, n)) {
        return ngx_http_session_error_value(r,
                                          NGX_HTTP_SESSION_ERR_IMAGE_INVALID,
                                          &name);
    }

    sid = ngx_http_session_image_uuid(r, ctx->route.sid, ctx->route.sid_len,
                                      &rc);
    if (sid == NULL) {
        return (rc == NGX_ERROR)
               ? ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL)
               : ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND);
    }

    up = ngx_pcalloc(r->pool, sizeof(ngx_http_session_image_up_t));
    cp = ngx_http_session_db_copy_create(r, slcf->image_chunk_size);

    if (up == NULL || cp == NULL
        || ngx_http_session_project(r, ctx) == NULL)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    up->request = r;
    up->type = type;
    up->size = size;

    /* an Idempotency-Key's fingerprint has hashed the body already */

    if (ctx->body_hashed) {
        ngx_memcpy(up->sha256, ctx->body_sha256,
                   NGX_HTTP_SESSION_IMAGE_SHA256_LEN);

    } else {
        cln = ngx_pool_cleanup_add(r->pool, 0);
        if (cln == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        up->md = ngx_http_session_sha256_new();
        if (up->md == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        cln->handler = ngx_http_session_image_md_free;
        cln->data = up->md;
    }

    if (ngx_http_session_uuid_parse(sid, NGX_HTTP_SESSION_UUID_LEN,
                                    up->sid)
        != 0)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    /*
     * Under an Idempotency-Key, the first statement takes the key's lock
     * and reads its row, the last keeps the answer (decision (zd))
     */

    before = ngx_http_session_db_query_create(r, ctx->idem_key
                               ? NGX_HTTP_SESSION_SQL_IMAGE_STREAM_BEGIN_KEYED
                               : NGX_HTTP_SESSION_SQL_IMAGE_STREAM_BEGIN,
                               NULL);
    after = ngx_http_session_db_query_create(r, ctx->idem_key
                               ? NGX_HTTP_SESSION_SQL_IMAGE_STREAM_END_KEYED
                               : NGX_HTTP_SESSION_SQL_IMAGE_STREAM_END,
                               NULL);

    if (before == NULL || after == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(before, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(before, sid, 0, 0);
    ngx_http_session_work_params(before);

    ngx_http_session_db_param(after, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(after, sid, 0, 0);
    ngx_http_session_db_param(after, up->sequence, 0, 0);
    ngx_http_session_work_params(after);

    /* ngx_http_session_image_uploaded() renders after's answer */
    after->data = sid;

    cp->before = before;
    cp->copy = NGX_HTTP_SESSION_SQL_IMAGE_COPY;
    cp->after = after;
    cp->read = ngx_http_session_image_copy_read;
    cp->handler = ngx_http_session_image_copied;
    cp->data = up;

    if (ngx_http_session_db_copy_run(cp) != NGX_OK) {
        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE);
    }

    /* the copy's handler finalizes the request */
    r->main->count++;

    return NGX_DONE;
}


/*
 * The copy's handler: with the session's answer (go on or stop), then
 * with the committed image, or the failure, or once a stop has rolled
 * the transaction back (see db.h)
 */

static void
ngx_http_session_image_copied(ngx_http_session_db_copy_t *cp, PGresult *res)
{
    u_char                       *p;
    ngx_int_t                     rc;
    ngx_http_request_t           *r;
    ngx_http_session_ctx_t       *ctx;
    ngx_http_session_image_up_t  *up;

    up = cp->data;
    r = up->request;

    if (cp->stopped) {
        /* nothing was done: the answer decided on the first statement */

        if (up->outcome[0]) {
            ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
            rc = ngx_http_session_idem_outcome(r, ctx, (char *) up->outcome);

        } else {
            rc = ngx_http_session_error(r, up->err);
        }

        ngx_http_finalize_request(r, rc);
        return;
    }

    if (cp->phase != NGX_HTTP_SESSION_DB_COPY_DECIDE) {
        ngx_http_session_image_uploaded(cp->after, res);
        return;
    }

    up->err = ngx_http_session_image_begun(cp, res);

    if (up->err != NGX_HTTP_SESSION_ERR_LAST || up->outcome[0]) {
        /* rolled back first: the handler answers when it is over */
        ngx_http_session_db_copy_stop(cp);
        return;
    }

    /* int4 in network byte order, as COPY's binary format wants it */

    p = (u_char *) PQgetvalue(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS);

    *ngx_sprintf(up->sequence, "%uD",
                 ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
                 | ((uint32_t) p[2] << 8) | (uint32_t) p[3])
        = '\0';

    up->head_len = ngx_http_session_image_copy_head(up, p);

    ngx_http_session_db_copy_go(cp);
}


/*
 * The first statement's row: the check columns, the sequence (NULL: no
 * image taken), and under a key its two columns.  The key is judged
 * first, as the statement of a smaller image does: an outcome other than
 * "new" is kept in up->outcome.  NGX_HTTP_SESSION_ERR_LAST: go on.
 */

static ngx_http_session_err_e
ngx_http_session_image_begun(ngx_http_session_db_copy_t *cp, PGresult *res)
{
    int                           n;
    char                         *outcome;
    ngx_http_session_ctx_t       *ctx;
    ngx_http_session_err_e        err;
    ngx_http_session_image_up_t  *up;

    up = cp->data;
    ctx = ngx_http_get_module_ctx(up->request, ngx_http_session_module);

    n = NGX_HTTP_SESSION_CHECK_NCOLS + 1
        + (ctx->idem_key ? NGX_HTTP_SESSION_IDEM_NCOLS : 0);

    if (PQntuples(res) != 1 || PQnfields(res) != n) {
        ngx_log_error(NGX_LOG_ERR, up->request->connection->log, 0,
                      "session db: unexpected upload row");
        return NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    if (ctx->idem_key) {
        outcome = PQgetvalue(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS + 1
                                     + NGX_HTTP_SESSION_IDEM_COL_OUTCOME);

        if (ngx_strcmp(outcome, "new") != 0) {
            ngx_cpystrn(up->outcome, (u_char *) outcome,
                        sizeof(up->outcome));
            return NGX_HTTP_SESSION_ERR_LAST;
        }
    }

    err = ngx_http_session_check(cp->before, res, 0, 1);

    if (err == NGX_HTTP_SESSION_ERR_LAST
        && PQgetisnull(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS))
    {
        /* the session may be used but took no image: it is completed */
        err = NGX_HTTP_SESSION_ERR_SESSION_COMPLETED;
    }

    if (err == NGX_HTTP_SESSION_ERR_LAST
        && PQgetlength(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS) != 4)
    {
        err = NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    return err;
}


/* the signature of COPY's binary format, its flags and extension size */
static u_char  ngx_http_session_image_copy_sig[] = {
    'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0,
    0, 0, 0, 0,  0, 0, 0, 0
};


/*
 * The data's start: the header, the row's six fields up to the bytes of
 * content (whose length is known), see NGX_HTTP_SESSION_SQL_IMAGE_COPY
 */

static size_t
ngx_http_session_image_copy_head(ngx_http_session_image_up_t *up,
    u_char *sequence)
{
    u_char       *p;
    size_t        len;
    const char   *type;

    type = ngx_http_session_image_type_name(up->type);
    len = ngx_strlen(type);

    p = ngx_cpymem(up->head, ngx_http_session_image_copy_sig,
                   sizeof(ngx_http_session_image_copy_sig));

    p = ngx_http_session_image_be16(p, 6);

    p = ngx_http_session_image_be32(p, NGX_HTTP_SESSION_UUID_BIN_LEN);
    p = ngx_cpymem(p, up->sid, NGX_HTTP_SESSION_UUID_BIN_LEN);

    p = ngx_http_session_image_be32(p, 4);
    p = ngx_cpymem(p, sequence, 4);

    p = ngx_http_session_image_be32(p, (uint32_t) len);
    p = ngx_cpymem(p, type, len);

    p = ngx_http_session_image_be32(p, 4);
    p = ngx_http_session_image_be32(p, (uint32_t) up->size);

    p = ngx_http_session_image_be32(p, (uint32_t) up->size);

    return p - up->head;
}


/* the data's end: the SHA-256 field and the end of the rows */

static size_t
ngx_http_session_image_copy_tail(ngx_http_session_image_up_t *up)
{
    u_char        *p;
    unsigned int   len;

    if (up->md) {
        if (EVP_DigestFinal_ex(up->md, up->sha256, &len) != 1
            || len != NGX_HTTP_SESSION_IMAGE_SHA256_LEN)
        {
            return 0;
        }
    }

    p = ngx_http_session_image_be32(up->tail,
                                    NGX_HTTP_SESSION_IMAGE_SHA256_LEN);
    p = ngx_cpymem(p, up->sha256, NGX_HTTP_SESSION_IMAGE_SHA256_LEN);
    p = ngx_http_session_image_be16(p, 0xffff);

    return p - up->tail;
}


/* the COPY's next bytes: the start, the body as it is read, the end */

static ssize_t
ngx_http_session_image_copy_read(ngx_http_session_db_copy_t *cp,
    u_char *buf, size_t size)
{
    size_t                        n, m;
    ssize_t                       got;
    ngx_http_session_image_up_t  *up;

    up = cp->data;
    n = 0;

    if (up->head_pos < up->head_len) {
        m = ngx_min(size, up->head_len - up->head_pos);
        ngx_memcpy(buf, up->head + up->head_pos, m);
        up->head_pos += m;
        n += m;
    }

    while (n < size && up->offset < up->size) {
        got = ngx_http_session_body_read(up->request, up->offset, buf + n,
                                  (size_t) ngx_min((off_t) (size - n),
                                                   up->size - up->offset));
        if (got <= 0) {
            return NGX_ERROR;
        }

        if (up->md && EVP_DigestUpdate(up->md, buf + n, got) != 1) {
            return NGX_ERROR;
        }

        up->offset += got;
        n += got;
    }

    if (n < size && up->offset == up->size) {

        if (up->tail_len == 0) {
            up->tail_len = ngx_http_session_image_copy_tail(up);

            if (up->tail_len == 0) {
                return NGX_ERROR;
            }
        }

        m = ngx_min(size - n, up->tail_len - up->tail_pos);
        ngx_memcpy(buf + n, up->tail + up->tail_pos, m);
        up->tail_pos += m;
        n += m;
    }

    return n;
}


static u_char *
ngx_http_session_image_be32(u_char *p, uint32_t v)
{
    *p++ = (u_char) (v >> 24);
    *p++ = (u_char) (v >> 16);
    *p++ = (u_char) (v >> 8);
    *p++ = (u_char) v;

    return p;
}


static u_char *
ngx_http_session_image_be16(u_char *p, uint32_t v)
{
    *p++ = (u_char) (v >> 8);
    *p++ = (u_char) v;

    return p;
}


static void
ngx_http_session_image_md_free(void *data)
{
    EVP_MD_CTX_free(data);
}


/* the check columns and the new image's, see the statement */

static void
ngx_http_session_image_uploaded(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    size_t                   len;
    u_char                  *p, *sid;
    ngx_int_t                rc;
    ngx_buf_t               *b;
    ngx_http_request_t      *r;
    ngx_http_session_err_e   err;

    r = q->request;
    sid = q->data;

    if (ngx_http_session_work_held(q, res, &rc) == NGX_DONE) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    err = ngx_http_session_check(q, res, 0, 1);

    if (err == NGX_HTTP_SESSION_ERR_LAST
        && PQgetisnull(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS))
    {
        /* the session may be used but took no image: it is completed */
        err = NGX_HTTP_SESSION_ERR_SESSION_COMPLETED;
    }

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_finalize_request(r, ngx_http_session_error(r, err));
        return;
    }

    b = ngx_http_session_render_image(r, res, 0,
                                      NGX_HTTP_SESSION_CHECK_NCOLS);

    len = sizeof("/api/v1/sessions//images/") - 1
          + 2 * NGX_HTTP_SESSION_UUID_LEN;

    p = ngx_pnalloc(r->pool, len);

    if (b == NULL || p == NULL
        || ngx_http_session_header_add(r, &ngx_http_session_location, p, len)
           == NULL)
    {
        ngx_http_finalize_request(r, ngx_http_session_error(r,
                                             NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    p = ngx_sprintf(p, "/api/v1/sessions/%s/images/", sid);
    ngx_http_session_uuid_format((u_char *) PQgetvalue(res, 0,
                                  NGX_HTTP_SESSION_CHECK_NCOLS
                                  + NGX_HTTP_SESSION_COL_I_ID),
                                 p);

    ngx_http_finalize_request(r, ngx_http_session_send_json(r,
                                                     NGX_HTTP_CREATED, b));
}


/* GET /api/v1/sessions/{sid}/images */

ngx_int_t
ngx_http_session_image_list(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    u_char                           *sid, *ack, *after, *rows;
    ngx_int_t                         rc;
    long long                         limit;
    ngx_http_session_db_query_t      *q;
    ngx_http_session_image_args_t     args;

    args.limit = NGX_HTTP_SESSION_IMAGE_LIST_DEFAULT;
    args.ack = NULL;
    args.after = NULL;

    rc = ngx_http_session_args(r, ngx_http_session_image_list_args, &args);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    limit = args.limit;
    ack = args.ack;
    after = args.after;

    sid = ngx_http_session_image_uuid(r, ctx->route.sid, ctx->route.sid_len,
                                      &rc);
    if (sid == NULL) {
        return (rc == NGX_ERROR)
               ? ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL)
               : ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND);
    }

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IMAGE_LIST,
                                       ngx_http_session_image_listed);
    rows = ngx_pnalloc(r->pool, NGX_INT64_LEN + 1);

    if (q == NULL || rows == NULL
        || ngx_http_session_project(r, ctx) == NULL)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    /* one row more than asked tells whether there is a next page */
    *ngx_sprintf(rows, "%L", (int64_t) limit + 1) = '\0';

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(q, sid, 0, 0);
    ngx_http_session_db_param(q, ack, 0, 0);
    ngx_http_session_db_param(q, after ? after : (u_char *) "0", 0, 0);
    ngx_http_session_db_param(q, rows, 0, 0);

    q->data = (void *) (uintptr_t) limit;

    return ngx_http_session_run(r, q);
}


/* the check columns and an image per row, NULL when there is none */

/* "acknowledged": true or false, as the statement's text */

static ngx_int_t
ngx_http_session_image_list_ack(ngx_http_request_t *r, ngx_str_t *value,
    void *field, ngx_uint_t data)
{
    if (value->len == 4 && ngx_strncmp(value->data, "true", 4) == 0) {
        *(u_char **) field = (u_char *) "true";

    } else if (value->len == 5 && ngx_strncmp(value->data, "false", 5) == 0) {
        *(u_char **) field = (u_char *) "false";

    } else {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_ACKNOWLEDGED);
    }

    return NGX_DECLINED;
}


/* "cursor": the sequence of the page's last image, as text */

static ngx_int_t
ngx_http_session_image_list_cursor(ngx_http_request_t *r, ngx_str_t *value,
    void *field, ngx_uint_t data)
{
    u_char     *after;
    long long   sequence;

    if (ngx_http_session_cursor_decode_image(value->data, value->len,
                                             &sequence)
        != 0
        || sequence < 0 || sequence > NGX_MAX_INT32_VALUE)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_CURSOR);
    }

    after = ngx_pnalloc(r->pool, NGX_INT64_LEN + 1);
    if (after == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    *ngx_sprintf(after, "%L", (int64_t) sequence) = '\0';

    *(u_char **) field = after;

    return NGX_DECLINED;
}


static void
ngx_http_session_image_listed(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    int                      n, limit;
    size_t                   cursor_len;
    int64_t                  last;
    ngx_buf_t               *b;
    ngx_http_request_t      *r;
    ngx_http_session_err_e   err;
    u_char                   cursor[NGX_HTTP_SESSION_CURSOR_MAX];

    r = q->request;
    limit = (int) (uintptr_t) q->data;

    err = ngx_http_session_check(q, res, 0, 1);

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_finalize_request(r, ngx_http_session_error(r, err));
        return;
    }

    n = PQntuples(res);

    if (PQgetisnull(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS)) {
        n = 0;
    }

    cursor_len = 0;

    if (n > limit) {
        n = limit;

        if (ngx_http_session_render_int4(res, n - 1,
                                         NGX_HTTP_SESSION_CHECK_NCOLS
                                         + NGX_HTTP_SESSION_COL_I_SEQUENCE,
                                         &last)
            != NGX_OK)
        {
            ngx_http_finalize_request(r, ngx_http_session_error(r,
                                             NGX_HTTP_SESSION_ERR_INTERNAL));
            return;
        }

        cursor_len = ngx_http_session_cursor_encode_image(cursor,
                                                          (long long) last);
    }

    b = ngx_http_session_render_images(r, res, NGX_HTTP_SESSION_CHECK_NCOLS,
                                       n, cursor, cursor_len);
    if (b == NULL) {
        ngx_http_finalize_request(r, ngx_http_session_error(r,
                                             NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_session_send_json(r, NGX_HTTP_OK,
                                                            b));
}


/* GET .../images/{iid} and POST .../images/{iid}/ack */

ngx_int_t
ngx_http_session_image_get(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    ngx_int_t                     rc;
    ngx_http_session_db_query_t  *q;

    rc = ngx_http_session_no_args(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (ctx->route.id == NGX_HTTP_SESSION_ROUTE_IMAGE_ACK) {
        q = ngx_http_session_work_query(r, NGX_HTTP_SESSION_STMT_IMAGE_ACK,
                                        NGX_HTTP_SESSION_STMT_IMAGE_ACK_KEYED,
                                        ngx_http_session_image_one);

    } else {
        q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IMAGE_GET,
                                           ngx_http_session_image_one);
    }

    if (q == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    rc = ngx_http_session_image_ids(r, ctx, q);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    ngx_http_session_work_params(q);

    return ngx_http_session_run(r, q);
}


/*
 * The check columns and the image's (NULL: no such image in the session,
 * or, for an acknowledgement, none made: the last column tells whether
 * the image exists, acknowledged already)
 */

static void
ngx_http_session_image_one(ngx_http_session_db_query_t *q, PGresult *res)
{
    int                      present;
    ngx_int_t                rc;
    ngx_buf_t               *b;
    ngx_http_request_t      *r;
    ngx_http_session_ctx_t  *ctx;
    ngx_http_session_err_e   err;

    r = q->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ngx_http_session_work_held(q, res, &rc) == NGX_DONE) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    err = ngx_http_session_check(q, res, 0, 1);

    if (err == NGX_HTTP_SESSION_ERR_LAST
        && PQgetisnull(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS))
    {
        present = ctx->route.id == NGX_HTTP_SESSION_ROUTE_IMAGE_ACK
                  && PQnfields(res) == NGX_HTTP_SESSION_CHECK_NCOLS
                                       + NGX_HTTP_SESSION_IMAGE_NCOLS + 1
                                       + ngx_http_session_work_ncols(q)
                  && PQgetlength(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS
                                         + NGX_HTTP_SESSION_IMAGE_NCOLS)
                     == 1
                  && PQgetvalue(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS
                                        + NGX_HTTP_SESSION_IMAGE_NCOLS)[0];

        err = present ? NGX_HTTP_SESSION_ERR_IMAGE_ACKNOWLEDGED
                      : NGX_HTTP_SESSION_ERR_IMAGE_NOT_FOUND;
    }

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_finalize_request(r, ngx_http_session_error(r, err));
        return;
    }

    b = ngx_http_session_render_image(r, res, 0,
                                      NGX_HTTP_SESSION_CHECK_NCOLS);
    if (b == NULL) {
        ngx_http_finalize_request(r, ngx_http_session_error(r,
                                             NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_session_send_json(r, NGX_HTTP_OK,
                                                            b));
}


/* GET .../images/{iid}/content */

ngx_int_t
ngx_http_session_image_content(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    u_char                       *tags, *chunk;
    ngx_int_t                     rc;
    ngx_http_session_loc_conf_t  *slcf;
    ngx_http_session_db_query_t  *q;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    rc = ngx_http_session_no_args(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IMAGE_CONTENT,
                                       ngx_http_session_image_bytes);
    if (q == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    rc = ngx_http_session_image_ids(r, ctx, q);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    tags = ngx_http_session_image_tags(r);
    chunk = ngx_pnalloc(r->pool, NGX_SIZE_T_LEN + 1);

    if (tags == NULL || chunk == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    *ngx_sprintf(chunk, "%uz", slcf->image_chunk_size) = '\0';

    ngx_http_session_db_param(q, (*tags == '\0') ? NULL : tags, 0, 0);
    ngx_http_session_db_param(q, r->header_only ? "false" : "true", 0, 0);
    ngx_http_session_db_param(q, chunk, 0, 0);

    q->keep_result = 1;

    return ngx_http_session_run(r, q);
}


/* the query's handler owns res (keep_result) */

static void
ngx_http_session_image_bytes(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_int_t                     rc;
    ngx_http_request_t           *r;
    ngx_http_session_err_e        err;
    ngx_http_session_image_dl_t  *dl;

    r = q->request;

    if (res == NULL) {
        ngx_http_finalize_request(r, ngx_http_session_error(r,
                                        NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE));
        return;
    }

    /* from here on the download's cleanup frees its results */

    dl = ngx_http_session_image_download(r, q);
    if (dl == NULL) {
        PQclear(res);
        ngx_http_finalize_request(r, ngx_http_session_error(r,
                                             NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    dl->sending = res;

    err = ngx_http_session_check(q, res, 0, 1);

    if (err == NGX_HTTP_SESSION_ERR_LAST
        && PQgetisnull(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS))
    {
        err = NGX_HTTP_SESSION_ERR_IMAGE_NOT_FOUND;
    }

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_finalize_request(r, ngx_http_session_error(r, err));
        return;
    }

    rc = ngx_http_session_image_send_bytes(r, dl, res);

    if (rc == NGX_BUSY) {
        ngx_http_session_image_wait(r);
        return;
    }

    ngx_http_finalize_request(r, rc);
}


/*
 * A download's state: the first query's result (the headers and the
 * first slice), then a slice at a time, asked for while the previous one
 * is being sent: at most two slices in the worker, whatever the image's
 * size, and no database connection held while the client reads.
 */

static ngx_http_session_image_dl_t *
ngx_http_session_image_download(ngx_http_request_t *r,
    ngx_http_session_db_query_t *first)
{
    ngx_pool_cleanup_t           *cln;
    ngx_http_session_image_dl_t  *dl;

    dl = ngx_pcalloc(r->pool, sizeof(ngx_http_session_image_dl_t));
    if (dl == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_session_image_clear;
    cln->data = dl;

    dl->request = r;
    dl->first = first;

    return dl;
}


static ngx_int_t
ngx_http_session_image_send_bytes(ngx_http_request_t *r,
    ngx_http_session_image_dl_t *dl, PGresult *res)
{
    u_char                       *p, *etag;
    size_t                        want;
    uint32_t                      size;
    ngx_int_t                     rc;
    ngx_table_elt_t              *h;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    /*
     * after the check columns: content type, etag, size, not modified,
     * the first slice; text as its bytes (NUL-terminated by libpq)
     */

    if (PQnfields(res) != NGX_HTTP_SESSION_CHECK_NCOLS + 5
        || PQgetlength(res, 0, 3) != NGX_HTTP_SESSION_IMAGE_ETAG_LEN
        || PQgetlength(res, 0, 4) != 4 || PQgetlength(res, 0, 5) != 1)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "session db: unexpected image content row");
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    /* int4 in network byte order */
    p = (u_char *) PQgetvalue(res, 0, 4);
    size = ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
           | ((uint32_t) p[2] << 8) | (uint32_t) p[3];

    etag = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_IMAGE_ETAG_LEN + 2);
    if (etag == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_sprintf(etag, "\"%*s\"", (size_t) NGX_HTTP_SESSION_IMAGE_ETAG_LEN,
                PQgetvalue(res, 0, 3));

    h = ngx_http_session_header_add(r, &ngx_http_session_etag, etag,
                                    NGX_HTTP_SESSION_IMAGE_ETAG_LEN + 2);
    if (h == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    r->headers_out.etag = h;

    if (PQgetvalue(res, 0, 5)[0]) {
        r->headers_out.status = NGX_HTTP_NOT_MODIFIED;
        r->headers_out.content_length_n = -1;
        r->header_only = 1;

        return ngx_http_send_header(r);
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_type.data = (u_char *) PQgetvalue(res, 0, 2);
    r->headers_out.content_type.len = PQgetlength(res, 0, 2);
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_length_n = size;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    want = ngx_min((size_t) size, slcf->image_chunk_size);

    if (size == 0
        || PQgetisnull(res, 0, 6)
        || (size_t) PQgetlength(res, 0, 6) != want)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "session db: image content of %d bytes, expected %uz "
                      "of %uD", PQgetlength(res, 0, 6), want, size);
        return NGX_ERROR;
    }

    dl->size = size;
    dl->chunk = slcf->image_chunk_size;
    dl->asked = want;

    /* the first slice goes out as the next one would */

    dl->ready = res;
    dl->sending = NULL;
    dl->ready_col = 6;

    r->write_event_handler = ngx_http_session_image_writer;

    return ngx_http_session_image_pump(r, dl);
}


/*
 * Moves a download on: the slice being sent is freed once the client
 * has it all, the fetched one takes its place, and the next one is asked
 * for.  NGX_BUSY: more to come (from the client's write events or the
 * next slice's answer); otherwise the request's outcome: every byte is
 * in nginx's output chain (NGX_OK, NGX_AGAIN), or NGX_ERROR.
 */

static ngx_int_t
ngx_http_session_image_pump(ngx_http_request_t *r,
    ngx_http_session_image_dl_t *dl)
{
    u_char                       *p;
    size_t                        len;
    ngx_int_t                     rc;
    ngx_buf_t                    *b;
    ngx_http_session_db_query_t  *q;

    rc = NGX_OK;

    for ( ;; ) {

        if (dl->sending && ngx_buf_size(dl->buf) == 0) {
            PQclear(dl->sending);
            dl->sending = NULL;
        }

        if (dl->sending || dl->ready == NULL) {
            break;
        }

        p = (u_char *) PQgetvalue(dl->ready, 0, dl->ready_col);
        len = PQgetlength(dl->ready, 0, dl->ready_col);

        dl->sending = dl->ready;
        dl->ready = NULL;
        dl->sent += len;

        if (dl->buf == NULL) {
            dl->buf = ngx_calloc_buf(r->pool);
            if (dl->buf == NULL) {
                return NGX_ERROR;
            }

            dl->out.buf = dl->buf;
        }

        /* the PGresult's own bytes, freed once sent */

        b = dl->buf;
        ngx_memzero(b, sizeof(ngx_buf_t));

        b->pos = p;
        b->last = p + len;
        b->memory = 1;
        b->flush = 1;

        if (dl->sent == dl->size) {
            b->last_buf = (r == r->main) ? 1 : 0;
            b->last_in_chain = 1;
        }

        dl->out.next = NULL;

        rc = ngx_http_output_filter(r, &dl->out);

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }
    }

    if (dl->sent == dl->size) {
        /* nginx sends the rest, as for any response */
        return rc;
    }

    if (dl->querying || dl->ready || dl->asked >= dl->size) {
        return NGX_BUSY;
    }

    /* the next slice, while this one is being sent */

    q = dl->query;

    if (q == NULL) {
        q = ngx_http_session_db_query_stmt(r,
                                           NGX_HTTP_SESSION_STMT_IMAGE_SLICE,
                                           ngx_http_session_image_slice);
        if (q == NULL) {
            return NGX_ERROR;
        }

        /* the image and session ids of the first query */
        ngx_http_session_db_param(q, dl->first->values[2], 0, 0);
        ngx_http_session_db_param(q, dl->first->values[1], 0, 0);
        ngx_http_session_db_param(q, dl->from, 0, 0);
        ngx_http_session_db_param(q, dl->count, 0, 0);

        q->keep_result = 1;
        q->data = dl;

        dl->query = q;

    } else {
        ngx_http_session_db_query_again(q);
    }

    len = (size_t) ngx_min((off_t) dl->chunk, dl->size - dl->asked);

    /* substring() counts from 1 */
    *ngx_sprintf(dl->from, "%O", dl->asked + 1) = '\0';
    *ngx_sprintf(dl->count, "%uz", len) = '\0';

    dl->want = len;
    dl->asked += len;
    dl->ready_col = 0;

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "session image: download cut, the database is "
                      "unavailable");
        return NGX_ERROR;
    }

    dl->querying = 1;

    return NGX_BUSY;
}


/* the answer to a slice: its handler owns res (keep_result) */

static void
ngx_http_session_image_slice(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_int_t                     rc;
    ngx_http_request_t           *r;
    ngx_http_session_image_dl_t  *dl;

    r = q->request;
    dl = q->data;

    dl->querying = 0;

    if (res == NULL
        || ngx_http_session_db_result_ok(q, res) != NGX_OK
        || PQntuples(res) != 1
        || PQnfields(res) != 1
        || PQgetisnull(res, 0, 0)
        || (size_t) PQgetlength(res, 0, 0) != dl->want)
    {
        /* the status line went out long ago: the connection is closed */

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "session image: download cut at byte %O of %O: %s",
                      dl->asked - (off_t) dl->want, dl->size,
                      res == NULL ? "the database is unavailable"
                      : PQntuples(res) == 0 ? "the image is gone"
                      : "unexpected slice");

        if (res) {
            PQclear(res);
        }

        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    dl->ready = res;

    rc = ngx_http_session_image_pump(r, dl);

    if (rc == NGX_BUSY) {
        ngx_http_session_image_wait(r);
        return;
    }

    ngx_http_finalize_request(r, rc);
}


/* the client's connection is writable again (or send_timeout ran out) */

static void
ngx_http_session_image_writer(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_event_t                  *wev;
    ngx_connection_t             *c;
    ngx_http_session_image_dl_t  *dl;

    c = r->connection;
    wev = c->write;

    if (wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "client timed out");
        c->timedout = 1;

        ngx_http_finalize_request(r, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (wev->delayed || r->aio) {
        ngx_http_session_image_wait(r);
        return;
    }

    rc = ngx_http_output_filter(r, NULL);

    if (rc == NGX_ERROR) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    dl = ngx_http_session_image_dl(r);
    if (dl == NULL) {
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    rc = ngx_http_session_image_pump(r, dl);

    if (rc == NGX_BUSY) {
        ngx_http_session_image_wait(r);
        return;
    }

    ngx_http_finalize_request(r, rc);
}


/*
 * Waits for the client while bytes are buffered for it, send_timeout at
 * most between two writes (as nginx's own writer); while nothing is
 * buffered, the next slice's query has its own timeout.
 */

static void
ngx_http_session_image_wait(ngx_http_request_t *r)
{
    ngx_event_t               *wev;
    ngx_connection_t          *c;
    ngx_http_core_loc_conf_t  *clcf;

    c = r->connection;
    wev = c->write;

    clcf = ngx_http_get_module_loc_conf(r->main, ngx_http_core_module);

    if (r->buffered || c->buffered || r->postponed) {
        if (!wev->delayed) {
            ngx_add_timer(wev, clcf->send_timeout);
        }

    } else if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    if (ngx_handle_write_event(wev, clcf->send_lowat) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_ERROR);
    }
}


static ngx_http_session_image_dl_t *
ngx_http_session_image_dl(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t  *cln;

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_session_image_clear) {
            return cln->data;
        }
    }

    return NULL;
}


static void
ngx_http_session_image_clear(void *data)
{
    ngx_http_session_image_dl_t  *dl = data;

    if (dl->sending) {
        PQclear(dl->sending);
        dl->sending = NULL;
    }

    if (dl->ready) {
        PQclear(dl->ready);
        dl->ready = NULL;
    }
}


/* helpers */

/*
 * The canonical text of a UUID from the path, NUL-terminated; NULL and
 * *rc NGX_DECLINED when malformed, NGX_ERROR when out of memory.
 */

static u_char *
ngx_http_session_image_uuid(ngx_http_request_t *r, const u_char *s,
    size_t len, ngx_int_t *rc)
{
    u_char  *p, uuid[NGX_HTTP_SESSION_UUID_BIN_LEN];

    if (ngx_http_session_uuid_parse(s, len, uuid) != 0) {
        *rc = NGX_DECLINED;
        return NULL;
    }

    p = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_UUID_LEN + 1);
    if (p == NULL) {
        *rc = NGX_ERROR;
        return NULL;
    }

    ngx_http_session_uuid_format(uuid, p);
    p[NGX_HTTP_SESSION_UUID_LEN] = '\0';

    *rc = NGX_OK;

    return p;
}


/*
 * The first three parameters: project, session, image; NGX_DECLINED when
 * they are added, else what answering returned.  A malformed session id
 * is 404 at once; a malformed image id goes as NULL, so that the session
 * is judged first and the answer is "image not found".
 */

static ngx_int_t
ngx_http_session_image_ids(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx,
    ngx_http_session_db_query_t *q)
{
    u_char     *sid, *iid;
    ngx_int_t   rc;

    sid = ngx_http_session_image_uuid(r, ctx->route.sid, ctx->route.sid_len,
                                      &rc);
    if (sid == NULL) {
        return (rc == NGX_ERROR)
               ? ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL)
               : ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND);
    }

    iid = ngx_http_session_image_uuid(r, ctx->route.iid, ctx->route.iid_len,
                                      &rc);
    if (iid == NULL && rc == NGX_ERROR) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    if (ngx_http_session_project(r, ctx) == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(q, sid, 0, 0);
    ngx_http_session_db_param(q, iid, 0, 0);

    return NGX_DECLINED;
}


/*
 * If-None-Match as a text[] literal for image_content(): "{*}" for "*",
 * else the opaque tags that could be ours (64 lower-case hex digits),
 * weak or strong alike (RFC 9110 compares them weakly there); "" when
 * there is none.
 */

static u_char *
ngx_http_session_image_tags(ngx_http_request_t *r)
{
    u_char      *p, *end, *dst, *start, *tags;
    ngx_uint_t   n, i;

    if (r->headers_in.if_none_match == NULL) {
        return (u_char *) "";
    }

    p = r->headers_in.if_none_match->value.data;
    end = p + r->headers_in.if_none_match->value.len;

    while (p < end && (*p == ' ' || *p == '\t')) {
        p++;
    }

    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) {
        end--;
    }

    if (end - p == 1 && *p == '*') {
        return (u_char *) "{*}";
    }

    tags = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_IMAGE_TAGS_MAX
                                * (NGX_HTTP_SESSION_IMAGE_ETAG_LEN + 1) + 2);
    if (tags == NULL) {
        return NULL;
    }

    dst = tags;
    n = 0;

    while (p < end && n < NGX_HTTP_SESSION_IMAGE_TAGS_MAX) {

        while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) {
            p++;
        }

        if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
            p += 2;
        }

        if (p == end || *p != '"') {
            /* not an entity tag: skip to the next comma */
            while (p < end && *p != ',') {
                p++;
            }

            continue;
        }

        start = ++p;

        while (p < end && *p != '"') {
            p++;
        }

        if (p == end) {
            break;
        }

        if (p - start == NGX_HTTP_SESSION_IMAGE_ETAG_LEN) {
            for (i = 0; i < NGX_HTTP_SESSION_IMAGE_ETAG_LEN; i++) {
                if (!((start[i] >= '0' && start[i] <= '9')
                      || (start[i] >= 'a' && start[i] <= 'f')))
                {
                    break;
                }
            }

            if (i == NGX_HTTP_SESSION_IMAGE_ETAG_LEN) {
                *dst++ = n ? ',' : '{';
                dst = ngx_cpymem(dst, start, NGX_HTTP_SESSION_IMAGE_ETAG_LEN);
                n++;
            }
        }

        p++;
    }

    if (n == 0) {
        return (u_char *) "";
    }

    *dst++ = '}';
    *dst = '\0';

    return tags;
}
