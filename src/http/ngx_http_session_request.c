/*
 * The request room: what every endpoint needs of its request, in one
 * place: query arguments, the body in one piece, the project id as a
 * parameter, running a query for the request, and stage 5 read from a
 * session-scoped statement's result.  It imports no endpoint.
 */

#include "ngx_http_session_request.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_cursor.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_key.h"
#include "ngx_http_session_render.h"


static void ngx_http_session_waiter_cleanup(void *data);
static ngx_uint_t ngx_http_session_body_in_memory(ngx_http_request_t *r);
static void ngx_http_session_body_gather(ngx_http_request_t *r);
static void ngx_http_session_arg_unescape(u_char **dst, u_char *src,
    size_t len);


ngx_str_t  ngx_http_session_location = ngx_string("Location");


ngx_int_t
ngx_http_session_run(ngx_http_request_t *r, ngx_http_session_db_query_t *q)
{
    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE);
    }

    /* the query's handler finalizes the request */
    r->main->count++;

    return NGX_DONE;
}


/*
 * Stage 5 from the first row of a session-scoped statement: the
 * session's project and status (as clients see it) in the given columns;
 * no row or a NULL project is a session that does not exist.
 */

ngx_http_session_err_e
ngx_http_session_check(ngx_http_session_db_query_t *q, PGresult *res,
    int project_col, int status_col)
{
    u_char                   project[NGX_HTTP_SESSION_UUID_LEN];
    ngx_http_request_t      *r;
    ngx_http_session_ctx_t  *ctx;

    if (res == NULL) {
        return NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
    }

    if (ngx_http_session_db_result_ok(q, res) != NGX_OK
        || PQnfields(res) <= ngx_max(project_col, status_col))
    {
        return NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    if (PQntuples(res) == 0 || PQgetisnull(res, 0, project_col)) {
        return NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND;
    }

    r = q->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (PQgetlength(res, 0, project_col) != NGX_HTTP_SESSION_UUID_BIN_LEN) {
        return NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    ngx_http_session_uuid_format((u_char *) PQgetvalue(res, 0, project_col),
                                 project);

    if (ngx_memcmp(project, ctx->principal.project_id,
                   NGX_HTTP_SESSION_UUID_LEN)
        != 0)
    {
        return NGX_HTTP_SESSION_ERR_SESSION_FORBIDDEN;
    }

    if (ngx_http_session_render_is(res, 0, status_col, "expired")) {
        return NGX_HTTP_SESSION_ERR_SESSION_EXPIRED;
    }

    return NGX_HTTP_SESSION_ERR_LAST;
}


ngx_http_session_err_e
ngx_http_session_check_image(ngx_http_session_db_query_t *q, PGresult *res,
    ngx_http_session_err_e none)
{
    ngx_http_session_err_e  err;

    err = ngx_http_session_check(q, res, 0, 1);

    if (err == NGX_HTTP_SESSION_ERR_LAST
        && PQgetisnull(res, 0, NGX_HTTP_SESSION_CHECK_NCOLS))
    {
        return none;
    }

    return err;
}


/* the project id as a NUL-terminated text parameter, made once */

char *
ngx_http_session_project(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    if (ctx->project == NULL) {
        ctx->project = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_UUID_LEN + 1);
        if (ctx->project == NULL) {
            return NULL;
        }

        ngx_memcpy(ctx->project, ctx->principal.project_id,
                   NGX_HTTP_SESSION_UUID_LEN);
        ctx->project[NGX_HTTP_SESSION_UUID_LEN] = '\0';
    }

    return (char *) ctx->project;
}


ngx_int_t
ngx_http_session_body_start(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, off_t limit,
    ngx_http_client_body_handler_pt handler)
{
    ngx_int_t  rc;

    /* read by the request body filter (ngx_http_session_error.c) */
    ctx->body_limit = limit;

    if (ngx_http_session_body_in_memory(r)) {
        /* nginx passes the body on as it comes, gathered here whole */
        ctx->body_handler = handler;
        r->request_body_no_buffering = 1;
        handler = ngx_http_session_body_gather;
    }

    rc = ngx_http_read_client_request_body(r, handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


/*
 * A body of announced length up to session_body_buffer_size is gathered
 * in one buffer of that length as it arrives (nginx reads it unbuffered),
 * instead of going through nginx's temporary file once it is over
 * client_body_buffer_size: creating, writing, reading back and removing
 * that file took a third of a worker's time per 100 KB upload
 * (docs/decisions.md, (zh)).  A body nginx keeps in memory anyway, a
 * chunked one and one read before (a keyed POST's second start) are left
 * to nginx.
 */

static ngx_uint_t
ngx_http_session_body_in_memory(ngx_http_request_t *r)
{
    off_t                         len;
    ngx_http_core_loc_conf_t     *clcf;
    ngx_http_session_loc_conf_t  *slcf;

    len = r->headers_in.content_length_n;

    if (r->request_body || r != r->main || r->headers_in.chunked || len <= 0)
    {
        return 0;
    }

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    return len <= (off_t) slcf->body_buffer_size
           && len > (off_t) clcf->client_body_buffer_size
           && !r->request_body_in_file_only;
}


/*
 * nginx's post handler of an unbuffered body, from its first bytes on,
 * and the request's read handler until the body is whole
 */

static void
ngx_http_session_body_gather(ngx_http_request_t *r)
{
    size_t                    size;
    ngx_int_t                 rc;
    ngx_buf_t                *b;
    ngx_chain_t              *cl;
    ngx_http_session_ctx_t   *ctx;
    ngx_http_request_body_t  *rb;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    rb = r->request_body;

    if (ctx->body_buf == NULL) {
        ctx->body_buf = ngx_create_temp_buf(r->pool,
                                      (size_t) r->headers_in.content_length_n);
        if (ctx->body_buf == NULL) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        r->read_event_handler = ngx_http_session_body_gather;
    }

    b = ctx->body_buf;

    for ( ;; ) {

        /* what nginx passed on: copied, and its buffers given back */

        for (cl = rb->bufs; cl; cl = cl->next) {
            size = cl->buf->last - cl->buf->pos;

            if (size > (size_t) (b->end - b->last)) {
                /* nginx stops a body at its Content-Length */
                ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                              "session: request body over its length");
                ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }

            b->last = ngx_cpymem(b->last, cl->buf->pos, size);
            cl->buf->pos = cl->buf->last;
        }

        rb->bufs = NULL;

        if (!r->reading_body) {
            break;
        }

        rc = ngx_http_read_unbuffered_request_body(r);

        if (rc == NGX_ERROR) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
            r->read_event_handler = ngx_http_block_reading;
            ngx_http_finalize_request(r, rc);
            return;
        }

        if (rb->bufs == NULL && r->reading_body) {
            /* NGX_AGAIN: nothing more yet, the read event calls again */
            return;
        }
    }

    if (b->last != b->end) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "session: request body short of its length");
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* the body as nginx leaves one that fits its buffer: one memory buffer */

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    b->last_buf = 1;
    cl->buf = b;
    cl->next = NULL;
    rb->bufs = cl;

    r->request_body_no_buffering = 0;
    r->read_event_handler = ngx_http_block_reading;

    ctx->body_handler(r);
}


