/*
 * src/core/ngx_http_session_cursor.{c,h}: list cursors and UUID text.
 *
 * The fixed cursors below were computed independently, with Python:
 *
 *     def enc(b):
 *         b += struct.pack('>I', zlib.crc32(b))
 *         return base64.urlsafe_b64encode(b).rstrip(b'=')
 *
 *     enc(b'\x01S' + struct.pack('>q', 1763712000123456) + UUID_BIN)
 *     enc(b'\x01I' + struct.pack('>q', 42))
 *
 * They pin the format: cursors handed out before an upgrade must still
 * decode after it, on every node.
 */

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_cursor.h"


#define U(s)     ((const unsigned char *) (s))
/* a literal and its length without the terminating NUL */
#define S(s)     U(s), (sizeof(s) - 1)

#define UUID_TEXT   "01234567-89ab-cdef-0123-456789abcdef"
#define UUID_BIN                                                              \
    "\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef"
#define CREATED     1763712000123456LL

/* the two cursors above */
#define SESSION_CURSOR  "AVMABkQWM0DiQAEjRWeJq83vASNFZ4mrze_aIJDh"
#define IMAGE_CURSOR    "AUkAAAAAAAAAKqXCf8I"


typedef struct {
    const unsigned char  *s;
    size_t                len;
    /* NULL when refused */
    const char           *bin;
} ngx_http_session_uuid_vec_t;


typedef struct {
    const unsigned char  *s;
    size_t                len;
} ngx_http_session_bad_vec_t;


static const long long  positions[] = {
    0, 1, -1, 42, CREATED, 946684800000000LL, 253402300799999999LL,
    LLONG_MAX, LLONG_MIN, LLONG_MAX - 1, LLONG_MIN + 1, 0x0102030405060708LL,
    -0x0102030405060708LL, 255, 256, 65535, 65536
};


static const char  *uuids[] = {
    UUID_BIN,
    "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
    "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    "\x9b\x1d\xeb\x4d\x3b\x7d\x4b\xad\x9b\xdd\x2b\x0d\x7b\x3d\xcb\x6d",
};


