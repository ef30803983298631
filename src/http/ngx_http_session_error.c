/*
 * The error room: every error body of docs/api.md §2,
 * {"statusCode": N, "error": "<reason>", "message": "..."}, rendered here
 * (the fixed ones once per process) and handed to the response room to
 * send; and the filters that turn nginx's own error pages into the same
 * JSON.
 */

#include "ngx_http_session_error.h"
#include "ngx_http_session_response.h"
#include "ngx_http_session_json.h"


typedef struct {
    ngx_uint_t  status;
    ngx_str_t   message;
} ngx_http_session_err_t;


/* the exact messages of docs/api.md, each named once */
static ngx_http_session_err_t  ngx_http_session_errors[] = {
    { 401, ngx_string("API key is required") },
    { 401, ngx_string("API key is malformed") },
    { 401, ngx_string("API key is invalid") },
    { 403, ngx_string("account is suspended") },
    { 400, ngx_string("bad request") },
    { 400, ngx_string("request header is too large") },
    { 413, ngx_string("request body is too large") },
    { 414, ngx_string("request URI is too long") },
    { 404, ngx_string("route not found") },
    { 405, ngx_string("method not allowed") },
    { 429, ngx_string("rate limit exceeded") },
    { 501, ngx_string("not implemented") },
    { 500, ngx_string("internal server error") },
    { 503, ngx_string("database unavailable") },
    { 404, ngx_string("session not found") },
    { 403, ngx_string("session belongs to another project") },
    { 410, ngx_string("session has expired") },
    { 403, ngx_string("plan does not allow webhook") },
    { 403, ngx_string("plan does not allow long_poll") },
    { 429, ngx_string("monthly session quota exceeded") },
    { 415, ngx_string("Content-Type must be application/json") },
    { 413, ngx_string("request body exceeds 65536 bytes") },
    { 400, ngx_string("limit must be an integer between 1 and 100") },
    { 400, ngx_string("status must be one of: open, completed, expired") },
    { 400, ngx_string("cursor is invalid") },
    { 400, ngx_string("Idempotency-Key is malformed") },
    { 422, ngx_string("Idempotency-Key was used with a different request") },
    { 409, ngx_string("a request with this Idempotency-Key is in progress") },
    /* with a value after it: ngx_http_session_error_value() */
    { 415, ngx_string("unsupported image type: ") },
    { 400, ngx_string("image body is empty") },
    /* "image exceeds <n> bytes" */
    { 413, ngx_string("image exceeds ") },
    { 400, ngx_string("body is not a valid ") },
    { 409, ngx_string("session is completed") },
    { 404, ngx_string("image not found") },
    { 409, ngx_string("image is already acknowledged") },
    { 400, ngx_string("acknowledged must be true or false") },
    { 410, ngx_string("all images are acknowledged") },
    /* "timeout must be an integer between 0 and <max>" */
    { 400, ngx_string("timeout must be an integer between 0 and ") },
    /* session_status, not an API route */
    { 400, ngx_string("format must be json or prometheus") },
    /* session_auth_fail_limit, before stage 2: no X-RateLimit-* */
    { 429, ngx_string("too many failed authentication attempts") }
};


/* a fixed error as it is sent, rendered once per process */
typedef struct {
    ngx_str_t   body;
    ngx_str_t   status_line;
} ngx_http_session_err_sent_t;


static size_t ngx_http_session_error_len(ngx_uint_t status,
    ngx_str_t *message);
static u_char *ngx_http_session_error_render(u_char *p, ngx_uint_t status,
    ngx_str_t *message);
static ngx_buf_t *ngx_http_session_error_fixed(ngx_http_session_ctx_t *ctx,
    ngx_http_session_err_e err);
static ngx_int_t ngx_http_session_error_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_error_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_session_error_too_large(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_str_t *message);
static ngx_int_t ngx_http_session_error_reason(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *message);
static ngx_int_t ngx_http_session_request_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);


/* a 503 asks for a retry in a second */
static ngx_str_t  ngx_http_session_retry_after = ngx_string("Retry-After");


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;
static ngx_http_request_body_filter_pt   ngx_http_next_request_body_filter;

/*
 * The bodies of the fixed errors never change: they are rendered once,
 * into memory that lives as long as the process (a failed reload must
 * not leave them in a destroyed cycle's pool), and sent from there.
 */
