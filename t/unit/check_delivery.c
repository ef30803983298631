/*
 * src/core/ngx_http_session_delivery.{c,h}: the Standard Webhooks
 * signature (docs/api.md §7 and §10), the retry schedule (1 s x
 * 5^(n-1), capped at an hour, +-10 % jitter) and the 2xx verdict.
 *
 * The fixed vector was computed for this file with two other tools,
 * which agree:
 *
 *     python3: hmac.new(bytes(range(32)), b'<id>.<ts>.<body>', sha256)
 *     printf '%s' '<id>.<ts>.<body>' | openssl dgst -sha256 -mac HMAC \
 *         -macopt hexkey:000102...1f -binary | base64
 *
 * and every other signature is checked against OpenSSL's EVP_DigestSign
 * with an HMAC key, a different code path from the module's HMAC().
 */

#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "check_suites.h"
#include "ngx_http_session_delivery.h"


/* base64 of the bytes 0x00 ... 0x1f */
#define SECRET  "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
#define MSG_ID  "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define BODY    "{\"test\": 2432232314}"
#define SIG     "v1,O4Gjv1HqPqsMrjmczoggs/sWA8gZD0VyHG+fLh4+ktI="


/* "v1," + base64(HMAC-SHA256(key, msg)) through EVP_DigestSign */

static void
reference_sign(const unsigned char *key, size_t key_len, const char *msg,
    char *out)
{
    size_t          len;
    EVP_PKEY       *pkey;
    EVP_MD_CTX     *md;
    unsigned char   mac[64], b64[96];

    pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_HMAC, NULL, key, key_len);
    ck_assert_ptr_nonnull(pkey);

    md = EVP_MD_CTX_new();
    ck_assert_ptr_nonnull(md);

    len = sizeof(mac);

    ck_assert_int_eq(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, pkey),
                     1);
    ck_assert_int_eq(EVP_DigestSignUpdate(md, msg, strlen(msg)), 1);
    ck_assert_int_eq(EVP_DigestSignFinal(md, mac, &len), 1);
    ck_assert_uint_eq(len, 32);

    EVP_MD_CTX_free(md);
    EVP_PKEY_free(pkey);

    ck_assert_int_eq(EVP_EncodeBlock(b64, mac, 32), 44);

    strcpy(out, "v1,");
    strcat(out, (char *) b64);
}


START_TEST(test_key_decode)
{
    int            n, i;
    unsigned char  key[NGX_HTTP_SESSION_WEBHOOK_KEY_MAX];

    n = ngx_http_session_webhook_key((const unsigned char *) SECRET,
                                     sizeof(SECRET) - 1, key);
    ck_assert_int_eq(n, 32);

    for (i = 0; i < 32; i++) {
        ck_assert_uint_eq(key[i], (unsigned) i);
    }

    /* the prefix is optional */
    n = ngx_http_session_webhook_key((const unsigned char *) SECRET + 6,
                                     sizeof(SECRET) - 7, key);
    ck_assert_int_eq(n, 32);

    /* unpadded base64 */
    n = ngx_http_session_webhook_key((const unsigned char *) "whsec_AAEC",
                                     10, key);
    ck_assert_int_eq(n, 3);
    ck_assert_uint_eq(key[2], 2);

    n = ngx_http_session_webhook_key((const unsigned char *) "whsec_AAE=",
                                     10, key);
    ck_assert_int_eq(n, 2);
}
END_TEST


START_TEST(test_key_malformed)
{
    size_t             i;
    unsigned char      key[NGX_HTTP_SESSION_WEBHOOK_KEY_MAX];
    char               big[400];
    static const char *bad[] = {
        "whsec_",                 /* empty */
        "",
        "whsec_A",                /* one character cannot hold a byte */
        "whsec_AA*A",             /* not base64 */
        "whsec_AA-_",             /* base64url is not the alphabet */
        "whsec_AB==",             /* leftover bits not zero */
        "whsec_AA===",            /* three pads */
        "whsec_A=AA",             /* pad in the middle */
        "whsec_AAECAw= ",         /* trailing space */
    };

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(ngx_http_session_webhook_key(
                          (const unsigned char *) bad[i], strlen(bad[i]), key)
                      == -1, "\"%s\" is accepted", bad[i]);
    }

    /* longer than the bound decoded */
    memset(big, 'A', sizeof(big));
    ck_assert_int_eq(ngx_http_session_webhook_key((const unsigned char *) big,
                                                  sizeof(big), key), -1);
}
END_TEST


START_TEST(test_sign_vector)
{
    int            n;
    unsigned char  key[NGX_HTTP_SESSION_WEBHOOK_KEY_MAX];
    unsigned char  sig[NGX_HTTP_SESSION_WEBHOOK_SIG_LEN + 1];
    char           ref[128];

    n = ngx_http_session_webhook_key((const unsigned char *) SECRET,
                                     sizeof(SECRET) - 1, key);
    ck_assert_int_eq(n, 32);

    ck_assert_int_eq(ngx_http_session_webhook_sign(key, n,
                         (const unsigned char *) MSG_ID, sizeof(MSG_ID) - 1,
                         1614265330, (const unsigned char *) BODY,
                         sizeof(BODY) - 1, sig), 0);

    sig[NGX_HTTP_SESSION_WEBHOOK_SIG_LEN] = '\0';
    ck_assert_str_eq((char *) sig, SIG);

    reference_sign(key, n, MSG_ID ".1614265330." BODY, ref);
    ck_assert_str_eq(ref, SIG);
}
END_TEST


