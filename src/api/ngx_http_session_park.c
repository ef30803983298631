/*
 * Parked requests (see ngx_http_session_park.h).  The connection of a
 * parked request stays with nginx's connection pool (hc, and the header
 * buffer's struct with its memory freed, as for an idle keepalive
 * connection); the record is one allocation: the park, the caller's
 * data, the headers already set for the answer as name and value pairs,
 * then the bytes of the request line, the URI, the arguments and those
 * headers.  The record of a connection is found by the connection's
 * index in cycle->connections.
 */

#include "ngx_http_session_park.h"
#include "ngx_http_session_stats.h"

#if (NGX_LINUX && defined __GLIBC__)
#include <malloc.h>
#endif


/* parks before freed memory goes back to the system */
#define NGX_HTTP_SESSION_PARK_TRIM_BURST  64
/* how long after the first of them, milliseconds */
#define NGX_HTTP_SESSION_PARK_TRIM_AFTER  250


struct ngx_http_session_park_s {
    ngx_connection_t               *connection;
    ngx_http_session_park_gone_pt   gone;
    /* the caller's bytes */
    u_char                         *data;
    void                          **srv_conf;
    void                          **loc_conf;
    /* the connection's handlers while its request ran */
    ngx_event_handler_pt            read_handler;
    ngx_event_handler_pt            write_handler;
    ngx_http_session_ctx_t          ctx;
    time_t                          start_sec;
    ngx_msec_t                      start_msec;
    off_t                           request_length;
    ngx_uint_t                      method;
    ngx_uint_t                      http_version;
    ngx_str_t                       request_line;
    ngx_str_t                       uri;
    ngx_str_t                       args;
    /* method_name and http_protocol: offsets into request_line */
    size_t                          method_len;
    size_t                          protocol_len;
    /* headers_out.headers, as pairs of ngx_str_t at "headers" */
    ngx_uint_t                      nheaders;
    ngx_str_t                      *headers;

    unsigned                        keepalive:1;
};


static size_t ngx_http_session_park_headers(ngx_http_request_t *r,
    ngx_str_t *out, u_char *d, ngx_uint_t *n);
static void ngx_http_session_park_read(ngx_event_t *rev);
static void ngx_http_session_park_gone(ngx_http_session_park_t *pk);
static ngx_int_t ngx_http_session_unpark_request(ngx_http_request_t *r,
    ngx_http_session_park_t *pk);
static u_char *ngx_http_session_park_copy(ngx_str_t *dst, ngx_str_t *src,
    u_char *d);
static void ngx_http_session_park_fields(u_char *to, u_char *from,
    ngx_uint_t park);
static ngx_uint_t ngx_http_session_park_quic(ngx_connection_t *c);
#if (NGX_HTTP_V3)
static void ngx_http_session_park_v3_cleanup(void *data);
#endif
#if (NGX_LINUX && defined __GLIBC__)
static void ngx_http_session_park_trim(ngx_event_t *ev);
#endif


/* the worker's parks */
typedef struct {
    /* the park of each connection, by its index in cycle->connections */
    ngx_http_session_park_t     **parked;
    /* nginx's timer traces print ev->data as a connection's fd */
    ngx_connection_t              dummy;
#if (NGX_LINUX && defined __GLIBC__)
    ngx_event_t                   trim_ev;
    /* parks since the last trim */
    ngx_uint_t                    since;
#endif
} ngx_http_session_park_worker_t;


static ngx_http_session_park_worker_t  ngx_http_session_park_worker;


/*
 * The request's fields a park keeps, each of the same name and type in
 * both structs: copied to the park when it is made, back to the new
 * request when it is unparked (the bit fields are copied by hand).  A
 * field whose size differs in the two structs does not compile (an array
 * of size -1), so that a change of either struct cannot make the copy
 * take part of a value.
 * Not kept: main_conf, one for all servers (ngx_http_create_request() sets
 * it), and header_only, 0 until the header is sent, never before a park.
 */

typedef struct {
    size_t                      request;
    size_t                      park;
    size_t                      size;
} ngx_http_session_park_field_t;

