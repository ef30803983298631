/*
 * Connections to receivers are reused (HTTP/1.1 keep-alive): a delivery
 * whose answer came whole in the bytes that held its status line leaves
 * its connection idle here, and the next delivery to the same address
 * (and, for https, the same name, checked with the same certificate)
 * sends on it.  Nothing else is waited for: an answer that is not whole
 * at once, or says "Connection: close", or has a body of unknown length,
 * closes the connection as before.  This file keeps the idle ones; it
 * knows nothing of deliveries.
 */

#include "ngx_http_session_webhook_keepalive.h"


/* an idle connection to a receiver is kept this long, milliseconds */
#define NGX_HTTP_SESSION_WEBHOOK_IDLE       4000


/* the worker's idle connections to receivers */
typedef struct {
    /* the most recently used first */
    ngx_queue_t                   idle;
    ngx_uint_t                    nidle;
    /* no more than deliveries may be in flight */
    ngx_uint_t                    max;
} ngx_http_session_webhook_keepalive_t;


static void ngx_http_session_webhook_idle_close(
    ngx_http_session_webhook_conn_t *conn);
static void ngx_http_session_webhook_idle_handler(ngx_event_t *ev);
static void ngx_http_session_webhook_idle_write(ngx_event_t *ev);


static ngx_http_session_webhook_keepalive_t  ngx_http_session_webhook_keepalive;


void
ngx_http_session_webhook_keepalive_init(ngx_uint_t max)
{
    ngx_http_session_webhook_keepalive_t  *ka;

    ka = &ngx_http_session_webhook_keepalive;

    ngx_queue_init(&ka->idle);
    ka->nidle = 0;
    ka->max = max;
}


void
ngx_http_session_webhook_keepalive_exit(void)
{
    ngx_http_session_webhook_conn_t       *conn;
    ngx_http_session_webhook_keepalive_t  *ka;

    ka = &ngx_http_session_webhook_keepalive;

    while (!ngx_queue_empty(&ka->idle)) {
        conn = ngx_queue_data(ngx_queue_head(&ka->idle),
                              ngx_http_session_webhook_conn_t, queue);
        ngx_http_session_webhook_idle_close(conn);
    }
}


/*
 * An idle connection to sockaddr (for https, opened for host), taken out
 * of the idle ones: the caller sets its data and handlers.  NULL: none.
 */

ngx_http_session_webhook_conn_t *
ngx_http_session_webhook_keepalive_get(struct sockaddr *sockaddr,
    socklen_t socklen, ngx_uint_t https, ngx_str_t *host)
{
    ngx_queue_t                           *q;
    ngx_connection_t                      *c;
    ngx_http_session_webhook_conn_t       *conn;
    ngx_http_session_webhook_keepalive_t  *ka;

    ka = &ngx_http_session_webhook_keepalive;

    for (q = ngx_queue_head(&ka->idle);
         q != ngx_queue_sentinel(&ka->idle);
         q = ngx_queue_next(q))
    {
        conn = ngx_queue_data(q, ngx_http_session_webhook_conn_t, queue);

        if (conn->https != https
            || ngx_cmp_sockaddr(conn->sockaddr, conn->socklen,
                                sockaddr, socklen, 1)
               != NGX_OK)
        {
            continue;
        }

        if (https
            && (conn->host.len != host->len
                || ngx_strncasecmp(conn->host.data, host->data, host->len)
                   != 0))
        {
            continue;
        }

        ngx_queue_remove(q);
        ka->nidle--;

        c = conn->connection;

        if (c->read->timer_set) {
            ngx_del_timer(c->read);
        }

        c->idle = 0;

        return conn;
    }

    return NULL;
}


/*
 * Is the answer whole in b (its status line, status, parsed already with
 * r), and may the connection be kept?  Not while the worker exits.
 */

