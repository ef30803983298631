/*
 * One webhook delivery (webhook_client.c), the folder's own: the
 * dispatcher (webhook_outbox.c) fills in the event and its done handler,
 * and hands the delivery over; done is called once, with the outcome.
 */

#ifndef _NGX_HTTP_SESSION_WEBHOOK_CLIENT_H_INCLUDED_
#define _NGX_HTTP_SESSION_WEBHOOK_CLIENT_H_INCLUDED_


#include "ngx_http_session_common.h"

#include "ngx_http_session_url.h"
#include "ngx_http_session_webhook_keepalive.h"


typedef enum {
    ngx_http_session_webhook_resolving = 0,
    ngx_http_session_webhook_connecting,
    ngx_http_session_webhook_handshaking,
    ngx_http_session_webhook_sending,
    ngx_http_session_webhook_reading
} ngx_http_session_webhook_state_e;


typedef struct ngx_http_session_webhook_delivery_s
    ngx_http_session_webhook_delivery_t;

/* the connection is closed; d->error says why when not delivered */
typedef void (*ngx_http_session_webhook_done_pt)(
    ngx_http_session_webhook_delivery_t *d, ngx_uint_t delivered);


struct ngx_http_session_webhook_delivery_s {
    /* the dispatcher's: in its list of deliveries in flight */
    ngx_queue_t                   queue;
    ngx_pool_t                   *pool;
    ngx_log_t                    *log;
    ngx_http_session_webhook_done_pt  done;
    void                         *data;

    /* the event, from its outbox row */
    ngx_str_t                     id;
    ngx_str_t                     url;
    ngx_str_t                     payload;
    ngx_str_t                     secret;
    ngx_uint_t                    attempts;

    ngx_http_session_url_t        u;
    /* the host name, without a trailing dot, NUL-terminated */
    ngx_str_t                     host;

    ngx_resolver_ctx_t           *resolve;
    ngx_addr_t                   *addrs;
    ngx_uint_t                    naddrs;
    ngx_uint_t                    next_addr;

    ngx_peer_connection_t         peer;
    ngx_event_t                   timer;

    ngx_buf_t                    *request;
    ngx_buf_t                    *answer;
    /* ngx_http_parse_status_line() keeps its state in a request */
    ngx_http_request_t           *parser;
    ngx_http_status_t             status;
    /*
     * the bytes of the answer read so far: more than d->answer holds
     * once it was read again from its start
     */
    size_t                        received;

    ngx_http_session_webhook_state_e  state;
    ngx_str_t                     error;

    /* the connection's own record */
    ngx_http_session_webhook_conn_t  *conn;

    unsigned                      finished:1;
    /* the connection was idle before this request */
    unsigned                      reused:1;
    /* an idle connection failed: this attempt opens a new one */
    unsigned                      fresh:1;
    /* the header lines of an interim (1xx) answer are being skipped */
    unsigned                      interim:1;
};


/* the worker's settings: resolver, TLS context, timeout */
void ngx_http_session_webhook_client_init(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);

/* d is under way: d->done follows, possibly before this returns */
void ngx_http_session_webhook_deliver(ngx_http_session_webhook_delivery_t *d);

/* d stops where it is, without d->done (the worker exits) */
void ngx_http_session_webhook_cancel(ngx_http_session_webhook_delivery_t *d);


#endif /* _NGX_HTTP_SESSION_WEBHOOK_CLIENT_H_INCLUDED_ */
