/*
 * The image endpoints: upload, list, get, content, acknowledge.
 */

#ifndef _NGX_HTTP_SESSION_IMAGES_H_INCLUDED_
#define _NGX_HTTP_SESSION_IMAGES_H_INCLUDED_


#include "ngx_http_session_common.h"


/* POST /api/v1/sessions/{sid}/images */
ngx_int_t ngx_http_session_image_upload(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/* GET /api/v1/sessions/{sid}/images */
ngx_int_t ngx_http_session_image_list(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/*
 * GET /api/v1/sessions/{sid}/images/{iid} and
 * POST /api/v1/sessions/{sid}/images/{iid}/ack
 */
ngx_int_t ngx_http_session_image_get(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/* GET /api/v1/sessions/{sid}/images/{iid}/content */
ngx_int_t ngx_http_session_image_content(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);


#endif /* _NGX_HTTP_SESSION_IMAGES_H_INCLUDED_ */
