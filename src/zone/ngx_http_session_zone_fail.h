/*
 * Failed key lookups per client address and minute, in session_limit_zone
 * (session_auth_fail_limit, docs/api.md §10.12).
 */

#ifndef _NGX_HTTP_SESSION_ZONE_FAIL_H_INCLUDED_
#define _NGX_HTTP_SESSION_ZONE_FAIL_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * What ngx_http_session_auth_fail() does with an address's counts: its
 * failures of the minute, and its lookups under way (each counted in
 * advance, until it is known whether it failed)
 */
#define NGX_HTTP_SESSION_FAIL_CHECK    0    /* is it at the limit? */
#define NGX_HTTP_SESSION_FAIL_RESERVE  1    /* check, and start a lookup */
#define NGX_HTTP_SESSION_FAIL_COUNT    2    /* check, and count a failure */
#define NGX_HTTP_SESSION_FAIL_ADD      3    /* count a failure, at any count */
#define NGX_HTTP_SESSION_FAIL_CONFIRM  4    /* a lookup under way failed */
#define NGX_HTTP_SESSION_FAIL_REFUND   5    /* a lookup under way did not */

typedef struct {
    /* the client address, as ngx_http_session_auth writes it */
    u_char                      key[NGX_HTTP_SESSION_KEY_HASH_LEN];
    ngx_uint_t                  op;
    uint32_t                    limit;
    /* in: the worker's minute; out: the minute counted in */
    uint32_t                    minute;
    /* CONFIRM, REFUND: the minute the lookup was counted in */
    uint32_t                    since;
} ngx_http_session_fail_t;

/*
 * Failed key lookups of one client address in the current minute
 * (session_auth_fail_limit).  The window moves forward only, as for rate
 * counters.  NGX_BUSY: CHECK, RESERVE or COUNT found the address's
 * failures at the limit.  NGX_AGAIN: RESERVE found them under it, but its
 * failures and lookups under way together at it: the lookup waits until
 * one of those ends.  NGX_OK otherwise, also when the zone has no room to
 * count (the lookup then goes ahead).
 */
ngx_int_t ngx_http_session_auth_fail(ngx_shm_zone_t *zone,
    ngx_http_session_fail_t *f);


#endif /* _NGX_HTTP_SESSION_ZONE_FAIL_H_INCLUDED_ */
