/*
 * session_limit_zone: made (or taken over from a reload, or from the
 * previous binary after a binary upgrade), and the trees that the other
 * files of this folder keep in it (see ngx_http_session_zone_shm.h).
 */

#include "ngx_http_session_zone.h"
#include "ngx_http_session_zone_shm.h"
#include "ngx_http_session_handover.h"
#include "ngx_http_session_window.h"


static ngx_int_t ngx_http_session_zone_init(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_session_zone_layout(
    ngx_http_session_handover_layout_t *layout);
static void ngx_http_session_zone_cleanup(void *data);
static void ngx_http_session_zone_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);


ngx_shm_zone_t *
ngx_http_session_zone_add(ngx_conf_t *cf, ngx_str_t *name, size_t size)
{
    ngx_uint_t                    i;
    ngx_list_t                   *zones;
    ngx_shm_zone_t               *shm_zone, *oshm_zone;
    ngx_list_part_t              *part;
    ngx_pool_cleanup_t           *cln;
    ngx_http_session_zone_ctx_t  *ctx;

    /*
     * nginx would silently give a resized zone fresh memory on reload and
     * every counter would restart at zero: refuse the reload instead.
     */

    zones = &cf->cycle->old_cycle->shared_memory;
    part = &zones->part;
    i = 0;

    while ((oshm_zone = ngx_http_session_list_next(zones, &part, &i))
           != NULL)
    {

        if (oshm_zone->tag == &ngx_http_session_module
            && oshm_zone->shm.name.len == name->len
            && ngx_strncmp(oshm_zone->shm.name.data, name->data, name->len)
               == 0
            && oshm_zone->shm.size != size)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "session_limit_zone \"%V\" cannot change "
                               "size from %uz to %uz on reload, restart "
                               "nginx to resize it",
                               name, oshm_zone->shm.size, size);
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

    cln->handler = ngx_http_session_zone_cleanup;
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

    shm_zone->init = ngx_http_session_zone_init;
    shm_zone->data = ctx;

    return shm_zone;
}


static ngx_int_t
ngx_http_session_zone_init(ngx_shm_zone_t *shm_zone, void *data)
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

    ngx_http_session_zone_layout(&layout);

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

    ctx->sh = ngx_slab_calloc(ctx->shpool, sizeof(ngx_http_session_zone_sh_t));
    if (ctx->sh == NULL) {
        return NGX_ERROR;
    }

    ctx->shpool->data = ctx->sh;

    ctx->sh->stats.started = ngx_time();

    ngx_http_session_zone_tree_init(&ctx->sh->auth);
    ngx_http_session_zone_tree_init(&ctx->sh->neg);
    ngx_http_session_zone_tree_init(&ctx->sh->rate);
    ngx_http_session_zone_tree_init(&ctx->sh->fail);
    ngx_http_session_zone_tree_init(&ctx->sh->seen);
    ngx_http_session_zone_tree_init(&ctx->sh->lease);

    /*
     * This node in the database's lease rows (session_limit_scope
     * cluster): it needs only to differ from the other nodes'.  A reload
     * and a binary upgrade keep the zone, and so the id.
     */
    ctx->sh->node_id = ((((uint64_t) ngx_random() << 31) ^ ngx_random())
                        ^ ((uint64_t) ngx_pid << 40)
                        ^ ((uint64_t) ngx_time() << 12)
                        ^ (uint64_t) (uintptr_t) ctx->shpool)
                       & 0x7fffffffffffffffULL;

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
ngx_http_session_zone_layout(ngx_http_session_handover_layout_t *layout)
{
    ngx_memzero(layout, sizeof(ngx_http_session_handover_layout_t));

    layout->v[0] = NGX_HTTP_SESSION_ZONE_LAYOUT;
    layout->v[1] = sizeof(ngx_http_session_zone_sh_t);
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
    layout->v[13] = sizeof(ngx_http_session_lease_node_t);
}


static void
ngx_http_session_zone_cleanup(void *data)
{
    ngx_http_session_zone_ctx_t  *ctx = data;

    if (ctx->mfd && --ctx->mfd->refs == 0) {
        (void) close(ctx->mfd->fd);
        ngx_free(ctx->mfd);
    }

    ctx->mfd = NULL;
}


/* the trees */

void
ngx_http_session_zone_tree_init(ngx_http_session_zone_tree_t *t)
{
    ngx_rbtree_init(&t->rbtree, &t->sentinel,
                    ngx_http_session_zone_insert_value);
    ngx_queue_init(&t->lru);
    t->n = 0;
}


/* the trees */

