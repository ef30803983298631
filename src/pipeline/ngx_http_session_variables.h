/*
 * Variables for the access log and the operator's own configuration:
 * who called and how the rate limit judged it, never the key.
 */

#ifndef _NGX_HTTP_SESSION_VARIABLES_H_INCLUDED_
#define _NGX_HTTP_SESSION_VARIABLES_H_INCLUDED_


#include "ngx_http_session_common.h"


ngx_int_t ngx_http_session_variables_add(ngx_conf_t *cf);


#endif /* _NGX_HTTP_SESSION_VARIABLES_H_INCLUDED_ */
