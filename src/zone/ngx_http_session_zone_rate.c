/*
 * Rate counters: checked and counted in one locked step, windows aligned
 * to the UTC minute (see ngx_http_session_zone_shm.h for the room they
 * take from the auth cache when the zone is full).
 */

#include "ngx_http_session_zone_rate.h"
#include "ngx_http_session_zone_shm.h"
#include "ngx_http_session_window.h"


static void ngx_http_session_rate_expire(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute);


/* rate counters */

ngx_int_t
ngx_http_session_rate_take(ngx_shm_zone_t *zone, u_char *hash,
    ngx_http_session_take_t *take)
{
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = ngx_http_session_zone_lock(zone);
    ngx_http_session_rate_take_locked(ctx, hash, take);
    ngx_http_session_zone_unlock(ctx);

    ngx_http_session_rate_alert(zone, take);

    return take->rc;
}


void
ngx_http_session_rate_take_locked(ngx_http_session_zone_ctx_t *ctx,
    u_char *hash, ngx_http_session_take_t *take)
{
    uint32_t                       minute, counted, remaining;
    ngx_uint_t                     evicted;
    ngx_http_session_zone_sh_t    *sh;
    ngx_http_session_counter_t    *c;
    ngx_http_session_rate_node_t  *rn;

    if (take->cluster) {
        ngx_http_session_lease_take_locked(ctx, hash, take);
        return;
    }

    sh = ctx->sh;
    minute = (uint32_t) ngx_http_session_window_minute(take->now);
    evicted = 0;
    take->evicted = 0;
    take->forgotten = 0;

    ngx_http_session_rate_expire(ctx, minute);

    rn = (ngx_http_session_rate_node_t *)
             ngx_http_session_zone_lookup(&sh->rate, hash);

    if (rn == NULL) {
        rn = ngx_slab_alloc_locked(ctx->shpool,
                                   sizeof(ngx_http_session_rate_node_t));

        /*
         * room is taken from the auth cache first, then from old keys;
         * never from the keys seen valid, which have a budget of their own
         */

        while (rn == NULL) {
            if (ngx_http_session_zone_evict(ctx, &sh->neg, 16) == 0
                && ngx_http_session_zone_evict(ctx, &sh->auth, 16) == 0)
            {
                if (ngx_http_session_zone_evict(ctx, &sh->rate, 1) == 0) {
                    break;
                }

                evicted++;
            }

            rn = ngx_slab_alloc_locked(ctx->shpool,
                                       sizeof(ngx_http_session_rate_node_t));
        }

        if (rn == NULL) {
            ngx_http_session_zone_evicted(sh, take, evicted);

            /* never let a key through unlimited */
            take->remaining = 0;
            take->rc = NGX_ERROR;
            return;
        }

        ngx_memzero(rn->counters, sizeof(rn->counters));
        ngx_http_session_zone_insert(&sh->rate, &rn->sn, hash);

    } else {
        ngx_http_session_zone_touch(&sh->rate, &rn->sn);
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

    ngx_http_session_zone_evicted(sh, take, evicted);
}


/* the ALERTs of a take, written once the mutex is released */

void
ngx_http_session_rate_alert(ngx_shm_zone_t *zone,
    ngx_http_session_take_t *take)
{
    if (take->rc == NGX_ERROR) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "session_limit_zone \"%V\" is too small to hold "
                      "one rate counter", &zone->shm.name);
    }

    ngx_http_session_zone_full_alert(zone, take->evicted, take->forgotten);
}


/* drops counters whose windows are all over, a few at a time */

static void
ngx_http_session_rate_expire(ngx_http_session_zone_ctx_t *ctx,
    uint32_t minute)
{
    ngx_uint_t                     n, i, live;
    ngx_http_session_rate_node_t  *rn;

    for (n = 0; n < 2; n++) {

        rn = (ngx_http_session_rate_node_t *)
                 ngx_http_session_zone_coldest(&ctx->sh->rate);
        if (rn == NULL) {
            return;
        }

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

        ngx_http_session_zone_delete(ctx, &ctx->sh->rate, &rn->sn);
    }
}


ngx_uint_t
ngx_http_session_rate_keys(ngx_shm_zone_t *zone)
{
    ngx_uint_t                    n;
    ngx_http_session_zone_ctx_t  *ctx;

    ctx = ngx_http_session_zone_lock(zone);
    n = ctx->sh->rate.n;
    ngx_http_session_zone_unlock(ctx);

    return n;
}
