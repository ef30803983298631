/*
 * Reconnection delays: the base doubles from BACKOFF_MIN to BACKOFF_MAX
 * with every failure in a row, and the delay waited is drawn from its
 * upper half ("equal jitter"): never less than half the base, so that the
 * schedule still backs off, never more than the base, so that the time
 * to notice a server that is back stays bounded by BACKOFF_MAX.  A
 * request that finds every connection waiting may cut a refused
 * connection's wait short, once per BACKOFF_EARLY per worker, so that a
 * server that is back is noticed within about BACKOFF_EARLY under load.
 */

#include "ngx_http_session_backoff.h"


uint32_t
ngx_http_session_backoff_next(uint32_t base, uint64_t up)
{
    if (base == 0 || up >= NGX_HTTP_SESSION_BACKOFF_STABLE) {
        return NGX_HTTP_SESSION_BACKOFF_MIN;
    }

    if (base >= NGX_HTTP_SESSION_BACKOFF_MAX / 2) {
        return NGX_HTTP_SESSION_BACKOFF_MAX;
    }

    return base * 2;
}


uint32_t
ngx_http_session_backoff_delay(uint32_t base, uint32_t rnd)
{
    uint32_t  half;

    half = base / 2;

    return (base - half) + rnd % (half + 1);
}


int
ngx_http_session_backoff_early(uint64_t since, int refused)
{
    return refused && since >= NGX_HTTP_SESSION_BACKOFF_EARLY;
}