#define ngx_http_session_park_field_size(name)                                \
    (sizeof(((ngx_http_session_park_t *) 0)->name)                            \
     + 0 * sizeof(char [sizeof(((ngx_http_request_t *) 0)->name)              \
                        == sizeof(((ngx_http_session_park_t *) 0)->name)      \
                        ? 1 : -1]))

#define ngx_http_session_park_field(name)                                     \
    { offsetof(ngx_http_request_t, name),                                     \
      offsetof(ngx_http_session_park_t, name),                                \
      ngx_http_session_park_field_size(name) }

static const ngx_http_session_park_field_t  ngx_http_session_park_kept[] = {
    ngx_http_session_park_field(srv_conf),
    ngx_http_session_park_field(loc_conf),
    ngx_http_session_park_field(start_sec),
    ngx_http_session_park_field(start_msec),
    ngx_http_session_park_field(request_length),
    ngx_http_session_park_field(method),
    ngx_http_session_park_field(http_version),
    { 0, 0, 0 }
};


/*
 * HTTP/1.x, plain or over TLS, or HTTP/3 (each stream of QUIC is a
 * connection of its own, as an HTTP/1.x connection is); not a stream of
 * HTTP/2 (nginx keeps the stream's state in the request); no body,
 * nothing read beyond it (nor decrypted and kept by TLS), its header in
 * the connection's own buffer.
 */

ngx_uint_t
ngx_http_session_parkable(ngx_http_request_t *r)
{
    ngx_connection_t       *c;
    ngx_http_connection_t  *hc;

    c = r->connection;
    hc = r->http_connection;

    if (ngx_http_session_park_quic(c)) {
#if (NGX_HTTP_V3)
        if (r->http_version != NGX_HTTP_VERSION_30) {
            return 0;
        }
#else
        return 0;
#endif

    } else if (r->http_version > NGX_HTTP_VERSION_11) {
        return 0;
    }

#if (NGX_HTTP_V2)
    if (r->stream) {
        return 0;
    }
#endif

#if (NGX_HTTP_SSL)
    if (c->ssl
        && !ngx_http_session_park_quic(c)
        && SSL_pending(c->ssl->connection) > 0)
    {
        return 0;
    }
#endif

    if (r != r->main
        || hc == NULL
        || hc->busy
        || r->header_in != c->buffer
        || r->header_in->pos != r->header_in->last
        || r->headers_in.content_length_n > 0
        || r->headers_in.chunked
        || r->request_line.len == 0)
    {
        return 0;
    }

    return 1;
}


/* the record, and room for the caller's data (see the header) */

