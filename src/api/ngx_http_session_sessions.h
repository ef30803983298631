/*
 * The sessions endpoints: create, list, get, complete.
 */

#ifndef _NGX_HTTP_SESSION_SESSIONS_H_INCLUDED_
#define _NGX_HTTP_SESSION_SESSIONS_H_INCLUDED_


#include "ngx_http_session_common.h"


ngx_int_t ngx_http_session_create(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
ngx_int_t ngx_http_session_list(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
ngx_int_t ngx_http_session_get(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
ngx_int_t ngx_http_session_complete(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);


#endif /* _NGX_HTTP_SESSION_SESSIONS_H_INCLUDED_ */
