/*
 * One LISTEN connection per worker: revocations (and, later, long-poll
 * wake-ups) reach every worker of every node through PostgreSQL.
 */

#ifndef _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_


#include "ngx_http_session_common.h"


ngx_int_t ngx_http_session_listen_init_process(ngx_cycle_t *cycle);
void ngx_http_session_listen_exit_process(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_DB_LISTEN_H_INCLUDED_ */
