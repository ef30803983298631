/*
 * Webhook delivery from the outbox: every worker claims due events,
 * sends them with nginx's resolver, connection and SSL layers, and
 * records the outcome (webhook_outbox.c: the dispatcher; webhook_client.c:
 * one delivery, and the TLS context of them all; webhook_keepalive.c: the
 * idle connections).
 */

#ifndef _NGX_HTTP_SESSION_WEBHOOK_H_INCLUDED_
#define _NGX_HTTP_SESSION_WEBHOOK_H_INCLUDED_


#include "ngx_http_session_common.h"


/* session_webhook_concurrency: default and bounds */
#define NGX_HTTP_SESSION_WEBHOOK_CONCURRENCY      64
#define NGX_HTTP_SESSION_WEBHOOK_CONCURRENCY_MAX  4096

/* session_webhook_max_attempts: default and bound */
#define NGX_HTTP_SESSION_WEBHOOK_ATTEMPTS         8
#define NGX_HTTP_SESSION_WEBHOOK_ATTEMPTS_MAX     100


/* "nginx -t": the TLS context for https targets, the resolver warning */
ngx_int_t ngx_http_session_webhook_init_conf(ngx_conf_t *cf,
    ngx_http_session_main_conf_t *smcf);

ngx_int_t ngx_http_session_webhook_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);
void ngx_http_session_webhook_exit_process(ngx_cycle_t *cycle);

/* an event may be due: claim now (a NOTIFY, or LISTEN back up) */
void ngx_http_session_webhook_wake(void);


#endif /* _NGX_HTTP_SESSION_WEBHOOK_H_INCLUDED_ */
