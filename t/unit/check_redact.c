/*
 * src/core/ngx_http_session_key.{c,h}, the parts check_key.c leaves out:
 * ngx_http_session_key_tree_key() (the rbtree key of the shared-memory
 * auth cache and rate counters) and properties of
 * ngx_http_session_key_redact() over whole log lines (check_key.c has its
 * vectors).
 *
 * The SHA-256 value was computed independently:
 *
 *     printf %s sess_0123456789abcdef0123456789abcdef | sha256sum
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_key.h"


#define U(s)    ((const unsigned char *) (s))

#define HEX_L   "0123456789abcdef0123456789abcdef"
#define KEY_L   "sess_" HEX_L


typedef struct {
    unsigned char  hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    uint32_t       key;
} ngx_http_session_tree_key_vec_t;


static const ngx_http_session_tree_key_vec_t  tree_key_vecs[] = {
    { { 0x00, 0x00, 0x00, 0x00 }, 0x00000000 },
    { { 0x01, 0x02, 0x03, 0x04 }, 0x01020304 },
    { { 0x00, 0x00, 0x00, 0x01 }, 0x00000001 },
    { { 0x01, 0x00, 0x00, 0x00 }, 0x01000000 },
    /* no sign extension of bytes >= 0x80 */
    { { 0x80, 0x00, 0x00, 0x00 }, 0x80000000 },
    { { 0x00, 0x80, 0x00, 0x00 }, 0x00800000 },
    { { 0x00, 0x00, 0x80, 0x00 }, 0x00008000 },
    { { 0x00, 0x00, 0x00, 0x80 }, 0x00000080 },
    { { 0xff, 0xff, 0xff, 0xff }, 0xffffffff },
    { { 0xde, 0xad, 0xbe, 0xef }, 0xdeadbeef },
    /* only the first four bytes count */
    { { 0x12, 0x34, 0x56, 0x78, 0xff, 0xff, 0xff, 0xff }, 0x12345678 },
    { { 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x01 }, 0x12345678 },
    /* sha256("sess_0123456789abcdef0123456789abcdef") = 57ad9d3f... */
    { { 0x57, 0xad, 0x9d, 0x3f, 0xc4, 0x80, 0x6c, 0xd8, 0xfc, 0x53, 0xb2,
        0x9f, 0x81, 0xf2, 0xeb, 0x05, 0x14, 0xbe, 0x33, 0x8d, 0x53, 0x07,
        0xb5, 0x34, 0xc1, 0xcf, 0x67, 0x6c, 0x59, 0x3f, 0x24, 0x0e },
      0x57ad9d3f },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))


START_TEST(test_tree_key)
{
    uint32_t                                got;
    unsigned char                          *hash;
    const ngx_http_session_tree_key_vec_t  *v;

    v = &tree_key_vecs[_i];

    /* a heap copy of exactly the hash: a read past it is reported */
    hash = malloc(NGX_HTTP_SESSION_KEY_HASH_LEN);
    ck_assert_ptr_nonnull(hash);
    memcpy(hash, v->hash, NGX_HTTP_SESSION_KEY_HASH_LEN);

    got = ngx_http_session_key_tree_key(hash);

    ck_assert_msg(got == v->key, "vector %d: 0x%08x, expected 0x%08x", _i,
                  got, v->key);

    /* the hash is left as it was */
    ck_assert_int_eq(memcmp(hash, v->hash, NGX_HTTP_SESSION_KEY_HASH_LEN),
                     0);

    free(hash);
}
END_TEST


/* the key of a real key's hash, as the module computes it */
START_TEST(test_tree_key_of_key_hash)
{
    unsigned char  hash[NGX_HTTP_SESSION_KEY_HASH_LEN];

    ck_assert_int_eq(ngx_http_session_key_hash(U(KEY_L), hash), 0);
    ck_assert_uint_eq(ngx_http_session_key_tree_key(hash), 0x57ad9d3f);

    /* upper-case hex is the same key: the same tree key */
    ck_assert_int_eq(ngx_http_session_key_hash(
                         U("sess_0123456789ABCDEF0123456789ABCDEF"), hash),
                     0);
    ck_assert_uint_eq(ngx_http_session_key_tree_key(hash), 0x57ad9d3f);
}
END_TEST


