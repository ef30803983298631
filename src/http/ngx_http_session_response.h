/*
 * The response room: the one path by which an answer of the API is sent
 * (see ngx_http_session_response.c).
 */

#ifndef _NGX_HTTP_SESSION_RESPONSE_H_INCLUDED_
#define _NGX_HTTP_SESSION_RESPONSE_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * Sends b with status: the API's status line (status_line when given,
 * else the table's reason phrase), type as Content-Type (NULL:
 * application/json), Content-Length.  An answer hook of the request's
 * context gets the answer first, once.  Returns what a handler returns.
 */
ngx_int_t ngx_http_session_response_send(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *status_line, ngx_str_t *type,
    ngx_buf_t *b);

/*
 * The request's body is not wanted: read and dropped, as nginx does, but
 * a client that waits for "100 Continue" is not asked for it
 */
void ngx_http_session_discard_body(ngx_http_request_t *r);

/* sends a JSON document with status */
ngx_int_t ngx_http_session_send_json(ngx_http_request_t *r,
    ngx_uint_t status, ngx_buf_t *b);

/* a 200 with a body that is not JSON, of the given Content-Type */
ngx_int_t ngx_http_session_send_typed(ngx_http_request_t *r, ngx_str_t *type,
    ngx_buf_t *b);

/*
 * The headers of a JSON answer of len bytes for r->headers_out.status:
 * status line, Content-Type, content_length_n (also for nginx's own
 * error pages, which the error filter turns into JSON)
 */
ngx_int_t ngx_http_session_response_json(ngx_http_request_t *r,
    ngx_str_t *status_line, off_t len);


#endif /* _NGX_HTTP_SESSION_RESPONSE_H_INCLUDED_ */
