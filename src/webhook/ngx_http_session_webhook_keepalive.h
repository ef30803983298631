/*
 * Idle connections to webhook receivers, kept for the next delivery to
 * the same place (webhook_keepalive.c), the folder's own.
 */

#ifndef _NGX_HTTP_SESSION_WEBHOOK_KEEPALIVE_H_INCLUDED_
#define _NGX_HTTP_SESSION_WEBHOOK_KEEPALIVE_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * A connection to a receiver, in its own pool (c->pool): what it was
 * opened for (the address, and for https the name its certificate was
 * checked against), so that a later delivery to the same place may
 * reuse it.
 */
typedef struct {
    ngx_queue_t                   queue;
    ngx_connection_t             *connection;
    struct sockaddr              *sockaddr;
    socklen_t                     socklen;
    ngx_uint_t                    https;
    ngx_str_t                     host;
} ngx_http_session_webhook_conn_t;


/* at most max idle connections (session_webhook_concurrency) */
void ngx_http_session_webhook_keepalive_init(ngx_uint_t max);
/* every idle connection is closed */
void ngx_http_session_webhook_keepalive_exit(void);

ngx_http_session_webhook_conn_t *ngx_http_session_webhook_keepalive_get(
    struct sockaddr *sockaddr, socklen_t socklen, ngx_uint_t https,
    ngx_str_t *host);
ngx_int_t ngx_http_session_webhook_keepalive_put(
    ngx_http_session_webhook_conn_t *conn);
ngx_uint_t ngx_http_session_webhook_keepalive_allowed(
    ngx_http_status_t *status, ngx_buf_t *b, ngx_http_request_t *r);

void ngx_http_session_webhook_conn_close(ngx_connection_t *c);


#endif /* _NGX_HTTP_SESSION_WEBHOOK_KEEPALIVE_H_INCLUDED_ */
