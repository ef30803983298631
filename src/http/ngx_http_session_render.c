/*
 * Documents from binary-format rows (see ngx_http_session_render.h).
 */

#include "ngx_http_session_render.h"


#define NGX_HTTP_SESSION_LIST_HEAD  "{\"data\": ["
/*
 * room for either ending: "null}" is longer than a cursor's quotes and
 * brace, and "false" than "true"
 */
#define NGX_HTTP_SESSION_LIST_TAIL                                            \
    "], \"has_more\": false, \"next_cursor\": null}"


static u_char *ngx_http_session_render_tail(u_char *p, u_char *cursor,
    size_t cursor_len);


static ngx_inline uint32_t
ngx_http_session_render_be32(const u_char *p)
{
    return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
           | ((uint32_t) p[2] << 8) | (uint32_t) p[3];
}


/*
 * Each field is asked for once: libpq checks the row and the column on
 * every call.  PQgetlength() is 0 for NULL, so a binary column of its
 * type's length is a value, and PQgetisnull() is asked only when the
 * length is 0 (NULL or an empty value).
 */

static ngx_inline u_char *
ngx_http_session_render_fixed(PGresult *res, int row, int col, int len)
{
    if (PQgetlength(res, row, col) != len) {
        return NULL;
    }

    return (u_char *) PQgetvalue(res, row, col);
}


/* NGX_OK and the value, NGX_DECLINED for NULL, NGX_ERROR for others */

static ngx_inline ngx_int_t
ngx_http_session_render_fixed_or_null(PGresult *res, int row, int col,
    int len, u_char **value)
{
    int  n;

    n = PQgetlength(res, row, col);

    if (n == len) {
        *value = (u_char *) PQgetvalue(res, row, col);
        return NGX_OK;
    }

    if (n == 0 && PQgetisnull(res, row, col)) {
        return NGX_DECLINED;
    }

    return NGX_ERROR;
}


/* a text column; NULL is "" as libpq has it */

static ngx_inline u_char *
ngx_http_session_render_text(PGresult *res, int row, int col, size_t *len)
{
    *len = PQgetlength(res, row, col);

    return (u_char *) PQgetvalue(res, row, col);
}


static ngx_inline int64_t
ngx_http_session_render_be64us(const u_char *p)
{
    uint64_t  v;

    v = ((uint64_t) ngx_http_session_render_be32(p) << 32)
        | ngx_http_session_render_be32(p + 4);

    return (int64_t) v + NGX_HTTP_SESSION_DOC_PG_EPOCH_US;
}


static ngx_inline ngx_int_t
ngx_http_session_render_int4_at(PGresult *res, int row, int col, int64_t *n)
{
    u_char  *p;

    p = ngx_http_session_render_fixed(res, row, col, 4);
    if (p == NULL) {
        return NGX_ERROR;
    }

    *n = (int32_t) ngx_http_session_render_be32(p);

    return NGX_OK;
}


static ngx_inline ngx_int_t
ngx_http_session_render_time_at(PGresult *res, int row, int col, int64_t *us)
{
    u_char  *p;

    p = ngx_http_session_render_fixed(res, row, col, 8);
    if (p == NULL) {
        return NGX_ERROR;
    }

    *us = ngx_http_session_render_be64us(p);

    return NGX_OK;
}


/* a timestamptz or NULL: *set, and *us (0 for NULL) */

static ngx_inline ngx_int_t
ngx_http_session_render_time_or_null(PGresult *res, int row, int col,
    int *set, int64_t *us)
{
    u_char     *p;
    ngx_int_t   rc;

    rc = ngx_http_session_render_fixed_or_null(res, row, col, 8, &p);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    *set = (rc == NGX_OK);
    *us = *set ? ngx_http_session_render_be64us(p) : 0;

    return NGX_OK;
}


/*
 * The ncols columns of a session or an image from (row, col) are there,
 * and its id, the first, is a UUID: NGX_OK and the id; NGX_DECLINED when
 * the id is NULL (no such row).
 */

