/*
 * Webhook signature, retry schedule and verdict (Standard Webhooks).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ngx_http_session_delivery.h"


static int ngx_http_session_delivery_b64(unsigned char c);


int
ngx_http_session_webhook_key(const unsigned char *secret, size_t len,
    unsigned char *key)
{
    int           v;
    size_t        i, n, pad, prefix;
    unsigned int  acc, bits;

    prefix = sizeof(NGX_HTTP_SESSION_WEBHOOK_SECRET_PREFIX) - 1;

    if (len >= prefix
        && memcmp(secret, NGX_HTTP_SESSION_WEBHOOK_SECRET_PREFIX, prefix)
           == 0)
    {
        secret += prefix;
        len -= prefix;
    }

    /* at most two '=' at the end, and nothing after them */

    pad = 0;

    while (len > 0 && secret[len - 1] == '=' && pad < 2) {
        len--;
        pad++;
    }

    if (len == 0 || (pad && (len + pad) % 4 != 0) || len % 4 == 1) {
        return -1;
    }

    n = 0;
    acc = 0;
    bits = 0;

    for (i = 0; i < len; i++) {
        v = ngx_http_session_delivery_b64(secret[i]);
        if (v < 0) {
            return -1;
        }

        acc = (acc << 6) | (unsigned int) v;
        bits += 6;

        if (bits >= 8) {
            bits -= 8;

            if (n == NGX_HTTP_SESSION_WEBHOOK_KEY_MAX) {
                return -1;
            }

            key[n++] = (unsigned char) (acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }

    /* the bits left over must be zero: one encoding per key */

    if (acc != 0) {
        return -1;
    }

    return (int) n;
}


int
ngx_http_session_webhook_sign(const unsigned char *key, size_t key_len,
    const unsigned char *id, size_t id_len, time_t timestamp,
    const unsigned char *body, size_t body_len, unsigned char *out)
{
    int             n;
    char            ts[32];
    size_t          len;
    unsigned int    mac_len;
    unsigned char  *msg, *p, mac[EVP_MAX_MD_SIZE], b64[64];

    n = snprintf(ts, sizeof(ts), ".%lld.", (long long) timestamp);
    if (n <= 0 || (size_t) n >= sizeof(ts)) {
        return -1;
    }

    /* HMAC() in one go: OpenSSL 3 deprecates HMAC_CTX */

    len = id_len + (size_t) n + body_len;

    msg = malloc(len ? len : 1);
    if (msg == NULL) {
        return -1;
    }

    p = msg;
    memcpy(p, id, id_len);
    p += id_len;
    memcpy(p, ts, (size_t) n);
    p += n;
    if (body_len) {
        memcpy(p, body, body_len);
    }

    mac_len = 0;

    p = HMAC(EVP_sha256(), key, (int) key_len, msg, len, mac, &mac_len);

    free(msg);

    if (p == NULL || mac_len != 32) {
        return -1;
    }

    if (EVP_EncodeBlock(b64, mac, 32) != 44) {
        return -1;
    }

    memcpy(out, "v1,", 3);
    memcpy(out + 3, b64, 44);

    return 0;
}


uint64_t
ngx_http_session_webhook_backoff(unsigned attempts, uint32_t rnd)
{
    unsigned  i;
    uint64_t  delay, span;

    delay = NGX_HTTP_SESSION_WEBHOOK_BACKOFF_BASE;

    for (i = 1; i < attempts; i++) {
        delay *= 5;

        if (delay >= NGX_HTTP_SESSION_WEBHOOK_BACKOFF_MAX) {
            delay = NGX_HTTP_SESSION_WEBHOOK_BACKOFF_MAX;
            break;
        }
    }

    /* delay * (1 - j) ... delay * (1 + j), both ends included */

    span = delay * 2 * NGX_HTTP_SESSION_WEBHOOK_JITTER / 100;

    return delay - span / 2 + (span * rnd) / UINT32_MAX;
}


int
ngx_http_session_webhook_delivered(unsigned status)
{
    return status >= 200 && status <= 299;
}


static int
ngx_http_session_delivery_b64(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }

    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }

    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }

    if (c == '+') {
        return 62;
    }

    if (c == '/') {
        return 63;
    }

    return -1;
}
