/*
 * Error bodies: {"statusCode": N, "error": "<reason>", "message": "..."}.
 */

#include "ngx_http_session_error.h"
#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_json.h"


typedef struct {
    ngx_uint_t  status;
    ngx_str_t   message;
} ngx_http_session_err_t;


/* the exact messages of API.md, each named once */
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
    { 400, ngx_string("acknowledged must be true or false") }
};


static ngx_int_t ngx_http_session_error_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_error_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_session_error_set_json(ngx_http_request_t *r,
    off_t len);
static ngx_int_t ngx_http_session_error_too_large(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_str_t *message);
static ngx_int_t ngx_http_session_request_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;
static ngx_http_request_body_filter_pt   ngx_http_next_request_body_filter;


ngx_http_session_ctx_t *
ngx_http_session_get_ctx(ngx_http_request_t *r)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    if (ctx) {
        return ctx;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_session_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ngx_http_set_ctx(r, ctx, ngx_http_session_module);

    return ctx;
}


ngx_int_t
ngx_http_session_error(ngx_http_request_t *r, ngx_http_session_err_e err)
{
    ngx_http_session_err_t  *e;

    e = &ngx_http_session_errors[err];

    return ngx_http_session_error_message(r, e->status, &e->message);
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
    ngx_buf_t        *b;
    ngx_table_elt_t  *h;

    b = ngx_http_session_error_body(r, status, message);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (status == NGX_HTTP_SERVICE_UNAVAILABLE) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "Retry-After");
        ngx_str_set(&h->value, "1");
    }

    return ngx_http_session_send_json(r, status, b);
}