ngx_http_session_park_t *
ngx_http_session_park_prepare(ngx_http_request_t *r, size_t size,
    ngx_http_session_park_gone_pt gone)
{
    u_char                   *d;
    size_t                    total;
    ngx_uint_t                n;
    ngx_connection_t         *c;
    ngx_http_session_ctx_t   *ctx;
    ngx_http_session_park_t  *pk;

    c = r->connection;

    if (r->count != 1
        || r->blocked
        || r->buffered
        || r->postponed
        || c->buffered
        || !ngx_http_session_parkable(r))
    {
        return NULL;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    if (ctx == NULL) {
        return NULL;
    }

    /* the record and the bytes it keeps */

    size = ngx_align(size, NGX_ALIGNMENT);

    total = sizeof(ngx_http_session_park_t) + size + r->request_line.len
            + r->uri.len + r->args.len;

    total += ngx_http_session_park_headers(r, NULL, NULL, &n);

    pk = ngx_alloc(total, c->log);
    if (pk == NULL) {
        return NULL;
    }

    ngx_memzero(pk, sizeof(ngx_http_session_park_t) + size);

    pk->connection = c;
    pk->gone = gone;
    pk->data = (u_char *) (pk + 1);
    pk->read_handler = c->read->handler;
    pk->write_handler = c->write->handler;
    pk->ctx = *ctx;

    ngx_http_session_park_fields((u_char *) pk, (u_char *) r, 1);
    pk->keepalive = r->keepalive;

    pk->headers = (ngx_str_t *) (pk->data + size);
    pk->nheaders = n;

    d = (u_char *) (pk->headers + 2 * n);

    d = ngx_http_session_park_copy(&pk->request_line, &r->request_line, d);
    d = ngx_http_session_park_copy(&pk->uri, &r->uri, d);
    d = ngx_http_session_park_copy(&pk->args, &r->args, d);

    if (r->method_name.data == r->request_line.data
        && r->method_name.len <= r->request_line.len)
    {
        pk->method_len = r->method_name.len;
    }

    if (r->http_protocol.len <= r->request_line.len
        && r->http_protocol.data + r->http_protocol.len
           == r->request_line.data + r->request_line.len)
    {
        pk->protocol_len = r->http_protocol.len;
    }

    (void) ngx_http_session_park_headers(r, pk->headers, d, &n);

    return pk;
}


/*
 * The request goes (not logged: its line is logged with the answer),
 * the header buffer too as for an idle keepalive connection, and the
 * connection's reads only watch for the client going away.
 */

void
ngx_http_session_park_request(ngx_http_session_park_t *pk,
    ngx_http_request_t *r)
{
    ngx_buf_t                 *b;
    ngx_event_t               *rev, *wev;
    ngx_connection_t          *c;
    ngx_http_connection_t     *hc;
    ngx_http_core_loc_conf_t  *clcf;

    c = r->connection;

    ngx_http_session_park_worker.parked[c - ngx_cycle->connections] = pk;
    ngx_http_session_gauge(polls_parked, 1);

    /*
     * TCP_NODELAY now, which nginx sets once the answer of a keepalive
     * request is out (ngx_http_set_keepalive(), with tcp_nodelay on): a
     * wake-up of many parked polls then makes one system call a waiter
     * less.  Nothing is sent while parked; the answer's bytes are the
     * same (see decisions.md (gm)).
     */

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->keepalive
        && clcf->tcp_nodelay
        && c->tcp_nodelay == NGX_TCP_NODELAY_UNSET
        && c->tcp_nopush != NGX_TCP_NOPUSH_SET
        && !ngx_http_session_park_quic(c)
        && ngx_tcp_nodelay(c) == NGX_OK)
    {
        /* (a failure is nginx's to meet again after the answer) */
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, c->log, 0,
                       "session park: tcp_nodelay");
    }

    /* the request goes (its line is logged with the answer) */

    hc = r->http_connection;
    r->logged = 1;

    ngx_http_free_request(r, 0);

    c->data = hc;
    c->destroyed = 0;
    c->sent = 0;

    if (ngx_http_session_park_quic(c)) {
        /* HTTP/3's cleanup took the unanswered request for a failure */
        c->error = 0;
    }

    /* the header buffer too, as for an idle keepalive connection */

    b = c->buffer;

    if (ngx_pfree(c->pool, b->start) == NGX_OK) {
        b->pos = NULL;
        b->last = NULL;

    } else {
        b->pos = b->start;
        b->last = b->start;
    }

#if (NGX_HTTP_SSL)

    /* TLS's own send buffer, as for an idle keepalive connection */

    if (c->ssl && !ngx_http_session_park_quic(c)) {
        ngx_ssl_free_buffer(c);
    }

#endif

    rev = c->read;
    wev = c->write;

    if (rev->timer_set) {
        ngx_del_timer(rev);
    }

    if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    rev->handler = ngx_http_session_park_read;
    wev->handler = ngx_http_empty_handler;

    c->log->action = "waiting for the answer";

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, c->log, 0, "session park: parked");

#if (NGX_LINUX && defined __GLIBC__)

    /*
     * Requests that came in a burst were all there at once before they
     * were parked: the pages they freed go back (250 ms later, when the
     * burst's first reads are over), or the worker would keep the
     * burst's peak for good.
     */

    if (++ngx_http_session_park_worker.since >= NGX_HTTP_SESSION_PARK_TRIM_BURST
        && !ngx_http_session_park_worker.trim_ev.timer_set)
    {
        ngx_add_timer(&ngx_http_session_park_worker.trim_ev,
                      NGX_HTTP_SESSION_PARK_TRIM_AFTER);
    }

