/*
 * The request room: arguments, body, project parameter, running a
 * query, stage 5 from a result (see ngx_http_session_request.c).
 */

#ifndef _NGX_HTTP_SESSION_REQUEST_H_INCLUDED_
#define _NGX_HTTP_SESSION_REQUEST_H_INCLUDED_


#include "ngx_http_session_common.h"

#include <libpq-fe.h>

#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"


/* a session list or create body may hold at most this many bytes */
#define NGX_HTTP_SESSION_JSON_BODY_MAX  65536


/* the header name of a created resource's address */
extern ngx_str_t  ngx_http_session_location;


/*
 * A header field's value without the white space around it (RFC 9110
 * 5.5): nginx takes the spaces off, not the tabs
 */

static ngx_inline void
ngx_http_session_header_value(ngx_table_elt_t *h, u_char **start,
    u_char **end)
{
    u_char  *p, *last;

    p = h->value.data;
    last = p + h->value.len;

    while (p < last && (*p == ' ' || *p == '\t')) {
        p++;
    }

    while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
        last--;
    }

    *start = p;
    *end = last;
}

/*
 * The next "name=value" of the query string from *pos, both unescaped
 * into r->pool; NGX_DONE at the end.
 */
ngx_int_t ngx_http_session_arg_next(ngx_http_request_t *r, u_char **pos,
    ngx_str_t *name, ngx_str_t *value);

/*
 * The end of a request that its query's handler answers: the document b
 * with status, or 500 when b is NULL (its rendering failed); or err.
 */
void ngx_http_session_reply(ngx_http_request_t *r, ngx_uint_t status,
    ngx_buf_t *b);
void ngx_http_session_refuse(ngx_http_request_t *r,
    ngx_http_session_err_e err);

/*
 * Runs q: NGX_DONE (the query's handler finalizes the request), or the
 * 503 that was sent.
 */
ngx_int_t ngx_http_session_run(ngx_http_request_t *r,
    ngx_http_session_db_query_t *q);

/* the project id as a NUL-terminated text parameter, made once */
char *ngx_http_session_project(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/*
 * Reads the request body for handler, a chunked one stopped at limit
 * while it is read: NGX_DONE, or the error status reading it answered.
 */
ngx_int_t ngx_http_session_body_start(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, off_t limit,
    ngx_http_client_body_handler_pt handler);

/*
 * The whole request body in one piece (not NUL-terminated); NULL with
 * *len over max when too large, NULL with *len 0 on failure.
 */
u_char *ngx_http_session_read_body(ngx_http_request_t *r, size_t max,
    size_t *len);

/* the size of the body that was read (memory and temporary file) */
off_t ngx_http_session_body_size(ngx_http_request_t *r);

/*
 * Up to size bytes of the body from offset into buf, from memory or from
 * the temporary file: their count (fewer where a buffer ends), 0 past
 * the end, NGX_ERROR when the file cannot be read
 */
ssize_t ngx_http_session_body_read(ngx_http_request_t *r, off_t offset,
    u_char *buf, size_t size);

/*
 * Stage 5 from the first row of a session-scoped statement's result
 * (project and status in the given columns): NGX_HTTP_SESSION_ERR_LAST
 * when the session may be used, else the error to answer (503 for no
 * result, 500 for a failed one, 404, 403, 410).
 */
ngx_http_session_err_e ngx_http_session_check(
    ngx_http_session_db_query_t *q, PGresult *res, int project_col,
    int status_col);

/*
 * The same of a statement that returns NGX_HTTP_SESSION_SQL_CHECK_COLS,
 * then an image's columns: none when they are NULL (no such image)
 */
ngx_http_session_err_e ngx_http_session_check_image(
    ngx_http_session_db_query_t *q, PGresult *res,
    ngx_http_session_err_e none);

/*
 * The query parameters an endpoint takes, as a table ended by a row with
 * no name: each name with what reads its value into the endpoint's
 * arguments, at offset.  A reader returns NGX_DECLINED when the value is
 * good, else what answering its 400 returned.
 */
typedef ngx_int_t (*ngx_http_session_arg_pt)(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);

typedef struct {
    ngx_str_t                   name;
    ngx_http_session_arg_pt     read;
    size_t                      offset;
    /* the reader's own, such as a largest value */
    ngx_uint_t                  data;
} ngx_http_session_arg_t;

/*
 * Stage 4's query string: every parameter read by its row of the table
 * into args; NGX_DECLINED when all were good, else what answering the
 * first bad one returned (400 "unknown query parameter: <name>" for one
 * the table does not name).  A NULL table takes no parameter at all.
 */
ngx_int_t ngx_http_session_args(ngx_http_request_t *r,
    const ngx_http_session_arg_t *table, void *args);

/* a reader: "limit", from 1 to data, into a long long */
ngx_int_t ngx_http_session_arg_limit(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);

/*
 * A page of a list, at most limit rows: its statement is asked for one
 * row more, which tells whether another page follows.  The statement's
 * row count, as text; q keeps the limit.  NULL when out of memory, or q
 * is NULL (it could not be made).
 */
u_char *ngx_http_session_page_ask(ngx_http_session_db_query_t *q,
    long long limit);

/*
 * Of the n rows that q's statement returned, those of the page; *more:
 * another page follows (its cursor is made from the page's last row)
 */
int ngx_http_session_page_rows(ngx_http_session_db_query_t *q, int n,
    ngx_uint_t *more);

/* for endpoints that take no query parameter */
#define ngx_http_session_no_args(r)  ngx_http_session_args(r, NULL, NULL)

/*
 * The canonical text of a UUID from the path, NUL-terminated; NULL and
 * *rc NGX_DECLINED when malformed, NGX_ERROR when out of memory.
 */
u_char *ngx_http_session_uuid_text(ngx_http_request_t *r, const u_char *s,
    size_t len, ngx_int_t *rc);

/*
 * The same of the route's session id; NULL when it cannot name a session,
 * with what answering it (404 or 500) returned in *rc
 */
u_char *ngx_http_session_route_sid(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_int_t *rc);

/*
 * A request waiting for a query that several share (a flight: an auth
 * lookup, a lease), in the request's pool; when the request goes away
 * first, it leaves the flight's queue of waiters
 */
typedef struct {
    ngx_queue_t          queue;
    ngx_http_request_t  *request;
    /* NULL until it joins, and once answered or gone */
    void                *flight;
} ngx_http_session_waiter_t;

ngx_http_session_waiter_t *ngx_http_session_waiter_create(
    ngx_http_request_t *r);
void ngx_http_session_waiter_join(ngx_http_session_waiter_t *w,
    ngx_queue_t *waiters, void *flight);
/* the first of a flight's waiters (there is one), out of the queue */
ngx_http_session_waiter_t *ngx_http_session_waiter_next(ngx_queue_t *waiters);

/* answers 400 "unknown query parameter: <name>" */
ngx_int_t ngx_http_session_unknown_arg(ngx_http_request_t *r,
    ngx_str_t *name);


#endif /* _NGX_HTTP_SESSION_REQUEST_H_INCLUDED_ */
