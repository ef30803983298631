/*
 * session_status: counters and zone figures for operators.
 */

#ifndef _NGX_HTTP_SESSION_STATUS_H_INCLUDED_
#define _NGX_HTTP_SESSION_STATUS_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_stats.h"


char *ngx_http_session_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_session_status_handler(ngx_http_request_t *r);

/* the log-phase handler: counts each answer of a session_api location */
ngx_int_t ngx_http_session_status_log(ngx_http_request_t *r);

/* points ngx_http_session_stats at the zone's counters */
ngx_int_t ngx_http_session_status_init_process(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_STATUS_H_INCLUDED_ */