#endif

    if (rev->ready || rev->pending_eof) {
        ngx_post_event(rev, &ngx_posted_events);
        return;
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_http_session_park_gone(pk);
    }
}


/*
 * The headers set for the answer (hash not 0), with out NULL: the bytes
 * a park needs for them; else copied as name and value pairs of out,
 * their bytes at d: the bytes written.  *n: how many.
 */

static size_t
ngx_http_session_park_headers(ngx_http_request_t *r, ngx_str_t *out,
    u_char *d, ngx_uint_t *n)
{
    size_t            size;
    ngx_uint_t        i;
    ngx_list_t       *headers;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    size = 0;
    *n = 0;

    headers = &r->headers_out.headers;
    part = &headers->part;
    i = 0;

    while ((h = ngx_http_session_list_next(headers, &part, &i)) != NULL) {
        if (h->hash == 0) {
            continue;
        }

        if (out == NULL) {
            size += 2 * sizeof(ngx_str_t) + h->key.len + h->value.len;

        } else {
            out->data = d + size;
            out->len = h->key.len;
            size += h->key.len;
            out++;

            out->data = d + size;
            out->len = h->value.len;
            size += h->value.len;
            out++;

            ngx_memcpy(out[-2].data, h->key.data, h->key.len);
            ngx_memcpy(out[-1].data, h->value.data, h->value.len);
        }

        (*n)++;
    }

    return size;
}


/* a parked connection is readable: the client may have gone */

static void
ngx_http_session_park_read(ngx_event_t *rev)
{
    u_char                         buf;
    ssize_t                        n;
    ngx_err_t                      err;
    ngx_connection_t              *c;
    ngx_http_session_park_t  *pk;

    c = rev->data;
    pk = ngx_http_session_park_worker.parked[c - ngx_cycle->connections];

    if (pk == NULL) {
        ngx_http_close_connection(c);
        return;
    }

    if (c->close || rev->pending_eof) {
        goto gone;
    }

    if (ngx_http_session_park_quic(c)) {
        /* a stream of QUIC: its reset (or the connection's end) */
        if (rev->error) {
            goto gone;
        }

        return;
    }

    n = recv(c->fd, &buf, 1, MSG_PEEK);

    if (n > 0) {
        /*
         * A pipelined request: read after the answer; over TLS, a record
         * (a client's close_notify: its FIN that follows sets
         * pending_eof, or the read fails).  Under a level-triggered
         * method (poll, select) the bytes left unread would make the
         * event fire again at every pass of the event loop: its interest
         * goes, as ngx_http_test_reading() does, and the event stays
         * ready, so that the connection reads them once the answer is
         * out (ngx_http_set_keepalive() posts a ready read event).  Until
         * then, that client's going away is found by the answer's write.
         */

        if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && rev->active) {
            if (ngx_del_event(rev, NGX_READ_EVENT, 0) != NGX_OK) {
                goto gone;
            }
        }

        return;
    }

    if (n == -1) {
        err = ngx_socket_errno;

        if (err != NGX_EAGAIN) {
            goto gone;
        }

        rev->ready = 0;

        if (ngx_handle_read_event(rev, 0) != NGX_OK) {
            goto gone;
        }

        return;
    }

gone:

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "session park: the client went away");

    ngx_http_session_park_gone(pk);
}


/*
 * The client went away (or its connection failed): the owner lets go,
 * and a request is made again to end as nginx ends one whose client
 * closed (499 in the access log).
 */

static void
ngx_http_session_park_gone(ngx_http_session_park_t *pk)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    c = pk->connection;

    pk->gone(pk);

    r = ngx_http_session_unpark(pk);
    if (r == NULL) {
        return;
    }

    c->error = 1;

    ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
}


/* the answer's request: see the header */