/* other keys, ids, timestamps and bodies against the reference */

START_TEST(test_sign_reference)
{
    size_t         i;
    unsigned char  key[3][NGX_HTTP_SESSION_WEBHOOK_KEY_MAX];
    unsigned char  sig[NGX_HTTP_SESSION_WEBHOOK_SIG_LEN + 1];
    char           ref[128], msg[256];
    int            klen[3];

    static const struct {
        const char  *id;
        long long    ts;
        const char  *body;
    } v[] = {
        { "3be834e4-6e23-4e83-a538-dc26f7f2c72d", 1795255200,
          "{\"id\":\"3be834e4-6e23-4e83-a538-dc26f7f2c72d\","
          "\"type\":\"session.completed\"}" },
        { "a", 0, "" },
        { "e", 4102444800LL, "caf\xc3\xa9 \"\\\" \n" },
    };

    klen[0] = ngx_http_session_webhook_key((const unsigned char *) SECRET,
                                           sizeof(SECRET) - 1, key[0]);
    klen[1] = ngx_http_session_webhook_key(
                  (const unsigned char *) "whsec_c2VjcmV0", 14, key[1]);
    klen[2] = ngx_http_session_webhook_key((const unsigned char *)
                  "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 38, key[2]);

    ck_assert_int_eq(klen[0], 32);
    ck_assert_int_eq(klen[1], 6);
    ck_assert_int_eq(klen[2], 24);

    for (i = 0; i < 3 * (sizeof(v) / sizeof(v[0])); i++) {
        size_t  k = i % 3, j = i / 3;

        ck_assert_int_eq(ngx_http_session_webhook_sign(key[k], klen[k],
                             (const unsigned char *) v[j].id,
                             strlen(v[j].id), (time_t) v[j].ts,
                             (const unsigned char *) v[j].body,
                             strlen(v[j].body), sig), 0);
        sig[NGX_HTTP_SESSION_WEBHOOK_SIG_LEN] = '\0';

        snprintf(msg, sizeof(msg), "%s.%lld.%s", v[j].id, v[j].ts,
                 v[j].body);
        reference_sign(key[k], klen[k], msg, ref);

        ck_assert_str_eq((char *) sig, ref);
    }
}
END_TEST


/* the midpoint of the jitter is the schedule itself */

START_TEST(test_backoff_schedule)
{
    unsigned        n;
    uint64_t        lo, hi;
    static const uint64_t  base[] = {
        0, 1000, 5000, 25000, 125000, 625000, 3125000, 3600000, 3600000,
        3600000
    };

    for (n = 1; n < sizeof(base) / sizeof(base[0]); n++) {
        lo = ngx_http_session_webhook_backoff(n, 0);
        hi = ngx_http_session_webhook_backoff(n, UINT32_MAX);

        ck_assert_uint_eq(lo, base[n] - base[n] / 10);
        ck_assert_uint_eq(hi, base[n] + base[n] / 10);
    }

    /* far past the cap, no overflow */
    ck_assert_uint_eq(ngx_http_session_webhook_backoff(1000, 0), 3240000);
    ck_assert_uint_eq(ngx_http_session_webhook_backoff(4000000000u,
                                                       UINT32_MAX), 3960000);
}
END_TEST


START_TEST(test_backoff_jitter)
{
    unsigned  n, i, below, above;
    uint32_t  x;
    uint64_t  d, lo, hi, mid;

    x = 12345;

    for (n = 1; n <= 8; n++) {
        /* test_backoff_schedule pins lo and hi to 0.9 and 1.1 */
        lo = ngx_http_session_webhook_backoff(n, 0);
        hi = ngx_http_session_webhook_backoff(n, UINT32_MAX);
        mid = (lo + hi) / 2;
        below = above = 0;

        for (i = 0; i < 10000; i++) {
            /* xorshift32: spread over the whole range */
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;

            d = ngx_http_session_webhook_backoff(n, x);

            ck_assert_uint_ge(d, lo);
            ck_assert_uint_le(d, hi);

            below += d < mid;
            above += d > mid;
        }

        /* both sides are used */
        ck_assert_uint_gt(below, 4000);
        ck_assert_uint_gt(above, 4000);
    }
}
END_TEST


START_TEST(test_delivered)
{
    unsigned  s;

    for (s = 0; s < 1000; s++) {
        ck_assert_int_eq(ngx_http_session_webhook_delivered(s),
                         s >= 200 && s < 300);
    }
}
END_TEST


Suite *
make_delivery_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("delivery");

    tc = tcase_create("key");
    tcase_add_test(tc, test_key_decode);
    tcase_add_test(tc, test_key_malformed);
    suite_add_tcase(s, tc);

    tc = tcase_create("sign");
    tcase_add_test(tc, test_sign_vector);
    tcase_add_test(tc, test_sign_reference);
    suite_add_tcase(s, tc);

    tc = tcase_create("backoff");
    tcase_add_test(tc, test_backoff_schedule);
    tcase_add_test(tc, test_backoff_jitter);
    tcase_add_test(tc, test_delivered);
    suite_add_tcase(s, tc);

    return s;
}
