/*
 * session_limit_zone: the shared memory of the auth cache, the rate
 * counters and the failed lookups, visible to every worker of the node
 * (and, through a binary upgrade, to the next binary's: handover.c).
 */

#ifndef _NGX_HTTP_SESSION_ZONE_H_INCLUDED_
#define _NGX_HTTP_SESSION_ZONE_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_stats.h"


#define NGX_HTTP_SESSION_ZONE_MIN_SIZE  (8 * ngx_pagesize)


ngx_shm_zone_t *ngx_http_session_zone_add(ngx_conf_t *cf, ngx_str_t *name,
    size_t size);


/* what session_status tells of the zone, read under its mutex */
typedef struct {
    size_t                      size;
    /* bytes in whole free pages */
    size_t                      free;
    ngx_uint_t                  auth_entries;
    /* keys seen valid within the hour, and those forgotten for room */
    ngx_uint_t                  seen;
    ngx_uint_t                  seen_forgotten;
    /* keys with rate counters (or leases) */
    ngx_uint_t                  keys;
    /* counters evicted to make room since the zone began */
    ngx_uint_t                  evictions;
    /* session_limit_scope cluster: leased budget not admitted yet */
    ngx_uint_t                  lease_held;
} ngx_http_session_zone_figures_t;

ngx_http_session_stats_t *ngx_http_session_zone_stats(ngx_shm_zone_t *zone);
ngx_http_session_gauges_t *ngx_http_session_zone_gauges(ngx_shm_zone_t *zone);
void ngx_http_session_zone_figures(ngx_shm_zone_t *zone,
    ngx_http_session_zone_figures_t *f);



#endif /* _NGX_HTTP_SESSION_ZONE_H_INCLUDED_ */
