/*
 * The auth cache: known keys (valid or suspended) and unknown keys, each
 * tree with its budget, and the keys seen valid within the hour, which
 * outlive their cached answers (see ngx_http_session_zone_shm.h).
 */

#include "ngx_http_session_zone_auth.h"
#include "ngx_http_session_zone_shm.h"


static void *ngx_http_session_auth_entry(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, u_char *hash, size_t size,
    ngx_uint_t known);
static void *ngx_http_session_auth_alloc(ngx_http_session_zone_ctx_t *ctx,
    size_t size, ngx_uint_t known);
static ngx_int_t ngx_http_session_auth_seen(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash);
static void ngx_http_session_auth_seen_keep(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_msec_t ttl);
static ngx_uint_t ngx_http_session_auth_seen_evict(
    ngx_http_session_zone_ctx_t *ctx);
static ngx_http_session_zone_ctx_t *ngx_http_session_auth_cache_change(
    ngx_shm_zone_t *zone);


/* the auth cache */

ngx_int_t
ngx_http_session_auth_cache_get(ngx_shm_zone_t *zone,
    ngx_http_session_principal_t *p, ngx_uint_t *generation,
    ngx_http_session_take_t *take)
{
    ngx_int_t                      rc;
    ngx_http_session_zone_sh_t    *sh;
    ngx_http_session_neg_node_t   *nn;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = ngx_http_session_zone_lock(zone);
    sh = ctx->sh;

    *generation = sh->auth_generation;

    an = (ngx_http_session_auth_node_t *)
             ngx_http_session_zone_lookup(&sh->auth, p->hash);

    if (an == NULL) {
        nn = (ngx_http_session_neg_node_t *)
                 ngx_http_session_zone_lookup(&sh->neg, p->hash);

        if (nn == NULL) {
            rc = ngx_http_session_auth_seen(ctx, p->hash);

        } else if ((ngx_msec_int_t) (nn->expires - ngx_current_msec) <= 0) {
            ngx_http_session_zone_delete(ctx, &sh->neg, &nn->sn);
            rc = ngx_http_session_auth_seen(ctx, p->hash);

        } else {
            ngx_http_session_zone_touch(&sh->neg, &nn->sn);
            rc = NGX_HTTP_SESSION_AUTH_INVALID;
        }

    } else if ((ngx_msec_int_t) (an->expires - ngx_current_msec) <= 0) {
        ngx_http_session_zone_delete(ctx, &sh->auth, &an->sn);
        rc = ngx_http_session_auth_seen(ctx, p->hash);

    } else {
        ngx_http_session_zone_touch(&sh->auth, &an->sn);

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

    ngx_http_session_zone_unlock(ctx);

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
    ngx_uint_t                     evicted, forgotten;
    ngx_http_session_zone_sh_t    *sh;
    ngx_http_session_neg_node_t   *nn;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = ngx_http_session_zone_lock(zone);
    sh = ctx->sh;

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
        ngx_http_session_zone_drop(ctx, &sh->seen, p->hash);
    }

    if (sh->auth_generation != generation || ttl == 0) {
        goto done;
    }

    if (status == NGX_HTTP_SESSION_AUTH_INVALID) {

        /* a key that was known and is no more (deleted) */

        ngx_http_session_zone_drop(ctx, &sh->auth, p->hash);

        nn = ngx_http_session_auth_entry(ctx, &sh->neg, p->hash,
                                         sizeof(ngx_http_session_neg_node_t),
                                         0);
        if (nn) {
            nn->expires = ngx_current_msec + ttl;
        }

        goto done;
    }

    ngx_http_session_zone_drop(ctx, &sh->neg, p->hash);

    an = ngx_http_session_auth_entry(ctx, &sh->auth, p->hash,
                                     sizeof(ngx_http_session_auth_node_t), 1);
    if (an == NULL) {
        goto done;
    }

    an->status = status;
    an->expires = ngx_current_msec + ttl;
    ngx_memcpy(an->project_id, p->project_id, NGX_HTTP_SESSION_UUID_LEN);
    ngx_memcpy(an->account_id, p->account_id, NGX_HTTP_SESSION_UUID_LEN);
    ngx_memcpy(an->key_id, p->key_id, NGX_HTTP_SESSION_UUID_LEN);
    an->plan = p->plan;
    an->quota = p->quota;

done:

    ngx_http_session_zone_full(sh, &evicted, &forgotten);

    ngx_http_session_zone_unlock(ctx);

    ngx_http_session_zone_full_alert(zone, evicted, forgotten);
}


/*
 * The entry of hash in a cache tree, at the hot end; made if there is
 * none, of size bytes with room as ngx_http_session_auth_alloc() makes it
 * (unknown keys, known 0, also keep to their budget).  NULL without room:
 * a cache, going without is slower, never wrong.
 */

