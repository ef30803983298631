/*
 * API key syntax, normalisation and hashing.
 *
 * Pure C with no nginx types, shared by the module and sessionctl, and
 * unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_KEY_H_INCLUDED_
#define _NGX_HTTP_SESSION_KEY_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>


#define NGX_HTTP_SESSION_KEY_PREFIX_LEN  4
#define NGX_HTTP_SESSION_KEY_HEX_LEN     32
/* "<prefix>_<32 hex>" */
#define NGX_HTTP_SESSION_KEY_LEN                                              \
    (NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1 + NGX_HTTP_SESSION_KEY_HEX_LEN)
#define NGX_HTTP_SESSION_KEY_HASH_LEN    32
#define NGX_HTTP_SESSION_KEY_HINT_LEN    4


/* the result of checking an Authorization header value */
#define NGX_HTTP_SESSION_KEY_OK          0
#define NGX_HTTP_SESSION_KEY_MALFORMED   1


int ngx_http_session_prefix_valid(const unsigned char *prefix, size_t len);

/*
 * Checks "Bearer <token>" (scheme case-insensitive, one or more spaces)
 * and that the token is "<prefix>_<32 hex>" with the prefix compared
 * case-sensitively.  On success *token points into value.
 */
int ngx_http_session_key_parse_header(const unsigned char *value, size_t len,
    const unsigned char *prefix, const unsigned char **token);

int ngx_http_session_key_check(const unsigned char *token, size_t len,
    const unsigned char *prefix);

/*
 * The normalised (lower-case) form of a token that
 * ngx_http_session_key_check() accepted, NGX_HTTP_SESSION_KEY_LEN bytes.
 */
void ngx_http_session_key_lower(const unsigned char *token,
    unsigned char *lower);

/* the process's SHA-256 context, ready for a new digest; NULL on failure */
EVP_MD_CTX *ngx_http_session_sha256_init(void);

/* a SHA-256 context of the caller's, ready; EVP_MD_CTX_free() it */
EVP_MD_CTX *ngx_http_session_sha256_new(void);

/*
 * SHA-256 of the lower-case form of a well-formed key of
 * NGX_HTTP_SESSION_KEY_LEN bytes; the key's hex digits may be in either
 * case and hash the same.
 */
int ngx_http_session_key_hash(const unsigned char *token,
    unsigned char *hash);

/* whether c is a hex digit, either case */
int ngx_http_session_is_hex(unsigned char c);

/* lower-case hex of len bytes into dst (2 * len bytes, no terminator) */
void ngx_http_session_hex(const unsigned char *src, size_t len,
    unsigned char *dst);

/*
 * Overwrites with '*' the hex digits after every "<prefix>_" (prefix
 * compared case-insensitively), and runs of 16 or more hex digits after
 * any other four letters and "_", so that no key, whole or mistyped, of
 * this or another prefix survives in a log line.  Returns how many keys
 * were hidden.
 */
size_t ngx_http_session_key_redact(unsigned char *buf, size_t len,
    const unsigned char *prefix);

/* the 32-bit tree key of a key hash: its first four bytes */
uint32_t ngx_http_session_key_tree_key(const unsigned char *hash);

/*
 * 1 when the two buffers are equal; time depends on len only.  Inline:
 * with a constant len the loops unroll to a few loads.
 */
static inline int
ngx_http_session_equal(const unsigned char *a, const unsigned char *b,
    size_t len)
{
    size_t    i;
    uint64_t  acc, wa, wb;

    /*
     * Every byte is read and folded into acc whatever the others hold: no
     * branch depends on the contents, eight bytes at a time.
     */

    acc = 0;

    for (i = 0; i + sizeof(uint64_t) <= len; i += sizeof(uint64_t)) {
        memcpy(&wa, a + i, sizeof(uint64_t));
        memcpy(&wb, b + i, sizeof(uint64_t));
        acc |= wa ^ wb;
    }

    for ( /* void */ ; i < len; i++) {
        acc |= (uint64_t) (a[i] ^ b[i]);
    }

    return acc == 0;
}


#endif /* _NGX_HTTP_SESSION_KEY_H_INCLUDED_ */
