/*
 * Shared memory: rbtrees keyed by a 32-byte hash, each with its LRU
 * queue, in the slab pool of session_limit_zone, every access under the
 * pool mutex: the auth cache's known keys (valid or suspended), its
 * unknown keys (a budget of their own, so that a flood of random keys
 * never pushes a known key out), the keys seen valid within the hour
 * (a budget of their own too), the rate counters, and the count of
 * failed lookups per client address.  Rate counters come first: when the
 * slab is full, unknown keys give way, then known keys, before any
 * counter is evicted.  Keys seen valid give way only to one another: at
 * most a quarter of the zone is theirs, and nothing else evicts them.
 */

#include "ngx_http_session_shm.h"
#include "ngx_http_session_handover.h"
#include "ngx_http_session_window.h"


/*
 * Bump with any change of what the zone holds or of what its contents
 * mean: a binary upgrade (USR2) shares the zone between the old and the
 * new binary only when their layouts are equal (see
 * ngx_http_session_shm_layout() and ngx_http_session_handover.c).
 */
#define NGX_HTTP_SESSION_SHM_LAYOUT  1


/* what both trees store first */
typedef struct {
    ngx_rbtree_node_t             node;
    ngx_queue_t                   queue;
    u_char                        hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
} ngx_http_session_shm_node_t;


typedef struct {
    ngx_http_session_shm_node_t   sn;
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
    ngx_http_session_shm_node_t   sn;
    ngx_msec_t                    expires;
} ngx_http_session_neg_node_t;


/*
 * A key the database found valid (docs/decisions.md, (ua)): kept an hour
 * past its cached answer, so that the failures of its client address
 * never refuse it a lookup (API.md section 10).  Only a valid answer
 * makes one, so a flood of unknown keys can neither add one nor push one
 * out.  96 bytes, a 128-byte slab chunk.
 */
typedef struct {
    ngx_http_session_shm_node_t   sn;
    ngx_msec_t                    expires;
} ngx_http_session_seen_node_t;


/*
 * failed lookups of one client address in one minute; sn.hash holds the
 * address (ngx_http_session_auth_fail())
 */
typedef struct {
    ngx_http_session_shm_node_t   sn;
    uint32_t                      minute;
    uint32_t                      count;
} ngx_http_session_fail_node_t;


/* 112 bytes: a 128-byte slab chunk per key, all classes together */
typedef struct {
    ngx_http_session_shm_node_t   sn;
    ngx_http_session_counter_t    counters[NGX_HTTP_SESSION_NCLASSES];
} ngx_http_session_rate_node_t;


typedef struct {
    ngx_rbtree_t                  rbtree;
    ngx_rbtree_node_t             sentinel;
    ngx_queue_t                   lru;
    ngx_uint_t                    n;
} ngx_http_session_shm_tree_t;


typedef struct {
    ngx_http_session_shm_tree_t   auth;
    ngx_http_session_shm_tree_t   neg;
    ngx_http_session_shm_tree_t   rate;
    ngx_http_session_shm_tree_t   fail;
    ngx_http_session_shm_tree_t   seen;
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
} ngx_http_session_shm_t;


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
    ngx_http_session_shm_t       *sh;
    ngx_slab_pool_t              *shpool;
    size_t                        size;
    /* NULL: no memfd */
    ngx_http_session_zone_fd_t   *mfd;
} ngx_http_session_zone_ctx_t;


static ngx_int_t ngx_http_session_shm_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_session_shm_layout(
    ngx_http_session_handover_layout_t *layout);
static void ngx_http_session_shm_cleanup(void *data);
static void ngx_http_session_shm_tree_init(ngx_http_session_shm_tree_t *t);
static void ngx_http_session_shm_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_http_session_shm_node_t *ngx_http_session_shm_lookup(
    ngx_http_session_shm_tree_t *t, u_char *hash);
static void ngx_http_session_shm_insert(ngx_http_session_shm_tree_t *t,
    ngx_http_session_shm_node_t *sn, u_char *hash);
static void ngx_http_session_shm_delete(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_shm_tree_t *t, ngx_http_session_shm_node_t *sn);
static ngx_uint_t ngx_http_session_shm_evict(
    ngx_http_session_zone_ctx_t *ctx, ngx_http_session_shm_tree_t *t,
    ngx_uint_t n);
static void ngx_http_session_rate_take_locked(
    ngx_http_session_zone_ctx_t *ctx, u_char *hash,
    ngx_http_session_take_t *take);
static void ngx_http_session_rate_alert(ngx_shm_zone_t *zone,
    ngx_http_session_take_t *take);
static void ngx_http_session_rate_expire(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute);
static void *ngx_http_session_auth_alloc(ngx_http_session_zone_ctx_t *ctx,
    size_t size, ngx_uint_t known);
