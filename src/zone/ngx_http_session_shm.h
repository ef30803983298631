/*
 * The session_limit_zone shared memory: the auth cache (and the rate
 * counters), visible to every worker of the node.
 */

#ifndef _NGX_HTTP_SESSION_SHM_H_INCLUDED_
#define _NGX_HTTP_SESSION_SHM_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_stats.h"


#define NGX_HTTP_SESSION_ZONE_MIN_SIZE  (8 * ngx_pagesize)

/* the cached outcome of a key lookup */
#define NGX_HTTP_SESSION_AUTH_VALID      0
#define NGX_HTTP_SESSION_AUTH_INVALID    1
#define NGX_HTTP_SESSION_AUTH_SUSPENDED  2

/*
 * ngx_http_session_auth_cache_get() only: a miss, but the database found
 * the key valid within NGX_HTTP_SESSION_AUTH_SEEN_TIME (API.md section 10)
 */
#define NGX_HTTP_SESSION_AUTH_SEEN       3

/* how long a key stays "seen valid" after its cached answer ends: 1 h */
#define NGX_HTTP_SESSION_AUTH_SEEN_TIME  3600000


ngx_shm_zone_t *ngx_http_session_shm_add(ngx_conf_t *cf, ngx_str_t *name,
    size_t size);

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

/*
 * Counts one request of class take->cls against take->limit in the window
 * of take->now, checking and incrementing in one locked step; sets and
 * returns take->rc: NGX_OK: admitted; NGX_BUSY: over the limit, not
 * counted; NGX_ERROR: no room even after eviction.  take->remaining is
 * what is left after this request.
 */
ngx_int_t ngx_http_session_rate_take(ngx_shm_zone_t *zone, u_char *hash,
    ngx_http_session_take_t *take);

/* what ngx_http_session_auth_fail() does with an address's count */
#define NGX_HTTP_SESSION_FAIL_CHECK    0    /* is it at the limit? */
#define NGX_HTTP_SESSION_FAIL_RESERVE  1    /* check, and count one */
#define NGX_HTTP_SESSION_FAIL_ADD      2    /* count one, whatever it is */
#define NGX_HTTP_SESSION_FAIL_REFUND   3    /* give a reserved one back */

typedef struct {
    /* the client address, as ngx_http_session_auth writes it */
    u_char                      key[NGX_HTTP_SESSION_KEY_HASH_LEN];
    ngx_uint_t                  op;
    uint32_t                    limit;
    /* in: the worker's minute; out: the minute counted in */
    uint32_t                    minute;
} ngx_http_session_fail_t;

/*
 * Failed key lookups of one client address in the current minute
 * (session_auth_fail_limit).  The window moves forward only, as for rate
 * counters.  NGX_BUSY: CHECK or RESERVE found the address at its limit;
 * NGX_OK otherwise, also when the zone has no room to count (the lookup
 * then goes ahead).
 */
ngx_int_t ngx_http_session_auth_fail(ngx_shm_zone_t *zone,
    ngx_http_session_fail_t *f);

/* how many keys have counters now */
ngx_uint_t ngx_http_session_rate_keys(ngx_shm_zone_t *zone);


/* what session_status tells of the zone, read under its mutex */
typedef struct {
    size_t                      size;
    /* bytes in whole free pages */
    size_t                      free;
    ngx_uint_t                  auth_entries;
    /* keys seen valid within the hour, and those forgotten for room */
    ngx_uint_t                  seen;
    ngx_uint_t                  seen_forgotten;
    /* keys with rate counters */
    ngx_uint_t                  keys;
    /* counters evicted to make room since the zone began */
    ngx_uint_t                  evictions;
} ngx_http_session_zone_figures_t;

ngx_http_session_stats_t *ngx_http_session_shm_stats(ngx_shm_zone_t *zone);
ngx_http_session_gauges_t *ngx_http_session_shm_gauges(ngx_shm_zone_t *zone);
void ngx_http_session_shm_figures(ngx_shm_zone_t *zone,
    ngx_http_session_zone_figures_t *f);


#endif /* _NGX_HTTP_SESSION_SHM_H_INCLUDED_ */
