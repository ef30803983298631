/*
 * What session_limit_zone holds (the folder's own header): rbtrees keyed
 * by a 32-byte hash, each with its LRU queue, in the slab pool, every
 * access under the pool mutex.  The auth cache's known keys (valid or
 * suspended), its unknown keys (a budget of their own, so that a flood
 * of random keys never pushes a known key out), the keys seen valid
 * within the hour (a budget of their own too), the rate counters (or,
 * with session_limit_scope cluster, the leases), and the count of failed
 * lookups per client address.  Rate counters and leases come first: when
 * the slab is full, unknown keys give way, then known keys, before any
 * counter or lease is evicted.  Keys seen valid give way only to one
 * another: at most a quarter of the zone is theirs, and nothing else
 * evicts them.
 *
 * zone.c makes the zone and keeps the trees; zone_auth.c (the auth cache
 * and the keys seen valid), zone_rate.c (the counters), zone_lease.c (the
 * leases) and zone_fail.c (failed lookups per address) each keep their
 * own trees.
 */

#ifndef _NGX_HTTP_SESSION_ZONE_SHM_H_INCLUDED_
#define _NGX_HTTP_SESSION_ZONE_SHM_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_stats.h"


/*
 * Bump with any change of what the zone holds or of what its contents
 * mean: a binary upgrade (USR2) shares the zone between the old and the
 * new binary only when their layouts are equal (see
 * ngx_http_session_zone_layout() and ngx_http_session_handover.c).
 */
#define NGX_HTTP_SESSION_ZONE_LAYOUT  4


/* what both trees store first */
typedef struct {
    ngx_rbtree_node_t             node;
    ngx_queue_t                   queue;
    u_char                        hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
} ngx_http_session_zone_node_t;


typedef struct {
    ngx_http_session_zone_node_t  sn;
    ngx_msec_t                    expires;
    ngx_uint_t                    status;
    u_char                        project_id[NGX_HTTP_SESSION_UUID_LEN];
    u_char                        account_id[NGX_HTTP_SESSION_UUID_LEN];
    u_char                        key_id[NGX_HTTP_SESSION_UUID_LEN];
    ngx_uint_t                    plan;
    ngx_uint_t                    quota;
} ngx_http_session_auth_node_t;


typedef struct {
    /* epoch minute of the window the count belongs to */
    uint32_t                      minute;
    uint32_t                      count;
} ngx_http_session_counter_t;


/* a key the database does not know: 96 bytes, a 128-byte slab chunk */
typedef struct {
    ngx_http_session_zone_node_t  sn;
    ngx_msec_t                    expires;
} ngx_http_session_neg_node_t;


/*
 * A key the database found valid (docs/decisions.md, (ua)): kept an hour
 * past its cached answer, so that the failures of its client address
 * never refuse it a lookup (docs/api.md §10).  Only a valid answer
 * makes one, so a flood of unknown keys can neither add one nor push one
 * out.  96 bytes, a 128-byte slab chunk.
 */
typedef struct {
    ngx_http_session_zone_node_t  sn;
    ngx_msec_t                    expires;
} ngx_http_session_seen_node_t;


/*
 * failed lookups of one client address in one minute; sn.hash holds the
 * address (ngx_http_session_auth_fail())
 */
typedef struct {
    ngx_http_session_zone_node_t  sn;
    uint32_t                      minute;
    /* failed lookups, and lookups under way, of the minute */
    uint32_t                      count;
    uint32_t                      pending;
} ngx_http_session_fail_node_t;


/* 112 bytes: a 128-byte slab chunk per key, all classes together */
typedef struct {
    ngx_http_session_zone_node_t  sn;
    ngx_http_session_counter_t    counters[NGX_HTTP_SESSION_NCLASSES];
} ngx_http_session_rate_node_t;


/*
 * session_limit_scope cluster: what this node holds of a key's budget in
 * one class and window (zone_lease.c).  The database row of the window
 * has the total leased to all nodes; this is the node's share of it.
 */
typedef struct {
    /* epoch minute of the window */
    uint32_t                      minute;
    /* leased to this node for the window and not admitted yet */
    uint32_t                      held;
    /* the window's total leased to all nodes, as the last answer said */
    uint32_t                      granted;
    /* the nodes that leased in the window, as the last answer said */
    uint32_t                      nodes;
    /* leased ahead for the next window, and that window's total then */
    uint32_t                      next;
    uint32_t                      next_granted;
    /* the next lease's size, from the key's rate on this node */
    uint32_t                      want;
    /* admitted since the last lease came in, and when that was (0: not) */
    uint32_t                      used;
    uint32_t                      last;
    /* the stamp of a lease ahead of need in flight, 0: none */
    uint32_t                      asked;
    /* leased to this node in the window, and its last block */
    uint32_t                      took;
    uint32_t                      block;
    /*
     * the nodes of the window before, or for a key new to the node the
     * worker's guess (decision (qn)), until an answer says this one's
     */
    uint32_t                      nodes_before;
    /*
     * 1: took is what the row says this node was leased in the window (an
     * answer said so), and a lease's answer then counts what the row says
     * beyond it, budget on its way to another worker included (qk)
     */
    uint32_t                      known;
} ngx_http_session_lease_t;


