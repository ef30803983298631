/*
 * Idempotency-Key syntax and the request fingerprint's path (docs/api.md
 * section 6).
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_IDEMKEY_H_INCLUDED_
#define _NGX_HTTP_SESSION_IDEMKEY_H_INCLUDED_


#include <stddef.h>


#define NGX_HTTP_SESSION_IDEM_KEY_MAX  255


/* 1 when the key is 1 to 255 visible ASCII characters (0x21 to 0x7e) */
int ngx_http_session_idem_key_valid(const unsigned char *key, size_t len);


#endif /* _NGX_HTTP_SESSION_IDEMKEY_H_INCLUDED_ */
