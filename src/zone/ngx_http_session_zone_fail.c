/*
 * Failed lookups per client address and minute: the window moves forward
 * only, as for rate counters; unknown keys of the auth cache give way
 * first when the zone is full, then the least recent address.
 */

#include "ngx_http_session_zone_fail.h"
#include "ngx_http_session_zone_shm.h"


/* failed lookups per client address and minute */

ngx_int_t
ngx_http_session_auth_fail(ngx_shm_zone_t *zone, ngx_http_session_fail_t *f)
{
    ngx_int_t                      rc;
    ngx_uint_t                     n;
    ngx_http_session_zone_sh_t    *sh;
    ngx_http_session_zone_ctx_t   *ctx;
    ngx_http_session_fail_node_t  *fn;

    rc = NGX_OK;

    ctx = ngx_http_session_zone_lock(zone);
    sh = ctx->sh;

    /* addresses whose minute is over, a few at a time */

    for (n = 0; n < 2; n++) {
        fn = (ngx_http_session_fail_node_t *)
                 ngx_http_session_zone_coldest(&sh->fail);

        if (fn == NULL || fn->minute >= f->minute) {
            break;
        }

        ngx_http_session_zone_delete(ctx, &sh->fail, &fn->sn);
    }

    fn = (ngx_http_session_fail_node_t *)
             ngx_http_session_zone_lookup(&sh->fail, f->key);

    if (fn == NULL) {
        if (f->op == NGX_HTTP_SESSION_FAIL_CHECK
            || f->op == NGX_HTTP_SESSION_FAIL_REFUND)
        {
            /* no failure this minute, or the lookup's minute is gone */
            goto done;
        }

        fn = ngx_slab_alloc_locked(ctx->shpool,
                                   sizeof(ngx_http_session_fail_node_t));

        /* unknown keys give way first, then the least recent address */

        if (fn == NULL
            && (ngx_http_session_zone_evict(ctx, &sh->neg, 16) != 0
                || ngx_http_session_zone_evict(ctx, &sh->fail, 1) != 0))
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
        fn->pending = 0;
        ngx_http_session_zone_insert(&sh->fail, &fn->sn, f->key);

    } else {
        ngx_http_session_zone_touch(&sh->fail, &fn->sn);
    }

    /* a new minute: nothing failed and nothing is under way in it yet */

    if (fn->minute < f->minute) {
        fn->minute = f->minute;
        fn->count = 0;
        fn->pending = 0;

    } else {
        f->minute = fn->minute;
    }

    /* a lookup under way ends (one of an earlier minute went with it) */

    if ((f->op == NGX_HTTP_SESSION_FAIL_CONFIRM
         || f->op == NGX_HTTP_SESSION_FAIL_REFUND)
        && fn->minute == f->since && fn->pending > 0)
    {
        fn->pending--;
    }

    switch (f->op) {

    case NGX_HTTP_SESSION_FAIL_CHECK:
        if (fn->count >= f->limit) {
            rc = NGX_BUSY;
        }

        break;

    case NGX_HTTP_SESSION_FAIL_RESERVE:
        if (fn->count >= f->limit) {
            rc = NGX_BUSY;

        } else if (fn->count + fn->pending >= f->limit) {
            rc = NGX_AGAIN;

        } else {
            fn->pending++;
        }

        break;

    case NGX_HTTP_SESSION_FAIL_COUNT:
        if (fn->count >= f->limit) {
            rc = NGX_BUSY;

        } else {
            fn->count++;
        }

        break;

    case NGX_HTTP_SESSION_FAIL_ADD:
    case NGX_HTTP_SESSION_FAIL_CONFIRM:
        if (fn->count < f->limit) {
            fn->count++;
        }

        break;

    default: /* NGX_HTTP_SESSION_FAIL_REFUND */
        break;
    }

done:

    ngx_http_session_zone_unlock(ctx);

    return rc;
}
