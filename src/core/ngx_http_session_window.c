/*
 * Rate-limit window arithmetic.
 */

#include "ngx_http_session_window.h"


time_t
ngx_http_session_window_start(time_t now)
{
    time_t  r;

    r = now % NGX_HTTP_SESSION_WINDOW_SECONDS;

    /* C rounds towards zero: keep instants before 1970 in their minute */
    if (r < 0) {
        r += NGX_HTTP_SESSION_WINDOW_SECONDS;
    }

    return now - r;
}


time_t
ngx_http_session_window_reset(time_t now)
{
    return ngx_http_session_window_start(now)
           + NGX_HTTP_SESSION_WINDOW_SECONDS;
}


unsigned
ngx_http_session_window_retry_after(time_t sec, unsigned msec)
{
    int64_t  left_ms;

    left_ms = (int64_t) ngx_http_session_window_reset(sec) * 1000
              - ((int64_t) sec * 1000 + msec);

    if (left_ms <= 1000) {
        return 1;
    }

    return (unsigned) ((left_ms + 999) / 1000);
}

