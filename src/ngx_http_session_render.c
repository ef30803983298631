/*
 * Documents from binary-format rows (see ngx_http_session_render.h).
 */

#include "ngx_http_session_render.h"


#define NGX_HTTP_SESSION_LIST_HEAD  "{\"data\": ["
/* the longer of the two endings, the cursor's quotes included */
#define NGX_HTTP_SESSION_LIST_TAIL                                            \
    "], \"has_more\": false, \"next_cursor\": \"\"}"


static u_char *ngx_http_session_render_tail(u_char *p, u_char *cursor,
    size_t cursor_len);
static ngx_buf_t *ngx_http_session_render_bad(ngx_http_request_t *r);


static ngx_inline uint32_t
ngx_http_session_render_be32(const u_char *p)
{
    return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
           | ((uint32_t) p[2] << 8) | (uint32_t) p[3];
}


ngx_int_t
ngx_http_session_render_int4(PGresult *res, int row, int col, int64_t *n)
{
    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 4) {
        return NGX_ERROR;
    }

    *n = (int32_t) ngx_http_session_render_be32(
                                  (u_char *) PQgetvalue(res, row, col));

    return NGX_OK;
}


ngx_int_t
ngx_http_session_render_time(PGresult *res, int row, int col, int64_t *us)
{
    u_char    *p;
    uint64_t   v;

    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 8) {
        return NGX_ERROR;
    }

    p = (u_char *) PQgetvalue(res, row, col);

    v = ((uint64_t) ngx_http_session_render_be32(p) << 32)
        | ngx_http_session_render_be32(p + 4);

    *us = (int64_t) v + NGX_HTTP_SESSION_DOC_PG_EPOCH_US;

    return NGX_OK;
}


static ngx_inline ngx_int_t
ngx_http_session_render_uuid(PGresult *res, int row, int col,
    const u_char **uuid)
{
    if (PQgetisnull(res, row, col)
        || PQgetlength(res, row, col) != NGX_HTTP_SESSION_UUID_BIN_LEN)
    {
        return NGX_ERROR;
    }

    *uuid = (u_char *) PQgetvalue(res, row, col);

    return NGX_OK;
}


