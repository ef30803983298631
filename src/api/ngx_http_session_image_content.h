/*
 * The bytes of an image (the folder's own, for images.c): GET and HEAD of
 * .../content, ETag and 304, a slice at a time as the client reads them
 * (decision (zb)).
 */

#ifndef _NGX_HTTP_SESSION_IMAGE_CONTENT_H_INCLUDED_
#define _NGX_HTTP_SESSION_IMAGE_CONTENT_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_db.h"


/* an image's ETag: its SHA-256 in hex, within the quotes */
#define NGX_HTTP_SESSION_IMAGE_ETAG_LEN  64


/*
 * The first slice of a download, with the answer's headers: at most 16k
 * (or session_image_chunk_size when smaller), so that the first byte of
 * a large image costs the first query no more than a small image's
 * whole does (its TOAST pieces, its bytes through libpq) (decision (zf))
 */
#define NGX_HTTP_SESSION_IMAGE_FIRST_SLICE  16384

#define ngx_http_session_image_first_slice(slcf)                            \
    ngx_min((slcf)->image_chunk_size,                                       \
            (size_t) NGX_HTTP_SESSION_IMAGE_FIRST_SLICE)

/*
 * The next slices: twice session_image_chunk_size less 16k (112k for
 * 64k); a chunk of 16k or less (tests) keeps slices of the chunk.  libpq
 * keeps each query connection's input buffer at the power of two that
 * its largest row needed, with 8k free to read into: a row of a chunk
 * already takes it to twice the chunk, and a slice this size still fits
 * there, so the worker keeps no more than with slices of a chunk, for
 * about half the queries (decision (zg)).
 */
#define NGX_HTTP_SESSION_IMAGE_SLICE_ROOM   16384

#define ngx_http_session_image_next_slice(slcf)                             \
    ((slcf)->image_chunk_size > NGX_HTTP_SESSION_IMAGE_SLICE_ROOM           \
     ? 2 * (slcf)->image_chunk_size - NGX_HTTP_SESSION_IMAGE_SLICE_ROOM     \
     : (slcf)->image_chunk_size)


/* the db handler of the content statement: the answer, then its slices */
void ngx_http_session_image_bytes(ngx_http_session_db_query_t *q,
    PGresult *res);


#endif /* _NGX_HTTP_SESSION_IMAGE_CONTENT_H_INCLUDED_ */