ngx_http_request_t *
ngx_http_session_unpark(ngx_http_session_park_t *pk)
{
    size_t              size;
    ngx_buf_t          *b;
    ngx_connection_t   *c;
    ngx_http_request_t *r;

    c = pk->connection;

    ngx_http_session_park_worker.parked[c - ngx_cycle->connections] = NULL;
    ngx_http_session_gauge(polls_parked, -1);

    /* a keepalive connection's buffer is whole when its request ends */

    b = c->buffer;

    if (b->pos == NULL) {
        size = b->end - b->start;

        b->pos = ngx_palloc(c->pool, size);
        if (b->pos == NULL) {
            goto failed;
        }

        b->start = b->pos;
        b->last = b->pos;
        b->end = b->pos + size;
    }

    r = ngx_http_create_request(c);
    if (r == NULL) {
        goto failed;
    }

    /* one request for the client: keepalive_requests and stub_status */

    c->requests--;

#if (NGX_STAT_STUB)
    (void) ngx_atomic_fetch_add(ngx_stat_requests, -1);
    (void) ngx_atomic_fetch_add(ngx_stat_reading, -1);
    r->stat_reading = 0;
    (void) ngx_atomic_fetch_add(ngx_stat_writing, 1);
    r->stat_writing = 1;
#endif

    c->data = r;

    if (ngx_http_session_unpark_request(r, pk) != NGX_OK) {
        c->data = r->http_connection;
        r->logged = 1;
        ngx_http_free_request(r, 0);
        goto failed;
    }

    ngx_free(pk);

    return r;

failed:

    ngx_log_error(NGX_LOG_ERR, c->log, 0,
                  "session park: cannot make the request again");

    ngx_free(pk);
    ngx_http_close_connection(c);

    return NULL;
}


/* the request's fields, context and headers from the park */

static ngx_int_t
ngx_http_session_unpark_request(ngx_http_request_t *r,
    ngx_http_session_park_t *pk)
{
    u_char                  *d;
    size_t                   size;
    ngx_uint_t               i;
    ngx_table_elt_t         *h;
    ngx_connection_t        *c;
#if (NGX_HTTP_V3)
    ngx_pool_cleanup_t      *cln;
#endif
    ngx_http_session_ctx_t  *ctx;

    c = r->connection;

    ngx_http_session_park_fields((u_char *) r, (u_char *) pk, 0);
    r->keepalive = pk->keepalive;
    r->valid_location = 1;

    /* the strings in the request's pool: the log reads them at its end */

    size = pk->request_line.len + pk->uri.len + pk->args.len;

    for (i = 0; i < 2 * pk->nheaders; i++) {
        size += pk->headers[i].len;
    }

    d = ngx_pnalloc(r->pool, size);
    ctx = ngx_palloc(r->pool, sizeof(ngx_http_session_ctx_t));

    if (d == NULL
        || ctx == NULL
        || ngx_list_init(&r->headers_in.headers, r->pool, 1,
                         sizeof(ngx_table_elt_t))
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    d = ngx_http_session_park_copy(&r->request_line, &pk->request_line, d);
    d = ngx_http_session_park_copy(&r->uri, &pk->uri, d);
    d = ngx_http_session_park_copy(&r->args, &pk->args, d);

    r->unparsed_uri = r->uri;
    r->method_name.data = r->request_line.data;
    r->method_name.len = pk->method_len;
    r->http_protocol.data = r->request_line.data + r->request_line.len
                            - pk->protocol_len;
    r->http_protocol.len = pk->protocol_len;

    for (i = 0; i < 2 * pk->nheaders; i += 2) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->lowcase_key = NULL;
#if (nginx_version >= 1023000)
        h->next = NULL;
#endif

        h->key.data = d;
        h->key.len = pk->headers[i].len;
        d = ngx_cpymem(d, pk->headers[i].data, pk->headers[i].len);

        h->value.data = d;
        h->value.len = pk->headers[i + 1].len;
        d = ngx_cpymem(d, pk->headers[i + 1].data, pk->headers[i + 1].len);
    }

    /* the context, without what pointed into the old request's pool */

    *ctx = pk->ctx;
    ctx->project = NULL;
    ctx->query = NULL;
    ctx->idem = NULL;
    ctx->poll = NULL;
    ctx->json_error = NULL;
    ctx->resume = NULL;
    ctx->answer_hook = NULL;

    ngx_http_set_ctx(r, ctx, ngx_http_session_module);

#if (NGX_HTTP_V3)

    /* what HTTP/3 gives each request of a stream (its request body's) */

    if (r->http_version == NGX_HTTP_VERSION_30) {
        r->v3_parse = ngx_pcalloc(r->pool, sizeof(ngx_http_v3_parse_t));
        cln = ngx_pool_cleanup_add(r->pool, 0);

        if (r->v3_parse == NULL || cln == NULL) {
            return NGX_ERROR;
        }

        cln->handler = ngx_http_session_park_v3_cleanup;
        cln->data = r;
    }

#endif

    ngx_http_update_location_config(r);

    r->read_event_handler = ngx_http_test_reading;

    c->read->handler = pk->read_handler;
    c->write->handler = pk->write_handler;

    c->log->action = "sending to client";

    return NGX_OK;
}