static ngx_inline ngx_int_t
ngx_http_session_render_head(PGresult *res, int row, int col, int ncols,
    const u_char **id)
{
    u_char     *p;
    ngx_int_t   rc;

    if (PQnfields(res) < col + ncols || row >= PQntuples(res)) {
        return NGX_ERROR;
    }

    rc = ngx_http_session_render_fixed_or_null(res, row, col,
                                               NGX_HTTP_SESSION_UUID_BIN_LEN,
                                               &p);
    if (rc == NGX_OK) {
        *id = p;
    }

    return rc;
}


ngx_int_t
ngx_http_session_render_int4(PGresult *res, int row, int col, int64_t *n)
{
    return ngx_http_session_render_int4_at(res, row, col, n);
}


ngx_uint_t
ngx_http_session_render_is(PGresult *res, int row, int col, const char *s)
{
    size_t  len;

    len = ngx_strlen(s);

    return (size_t) PQgetlength(res, row, col) == len
           && ngx_strncmp(PQgetvalue(res, row, col), s, len) == 0;
}


ngx_int_t
ngx_http_session_render_time(PGresult *res, int row, int col, int64_t *us)
{
    return ngx_http_session_render_time_at(res, row, col, us);
}


ngx_int_t
ngx_http_session_render_read_session(PGresult *res, int row, int col,
    ngx_http_session_doc_session_t *s)
{
    ngx_int_t  rc;

    rc = ngx_http_session_render_head(res, row, col,
                                      NGX_HTTP_SESSION_SESSION_NCOLS, &s->id);
    if (rc != NGX_OK) {
        return rc;
    }

    s->project_id = ngx_http_session_render_fixed(res, row,
                                         col + NGX_HTTP_SESSION_COL_S_PROJECT,
                                         NGX_HTTP_SESSION_UUID_BIN_LEN);
    if (s->project_id == NULL
        || ngx_http_session_render_int4_at(res, row,
                                           col + NGX_HTTP_SESSION_COL_S_IMAGES,
                                           &s->image_count)
           != NGX_OK
        || ngx_http_session_render_int4_at(res, row,
                                      col + NGX_HTTP_SESSION_COL_S_ACKNOWLEDGED,
                                      &s->acknowledged_count)
           != NGX_OK
        || ngx_http_session_render_time_at(res, row,
                                           col + NGX_HTTP_SESSION_COL_S_CREATED,
                                           &s->created_us)
           != NGX_OK
        || ngx_http_session_render_time_at(res, row,
                                           col + NGX_HTTP_SESSION_COL_S_EXPIRES,
                                           &s->expires_us)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    s->delivery_mode = ngx_http_session_render_text(res, row,
                                            col + NGX_HTTP_SESSION_COL_S_MODE,
                                            &s->delivery_mode_len);
    s->status = ngx_http_session_render_text(res, row,
                                          col + NGX_HTTP_SESSION_COL_S_STATUS,
                                          &s->status_len);

    s->webhook_url_len = PQgetlength(res, row,
                                     col + NGX_HTTP_SESSION_COL_S_URL);

    if (s->webhook_url_len == 0
        && PQgetisnull(res, row, col + NGX_HTTP_SESSION_COL_S_URL))
    {
        s->webhook_url = NULL;

    } else {
        s->webhook_url = (u_char *) PQgetvalue(res, row,
                                              col + NGX_HTTP_SESSION_COL_S_URL);
    }

    return ngx_http_session_render_time_or_null(res, row,
                                       col + NGX_HTTP_SESSION_COL_S_COMPLETED,
                                       &s->completed, &s->completed_us);
}


ngx_int_t
ngx_http_session_render_read_image(PGresult *res, int row, int col,
    ngx_http_session_doc_image_t *im)
{
    ngx_int_t  rc;

    rc = ngx_http_session_render_head(res, row, col,
                                      NGX_HTTP_SESSION_IMAGE_NCOLS, &im->id);
    if (rc != NGX_OK) {
        return rc;
    }

    im->session_id = ngx_http_session_render_fixed(res, row,
                                         col + NGX_HTTP_SESSION_COL_I_SESSION,
                                         NGX_HTTP_SESSION_UUID_BIN_LEN);
    im->sha256 = ngx_http_session_render_fixed(res, row,
                                          col + NGX_HTTP_SESSION_COL_I_SHA256,
                                          32);

    if (im->session_id == NULL
        || ngx_http_session_render_int4_at(res, row,
                                          col + NGX_HTTP_SESSION_COL_I_SEQUENCE,
                                           &im->sequence)
           != NGX_OK
        || ngx_http_session_render_int4_at(res, row,
                                           col + NGX_HTTP_SESSION_COL_I_SIZE,
                                           &im->size)
           != NGX_OK
        || ngx_http_session_render_time_at(res, row,
                                           col + NGX_HTTP_SESSION_COL_I_CREATED,
                                           &im->created_us)
           != NGX_OK
        || im->sha256 == NULL)
    {
        return NGX_ERROR;
    }

    im->content_type = ngx_http_session_render_text(res, row,
                                            col + NGX_HTTP_SESSION_COL_I_TYPE,
                                            &im->content_type_len);

    return ngx_http_session_render_time_or_null(res, row,
                                    col + NGX_HTTP_SESSION_COL_I_ACKNOWLEDGED,
                                    &im->acknowledged, &im->acknowledged_us);
}


/*
 * A kind of document (session, image): how it is read from a row, sized
 * and written.  One document is read, then written into a buffer of its
 * size; the documents of rows 0 .. n - 1 from column col are all read
 * first (so that the buffer is sized once), then written with ", "
 * between them.
 */

typedef struct {
    size_t      size;
    ngx_int_t  (*read)(PGresult *res, int row, int col, void *doc);
    size_t     (*len)(const void *doc);
    u_char    *(*write)(u_char *p, const void *doc);
} ngx_http_session_render_kind_t;


/* room for one document of either kind */
typedef union {
    ngx_http_session_doc_session_t  session;
    ngx_http_session_doc_image_t    image;
} ngx_http_session_render_doc_t;


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


/* a row that does not have the columns its statement returns, logged */

void
ngx_http_session_render_bad(ngx_log_t *log)
{
    ngx_log_error(NGX_LOG_ERR, log, 0,
                  "session db: a row is not what the statement returns");
}


/* the document of the row's columns from col, in a buffer of its size */

static ngx_buf_t *
ngx_http_session_render_one(ngx_http_request_t *r, PGresult *res, int row,
    int col, ngx_http_session_render_kind_t *kind)
{
    ngx_buf_t                      *b;
    ngx_http_session_render_doc_t   doc;

    if (kind->read(res, row, col, &doc) != NGX_OK) {
        ngx_http_session_render_bad(r->connection->log);
        return NULL;
    }

    b = ngx_create_temp_buf(r->pool, kind->len(&doc));
    if (b == NULL) {
        return NULL;
    }

    b->last = kind->write(b->last, &doc);

    return b;
}


ngx_buf_t *
ngx_http_session_render_session(ngx_http_request_t *r, PGresult *res,
    int row, int col)
{
    return ngx_http_session_render_one(r, res, row, col,
                                       &ngx_http_session_render_sessions_kind);
}


ngx_buf_t *
ngx_http_session_render_image(ngx_http_request_t *r, PGresult *res,
    int row, int col)
{
    return ngx_http_session_render_one(r, res, row, col,
                                       &ngx_http_session_render_images_kind);
}


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
            ngx_http_session_render_bad(log);
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
        /* the one answer is shared by every waiter: no request to log with */
        ngx_http_session_render_bad(log);
        return NULL;
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
}