/* 256 bytes: a 256-byte slab chunk per key, all classes together */
typedef struct {
    ngx_http_session_zone_node_t  sn;
    ngx_http_session_lease_t      leases[NGX_HTTP_SESSION_NCLASSES];
} ngx_http_session_lease_node_t;


typedef struct {
    ngx_rbtree_t                  rbtree;
    ngx_rbtree_node_t             sentinel;
    ngx_queue_t                   lru;
    ngx_uint_t                    n;
} ngx_http_session_zone_tree_t;


typedef struct {
    ngx_http_session_zone_tree_t  auth;
    ngx_http_session_zone_tree_t  neg;
    ngx_http_session_zone_tree_t  rate;
    ngx_http_session_zone_tree_t  fail;
    ngx_http_session_zone_tree_t  seen;
    /* session_limit_scope cluster: the keys' leases */
    ngx_http_session_zone_tree_t  lease;
    /* this node in the lease rows: random, made with the zone */
    uint64_t                      node_id;
    /* leased budget not admitted yet, over all keys and classes */
    ngx_uint_t                    lease_held;
    /* the last lease got no answer: logged once until one does */
    ngx_uint_t                    lease_failing;
    /* the most unknown keys kept, from the zone's size */
    ngx_uint_t                    neg_max;
    /* the most keys seen valid kept, from the zone's size */
    ngx_uint_t                    seen_max;
    /* keys seen valid forgotten for want of room, and those alerted */
    ngx_uint_t                    seen_forgotten;
    ngx_uint_t                    seen_alerted;
    /* bumped by every auth cache invalidation */
    ngx_uint_t                    auth_generation;
    ngx_uint_t                    evictions;
    ngx_uint_t                    evictions_alerted;
    time_t                        last_full_alert;
    ngx_http_session_stats_t      stats;
    ngx_http_session_gauges_t     gauges[NGX_HTTP_SESSION_GAUGE_SLOTS];
} ngx_http_session_zone_sh_t;


/*
 * The memfd behind the zone (handover.c), shared by the configurations
 * that use the zone: a reload's new one and the old one both hold it
 * until one of them goes (the old one, or the new one when the reload
 * fails), so the last one closes it.
 */
typedef struct {
    ngx_fd_t                      fd;
    ngx_uint_t                    refs;
} ngx_http_session_zone_fd_t;


typedef struct {
    ngx_http_session_zone_sh_t   *sh;
    ngx_slab_pool_t              *shpool;
    size_t                        size;
    /* NULL: no memfd */
    ngx_http_session_zone_fd_t   *mfd;
    /*
     * Cluster scope, this worker's own (decision (qn)): the most nodes
     * its leases' answers listed for the window guess_minute, and for
     * the window before it
     */
    uint32_t                      guess_minute;
    uint32_t                      guess_nodes;
    uint32_t                      guess_before;
} ngx_http_session_zone_ctx_t;


/*
 * Every step over the trees holds the zone's mutex, the slab pool's: the
 * lock gives the zone's context (its sh, the trees) to the step, which
 * unlocks it
 */

static ngx_inline ngx_http_session_zone_ctx_t *
ngx_http_session_zone_lock(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    return ctx;
}


static ngx_inline void
ngx_http_session_zone_unlock(ngx_http_session_zone_ctx_t *ctx)
{
    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


void ngx_http_session_zone_tree_init(ngx_http_session_zone_tree_t *t);
ngx_http_session_zone_node_t *ngx_http_session_zone_lookup(
    ngx_http_session_zone_tree_t *t, u_char *hash);
void ngx_http_session_zone_insert(ngx_http_session_zone_tree_t *t,
    ngx_http_session_zone_node_t *sn, u_char *hash);
void ngx_http_session_zone_delete(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, ngx_http_session_zone_node_t *sn);
/* frees up to n entries from the cold end of a tree; returns how many */
ngx_uint_t ngx_http_session_zone_evict(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, ngx_uint_t n);
void ngx_http_session_zone_touch(ngx_http_session_zone_tree_t *t,
    ngx_http_session_zone_node_t *sn);
void ngx_http_session_zone_drop(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, u_char *hash);
ngx_http_session_zone_node_t *ngx_http_session_zone_coldest(
    ngx_http_session_zone_tree_t *t);
void ngx_http_session_zone_evicted(ngx_http_session_zone_sh_t *sh,
    ngx_http_session_take_t *take, ngx_uint_t evicted);
/* the zone-full ALERT's figures, under the mutex, and the ALERT after it */
void ngx_http_session_zone_full(ngx_http_session_zone_sh_t *sh,
    ngx_uint_t *evicted, ngx_uint_t *forgotten);
void ngx_http_session_zone_full_alert(ngx_shm_zone_t *zone,
    ngx_uint_t evicted, ngx_uint_t forgotten);

/*
 * zone_rate.c's step for zone_auth.c, which admits a cached key in the
 * same turn of the mutex: the counting, under the mutex, and the ALERTs
 * it asks for, after it
 */
void ngx_http_session_rate_take_locked(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_http_session_take_t *take);
void ngx_http_session_rate_alert(ngx_shm_zone_t *zone,
    ngx_http_session_take_t *take);

/* zone_lease.c's step, the same for session_limit_scope cluster */
void ngx_http_session_lease_take_locked(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_http_session_take_t *take);


#endif /* _NGX_HTTP_SESSION_ZONE_SHM_H_INCLUDED_ */
