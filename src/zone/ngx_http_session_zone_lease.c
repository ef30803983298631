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
 * A block's size follows the key's rate on this node: what it admits in
 * NGX_HTTP_SESSION_LEASE_SECONDS, from NGX_HTTP_SESSION_LEASE_MIN to a
 * quarter of the limit; the database gives a node at most what takes it
 * to its equal part of the limit (src/sql/019_rate_lease_parts.sql), and
 * past that an equal share of what is left.  A key still busy
 * near the end of a window (from a second of its own among the last
 * NGX_HTTP_SESSION_LEASE_AHEAD) leases its first block of the next one
 * ahead, so that it does not wait at the turn of the minute.
 *
 * Budget held when its window ends is lost, never carried on: counted as
 * unused (the node's under-admission).  So is a block whose key is
 * evicted, or whose answer comes after its window.
 */

#include "ngx_http_session_zone_lease.h"
#include "ngx_http_session_zone_shm.h"
#include "ngx_http_session_window.h"


/* a block is what the node admits of the key in this many seconds */
#define NGX_HTTP_SESSION_LEASE_SECONDS  30

/* the rate is measured over at least this long, milliseconds */
#define NGX_HTTP_SESSION_LEASE_SAMPLE   100

/*
 * The last seconds of a window, when a busy key leases the next one's: at
 * a second of its own among the first NGX_HTTP_SESSION_LEASE_SPREAD of
 * them (from its hash), so that the keys of a node do not all lease at
 * once
 */
#define NGX_HTTP_SESSION_LEASE_AHEAD    15
#define NGX_HTTP_SESSION_LEASE_SPREAD   12


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
static uint32_t ngx_http_session_lease_part(uint32_t lease, ngx_uint_t limit,
    uint32_t nodes);
static uint32_t ngx_http_session_lease_guess(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute);
static void ngx_http_session_lease_seen(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute, uint32_t nodes);
static uint32_t ngx_http_session_lease_next_size(
    ngx_http_session_lease_t *l, ngx_uint_t limit, uint32_t now);


void
ngx_http_session_lease_take_locked(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_http_session_take_t *take)
{
    uint32_t                        minute, now, left, spent, size, nodes;
    ngx_uint_t                      evicted;
    ngx_http_session_lease_t       *l;
    ngx_http_session_zone_sh_t     *sh;
    ngx_http_session_lease_node_t  *ln;

    sh = ctx->sh;
    minute = (uint32_t) ngx_http_session_window_minute(take->now);
    now = (uint32_t) ngx_current_msec;

    take->evicted = 0;
    take->forgotten = 0;
    take->lease = 0;
    take->asked = 0;
    take->next = 0;

    ngx_http_session_lease_expire(ctx, minute);

    evicted = 0;

    ln = ngx_http_session_lease_node_get(ctx, hash, &evicted);

    if (ln == NULL) {
        ngx_http_session_zone_evicted(sh, take, evicted);

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

    /* for a lease of this window (the next window's batch sends none) */
    take->took = l->took;
    take->known = l->known ? 1 : 0;

    left = (l->granted < take->limit) ? take->limit - l->granted : 0;

    /*
     * What the nodes may have admitted of the key in the window, at most:
     * all that was leased, less what this node still holds.  Budget held
     * is admitted only while that is below the limit of the request's
     * location (decision (l)): a block leased under another location's
     * higher limit, or before a reload lowered it, must not let a key
     * past this one (decision (ql)).  With one limit it always is.
     */

    spent = (l->granted > l->held) ? l->granted - l->held : 0;

    if (l->held && spent < take->limit) {
        l->held--;
        l->used++;
        sh->lease_held--;

        take->rc = NGX_OK;
        take->remaining = take->limit - spent - 1;

        /* one lease ahead of need at a time per node (see take->stale) */

        if (l->asked && now - l->asked <= take->stale) {
            goto done;
        }

        size = ngx_http_session_lease_size(l, take->limit);

        nodes = ngx_max(ngx_max(l->nodes, l->nodes_before), 1);

        if (l->held * 2 < l->block && left
            && l->took < take->limit / nodes)
        {
            /*
             * Half the block in hand is spent: the next one now, so that
             * none waits, while the node has not had its equal part of
             * the limit (the database leases up to it, in any order).
             * Past its part, a lease is asked for when it is needed: the
             * database shares what is left among the nodes then, and a
             * node that asks when it has nothing left takes no more than
             * its share from the others.
             */
            take->lease = size;

        } else if (l->next == 0
                   && l->used >= NGX_HTTP_SESSION_LEASE_MIN / 2
                   && take->now - (time_t) minute
                                  * NGX_HTTP_SESSION_WINDOW_SECONDS
                      >= NGX_HTTP_SESSION_WINDOW_SECONDS
                         - NGX_HTTP_SESSION_LEASE_AHEAD
                         + hash[5] % NGX_HTTP_SESSION_LEASE_SPREAD)
        {
            /* the window ends soon and the key is busy: the next one's */
            take->lease = ngx_http_session_lease_next_size(l, take->limit,
                                                           now);

            /* the next window's part of each node, as far as it knows */
            take->lease = ngx_http_session_lease_part(take->lease,
                                                      take->limit, nodes);
            take->minute = minute + 1;
            take->next = 1;

        } else {
            goto done;
        }

        l->asked = (uint32_t) ngx_http_session_stamp(now);
        take->asked = l->asked;

    } else if (left == 0) {
        /*
         * the window's budget is leased out, and this node's is spent or
         * held beyond the location's limit
         */
        take->rc = NGX_BUSY;
        take->remaining = 0;

    } else {
        take->rc = NGX_AGAIN;
        take->remaining = 0;
        take->lease = ngx_http_session_lease_size(l, take->limit);

        if (l->nodes == 0) {
            /*
             * No answer of the window yet: a part of the limit among the
             * nodes of the key's window before, or, for a key new to the
             * node, among the most nodes that this worker's answers
             * listed lately (decision (qn)).  The row of a key new to the
             * cluster lists only the nodes that have asked so far, so the
             * first nodes would take whole blocks and the last ones find
             * the window leased out.
             */

            if (l->nodes_before == 0) {
                l->nodes_before = ngx_http_session_lease_guess(ctx, minute);
            }

            if (l->nodes_before > 1) {
                take->lease = ngx_http_session_lease_part(take->lease,
                                                          take->limit,
                                                          l->nodes_before);
            }
        }
    }

done:

    ngx_http_session_zone_evicted(sh, take, evicted);
}


void
ngx_http_session_lease_answer(ngx_shm_zone_t *zone,
    ngx_http_session_lease_answer_t *a)
{
    uint32_t                        now, cap, want, given;
    uint64_t                        rate;
    ngx_uint_t                      evicted, changed;
    ngx_http_session_lease_t       *l;
    ngx_http_session_zone_sh_t     *sh;
    ngx_http_session_zone_ctx_t    *ctx;
    ngx_http_session_lease_node_t  *ln;

    now = (uint32_t) ngx_current_msec;
    changed = 0;

    ctx = ngx_http_session_zone_lock(zone);
    sh = ctx->sh;

    /* the first failure (1), or the first answer after failures (2) */

    if (a->failed != sh->lease_failing) {
        sh->lease_failing = a->failed;
        changed = a->failed ? 1 : 2;
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

    ngx_http_session_lease_seen(ctx, a->minute, a->nodes);

    if (a->minute == l->minute + 1) {
        /* leased ahead for the next window */
        l->next += a->given;
        sh->lease_held += a->given;

        if (a->granted > l->next_granted) {
            l->next_granted = a->granted;
        }

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

    /*
     * What this answer adds: what the row says the node was leased beyond
     * what the node counted, once the two agreed (a lease another worker
     * still waits for the answer of counts now, and its answer adds
     * nothing then; decision (qk)); until then, the lease itself.
     */

    if (l->known && a->known) {
        given = (a->took > l->took) ? a->took - l->took : 0;

    } else {
        given = a->given;
    }

    l->held += given;
    l->took += given;
    sh->lease_held += given;

    if (given) {
        l->block = given;
    }

    if (a->known && a->took == l->took) {
        l->known = 1;
    }

    if (a->granted > l->granted) {
        l->granted = a->granted;
    }

    if (a->nodes > l->nodes) {
        l->nodes = a->nodes;
    }

    /*
     * The next block's size: what the node admitted of the key since the
     * last lease came in, per NGX_HTTP_SESSION_LEASE_SECONDS (down by half
     * at most); four times larger when requests waited for this one
     */

    want = ngx_max(l->want, NGX_HTTP_SESSION_LEASE_MIN);

    if (a->waiters) {
        want = ngx_max(want * 4, a->waiters);
    }

    if (l->last == 0) {
        l->last = (uint32_t) ngx_http_session_stamp(now);
        l->used = 0;

    } else if (now - l->last >= NGX_HTTP_SESSION_LEASE_SAMPLE) {
        rate = (uint64_t) l->used * NGX_HTTP_SESSION_LEASE_SECONDS * 1000
               / (now - l->last);

        if (rate > want) {
            want = (rate < NGX_MAX_UINT32_VALUE) ? (uint32_t) rate
                                                 : NGX_MAX_UINT32_VALUE;

        } else if (a->waiters == 0) {
            want = ngx_max((uint32_t) rate, want / 2);
        }

        l->last = (uint32_t) ngx_http_session_stamp(now);
        l->used = 0;
    }

    cap = ngx_max(NGX_HTTP_SESSION_LEASE_MIN,
                  a->limit / NGX_HTTP_SESSION_LEASE_SHARE);

    l->want = ngx_max(ngx_min(want, cap), NGX_HTTP_SESSION_LEASE_MIN);

done:

    ngx_http_session_zone_unlock(ctx);

    if (changed == 1) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "session limit: no lease from the database "
                      "(session_limit_scope cluster): a key this node "
                      "holds no budget of gets 503 until one succeeds");

    } else if (changed == 2) {
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "session limit: leases from the database again");
    }
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
    ngx_http_session_zone_sh_t     *sh;
    ngx_http_session_lease_node_t  *ln, *old;

    sh = ctx->sh;

    ln = (ngx_http_session_lease_node_t *)
             ngx_http_session_zone_lookup(&sh->lease, hash);

    if (ln) {
        ngx_http_session_zone_touch(&sh->lease, &ln->sn);
        return ln;
    }

    ln = ngx_slab_alloc_locked(ctx->shpool,
                               sizeof(ngx_http_session_lease_node_t));

    /* the auth cache gives way first, then the least recent key's lease */

    while (ln == NULL) {
        if (ngx_http_session_zone_evict(ctx, &sh->neg, 16) == 0
            && ngx_http_session_zone_evict(ctx, &sh->auth, 16) == 0)
        {
            old = (ngx_http_session_lease_node_t *)
                      ngx_http_session_zone_coldest(&sh->lease);
            if (old == NULL) {
                return NULL;
            }

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


/*
 * A new window: what the old one held is lost to this node, what was
 * leased ahead for it is held now; a key busy in the window before keeps
 * its block size and its rate, and its count of nodes until an answer
 * of the new window gives one (a node that counted none would lease
 * ahead past its part).
 */

static void
ngx_http_session_lease_roll(ngx_http_session_zone_sh_t *sh,
    ngx_http_session_lease_t *l, uint32_t minute)
{
    uint32_t  lost;

    lost = l->held;

    if (l->minute + 1 == minute) {
        l->held = l->next;
        l->took = l->next;
        l->block = l->next;
        l->granted = l->next_granted;
        l->nodes_before = l->nodes ? l->nodes : l->nodes_before;
        l->nodes = 0;

    } else {
        lost += l->next;
        l->held = 0;
        l->took = 0;
        l->block = 0;
        l->granted = 0;
        l->nodes = 0;
        l->nodes_before = 0;
        l->want = 0;
        l->used = 0;
        l->last = 0;
    }

    if (lost) {
        ngx_http_session_stat(lease_unused, lost);
        sh->lease_held -= lost;
    }

    l->minute = minute;
    l->next = 0;
    l->next_granted = 0;
    l->asked = 0;

    /* until an answer of the new window agrees with the row */
    l->known = 0;
}


static void
ngx_http_session_lease_drop(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_lease_node_t *ln)
{
    uint32_t    lost;
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_SESSION_NCLASSES; i++) {
        lost = ln->leases[i].held + ln->leases[i].next;

        if (lost) {
            ngx_http_session_stat(lease_unused, lost);
            ctx->sh->lease_held -= lost;
        }
    }

    ngx_http_session_zone_delete(ctx, &ctx->sh->lease, &ln->sn);
}


/*
 * Drops keys idle for a whole window, a few at a time: a key of the window
 * just over keeps its block size and rate (and what it leased ahead) for
 * the new one.
 */

static void
ngx_http_session_lease_expire(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute)
{
    ngx_uint_t                      n, i;
    ngx_http_session_lease_node_t  *ln;

    for (n = 0; n < 2; n++) {

        ln = (ngx_http_session_lease_node_t *)
                 ngx_http_session_zone_coldest(&ctx->sh->lease);
        if (ln == NULL) {
            return;
        }

        for (i = 0; i < NGX_HTTP_SESSION_NCLASSES; i++) {
            if (ln->leases[i].minute + 1 >= minute) {
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


/* a lease no larger than a node's part of the limit among nodes, at least 1 */

static uint32_t
ngx_http_session_lease_part(uint32_t lease, ngx_uint_t limit, uint32_t nodes)
{
    return ngx_max(ngx_min(lease, limit / nodes), 1);
}


/*
 * How many nodes lease, as far as this worker knows: the most that an
 * answer listed in the window or the one before (0: it saw none).  A
 * node that stopped is counted for up to six windows (the rows list the
 * nodes of the key's last six), which makes first blocks smaller, never
 * a 429 early.
 */

static uint32_t
ngx_http_session_lease_guess(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute)
{
    if (ctx->guess_minute == minute || ctx->guess_minute == minute + 1) {
        return ngx_max(ctx->guess_nodes, ctx->guess_before);
    }

    if (ctx->guess_minute + 1 == minute) {
        return ctx->guess_nodes;
    }

    return 0;
}


static void
ngx_http_session_lease_seen(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute, uint32_t nodes)
{
    if (minute > ctx->guess_minute) {
        ctx->guess_before = (ctx->guess_minute + 1 == minute)
                            ? ctx->guess_nodes : 0;
        ctx->guess_minute = minute;
        ctx->guess_nodes = nodes;

    } else if (minute == ctx->guess_minute) {
        ctx->guess_nodes = ngx_max(ctx->guess_nodes, nodes);

    } else if (minute + 1 == ctx->guess_minute) {
        ctx->guess_before = ngx_max(ctx->guess_before, nodes);
    }
}


void
ngx_http_session_lease_guess_add(ngx_shm_zone_t *zone, uint32_t minute,
    uint32_t nodes)
{
    ngx_http_session_lease_seen(zone->data, minute, nodes);
}


/*
 * The next window's first block: from the key's rate now when that is
 * higher (decision (qi)).  A key busy only since a moment, whose blocks
 * have not grown to its rate yet, would otherwise start the next window
 * with a small block and lease again at once, with every other such key.
 */

static uint32_t
ngx_http_session_lease_next_size(ngx_http_session_lease_t *l,
    ngx_uint_t limit, uint32_t now)
{
    uint32_t  size, cap;
    uint64_t  rate;

    size = ngx_http_session_lease_size(l, limit);

    if (l->last == 0 || now - l->last < NGX_HTTP_SESSION_LEASE_SAMPLE) {
        return size;
    }

    cap = (uint32_t) ngx_max(NGX_HTTP_SESSION_LEASE_MIN,
                             limit / NGX_HTTP_SESSION_LEASE_SHARE);

    rate = (uint64_t) l->used * NGX_HTTP_SESSION_LEASE_SECONDS * 1000
           / (now - l->last);

    if (rate > cap) {
        rate = cap;
    }

    return ngx_max(size, (uint32_t) rate);
}