/*
 * Byte _i of four, every value: big-endian, so the order of tree keys is
 * the order of memcmp() over the first four bytes, which the rbtree's
 * tie-break on the whole hash relies on.
 */
START_TEST(test_tree_key_order)
{
    int            v, shift;
    uint32_t       prev, got;
    unsigned char  hash[NGX_HTTP_SESSION_KEY_HASH_LEN];

    shift = 8 * (3 - _i);
    prev = 0;

    for (v = 0; v < 256; v++) {
        memset(hash, 0xa5, sizeof(hash));
        hash[0] = hash[1] = hash[2] = hash[3] = 0;
        hash[_i] = (unsigned char) v;

        got = ngx_http_session_key_tree_key(hash);

        ck_assert_uint_eq(got, (uint32_t) v << shift);

        if (v > 0) {
            ck_assert_uint_gt(got, prev);
        }

        prev = got;
    }
}
END_TEST


/*
 * A log line with a key at every offset: after redaction no hex digit of
 * the key is left, the text around it is unchanged, and redacting again
 * finds nothing (the stars are not hex).
 */
START_TEST(test_redact_every_offset)
{
    size_t          len, found, pos, i;
    unsigned char  *buf;
    char            line[128];
    static const char  before[] = "client sent Authorization: Bearer ";

    pos = (size_t) _i;

    memset(line, '.', sizeof(line));
    memcpy(line, before, pos < sizeof(before) - 1 ? pos
                                                  : sizeof(before) - 1);
    memcpy(line + pos, KEY_L, sizeof(KEY_L) - 1);
    len = pos + sizeof(KEY_L) - 1 + 3;

    buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, line, len);

    found = ngx_http_session_key_redact(buf, len, U("sess"));
    ck_assert_uint_eq(found, 1);

    ck_assert_int_eq(memcmp(buf, line, pos + 5), 0);
    for (i = 0; i < NGX_HTTP_SESSION_KEY_HEX_LEN; i++) {
        ck_assert_int_eq(buf[pos + 5 + i], '*');
    }

    ck_assert_int_eq(memcmp(buf + pos + 5 + 32, "...", 3), 0);

    ck_assert_uint_eq(ngx_http_session_key_redact(buf, len, U("sess")), 0);

    free(buf);
}
END_TEST


/* many keys back to back, separated by one byte that is not hex */
START_TEST(test_redact_many)
{
    size_t          i, n, len;
    unsigned char  *buf;

    n = 50;
    len = n * (sizeof(KEY_L) - 1 + 1);

    buf = malloc(len);
    ck_assert_ptr_nonnull(buf);

    for (i = 0; i < n; i++) {
        memcpy(buf + i * sizeof(KEY_L), KEY_L, sizeof(KEY_L) - 1);
        buf[i * sizeof(KEY_L) + sizeof(KEY_L) - 1] = (i % 2) ? ',' : ' ';
    }

    ck_assert_uint_eq(ngx_http_session_key_redact(buf, len, U("sess")), n);

    for (i = 0; i < len; i++) {
        ck_assert_msg(!(buf[i] >= '0' && buf[i] <= '9')
                      && !(buf[i] >= 'a' && buf[i] <= 'f'
                           && (i % sizeof(KEY_L)) >= 5),
                      "byte %zu is still '%c'", i, buf[i]);
    }

    free(buf);
}
END_TEST


Suite *
make_redact_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("redact");

    tc = tcase_create("tree_key");
    tcase_add_loop_test(tc, test_tree_key, 0, NELTS(tree_key_vecs));
    tcase_add_test(tc, test_tree_key_of_key_hash);
    tcase_add_loop_test(tc, test_tree_key_order, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("redact");
    tcase_add_loop_test(tc, test_redact_every_offset, 0, 48);
    tcase_add_test(tc, test_redact_many);
    suite_add_tcase(s, tc);

    return s;
}