/* the kept fields from a request to its park (park 1), or back (0) */

static void
ngx_http_session_park_fields(u_char *to, u_char *from, ngx_uint_t park)
{
    const ngx_http_session_park_field_t  *f;

    for (f = ngx_http_session_park_kept; f->size; f++) {
        if (park) {
            ngx_memcpy(to + f->park, from + f->request, f->size);

        } else {
            ngx_memcpy(to + f->request, from + f->park, f->size);
        }
    }
}


/* src's bytes to d, dst points at them: after them */

static u_char *
ngx_http_session_park_copy(ngx_str_t *dst, ngx_str_t *src, u_char *d)
{
    dst->data = d;
    dst->len = src->len;

    if (src->len == 0) {
        /* src->data may be NULL: memcpy() must not get it (make asan) */
        return d;
    }

    return ngx_cpymem(d, src->data, src->len);
}


/* c is a stream of QUIC (HTTP/3) */

static ngx_uint_t
ngx_http_session_park_quic(ngx_connection_t *c)
{
#if (NGX_QUIC)
    return (c->quic != NULL);
#else
    return 0;
#endif
}


#if (NGX_HTTP_V3)

/* as nginx's own for a stream's request: an answer not sent resets it */

static void
ngx_http_session_park_v3_cleanup(void *data)
{
    ngx_http_request_t  *r = data;

    if (!r->response_sent) {
        r->connection->error = 1;
    }
}

#endif


void *
ngx_http_session_park_data(ngx_http_session_park_t *pk)
{
    return pk->data;
}


void
ngx_http_session_park_free(ngx_http_session_park_t *pk)
{
    ngx_http_session_park_worker.parked[pk->connection
                                        - ngx_cycle->connections] = NULL;
    ngx_http_session_gauge(polls_parked, -1);
    ngx_free(pk);
}


#if (NGX_LINUX && defined __GLIBC__)

static void
ngx_http_session_park_trim(ngx_event_t *ev)
{
    ngx_http_session_park_worker.since = 0;

    (void) malloc_trim(0);
}

#endif


ngx_int_t
ngx_http_session_park_init_process(ngx_cycle_t *cycle)
{
    ngx_http_session_park_worker_t  *w;

    w = &ngx_http_session_park_worker;

    /* untouched pages cost nothing: memory grows with the parks */
    w->parked = ngx_calloc(cycle->connection_n
                           * sizeof(ngx_http_session_park_t *), cycle->log);
    if (w->parked == NULL) {
        return NGX_ERROR;
    }

#if (NGX_LINUX && defined __GLIBC__)
    w->dummy.fd = (ngx_socket_t) -1;
    w->trim_ev.handler = ngx_http_session_park_trim;
    w->trim_ev.data = &w->dummy;
    w->trim_ev.log = cycle->log;
    w->trim_ev.cancelable = 1;
#endif

    return NGX_OK;
}


void
ngx_http_session_park_exit_process(ngx_cycle_t *cycle)
{
#if (NGX_LINUX && defined __GLIBC__)
    if (ngx_http_session_park_worker.trim_ev.timer_set) {
        ngx_del_timer(&ngx_http_session_park_worker.trim_ev);
    }
#endif

    ngx_free(ngx_http_session_park_worker.parked);
    ngx_http_session_park_worker.parked = NULL;
}
