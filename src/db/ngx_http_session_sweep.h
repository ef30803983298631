/*
 * The expiry sweep: every worker runs session_sweep() from a timer; the
 * database lets one sweep at a time do the work (see
 * src/sql/005_expiry_sweep.sql).
 */

#ifndef _NGX_HTTP_SESSION_SWEEP_H_INCLUDED_
#define _NGX_HTTP_SESSION_SWEEP_H_INCLUDED_


#include "ngx_http_session_common.h"


/* session_expiry_sweep_interval: default and bounds, milliseconds */
#define NGX_HTTP_SESSION_SWEEP_INTERVAL      5000
#define NGX_HTTP_SESSION_SWEEP_INTERVAL_MIN  1000
#define NGX_HTTP_SESSION_SWEEP_INTERVAL_MAX  30000

/* session_retention: default 7d, seconds; 0 is "off" (never purge) */
#define NGX_HTTP_SESSION_RETENTION           (7 * 86400)
#define NGX_HTTP_SESSION_RETENTION_OFF       0


char *ngx_http_session_retention(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_session_sweep_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);
void ngx_http_session_sweep_exit_process(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_SWEEP_H_INCLUDED_ */
