/*
 * Fixed one-minute rate-limit windows aligned to the UTC minute.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_WINDOW_H_INCLUDED_
#define _NGX_HTTP_SESSION_WINDOW_H_INCLUDED_


#include <stdint.h>
#include <time.h>


#define NGX_HTTP_SESSION_WINDOW_SECONDS  60


/* the window that holds the instant, as its start in epoch seconds */
time_t ngx_http_session_window_start(time_t now);

/*
 * The window's number, minutes since the epoch (window_start / 60).
 * Inline: the counter check under the zone mutex needs it every time.
 */
static inline int64_t
ngx_http_session_window_minute(time_t now)
{
    /* C rounds towards zero: an instant before 1970 in its own minute */
    return (now >= 0) ? (int64_t) now / NGX_HTTP_SESSION_WINDOW_SECONDS
                      : ((int64_t) now - (NGX_HTTP_SESSION_WINDOW_SECONDS - 1))
                        / NGX_HTTP_SESSION_WINDOW_SECONDS;
}

/* X-RateLimit-Reset: the epoch second at which the window ends */
time_t ngx_http_session_window_reset(time_t now);

/*
 * Retry-After: whole seconds from now (given to the millisecond) to the
 * window's end, rounded up, at least 1.
 */
unsigned ngx_http_session_window_retry_after(time_t sec, unsigned msec);

/*
 * One request against a stored counter (*minute, *count) of a window of
 * limit requests, by a worker whose clock says *now_minute.  The window
 * only moves forward: a counter of an older minute starts again at zero,
 * but one of a newer minute (written by a worker whose cached clock is
 * ahead of this one's) is kept and counted against, and *now_minute
 * becomes that minute, so that the answer's figures describe the window
 * the request was counted in.  A refused request is not counted.
 * Returns 0 and *remaining (what is left after this request) when the
 * request is admitted, -1 and *remaining 0 when it is over the limit.
 */
int ngx_http_session_window_take(uint32_t *minute, uint32_t *count,
    uint32_t *now_minute, uint32_t limit, uint32_t *remaining);


#endif /* _NGX_HTTP_SESSION_WINDOW_H_INCLUDED_ */
