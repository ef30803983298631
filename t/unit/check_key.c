/*
 * src/core/ngx_http_session_key.{c,h}: API key syntax, the Authorization
 * header, prefixes, hashing, hex, log redaction and constant-time
 * comparison.
 *
 * Every vector is a literal with an explicit length, so embedded NULs and
 * bytes past the given length are part of what is tested.  The SHA-256
 * vectors were computed independently, e.g.
 *
 *     printf %s sess_0123456789abcdef0123456789abcdef | sha256sum
 */

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_key.h"


#define U(s)    ((const unsigned char *) (s))
/* a literal and its length without the terminating NUL */
#define S(s)    U(s), (sizeof(s) - 1)

#define HEX_L   "0123456789abcdef0123456789abcdef"
#define HEX_U   "0123456789ABCDEF0123456789ABCDEF"
#define HEX_M   "0123456789aBcDeF0123456789AbCdEf"
#define KEY_L   "sess_" HEX_L

/* sha256("sess_0123456789abcdef0123456789abcdef") */
#define KEY_L_SHA256                                                          \
    "57ad9d3fc4806cd8fc53b29f81f2eb0514be338d5307b534c1cf676c593f240e"


typedef struct {
    const unsigned char  *value;
    size_t                len;
    const char           *prefix;
    /* offset of the token in value; -1 when the header is malformed */
    int                   offset;
} ngx_http_session_header_vec_t;


typedef struct {
    const unsigned char  *token;
    size_t                len;
    const char           *prefix;
    int                   valid;
} ngx_http_session_token_vec_t;


typedef struct {
    const unsigned char  *prefix;
    size_t                len;
    int                   valid;
} ngx_http_session_prefix_vec_t;


typedef struct {
    /* NGX_HTTP_SESSION_KEY_LEN bytes are read, the rest is ignored */
    const char           *key;
    const char           *sha256;
} ngx_http_session_hash_vec_t;


typedef struct {
    const unsigned char  *src;
    size_t                len;
    const char           *hex;
} ngx_http_session_hex_vec_t;


