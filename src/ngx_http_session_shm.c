/*
 * Shared memory: an rbtree keyed by the key hash plus an LRU queue, in
 * the slab pool of session_limit_zone, every access under the pool mutex.
 */

#include "ngx_http_session_shm.h"


typedef struct {
    ngx_rbtree_t                  auth_rbtree;
    ngx_rbtree_node_t             auth_sentinel;
    ngx_queue_t                   auth_lru;
    /* bumped by every invalidation */
    ngx_uint_t                    auth_generation;
} ngx_http_session_shm_t;


typedef struct {
    ngx_http_session_shm_t       *sh;
    ngx_slab_pool_t              *shpool;
    size_t                        size;
} ngx_http_session_zone_ctx_t;


typedef struct {
    ngx_rbtree_node_t             node;
    ngx_queue_t                   queue;
    ngx_msec_t                    expires;
    ngx_uint_t                    status;
    ngx_http_session_principal_t  principal;
} ngx_http_session_auth_node_t;


static ngx_int_t ngx_http_session_shm_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_session_auth_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_http_session_auth_node_t *ngx_http_session_auth_lookup(
    ngx_http_session_shm_t *sh, u_char *hash);
static void ngx_http_session_auth_delete(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_auth_node_t *an);
static ngx_uint_t ngx_http_session_auth_expire(
    ngx_http_session_zone_ctx_t *ctx, ngx_uint_t n);


