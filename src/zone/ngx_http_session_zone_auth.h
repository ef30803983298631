/*
 * The auth cache in session_limit_zone: the answers of key lookups for
 * session_auth_cache_ttl, and the keys the database found valid within
 * the last hour (docs/api.md §10.12), for every worker of the node.
 */

#ifndef _NGX_HTTP_SESSION_ZONE_AUTH_H_INCLUDED_
#define _NGX_HTTP_SESSION_ZONE_AUTH_H_INCLUDED_


#include "ngx_http_session_common.h"


/* the cached outcome of a key lookup */
#define NGX_HTTP_SESSION_AUTH_VALID      0
#define NGX_HTTP_SESSION_AUTH_INVALID    1
#define NGX_HTTP_SESSION_AUTH_SUSPENDED  2

/*
 * ngx_http_session_auth_cache_get() only: a miss, but the database found
 * the key valid within NGX_HTTP_SESSION_AUTH_SEEN_TIME (docs/api.md §10)
 */
#define NGX_HTTP_SESSION_AUTH_SEEN       3

/* how long a key stays "seen valid" after its cached answer ends: 1 h */
#define NGX_HTTP_SESSION_AUTH_SEEN_TIME  3600000


/*
 * NGX_HTTP_SESSION_AUTH_* on a fresh hit, NGX_HTTP_SESSION_AUTH_SEEN or
 * NGX_DECLINED on a miss; in every case *generation is what
 * ngx_http_session_auth_cache_put() needs.  On a hit that is
 * NGX_HTTP_SESSION_AUTH_VALID, and when take is not NULL, it also does
 * what ngx_http_session_rate_take() does, under the same turn of the
 * mutex; take->rc stays NGX_DECLINED otherwise.
 */
ngx_int_t ngx_http_session_auth_cache_get(ngx_shm_zone_t *zone,
    ngx_http_session_principal_t *p, ngx_uint_t *generation,
    ngx_http_session_take_t *take);

/*
 * Stores an outcome unless an invalidation arrived since generation was
 * read: the answer from the database may already be stale then.  Whatever
 * the generation, and with ttl 0 too, a valid outcome marks the key seen
 * valid until ttl and then NGX_HTTP_SESSION_AUTH_SEEN_TIME have passed,
 * and an unknown one (deleted) unmarks it.
 */
void ngx_http_session_auth_cache_put(ngx_shm_zone_t *zone,
    ngx_http_session_principal_t *p, ngx_uint_t status, ngx_msec_t ttl,
    ngx_uint_t generation);

/* forgets the key's cached answer, and that it was seen valid */
void ngx_http_session_auth_cache_drop_key(ngx_shm_zone_t *zone,
    u_char *hash);
/*
 * These two keep the keys seen valid: such a key is looked up again
 * whenever it has no cached answer, so a change missed is found then.
 */
void ngx_http_session_auth_cache_drop_account(ngx_shm_zone_t *zone,
    u_char *account_id);
void ngx_http_session_auth_cache_flush(ngx_shm_zone_t *zone);


#endif /* _NGX_HTTP_SESSION_ZONE_AUTH_H_INCLUDED_ */
