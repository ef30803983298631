/*
 * API key syntax, normalisation and hashing.
 */

#include <string.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>

#include "ngx_http_session_key.h"


static EVP_MD_CTX *ngx_http_session_sha256_start(EVP_MD_CTX *ctx);


/* a hex digit's lower-case form; 0 for every byte that is not one */
static const unsigned char  ngx_http_session_hex_lower[256] = {
    ['0'] = '0', ['1'] = '1', ['2'] = '2', ['3'] = '3', ['4'] = '4',
    ['5'] = '5', ['6'] = '6', ['7'] = '7', ['8'] = '8', ['9'] = '9',
    ['a'] = 'a', ['b'] = 'b', ['c'] = 'c', ['d'] = 'd', ['e'] = 'e',
    ['f'] = 'f',
    ['A'] = 'a', ['B'] = 'b', ['C'] = 'c', ['D'] = 'd', ['E'] = 'e',
    ['F'] = 'f'
};


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


/* a byte repeated in every lane of a 64-bit word */
#define ngx_http_session_lanes(c)  ((uint64_t) (c) * 0x0101010101010101ULL)
#define NGX_HTTP_SESSION_HIGH      ngx_http_session_lanes(0x80)


int
ngx_http_session_key_check(const unsigned char *token, size_t len,
    const unsigned char *prefix)
{
    size_t    i;
    uint64_t  w, l, digit, letter, bad;

    if (len != NGX_HTTP_SESSION_KEY_LEN) {
        return NGX_HTTP_SESSION_KEY_MALFORMED;
    }

    if (memcmp(token, prefix, NGX_HTTP_SESSION_KEY_PREFIX_LEN) != 0
        || token[NGX_HTTP_SESSION_KEY_PREFIX_LEN] != '_')
    {
        return NGX_HTTP_SESSION_KEY_MALFORMED;
    }

    /*
     * The 32 hex digits eight at a time, in the lanes of a word.  For a
     * byte x below 0x80, x + (0x80 - lo) has its high bit set exactly when
     * x >= lo, and x + (0x7f - hi) has it clear exactly when x <= hi; no
     * lane carries into the next.  A lane is good when it is a digit, or a
     * letter a-f once bit 0x20 is set; bad collects the others' high bits.
     */

    bad = 0;

    for (i = NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1;
         i < NGX_HTTP_SESSION_KEY_LEN;
         i += sizeof(uint64_t))
    {
        memcpy(&w, token + i, sizeof(uint64_t));

        bad |= w & NGX_HTTP_SESSION_HIGH;
        w &= ~NGX_HTTP_SESSION_HIGH;

        digit = (w + ngx_http_session_lanes(0x80 - '0'))
                & ~(w + ngx_http_session_lanes(0x7f - '9'));

        l = w | ngx_http_session_lanes(0x20);
        letter = (l + ngx_http_session_lanes(0x80 - 'a'))
                 & ~(l + ngx_http_session_lanes(0x7f - 'f'));

        bad |= ~(digit | letter) & NGX_HTTP_SESSION_HIGH;
    }

    return bad ? NGX_HTTP_SESSION_KEY_MALFORMED : NGX_HTTP_SESSION_KEY_OK;
}


void
ngx_http_session_key_lower(const unsigned char *token, unsigned char *lower)
{
    size_t  i;

    for (i = 0; i < NGX_HTTP_SESSION_KEY_PREFIX_LEN; i++) {
        lower[i] = (unsigned char) (token[i] | 0x20);
    }

    lower[i] = '_';

    for (i++; i < NGX_HTTP_SESSION_KEY_LEN; i++) {
        lower[i] = ngx_http_session_hex_lower[token[i]];
    }
}


/*
 * The digest and its context are made once per process and reused:
 * OpenSSL 3 looks the algorithm up in its providers on every
 * EVP_sha256()-style call, which costs more than hashing 37 bytes.  The
 * process is single-threaded and no digest is nested in another, so one
 * context serves every SHA-256 of the module and of sessionctl.
 */

EVP_MD_CTX *
ngx_http_session_sha256_init(void)
{
    static EVP_MD_CTX   *ctx;

    if (ctx == NULL) {
        ctx = EVP_MD_CTX_new();
        if (ctx == NULL) {
            return NULL;
        }
    }

    return ngx_http_session_sha256_start(ctx);
}


/*
 * A digest of its own, for one that spans turns of the event loop (a
 * streamed upload): the process's context may serve others meanwhile
 */

EVP_MD_CTX *
ngx_http_session_sha256_new(void)
{
    EVP_MD_CTX  *ctx;

    ctx = EVP_MD_CTX_new();
    if (ctx == NULL) {
        return NULL;
    }

    if (ngx_http_session_sha256_start(ctx) == NULL) {
        EVP_MD_CTX_free(ctx);
        return NULL;
    }

    return ctx;
}


static EVP_MD_CTX *
ngx_http_session_sha256_start(EVP_MD_CTX *ctx)
{
    static const EVP_MD  *md;

    if (md == NULL) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
        md = EVP_MD_fetch(NULL, "SHA256", NULL);
#else
        md = EVP_sha256();
#endif
        if (md == NULL) {
            return NULL;
        }
    }

    if (EVP_DigestInit_ex(ctx, md, NULL) != 1) {
        return NULL;
    }

    return ctx;
}


int
ngx_http_session_key_hash(const unsigned char *token, unsigned char *hash)
{
    int             ok;
    size_t          i;
    unsigned int    n;
    unsigned char   c, lower[NGX_HTTP_SESSION_KEY_LEN];
    EVP_MD_CTX     *ctx;

    ctx = ngx_http_session_sha256_init();
    if (ctx == NULL) {
        return -1;
    }

    for (i = 0; i < NGX_HTTP_SESSION_KEY_LEN; i++) {
        c = token[i];
        lower[i] = (c >= 'A' && c <= 'Z') ? (unsigned char) (c | 0x20) : c;
    }

    n = 0;

    ok = EVP_DigestUpdate(ctx, lower, NGX_HTTP_SESSION_KEY_LEN) == 1
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
ngx_http_session_is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
           || (c >= 'A' && c <= 'F');
}