static ngx_int_t ngx_http_session_auth_seen(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash);
static void ngx_http_session_auth_seen_keep(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_msec_t ttl);
static void ngx_http_session_auth_seen_drop(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash);
static ngx_uint_t ngx_http_session_auth_seen_evict(
    ngx_http_session_zone_ctx_t *ctx);


ngx_shm_zone_t *
ngx_http_session_shm_add(ngx_conf_t *cf, ngx_str_t *name, size_t size)
{
    ngx_uint_t                    i;
    ngx_shm_zone_t               *shm_zone, *oshm_zone;
    ngx_list_part_t              *part;
    ngx_pool_cleanup_t           *cln;
    ngx_http_session_zone_ctx_t  *ctx;

    /*
     * nginx would silently give a resized zone fresh memory on reload and
     * every counter would restart at zero: refuse the reload instead.
     */

    part = &cf->cycle->old_cycle->shared_memory.part;
    oshm_zone = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            oshm_zone = part->elts;
            i = 0;
        }

        if (oshm_zone[i].tag == &ngx_http_session_module
            && oshm_zone[i].shm.name.len == name->len
            && ngx_strncmp(oshm_zone[i].shm.name.data, name->data, name->len)
               == 0
            && oshm_zone[i].shm.size != size)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "session_limit_zone \"%V\" cannot change "
                               "size from %uz to %uz on reload, restart "
                               "nginx to resize it",
                               name, oshm_zone[i].shm.size, size);
            return NULL;
        }
    }

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_session_zone_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->size = size;

    /* the configuration's end lets go of the memfd */

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_session_shm_cleanup;
    cln->data = ctx;

    shm_zone = ngx_shared_memory_add(cf, name, size,
                                     &ngx_http_session_module);
    if (shm_zone == NULL) {
        return NULL;
    }

    if (shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "session_limit_zone \"%V\" is already defined",
                           name);
        return NULL;
    }

    shm_zone->init = ngx_http_session_shm_init_zone;
    shm_zone->data = ctx;

    return shm_zone;
}


static ngx_int_t
ngx_http_session_shm_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_session_zone_ctx_t  *octx = data;

    size_t                               len;
    ngx_fd_t                             fd;
    ngx_int_t                            rc;
    ngx_http_session_zone_ctx_t         *ctx;
    ngx_http_session_handover_layout_t   layout;

    ctx = shm_zone->data;

    if (octx) {
        /*
         * A reload: keep the cache and the counters.  nginx hands over a
         * zone only to the module that made it (the zone's tag is the
         * module's address), so the layout is this build's: a rebuilt
         * module loaded from another path gets a fresh zone.
         */
        ctx->sh = octx->sh;
        ctx->shpool = octx->shpool;
        ctx->mfd = octx->mfd;

        if (ctx->mfd) {
            ctx->mfd->refs++;
        }

        return NGX_OK;
    }

    /* the previous binary's zone (USR2), or a new one it can hand on */

    ngx_http_session_shm_layout(&layout);

    rc = ngx_http_session_handover_attach(shm_zone, &layout, &fd);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (fd != NGX_INVALID_FILE) {
        ctx->mfd = ngx_alloc(sizeof(ngx_http_session_zone_fd_t),
                             shm_zone->shm.log);
        if (ctx->mfd == NULL) {
            (void) close(fd);
            return NGX_ERROR;
        }

        ctx->mfd->fd = fd;
        ctx->mfd->refs = 1;
    }

    ctx->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (rc == NGX_OK) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    if (shm_zone->shm.exists) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    ctx->sh = ngx_slab_calloc(ctx->shpool, sizeof(ngx_http_session_shm_t));
    if (ctx->sh == NULL) {
        return NGX_ERROR;
    }

    ctx->shpool->data = ctx->sh;

    ctx->sh->stats.started = ngx_time();

    ngx_http_session_shm_tree_init(&ctx->sh->auth);
    ngx_http_session_shm_tree_init(&ctx->sh->neg);
    ngx_http_session_shm_tree_init(&ctx->sh->rate);
    ngx_http_session_shm_tree_init(&ctx->sh->fail);
    ngx_http_session_shm_tree_init(&ctx->sh->seen);

    /* unknown keys: at most an eighth of the zone, in 128-byte chunks */
    ctx->sh->neg_max = ngx_max(shm_zone->shm.size / 8 / 128, 16);

    /* keys seen valid: at most a quarter, in 128-byte chunks */
    ctx->sh->seen_max = ngx_max(shm_zone->shm.size / 4 / 128, 16);

    len = sizeof(" in session_limit_zone \"\"") + shm_zone->shm.name.len;

    ctx->shpool->log_ctx = ngx_slab_alloc(ctx->shpool, len);
    if (ctx->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(ctx->shpool->log_ctx, " in session_limit_zone \"%V\"%Z",
                &shm_zone->shm.name);

    /* a full zone is expected and handled: no "ngx_slab_alloc() failed" */
    ctx->shpool->log_nomem = 0;

    return NGX_OK;
}


