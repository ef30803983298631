/*
 * A streamed upload (the folder's own, for images.c): an image over
 * session_image_chunk_size goes to PostgreSQL in one transaction on an
 * upload connection (db_copy.c), read from nginx's temp file a chunk at
 * a time, with its SHA-256 computed on the way (decisions (za), (zd)).
 */

#ifndef _NGX_HTTP_SESSION_IMAGE_STREAM_H_INCLUDED_
#define _NGX_HTTP_SESSION_IMAGE_STREAM_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_db.h"


/* the image type of Content-Type (NGX_HTTP_SESSION_IMAGE_*); name: as named */
int ngx_http_session_image_type_of(ngx_http_request_t *r, ngx_str_t *name);

/*
 * What an upload, streamed or not, checks before the database: the image
 * type of Content-Type (*type), whose signature the first len bytes at p
 * must carry (400), and the session id as a parameter (*sid, 404):
 * NGX_DECLINED, or what answering returned
 */
ngx_int_t ngx_http_session_image_upload_check(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, const u_char *p, size_t len, int *type,
    u_char **sid);

/* r's body of size bytes, streamed: NGX_DONE, or what answering returned */
ngx_int_t ngx_http_session_image_stream(ngx_http_request_t *r, off_t size);

/*
 * The answer of an upload from its result, streamed or not (the db
 * handler of the one-statement upload too)
 */
void ngx_http_session_image_uploaded(ngx_http_session_db_query_t *q,
    PGresult *res);


#endif /* _NGX_HTTP_SESSION_IMAGE_STREAM_H_INCLUDED_ */
