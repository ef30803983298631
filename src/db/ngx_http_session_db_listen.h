/*
 * One LISTEN connection per worker: revocations, long-poll and webhook
 * wake-ups reach every worker of every node through PostgreSQL.
 */

#ifndef _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_


#include "ngx_http_session_common.h"


typedef void (*ngx_http_session_listen_wake_pt)(void);
typedef void (*ngx_http_session_listen_event_pt)(u_char *sid, size_t len);

/*
 * Whom the notifications wake: the folders above (the long polls, the
 * webhook dispatcher), wired by the module, so that this file knows
 * nothing of them.
 */
typedef struct {
    /* session_events: "<event>:<session id>", one session changed */
    ngx_http_session_listen_event_pt  event;
    /* LISTEN is in effect again: any session may have changed unheard */
    ngx_http_session_listen_wake_pt   events_lost;
    /* session_webhooks, or LISTEN in effect again: an event may be due */
    ngx_http_session_listen_wake_pt   webhooks;
} ngx_http_session_listen_handlers_t;


ngx_int_t ngx_http_session_listen_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf,
    const ngx_http_session_listen_handlers_t *handlers);
void ngx_http_session_listen_exit_process(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_ */
