/*
 * src/core/ngx_http_session_idem.{c,h}: Idempotency-Key syntax (docs/api.md
 * section 6: 1 to 255 visible ASCII characters) and the escaping of the
 * request path kept in the fingerprint.
 */

#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_escape.h"
#include "ngx_http_session_idemkey.h"

#define PATH  NGX_HTTP_SESSION_ESCAPE_PATH


typedef struct {
    const char  *key;
    size_t       len;
    int          valid;
} ngx_http_session_idem_key_vec_t;


static const ngx_http_session_idem_key_vec_t  key_vecs[] = {
    { "a", 1, 1 },
    { "order-42", 8, 1 },
    { "!", 1, 1 },
    { "~", 1, 1 },
    { "0123456789abcdefABCDEF_-.:/+=", 29, 1 },
    { "", 0, 0 },
    { " ", 1, 0 },
    { "a b", 3, 0 },
    { "a\tb", 3, 0 },
    { "a\x7f", 2, 0 },
    { "caf\xc3\xa9", 5, 0 },
    { "a\0b", 3, 0 },
    { "\x1f", 1, 0 },
    { "\x80", 1, 0 },
    { "\xff", 1, 0 },
};


START_TEST(test_key_vectors)
{
    const ngx_http_session_idem_key_vec_t  *v;

    v = &key_vecs[_i];

    ck_assert_msg(ngx_http_session_idem_key_valid((const unsigned char *)
                                                  v->key, v->len)
                  == v->valid,
                  "key vector %d: expected %s", _i,
                  v->valid ? "valid" : "malformed");
}
END_TEST


/* the length limit: 255 is the longest, 256 too long */
START_TEST(test_key_length)
{
    unsigned char  buf[300];

    memset(buf, 'k', sizeof(buf));

    ck_assert_int_eq(ngx_http_session_idem_key_valid(buf, 254), 1);
    ck_assert_int_eq(ngx_http_session_idem_key_valid(buf, 255), 1);
    ck_assert_int_eq(ngx_http_session_idem_key_valid(buf, 256), 0);
    ck_assert_int_eq(ngx_http_session_idem_key_valid(buf, 300), 0);
}
END_TEST


/* every single byte: exactly 0x21 ... 0x7e are allowed */
START_TEST(test_key_every_byte)
{
    unsigned char  c;

    c = (unsigned char) _i;

    ck_assert_int_eq(ngx_http_session_idem_key_valid(&c, 1),
                     c >= 0x21 && c <= 0x7e);
}
END_TEST


typedef struct {
    const char  *in;
    size_t       len;
    const char  *out;
} ngx_http_session_idem_escape_vec_t;


static const ngx_http_session_idem_escape_vec_t  escape_vecs[] = {
    { "", 0, "" },
    { "/api/v1/sessions", 16, "/api/v1/sessions" },
    { "/api/v1/sessions?a=1&b=%20", 26, "/api/v1/sessions?a=1&b=%2520" },
    { "/a b", 4, "/a%20b" },
    { "/\xff\x80", 3, "/%FF%80" },
    { "/\0x", 3, "/%00x" },
    { "%", 1, "%25" },
    { "\x7f~!", 3, "%7F~!" },
};


START_TEST(test_escape_vectors)
{
    size_t                                     n;
    unsigned char                              out[64];
    const ngx_http_session_idem_escape_vec_t  *v;

    v = &escape_vecs[_i];

    n = ngx_http_session_escape(NULL, (const unsigned char *) v->in,
                                v->len, PATH);
    ck_assert_uint_eq(n, strlen(v->out));

    memset(out, 0, sizeof(out));
    n = ngx_http_session_escape(out, (const unsigned char *) v->in,
                                v->len, PATH);

    ck_assert_uint_eq(n, strlen(v->out));
    ck_assert_msg(memcmp(out, v->out, n) == 0,
                  "escape vector %d: got \"%.*s\", expected \"%s\"", _i,
                  (int) n, out, v->out);
}
END_TEST


/*
 * Injective: a raw "%20" and an encoded space differ once escaped, and
 * the output is always printable ASCII.
 */
START_TEST(test_escape_injective)
{
    size_t         n1, n2, i;
    unsigned char  a[8], b[8], in[1];

    n1 = ngx_http_session_escape(a, (const unsigned char *) "%20", 3, PATH);
    n2 = ngx_http_session_escape(b, (const unsigned char *) " ", 1, PATH);

    ck_assert(n1 != n2 || memcmp(a, b, n1) != 0);

    for (i = 0; i < 256; i++) {
        in[0] = (unsigned char) i;
        n1 = ngx_http_session_escape(a, in, 1, PATH);

        ck_assert(n1 == 1 || n1 == 3);
        ck_assert(a[0] >= 0x21 && a[0] <= 0x7e);

        if (n1 == 3) {
            ck_assert(a[0] == '%');
        }
    }
}
END_TEST


Suite *
make_idem_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("idem");

    tc = tcase_create("key");
    tcase_add_loop_test(tc, test_key_vectors, 0,
                        sizeof(key_vecs) / sizeof(key_vecs[0]));
    tcase_add_test(tc, test_key_length);
    tcase_add_loop_test(tc, test_key_every_byte, 0, 256);
    suite_add_tcase(s, tc);

    tc = tcase_create("escape");
    tcase_add_loop_test(tc, test_escape_vectors, 0,
                        sizeof(escape_vecs) / sizeof(escape_vecs[0]));
    tcase_add_test(tc, test_escape_injective);
    suite_add_tcase(s, tc);

    return s;
}
