/*
 * src/core/ngx_http_session_image.{c,h}: media types, signatures and the
 * SHA-256 of uploads.
 */

#include <stddef.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_imagecheck.h"


#define U(s)     ((const unsigned char *) (s))
#define S(s)     U(s), (sizeof(s) - 1)


typedef struct {
    const char  *value;
    const char  *type;
} ngx_http_session_media_vec_t;


/* Content-Type header values and the media type the 415 message names */
static const ngx_http_session_media_vec_t  media[] = {
    { "image/png", "image/png" },
    { "IMAGE/PNG", "image/png" },
    { "Image/Jpeg; charset=binary", "image/jpeg" },
    { "  image/gif ; x=1", "image/gif" },
    { "image/webp\t;", "image/webp" },
    { "text/plain", "text/plain" },
    { "", "" },
    { ";", "" },
    { " ; image/png", "" },
    { "image/svg+xml", "image/svg+xml" },
    { "image/png;image/jpeg", "image/png" }
};


typedef struct {
    const char  *type;
    int          id;
} ngx_http_session_type_vec_t;


static const ngx_http_session_type_vec_t  types[] = {
    { "image/jpeg", NGX_HTTP_SESSION_IMAGE_JPEG },
    { "image/png", NGX_HTTP_SESSION_IMAGE_PNG },
    { "image/gif", NGX_HTTP_SESSION_IMAGE_GIF },
    { "image/webp", NGX_HTTP_SESSION_IMAGE_WEBP },
    { "image/tiff", NGX_HTTP_SESSION_IMAGE_TIFF },
    { "image/heic", NGX_HTTP_SESSION_IMAGE_HEIC },
    { "image/jpg", NGX_HTTP_SESSION_IMAGE_NONE },
    { "image/pjpeg", NGX_HTTP_SESSION_IMAGE_NONE },
    { "image/heif", NGX_HTTP_SESSION_IMAGE_NONE },
    { "image/avif", NGX_HTTP_SESSION_IMAGE_NONE },
    { "image/png ", NGX_HTTP_SESSION_IMAGE_NONE },
    { "image/pn", NGX_HTTP_SESSION_IMAGE_NONE },
    { "image/pngx", NGX_HTTP_SESSION_IMAGE_NONE },
    { "application/octet-stream", NGX_HTTP_SESSION_IMAGE_NONE },
    { "", NGX_HTTP_SESSION_IMAGE_NONE }
};


typedef struct {
    int           type;
    const char   *bytes;
    size_t        len;
    int           ok;
} ngx_http_session_sig_vec_t;


#define SIG(t, s, ok)  { NGX_HTTP_SESSION_IMAGE_##t, s, sizeof(s) - 1, ok }