/* what two binaries must agree on to share the zone */

static void
ngx_http_session_shm_layout(ngx_http_session_handover_layout_t *layout)
{
    ngx_memzero(layout, sizeof(ngx_http_session_handover_layout_t));

    layout->v[0] = NGX_HTTP_SESSION_SHM_LAYOUT;
    layout->v[1] = sizeof(ngx_http_session_shm_t);
    layout->v[2] = sizeof(ngx_http_session_auth_node_t);
    layout->v[3] = sizeof(ngx_http_session_neg_node_t);
    layout->v[4] = sizeof(ngx_http_session_rate_node_t);
    layout->v[5] = sizeof(ngx_http_session_fail_node_t);
    layout->v[6] = sizeof(ngx_http_session_stats_t);
    layout->v[7] = sizeof(ngx_http_session_gauges_t);
    layout->v[8] = NGX_HTTP_SESSION_NCLASSES;
    layout->v[9] = NGX_HTTP_SESSION_GAUGE_SLOTS;
    layout->v[10] = NGX_HTTP_SESSION_KEY_HASH_LEN;
    layout->v[11] = NGX_HTTP_SESSION_UUID_LEN;
    layout->v[12] = NGX_HTTP_SESSION_WINDOW_SECONDS;
}


static void
ngx_http_session_shm_cleanup(void *data)
{
    ngx_http_session_zone_ctx_t  *ctx = data;

    if (ctx->mfd && --ctx->mfd->refs == 0) {
        (void) close(ctx->mfd->fd);
        ngx_free(ctx->mfd);
    }

    ctx->mfd = NULL;
}


static void
ngx_http_session_shm_tree_init(ngx_http_session_shm_tree_t *t)
{
    ngx_rbtree_init(&t->rbtree, &t->sentinel,
                    ngx_http_session_shm_insert_value);
    ngx_queue_init(&t->lru);
    t->n = 0;
}


/* the auth cache */

