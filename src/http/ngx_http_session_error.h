/*
 * Every error the API answers: the one renderer of docs/api.md §2, the
 * table of fixed messages, and the filter that turns nginx's own error
 * pages into the same JSON.  Errors are sent through the response room.
 */

#ifndef _NGX_HTTP_SESSION_ERROR_H_INCLUDED_
#define _NGX_HTTP_SESSION_ERROR_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_response.h"


typedef enum {
    NGX_HTTP_SESSION_ERR_KEY_REQUIRED = 0,
    NGX_HTTP_SESSION_ERR_KEY_MALFORMED,
    NGX_HTTP_SESSION_ERR_KEY_INVALID,
    NGX_HTTP_SESSION_ERR_SUSPENDED,
    NGX_HTTP_SESSION_ERR_BAD_REQUEST,
    NGX_HTTP_SESSION_ERR_HEADER_TOO_LARGE,
    NGX_HTTP_SESSION_ERR_BODY_TOO_LARGE,
    NGX_HTTP_SESSION_ERR_URI_TOO_LONG,
    NGX_HTTP_SESSION_ERR_ROUTE_NOT_FOUND,
    NGX_HTTP_SESSION_ERR_METHOD_NOT_ALLOWED,
    NGX_HTTP_SESSION_ERR_RATE_LIMITED,
    NGX_HTTP_SESSION_ERR_NOT_IMPLEMENTED,
    NGX_HTTP_SESSION_ERR_INTERNAL,
    NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE,
    NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND,
    NGX_HTTP_SESSION_ERR_SESSION_FORBIDDEN,
    NGX_HTTP_SESSION_ERR_SESSION_EXPIRED,
    NGX_HTTP_SESSION_ERR_PLAN_WEBHOOK,
    NGX_HTTP_SESSION_ERR_PLAN_LONG_POLL,
    NGX_HTTP_SESSION_ERR_QUOTA,
    NGX_HTTP_SESSION_ERR_JSON_TYPE,
    NGX_HTTP_SESSION_ERR_JSON_TOO_LARGE,
    NGX_HTTP_SESSION_ERR_LIMIT,
    NGX_HTTP_SESSION_ERR_STATUS,
    NGX_HTTP_SESSION_ERR_CURSOR,
    NGX_HTTP_SESSION_ERR_IDEM_MALFORMED,
    NGX_HTTP_SESSION_ERR_IDEM_MISMATCH,
    NGX_HTTP_SESSION_ERR_IDEM_RUNNING,
    NGX_HTTP_SESSION_ERR_IMAGE_TYPE,
    NGX_HTTP_SESSION_ERR_IMAGE_EMPTY,
    NGX_HTTP_SESSION_ERR_IMAGE_TOO_LARGE,
    NGX_HTTP_SESSION_ERR_IMAGE_INVALID,
    NGX_HTTP_SESSION_ERR_SESSION_COMPLETED,
    NGX_HTTP_SESSION_ERR_IMAGE_NOT_FOUND,
    NGX_HTTP_SESSION_ERR_IMAGE_ACKNOWLEDGED,
    NGX_HTTP_SESSION_ERR_ACKNOWLEDGED,
    NGX_HTTP_SESSION_ERR_ALL_ACKNOWLEDGED,
    NGX_HTTP_SESSION_ERR_TIMEOUT,
    NGX_HTTP_SESSION_ERR_STATUS_FORMAT,
    NGX_HTTP_SESSION_ERR_AUTH_FAIL_LIMITED,
    NGX_HTTP_SESSION_ERR_LAST
} ngx_http_session_err_e;


/* sends one of the fixed errors; returns what the handler should return */
ngx_int_t ngx_http_session_error(ngx_http_request_t *r,
    ngx_http_session_err_e err);

/*
 * sends one of the errors whose message ends in a value: the fixed part
 * of the table, then the value (e.g. "unsupported image type: " "none")
 */
ngx_int_t ngx_http_session_error_value(ngx_http_request_t *r,
    ngx_http_session_err_e err, ngx_str_t *value);

/* sends an error with a message built by the caller */
ngx_int_t ngx_http_session_error_message(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *message);

/* the JSON body of an error with any message, allocated from r->pool */
ngx_buf_t *ngx_http_session_error_body(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *message);

ngx_int_t ngx_http_session_error_filter_init(ngx_conf_t *cf);

/* renders the fixed errors' bodies, once per process */
ngx_int_t ngx_http_session_error_init(ngx_log_t *log);


#endif /* _NGX_HTTP_SESSION_ERROR_H_INCLUDED_ */