ngx_int_t
ngx_http_session_render_read_session(PGresult *res, int row, int col,
    ngx_http_session_doc_session_t *s)
{
    if (PQnfields(res) < col + NGX_HTTP_SESSION_SESSION_NCOLS
        || row >= PQntuples(res))
    {
        return NGX_ERROR;
    }

    if (PQgetisnull(res, row, col + NGX_HTTP_SESSION_COL_S_ID)) {
        return NGX_DECLINED;
    }

    if (ngx_http_session_render_uuid(res, row,
                                     col + NGX_HTTP_SESSION_COL_S_ID, &s->id)
        != NGX_OK
        || ngx_http_session_render_uuid(res, row,
                                        col + NGX_HTTP_SESSION_COL_S_PROJECT,
                                        &s->project_id)
           != NGX_OK
        || ngx_http_session_render_int4(res, row,
                                        col + NGX_HTTP_SESSION_COL_S_IMAGES,
                                        &s->image_count)
           != NGX_OK
        || ngx_http_session_render_int4(res, row,
                                   col + NGX_HTTP_SESSION_COL_S_ACKNOWLEDGED,
                                   &s->acknowledged_count)
           != NGX_OK
        || ngx_http_session_render_time(res, row,
                                        col + NGX_HTTP_SESSION_COL_S_CREATED,
                                        &s->created_us)
           != NGX_OK
        || ngx_http_session_render_time(res, row,
                                        col + NGX_HTTP_SESSION_COL_S_EXPIRES,
                                        &s->expires_us)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    s->delivery_mode = (u_char *) PQgetvalue(res, row,
                                             col + NGX_HTTP_SESSION_COL_S_MODE);
    s->delivery_mode_len = PQgetlength(res, row,
                                       col + NGX_HTTP_SESSION_COL_S_MODE);

    s->status = (u_char *) PQgetvalue(res, row,
                                      col + NGX_HTTP_SESSION_COL_S_STATUS);
    s->status_len = PQgetlength(res, row,
                                col + NGX_HTTP_SESSION_COL_S_STATUS);

    if (PQgetisnull(res, row, col + NGX_HTTP_SESSION_COL_S_URL)) {
        s->webhook_url = NULL;
        s->webhook_url_len = 0;

    } else {
        s->webhook_url = (u_char *) PQgetvalue(res, row,
                                              col + NGX_HTTP_SESSION_COL_S_URL);
        s->webhook_url_len = PQgetlength(res, row,
                                         col + NGX_HTTP_SESSION_COL_S_URL);
    }

    s->completed = !PQgetisnull(res, row,
                                col + NGX_HTTP_SESSION_COL_S_COMPLETED);
    s->completed_us = 0;

    if (s->completed
        && ngx_http_session_render_time(res, row,
                                        col + NGX_HTTP_SESSION_COL_S_COMPLETED,
                                        &s->completed_us)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_session_render_read_image(PGresult *res, int row, int col,
    ngx_http_session_doc_image_t *im)
{
    if (PQnfields(res) < col + NGX_HTTP_SESSION_IMAGE_NCOLS
        || row >= PQntuples(res))
    {
        return NGX_ERROR;
    }

    if (PQgetisnull(res, row, col + NGX_HTTP_SESSION_COL_I_ID)) {
        return NGX_DECLINED;
    }

    if (ngx_http_session_render_uuid(res, row,
                                     col + NGX_HTTP_SESSION_COL_I_ID, &im->id)
        != NGX_OK
        || ngx_http_session_render_uuid(res, row,
                                        col + NGX_HTTP_SESSION_COL_I_SESSION,
                                        &im->session_id)
           != NGX_OK
        || ngx_http_session_render_int4(res, row,
                                        col + NGX_HTTP_SESSION_COL_I_SEQUENCE,
                                        &im->sequence)
           != NGX_OK
        || ngx_http_session_render_int4(res, row,
                                        col + NGX_HTTP_SESSION_COL_I_SIZE,
                                        &im->size)
           != NGX_OK
        || ngx_http_session_render_time(res, row,
                                        col + NGX_HTTP_SESSION_COL_I_CREATED,
                                        &im->created_us)
           != NGX_OK
        || PQgetlength(res, row, col + NGX_HTTP_SESSION_COL_I_SHA256) != 32)
    {
        return NGX_ERROR;
    }

    im->sha256 = (u_char *) PQgetvalue(res, row,
                                       col + NGX_HTTP_SESSION_COL_I_SHA256);
    im->content_type = (u_char *) PQgetvalue(res, row,
                                            col + NGX_HTTP_SESSION_COL_I_TYPE);
    im->content_type_len = PQgetlength(res, row,
                                       col + NGX_HTTP_SESSION_COL_I_TYPE);

    im->acknowledged = !PQgetisnull(res, row,
                                    col + NGX_HTTP_SESSION_COL_I_ACKNOWLEDGED);
    im->acknowledged_us = 0;

    if (im->acknowledged
        && ngx_http_session_render_time(res, row,
                                   col + NGX_HTTP_SESSION_COL_I_ACKNOWLEDGED,
                                   &im->acknowledged_us)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_buf_t *
ngx_http_session_render_bad(ngx_http_request_t *r)
{
    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "session db: a row is not what the statement returns");

    return NULL;
}


ngx_buf_t *
ngx_http_session_render_session(ngx_http_request_t *r, PGresult *res,
    int row, int col)
{
    ngx_buf_t                       *b;
    ngx_http_session_doc_session_t   s;

    if (ngx_http_session_render_read_session(res, row, col, &s) != NGX_OK) {
        return ngx_http_session_render_bad(r);
    }

    b = ngx_create_temp_buf(r->pool, ngx_http_session_doc_session_size(&s));
    if (b == NULL) {
        return NULL;
    }

    b->last = ngx_http_session_doc_session(b->last, &s);

    return b;
}


ngx_buf_t *
ngx_http_session_render_image(ngx_http_request_t *r, PGresult *res,
    int row, int col)
{
    ngx_buf_t                     *b;
    ngx_http_session_doc_image_t   im;

    if (ngx_http_session_render_read_image(res, row, col, &im) != NGX_OK) {
        return ngx_http_session_render_bad(r);
    }

    b = ngx_create_temp_buf(r->pool, ngx_http_session_doc_image_size(&im));
    if (b == NULL) {
        return NULL;
    }

    b->last = ngx_http_session_doc_image(b->last, &im);

    return b;
}


/*
 * The documents of rows 0 .. n - 1 from column col, of one kind: read
 * first (so that the buffer is sized once), then written with ", "
 * between them.
 */

typedef struct {
    size_t      size;
    ngx_int_t  (*read)(PGresult *res, int row, int col, void *doc);
    size_t     (*len)(const void *doc);
    u_char    *(*write)(u_char *p, const void *doc);
} ngx_http_session_render_kind_t;


static ngx_int_t
ngx_http_session_render_read_s(PGresult *res, int row, int col, void *doc)
{
    return ngx_http_session_render_read_session(res, row, col, doc);
}


static size_t
ngx_http_session_render_len_s(const void *doc)
{
    return ngx_http_session_doc_session_size(doc);
}


static u_char *
ngx_http_session_render_write_s(u_char *p, const void *doc)
{
    return ngx_http_session_doc_session(p, doc);
}


static ngx_int_t
ngx_http_session_render_read_i(PGresult *res, int row, int col, void *doc)
{
    return ngx_http_session_render_read_image(res, row, col, doc);
}


static size_t
ngx_http_session_render_len_i(const void *doc)
{
    return ngx_http_session_doc_image_size(doc);
}


static u_char *
ngx_http_session_render_write_i(u_char *p, const void *doc)
{
    return ngx_http_session_doc_image(p, doc);
}


static ngx_http_session_render_kind_t  ngx_http_session_render_sessions_kind = {
    sizeof(ngx_http_session_doc_session_t),
    ngx_http_session_render_read_s,
    ngx_http_session_render_len_s,
    ngx_http_session_render_write_s
};


static ngx_http_session_render_kind_t  ngx_http_session_render_images_kind = {
    sizeof(ngx_http_session_doc_image_t),
    ngx_http_session_render_read_i,
    ngx_http_session_render_len_i,
    ngx_http_session_render_write_i
};


/* reads the n documents into *docs; their bytes with separators */

static ngx_int_t
ngx_http_session_render_items(ngx_pool_t *pool, ngx_log_t *log,
    PGresult *res, int first, int col, int n,
    ngx_http_session_render_kind_t *kind, u_char **docs, size_t *len)
{
    int      i;
    u_char  *d;

    d = ngx_palloc(pool, (n ? n : 1) * kind->size);
    if (d == NULL) {
        return NGX_ERROR;
    }

    *len = 0;

    for (i = 0; i < n; i++) {
        if (kind->read(res, first + i, col, d + i * kind->size) != NGX_OK) {
            ngx_log_error(NGX_LOG_ERR, log, 0,
                          "session db: a row is not what the statement "
                          "returns");
            return NGX_ERROR;
        }

        *len += kind->len(d + i * kind->size) + sizeof(", ") - 1;
    }

    *docs = d;

    return NGX_OK;
}


static u_char *
ngx_http_session_render_write_items(u_char *p, u_char *docs, int n,
    ngx_http_session_render_kind_t *kind)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (i) {
            *p++ = ','; *p++ = ' ';
        }

        p = kind->write(p, docs + i * kind->size);
    }

    return p;
}


static ngx_buf_t *
ngx_http_session_render_list(ngx_http_request_t *r, PGresult *res, int col,
    int n, u_char *cursor, size_t cursor_len,
    ngx_http_session_render_kind_t *kind)
{
    size_t      len;
    u_char     *docs, *p;
    ngx_buf_t  *b;

    if (ngx_http_session_render_items(r->pool, r->connection->log, res, 0,
                                      col, n, kind, &docs, &len)
        != NGX_OK)
    {
        return NULL;
    }

    b = ngx_create_temp_buf(r->pool,
                            len + cursor_len
                            + sizeof(NGX_HTTP_SESSION_LIST_HEAD
                                     NGX_HTTP_SESSION_LIST_TAIL));
    if (b == NULL) {
        return NULL;
    }

    p = ngx_cpymem(b->last, NGX_HTTP_SESSION_LIST_HEAD,
                   sizeof(NGX_HTTP_SESSION_LIST_HEAD) - 1);
    p = ngx_http_session_render_write_items(p, docs, n, kind);

    b->last = ngx_http_session_render_tail(p, cursor, cursor_len);

    return b;
}


ngx_buf_t *
ngx_http_session_render_sessions(ngx_http_request_t *r, PGresult *res,
    int n, u_char *cursor, size_t cursor_len)
{
    return ngx_http_session_render_list(r, res, 0, n, cursor, cursor_len,
                                        &ngx_http_session_render_sessions_kind);
}


ngx_buf_t *
ngx_http_session_render_images(ngx_http_request_t *r, PGresult *res,
    int col, int n, u_char *cursor, size_t cursor_len)
{
    return ngx_http_session_render_list(r, res, col, n, cursor, cursor_len,
                                        &ngx_http_session_render_images_kind);
}


static u_char *
ngx_http_session_render_tail(u_char *p, u_char *cursor, size_t cursor_len)
{
    if (cursor_len == 0) {
        return ngx_cpymem(p, "], \"has_more\": false, \"next_cursor\": null}",
                          sizeof("], \"has_more\": false, "
                                 "\"next_cursor\": null}") - 1);
    }

    p = ngx_cpymem(p, "], \"has_more\": true, \"next_cursor\": \"",
                   sizeof("], \"has_more\": true, \"next_cursor\": \"") - 1);
    p = ngx_cpymem(p, cursor, cursor_len);
    *p++ = '"';
    *p++ = '}';

    return p;
}


ngx_buf_t *
ngx_http_session_render_poll(ngx_pool_t *pool, ngx_log_t *log, PGresult *res,
    int first, int n)
{
    size_t                           len;
    u_char                          *docs, *p;
    ngx_buf_t                       *b;
    ngx_http_session_doc_session_t   s;

    if (ngx_http_session_render_read_session(res, first, 0, &s) != NGX_OK) {
        goto bad;
    }

    if (ngx_http_session_render_items(pool, log, res, first,
                                      NGX_HTTP_SESSION_SESSION_NCOLS,
                                      n, &ngx_http_session_render_images_kind,
                                      &docs, &len)
        != NGX_OK)
    {
        return NULL;
    }

    b = ngx_create_temp_buf(pool,
                            len + ngx_http_session_doc_session_size(&s)
                            + sizeof("{\"session\": , \"images\": []}"));
    if (b == NULL) {
        return NULL;
    }

    p = ngx_cpymem(b->last, "{\"session\": ", sizeof("{\"session\": ") - 1);
    p = ngx_http_session_doc_session(p, &s);
    p = ngx_cpymem(p, ", \"images\": [", sizeof(", \"images\": [") - 1);
    p = ngx_http_session_render_write_items(p, docs, n,
                                        &ngx_http_session_render_images_kind);
    *p++ = ']';
    *p++ = '}';

    b->last = p;

    return b;

bad:

    /* the one answer is shared by every waiter: no request to log with */
    ngx_log_error(NGX_LOG_ERR, log, 0,
                  "session db: a row is not what the statement returns");

    return NULL;
}