ngx_int_t
ngx_http_session_auth_cache_get(ngx_shm_zone_t *zone,
    ngx_http_session_principal_t *p, ngx_uint_t *generation,
    ngx_http_session_take_t *take)
{
    ngx_int_t                      rc;
    ngx_http_session_shm_t        *sh;
    ngx_http_session_neg_node_t   *nn;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = zone->data;
    sh = ctx->sh;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    *generation = sh->auth_generation;

    an = (ngx_http_session_auth_node_t *)
             ngx_http_session_shm_lookup(&sh->auth, p->hash);

    if (an == NULL) {
        nn = (ngx_http_session_neg_node_t *)
                 ngx_http_session_shm_lookup(&sh->neg, p->hash);

        if (nn == NULL) {
            rc = ngx_http_session_auth_seen(ctx, p->hash);

        } else if ((ngx_msec_int_t) (nn->expires - ngx_current_msec) <= 0) {
            ngx_http_session_shm_delete(ctx, &sh->neg, &nn->sn);
            rc = ngx_http_session_auth_seen(ctx, p->hash);

        } else {
            ngx_queue_remove(&nn->sn.queue);
            ngx_queue_insert_head(&sh->neg.lru, &nn->sn.queue);
            rc = NGX_HTTP_SESSION_AUTH_INVALID;
        }

    } else if ((ngx_msec_int_t) (an->expires - ngx_current_msec) <= 0) {
        ngx_http_session_shm_delete(ctx, &sh->auth, &an->sn);
        rc = ngx_http_session_auth_seen(ctx, p->hash);

    } else {
        ngx_queue_remove(&an->sn.queue);
        ngx_queue_insert_head(&sh->auth.lru, &an->sn.queue);

        rc = an->status;

        /* stage 2 of an admitted key, without a second turn of the mutex */

        if (rc == NGX_HTTP_SESSION_AUTH_VALID && take) {
            ngx_http_session_rate_take_locked(ctx, p->hash, take);
        }

        /* refused by stage 2 too: the ids are for the access log */

        ngx_memcpy(p->project_id, an->project_id, NGX_HTTP_SESSION_UUID_LEN);
        ngx_memcpy(p->account_id, an->account_id, NGX_HTTP_SESSION_UUID_LEN);
        ngx_memcpy(p->key_id, an->key_id, NGX_HTTP_SESSION_UUID_LEN);
        p->plan = an->plan;
        p->quota = an->quota;
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    if (take && take->rc != NGX_DECLINED) {
        ngx_http_session_rate_alert(zone, take);
    }

    return rc;
}


void
ngx_http_session_auth_cache_put(ngx_shm_zone_t *zone,
    ngx_http_session_principal_t *p, ngx_uint_t status, ngx_msec_t ttl,
    ngx_uint_t generation)
{
    ngx_uint_t                     forgotten;
    ngx_http_session_shm_t        *sh;
    ngx_http_session_shm_node_t   *sn;
    ngx_http_session_neg_node_t   *nn;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = zone->data;
    sh = ctx->sh;
    forgotten = 0;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    /*
     * Whether a key is seen valid follows every answer, however late:
     * an invalidation since (a flush when LISTEN reconnects, a plan's
     * change) must not leave a key in use refused behind its address's
     * failures.  A valid answer that crossed the key's deletion marks it
     * for one lookup more, which finds it gone, counts the failure and
     * unmarks it.
     */

    if (status == NGX_HTTP_SESSION_AUTH_VALID) {
        ngx_http_session_auth_seen_keep(ctx, p->hash, ttl);

    } else if (status == NGX_HTTP_SESSION_AUTH_INVALID) {
        ngx_http_session_auth_seen_drop(ctx, p->hash);
    }

    if (sh->auth_generation != generation || ttl == 0) {
        goto done;
    }

    if (status == NGX_HTTP_SESSION_AUTH_INVALID) {

        /* a key that was known and is no more (deleted) */

        sn = ngx_http_session_shm_lookup(&sh->auth, p->hash);
        if (sn) {
            ngx_http_session_shm_delete(ctx, &sh->auth, sn);
        }

        nn = (ngx_http_session_neg_node_t *)
                 ngx_http_session_shm_lookup(&sh->neg, p->hash);

        if (nn == NULL) {
            if (sh->neg.n >= sh->neg_max) {
                (void) ngx_http_session_shm_evict(ctx, &sh->neg, 1);
            }

            nn = ngx_http_session_auth_alloc(ctx,
                                       sizeof(ngx_http_session_neg_node_t), 0);
            if (nn == NULL) {
                goto done;
            }

            ngx_http_session_shm_insert(&sh->neg, &nn->sn, p->hash);

        } else {
            ngx_queue_remove(&nn->sn.queue);
            ngx_queue_insert_head(&sh->neg.lru, &nn->sn.queue);
        }

        nn->expires = ngx_current_msec + ttl;

        goto done;
    }

    sn = ngx_http_session_shm_lookup(&sh->neg, p->hash);
    if (sn) {
        ngx_http_session_shm_delete(ctx, &sh->neg, sn);
    }

    an = (ngx_http_session_auth_node_t *)
             ngx_http_session_shm_lookup(&sh->auth, p->hash);

    if (an == NULL) {
        an = ngx_http_session_auth_alloc(ctx,
                                      sizeof(ngx_http_session_auth_node_t), 1);
        if (an == NULL) {
            /* a cache: going without is slower, never wrong */
            goto done;
        }

        ngx_http_session_shm_insert(&sh->auth, &an->sn, p->hash);

    } else {
        ngx_queue_remove(&an->sn.queue);
        ngx_queue_insert_head(&sh->auth.lru, &an->sn.queue);
    }

    an->status = status;
    an->expires = ngx_current_msec + ttl;
    ngx_memcpy(an->project_id, p->project_id, NGX_HTTP_SESSION_UUID_LEN);
    ngx_memcpy(an->account_id, p->account_id, NGX_HTTP_SESSION_UUID_LEN);
    ngx_memcpy(an->key_id, p->key_id, NGX_HTTP_SESSION_UUID_LEN);
    an->plan = p->plan;
    an->quota = p->quota;

done:

    /*
     * One ALERT a second, counting every key forgotten since the last;
     * the second is shared with the counters' ALERT: one line a second
     * says the zone is full.
     */

    if (sh->seen_forgotten != sh->seen_alerted
        && sh->last_full_alert != ngx_time())
    {
        sh->last_full_alert = ngx_time();
        forgotten = sh->seen_forgotten - sh->seen_alerted;
        sh->seen_alerted = sh->seen_forgotten;
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    if (forgotten) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "session_limit_zone \"%V\" is full: forgot %ui keys "
                      "found valid within the last hour, make the zone "
                      "larger", &zone->shm.name, forgotten);
    }
}


/*
 * Room for a cache entry: only other cache entries make room, never rate
 * counters nor failure counts.  Unknown keys give way first; a known key
 * only to older known keys, an unknown key only to older unknown keys.
 */

