/*
 * Leases (session_limit_scope cluster): a key's budget for a class and a
 * window is leased to the node in blocks from a row in PostgreSQL, which
 * never leases more than the limit over all nodes (src/sql/015_rate_
 * leases.sql); the node admits from its block here, under the zone
 * mutex, exactly across its workers.  A request finds either budget held
 * (admitted; a block that runs low asks for the next one ahead of need),
 * the window's budget spent (429, no statement), or neither: it waits
 * for a lease (src/pipeline/ngx_http_session_lease.c).
 *
 * Budget held when its window ends is lost, never carried on: counted as
 * unused (the node's under-admission).  So is a block whose key is
 * evicted, or whose answer comes after its window.
 */

#include "ngx_http_session_zone_lease.h"
#include "ngx_http_session_zone_shm.h"
#include "ngx_http_session_window.h"


/* a block spent faster than this asks for a larger one, slower a smaller */
#define NGX_HTTP_SESSION_LEASE_FAST  2000
#define NGX_HTTP_SESSION_LEASE_SLOW  10000


static ngx_http_session_lease_node_t *ngx_http_session_lease_node_get(
    ngx_http_session_zone_ctx_t *ctx, u_char *hash, ngx_uint_t *evicted);
static void ngx_http_session_lease_roll(ngx_http_session_zone_sh_t *sh,
    ngx_http_session_lease_t *l, uint32_t minute);
static void ngx_http_session_lease_drop(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_lease_node_t *ln);
static void ngx_http_session_lease_expire(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute);
static uint32_t ngx_http_session_lease_size(ngx_http_session_lease_t *l,
    ngx_uint_t limit);


void
ngx_http_session_lease_take_locked(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_http_session_take_t *take)
{
    uint32_t                        minute, now, left;
    ngx_uint_t                      evicted;
    ngx_http_session_lease_t       *l;
    ngx_http_session_zone_sh_t     *sh;
    ngx_http_session_lease_node_t  *ln;

    sh = ctx->sh;
    minute = (uint32_t) ngx_http_session_window_minute(take->now);
    now = (uint32_t) ngx_current_msec;

    take->evicted = 0;
    take->lease = 0;
    take->asked = 0;

    ngx_http_session_lease_expire(ctx, minute);

    evicted = 0;

    ln = ngx_http_session_lease_node_get(ctx, hash, &evicted);

    if (ln == NULL) {
        /* never let a key through unlimited */
        take->remaining = 0;
        take->rc = NGX_ERROR;
        return;
    }

    l = &ln->leases[take->cls];

    /* the window moves forward only, as for node-local counters */

    if (l->minute < minute) {
        ngx_http_session_lease_roll(sh, l, minute);

    } else if (l->minute > minute) {
        minute = l->minute;
        take->now = (time_t) minute * NGX_HTTP_SESSION_WINDOW_SECONDS;
    }

    take->minute = minute;

    left = (l->granted < take->limit) ? take->limit - l->granted : 0;

    if (l->held) {
        l->held--;
        sh->lease_held--;

        take->rc = NGX_OK;
        take->remaining = l->held + left;

        /*
         * Half the block is spent: the next one is asked for now, so that
         * a busy key rarely waits; one such lease at a time per node (a
         * mark older than take->stale is a lease whose worker is gone).
         */

        if (left
            && l->held * 2 < ngx_http_session_lease_size(l, take->limit)
            && (l->asked == 0 || now - l->asked > take->stale))
        {
            l->asked = now | 1;
            take->asked = l->asked;
            take->lease = ngx_http_session_lease_size(l, take->limit);
        }

    } else if (left == 0) {
        /* the window's budget is leased out and this node's is spent */
        take->rc = NGX_BUSY;
        take->remaining = 0;

    } else {
        take->rc = NGX_AGAIN;
        take->remaining = 0;
        take->lease = ngx_http_session_lease_size(l, take->limit);
    }

    if (evicted) {
        sh->evictions += evicted;

        if (sh->last_full_alert != take->now) {
            sh->last_full_alert = take->now;
            take->evicted = sh->evictions - sh->evictions_alerted;
            sh->evictions_alerted = sh->evictions;
        }
    }
}