/*
 * The whole body in one piece, from memory buffers or from the temporary
 * file nginx spooled it to (a body in one memory buffer is not copied).
 * NULL with *len over the limit when too large.
 */

u_char *
ngx_http_session_read_body(ngx_http_request_t *r, size_t max, size_t *len)
{
    off_t         size;
    u_char       *body, *p;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    size = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        size += ngx_buf_size(cl->buf);
    }

    *len = (size_t) size;

    if (size > (off_t) max) {
        return NULL;
    }

    cl = r->request_body->bufs;

    if (cl && cl->next == NULL && ngx_buf_in_memory(cl->buf)) {
        return cl->buf->pos;
    }

    body = ngx_pnalloc(r->pool, (size_t) size + 1);
    if (body == NULL) {
        *len = 0;
        return NULL;
    }

    p = body;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (ngx_buf_in_memory(b)) {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
            continue;
        }

        if (b->in_file) {
            n = ngx_read_file(b->file, p, (size_t) (b->file_last - b->file_pos),
                              b->file_pos);

            if (n != b->file_last - b->file_pos) {
                *len = 0;
                return NULL;
            }

            p += n;
        }
    }

    *len = p - body;

    return body;
}


off_t
ngx_http_session_body_size(ngx_http_request_t *r)
{
    off_t         size;
    ngx_chain_t  *cl;

    size = 0;

    if (r->request_body == NULL) {
        return 0;
    }

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        size += ngx_buf_size(cl->buf);
    }

    return size;
}