ngx_uint_t
ngx_http_session_webhook_keepalive_allowed(ngx_http_status_t *status,
    ngx_buf_t *b, ngx_http_request_t *r)
{
    off_t       length;
    ngx_int_t   rc;
    ngx_str_t   name, value;

    if (ngx_http_session_stopping()
        || status->http_version < NGX_HTTP_VERSION_11)
    {
        return 0;
    }

    length = -1;

    for ( ;; ) {
        rc = ngx_http_parse_header_line(r, b, 1);

        if (rc == NGX_HTTP_PARSE_HEADER_DONE) {
            break;
        }

        if (rc != NGX_OK) {
            /* not whole yet, or not HTTP */
            return 0;
        }

        name.data = r->header_name_start;
        name.len = r->header_name_end - r->header_name_start;
        value.data = r->header_start;
        value.len = r->header_end - r->header_start;

        if (name.len == sizeof("Content-Length") - 1
            && ngx_strncasecmp(name.data, (u_char *) "Content-Length",
                               name.len)
               == 0)
        {
            length = ngx_atoof(value.data, value.len);
            if (length == NGX_ERROR) {
                return 0;
            }

        } else if ((name.len == sizeof("Transfer-Encoding") - 1
                    && ngx_strncasecmp(name.data,
                                       (u_char *) "Transfer-Encoding",
                                       name.len)
                       == 0)
                   || (name.len == sizeof("Connection") - 1
                       && ngx_strncasecmp(name.data,
                                          (u_char *) "Connection",
                                          name.len)
                          == 0
                       && ngx_strlcasestrn(value.data,
                                           value.data + value.len,
                                           (u_char *) "close",
                                           sizeof("close") - 2)
                          != NULL))
        {
            return 0;
        }
    }

    if (status->code == NGX_HTTP_NO_CONTENT
        || status->code == NGX_HTTP_NOT_MODIFIED)
    {
        length = 0;
    }

    /* the body, exactly, and nothing after it */

    return length >= 0 && b->last - b->pos == length;
}


/* conn is idle: kept, or NGX_ERROR (the caller closes it) */

ngx_int_t
ngx_http_session_webhook_keepalive_put(ngx_http_session_webhook_conn_t *conn)
{
    ngx_connection_t                      *c;
    ngx_http_session_webhook_keepalive_t  *ka;

    ka = &ngx_http_session_webhook_keepalive;
    c = conn->connection;

    c->data = conn;
    c->idle = 1;
    c->read->handler = ngx_http_session_webhook_idle_handler;
    c->write->handler = ngx_http_session_webhook_idle_write;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    /*
     * No write interest while idle: under a level-triggered method (poll,
     * select) the writable socket would wake the worker at every pass, as
     * ngx_http_set_keepalive() says of a client's connection
     */

    if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && c->write->active) {
        if (ngx_del_event(c->write, NGX_WRITE_EVENT, 0) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    ngx_add_timer(c->read, NGX_HTTP_SESSION_WEBHOOK_IDLE);

    ngx_queue_insert_head(&ka->idle, &conn->queue);

    /* no more idle connections than deliveries may be in flight */

    if (++ka->nidle > ka->max) {
        conn = ngx_queue_data(ngx_queue_last(&ka->idle),
                              ngx_http_session_webhook_conn_t, queue);
        ngx_http_session_webhook_idle_close(conn);
    }

    return NGX_OK;
}


/* an idle connection leaves the idle ones, and is closed */

static void
ngx_http_session_webhook_idle_close(ngx_http_session_webhook_conn_t *conn)
{
    ngx_queue_remove(&conn->queue);
    ngx_http_session_webhook_keepalive.nidle--;

    ngx_http_session_webhook_conn_close(conn->connection);
}


/* anything on an idle connection (its end, a timeout, exiting) closes it */

static void
ngx_http_session_webhook_idle_handler(ngx_event_t *ev)
{
    ngx_connection_t  *c;

    c = ev->data;

    ngx_http_session_webhook_idle_close(c->data);
}


static void
ngx_http_session_webhook_idle_write(ngx_event_t *ev)
{
}


/* a connection to a receiver, with its pool */

void
ngx_http_session_webhook_conn_close(ngx_connection_t *c)
{
    ngx_pool_t  *pool;

    pool = c->pool;

#if (NGX_SSL)
    if (c->ssl) {
        c->ssl->no_wait_shutdown = 1;
        c->ssl->no_send_shutdown = 1;
        (void) ngx_ssl_shutdown(c);
    }
#endif

    ngx_close_connection(c);

    if (pool) {
        ngx_destroy_pool(pool);
    }
}
