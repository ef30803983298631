/*
 * Webhook delivery, the parts without I/O: the Standard Webhooks
 * signature (docs/api.md §7 and §10), the retry schedule, and the
 * status line's verdict.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_DELIVERY_H_INCLUDED_
#define _NGX_HTTP_SESSION_DELIVERY_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>
#include <time.h>


/* the secret's prefix; what follows is the base64 of the HMAC key */
#define NGX_HTTP_SESSION_WEBHOOK_SECRET_PREFIX  "whsec_"

/* the longest HMAC key accepted (secrets hold 32 bytes) */
#define NGX_HTTP_SESSION_WEBHOOK_KEY_MAX        128

/* "v1," and the base64 of 32 bytes */
#define NGX_HTTP_SESSION_WEBHOOK_SIG_LEN        (3 + 44)

/* the retry schedule, milliseconds: 1 s x 5^(n-1), at most an hour */
#define NGX_HTTP_SESSION_WEBHOOK_BACKOFF_BASE   1000
#define NGX_HTTP_SESSION_WEBHOOK_BACKOFF_MAX    3600000
/* the jitter, in percent either side */
#define NGX_HTTP_SESSION_WEBHOOK_JITTER         10


/*
 * The HMAC key of a secret "whsec_<base64>" (the prefix is optional, as
 * Standard Webhooks allows).  Returns the key's length, or -1 when the
 * base64 is malformed, empty or longer than
 * NGX_HTTP_SESSION_WEBHOOK_KEY_MAX bytes decoded.
 */
int ngx_http_session_webhook_key(const unsigned char *secret, size_t len,
    unsigned char *key);

/*
 * Writes "v1,<base64 of HMAC-SHA256(key, id "." timestamp "." body)>",
 * exactly NGX_HTTP_SESSION_WEBHOOK_SIG_LEN bytes, no NUL.  Returns 0, or
 * -1 if OpenSSL fails.
 */
int ngx_http_session_webhook_sign(const unsigned char *key, size_t key_len,
    const unsigned char *id, size_t id_len, time_t timestamp,
    const unsigned char *body, size_t body_len, unsigned char *out);

/*
 * The wait before the next attempt after "attempts" attempts failed
 * (attempts >= 1: the n-th retry follows the n-th attempt), in
 * milliseconds: 1 s x 5^(n-1) capped at an hour, then scaled by a factor
 * of 0.9 ... 1.1 chosen by rnd (uniform over 0 ... UINT32_MAX).
 */
uint64_t ngx_http_session_webhook_backoff(unsigned attempts, uint32_t rnd);

/* 1 when a status code means the event is delivered: any 2xx */
int ngx_http_session_webhook_delivered(unsigned status);


#endif /* _NGX_HTTP_SESSION_DELIVERY_H_INCLUDED_ */