ssize_t
ngx_http_session_body_read(ngx_http_request_t *r, off_t offset, u_char *buf,
    size_t size)
{
    off_t         len;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (r->request_body == NULL) {
        return 0;
    }

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        len = ngx_buf_size(b);

        if (offset >= len) {
            offset -= len;
            continue;
        }

        size = (size_t) ngx_min((off_t) size, len - offset);

        if (ngx_buf_in_memory(b)) {
            ngx_memcpy(buf, b->pos + offset, size);
            return size;
        }

        n = ngx_read_file(b->file, buf, size, b->file_pos + offset);

        return (n == (ssize_t) size) ? n : NGX_ERROR;
    }

    return 0;
}


ngx_int_t
ngx_http_session_arg_next(ngx_http_request_t *r, u_char **pos,
    ngx_str_t *name, ngx_str_t *value)
{
    u_char  *p, *end, *amp, *eq, *dst;

    if (*pos == NULL) {
        return NGX_DONE;
    }

    end = r->args.data + r->args.len;

    for ( ;; ) {
        p = *pos;

        if (p >= end) {
            return NGX_DONE;
        }

        amp = ngx_strlchr(p, end, '&');
        if (amp == NULL) {
            amp = end;
        }

        *pos = (amp < end) ? amp + 1 : end;

        /* "a=1&&b=2": an empty pair is no parameter */
        if (amp > p) {
            break;
        }
    }

    eq = ngx_strlchr(p, amp, '=');
    if (eq == NULL) {
        eq = amp;
    }

    dst = ngx_pnalloc(r->pool, (eq - p) + (amp - eq) + 1);
    if (dst == NULL) {
        return NGX_ERROR;
    }

    name->data = dst;
    ngx_http_session_arg_unescape(&dst, p, eq - p);
    name->len = dst - name->data;

    value->data = dst;

    if (eq < amp) {
        ngx_http_session_arg_unescape(&dst, eq + 1, amp - eq - 1);
    }

    value->len = dst - value->data;

    return NGX_OK;
}


/*
 * A name or a value percent-decoded into *dst, or as written when one of
 * its escapes is malformed (a "%" not followed by two hex digits):
 * nginx's decoder drops those, which would make "li%mit" the parameter
 * "limit" and "1%" the value "1".  As written, each is refused as what
 * it is: an unknown parameter, or a value that is not one.
 */

static void
ngx_http_session_arg_unescape(u_char **dst, u_char *src, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (src[i] == '%'
            && (i + 2 >= len || !ngx_http_session_is_hex(src[i + 1])
                || !ngx_http_session_is_hex(src[i + 2])))
        {
            *dst = ngx_cpymem(*dst, src, len);
            return;
        }
    }

    ngx_unescape_uri(dst, &src, len, 0);
}


ngx_int_t
ngx_http_session_args(ngx_http_request_t *r,
    const ngx_http_session_arg_t *table, void *args)
{
    u_char                        *pos;
    ngx_int_t                      rc;
    ngx_str_t                      name, value;
    const ngx_http_session_arg_t  *a;

    pos = r->args.data;

    for ( ;; ) {
        rc = ngx_http_session_arg_next(r, &pos, &name, &value);

        if (rc == NGX_DONE) {
            return NGX_DECLINED;
        }

        if (rc == NGX_ERROR) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        for (a = table; a && a->name.len; a++) {
            if (a->name.len == name.len
                && ngx_strncmp(a->name.data, name.data, name.len) == 0)
            {
                break;
            }
        }

        if (a == NULL || a->name.len == 0) {
            return ngx_http_session_unknown_arg(r, &name);
        }

        rc = a->read(r, &value, (u_char *) args + a->offset, a->data);

        if (rc != NGX_DECLINED) {
            return rc;
        }
    }
}