void
ngx_http_session_lease_answer(ngx_shm_zone_t *zone,
    ngx_http_session_lease_answer_t *a)
{
    uint32_t                        now, cap;
    ngx_uint_t                      evicted;
    ngx_http_session_lease_t       *l;
    ngx_http_session_zone_sh_t     *sh;
    ngx_http_session_zone_ctx_t    *ctx;
    ngx_http_session_lease_node_t  *ln;

    ctx = zone->data;
    sh = ctx->sh;
    now = (uint32_t) ngx_current_msec;
    a->changed = 0;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    if (a->failed != sh->lease_failing) {
        sh->lease_failing = a->failed;
        a->changed = a->failed ? 1 : 2;
    }

    if (a->failed || a->given == 0) {
        ln = (ngx_http_session_lease_node_t *)
                 ngx_http_session_zone_lookup(&sh->lease, a->hash);

    } else {
        evicted = 0;
        ln = ngx_http_session_lease_node_get(ctx, a->hash, &evicted);
        sh->evictions += evicted;
    }

    if (ln == NULL) {
        ngx_http_session_stat(lease_unused, a->given);
        goto done;
    }

    l = &ln->leases[a->cls];

    if (a->asked && l->asked == a->asked) {
        l->asked = 0;
    }

    if (a->failed) {
        goto done;
    }

    if (l->minute < a->minute) {
        ngx_http_session_lease_roll(sh, l, a->minute);
    }

    if (l->minute > a->minute) {
        /* a window that is over: of no use */
        ngx_http_session_stat(lease_unused, a->given);
        goto done;
    }

    l->held += a->given;
    sh->lease_held += a->given;

    if (a->granted > l->granted) {
        l->granted = a->granted;
    }

    /* the next block's size from how long this node took to need it */

    cap = ngx_max(NGX_HTTP_SESSION_LEASE_MIN,
                  a->limit / NGX_HTTP_SESSION_LEASE_SHARE);

    if (l->want == 0) {
        l->want = NGX_HTTP_SESSION_LEASE_MIN;

    } else if (l->last && now - l->last < NGX_HTTP_SESSION_LEASE_FAST) {
        l->want = ngx_min(l->want * 2, cap);

    } else if (l->last && now - l->last > NGX_HTTP_SESSION_LEASE_SLOW) {
        l->want = ngx_max(l->want / 2, NGX_HTTP_SESSION_LEASE_MIN);
    }

    l->last = now | 1;

done:

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


uint64_t
ngx_http_session_lease_node(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    /* set once when the zone is made */
    return ctx->sh->node_id;
}


/* the key's node in the lease tree, made if need be (room as for counters) */

static ngx_http_session_lease_node_t *
ngx_http_session_lease_node_get(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_uint_t *evicted)
{
    ngx_queue_t                    *q;
    ngx_http_session_zone_sh_t     *sh;
    ngx_http_session_lease_node_t  *ln, *old;

    sh = ctx->sh;

    ln = (ngx_http_session_lease_node_t *)
             ngx_http_session_zone_lookup(&sh->lease, hash);

    if (ln) {
        ngx_queue_remove(&ln->sn.queue);
        ngx_queue_insert_head(&sh->lease.lru, &ln->sn.queue);
        return ln;
    }

    ln = ngx_slab_alloc_locked(ctx->shpool,
                               sizeof(ngx_http_session_lease_node_t));

    /* the auth cache gives way first, then the least recent key's lease */

    while (ln == NULL) {
        if (ngx_http_session_zone_evict(ctx, &sh->neg, 16) == 0
            && ngx_http_session_zone_evict(ctx, &sh->auth, 16) == 0)
        {
            if (ngx_queue_empty(&sh->lease.lru)) {
                return NULL;
            }

            q = ngx_queue_last(&sh->lease.lru);
            old = ngx_queue_data(q, ngx_http_session_lease_node_t, sn.queue);

            ngx_http_session_lease_drop(ctx, old);
            (*evicted)++;
        }

        ln = ngx_slab_alloc_locked(ctx->shpool,
                                   sizeof(ngx_http_session_lease_node_t));
    }

    ngx_memzero(ln->leases, sizeof(ln->leases));
    ngx_http_session_zone_insert(&sh->lease, &ln->sn, hash);

    return ln;
}


/* a new window: what the old one held is lost to this node */

static void
ngx_http_session_lease_roll(ngx_http_session_zone_sh_t *sh,
    ngx_http_session_lease_t *l, uint32_t minute)
{
    if (l->held) {
        ngx_http_session_stat(lease_unused, l->held);
        sh->lease_held -= l->held;
    }

    /* a key busy in the window before keeps its block size */

    if (l->minute + 1 != minute) {
        l->want = 0;
    }

    l->minute = minute;
    l->held = 0;
    l->granted = 0;
    l->last = 0;
    l->asked = 0;
}


static void
ngx_http_session_lease_drop(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_lease_node_t *ln)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_SESSION_NCLASSES; i++) {
        if (ln->leases[i].held) {
            ngx_http_session_stat(lease_unused, ln->leases[i].held);
            ctx->sh->lease_held -= ln->leases[i].held;
        }
    }

    ngx_http_session_zone_delete(ctx, &ctx->sh->lease, &ln->sn);
}


/* drops keys whose windows are all over, a few at a time */

static void
ngx_http_session_lease_expire(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute)
{
    ngx_uint_t                      n, i;
    ngx_queue_t                    *q;
    ngx_http_session_lease_node_t  *ln;

    for (n = 0; n < 2; n++) {

        if (ngx_queue_empty(&ctx->sh->lease.lru)) {
            return;
        }

        q = ngx_queue_last(&ctx->sh->lease.lru);
        ln = ngx_queue_data(q, ngx_http_session_lease_node_t, sn.queue);

        for (i = 0; i < NGX_HTTP_SESSION_NCLASSES; i++) {
            if (ln->leases[i].minute >= minute) {
                return;
            }
        }

        ngx_http_session_lease_drop(ctx, ln);
    }
}


/* the next block: from NGX_HTTP_SESSION_LEASE_MIN to a tenth of the limit */

static uint32_t
ngx_http_session_lease_size(ngx_http_session_lease_t *l, ngx_uint_t limit)
{
    uint32_t  want, cap;

    cap = (uint32_t) ngx_max(NGX_HTTP_SESSION_LEASE_MIN,
                             limit / NGX_HTTP_SESSION_LEASE_SHARE);

    want = l->want ? l->want : NGX_HTTP_SESSION_LEASE_MIN;

    return ngx_min(want, cap);
}