static void *
ngx_http_session_auth_alloc(ngx_http_session_zone_ctx_t *ctx, size_t size,
    ngx_uint_t known)
{
    void  *p;

    p = ngx_slab_alloc_locked(ctx->shpool, size);

    if (p == NULL
        && ngx_http_session_shm_evict(ctx, &ctx->sh->neg, 16) != 0)
    {
        p = ngx_slab_alloc_locked(ctx->shpool, size);
    }

    if (p == NULL
        && known
        && ngx_http_session_shm_evict(ctx, &ctx->sh->auth, 16) != 0)
    {
        p = ngx_slab_alloc_locked(ctx->shpool, size);
    }

    return p;
}


/*
 * The keys seen valid.  Their LRU queue is in the order of their last
 * valid answer, so its cold end is also where they expire first.
 */

static ngx_int_t
ngx_http_session_auth_seen(ngx_http_session_zone_ctx_t *ctx, u_char *hash)
{
    ngx_http_session_seen_node_t  *vn;

    vn = (ngx_http_session_seen_node_t *)
             ngx_http_session_shm_lookup(&ctx->sh->seen, hash);

    if (vn == NULL) {
        return NGX_DECLINED;
    }

    if ((ngx_msec_int_t) (vn->expires - ngx_current_msec) <= 0) {
        ngx_http_session_shm_delete(ctx, &ctx->sh->seen, &vn->sn);
        return NGX_DECLINED;
    }

    return NGX_HTTP_SESSION_AUTH_SEEN;
}


/*
 * Marks a key seen valid, for ttl and an hour.  Room comes from the
 * budget's oldest key, else from unknown keys and cached answers, else
 * from the oldest key seen; each key so forgotten is counted for the
 * ALERT.
 */

static void
ngx_http_session_auth_seen_keep(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_msec_t ttl)
{
    ngx_uint_t                     n;
    ngx_queue_t                   *q;
    ngx_http_session_shm_t        *sh;
    ngx_http_session_seen_node_t  *vn;

    sh = ctx->sh;

    /* keys whose hour is over, a few at a time */

    for (n = 0; n < 2 && !ngx_queue_empty(&sh->seen.lru); n++) {
        q = ngx_queue_last(&sh->seen.lru);
        vn = ngx_queue_data(q, ngx_http_session_seen_node_t, sn.queue);

        if ((ngx_msec_int_t) (vn->expires - ngx_current_msec) > 0) {
            break;
        }

        ngx_http_session_shm_delete(ctx, &sh->seen, &vn->sn);
    }

    vn = (ngx_http_session_seen_node_t *)
             ngx_http_session_shm_lookup(&sh->seen, hash);

    if (vn) {
        ngx_queue_remove(&vn->sn.queue);
        ngx_queue_insert_head(&sh->seen.lru, &vn->sn.queue);

    } else {
        if (sh->seen.n >= sh->seen_max) {
            (void) ngx_http_session_auth_seen_evict(ctx);
        }

        vn = ngx_http_session_auth_alloc(ctx,
                                      sizeof(ngx_http_session_seen_node_t), 1);

        if (vn == NULL && ngx_http_session_auth_seen_evict(ctx)) {
            vn = ngx_slab_alloc_locked(ctx->shpool,
                                       sizeof(ngx_http_session_seen_node_t));
        }

        if (vn == NULL) {
            /* this one then: its address's failures refuse it */
            sh->seen_forgotten++;
            return;
        }

        ngx_http_session_shm_insert(&sh->seen, &vn->sn, hash);
    }

    vn->expires = ngx_current_msec + ttl + NGX_HTTP_SESSION_AUTH_SEEN_TIME;
}


static void
ngx_http_session_auth_seen_drop(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash)
{
    ngx_http_session_shm_node_t  *sn;

    sn = ngx_http_session_shm_lookup(&ctx->sh->seen, hash);
    if (sn) {
        ngx_http_session_shm_delete(ctx, &ctx->sh->seen, sn);
    }
}


/*
 * Frees the key found valid least recently, counted as forgotten unless
 * its hour was over anyway; 0 when there is none.
 */

static ngx_uint_t
ngx_http_session_auth_seen_evict(ngx_http_session_zone_ctx_t *ctx)
{
    ngx_queue_t                   *q;
    ngx_http_session_seen_node_t  *vn;

    if (ngx_queue_empty(&ctx->sh->seen.lru)) {
        return 0;
    }

    q = ngx_queue_last(&ctx->sh->seen.lru);
    vn = ngx_queue_data(q, ngx_http_session_seen_node_t, sn.queue);

    if ((ngx_msec_int_t) (vn->expires - ngx_current_msec) > 0) {
        ctx->sh->seen_forgotten++;
    }

    ngx_http_session_shm_delete(ctx, &ctx->sh->seen, &vn->sn);

    return 1;
}