ngx_int_t
ngx_http_session_arg_limit(ngx_http_request_t *r, ngx_str_t *value,
    void *field, ngx_uint_t data)
{
    if (ngx_http_session_parse_int(value->data, value->len, 1,
                                   (long long) data, (long long *) field)
        != 0)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_LIMIT);
    }

    return NGX_DECLINED;
}


u_char *
ngx_http_session_page_ask(ngx_http_session_db_query_t *q, long long limit)
{
    u_char  *rows;

    if (q == NULL) {
        return NULL;
    }

    rows = ngx_pnalloc(q->request->pool, NGX_INT64_LEN + 1);
    if (rows == NULL) {
        return NULL;
    }

    *ngx_sprintf(rows, "%L", (int64_t) limit + 1) = '\0';

    q->data = (void *) (uintptr_t) limit;

    return rows;
}


int
ngx_http_session_page_rows(ngx_http_session_db_query_t *q, int n,
    ngx_uint_t *more)
{
    int  limit;

    limit = (int) (uintptr_t) q->data;

    *more = (n > limit);

    return *more ? limit : n;
}


ngx_int_t
ngx_http_session_unknown_arg(ngx_http_request_t *r, ngx_str_t *name)
{
    ngx_str_t  msg;

    msg.len = sizeof("unknown query parameter: ") - 1 + name->len;
    msg.data = ngx_pnalloc(r->pool, msg.len);
    if (msg.data == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_sprintf(msg.data, "unknown query parameter: %V", name);

    return ngx_http_session_error_message(r, NGX_HTTP_BAD_REQUEST, &msg);
}


/*
 * The canonical text of a UUID from the path, NUL-terminated; NULL and
 * *rc NGX_DECLINED when malformed, NGX_ERROR when out of memory.
 */

u_char *
ngx_http_session_uuid_text(ngx_http_request_t *r, const u_char *s,
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


u_char *
ngx_http_session_route_sid(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_int_t *rc)
{
    u_char  *sid;

    sid = ngx_http_session_uuid_text(r, ctx->route.sid, ctx->route.sid_len,
                                     rc);

    if (sid == NULL) {
        *rc = ngx_http_session_error(r, (*rc == NGX_DECLINED)
                                        ? NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND
                                        : NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    return sid;
}


void
ngx_http_session_reply(ngx_http_request_t *r, ngx_uint_t status,
    ngx_buf_t *b)
{
    ngx_http_finalize_request(r, (b == NULL)
                   ? ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL)
                   : ngx_http_session_send_json(r, status, b));
}


void
ngx_http_session_refuse(ngx_http_request_t *r, ngx_http_session_err_e err)
{
    ngx_http_finalize_request(r, ngx_http_session_error(r, err));
}


ngx_http_session_waiter_t *
ngx_http_session_waiter_create(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t         *cln;
    ngx_http_session_waiter_t  *w;

    w = ngx_pcalloc(r->pool, sizeof(ngx_http_session_waiter_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);

    if (w == NULL || cln == NULL) {
        return NULL;
    }

    w->request = r;

    cln->handler = ngx_http_session_waiter_cleanup;
    cln->data = w;

    return w;
}


void
ngx_http_session_waiter_join(ngx_http_session_waiter_t *w,
    ngx_queue_t *waiters, void *flight)
{
    w->flight = flight;
    ngx_queue_insert_tail(waiters, &w->queue);
}


ngx_http_session_waiter_t *
ngx_http_session_waiter_next(ngx_queue_t *waiters)
{
    ngx_queue_t                *q;
    ngx_http_session_waiter_t  *w;

    q = ngx_queue_head(waiters);
    ngx_queue_remove(q);

    w = ngx_queue_data(q, ngx_http_session_waiter_t, queue);
    w->flight = NULL;

    return w;
}


/* a waiting client went away: the flight goes on without it */

static void
ngx_http_session_waiter_cleanup(void *data)
{
    ngx_http_session_waiter_t  *w = data;

    if (w->flight) {
        ngx_queue_remove(&w->queue);
        w->flight = NULL;
    }
}
