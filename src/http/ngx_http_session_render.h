/*
 * The render room: the documents of docs/api.md §4 and §5 (session,
 * image, the list envelope, the poll answer) written from the rows of a
 * binary-format result, into buffers of the request's pool.  The bytes of
 * each resource are written by src/core/ngx_http_session_doc.c; this file
 * reads the columns and puts documents together.  It sends nothing and
 * knows no endpoint.
 */

#ifndef _NGX_HTTP_SESSION_RENDER_H_INCLUDED_
#define _NGX_HTTP_SESSION_RENDER_H_INCLUDED_


#include "ngx_http_session_common.h"

#include <libpq-fe.h>

#include "ngx_http_session_doc.h"


/* the columns of NGX_HTTP_SESSION_SQL_SESSION_COLS, from its first */
#define NGX_HTTP_SESSION_COL_S_ID             0
#define NGX_HTTP_SESSION_COL_S_PROJECT        1
#define NGX_HTTP_SESSION_COL_S_MODE           2
#define NGX_HTTP_SESSION_COL_S_URL            3
#define NGX_HTTP_SESSION_COL_S_STATUS         4
#define NGX_HTTP_SESSION_COL_S_IMAGES         5
#define NGX_HTTP_SESSION_COL_S_ACKNOWLEDGED   6
#define NGX_HTTP_SESSION_COL_S_CREATED        7
#define NGX_HTTP_SESSION_COL_S_EXPIRES        8
#define NGX_HTTP_SESSION_COL_S_COMPLETED      9
#define NGX_HTTP_SESSION_SESSION_NCOLS        10

/* NGX_HTTP_SESSION_SQL_IMAGE_COLS */
#define NGX_HTTP_SESSION_COL_I_ID             0
#define NGX_HTTP_SESSION_COL_I_SESSION        1
#define NGX_HTTP_SESSION_COL_I_SEQUENCE       2
#define NGX_HTTP_SESSION_COL_I_TYPE           3
#define NGX_HTTP_SESSION_COL_I_SIZE           4
#define NGX_HTTP_SESSION_COL_I_SHA256         5
#define NGX_HTTP_SESSION_COL_I_CREATED        6
#define NGX_HTTP_SESSION_COL_I_ACKNOWLEDGED   7
#define NGX_HTTP_SESSION_IMAGE_NCOLS          8

/* NGX_HTTP_SESSION_SQL_CHECK_COLS: the session's project and status */
#define NGX_HTTP_SESSION_CHECK_NCOLS          2


/*
 * The columns of a session or an image from (row, col) on: NGX_OK,
 * NGX_DECLINED when its id is NULL (no such row), NGX_ERROR when a
 * column is not what the statement returns.
 */
ngx_int_t ngx_http_session_render_read_session(PGresult *res, int row,
    int col, ngx_http_session_doc_session_t *s);
ngx_int_t ngx_http_session_render_read_image(PGresult *res, int row, int col,
    ngx_http_session_doc_image_t *im);

/* logs a row that has not the columns its statement returns */
void ngx_http_session_render_bad(ngx_log_t *log);

/* binary columns: 4-byte integer, 8-byte timestamptz in Unix microseconds */
ngx_int_t ngx_http_session_render_int4(PGresult *res, int row, int col,
    int64_t *n);
ngx_int_t ngx_http_session_render_time(PGresult *res, int row, int col,
    int64_t *us);
/* whether a text column is s, e.g. a session's status "expired" */
ngx_uint_t ngx_http_session_render_is(PGresult *res, int row, int col,
    const char *s);

/* one session or image document; NULL on failure (logged) */
ngx_buf_t *ngx_http_session_render_session(ngx_http_request_t *r,
    PGresult *res, int row, int col);
ngx_buf_t *ngx_http_session_render_image(ngx_http_request_t *r,
    PGresult *res, int row, int col);

/*
 * {"data": [...], "has_more": ..., "next_cursor": ...} of the sessions
 * (images) in rows 0 .. n - 1 from column col; a cursor of cursor_len 0
 * is null and means no more
 */
ngx_buf_t *ngx_http_session_render_sessions(ngx_http_request_t *r,
    PGresult *res, int n, u_char *cursor, size_t cursor_len);
ngx_buf_t *ngx_http_session_render_images(ngx_http_request_t *r,
    PGresult *res, int col, int n, u_char *cursor, size_t cursor_len);

/*
 * {"session": {...}, "images": [...]}: the session of row first and the
 * images of rows first .. first + n - 1 after its columns, in pool (the
 * answer of every poll that waits on the session, so no request's pool)
 */
ngx_buf_t *ngx_http_session_render_poll(ngx_pool_t *pool, ngx_log_t *log,
    PGresult *res, int first, int n);


#endif /* _NGX_HTTP_SESSION_RENDER_H_INCLUDED_ */
