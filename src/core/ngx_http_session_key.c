/*
 * API key syntax, normalisation and hashing.
 */

#include <string.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>

#include "ngx_http_session_key.h"


static int ngx_http_session_is_hex(unsigned char c);


int
ngx_http_session_prefix_valid(const unsigned char *prefix, size_t len)
{
    size_t  i;

    if (len != NGX_HTTP_SESSION_KEY_PREFIX_LEN) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!((prefix[i] >= 'a' && prefix[i] <= 'z')
              || (prefix[i] >= 'A' && prefix[i] <= 'Z')))
        {
            return 0;
        }
    }

    return 1;
}


int
ngx_http_session_key_parse_header(const unsigned char *value, size_t len,
    const unsigned char *prefix, const unsigned char **token)
{
    size_t                i;
    static const char     scheme[] = "bearer";

    if (len < sizeof(scheme)) {
        return NGX_HTTP_SESSION_KEY_MALFORMED;
    }

    for (i = 0; i < sizeof(scheme) - 1; i++) {
        if ((value[i] | 0x20) != (unsigned char) scheme[i]) {
            return NGX_HTTP_SESSION_KEY_MALFORMED;
        }
    }

    if (value[i] != ' ') {
        return NGX_HTTP_SESSION_KEY_MALFORMED;
    }

    while (i < len && value[i] == ' ') {
        i++;
    }

    if (ngx_http_session_key_check(value + i, len - i, prefix)
        != NGX_HTTP_SESSION_KEY_OK)
    {
        return NGX_HTTP_SESSION_KEY_MALFORMED;
    }

    *token = value + i;

    return NGX_HTTP_SESSION_KEY_OK;
}


int
ngx_http_session_key_check(const unsigned char *token, size_t len,
    const unsigned char *prefix)
{
    size_t  i;

    if (len != NGX_HTTP_SESSION_KEY_LEN) {
        return NGX_HTTP_SESSION_KEY_MALFORMED;
    }

    if (memcmp(token, prefix, NGX_HTTP_SESSION_KEY_PREFIX_LEN) != 0
        || token[NGX_HTTP_SESSION_KEY_PREFIX_LEN] != '_')
    {
        return NGX_HTTP_SESSION_KEY_MALFORMED;
    }

    for (i = NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1; i < len; i++) {
        if (!ngx_http_session_is_hex(token[i])) {
            return NGX_HTTP_SESSION_KEY_MALFORMED;
        }
    }

    return NGX_HTTP_SESSION_KEY_OK;
}


int
ngx_http_session_key_hash(const unsigned char *token, unsigned char *hash)
{
    int                  ok;
    size_t               i;
    unsigned int         n;
    unsigned char        c, lower[NGX_HTTP_SESSION_KEY_LEN];
    static EVP_MD_CTX   *ctx;
    static const EVP_MD *md;

    /*
     * The digest and its context are made once per process and reused:
     * OpenSSL 3 looks the algorithm up in its providers on every
     * EVP_sha256()-style call, which costs more than hashing 37 bytes.
     */

    if (md == NULL) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
        md = EVP_MD_fetch(NULL, "SHA256", NULL);
#else
        md = EVP_sha256();
#endif
        if (md == NULL) {
            return -1;
        }
    }

    if (ctx == NULL) {
        ctx = EVP_MD_CTX_new();
        if (ctx == NULL) {
            return -1;
        }
    }

    for (i = 0; i < NGX_HTTP_SESSION_KEY_LEN; i++) {
        c = token[i];
        lower[i] = (c >= 'A' && c <= 'Z') ? (unsigned char) (c | 0x20) : c;
    }

    n = 0;

    ok = EVP_DigestInit_ex(ctx, md, NULL) == 1
         && EVP_DigestUpdate(ctx, lower, NGX_HTTP_SESSION_KEY_LEN) == 1
         && EVP_DigestFinal_ex(ctx, hash, &n) == 1
         && n == NGX_HTTP_SESSION_KEY_HASH_LEN;

    OPENSSL_cleanse(lower, sizeof(lower));

    return ok ? 0 : -1;
}


void
ngx_http_session_hex(const unsigned char *src, size_t len, unsigned char *dst)
{
    size_t               i;
    static const char    digits[] = "0123456789abcdef";

    for (i = 0; i < len; i++) {
        *dst++ = (unsigned char) digits[src[i] >> 4];
        *dst++ = (unsigned char) digits[src[i] & 0xf];
    }
}


size_t
ngx_http_session_key_redact(unsigned char *buf, size_t len,
    const unsigned char *prefix)
{
    size_t         i, j, n, run, found;
    int            ours;
    unsigned char  c;

    found = 0;

    if (len <= NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1) {
        return 0;
    }

    for (i = 0; i + NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1 < len; i++) {

        /* any four letters and "_": keys of another prefix are keys too */

        ours = 1;

        for (n = 0; n < NGX_HTTP_SESSION_KEY_PREFIX_LEN; n++) {
            c = (unsigned char) (buf[i + n] | 0x20);

            if (c < 'a' || c > 'z') {
                break;
            }

            if (c != (unsigned char) (prefix[n] | 0x20)) {
                ours = 0;
            }
        }

        if (n != NGX_HTTP_SESSION_KEY_PREFIX_LEN
            || buf[i + NGX_HTTP_SESSION_KEY_PREFIX_LEN] != '_')
        {
            continue;
        }

        j = i + NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1;

        for (run = 0; j + run < len && ngx_http_session_is_hex(buf[j + run]);
             run++)
        {
            /* void */
        }

        /*
         * After the configured prefix any hex is hidden; after another
         * prefix only a run long enough to be (most of) a key.
         */

        if (run == 0 || (!ours && run < NGX_HTTP_SESSION_KEY_HEX_LEN / 2)) {
            continue;
        }

        memset(buf + j, '*', run);

        found++;
        i = j + run - 1;
    }

    return found;
}


uint32_t
ngx_http_session_key_tree_key(const unsigned char *hash)
{
    return ((uint32_t) hash[0] << 24) | ((uint32_t) hash[1] << 16)
           | ((uint32_t) hash[2] << 8) | (uint32_t) hash[3];
}


int
ngx_http_session_equal(const unsigned char *a, const unsigned char *b,
    size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}


static int
ngx_http_session_is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
           || (c >= 'A' && c <= 'F');
}
