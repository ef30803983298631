/*
 * The response room: the only place that sends an answer of the API, a
 * document or an error, successes and failures alike: status line,
 * Content-Type, Content-Length as a ready header, the body.  A stage
 * that must see an answer before it goes out (the Idempotency-Key's
 * record) sets a hook in the request's context; nothing here knows what
 * the hook is for.
 */

#include "ngx_http_session_response.h"
#include "ngx_http_session_json.h"


static ngx_str_t  ngx_http_session_content_length =
    ngx_string("Content-Length");


ngx_int_t
ngx_http_session_send_json(ngx_http_request_t *r, ngx_uint_t status,
    ngx_buf_t *b)
{
    return ngx_http_session_response_send(r, status, NULL, NULL, b);
}


ngx_int_t
ngx_http_session_send_typed(ngx_http_request_t *r, ngx_str_t *type,
    ngx_buf_t *b)
{
    return ngx_http_session_response_send(r, NGX_HTTP_OK, NULL, type, b);
}


ngx_int_t
ngx_http_session_response_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *status_line, ngx_str_t *type, ngx_buf_t *b)
{
    ngx_int_t                    rc;
    ngx_chain_t                  out;
    ngx_http_session_ctx_t      *ctx;
    ngx_http_session_answer_pt   hook;

    ctx = ngx_http_session_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /*
     * A stage that wraps the endpoint takes its answer over once (the
     * Idempotency-Key keeps it first) and sends it through here again.
     */

    if (ctx->answer_hook) {
        hook = ctx->answer_hook;
        ctx->answer_hook = NULL;

        return hook(r, ctx, status, b);
    }

    ctx->own_response = 1;

    if (r->request_body == NULL) {
        ngx_http_session_discard_body(r);
    }

    r->headers_out.status = status;

    if (ngx_http_session_response_json(r, status_line, b->last - b->pos)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (type) {
        r->headers_out.content_type = *type;
        r->headers_out.content_type_len = type->len;
    }

    /*
     * Content-Length as a ready header: from content_length_n alone,
     * nginx's header filter would format it with ngx_sprintf, the most
     * expensive step of a small answer.  Filters that change the body
     * (gzip, say) clear both, as they do for a proxied answer's.
     */

    r->headers_out.content_length = ngx_http_session_header_add(r,
                                  &ngx_http_session_content_length,
                                  ctx->content_length,
                                  ngx_http_session_decimal(ctx->content_length,
                                                      b->last - b->pos)
                                  - ctx->content_length);

    if (r->headers_out.content_length == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /*
     * The API's documents carry no validator: nginx's conditional checks
     * would turn a 200 into 412 (If-Match, If-Unmodified-Since) or a 304
     * (If-None-Match: *), after the work is done (an acknowledgement, a
     * completion).  The image's content, with its ETag, answers those
     * itself and is not sent from here.
     */
    r->disable_not_modified = 1;

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


/*
 * An answer that needs none of the body (a refusal before it is read, a
 * GET): a client that sent "Expect: 100-continue" is not invited to send
 * it, as nginx's own error pages do not invite it, and since it may then
 * send the body or not, the connection closes after the answer (RFC 9110
 * 10.1.1: the server says whether it closes or reads on).  Otherwise the
 * body is read and dropped, as nginx does.
 */

void
ngx_http_session_discard_body(ngx_http_request_t *r)
{
    ngx_str_t  *expect;

    if (!r->expect_tested && r->headers_in.expect
        && (r->headers_in.content_length_n > 0 || r->headers_in.chunked))
    {
        expect = &r->headers_in.expect->value;

        if (expect->len == sizeof("100-continue") - 1
            && ngx_strncasecmp(expect->data, (u_char *) "100-continue",
                               sizeof("100-continue") - 1)
               == 0)
        {
            r->expect_tested = 1;

            if (r->http_version == NGX_HTTP_VERSION_11) {
                r->keepalive = 0;
            }
        }
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }
}


ngx_int_t
ngx_http_session_response_json(ngx_http_request_t *r,
    ngx_str_t *status_line, off_t len)
{
    const char  *line;

    /*
     * nginx's own status lines differ for some codes ("405 Not Allowed"):
     * the API's reason phrase, from a static table, no allocation; the
     * fixed errors come with theirs looked up already.
     */

    if (status_line && status_line->len) {
        r->headers_out.status_line = *status_line;

    } else {
        line = ngx_http_session_status_line(
                                        (unsigned) r->headers_out.status);

        if (line) {
            r->headers_out.status_line.data = (u_char *) line;
            r->headers_out.status_line.len = ngx_strlen(line);
        }
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
