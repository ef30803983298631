/*
 * The request pipeline of docs/api.md §1: authentication, rate limit,
 * route, then the endpoint.
 */

#ifndef _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_
#define _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_


#include "ngx_http_session_common.h"


/* stages 1 and 2, as the access phase's last handler */
ngx_int_t ngx_http_session_access_handler(ngx_http_request_t *r);

/* the content handler: from wherever the access phase left the request */
ngx_int_t ngx_http_session_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_SESSION_HANDLER_H_INCLUDED_ */
