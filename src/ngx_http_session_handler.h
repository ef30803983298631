/*
 * The request pipeline of API.md section 1: authentication, rate limit,
 * route, then the endpoint.
 */

#ifndef _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_
#define _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_


#include "ngx_http_session_common.h"


ngx_int_t ngx_http_session_handler(ngx_http_request_t *r);

/* continues the pipeline after an asynchronous stage 1 */
void ngx_http_session_resume(ngx_http_request_t *r, ngx_int_t rc);


#endif /* _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_ */
