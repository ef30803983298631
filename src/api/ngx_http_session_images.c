/*
 * The image endpoints: upload, list, get, acknowledge, content.  Each is
 * one prepared statement (one transaction) that returns rows, rendered in
 * C when PostgreSQL replies; an upload over session_image_chunk_size is
 * streamed (image_stream.c), and the bytes of GET .../content are read a
 * slice at a time (image_content.c).  The bytes travel as binary
 * parameters and results: no hex or escape encoding on the wire.
 */

#include "ngx_http_session_images.h"
#include "ngx_http_session_image_content.h"
#include "ngx_http_session_image_stream.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_cursor.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_imagecheck.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_response.h"
#include "ngx_http_session_sql.h"


#define NGX_HTTP_SESSION_IMAGE_LIST_DEFAULT  100
#define NGX_HTTP_SESSION_IMAGE_LIST_MAX      100

/* If-None-Match tags handed to PostgreSQL; more are not looked at */
#define NGX_HTTP_SESSION_IMAGE_TAGS_MAX      16


/* the image list's query parameters */
typedef struct {
    long long                   limit;
    /* "true", "false" or NULL */
    u_char                     *ack;
    /* the sequence of the page's last image, as text, or NULL */
    u_char                     *after;
} ngx_http_session_image_args_t;


static ngx_int_t ngx_http_session_image_too_large(ngx_http_request_t *r);
static void ngx_http_session_image_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_image_insert(ngx_http_request_t *r,
    u_char *body, size_t len);
static void ngx_http_session_image_one(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_image_list_ack(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static ngx_int_t ngx_http_session_image_list_cursor(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static void ngx_http_session_image_listed(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_image_ids(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_db_query_t *q);
static u_char *ngx_http_session_image_tags(ngx_http_request_t *r);


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

    return ngx_http_session_body_start(r, ctx, slcf->image_max_size,
                                       ngx_http_session_image_body);
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
    ngx_http_session_ctx_t       *ctx;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (r->request_body == NULL) {
        ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        return;
    }

    /*
     * an image over a chunk is streamed, not held whole, unless it was
     * gathered in memory whole (session_body_buffer_size)
     */

    size = ngx_http_session_body_size(r);

    if (size > (off_t) slcf->image_chunk_size
        && size <= slcf->image_max_size
        && ctx->body_buf == NULL)
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
    ngx_http_session_ctx_t        *ctx;
    ngx_http_session_db_query_t   *q;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (len == 0) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_IMAGE_EMPTY);
    }

    rc = ngx_http_session_image_upload_check(r, ctx, body, len, &type,
                                             &sid);
    if (rc != NGX_DECLINED) {
        return rc;
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

    sid = ngx_http_session_route_sid(r, ctx, &rc);
    if (sid == NULL) {
        return rc;
    }

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IMAGE_LIST,
                                       ngx_http_session_image_listed);
    rows = ngx_http_session_page_ask(q, limit);

    if (rows == NULL || ngx_http_session_project(r, ctx) == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(q, sid, 0, 0);
    ngx_http_session_db_param(q, ack, 0, 0);
    ngx_http_session_db_param(q, after ? after : (u_char *) "0", 0, 0);
    ngx_http_session_db_param(q, rows, 0, 0);

    return ngx_http_session_run(r, q);
}


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
    int                      n;
    size_t                   cursor_len;
    int64_t                  last;
    ngx_buf_t               *b;
    ngx_uint_t               more;
    ngx_http_request_t      *r;
    ngx_http_session_err_e   err;
    u_char                   cursor[NGX_HTTP_SESSION_CURSOR_MAX];

    r = q->request;

    err = ngx_http_session_check(q, res, 0, 1);

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_session_refuse(r, err);
        return;
    }

    /* no image on the page: one row, its image columns NULL */

    n = PQgetisnull(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS) ? 0 : PQntuples(res);
    n = ngx_http_session_page_rows(q, n, &more);
    cursor_len = 0;

    if (more) {
        if (ngx_http_session_render_int4(res, n - 1,
                                         NGX_HTTP_SESSION_CHECK_NCOLS
                                         + NGX_HTTP_SESSION_COL_I_SEQUENCE,
                                         &last)
            != NGX_OK)
        {
            ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_INTERNAL);
            return;
        }

        cursor_len = ngx_http_session_cursor_encode_image(cursor,
                                                          (long long) last);
    }

    b = ngx_http_session_render_images(r, res, NGX_HTTP_SESSION_CHECK_NCOLS,
                                       n, cursor, cursor_len);
    ngx_http_session_reply(r, NGX_HTTP_OK, b);
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
    ngx_buf_t               *b;
    ngx_http_request_t      *r;
    ngx_http_session_ctx_t  *ctx;
    ngx_http_session_err_e   err;

    r = q->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ngx_http_session_work_held(q, res) == NGX_DONE) {
        return;
    }

    err = ngx_http_session_check_image(q, res,
                                       NGX_HTTP_SESSION_ERR_IMAGE_NOT_FOUND);

    if (err == NGX_HTTP_SESSION_ERR_IMAGE_NOT_FOUND
        && ctx->route.id == NGX_HTTP_SESSION_ROUTE_IMAGE_ACK
        && PQnfields(res) == NGX_HTTP_SESSION_CHECK_NCOLS
                             + NGX_HTTP_SESSION_IMAGE_NCOLS + 1
                             + ngx_http_session_work_ncols(q)
        && PQgetlength(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS
                               + NGX_HTTP_SESSION_IMAGE_NCOLS)
           == 1
        && PQgetvalue(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS
                              + NGX_HTTP_SESSION_IMAGE_NCOLS)[0])
    {
        err = NGX_HTTP_SESSION_ERR_IMAGE_ACKNOWLEDGED;
    }

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_session_refuse(r, err);
        return;
    }

    b = ngx_http_session_render_image(r, res, 0,
                                      NGX_HTTP_SESSION_CHECK_NCOLS);
    ngx_http_session_reply(r, NGX_HTTP_OK, b);
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

    ngx_http_session_discard_body(r);

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_IMAGE_CONTENT,
                                       ngx_http_session_image_bytes);

    rc = ngx_http_session_image_ids(r, ctx, q);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    tags = ngx_http_session_image_tags(r);
    chunk = ngx_pnalloc(r->pool, NGX_SIZE_T_LEN + 1);

    if (tags == NULL || chunk == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    *ngx_sprintf(chunk, "%uz", ngx_http_session_image_first_slice(slcf))
        = '\0';

    ngx_http_session_db_param(q, (*tags == '\0') ? NULL : tags, 0, 0);
    ngx_http_session_db_param(q, r->header_only ? "false" : "true", 0, 0);
    ngx_http_session_db_param(q, chunk, 0, 0);

    q->keep_result = 1;

    return ngx_http_session_run(r, q);
}


/*
 * The first three parameters of q (NULL: it could not be made, 500):
 * project, session, image; NGX_DECLINED when they are added, else what
 * answering returned.  A malformed session id
 * is 404 at once; a malformed image id goes as NULL, so that the session
 * is judged first and the answer is "image not found".
 */

static ngx_int_t
ngx_http_session_image_ids(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx,
    ngx_http_session_db_query_t *q)
{
    u_char     *sid, *iid;
    ngx_int_t   rc;

    if (q == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    sid = ngx_http_session_route_sid(r, ctx, &rc);
    if (sid == NULL) {
        return rc;
    }

    iid = ngx_http_session_uuid_text(r, ctx->route.iid, ctx->route.iid_len,
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

    ngx_http_session_header_value(r->headers_in.if_none_match, &p, &end);

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
