/*
 * The bytes of an image: the first statement answers the headers (or 304)
 * with the first slice; each further slice is a statement of its own,
 * sent while the one before is being written, so that at most two slices
 * are in the worker and no database connection is held while the client
 * reads (decision (zb)).  The bytes travel as binary results and go out
 * straight from the PGresult.
 */

#include "ngx_http_session_image_content.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"


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


static ngx_http_session_image_dl_t *ngx_http_session_image_download(
    ngx_http_request_t *r, ngx_http_session_db_query_t *first);
static ngx_int_t ngx_http_session_image_send_bytes(ngx_http_request_t *r,
    ngx_http_session_image_dl_t *dl, PGresult *res);
static ngx_int_t ngx_http_session_image_pump(ngx_http_request_t *r,
    ngx_http_session_image_dl_t *dl);
static void ngx_http_session_image_slice(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_image_writer(ngx_http_request_t *r);
static void ngx_http_session_image_step(ngx_http_request_t *r,
    ngx_int_t rc);
static void ngx_http_session_image_wait(ngx_http_request_t *r);
static ngx_http_session_image_dl_t *ngx_http_session_image_dl(
    ngx_http_request_t *r);
static void ngx_http_session_image_clear(void *data);


static ngx_str_t  ngx_http_session_etag = ngx_string("ETag");


/* the query's handler owns res (keep_result) */

void
ngx_http_session_image_bytes(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_http_request_t           *r;
    ngx_http_session_err_e        err;
    ngx_http_session_image_dl_t  *dl;

    r = q->request;

    if (res == NULL) {
        ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE);
        return;
    }

    /* from here on the download's cleanup frees its results */

    dl = ngx_http_session_image_download(r, q);
    if (dl == NULL) {
        PQclear(res);
        ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        return;
    }

    dl->sending = res;

    err = ngx_http_session_check_image(q, res,
                                       NGX_HTTP_SESSION_ERR_IMAGE_NOT_FOUND);

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_session_refuse(r, err);
        return;
    }

    ngx_http_session_image_step(r,
                                ngx_http_session_image_send_bytes(r, dl, res));
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

    /*
     * If-None-Match was judged by the statement (the column before the
     * slice); If-Match and If-Unmodified-Since are not evaluated: an
     * image's bytes never change, so no tag or date could tell of a
     * newer one, and a 412 is not one of the API's answers (docs/api.md
     * §5.8).  nginx's check would answer them 412 without the rate
     * limit's headers.
     */
    r->disable_not_modified = 1;

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

    want = ngx_min((size_t) size, ngx_http_session_image_first_slice(slcf));

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
    dl->chunk = ngx_http_session_image_next_slice(slcf);
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

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "session image: slice of %uz bytes from byte %O",
                   len, dl->asked);

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

    ngx_http_session_image_step(r, ngx_http_session_image_pump(r, dl));
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

    ngx_http_session_image_step(r, ngx_http_session_image_pump(r, dl));
}


/* after a step of sending: the client to wait for (NGX_BUSY), or the end */

static void
ngx_http_session_image_step(ngx_http_request_t *r, ngx_int_t rc)
{
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

    ngx_http_session_pq_clear(&dl->sending);
    ngx_http_session_pq_clear(&dl->ready);
}