static const ngx_http_session_sig_vec_t  sigs[] = {
    SIG(JPEG, "\xff\xd8\xff", 1),
    SIG(JPEG, "\xff\xd8\xff\xe0\x00\x10JFIF", 1),
    SIG(JPEG, "\xff\xd8", 0),
    SIG(JPEG, "\xff\xd9\xff\xe0", 0),
    SIG(JPEG, "\x89PNG\r\n\x1a\n", 0),

    SIG(PNG, "\x89PNG\r\n\x1a\n", 1),
    SIG(PNG, "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 1),
    SIG(PNG, "\x89PNG\r\n\x1a", 0),
    SIG(PNG, "\x89PNG\n\r\x1a\n", 0),
    SIG(PNG, "\xff\xd8\xff\xe0", 0),

    SIG(GIF, "GIF87a", 1),
    SIG(GIF, "GIF89a\x01\x00\x01\x00", 1),
    SIG(GIF, "GIF88a", 0),
    SIG(GIF, "GIF89", 0),
    SIG(GIF, "gif89a", 0),

    SIG(WEBP, "RIFF\x24\x00\x00\x00WEBPVP8 ", 1),
    SIG(WEBP, "RIFF\0\0\0\0WEBP", 1),
    SIG(WEBP, "RIFF\0\0\0\0WEB", 0),
    SIG(WEBP, "RIFF\0\0\0\0WAVE", 0),
    SIG(WEBP, "RIFX\0\0\0\0WEBP", 0),

    SIG(TIFF, "II*\0", 1),
    SIG(TIFF, "MM\0*\0\0\0\x08", 1),
    SIG(TIFF, "II+\0", 0),
    SIG(TIFF, "MM*\0", 0),
    SIG(TIFF, "II*", 0),

    SIG(HEIC, "\0\0\0\x18" "ftypheic\0\0\0\0mif1heic", 1),
    SIG(HEIC, "\0\0\0\x10" "ftypheix\0\0\0\0", 1),
    SIG(HEIC, "\0\0\0\x10" "ftyphevc\0\0\0\0", 1),
    SIG(HEIC, "\0\0\0\x10" "ftyphevx\0\0\0\0", 1),
    SIG(HEIC, "\0\0\0\x10" "ftypheim\0\0\0\0", 1),
    SIG(HEIC, "\0\0\0\x10" "ftypheis\0\0\0\0", 1),
    SIG(HEIC, "\0\0\0\x1c" "ftypmif1\0\0\0\0mif1heicmiaf", 1),
    SIG(HEIC, "\0\0\0\x10" "ftypmsf1\0\0\0\0", 1),
    /* AVIF: "mif1" only among the compatible brands */
    SIG(HEIC, "\0\0\0\x1c" "ftypavif\0\0\0\0avifmif1miaf", 0),
    /* MP4 video */
    SIG(HEIC, "\0\0\0\x18" "ftypisom\0\0\x02\0isomiso2", 0),
    SIG(HEIC, "\0\0\0\x18" "ftypHEIC\0\0\0\0mif1heic", 0),
    SIG(HEIC, "\0\0\0\x18" "moovheic\0\0\0\0mif1heic", 0),
    /* a box size below the 16 bytes of size, type, brand and version */
    SIG(HEIC, "\0\0\0\x0c" "ftypheic\0\0\0\0", 0),
    SIG(HEIC, "\0\0\0\x18" "ftypheic\0\0\0", 0),

    SIG(NONE, "\x89PNG\r\n\x1a\n", 0)
};


START_TEST(test_image_media_type)
{
    size_t         n;
    unsigned char  dst[NGX_HTTP_SESSION_IMAGE_TYPE_MAX];

    const ngx_http_session_media_vec_t  *v = &media[_i];

    n = ngx_http_session_image_media_type(U(v->value), strlen(v->value), dst);

    ck_assert_uint_eq(n, strlen(v->type));
    ck_assert_int_eq(memcmp(dst, v->type, n), 0);
}
END_TEST


START_TEST(test_image_media_type_long)
{
    size_t         n;
    unsigned char  value[600], dst[NGX_HTTP_SESSION_IMAGE_TYPE_MAX];

    memset(value, 'A', sizeof(value));

    n = ngx_http_session_image_media_type(value, sizeof(value), dst);

    ck_assert_uint_eq(n, NGX_HTTP_SESSION_IMAGE_TYPE_MAX);
    ck_assert_int_eq(dst[0], 'a');
    ck_assert_int_eq(dst[NGX_HTTP_SESSION_IMAGE_TYPE_MAX - 1], 'a');
}
END_TEST


START_TEST(test_image_type)
{
    const ngx_http_session_type_vec_t  *v = &types[_i];

    ck_assert_int_eq(ngx_http_session_image_type(U(v->type),
                                                 strlen(v->type)),
                     v->id);

    if (v->id != NGX_HTTP_SESSION_IMAGE_NONE) {
        ck_assert_str_eq(ngx_http_session_image_type_name(v->id), v->type);
    }
}
END_TEST


START_TEST(test_image_signature)
{
    const ngx_http_session_sig_vec_t  *v = &sigs[_i];

    ck_assert_msg(ngx_http_session_image_signature_ok(v->type, U(v->bytes),
                                                      v->len)
                  == v->ok, "vector %d (type %d)", _i, v->type);
}
END_TEST


START_TEST(test_image_signature_empty)
{
    int  t;

    for (t = NGX_HTTP_SESSION_IMAGE_JPEG; t <= NGX_HTTP_SESSION_IMAGE_HEIC;
         t++)
    {
        ck_assert_int_eq(ngx_http_session_image_signature_ok(t, U(""), 0),
                         0);
    }
}
END_TEST


START_TEST(test_image_sha256)
{
    unsigned char  d[NGX_HTTP_SESSION_IMAGE_SHA256_LEN];

    /* FIPS 180-2 test vectors */

    ck_assert_int_eq(ngx_http_session_image_sha256(S("abc"), d), 0);
    ck_assert_int_eq(memcmp(d,
        "\xba\x78\x16\xbf\x8f\x01\xcf\xea\x41\x41\x40\xde\x5d\xae\x22\x23"
        "\xb0\x03\x61\xa3\x96\x17\x7a\x9c\xb4\x10\xff\x61\xf2\x00\x15\xad",
        sizeof(d)), 0);

    ck_assert_int_eq(ngx_http_session_image_sha256(S(""), d), 0);
    ck_assert_int_eq(memcmp(d,
        "\xe3\xb0\xc4\x42\x98\xfc\x1c\x14\x9a\xfb\xf4\xc8\x99\x6f\xb9\x24"
        "\x27\xae\x41\xe4\x64\x9b\x93\x4c\xa4\x95\x99\x1b\x78\x52\xb8\x55",
        sizeof(d)), 0);
}
END_TEST


Suite *
make_image_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("image");
    tc = tcase_create("core");

    tcase_add_loop_test(tc, test_image_media_type, 0,
                        sizeof(media) / sizeof(media[0]));
    tcase_add_test(tc, test_image_media_type_long);
    tcase_add_loop_test(tc, test_image_type, 0,
                        sizeof(types) / sizeof(types[0]));
    tcase_add_loop_test(tc, test_image_signature, 0,
                        sizeof(sigs) / sizeof(sigs[0]));
    tcase_add_test(tc, test_image_signature_empty);
    tcase_add_test(tc, test_image_sha256);

    suite_add_tcase(s, tc);

    return s;
}
