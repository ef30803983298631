/*
 * The long poll: GET /api/v1/sessions/{sid}/poll, and the per-worker
 * table of the polls that wait, woken by the LISTEN connection.
 */

#ifndef _NGX_HTTP_SESSION_POLL_H_INCLUDED_
#define _NGX_HTTP_SESSION_POLL_H_INCLUDED_


#include "ngx_http_session_common.h"


/* GET /api/v1/sessions/{sid}/poll */
ngx_int_t ngx_http_session_poll(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/* "uploaded:", "completed:" or "expired:" of a session: a hint */
void ngx_http_session_poll_wake(u_char *sid, size_t len);

/* notifications may have been lost: every waiter reads again */
void ngx_http_session_poll_wake_all(void);

ngx_int_t ngx_http_session_poll_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);
void ngx_http_session_poll_exit_process(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_POLL_H_INCLUDED_ */