static const ngx_http_session_uuid_vec_t  uuid_vecs[] = {
    { S(UUID_TEXT), UUID_BIN },
    { S("01234567-89AB-CDEF-0123-456789ABCDEF"), UUID_BIN },
    { S("01234567-89aB-CdEf-0123-456789AbCdEf"), UUID_BIN },
    { S("00000000-0000-0000-0000-000000000000"),
      "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0" },
    { S("ffffffff-ffff-ffff-ffff-ffffffffffff"),
      "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" },
    { S("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"),
      "\x9b\x1d\xeb\x4d\x3b\x7d\x4b\xad\x9b\xdd\x2b\x0d\x7b\x3d\xcb\x6d" },
    /* only the given length is read */
    { U(UUID_TEXT "0"), 36, UUID_BIN },

    { S(""), NULL },
    { U(UUID_TEXT), 35, NULL },
    { S(UUID_TEXT "0"), NULL },
    { S(UUID_TEXT " "), NULL },
    { S(" " UUID_TEXT), NULL },
    { S(UUID_TEXT "\0"), NULL },
    { S("0123456789abcdef0123456789abcdef"), NULL },
    { S("0123456789abcdef0123456789abcdef0000"), NULL },
    { S("{01234567-89ab-cdef-0123-456789abcdef}"), NULL },
    { S("{01234567-89ab-cdef-0123-456789abcde}"), NULL },
    { S("urn:uuid:01234567-89ab-cdef-0123-456789abcdef"), NULL },
    { S("0123456-789ab-cdef-0123-456789abcdef"), NULL },
    { S("012345678-9ab-cdef-0123-456789abcdef"), NULL },
    { S("01234567-89abc-def-0123-456789abcdef"), NULL },
    { S("01234567-89ab-cdef0-123-456789abcdef"), NULL },
    { S("01234567-89ab-cdef-01234-56789abcdef"), NULL },
    { S("01234567_89ab_cdef_0123_456789abcdef"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcdeg"), NULL },
    { S("g1234567-89ab-cdef-0123-456789abcdef"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcdeG"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcde "), NULL },
    { S("01234567-89ab-cdef-0123-456789abcde\0"), NULL },
    { S("0123456\0-89ab-cdef-0123-456789abcdef"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcd\xc3\xa9"), NULL },
    { S("+1234567-89ab-cdef-0123-456789abcdef"), NULL },
    { S("-1234567-89ab-cdef-0123-456789abcdef"), NULL },
    { S("0x234567-89ab-cdef-0123-456789abcdef"), NULL },
    { S("------------------------------------"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcd:f"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcd@f"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcd`f"), NULL },
    { S("01234567-89ab-cdef-0123-456789abcd/f"), NULL },
};


/* what no encoder writes; each must be refused by both decoders */
static const ngx_http_session_bad_vec_t  bad_vecs[] = {
    { S("") },
    { S("A") },
    { S("AA") },
    { S("====") },
    { S("null") },
    { S("0") },
    { S("1") },
    { S("AAAAAAAAAAAAAAAAAAA") },
    { S("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA") },
    { S("///////////////////") },
    { S("________________________________________") },
    { S("-------------------") },
    { S("%%%%%%%%%%%%%%%%%%%") },
    /* padding, the standard alphabet, white space, case */
    { S(SESSION_CURSOR "=") },
    { S(SESSION_CURSOR "==") },
    { S(IMAGE_CURSOR "=") },
    { S("AVMABkQWM0DiQAEjRWeJq83vASNFZ4mrze/aIJDh") },
    { S("AVMABkQWM0DiQAEjRWeJq83vASNFZ4mrze_aIJD") },
    { S(" AUkAAAAAAAAAKqXCf8I") },
    { S("AUkAAAAAAAAAKqXCf8I ") },
    { S("AUkAAAAAAAA AKqXCf8") },
    { S("AUkAAAAAAAAAKqXCf8I\n") },
    { S("AUkAAAAAAAAAKqXCf8I\0") },
    { S("auKaaaaaaaaakQxcF8i") },
    { S("AVMABKQWM0DIQAEJRWEJQ83VASNFZ4MRZE_AIJDH") },
    /* the image cursor with a padding bit set: the same bytes */
    { S("AUkAAAAAAAAAKqXCf8J") },
    /* version 2, kinds swapped, kind 'X', version 0: all with good CRCs */
    { S("AlMABkQWM0DiQAEjRWeJq83vASNFZ4mrze8od30Z") },
    { S("AUkABkQWM0DiQAEjRWeJq83vASNFZ4mrze8-WgJl") },
    { S("AVMAAAAAAAAAKpwsty0") },
    { S("AVgAAAAAAAAAKh55KfA") },
    { S("AEkAAAAAAAAAKkoAFPw") },
    /* the two cursors, glued */
    { S(SESSION_CURSOR IMAGE_CURSOR) },
    { S(IMAGE_CURSOR IMAGE_CURSOR) },
    { S(SESSION_CURSOR SESSION_CURSOR) },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))


static unsigned char *
copy_exact(const unsigned char *p, size_t len)
{
    unsigned char  *buf;

    buf = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, p, len);

    return buf;
}


static int
url_safe(const unsigned char *p, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (!((p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z')
              || (p[i] >= '0' && p[i] <= '9') || p[i] == '-' || p[i] == '_'))
        {
            return 0;
        }
    }

    return 1;
}


START_TEST(test_cursor_known)
{
    size_t         n;
    long long      pos;
    unsigned char  dst[NGX_HTTP_SESSION_CURSOR_MAX + 1], uuid[16];

    memset(dst, '#', sizeof(dst));
    n = ngx_http_session_cursor_encode_session(dst, CREATED, U(UUID_BIN));
    ck_assert_uint_eq(n, sizeof(SESSION_CURSOR) - 1);
    ck_assert(memcmp(dst, SESSION_CURSOR, n) == 0);
    ck_assert_int_eq(dst[n], '#');

    memset(dst, '#', sizeof(dst));
    n = ngx_http_session_cursor_encode_image(dst, 42);
    ck_assert_uint_eq(n, sizeof(IMAGE_CURSOR) - 1);
    ck_assert(memcmp(dst, IMAGE_CURSOR, n) == 0);
    ck_assert_int_eq(dst[n], '#');

    ck_assert_int_eq(ngx_http_session_cursor_decode_session(S(SESSION_CURSOR),
                                                            &pos, uuid),
                     0);
    ck_assert_int_eq(pos, CREATED);
    ck_assert(memcmp(uuid, UUID_BIN, 16) == 0);

    ck_assert_int_eq(ngx_http_session_cursor_decode_image(S(IMAGE_CURSOR),
                                                          &pos),
                     0);
    ck_assert_int_eq(pos, 42);
}
END_TEST


START_TEST(test_cursor_session_round_trip)
{
    size_t          n, u;
    long long       pos;
    unsigned char   dst[NGX_HTTP_SESSION_CURSOR_MAX], uuid[16], *copy;

    for (u = 0; u < (size_t) NELTS(uuids); u++) {
        n = ngx_http_session_cursor_encode_session(dst, positions[_i],
                                                   U(uuids[u]));

        ck_assert_uint_eq(n, NGX_HTTP_SESSION_CURSOR_SESSION_LEN);
        ck_assert(url_safe(dst, n));

        copy = copy_exact(dst, n);
        pos = 0;
        memset(uuid, 0x5a, sizeof(uuid));

        if (positions[_i] < NGX_HTTP_SESSION_CURSOR_US_MIN
            || positions[_i] > NGX_HTTP_SESSION_CURSOR_US_MAX)
        {
            /* what the server cannot have issued is refused */
            ck_assert_int_eq(ngx_http_session_cursor_decode_session(copy, n,
                                                                    &pos,
                                                                    uuid),
                             -1);
            ck_assert_int_eq(pos, 0);
            free(copy);
            continue;
        }

        ck_assert_int_eq(ngx_http_session_cursor_decode_session(copy, n, &pos,
                                                                uuid),
                         0);
        ck_assert_int_eq(pos, positions[_i]);
        ck_assert(memcmp(uuid, uuids[u], 16) == 0);

        /* a session cursor is no image cursor */
        ck_assert_int_eq(ngx_http_session_cursor_decode_image(copy, n, &pos),
                         -1);

        free(copy);
    }
}
END_TEST


START_TEST(test_cursor_image_round_trip)
{
    size_t          n;
    long long       pos;
    unsigned char   dst[NGX_HTTP_SESSION_CURSOR_MAX], uuid[16], *copy;

    n = ngx_http_session_cursor_encode_image(dst, positions[_i]);

    ck_assert_uint_eq(n, NGX_HTTP_SESSION_CURSOR_IMAGE_LEN);
    ck_assert(url_safe(dst, n));

    copy = copy_exact(dst, n);
    pos = 0;

    if (positions[_i] < NGX_HTTP_SESSION_CURSOR_SEQ_MIN
        || positions[_i] > NGX_HTTP_SESSION_CURSOR_SEQ_MAX)
    {
        ck_assert_int_eq(ngx_http_session_cursor_decode_image(copy, n, &pos),
                         -1);
        ck_assert_int_eq(pos, 0);
        free(copy);
        return;
    }

    ck_assert_int_eq(ngx_http_session_cursor_decode_image(copy, n, &pos), 0);
    ck_assert_int_eq(pos, positions[_i]);

    ck_assert_int_eq(ngx_http_session_cursor_decode_session(copy, n, &pos,
                                                            uuid),
                     -1);

    free(copy);
}
END_TEST


/*
 * Every cursor with one byte changed to any other value, and every cursor
 * cut short or made longer, is refused.
 */

START_TEST(test_cursor_corrupt)
{
    int             rc;
    size_t          n, i, c;
    long long       pos;
    unsigned char   dst[NGX_HTTP_SESSION_CURSOR_MAX + 1], uuid[16], *copy, orig;

    if (_i == 0) {
        n = ngx_http_session_cursor_encode_session(dst, CREATED,
                                                   U(uuids[0]));
    } else {
        n = ngx_http_session_cursor_encode_image(dst, 42);
    }

    copy = copy_exact(dst, n);

    for (i = 0; i < n; i++) {
        orig = copy[i];

        for (c = 0; c < 256; c++) {
            if (c == orig) {
                continue;
            }

            copy[i] = (unsigned char) c;

            rc = (_i == 0)
                 ? ngx_http_session_cursor_decode_session(copy, n, &pos, uuid)
                 : ngx_http_session_cursor_decode_image(copy, n, &pos);

            if (rc != -1) {
                ck_abort_msg("cursor %d: byte %zu as 0x%02zx accepted", _i,
                             i, c);
            }
        }

        copy[i] = orig;
    }

    free(copy);

    /* every shorter prefix */

    for (i = 0; i < n; i++) {
        copy = copy_exact(dst, i);

        rc = (_i == 0)
             ? ngx_http_session_cursor_decode_session(copy, i, &pos, uuid)
             : ngx_http_session_cursor_decode_image(copy, i, &pos);

        free(copy);

        ck_assert_msg(rc == -1, "cursor %d: prefix of %zu accepted", _i, i);
    }

    /* one more byte of any value */

    for (c = 0; c < 256; c++) {
        dst[n] = (unsigned char) c;
        copy = copy_exact(dst, n + 1);

        rc = (_i == 0)
             ? ngx_http_session_cursor_decode_session(copy, n + 1, &pos, uuid)
             : ngx_http_session_cursor_decode_image(copy, n + 1, &pos);

        free(copy);

        ck_assert_msg(rc == -1, "cursor %d: 0x%02zx appended accepted", _i,
                      c);
    }
}
END_TEST


START_TEST(test_cursor_bad)
{
    long long                          pos;
    unsigned char                     *copy, uuid[16];
    const ngx_http_session_bad_vec_t  *v;

    v = &bad_vecs[_i];
    copy = copy_exact(v->s, v->len);

    ck_assert_msg(ngx_http_session_cursor_decode_session(copy, v->len, &pos,
                                                         uuid)
                  == -1, "vector %d (\"%.*s\") taken as a session cursor",
                  _i, (int) v->len, (const char *) v->s);
    ck_assert_msg(ngx_http_session_cursor_decode_image(copy, v->len, &pos)
                  == -1, "vector %d (\"%.*s\") taken as an image cursor",
                  _i, (int) v->len, (const char *) v->s);

    free(copy);
}
END_TEST


START_TEST(test_uuid_parse)
{
    int                                 rc;
    unsigned char                       uuid[16], text[36], *copy;
    const ngx_http_session_uuid_vec_t  *v;

    v = &uuid_vecs[_i];
    copy = copy_exact(v->s, v->len);
    memset(uuid, 0x5a, sizeof(uuid));

    rc = ngx_http_session_uuid_parse(copy, v->len, uuid);

    free(copy);

    if (v->bin == NULL) {
        ck_assert_msg(rc == -1, "vector %d (\"%.*s\") accepted", _i,
                      (int) v->len, (const char *) v->s);

        /* nothing is written on failure */
        ck_assert(memcmp(uuid, "ZZZZZZZZZZZZZZZZ", 16) == 0);
        return;
    }

    ck_assert_msg(rc == 0, "vector %d (\"%.*s\") refused", _i, (int) v->len,
                  (const char *) v->s);
    ck_assert(memcmp(uuid, v->bin, 16) == 0);

    /* the text form is the input in lower case */

    ngx_http_session_uuid_format(uuid, text);
    ck_assert_uint_eq(v->len >= 36, 1);

    for (rc = 0; rc < 36; rc++) {
        ck_assert_int_eq(text[rc], (v->s[rc] >= 'A' && v->s[rc] <= 'F')
                                   ? (v->s[rc] | 0x20) : v->s[rc]);
    }
}
END_TEST


START_TEST(test_uuid_format)
{
    unsigned char  text[37], back[16];

    memset(text, '#', sizeof(text));
    ngx_http_session_uuid_format(U(UUID_BIN), text);
    ck_assert(memcmp(text, UUID_TEXT, 36) == 0);
    ck_assert_int_eq(text[36], '#');

    ck_assert_int_eq(ngx_http_session_uuid_parse(text, 36, back), 0);
    ck_assert(memcmp(back, UUID_BIN, 16) == 0);
}
END_TEST


/* the edges of the ranges a decoder takes (docs/api.md: "cursor is invalid") */

typedef struct {
    long long  pos;
    int        ok;
} ngx_http_session_range_vec_t;


static const ngx_http_session_range_vec_t  us_range_vecs[] = {
    { 0, 1 },
    { 1, 1 },
    { 1795255200000000LL, 1 },
    /* 9999-12-31T23:59:59.999999Z and the microsecond after */
    { 253402300799999999LL, 1 },
    { 253402300800000000LL, 0 },
    /* a forged cursor (docs/security.md): "interval out of range" before */
    { LLONG_MAX, 0 },
    { LLONG_MAX - 1, 0 },
    { -1, 0 },
    { LLONG_MIN, 0 },
    /* 1969-12-31T23:59:59Z */
    { -1000000LL, 0 },
};


static const ngx_http_session_range_vec_t  seq_range_vecs[] = {
    { 0, 1 },
    { 1, 1 },
    { 2147483647LL, 1 },
    { 2147483648LL, 0 },
    { 4294967296LL, 0 },
    { LLONG_MAX, 0 },
    { -1, 0 },
    { LLONG_MIN, 0 },
};


START_TEST(test_cursor_session_range)
{
    size_t          n;
    long long       pos;
    unsigned char   dst[NGX_HTTP_SESSION_CURSOR_MAX], uuid[16];

    n = ngx_http_session_cursor_encode_session(dst, us_range_vecs[_i].pos,
                                               U(UUID_BIN));
    pos = 12345;

    if (us_range_vecs[_i].ok) {
        ck_assert_int_eq(ngx_http_session_cursor_decode_session(dst, n, &pos,
                                                                uuid),
                         0);
        ck_assert_int_eq(pos, us_range_vecs[_i].pos);

    } else {
        ck_assert_msg(ngx_http_session_cursor_decode_session(dst, n, &pos,
                                                             uuid)
                      == -1, "created_us %lld accepted",
                      us_range_vecs[_i].pos);
        ck_assert_int_eq(pos, 12345);
    }
}
END_TEST


START_TEST(test_cursor_image_range)
{
    size_t          n;
    long long       pos;
    unsigned char   dst[NGX_HTTP_SESSION_CURSOR_MAX];

    n = ngx_http_session_cursor_encode_image(dst, seq_range_vecs[_i].pos);
    pos = 12345;

    if (seq_range_vecs[_i].ok) {
        ck_assert_int_eq(ngx_http_session_cursor_decode_image(dst, n, &pos),
                         0);
        ck_assert_int_eq(pos, seq_range_vecs[_i].pos);

    } else {
        ck_assert_msg(ngx_http_session_cursor_decode_image(dst, n, &pos)
                      == -1, "sequence %lld accepted",
                      seq_range_vecs[_i].pos);
        ck_assert_int_eq(pos, 12345);
    }
}
END_TEST


Suite *
make_cursor_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("cursor");

    tc = tcase_create("cursor");
    tcase_add_test(tc, test_cursor_known);
    tcase_add_loop_test(tc, test_cursor_session_round_trip, 0,
                        NELTS(positions));
    tcase_add_loop_test(tc, test_cursor_image_round_trip, 0,
                        NELTS(positions));
    tcase_add_loop_test(tc, test_cursor_corrupt, 0, 2);
    tcase_add_loop_test(tc, test_cursor_bad, 0, NELTS(bad_vecs));
    tcase_add_loop_test(tc, test_cursor_session_range, 0,
                        NELTS(us_range_vecs));
    tcase_add_loop_test(tc, test_cursor_image_range, 0,
                        NELTS(seq_range_vecs));
    suite_add_tcase(s, tc);

    tc = tcase_create("uuid");
    tcase_add_loop_test(tc, test_uuid_parse, 0, NELTS(uuid_vecs));
    tcase_add_test(tc, test_uuid_format);
    suite_add_tcase(s, tc);

    return s;
}