ngx_shm_zone_t *
ngx_http_session_shm_add(ngx_conf_t *cf, ngx_str_t *name, size_t size)
{
    ngx_shm_zone_t               *shm_zone;
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_session_zone_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->size = size;

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

    size_t                        len;
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = shm_zone->data;

    if (octx) {
        /* a reload: keep the cache and the counters */
        ctx->sh = octx->sh;
        ctx->shpool = octx->shpool;
        return NGX_OK;
    }

    ctx->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    ctx->sh = ngx_slab_alloc(ctx->shpool, sizeof(ngx_http_session_shm_t));
    if (ctx->sh == NULL) {
        return NGX_ERROR;
    }

    ctx->shpool->data = ctx->sh;

    ngx_rbtree_init(&ctx->sh->auth_rbtree, &ctx->sh->auth_sentinel,
                    ngx_http_session_auth_insert_value);
    ngx_queue_init(&ctx->sh->auth_lru);
    ctx->sh->auth_generation = 0;

    len = sizeof(" in session_limit_zone \"\"") + shm_zone->shm.name.len;

    ctx->shpool->log_ctx = ngx_slab_alloc(ctx->shpool, len);
    if (ctx->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(ctx->shpool->log_ctx, " in session_limit_zone \"%V\"%Z",
                &shm_zone->shm.name);

    ctx->shpool->log_nomem = 0;

    return NGX_OK;
}


ngx_int_t
ngx_http_session_auth_cache_get(ngx_shm_zone_t *zone,
    ngx_http_session_principal_t *p, ngx_uint_t *generation)
{
    ngx_int_t                      rc;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    *generation = ctx->sh->auth_generation;

    an = ngx_http_session_auth_lookup(ctx->sh, p->hash);

    if (an == NULL) {
        rc = NGX_DECLINED;

    } else if ((ngx_msec_int_t) (an->expires - ngx_current_msec) <= 0) {
        ngx_http_session_auth_delete(ctx, an);
        rc = NGX_DECLINED;

    } else {
        ngx_queue_remove(&an->queue);
        ngx_queue_insert_head(&ctx->sh->auth_lru, &an->queue);

        ngx_memcpy(p->project_id, an->principal.project_id,
                   NGX_HTTP_SESSION_UUID_LEN);
        ngx_memcpy(p->account_id, an->principal.account_id,
                   NGX_HTTP_SESSION_UUID_LEN);
        rc = an->status;
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    return rc;
}


void
ngx_http_session_auth_cache_put(ngx_shm_zone_t *zone,
    ngx_http_session_principal_t *p, ngx_uint_t status, ngx_msec_t ttl,
    ngx_uint_t generation)
{
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    if (ttl == 0) {
        return;
    }

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    if (ctx->sh->auth_generation != generation) {
        goto done;
    }

    an = ngx_http_session_auth_lookup(ctx->sh, p->hash);

    if (an == NULL) {
        an = ngx_slab_alloc_locked(ctx->shpool,
                                   sizeof(ngx_http_session_auth_node_t));

        if (an == NULL && ngx_http_session_auth_expire(ctx, 16)) {
            an = ngx_slab_alloc_locked(ctx->shpool,
                                       sizeof(ngx_http_session_auth_node_t));
        }

        if (an == NULL) {
            /* a cache: going without is slower, never wrong */
            goto done;
        }

        ngx_memcpy(an->principal.hash, p->hash,
                   NGX_HTTP_SESSION_KEY_HASH_LEN);
        an->node.key = ((ngx_rbtree_key_t) p->hash[0] << 24)
                       | ((ngx_rbtree_key_t) p->hash[1] << 16)
                       | ((ngx_rbtree_key_t) p->hash[2] << 8)
                       | (ngx_rbtree_key_t) p->hash[3];

        ngx_rbtree_insert(&ctx->sh->auth_rbtree, &an->node);

    } else {
        ngx_queue_remove(&an->queue);
    }

    ngx_queue_insert_head(&ctx->sh->auth_lru, &an->queue);

    an->status = status;
    an->expires = ngx_current_msec + ttl;
    ngx_memcpy(an->principal.project_id, p->project_id,
               NGX_HTTP_SESSION_UUID_LEN);
    ngx_memcpy(an->principal.account_id, p->account_id,
               NGX_HTTP_SESSION_UUID_LEN);

done:

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


void
ngx_http_session_auth_cache_drop_key(ngx_shm_zone_t *zone, u_char *hash)
{
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    ctx->sh->auth_generation++;

    an = ngx_http_session_auth_lookup(ctx->sh, hash);
    if (an) {
        ngx_http_session_auth_delete(ctx, an);
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


void
ngx_http_session_auth_cache_drop_account(ngx_shm_zone_t *zone,
    u_char *account_id)
{
    ngx_queue_t                   *q, *next;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_auth_node_t  *an;

    ctx = zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    ctx->sh->auth_generation++;

    for (q = ngx_queue_head(&ctx->sh->auth_lru);
         q != ngx_queue_sentinel(&ctx->sh->auth_lru);
         q = next)
    {
        next = ngx_queue_next(q);
        an = ngx_queue_data(q, ngx_http_session_auth_node_t, queue);

        if (ngx_memcmp(an->principal.account_id, account_id,
                       NGX_HTTP_SESSION_UUID_LEN)
            == 0)
        {
            ngx_http_session_auth_delete(ctx, an);
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

    (void) ngx_http_session_auth_expire(ctx, (ngx_uint_t) -1);

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


static ngx_http_session_auth_node_t *
ngx_http_session_auth_lookup(ngx_http_session_shm_t *sh, u_char *hash)
{
    ngx_rbtree_key_t               key;
    ngx_rbtree_node_t             *node, *sentinel;
    ngx_http_session_auth_node_t  *an;

    key = ((ngx_rbtree_key_t) hash[0] << 24)
          | ((ngx_rbtree_key_t) hash[1] << 16)
          | ((ngx_rbtree_key_t) hash[2] << 8)
          | (ngx_rbtree_key_t) hash[3];

    node = sh->auth_rbtree.root;
    sentinel = sh->auth_rbtree.sentinel;

    while (node != sentinel) {

        if (key < node->key) {
            node = node->left;
            continue;
        }

        if (key > node->key) {
            node = node->right;
            continue;
        }

        an = (ngx_http_session_auth_node_t *) node;

        if (ngx_http_session_equal(hash, an->principal.hash,
                                   NGX_HTTP_SESSION_KEY_HASH_LEN))
        {
            return an;
        }

        node = (ngx_memcmp(hash, an->principal.hash,
                           NGX_HTTP_SESSION_KEY_HASH_LEN) < 0)
               ? node->left : node->right;
    }

    return NULL;
}


static void
ngx_http_session_auth_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t            **p;
    ngx_http_session_auth_node_t  *an, *ant;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            an = (ngx_http_session_auth_node_t *) node;
            ant = (ngx_http_session_auth_node_t *) temp;

            p = (ngx_memcmp(an->principal.hash, ant->principal.hash,
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
ngx_http_session_auth_delete(ngx_http_session_zone_ctx_t *ctx,
    ngx_http_session_auth_node_t *an)
{
    ngx_queue_remove(&an->queue);
    ngx_rbtree_delete(&ctx->sh->auth_rbtree, &an->node);
    ngx_slab_free_locked(ctx->shpool, an);
}


/* frees up to n entries from the cold end; returns how many */

static ngx_uint_t
ngx_http_session_auth_expire(ngx_http_session_zone_ctx_t *ctx, ngx_uint_t n)
{
    ngx_uint_t                     freed;
    ngx_queue_t                   *q;
    ngx_http_session_auth_node_t  *an;

    freed = 0;

    while (freed < n && !ngx_queue_empty(&ctx->sh->auth_lru)) {
        q = ngx_queue_last(&ctx->sh->auth_lru);
        an = ngx_queue_data(q, ngx_http_session_auth_node_t, queue);

        ngx_http_session_auth_delete(ctx, an);
        freed++;
    }

    return freed;
}