void
ngx_http_session_auth_cache_drop_key(ngx_shm_zone_t *zone, u_char *hash)
{
    ngx_http_session_shm_t       *sh;
    ngx_http_session_shm_node_t  *sn;
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;
    sh = ctx->sh;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    sh->auth_generation++;

    sn = ngx_http_session_shm_lookup(&sh->auth, hash);
    if (sn) {
        ngx_http_session_shm_delete(ctx, &sh->auth, sn);
    }

    sn = ngx_http_session_shm_lookup(&sh->neg, hash);
    if (sn) {
        ngx_http_session_shm_delete(ctx, &sh->neg, sn);
    }

    /* deleted: its failures count again (API.md section 10) */

    ngx_http_session_auth_seen_drop(ctx, hash);

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


void
ngx_http_session_auth_cache_drop_account(ngx_shm_zone_t *zone,
    u_char *account_id)
{
    ngx_queue_t                   *q, *next;
    ngx_http_session_shm_t        *sh;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = zone->data;
    sh = ctx->sh;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    sh->auth_generation++;

    for (q = ngx_queue_head(&sh->auth.lru);
         q != ngx_queue_sentinel(&sh->auth.lru);
         q = next)
    {
        next = ngx_queue_next(q);
        an = ngx_queue_data(q, ngx_http_session_auth_node_t, sn.queue);

        if (ngx_memcmp(an->account_id, account_id, NGX_HTTP_SESSION_UUID_LEN)
            == 0)
        {
            ngx_http_session_shm_delete(ctx, &sh->auth, &an->sn);
        }
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


void
ngx_http_session_auth_cache_flush(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    ctx->sh->auth_generation++;

    (void) ngx_http_session_shm_evict(ctx, &ctx->sh->auth, (ngx_uint_t) -1);
    (void) ngx_http_session_shm_evict(ctx, &ctx->sh->neg, (ngx_uint_t) -1);

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


/* rate counters */

ngx_int_t
ngx_http_session_rate_take(ngx_shm_zone_t *zone, u_char *hash,
    ngx_http_session_take_t *take)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);
    ngx_http_session_rate_take_locked(ctx, hash, take);
    ngx_shmtx_unlock(&ctx->shpool->mutex);

    ngx_http_session_rate_alert(zone, take);

    return take->rc;
}


static void
ngx_http_session_rate_take_locked(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_http_session_take_t *take)
{
    uint32_t                       minute, counted, remaining;
    ngx_uint_t                     evicted;
    ngx_http_session_shm_t        *sh;
    ngx_http_session_counter_t    *c;
    ngx_http_session_rate_node_t  *rn;

    sh = ctx->sh;
    minute = (uint32_t) ngx_http_session_window_minute(take->now);
    evicted = 0;
    take->evicted = 0;

    ngx_http_session_rate_expire(ctx, minute);

    rn = (ngx_http_session_rate_node_t *)
             ngx_http_session_shm_lookup(&sh->rate, hash);

    if (rn == NULL) {
        rn = ngx_slab_alloc_locked(ctx->shpool,
                                   sizeof(ngx_http_session_rate_node_t));

        /*
         * room is taken from the auth cache first, then from old keys;
         * never from the keys seen valid, which have a budget of their own
         */

        while (rn == NULL) {
            if (ngx_http_session_shm_evict(ctx, &sh->neg, 16) == 0
                && ngx_http_session_shm_evict(ctx, &sh->auth, 16) == 0)
            {
                if (ngx_http_session_shm_evict(ctx, &sh->rate, 1) == 0) {
                    break;
                }

                evicted++;
            }

            rn = ngx_slab_alloc_locked(ctx->shpool,
                                       sizeof(ngx_http_session_rate_node_t));
        }

        if (rn == NULL) {
            /* never let a key through unlimited */
            take->remaining = 0;
            take->rc = NGX_ERROR;
            return;
        }

        ngx_memzero(rn->counters, sizeof(rn->counters));
        ngx_http_session_shm_insert(&sh->rate, &rn->sn, hash);

    } else {
        ngx_queue_remove(&rn->sn.queue);
        ngx_queue_insert_head(&sh->rate.lru, &rn->sn.queue);
    }

    c = &rn->counters[take->cls];
    counted = minute;

    /*
     * The window moves forward only: a worker whose cached clock lags
     * counts in the minute another worker has already begun (and answers
     * with that window's figures), it never resets it.
     */

    take->rc = (ngx_http_session_window_take(&c->minute, &c->count,
                                             &counted, (uint32_t) take->limit,
                                             &remaining)
                == 0)
               ? NGX_OK : NGX_BUSY;
    take->remaining = remaining;

    if (counted != minute) {
        take->now = (time_t) counted * NGX_HTTP_SESSION_WINDOW_SECONDS;
    }

    if (evicted) {
        sh->evictions += evicted;

        /* one ALERT a second, counting every eviction since the last */

        if (sh->last_full_alert != take->now) {
            sh->last_full_alert = take->now;
            take->evicted = sh->evictions - sh->evictions_alerted;
            sh->evictions_alerted = sh->evictions;
        }
    }
}


/* the ALERTs of a take, written once the mutex is released */

static void
ngx_http_session_rate_alert(ngx_shm_zone_t *zone,
    ngx_http_session_take_t *take)
{
    if (take->rc == NGX_ERROR) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "session_limit_zone \"%V\" is too small to hold "
                      "one rate counter", &zone->shm.name);
        return;
    }

    if (take->evicted) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "session_limit_zone \"%V\" is full: evicted the "
                      "counters of %ui least recently used keys, make the "
                      "zone larger", &zone->shm.name, take->evicted);
    }
}


