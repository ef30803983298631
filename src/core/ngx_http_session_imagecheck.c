/*
 * Images: media types, signatures, SHA-256.
 */

#include <string.h>

#include <openssl/evp.h>

#include "ngx_http_session_imagecheck.h"
#include "ngx_http_session_key.h"


typedef struct {
    const char  *name;
    size_t       len;
    int          type;
} ngx_http_session_image_type_t;


static const ngx_http_session_image_type_t  ngx_http_session_image_types[] = {
    { "image/jpeg", sizeof("image/jpeg") - 1, NGX_HTTP_SESSION_IMAGE_JPEG },
    { "image/png", sizeof("image/png") - 1, NGX_HTTP_SESSION_IMAGE_PNG },
    { "image/gif", sizeof("image/gif") - 1, NGX_HTTP_SESSION_IMAGE_GIF },
    { "image/webp", sizeof("image/webp") - 1, NGX_HTTP_SESSION_IMAGE_WEBP },
    { "image/tiff", sizeof("image/tiff") - 1, NGX_HTTP_SESSION_IMAGE_TIFF },
    { "image/heic", sizeof("image/heic") - 1, NGX_HTTP_SESSION_IMAGE_HEIC },
    { NULL, 0, NGX_HTTP_SESSION_IMAGE_NONE }
};


/* the major brands of ISO/IEC 23008-12 (HEIF) that image/heic accepts */
static const char  *ngx_http_session_heif_brands[] = {
    "heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1", NULL
};


static int ngx_http_session_image_heic_ok(const unsigned char *p,
    size_t len);


size_t
ngx_http_session_image_media_type(const unsigned char *value, size_t len,
    unsigned char *dst)
{
    size_t          i, start, end;
    unsigned char   c;

    for (end = 0; end < len && value[end] != ';'; end++) {
        /* void */
    }

    for (start = 0; start < end
                    && (value[start] == ' ' || value[start] == '\t');
         start++)
    {
        /* void */
    }

    while (end > start && (value[end - 1] == ' ' || value[end - 1] == '\t')) {
        end--;
    }

    if (end - start > NGX_HTTP_SESSION_IMAGE_TYPE_MAX) {
        end = start + NGX_HTTP_SESSION_IMAGE_TYPE_MAX;
    }

    for (i = start; i < end; i++) {
        c = value[i];
        dst[i - start] = (c >= 'A' && c <= 'Z') ? (unsigned char) (c | 0x20)
                                                : c;
    }

    return end - start;
}


int
ngx_http_session_image_type(const unsigned char *type, size_t len)
{
    const ngx_http_session_image_type_t  *t;

    for (t = ngx_http_session_image_types; t->name; t++) {
        if (t->len == len && memcmp(t->name, type, len) == 0) {
            return t->type;
        }
    }

    return NGX_HTTP_SESSION_IMAGE_NONE;
}


const char *
ngx_http_session_image_type_name(int type)
{
    const ngx_http_session_image_type_t  *t;

    for (t = ngx_http_session_image_types; t->name; t++) {
        if (t->type == type) {
            return t->name;
        }
    }

    return "none";
}


int
ngx_http_session_image_signature_ok(int type, const unsigned char *p,
    size_t len)
{
    switch (type) {

    case NGX_HTTP_SESSION_IMAGE_JPEG:
        return len >= 3 && memcmp(p, "\xff\xd8\xff", 3) == 0;

    case NGX_HTTP_SESSION_IMAGE_PNG:
        return len >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0;

    case NGX_HTTP_SESSION_IMAGE_GIF:
        return len >= 6 && (memcmp(p, "GIF87a", 6) == 0
                            || memcmp(p, "GIF89a", 6) == 0);

    case NGX_HTTP_SESSION_IMAGE_WEBP:
        /* "RIFF", the chunk size (little-endian), "WEBP" */
        return len >= 12 && memcmp(p, "RIFF", 4) == 0
               && memcmp(p + 8, "WEBP", 4) == 0;

    case NGX_HTTP_SESSION_IMAGE_TIFF:
        /* byte order, then 42 in that order; BigTIFF (43) is not TIFF */
        return len >= 4 && (memcmp(p, "II*\0", 4) == 0
                            || memcmp(p, "MM\0*", 4) == 0);

    case NGX_HTTP_SESSION_IMAGE_HEIC:
        return ngx_http_session_image_heic_ok(p, len);

    default:
        return 0;
    }
}


/*
 * The first box: a 32-bit big-endian size, "ftyp", the major brand, the
 * minor version (the box is at least 16 bytes), then compatible brands.
 * Only the major brand decides: an AVIF file also lists "mif1" among its
 * compatible brands.
 */

static int
ngx_http_session_image_heic_ok(const unsigned char *p, size_t len)
{
    unsigned long   size;
    const char    **brand;

    if (len < 16 || memcmp(p + 4, "ftyp", 4) != 0) {
        return 0;
    }

    size = ((unsigned long) p[0] << 24) | ((unsigned long) p[1] << 16)
           | ((unsigned long) p[2] << 8) | (unsigned long) p[3];

    if (size < 16) {
        return 0;
    }

    for (brand = ngx_http_session_heif_brands; *brand; brand++) {
        if (memcmp(p + 8, *brand, 4) == 0) {
            return 1;
        }
    }

    return 0;
}


int
ngx_http_session_image_sha256(const unsigned char *p, size_t len,
    unsigned char *digest)
{
    unsigned int   n;
    EVP_MD_CTX    *ctx;

    ctx = ngx_http_session_sha256_init();
    if (ctx == NULL) {
        return -1;
    }

    n = 0;

    return (EVP_DigestUpdate(ctx, p, len) == 1
            && EVP_DigestFinal_ex(ctx, digest, &n) == 1
            && n == NGX_HTTP_SESSION_IMAGE_SHA256_LEN)
           ? 0 : -1;
}
