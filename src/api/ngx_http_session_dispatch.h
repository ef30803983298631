/*
 * Dispatch: from a route to its endpoint.
 */

#ifndef _NGX_HTTP_SESSION_DISPATCH_H_INCLUDED_
#define _NGX_HTTP_SESSION_DISPATCH_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * Stages 4 to 6: runs the endpoint of a routed, admitted request;
 * NGX_DONE when it answers later.  An ngx_http_session_next_pt.
 */
ngx_int_t ngx_http_session_dispatch(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);


#endif /* _NGX_HTTP_SESSION_DISPATCH_H_INCLUDED_ */
