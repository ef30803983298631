/*
 * Images: the allowed media types, the byte signature of each, and the
 * SHA-256 of an upload.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_IMAGECHECK_H_INCLUDED_
#define _NGX_HTTP_SESSION_IMAGECHECK_H_INCLUDED_


#include <stddef.h>


#define NGX_HTTP_SESSION_IMAGE_NONE     0
#define NGX_HTTP_SESSION_IMAGE_JPEG     1
#define NGX_HTTP_SESSION_IMAGE_PNG      2
#define NGX_HTTP_SESSION_IMAGE_GIF      3
#define NGX_HTTP_SESSION_IMAGE_WEBP     4
#define NGX_HTTP_SESSION_IMAGE_TIFF     5
#define NGX_HTTP_SESSION_IMAGE_HEIC     6

#define NGX_HTTP_SESSION_IMAGE_SHA256_LEN   32

/* the longest media type the 415 message names: the header is capped */
#define NGX_HTTP_SESSION_IMAGE_TYPE_MAX     255


/*
 * The media type of a Content-Type value: up to the first ';', without
 * the white space around it, lower-cased into dst (at most
 * NGX_HTTP_SESSION_IMAGE_TYPE_MAX bytes; longer values are cut there).
 * Returns its length; 0 for an empty media type.
 */
size_t ngx_http_session_image_media_type(const unsigned char *value,
    size_t len, unsigned char *dst);

/* NGX_HTTP_SESSION_IMAGE_* of a lower-case media type, NONE if refused */
int ngx_http_session_image_type(const unsigned char *type, size_t len);

/* the media type of NGX_HTTP_SESSION_IMAGE_*, NUL-terminated */
const char *ngx_http_session_image_type_name(int type);

/*
 * Does the body start with the signature of the type?  1 or 0.  HEIC is
 * an ISO BMFF file whose first box is "ftyp" with a HEIF brand as its
 * major brand or among its compatible brands (docs/decisions.md).
 */
int ngx_http_session_image_signature_ok(int type, const unsigned char *p,
    size_t len);

/* SHA-256 of the body: 0, or -1 when OpenSSL fails */
int ngx_http_session_image_sha256(const unsigned char *p, size_t len,
    unsigned char *digest);


#endif /* _NGX_HTTP_SESSION_IMAGECHECK_H_INCLUDED_ */
