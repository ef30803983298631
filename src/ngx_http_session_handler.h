/*
 * The request pipeline of API.md section 1: authentication, rate limit,
 * route, then the endpoint.
 */

#ifndef _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_
#define _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_


#include "ngx_http_session_common.h"


/* stages 1 and 2, as the access phase's last handler */
ngx_int_t ngx_http_session_access_handler(ngx_http_request_t *r);

/* the content handler: from wherever the access phase left the request */
ngx_int_t ngx_http_session_handler(ngx_http_request_t *r);

/* continues the pipeline after an asynchronous stage 1 */
void ngx_http_session_resume(ngx_http_request_t *r, ngx_int_t rc);

/* stages 4 to 6: runs the endpoint of a routed, admitted request */
ngx_int_t ngx_http_session_dispatch(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);


#endif /* _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_ */
