/*
 * A streamed upload: an image over session_image_chunk_size, from nginx's
 * temp file to PostgreSQL in one transaction on an upload connection of
 * its own (db_copy.c): BEGIN with the session's update (and, with an
 * Idempotency-Key, the key's lock and row), COPY ... FROM STDIN in binary
 * format a chunk at a time, then the announcement, the kept answer and
 * COMMIT.  The SHA-256 and the signature are checked on the way
 * (decisions (za), (zd)).  The answer of an upload, streamed or not, is
 * written here too.
 */

#include "ngx_http_session_image_stream.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_imagecheck.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"


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


/*
 * NGX_HTTP_SESSION_IMAGE_* of the Content-Type; name is the media type
 * as the 415 message names it: lower case, no parameters, "none" when
 * there is none.
 */

int
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


ngx_int_t
ngx_http_session_image_upload_check(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, const u_char *p, size_t len, int *type,
    u_char **sid)
{
    ngx_int_t  rc;
    ngx_str_t  name;

    *type = ngx_http_session_image_type_of(r, &name);

    if (!ngx_http_session_image_signature_ok(*type, p, len)) {
        return ngx_http_session_error_value(r,
                                          NGX_HTTP_SESSION_ERR_IMAGE_INVALID,
                                          &name);
    }

    /* stage 5 is PostgreSQL's, but for an id that cannot exist */

    *sid = ngx_http_session_route_sid(r, ctx, &rc);
    if (*sid == NULL) {
        return rc;
    }

    return NGX_DECLINED;
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

ngx_int_t
ngx_http_session_image_stream(ngx_http_request_t *r, off_t size)
{
    int                            type;
    u_char                        *sid;
    ssize_t                        n;
    ngx_int_t                      rc;
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

    for (n = 0; n < (ssize_t) sizeof(head); n += rc) {
        rc = ngx_http_session_body_read(r, n, head + n, sizeof(head) - n);

        if (rc == NGX_ERROR) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        if (rc == 0) {
            break;
        }
    }

    rc = ngx_http_session_image_upload_check(r, ctx, head, n, &type, &sid);
    if (rc != NGX_DECLINED) {
        return rc;
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

    /* a key's burst of uploads takes turns with other keys' (decision (yk)) */
    ngx_memcpy(&cp->owner, ctx->principal.hash, sizeof(ngx_uint_t));

    /*
     * One session's uploads hold a connection one at a time (decision
     * (yl)); a keyed one goes as it comes, so that a repeat of a keyed
     * upload still streaming finds its key taken (409, decision (zd))
     */

    if (ctx->idem_key == NULL) {
        ngx_memcpy(&cp->serial, up->sid, sizeof(ngx_uint_t));
    }

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

void
ngx_http_session_image_uploaded(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    size_t                   len;
    u_char                  *p, *sid;
    ngx_buf_t               *b;
    ngx_http_request_t      *r;
    ngx_http_session_err_e   err;

    r = q->request;
    sid = q->data;

    if (ngx_http_session_work_held(q, res) == NGX_DONE) {
        return;
    }

    /* a session that may be used but took no image is completed */

    err = ngx_http_session_check_image(q, res,
                                       NGX_HTTP_SESSION_ERR_SESSION_COMPLETED);

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_session_refuse(r, err);
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
        ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_INTERNAL);
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
