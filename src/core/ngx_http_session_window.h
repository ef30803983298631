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


#endif /* _NGX_HTTP_SESSION_WINDOW_H_INCLUDED_ */