static void *
ngx_http_session_auth_entry(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, u_char *hash, size_t size,
    ngx_uint_t known)
{
    ngx_http_session_zone_node_t  *sn;

    sn = ngx_http_session_zone_lookup(t, hash);

    if (sn) {
        ngx_http_session_zone_touch(t, sn);
        return sn;
    }

    if (!known && t->n >= ctx->sh->neg_max) {
        (void) ngx_http_session_zone_evict(ctx, t, 1);
    }

    sn = ngx_http_session_auth_alloc(ctx, size, known);

    if (sn) {
        ngx_http_session_zone_insert(t, sn, hash);
    }

    return sn;
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
        && ngx_http_session_zone_evict(ctx, &ctx->sh->neg, 16) != 0)
    {
        p = ngx_slab_alloc_locked(ctx->shpool, size);
    }

    if (p == NULL
        && known
        && ngx_http_session_zone_evict(ctx, &ctx->sh->auth, 16) != 0)
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
             ngx_http_session_zone_lookup(&ctx->sh->seen, hash);

    if (vn == NULL) {
        return NGX_DECLINED;
    }

    if ((ngx_msec_int_t) (vn->expires - ngx_current_msec) <= 0) {
        ngx_http_session_zone_delete(ctx, &ctx->sh->seen, &vn->sn);
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
    ngx_http_session_zone_sh_t    *sh;
    ngx_http_session_seen_node_t  *vn;

    sh = ctx->sh;

    /* keys whose hour is over, a few at a time */

    for (n = 0; n < 2; n++) {
        vn = (ngx_http_session_seen_node_t *)
                 ngx_http_session_zone_coldest(&sh->seen);

        if (vn == NULL
            || (ngx_msec_int_t) (vn->expires - ngx_current_msec) > 0)
        {
            break;
        }

        ngx_http_session_zone_delete(ctx, &sh->seen, &vn->sn);
    }

    vn = (ngx_http_session_seen_node_t *)
             ngx_http_session_zone_lookup(&sh->seen, hash);

    if (vn) {
        ngx_http_session_zone_touch(&sh->seen, &vn->sn);

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

        ngx_http_session_zone_insert(&sh->seen, &vn->sn, hash);
    }

    vn->expires = ngx_current_msec + ttl + NGX_HTTP_SESSION_AUTH_SEEN_TIME;
}


/*
 * Frees the key found valid least recently, counted as forgotten unless
 * its hour was over anyway; 0 when there is none.
 */

static ngx_uint_t
ngx_http_session_auth_seen_evict(ngx_http_session_zone_ctx_t *ctx)
{
    ngx_http_session_seen_node_t  *vn;

    vn = (ngx_http_session_seen_node_t *)
             ngx_http_session_zone_coldest(&ctx->sh->seen);
    if (vn == NULL) {
        return 0;
    }

    if ((ngx_msec_int_t) (vn->expires - ngx_current_msec) > 0) {
        ctx->sh->seen_forgotten++;
    }

    ngx_http_session_zone_delete(ctx, &ctx->sh->seen, &vn->sn);

    return 1;
}


void
ngx_http_session_auth_cache_drop_key(ngx_shm_zone_t *zone, u_char *hash)
{
    ngx_http_session_zone_sh_t   *sh;
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = ngx_http_session_auth_cache_change(zone);
    sh = ctx->sh;

    ngx_http_session_zone_drop(ctx, &sh->auth, hash);
    ngx_http_session_zone_drop(ctx, &sh->neg, hash);

    /* deleted: its failures count again (docs/api.md §10) */

    ngx_http_session_zone_drop(ctx, &sh->seen, hash);

    ngx_http_session_zone_unlock(ctx);
}


void
ngx_http_session_auth_cache_drop_account(ngx_shm_zone_t *zone,
    u_char *account_id)
{
    ngx_queue_t                   *q, *next;
    ngx_http_session_zone_sh_t    *sh;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = ngx_http_session_auth_cache_change(zone);
    sh = ctx->sh;

    for (q = ngx_queue_head(&sh->auth.lru);
         q != ngx_queue_sentinel(&sh->auth.lru);
         q = next)
    {
        next = ngx_queue_next(q);
        an = ngx_queue_data(q, ngx_http_session_auth_node_t, sn.queue);

        if (ngx_memcmp(an->account_id, account_id, NGX_HTTP_SESSION_UUID_LEN)
            == 0)
        {
            ngx_http_session_zone_delete(ctx, &sh->auth, &an->sn);
        }
    }

    ngx_http_session_zone_unlock(ctx);
}


void
ngx_http_session_auth_cache_flush(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = ngx_http_session_auth_cache_change(zone);

    (void) ngx_http_session_zone_evict(ctx, &ctx->sh->auth, (ngx_uint_t) -1);
    (void) ngx_http_session_zone_evict(ctx, &ctx->sh->neg, (ngx_uint_t) -1);

    ngx_http_session_zone_unlock(ctx);
}


/*
 * Locks the zone for a change of the cache, which the caller unlocks: a
 * lookup that began before it does not cache its answer after it (the
 * generation moves on)
 */

static ngx_http_session_zone_ctx_t *
ngx_http_session_auth_cache_change(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = ngx_http_session_zone_lock(zone);

    ctx->sh->auth_generation++;

    return ctx;
}