static ngx_http_session_err_sent_t  ngx_http_session_errors_sent[
                                                NGX_HTTP_SESSION_ERR_LAST];
static u_char                      *ngx_http_session_errors_rendered;


ngx_int_t
ngx_http_session_error(ngx_http_request_t *r, ngx_http_session_err_e err)
{
    ngx_buf_t                    *b;
    ngx_http_session_ctx_t       *ctx;
    ngx_http_session_err_sent_t  *e;

    ctx = ngx_http_session_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    e = &ngx_http_session_errors_sent[err];

    if (ngx_http_session_errors[err].status == NGX_HTTP_SERVICE_UNAVAILABLE) {
        if (ngx_http_session_header_add(r, &ngx_http_session_retry_after,
                                        (u_char *) "1", 1)
            == NULL)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    b = ngx_http_session_error_fixed(ctx, err);

    return ngx_http_session_response_send(r,
                                          ngx_http_session_errors[err].status,
                                          &e->status_line, NULL, b);
}


/* a buffer header in ctx over the static body: nothing is allocated */

static ngx_buf_t *
ngx_http_session_error_fixed(ngx_http_session_ctx_t *ctx,
    ngx_http_session_err_e err)
{
    ngx_buf_t  *b;

    b = &ctx->err_buf;

    ngx_memzero(b, sizeof(ngx_buf_t));

    b->pos = ngx_http_session_errors_sent[err].body.data;
    b->last = b->pos + ngx_http_session_errors_sent[err].body.len;
    b->start = b->pos;
    b->end = b->last;
    b->memory = 1;

    return b;
}


ngx_int_t
ngx_http_session_error_value(ngx_http_request_t *r,
    ngx_http_session_err_e err, ngx_str_t *value)
{
    ngx_str_t                msg;
    ngx_http_session_err_t  *e;

    e = &ngx_http_session_errors[err];

    msg.len = e->message.len + value->len
              + ((err == NGX_HTTP_SESSION_ERR_IMAGE_TOO_LARGE)
                 ? sizeof(" bytes") - 1 : 0);

    msg.data = ngx_pnalloc(r->pool, msg.len);
    if (msg.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_sprintf(msg.data, "%V%V%s", &e->message, value,
                (err == NGX_HTTP_SESSION_ERR_IMAGE_TOO_LARGE) ? " bytes" : "");

    return ngx_http_session_error_message(r, e->status, &msg);
}


ngx_int_t
ngx_http_session_error_message(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *message)
{
    ngx_buf_t  *b;

    b = ngx_http_session_error_body(r, status, message);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (status == NGX_HTTP_SERVICE_UNAVAILABLE) {
        if (ngx_http_session_header_add(r, &ngx_http_session_retry_after,
                                        (u_char *) "1", 1)
            == NULL)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    return ngx_http_session_send_json(r, status, b);
}


ngx_buf_t *
ngx_http_session_error_body(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *message)
{
    ngx_buf_t  *b;

    b = ngx_create_temp_buf(r->pool,
                            ngx_http_session_error_len(status, message));
    if (b == NULL) {
        return NULL;
    }

    b->last = ngx_http_session_error_render(b->last, status, message);
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    return b;
}


/* the one renderer of error bodies, and how long its output is */

static size_t
ngx_http_session_error_len(ngx_uint_t status, ngx_str_t *message)
{
    return sizeof("{\"statusCode\": , \"error\": \"\", \"message\": \"\"}")
           - 1 + NGX_INT_T_LEN
           + ngx_strlen(ngx_http_session_reason((unsigned) status))
           + ngx_http_session_json_escape(NULL, message->data, message->len);
}


static u_char *
ngx_http_session_error_render(u_char *p, ngx_uint_t status,
    ngx_str_t *message)
{
    p = ngx_sprintf(p, "{\"statusCode\": %ui, \"error\": \"%s\", "
                    "\"message\": \"", status,
                    ngx_http_session_reason((unsigned) status));
    p += ngx_http_session_json_escape(p, message->data, message->len);
    *p++ = '"';
    *p++ = '}';

    return p;
}


ngx_int_t
ngx_http_session_error_init(ngx_log_t *log)
{
    size_t                        len;
    u_char                       *p;
    ngx_uint_t                    i;
    const char                   *line;
    ngx_http_session_err_t       *e;
    ngx_http_session_err_sent_t  *sent;

    if (ngx_http_session_errors_rendered) {
        return NGX_OK;
    }

    len = 0;

    for (i = 0; i < NGX_HTTP_SESSION_ERR_LAST; i++) {
        e = &ngx_http_session_errors[i];
        len += ngx_http_session_error_len(e->status, &e->message);
    }

    p = ngx_alloc(len, log);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_http_session_errors_rendered = p;

    for (i = 0; i < NGX_HTTP_SESSION_ERR_LAST; i++) {
        e = &ngx_http_session_errors[i];
        sent = &ngx_http_session_errors_sent[i];

        sent->body.data = p;
        p = ngx_http_session_error_render(p, e->status, &e->message);
        sent->body.len = p - sent->body.data;

        line = ngx_http_session_status_line((unsigned) e->status);
        sent->status_line.data = (u_char *) line;
        sent->status_line.len = line ? ngx_strlen(line) : 0;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_session_error_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_session_error_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_session_error_body_filter;

    ngx_http_next_request_body_filter = ngx_http_top_request_body_filter;
    ngx_http_top_request_body_filter = ngx_http_session_request_body_filter;

    return NGX_OK;
}


/*
 * nginx answers some errors before (or instead of) the module's handler:
 * a bad request line or header, 413 over the body limit, 414, 494.  In a
 * server with a session_api location those pages become JSON too.
 */

static ngx_int_t
ngx_http_session_error_header_filter(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_str_t                     message;
    ngx_uint_t                    status, err, status_location;
    ngx_buf_t                    *b;
    ngx_http_session_ctx_t       *ctx;
    ngx_http_session_srv_conf_t  *sscf;
    ngx_http_session_loc_conf_t  *slcf;

    if (r->err_status == 0 || r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);
    status_location = (slcf != NULL && slcf->status_location);

    sscf = ngx_http_get_module_srv_conf(r, ngx_http_session_module);
    if ((sscf == NULL || !sscf->api) && !status_location) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    if (ctx && ctx->own_response) {
        return ngx_http_next_header_filter(r);
    }

    status = r->headers_out.status;
    err = NGX_HTTP_SESSION_ERR_LAST;

    switch (status) {

    case NGX_HTTP_BAD_REQUEST:
        /*
         * nginx sends its 494 as 400 and keeps no trace of the 494 but
         * this: it asks for a lingering close there, and clears that flag
         * for every plain 400 it answers.
         */
        if (r->lingering_close) {
            err = NGX_HTTP_SESSION_ERR_HEADER_TOO_LARGE;
            break;
        }

        err = NGX_HTTP_SESSION_ERR_BAD_REQUEST;
        break;

    case NGX_HTTP_REQUEST_HEADER_TOO_LARGE:
        status = NGX_HTTP_BAD_REQUEST;
        err = NGX_HTTP_SESSION_ERR_HEADER_TOO_LARGE;
        break;

    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
        rc = ngx_http_session_error_too_large(r, ctx, &message);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        err = (ngx_uint_t) rc;
        break;

    case NGX_HTTP_NOT_ALLOWED:
        /* e.g. TRACE, which nginx refuses before choosing a location */
        err = NGX_HTTP_SESSION_ERR_METHOD_NOT_ALLOWED;
        break;

    case NGX_HTTP_REQUEST_URI_TOO_LARGE:
        err = NGX_HTTP_SESSION_ERR_URI_TOO_LONG;
        break;

    case NGX_HTTP_NOT_IMPLEMENTED:
        /* a Transfer-Encoding nginx does not know, refused as it reads */
        err = NGX_HTTP_SESSION_ERR_NOT_IMPLEMENTED;
        break;

    case NGX_HTTP_VERSION_NOT_SUPPORTED:
        /* HTTP/2.0 and later on an HTTP/1 connection: its reason */
        if (ngx_http_session_error_reason(r, status, &message) != NGX_OK) {
            return NGX_ERROR;
        }

        break;

    default:
        slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

        if (status < NGX_HTTP_BAD_REQUEST
            || ((slcf == NULL || !slcf->api) && !status_location))
        {
            return ngx_http_next_header_filter(r);
        }

        if (status >= NGX_HTTP_INTERNAL_SERVER_ERROR) {
            status = NGX_HTTP_INTERNAL_SERVER_ERROR;
            err = NGX_HTTP_SESSION_ERR_INTERNAL;
            break;
        }

        /* a client error raised by nginx, e.g. 408: its reason */
        if (ngx_http_session_error_reason(r, status, &message) != NGX_OK) {
            return NGX_ERROR;
        }

        break;
    }

    ctx = ngx_http_session_get_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        b = ngx_http_session_error_fixed(ctx, err);
        b->last_buf = 1;
        b->last_in_chain = 1;

    } else {
        b = ngx_http_session_error_body(r, status, &message);
        if (b == NULL) {
            return NGX_ERROR;
        }
    }

    ctx->json_error = b;
    r->headers_out.status = status;
    r->err_status = status;

    ngx_http_clear_location(r);

    if (ngx_http_session_response_json(r, NULL, b->last - b->pos)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_next_header_filter(r);
}


/* the message of an error nginx raised: the status's reason, lower-case */

static ngx_int_t
ngx_http_session_error_reason(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *message)
{
    message->data = (u_char *) ngx_http_session_reason(status);
    message->len = ngx_strlen(message->data);
    message->data = ngx_pstrdup(r->pool, message);
    if (message->data == NULL) {
        return NGX_ERROR;
    }

    ngx_strlow(message->data, message->data, message->len);

    return NGX_OK;
}


static ngx_int_t
ngx_http_session_error_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_chain_t              out, *cl;
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ctx == NULL || ctx->json_error == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    /* nginx's HTML page is dropped: mark it sent */

    for (cl = in; cl; cl = cl->next) {
        cl->buf->pos = cl->buf->last;
        cl->buf->file_pos = cl->buf->file_last;
    }

    if (ctx->json_error_sent) {
        return ngx_http_next_body_filter(r, NULL);
    }

    ctx->json_error_sent = 1;

    out.buf = ctx->json_error;
    out.next = NULL;

    return ngx_http_next_body_filter(r, &out);
}


/*
 * 413 raised while the body was read: the route's own message in a
 * session_api location (the module's request body filter raises it
 * there), nginx's generic one elsewhere.  Returns the fixed error to
 * send, or NGX_HTTP_SESSION_ERR_LAST with *message built for an upload,
 * or NGX_ERROR.
 */

static ngx_int_t
ngx_http_session_error_too_large(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_str_t *message)
{
    u_char                       *p;
    ngx_http_session_route_t      route;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    if (slcf == NULL || !slcf->api || r->method != NGX_HTTP_POST) {
        return NGX_HTTP_SESSION_ERR_BODY_TOO_LARGE;
    }

    if (ctx == NULL) {
        (void) ngx_http_session_route_match(r->uri.data, r->uri.len, &route);

    } else {
        route = ctx->route;
    }

    if (route.id == NGX_HTTP_SESSION_ROUTE_SESSIONS) {
        return NGX_HTTP_SESSION_ERR_JSON_TOO_LARGE;
    }

    if (route.id != NGX_HTTP_SESSION_ROUTE_IMAGES) {
        return NGX_HTTP_SESSION_ERR_BODY_TOO_LARGE;
    }

    p = ngx_pnalloc(r->pool, sizeof("image exceeds  bytes") - 1
                             + NGX_OFF_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    message->data = p;
    message->len = ngx_sprintf(p, "%V%O bytes",
                 &ngx_http_session_errors[NGX_HTTP_SESSION_ERR_IMAGE_TOO_LARGE]
                 .message, slcf->image_max_size)
                   - p;

    return NGX_HTTP_SESSION_ERR_LAST;
}


/*
 * The limit of a body being read, set by the endpoint that reads it:
 * counted as the (de-chunked) bytes arrive, so that a body without
 * Content-Length stops at the limit too.
 */

static ngx_int_t
ngx_http_session_request_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_chain_t             *cl;
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ctx == NULL || ctx->body_limit == 0) {
        return ngx_http_next_request_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {
        ctx->body_received += ngx_buf_size(cl->buf);
    }

    if (ctx->body_received > ctx->body_limit) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "session: request body over %O bytes",
                      ctx->body_limit);
        return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;
    }

    return ngx_http_next_request_body_filter(r, in);
}