/* drops counters whose windows are all over, a few at a time */

static void
ngx_http_session_rate_expire(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute)
{
    ngx_uint_t                     n, i, live;
    ngx_queue_t                   *q;
    ngx_http_session_rate_node_t  *rn;

    for (n = 0; n < 2; n++) {

        if (ngx_queue_empty(&ctx->sh->rate.lru)) {
            return;
        }

        q = ngx_queue_last(&ctx->sh->rate.lru);
        rn = ngx_queue_data(q, ngx_http_session_rate_node_t, sn.queue);

        live = 0;

        /* a counter of a later minute (a clock ahead) is live too */

        for (i = 0; i < NGX_HTTP_SESSION_NCLASSES; i++) {
            if (rn->counters[i].minute >= minute) {
                live = 1;
            }
        }

        if (live) {
            return;
        }

        ngx_http_session_shm_delete(ctx, &ctx->sh->rate, &rn->sn);
    }
}


/* failed lookups per client address and minute */

ngx_int_t
ngx_http_session_auth_fail(ngx_shm_zone_t *zone, ngx_http_session_fail_t *f)
{
    uint32_t                       remaining;
    ngx_int_t                      rc;
    ngx_uint_t                     n;
    ngx_queue_t                   *q;
    ngx_http_session_shm_t        *sh;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_fail_node_t  *fn;

    ctx = zone->data;
    sh = ctx->sh;
    rc = NGX_OK;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    /* addresses whose minute is over, a few at a time */

    for (n = 0; n < 2 && !ngx_queue_empty(&sh->fail.lru); n++) {
        q = ngx_queue_last(&sh->fail.lru);
        fn = ngx_queue_data(q, ngx_http_session_fail_node_t, sn.queue);

        if (fn->minute >= f->minute) {
            break;
        }

        ngx_http_session_shm_delete(ctx, &sh->fail, &fn->sn);
    }

    fn = (ngx_http_session_fail_node_t *)
             ngx_http_session_shm_lookup(&sh->fail, f->key);

    if (fn == NULL) {
        if (f->op == NGX_HTTP_SESSION_FAIL_CHECK
            || f->op == NGX_HTTP_SESSION_FAIL_REFUND)
        {
            /* no failure this minute */
            goto done;
        }

        fn = ngx_slab_alloc_locked(ctx->shpool,
                                   sizeof(ngx_http_session_fail_node_t));

        /* unknown keys give way first, then the least recent address */

        if (fn == NULL
            && (ngx_http_session_shm_evict(ctx, &sh->neg, 16) != 0
                || ngx_http_session_shm_evict(ctx, &sh->fail, 1) != 0))
        {
            fn = ngx_slab_alloc_locked(ctx->shpool,
                                       sizeof(ngx_http_session_fail_node_t));
        }

        if (fn == NULL) {
            /*
             * Too small a zone to count: the lookup goes ahead.  Locking
             * every client out would be worse than the database's work.
             */
            goto done;
        }

        fn->minute = f->minute;
        fn->count = 0;
        ngx_http_session_shm_insert(&sh->fail, &fn->sn, f->key);

    } else {
        ngx_queue_remove(&fn->sn.queue);
        ngx_queue_insert_head(&sh->fail.lru, &fn->sn.queue);
    }

    switch (f->op) {

    case NGX_HTTP_SESSION_FAIL_CHECK:
        if (fn->minute >= f->minute) {
            f->minute = fn->minute;

            if (fn->count >= f->limit) {
                rc = NGX_BUSY;
            }
        }

        break;

    case NGX_HTTP_SESSION_FAIL_RESERVE:
        if (ngx_http_session_window_take(&fn->minute, &fn->count, &f->minute,
                                         f->limit, &remaining)
            != 0)
        {
            rc = NGX_BUSY;
        }

        break;

    case NGX_HTTP_SESSION_FAIL_ADD:
        if (fn->minute < f->minute) {
            fn->minute = f->minute;
            fn->count = 0;

        } else {
            f->minute = fn->minute;
        }

        if (fn->count < f->limit) {
            fn->count++;
        }

        break;

    default: /* NGX_HTTP_SESSION_FAIL_REFUND */
        if (fn->minute == f->minute && fn->count > 0) {
            fn->count--;
        }

        break;
    }

done:

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    return rc;
}


