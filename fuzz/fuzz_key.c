/*
 * libFuzzer: the Authorization header (ngx_http_session_key_parse_header)
 * and, for what it accepts, the key's normal form and hash.
 *
 * The first byte picks the prefix the server expects: "sess" or "abcd".
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_session_key.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                i;
    unsigned char        *copy;
    const unsigned char  *prefix, *token;
    unsigned char         lower[NGX_HTTP_SESSION_KEY_LEN];
    unsigned char         hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    unsigned char         again[NGX_HTTP_SESSION_KEY_HASH_LEN];

    if (size == 0) {
        return 0;
    }

    prefix = (const unsigned char *) ((data[0] & 1) ? "abcd" : "sess");

    /* an exact copy: a read past the end is an ASan report */

    size--;
    copy = malloc(size ? size : 1);
    if (copy == NULL) {
        return 0;
    }

    memcpy(copy, data + 1, size);

    token = NULL;

    if (ngx_http_session_key_parse_header(copy, size, prefix, &token)
        == NGX_HTTP_SESSION_KEY_OK)
    {
        /* the token lies within the value and is a well-formed key */

        if (token < copy
            || token + NGX_HTTP_SESSION_KEY_LEN > copy + size
            || ngx_http_session_key_check(token, NGX_HTTP_SESSION_KEY_LEN,
                                          prefix)
               != NGX_HTTP_SESSION_KEY_OK)
        {
            abort();
        }

        ngx_http_session_key_lower(token, lower);

        for (i = NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1;
             i < NGX_HTTP_SESSION_KEY_LEN;
             i++)
        {
            if (lower[i] >= 'A' && lower[i] <= 'F') {
                abort();
            }
        }

        /* either case hashes the same */

        if (ngx_http_session_key_hash(token, hash) == 0
            && ngx_http_session_key_hash(lower, again) == 0
            && memcmp(hash, again, sizeof(hash)) != 0)
        {
            abort();
        }
    }

    (void) ngx_http_session_key_check(copy, size, prefix);
    (void) ngx_http_session_prefix_valid(copy, size);

    free(copy);

    return 0;
}
