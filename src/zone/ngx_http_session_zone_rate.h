/*
 * The rate counters in session_limit_zone: one node per key with a
 * counter per class, each for its fixed one-minute window.
 */

#ifndef _NGX_HTTP_SESSION_ZONE_RATE_H_INCLUDED_
#define _NGX_HTTP_SESSION_ZONE_RATE_H_INCLUDED_


#include "ngx_http_session_common.h"


/*
 * Counts one request of class take->cls against take->limit in the window
 * of take->now, checking and incrementing in one locked step; sets and
 * returns take->rc: NGX_OK: admitted; NGX_BUSY: over the limit, not
 * counted; NGX_ERROR: no room even after eviction.  take->remaining is
 * what is left after this request.  With take->cluster, from the node's
 * lease (zone_lease.c), and also NGX_AGAIN: no budget held, the request
 * waits for the lease take->lease.
 */
ngx_int_t ngx_http_session_rate_take(ngx_shm_zone_t *zone, u_char *hash,
    ngx_http_session_take_t *take);

/* how many keys have counters now */
ngx_uint_t ngx_http_session_rate_keys(ngx_shm_zone_t *zone);



#endif /* _NGX_HTTP_SESSION_ZONE_RATE_H_INCLUDED_ */
