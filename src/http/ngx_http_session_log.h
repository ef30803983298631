/*
 * Keys never reach a log: every error log gets a writer that hides
 * key-shaped text, including the request headers nginx itself logs at
 * debug level.
 */

#ifndef _NGX_HTTP_SESSION_LOG_H_INCLUDED_
#define _NGX_HTTP_SESSION_LOG_H_INCLUDED_


#include "ngx_http_session_common.h"


ngx_int_t ngx_http_session_log_init_module(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_LOG_H_INCLUDED_ */