static const ngx_http_session_header_vec_t  header_vecs[] = {

    /* valid */
    { S("Bearer " KEY_L), "sess", 7 },
    { S("bearer " KEY_L), "sess", 7 },
    { S("BEARER " KEY_L), "sess", 7 },
    { S("bEaReR " KEY_L), "sess", 7 },
    { S("Bearer  " KEY_L), "sess", 8 },
    { S("Bearer     " KEY_L), "sess", 11 },
    { S("Bearer sess_" HEX_U), "sess", 7 },
    { S("Bearer sess_" HEX_M), "sess", 7 },
    { S("Bearer sess_00000000000000000000000000000000"), "sess", 7 },
    { S("Bearer sess_ffffffffffffffffffffffffffffffff"), "sess", 7 },
    { S("Bearer sess_FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"), "sess", 7 },
    { S("Bearer abcd_" HEX_L), "abcd", 7 },
    { S("Bearer ABCD_" HEX_L), "ABCD", 7 },
    { S("Bearer AbCd_" HEX_M), "AbCd", 7 },
    /* bytes past the given length are not looked at */
    { U("Bearer " KEY_L "garbage"), sizeof("Bearer " KEY_L) - 1, "sess", 7 },

    /* empty or no token */
    { S(""), "sess", -1 },
    { U("Bearer " KEY_L), 0, "sess", -1 },
    { S(" "), "sess", -1 },
    { S("Bearer"), "sess", -1 },
    { S("bearer"), "sess", -1 },
    { S("Bearer "), "sess", -1 },
    { U("Bearer " KEY_L), 6, "sess", -1 },
    { U("Bearer " KEY_L), 7, "sess", -1 },
    { U("Bearer " KEY_L), sizeof("Bearer " KEY_L) - 2, "sess", -1 },
    { S("Bearer    "), "sess", -1 },
    { S(KEY_L), "sess", -1 },

    /* another scheme, or a damaged one */
    { S("Basic " KEY_L), "sess", -1 },
    { S("Token " KEY_L), "sess", -1 },
    { S("Bearers " KEY_L), "sess", -1 },
    { S("Beare " KEY_L), "sess", -1 },
    { S("Bear " KEY_L), "sess", -1 },
    { S("Bearer: " KEY_L), "sess", -1 },
    { S("Bearer=" KEY_L), "sess", -1 },
    { S("Bea\x80" "er " KEY_L), "sess", -1 },
    { S("\xc2\xa0" "Bearer " KEY_L), "sess", -1 },
    { S("Bearer\0" KEY_L), "sess", -1 },
    { S("Bearer\0 " KEY_L), "sess", -1 },

    /* the separator must be spaces */
    { S("Bearer\t" KEY_L), "sess", -1 },
    { S("Bearer \t" KEY_L), "sess", -1 },
    { S("Bearer\t " KEY_L), "sess", -1 },
    { S("Bearer\n" KEY_L), "sess", -1 },
    { S("Bearer\r\n " KEY_L), "sess", -1 },
    { S("Bearer" KEY_L), "sess", -1 },

    /* leading or trailing bytes */
    { S(" Bearer " KEY_L), "sess", -1 },
    { S("\tBearer " KEY_L), "sess", -1 },
    { S("Bearer " KEY_L " "), "sess", -1 },
    { S("Bearer " KEY_L "\t"), "sess", -1 },
    { S("Bearer " KEY_L "x"), "sess", -1 },
    { S("Bearer " KEY_L "0"), "sess", -1 },
    { S("Bearer " KEY_L "\0"), "sess", -1 },
    { S("Bearer " KEY_L " " KEY_L), "sess", -1 },
    { S("Bearer " KEY_L "," KEY_L), "sess", -1 },
    { S("Bearer \"" KEY_L "\""), "sess", -1 },

    /* the prefix, compared case-sensitively */
    { S("Bearer abcd_" HEX_L), "sess", -1 },
    { S("Bearer SESS_" HEX_L), "sess", -1 },
    { S("Bearer Sess_" HEX_L), "sess", -1 },
    { S("Bearer sesS_" HEX_L), "sess", -1 },
    { S("Bearer " KEY_L), "abcd", -1 },
    { S("Bearer " KEY_L), "SESS", -1 },
    { S("Bearer ses_0" HEX_L), "sess", -1 },
    { S("Bearer sesss_" HEX_L), "sess", -1 },

    /* the underscore */
    { S("Bearer sess" HEX_L), "sess", -1 },
    { S("Bearer sess" HEX_L "0"), "sess", -1 },
    { S("Bearer sess-" HEX_L), "sess", -1 },
    { S("Bearer sess " HEX_L), "sess", -1 },
    { S("Bearer sess__" HEX_L), "sess", -1 },
    { S("Bearer sess_ " HEX_L), "sess", -1 },

    /* the hex part: length, then digits */
    { S("Bearer sess_"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef0123456789abcde"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef0123456789abcdef0"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef0123456789abcdef01"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef"), "sess", -1 },
    { S("Bearer sess_g123456789abcdef0123456789abcdef"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef0123456789abcdeg"), "sess", -1 },
    { S("Bearer sess_0123456789abcdeG0123456789abcdef"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef 123456789abcdef"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef-123456789abcdef"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef\0" "123456789abcdef"), "sess", -1 },
    { S("Bearer sess_0123456789abcdef\xc3\xa9" "23456789abcdef"),
      "sess", -1 },
    { S("Bearer sess_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"), "sess", -1 },
};


static const ngx_http_session_token_vec_t  token_vecs[] = {
    { S(KEY_L), "sess", 1 },
    { S("sess_" HEX_U), "sess", 1 },
    { S("sess_" HEX_M), "sess", 1 },
    { S("sess_9999999999999999999999999999999a"), "sess", 1 },
    { S("abcd_" HEX_L), "abcd", 1 },
    { S("WXYZ_" HEX_U), "WXYZ", 1 },
    { U(KEY_L "0"), sizeof(KEY_L) - 1, "sess", 1 },

    { S(""), "sess", 0 },
    { U(KEY_L), 0, "sess", 0 },
    { U(KEY_L), sizeof(KEY_L) - 2, "sess", 0 },
    { S("sess_"), "sess", 0 },
    { S("sess_0123456789abcdef0123456789abcde"), "sess", 0 },
    { S("sess_0123456789abcdef0123456789abcdef0"), "sess", 0 },
    { S(" " KEY_L), "sess", 0 },
    { S(KEY_L " "), "sess", 0 },
    { S(" sess_0123456789abcdef0123456789abcde"), "sess", 0 },
    { S("sess_0123456789abcdef0123456789abcde "), "sess", 0 },
    { S("Bearer " KEY_L), "sess", 0 },
    { S("SESS_" HEX_L), "sess", 0 },
    { S("Sess_" HEX_L), "sess", 0 },
    { S(KEY_L), "SESS", 0 },
    { S(KEY_L), "abcd", 0 },
    { S("abcd_" HEX_L), "sess", 0 },
    { S("sess-" HEX_L), "sess", 0 },
    { S("sess." HEX_L), "sess", 0 },
    { S("sess0" HEX_L), "sess", 0 },
    { S("sess\0" HEX_L), "sess", 0 },
    { S("sessa" HEX_L), "sess", 0 },
    { S("_sess" HEX_L), "sess", 0 },
};


static const ngx_http_session_prefix_vec_t  prefix_vecs[] = {
    { S("sess"), 1 },
    { S("SESS"), 1 },
    { S("aBcD"), 1 },
    { S("abcd"), 1 },
    { S("zzzz"), 1 },
    { S("AZaz"), 1 },
    { S("ZAza"), 1 },
    { U("sessX"), 4, 1 },

    { S(""), 0 },
    { U("sess"), 0, 0 },
    { U("sess"), 3, 0 },
    { S("s"), 0 },
    { S("ses"), 0 },
    { S("sesss"), 0 },
    { S("sess_"), 0 },
    { S("ses1"), 0 },
    { S("1ses"), 0 },
    { S("0000"), 0 },
    { S("se_s"), 0 },
    { S("ses-"), 0 },
    { S("ses "), 0 },
    { S(" ses"), 0 },
    { S("ses\0"), 0 },
    { S("\0ses"), 0 },
    /* the neighbours of the letter ranges in ASCII */
    { S("@abc"), 0 },
    { S("[abc"), 0 },
    { S("`abc"), 0 },
    { S("{abc"), 0 },
    { S("abc@"), 0 },
    { S("abc["), 0 },
    { S("abc`"), 0 },
    { S("abc{"), 0 },
    /* not ASCII */
    { S("se\xc3\xa9"), 0 },
    { S("\xe1\xe2\xe3\xe4"), 0 },
    { S("\xc1\xc2\xc3\xc4"), 0 },
};


static const ngx_http_session_hash_vec_t  hash_vecs[] = {
    { KEY_L, KEY_L_SHA256 },
    /* the same key in upper-case and mixed-case hex */
    { "sess_" HEX_U, KEY_L_SHA256 },
    { "sess_" HEX_M, KEY_L_SHA256 },
    /* only the first NGX_HTTP_SESSION_KEY_LEN bytes count */
    { KEY_L "trailing bytes", KEY_L_SHA256 },

    { "sess_00000000000000000000000000000000",
      "1918d79d6a01a9fabb461f656b16fde4a27e21dad11cb0bf300cb1ff978d8b96" },
    { "abcd_ffffffffffffffffffffffffffffffff",
      "dc48fcfc21933f358b99ca73cad8fddded71107724e00d16ad90be47703c7f00" },
    /* "the lower-case form of the key" covers the prefix too */
    { "ABCD_FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF",
      "dc48fcfc21933f358b99ca73cad8fddded71107724e00d16ad90be47703c7f00" },
};


static const ngx_http_session_hex_vec_t  hex_vecs[] = {
    { S(""), "" },
    { S("\0"), "00" },
    { S("\x0f"), "0f" },
    { S("\xf0"), "f0" },
    { S("\xff"), "ff" },
    { S("\x09\x0a"), "090a" },
    { S("\xa0\x0a"), "a00a" },
    { S("\x01\x23\x45\x67\x89\xab\xcd\xef"), "0123456789abcdef" },
    { S("\xfe\xdc\xba\x98\x76\x54\x32\x10"), "fedcba9876543210" },
    { S("abc"), "616263" },
    { S("\0\0\0"), "000000" },
};


typedef struct {
    const char           *in;
    /* bytes given to the function; the rest of in must stay as it is */
    size_t                len;
    const char           *prefix;
    const char           *out;
    size_t                found;
} ngx_http_session_redact_vec_t;


#define R(in, prefix, out, found)                                             \
    { in, sizeof(in) - 1, prefix, out, found }

#define STARS32  "********************************"

static const ngx_http_session_redact_vec_t  redact_vecs[] = {
    R("Bearer " KEY_L, "sess", "Bearer sess_" STARS32, 1),
    R(KEY_L, "sess", "sess_" STARS32, 1),
    R("sess_" HEX_U, "sess", "sess_" STARS32, 1),
    /* the prefix is compared case-insensitively */
    R("SESS_" HEX_M, "sess", "SESS_" STARS32, 1),
    R("Sess_abc", "sess", "Sess_***", 1),
    R("sess_abc", "SESS", "sess_***", 1),
    /* mistyped keys: any run of hex digits, short or long */
    R("sess_1", "sess", "sess_*", 1),
    R("key sess_0123456789abcdef0123456789abcdef0123 end", "sess",
      "key sess_" STARS32 "**** end", 1),
    R("sess_12g4", "sess", "sess_**g4", 1),
    R("token=sess_abc,sess_DEF;", "sess", "token=sess_***,sess_***;", 2),
    R("a sess_12 b sess_34 c sess_56", "sess",
      "a sess_** b sess_** c sess_**", 3),
    R("sesssess_12", "sess", "sesssess_**", 1),
    R("xsess_12", "sess", "xsess_**", 1),
    R("sess_sess_12", "sess", "sess_sess_**", 1),
    /* another prefix */
    R("sess_12 abcd_34", "abcd", "sess_12 abcd_**", 1),
    R("sess_12 abcd_34", "wxyz", "sess_12 abcd_34", 0),
    /* nothing to hide */
    R("", "sess", "", 0),
    R("sess", "sess", "sess", 0),
    R("sess_", "sess", "sess_", 0),
    R("sess_ 12", "sess", "sess_ 12", 0),
    R("sess__12", "sess", "sess__12", 0),
    R("sess-12", "sess", "sess-12", 0),
    R("ses_12", "sess", "ses_12", 0),
    R("sess_xyz", "sess", "sess_xyz", 0),
    R("GET /api/v1/sessions HTTP/1.1", "sess",
      "GET /api/v1/sessions HTTP/1.1", 0),
    R("sessions_abc", "sess", "sessions_abc", 0),
    /* only len bytes are looked at and changed */
    { "sess_1234", 7, "sess", "sess_**34", 1 },
    { "sess_1234", 5, "sess", "sess_1234", 0 },
    { "sess_1234", 0, "sess", "sess_1234", 0 },
    { "xx sess_1234", 8, "sess", "xx sess_1234", 0 },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))


/*
 * The value is copied to a heap buffer of exactly len bytes, as nginx's
 * header values are not NUL-terminated where the parser may look: under
 * valgrind or -fsanitize=address a read past the end is reported.
 */
START_TEST(test_parse_header)
{
    int                                   rc;
    unsigned char                        *value;
    const unsigned char                  *token;
    const ngx_http_session_header_vec_t  *v;

    v = &header_vecs[_i];
    token = NULL;

    value = malloc(v->len ? v->len : 1);
    ck_assert_ptr_nonnull(value);
    memcpy(value, v->value, v->len);

    rc = ngx_http_session_key_parse_header(value, v->len, U(v->prefix),
                                           &token);

    if (v->offset < 0) {
        free(value);
        ck_assert_msg(rc == NGX_HTTP_SESSION_KEY_MALFORMED,
                      "vector %d (\"%.*s\", prefix %s): expected malformed,"
                      " got %d", _i, (int) v->len, (const char *) v->value,
                      v->prefix, rc);
        return;
    }

    ck_assert_msg(rc == NGX_HTTP_SESSION_KEY_OK,
                  "vector %d (\"%.*s\", prefix %s): expected ok, got %d",
                  _i, (int) v->len, (const char *) v->value, v->prefix, rc);
    ck_assert_msg(token == value + v->offset,
                  "vector %d: token at offset %td, expected %d", _i,
                  token == NULL ? -1 : token - value, v->offset);
    ck_assert_int_eq(ngx_http_session_key_check(token,
                                                v->len - v->offset,
                                                U(v->prefix)),
                     NGX_HTTP_SESSION_KEY_OK);

    free(value);
}
END_TEST


START_TEST(test_parse_header_token_is_last)
{
    size_t                len;
    unsigned char         buf[64];
    const unsigned char  *token;

    /* the token runs to the end of the value: nothing is copied */
    len = sizeof("Bearer   " KEY_L) - 1;
    memcpy(buf, "Bearer   " KEY_L, len);

    ck_assert_int_eq(ngx_http_session_key_parse_header(buf, len, U("sess"),
                                                       &token),
                     NGX_HTTP_SESSION_KEY_OK);
    ck_assert_ptr_eq(token, buf + 9);
    ck_assert_uint_eq(len - (size_t) (token - buf), NGX_HTTP_SESSION_KEY_LEN);
}
END_TEST


START_TEST(test_key_check)
{
    int                                  rc;
    const ngx_http_session_token_vec_t  *v;

    v = &token_vecs[_i];

    rc = ngx_http_session_key_check(v->token, v->len, U(v->prefix));

    ck_assert_msg(rc == (v->valid ? NGX_HTTP_SESSION_KEY_OK
                                  : NGX_HTTP_SESSION_KEY_MALFORMED),
                  "vector %d (\"%.*s\", prefix %s): expected %s, got %d",
                  _i, (int) v->len, (const char *) v->token, v->prefix,
                  v->valid ? "ok" : "malformed", rc);
}
END_TEST


/*
 * Every byte value at every position of the hex part: only 0-9, a-f and
 * A-F pass (this covers the neighbours of each range, '/', ':', '@', 'G',
 * '`', 'g', as well as NUL and bytes over 0x7f).
 */
START_TEST(test_key_check_every_byte)
{
    int            c, ok, rc;
    size_t         pos;
    unsigned char  key[NGX_HTTP_SESSION_KEY_LEN];

    pos = NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1 + (size_t) _i;

    for (c = 0; c < 256; c++) {
        memcpy(key, KEY_L, NGX_HTTP_SESSION_KEY_LEN);
        key[pos] = (unsigned char) c;

        ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
             || (c >= 'A' && c <= 'F');

        rc = ngx_http_session_key_check(key, sizeof(key), U("sess"));

        ck_assert_msg(rc == (ok ? NGX_HTTP_SESSION_KEY_OK
                                : NGX_HTTP_SESSION_KEY_MALFORMED),
                      "byte 0x%02x at position %zu: got %d", c, pos, rc);
    }
}
END_TEST


/* any change to the prefix or the underscore is refused */
START_TEST(test_key_check_prefix_bytes)
{
    int            c, rc;
    size_t         pos;
    unsigned char  key[NGX_HTTP_SESSION_KEY_LEN];

    pos = (size_t) _i;

    for (c = 0; c < 256; c++) {
        memcpy(key, KEY_L, NGX_HTTP_SESSION_KEY_LEN);

        if (c == key[pos]) {
            continue;
        }

        key[pos] = (unsigned char) c;

        rc = ngx_http_session_key_check(key, sizeof(key), U("sess"));

        ck_assert_msg(rc == NGX_HTTP_SESSION_KEY_MALFORMED,
                      "byte 0x%02x at position %zu: got %d", c, pos, rc);
    }
}
END_TEST


START_TEST(test_key_check_lengths)
{
    size_t         len;
    unsigned char  key[2 * NGX_HTTP_SESSION_KEY_LEN];

    memcpy(key, KEY_L KEY_L, sizeof(key));

    for (len = 0; len <= sizeof(key); len++) {
        ck_assert_msg(ngx_http_session_key_check(key, len, U("sess"))
                      == (len == NGX_HTTP_SESSION_KEY_LEN
                          ? NGX_HTTP_SESSION_KEY_OK
                          : NGX_HTTP_SESSION_KEY_MALFORMED),
                      "length %zu", len);
    }
}
END_TEST


START_TEST(test_prefix_valid)
{
    const ngx_http_session_prefix_vec_t  *v;

    v = &prefix_vecs[_i];

    ck_assert_msg(ngx_http_session_prefix_valid(v->prefix, v->len)
                  == v->valid,
                  "vector %d (\"%.*s\", %zu bytes): expected %d", _i,
                  (int) v->len, (const char *) v->prefix, v->len, v->valid);
}
END_TEST


/* exactly the 52 ASCII letters are accepted in each position */
START_TEST(test_prefix_every_byte)
{
    int            c, ok;
    unsigned char  prefix[NGX_HTTP_SESSION_KEY_PREFIX_LEN];

    for (c = 0; c < 256; c++) {
        memcpy(prefix, "sess", sizeof(prefix));
        prefix[_i] = (unsigned char) c;

        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');

        ck_assert_msg(ngx_http_session_prefix_valid(prefix, sizeof(prefix))
                      == ok,
                      "byte 0x%02x at position %d", c, _i);
    }
}
END_TEST


START_TEST(test_key_hash)
{
    unsigned char                       hex[2 * NGX_HTTP_SESSION_KEY_HASH_LEN];
    unsigned char                       hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    const ngx_http_session_hash_vec_t  *v;

    v = &hash_vecs[_i];

    ck_assert_int_eq(ngx_http_session_key_hash(U(v->key), hash), 0);

    ngx_http_session_hex(hash, sizeof(hash), hex);

    ck_assert_msg(memcmp(hex, v->sha256, sizeof(hex)) == 0,
                  "vector %d (%s): got %.*s, expected %s", _i, v->key,
                  (int) sizeof(hex), (const char *) hex, v->sha256);
}
END_TEST


/*
 * A digest of its own (a streamed upload's) is not disturbed by the
 * process's context hashing something else between two of its pieces
 */
START_TEST(test_sha256_new)
{
    unsigned int    len;
    unsigned char   digest[32], hex[64], hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    EVP_MD_CTX     *md;

    md = ngx_http_session_sha256_new();
    ck_assert_ptr_nonnull(md);

    ck_assert_int_eq(EVP_DigestUpdate(md, "a", 1), 1);
    ck_assert_int_eq(ngx_http_session_key_hash(U(KEY_L), hash), 0);
    ck_assert_int_eq(EVP_DigestUpdate(md, "bc", 2), 1);

    ck_assert_int_eq(EVP_DigestFinal_ex(md, digest, &len), 1);
    ck_assert_uint_eq(len, 32);
    EVP_MD_CTX_free(md);

    ngx_http_session_hex(digest, sizeof(digest), hex);

    /* sha256("abc"), FIPS 180-2 */
    ck_assert_int_eq(memcmp(hex, "ba7816bf8f01cfea414140de5dae2223"
                                 "b00361a396177a9cb410ff61f20015ad", 64), 0);
}
END_TEST


/* the hash works on a copy: the key itself keeps its case */
START_TEST(test_key_hash_leaves_key)
{
    unsigned char  key[NGX_HTTP_SESSION_KEY_LEN];
    unsigned char  hash[NGX_HTTP_SESSION_KEY_HASH_LEN];

    memcpy(key, "sess_" HEX_U, sizeof(key));

    ck_assert_int_eq(ngx_http_session_key_hash(key, hash), 0);
    ck_assert_int_eq(memcmp(key, "sess_" HEX_U, sizeof(key)), 0);
}
END_TEST


/* a key and its upper-case twin hash the same, other keys differently */
START_TEST(test_key_hash_case_twins)
{
    size_t         i;
    unsigned char  key[NGX_HTTP_SESSION_KEY_LEN];
    unsigned char  twin[NGX_HTTP_SESSION_KEY_LEN];
    unsigned char  h1[NGX_HTTP_SESSION_KEY_HASH_LEN];
    unsigned char  h2[NGX_HTTP_SESSION_KEY_HASH_LEN];
    unsigned char  h3[NGX_HTTP_SESSION_KEY_HASH_LEN];

    static const char  digits[] = "0123456789abcdef";

    /* a different key for each loop index */
    memcpy(key, "sess_", 5);

    for (i = 5; i < sizeof(key); i++) {
        key[i] = (unsigned char) digits[(i * 7 + (size_t) _i * 13) % 16];
    }

    for (i = 0; i < sizeof(key); i++) {
        twin[i] = (i >= 5 && key[i] >= 'a' && key[i] <= 'f')
                  ? (unsigned char) (key[i] - 'a' + 'A') : key[i];
    }

    ck_assert_int_eq(ngx_http_session_key_check(twin, sizeof(twin),
                                                U("sess")),
                     NGX_HTTP_SESSION_KEY_OK);

    ck_assert_int_eq(ngx_http_session_key_hash(key, h1), 0);
    ck_assert_int_eq(ngx_http_session_key_hash(twin, h2), 0);
    ck_assert_int_eq(memcmp(h1, h2, sizeof(h1)), 0);

    /* one digit changed: another hash */
    key[sizeof(key) - 1] = key[sizeof(key) - 1] == '0' ? '1' : '0';

    ck_assert_int_eq(ngx_http_session_key_hash(key, h3), 0);
    ck_assert_int_ne(memcmp(h1, h3, sizeof(h1)), 0);
}
END_TEST


START_TEST(test_hex)
{
    size_t                             n;
    unsigned char                      dst[64];
    const ngx_http_session_hex_vec_t  *v;

    v = &hex_vecs[_i];
    n = 2 * v->len;

    ck_assert_uint_le(n + 1, sizeof(dst));
    ck_assert_uint_eq(strlen(v->hex), n);

    memset(dst, '#', sizeof(dst));

    ngx_http_session_hex(v->src, v->len, dst);

    ck_assert_msg(memcmp(dst, v->hex, n) == 0,
                  "vector %d: got \"%.*s\", expected \"%s\"", _i, (int) n,
                  (const char *) dst, v->hex);

    /* no terminator, nothing past 2 * len */
    ck_assert_msg(dst[n] == '#', "vector %d: byte %zu written", _i, n);
}
END_TEST


/* every byte value gives two lower-case digits matching %02x */
START_TEST(test_hex_every_byte)
{
    int            c;
    char           expect[3];
    unsigned char  src[1], dst[3];

    for (c = 0; c < 256; c++) {
        src[0] = (unsigned char) c;
        dst[2] = '#';

        ngx_http_session_hex(src, 1, dst);

        expect[0] = "0123456789abcdef"[c >> 4];
        expect[1] = "0123456789abcdef"[c & 0xf];

        ck_assert_msg(dst[0] == (unsigned char) expect[0]
                      && dst[1] == (unsigned char) expect[1]
                      && dst[2] == '#',
                      "byte 0x%02x: got \"%.2s\"", c, (const char *) dst);
    }
}
END_TEST


/* copied to a heap buffer of exactly len bytes, as in test_parse_header */
START_TEST(test_redact)
{
    size_t                                all, found;
    unsigned char                        *buf;
    const ngx_http_session_redact_vec_t  *v;

    v = &redact_vecs[_i];
    all = strlen(v->in);

    ck_assert_uint_eq(strlen(v->out), all);

    buf = malloc(all ? all : 1);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, v->in, all);

    found = ngx_http_session_key_redact(buf, v->len, U(v->prefix));

    ck_assert_msg(found == v->found && memcmp(buf, v->out, all) == 0,
                  "vector %d (\"%s\", %zu bytes, prefix %s): got \"%.*s\""
                  " and %zu, expected \"%s\" and %zu", _i, v->in, v->len,
                  v->prefix, (int) all, (const char *) buf, found, v->out,
                  v->found);

    free(buf);
}
END_TEST


START_TEST(test_equal)
{
    unsigned char  a[NGX_HTTP_SESSION_KEY_HASH_LEN];
    unsigned char  b[NGX_HTTP_SESSION_KEY_HASH_LEN];

    memset(a, 0x5a, sizeof(a));
    memcpy(b, a, sizeof(b));

    ck_assert_int_eq(ngx_http_session_equal(a, b, sizeof(a)), 1);
    ck_assert_int_eq(ngx_http_session_equal(a, a, sizeof(a)), 1);

    /* one byte differs at position _i, by one bit or by all bits */
    b[_i] ^= 0x01;
    ck_assert_int_eq(ngx_http_session_equal(a, b, sizeof(a)), 0);
    ck_assert_int_eq(ngx_http_session_equal(b, a, sizeof(a)), 0);

    b[_i] = (unsigned char) ~a[_i];
    ck_assert_int_eq(ngx_http_session_equal(a, b, sizeof(a)), 0);

    /* only the first len bytes are compared */
    ck_assert_int_eq(ngx_http_session_equal(a, b, (size_t) _i), 1);
    ck_assert_int_eq(ngx_http_session_equal(a, b, (size_t) _i + 1), 0);
}
END_TEST


START_TEST(test_equal_edges)
{
    ck_assert_int_eq(ngx_http_session_equal(U("a"), U("b"), 0), 1);
    ck_assert_int_eq(ngx_http_session_equal(U("abc"), U("abc"), 3), 1);
    ck_assert_int_eq(ngx_http_session_equal(U("abc"), U("abd"), 3), 0);
    ck_assert_int_eq(ngx_http_session_equal(U("\0\0"), U("\0\0"), 2), 1);
    ck_assert_int_eq(ngx_http_session_equal(U("\0\0"), U("\0\x80"), 2), 0);
    ck_assert_int_eq(ngx_http_session_equal(U("\xff"), U("\x7f"), 1), 0);
}
END_TEST


/* the whole path: header, token, hash, hex, comparison with a stored hash */
START_TEST(test_header_to_stored_hash)
{
    unsigned char         hex[2 * NGX_HTTP_SESSION_KEY_HASH_LEN];
    unsigned char         hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    unsigned char         stored[NGX_HTTP_SESSION_KEY_HASH_LEN];
    const unsigned char  *token;

    ck_assert_int_eq(ngx_http_session_key_hash(U(KEY_L), stored), 0);

    ck_assert_int_eq(ngx_http_session_key_parse_header(
                         S("BEARER  sess_" HEX_U), U("sess"), &token),
                     NGX_HTTP_SESSION_KEY_OK);

    ck_assert_int_eq(ngx_http_session_key_hash(token, hash), 0);
    ck_assert_int_eq(ngx_http_session_equal(hash, stored, sizeof(hash)), 1);

    ngx_http_session_hex(hash, sizeof(hash), hex);
    ck_assert_int_eq(memcmp(hex, KEY_L_SHA256, sizeof(hex)), 0);
}
END_TEST


Suite *
make_key_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("key");

    tc = tcase_create("parse_header");
    tcase_add_loop_test(tc, test_parse_header, 0, NELTS(header_vecs));
    tcase_add_test(tc, test_parse_header_token_is_last);
    suite_add_tcase(s, tc);

    tc = tcase_create("check");
    tcase_add_loop_test(tc, test_key_check, 0, NELTS(token_vecs));
    tcase_add_loop_test(tc, test_key_check_every_byte, 0,
                        NGX_HTTP_SESSION_KEY_HEX_LEN);
    tcase_add_loop_test(tc, test_key_check_prefix_bytes, 0,
                        NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1);
    tcase_add_test(tc, test_key_check_lengths);
    suite_add_tcase(s, tc);

    tc = tcase_create("prefix_valid");
    tcase_add_loop_test(tc, test_prefix_valid, 0, NELTS(prefix_vecs));
    tcase_add_loop_test(tc, test_prefix_every_byte, 0,
                        NGX_HTTP_SESSION_KEY_PREFIX_LEN);
    suite_add_tcase(s, tc);

    tc = tcase_create("hash");
    tcase_add_loop_test(tc, test_key_hash, 0, NELTS(hash_vecs));
    tcase_add_test(tc, test_key_hash_leaves_key);
    tcase_add_loop_test(tc, test_key_hash_case_twins, 0, 16);
    tcase_add_test(tc, test_header_to_stored_hash);
    tcase_add_test(tc, test_sha256_new);
    suite_add_tcase(s, tc);

    tc = tcase_create("hex");
    tcase_add_loop_test(tc, test_hex, 0, NELTS(hex_vecs));
    tcase_add_test(tc, test_hex_every_byte);
    suite_add_tcase(s, tc);

    tc = tcase_create("redact");
    tcase_add_loop_test(tc, test_redact, 0, NELTS(redact_vecs));
    suite_add_tcase(s, tc);

    tc = tcase_create("equal");
    tcase_add_loop_test(tc, test_equal, 0, NGX_HTTP_SESSION_KEY_HASH_LEN);
    tcase_add_test(tc, test_equal_edges);
    suite_add_tcase(s, tc);

    return s;
}
