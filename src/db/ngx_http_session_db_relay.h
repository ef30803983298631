/*
 * One LISTEN connection per node: worker 0 listens, and passes on to the
 * node's other workers what their long polls and webhook dispatchers
 * need (see ngx_http_session_db_relay.c).
 */

#ifndef _NGX_HTTP_SESSION_DB_RELAY_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_RELAY_H_INCLUDED_


#include "ngx_http_session_common.h"


typedef void (*ngx_http_session_relay_wake_pt)(void);
typedef void (*ngx_http_session_relay_event_pt)(u_char *sid, size_t len);

/*
 * Whom the notifications wake in each worker: the folders above (the long
 * polls, the webhook dispatcher), wired by the module, so that src/db/
 * knows nothing of them.
 */
typedef struct {
    /* session_events: "<event>:<session id>", one session changed */
    ngx_http_session_relay_event_pt  event;
    /* LISTEN is in effect again: any session may have changed unheard */
    ngx_http_session_relay_wake_pt   events_lost;
    /* session_webhooks, or LISTEN in effect again: an event may be due */
    ngx_http_session_relay_wake_pt   webhooks;
} ngx_http_session_relay_handlers_t;


/* the master, for the workers of a configuration: their sockets */
ngx_int_t ngx_http_session_relay_init_module(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);
ngx_int_t ngx_http_session_relay_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf,
    const ngx_http_session_relay_handlers_t *handlers);
void ngx_http_session_relay_exit_process(ngx_cycle_t *cycle);

/* this process is the node's listener: worker 0, or the only one */
ngx_uint_t ngx_http_session_relay_listens(void);

/* the listener's notifications, to this worker and the others */
void ngx_http_session_relay_event(u_char *sid, size_t len);
void ngx_http_session_relay_events_lost(void);
void ngx_http_session_relay_webhooks(void);


#endif /* _NGX_HTTP_SESSION_DB_RELAY_H_INCLUDED_ */