ngx_uint_t
ngx_http_session_rate_keys(ngx_shm_zone_t *zone)
{
    ngx_uint_t                    n;
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);
    n = ctx->sh->rate.n;
    ngx_shmtx_unlock(&ctx->shpool->mutex);

    return n;
}


/* the trees */

static ngx_http_session_shm_node_t *
ngx_http_session_shm_lookup(ngx_http_session_shm_tree_t *t, u_char *hash)
{
    ngx_int_t                     rc;
    ngx_rbtree_key_t              key;
    ngx_rbtree_node_t            *node, *sentinel;
    ngx_http_session_shm_node_t  *sn;

    key = ngx_http_session_key_tree_key(hash);

    node = t->rbtree.root;
    sentinel = t->rbtree.sentinel;

    while (node != sentinel) {

        if (key < node->key) {
            node = node->left;
            continue;
        }

        if (key > node->key) {
            node = node->right;
            continue;
        }

        sn = (ngx_http_session_shm_node_t *) node;

        rc = ngx_memcmp(hash, sn->hash, NGX_HTTP_SESSION_KEY_HASH_LEN);

        if (rc == 0) {
            return sn;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    return NULL;
}


static void
ngx_http_session_shm_insert(ngx_http_session_shm_tree_t *t,
    ngx_http_session_shm_node_t *sn, u_char *hash)
{
    ngx_memcpy(sn->hash, hash, NGX_HTTP_SESSION_KEY_HASH_LEN);
    sn->node.key = ngx_http_session_key_tree_key(hash);

    /*
     * The tree may have been made by another program (a binary upgrade
     * shares the zone): its insert function is this program's, set under
     * the mutex that every insert holds.
     */
    t->rbtree.insert = ngx_http_session_shm_insert_value;

    ngx_rbtree_insert(&t->rbtree, &sn->node);
    ngx_queue_insert_head(&t->lru, &sn->queue);
    t->n++;
}


static void
ngx_http_session_shm_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t            **p;
    ngx_http_session_shm_node_t   *sn, *snt;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            sn = (ngx_http_session_shm_node_t *) node;
            snt = (ngx_http_session_shm_node_t *) temp;

            p = (ngx_memcmp(sn->hash, snt->hash,
                            NGX_HTTP_SESSION_KEY_HASH_LEN) < 0)
                ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}


static void
ngx_http_session_shm_delete(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_shm_tree_t *t, ngx_http_session_shm_node_t *sn)
{
    ngx_queue_remove(&sn->queue);
    ngx_rbtree_delete(&t->rbtree, &sn->node);
    ngx_slab_free_locked(ctx->shpool, sn);
    t->n--;
}


/* frees up to n entries from the cold end of a tree; returns how many */

static ngx_uint_t
ngx_http_session_shm_evict(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_shm_tree_t *t, ngx_uint_t n)
{
    ngx_uint_t                    freed;
    ngx_queue_t                  *q;
    ngx_http_session_shm_node_t  *sn;

    freed = 0;

    while (freed < n && !ngx_queue_empty(&t->lru)) {
        q = ngx_queue_last(&t->lru);
        sn = ngx_queue_data(q, ngx_http_session_shm_node_t, queue);

        ngx_http_session_shm_delete(ctx, t, sn);
        freed++;
    }

    return freed;
}


ngx_http_session_stats_t *
ngx_http_session_shm_stats(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    return &ctx->sh->stats;
}


ngx_http_session_gauges_t *
ngx_http_session_shm_gauges(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    return ctx->sh->gauges;
}


void
ngx_http_session_shm_figures(ngx_shm_zone_t *zone,
    ngx_http_session_zone_figures_t *f)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    f->size = ctx->size;
    f->free = ctx->shpool->pfree * ngx_pagesize;
    f->auth_entries = ctx->sh->auth.n + ctx->sh->neg.n;
    f->seen = ctx->sh->seen.n;
    f->seen_forgotten = ctx->sh->seen_forgotten;
    f->keys = ctx->sh->rate.n;
    f->evictions = ctx->sh->evictions;

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}