ngx_http_session_zone_node_t *
ngx_http_session_zone_lookup(ngx_http_session_zone_tree_t *t, u_char *hash)
{
    ngx_int_t                      rc;
    ngx_rbtree_key_t               key;
    ngx_rbtree_node_t             *node, *sentinel;
    ngx_http_session_zone_node_t  *sn;

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

        sn = (ngx_http_session_zone_node_t *) node;

        rc = ngx_memcmp(hash, sn->hash, NGX_HTTP_SESSION_KEY_HASH_LEN);

        if (rc == 0) {
            return sn;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    return NULL;
}


void
ngx_http_session_zone_insert(ngx_http_session_zone_tree_t *t,
    ngx_http_session_zone_node_t *sn, u_char *hash)
{
    ngx_memcpy(sn->hash, hash, NGX_HTTP_SESSION_KEY_HASH_LEN);
    sn->node.key = ngx_http_session_key_tree_key(hash);

    /*
     * The tree may have been made by another program (a binary upgrade
     * shares the zone): its insert function is this program's, set under
     * the mutex that every insert holds.
     */
    t->rbtree.insert = ngx_http_session_zone_insert_value;

    ngx_rbtree_insert(&t->rbtree, &sn->node);
    ngx_queue_insert_head(&t->lru, &sn->queue);
    t->n++;
}


static void
ngx_http_session_zone_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t            **p;
    ngx_http_session_zone_node_t  *sn, *snt;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            sn = (ngx_http_session_zone_node_t *) node;
            snt = (ngx_http_session_zone_node_t *) temp;

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


void
ngx_http_session_zone_delete(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, ngx_http_session_zone_node_t *sn)
{
    ngx_queue_remove(&sn->queue);
    ngx_rbtree_delete(&t->rbtree, &sn->node);
    ngx_slab_free_locked(ctx->shpool, sn);
    t->n--;
}


ngx_uint_t
ngx_http_session_zone_evict(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, ngx_uint_t n)
{
    ngx_uint_t                     freed;
    ngx_http_session_zone_node_t  *sn;

    for (freed = 0; freed < n; freed++) {
        sn = ngx_http_session_zone_coldest(t);
        if (sn == NULL) {
            break;
        }

        ngx_http_session_zone_delete(ctx, t, sn);
    }

    return freed;
}


/* an entry just used: to the hot end of its tree's LRU */

void
ngx_http_session_zone_touch(ngx_http_session_zone_tree_t *t,
    ngx_http_session_zone_node_t *sn)
{
    ngx_queue_remove(&sn->queue);
    ngx_queue_insert_head(&t->lru, &sn->queue);
}


/* deletes the entry of hash, if there is one */

void
ngx_http_session_zone_drop(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_zone_tree_t *t, u_char *hash)
{
    ngx_http_session_zone_node_t  *sn;

    sn = ngx_http_session_zone_lookup(t, hash);

    if (sn) {
        ngx_http_session_zone_delete(ctx, t, sn);
    }
}


/* the least recently used entry of a tree, NULL when it is empty */

ngx_http_session_zone_node_t *
ngx_http_session_zone_coldest(ngx_http_session_zone_tree_t *t)
{
    ngx_queue_t  *q;

    if (ngx_queue_empty(&t->lru)) {
        return NULL;
    }

    q = ngx_queue_last(&t->lru);

    return ngx_queue_data(q, ngx_http_session_zone_node_t, queue);
}


/* the evictions of a take, under the mutex: counted, and said */

void
ngx_http_session_zone_evicted(ngx_http_session_zone_sh_t *sh,
    ngx_http_session_take_t *take, ngx_uint_t evicted)
{
    sh->evictions += evicted;

    ngx_http_session_zone_full(sh, &take->evicted, &take->forgotten);
}


/*
 * One ALERT a second says that the zone is full, with every counter
 * evicted and every key seen valid forgotten since the last one, under
 * the mutex: whichever of the two finds the second free says both.  Each
 * on its own would starve the other: a fill in which the same one comes
 * first in every second would never say the other.  Sets evicted and
 * forgotten, 0 and 0 when nothing is to be said.
 */

void
ngx_http_session_zone_full(ngx_http_session_zone_sh_t *sh,
    ngx_uint_t *evicted, ngx_uint_t *forgotten)
{
    time_t  now;

    *evicted = 0;
    *forgotten = 0;

    now = ngx_time();

    if (sh->last_full_alert == now
        || (sh->evictions == sh->evictions_alerted
            && sh->seen_forgotten == sh->seen_alerted))
    {
        return;
    }

    sh->last_full_alert = now;

    *evicted = sh->evictions - sh->evictions_alerted;
    *forgotten = sh->seen_forgotten - sh->seen_alerted;

    sh->evictions_alerted = sh->evictions;
    sh->seen_alerted = sh->seen_forgotten;
}


/* the ALERT that ngx_http_session_zone_full() asked for, after the mutex */

void
ngx_http_session_zone_full_alert(ngx_shm_zone_t *zone, ngx_uint_t evicted,
    ngx_uint_t forgotten)
{
    if (evicted && forgotten) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "session_limit_zone \"%V\" is full: evicted the "
                      "counters of %ui least recently used keys and forgot "
                      "%ui keys found valid within the last hour, make the "
                      "zone larger", &zone->shm.name, evicted, forgotten);

    } else if (evicted) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "session_limit_zone \"%V\" is full: evicted the "
                      "counters of %ui least recently used keys, make the "
                      "zone larger", &zone->shm.name, evicted);

    } else if (forgotten) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "session_limit_zone \"%V\" is full: forgot %ui keys "
                      "found valid within the last hour, make the zone "
                      "larger", &zone->shm.name, forgotten);
    }
}


/* what session_status reads */

ngx_http_session_stats_t *
ngx_http_session_zone_stats(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    return &ctx->sh->stats;
}


ngx_http_session_gauges_t *
ngx_http_session_zone_gauges(ngx_shm_zone_t *zone)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = zone->data;

    return ctx->sh->gauges;
}


void
ngx_http_session_zone_figures(ngx_shm_zone_t *zone,
    ngx_http_session_zone_figures_t *f)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = ngx_http_session_zone_lock(zone);

    f->size = ctx->size;
    f->free = ctx->shpool->pfree * ngx_pagesize;
    f->auth_entries = ctx->sh->auth.n + ctx->sh->neg.n;
    f->seen = ctx->sh->seen.n;
    f->seen_forgotten = ctx->sh->seen_forgotten;
    f->keys = ctx->sh->rate.n + ctx->sh->lease.n;
    f->evictions = ctx->sh->evictions;
    f->lease_held = ctx->sh->lease_held;

    ngx_http_session_zone_unlock(ctx);
}