ngx_int_t
ngx_http_session_send_json(ngx_http_request_t *r, ngx_uint_t status,
    ngx_buf_t *b)
{
    ngx_int_t                rc;
    ngx_chain_t              out;
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_session_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->idem && ngx_http_session_idempotency_pending(ctx)) {
        /* the answer is kept for the Idempotency-Key first, then sent */
        return ngx_http_session_idempotency_answer(r, ctx, status, b);
    }

    ctx->own_response = 1;

    if (r->request_body == NULL
        && ngx_http_discard_request_body(r) != NGX_OK)
    {
        r->keepalive = 0;
    }

    r->headers_out.status = status;

    if (ngx_http_session_error_set_json(r, b->last - b->pos) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


ngx_buf_t *
ngx_http_session_error_body(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *message)
{
    size_t       len;
    u_char      *p;
    ngx_buf_t   *b;
    const char  *reason;

    reason = ngx_http_session_reason((unsigned) status);

    len = sizeof("{\"statusCode\": , \"error\": \"\", \"message\": \"\"}") - 1
          + NGX_INT_T_LEN + ngx_strlen(reason)
          + ngx_http_session_json_escape(NULL, message->data, message->len);

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NULL;
    }

    p = ngx_sprintf(b->last, "{\"statusCode\": %ui, \"error\": \"%s\", "
                    "\"message\": \"", status, reason);
    p += ngx_http_session_json_escape(p, message->data, message->len);
    *p++ = '"';
    *p++ = '}';

    b->last = p;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    return b;
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


static ngx_int_t
ngx_http_session_error_set_json(ngx_http_request_t *r, off_t len)
{
    const char  *line;

    /*
     * nginx's own status lines differ for some codes ("405 Not Allowed"):
     * the API's reason phrase, from a static table, no allocation.
     */

    line = ngx_http_session_status_line((unsigned) r->headers_out.status);

    if (line) {
        r->headers_out.status_line.data = (u_char *) line;
        r->headers_out.status_line.len = ngx_strlen(line);
    }

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.charset.len = 0;

    r->headers_out.content_length_n = len;

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

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
    ngx_uint_t                    status;
    ngx_str_t                     message;
    ngx_buf_t                    *b;
    ngx_http_session_ctx_t       *ctx;
    ngx_http_session_srv_conf_t  *sscf;
    ngx_http_session_loc_conf_t  *slcf;

    if (r->err_status == 0 || r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    sscf = ngx_http_get_module_srv_conf(r, ngx_http_session_module);
    if (sscf == NULL || !sscf->api) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    if (ctx && ctx->own_response) {
        return ngx_http_next_header_filter(r);
    }

    status = r->headers_out.status;

    switch (status) {

    case NGX_HTTP_BAD_REQUEST:
        /*
         * nginx sends its 494 as 400 and keeps no trace of the 494 but
         * this: it asks for a lingering close there, and clears that flag
         * for every plain 400 it answers.
         */
        if (r->lingering_close) {
            message =
                ngx_http_session_errors[NGX_HTTP_SESSION_ERR_HEADER_TOO_LARGE]
                .message;
            break;
        }

        message = ngx_http_session_errors[NGX_HTTP_SESSION_ERR_BAD_REQUEST]
                  .message;
        break;

    case NGX_HTTP_REQUEST_HEADER_TOO_LARGE:
        status = NGX_HTTP_BAD_REQUEST;
        message =
            ngx_http_session_errors[NGX_HTTP_SESSION_ERR_HEADER_TOO_LARGE]
            .message;
        break;

    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
        if (ngx_http_session_error_too_large(r, ctx, &message) != NGX_OK) {
            return NGX_ERROR;
        }

        break;

    case NGX_HTTP_NOT_ALLOWED:
        /* e.g. TRACE, which nginx refuses before choosing a location */
        message =
            ngx_http_session_errors[NGX_HTTP_SESSION_ERR_METHOD_NOT_ALLOWED]
            .message;
        break;

    case NGX_HTTP_REQUEST_URI_TOO_LARGE:
        message = ngx_http_session_errors[NGX_HTTP_SESSION_ERR_URI_TOO_LONG]
                  .message;
        break;

    default:
        slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

        if (status < NGX_HTTP_BAD_REQUEST || slcf == NULL || !slcf->api) {
            return ngx_http_next_header_filter(r);
        }

        if (status >= NGX_HTTP_INTERNAL_SERVER_ERROR) {
            status = NGX_HTTP_INTERNAL_SERVER_ERROR;
            message = ngx_http_session_errors[NGX_HTTP_SESSION_ERR_INTERNAL]
                      .message;
            break;
        }

        /* a client error raised by nginx, e.g. 408: its reason, lower-case */
        message.data = (u_char *) ngx_http_session_reason(status);
        message.len = ngx_strlen(message.data);
        message.data = ngx_pstrdup(r->pool, &message);
        if (message.data == NULL) {
            return NGX_ERROR;
        }

        ngx_strlow(message.data, message.data, message.len);
        break;
    }

    ctx = ngx_http_session_get_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    b = ngx_http_session_error_body(r, status, &message);
    if (b == NULL) {
        return NGX_ERROR;
    }

    ctx->json_error = b;
    r->headers_out.status = status;
    r->err_status = status;

    ngx_http_clear_location(r);

    if (ngx_http_session_error_set_json(r, b->last - b->pos) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_next_header_filter(r);
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
 * there), nginx's generic one elsewhere.
 */

static ngx_int_t
ngx_http_session_error_too_large(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_str_t *message)
{
    u_char                       *p;
    ngx_http_session_route_t      route;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    *message = ngx_http_session_errors[NGX_HTTP_SESSION_ERR_BODY_TOO_LARGE]
               .message;

    if (slcf == NULL || !slcf->api || r->method != NGX_HTTP_POST) {
        return NGX_OK;
    }

    if (ctx == NULL) {
        (void) ngx_http_session_route_match(r->uri.data, r->uri.len, &route);

    } else {
        route = ctx->route;
    }

    if (route.id == NGX_HTTP_SESSION_ROUTE_SESSIONS) {
        *message =
            ngx_http_session_errors[NGX_HTTP_SESSION_ERR_JSON_TOO_LARGE]
            .message;
        return NGX_OK;
    }

    if (route.id != NGX_HTTP_SESSION_ROUTE_IMAGES) {
        return NGX_OK;
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

    return NGX_OK;
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
