/*
 * One LISTEN connection per node (worker 0's): revocations, long-poll and
 * webhook wake-ups reach every node through PostgreSQL, and the node's
 * other workers through db_relay.c.
 */

#ifndef _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_


#include "ngx_http_session_common.h"


ngx_int_t ngx_http_session_listen_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);
void ngx_http_session_listen_exit_process(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_ */
