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
    /*
     * The window ends on a whole second, end > sec, and the instant is
     * sec + msec / 1000 with msec below 1000: rounded up, what is left is
     * end - sec whatever msec is, and that is at least 1.
     */

    (void) msec;

    return (unsigned) (ngx_http_session_window_reset(sec) - sec);
}


int
ngx_http_session_window_take(uint32_t *minute, uint32_t *count,
    uint32_t *now_minute, uint32_t limit, uint32_t *remaining)
{
    /*
     * Minutes since 1970 fit 32 bits for 8000 years: a plain comparison
     * orders them.
     */

    if (*minute < *now_minute) {
        *minute = *now_minute;
        *count = 0;

    } else if (*minute > *now_minute) {
        *now_minute = *minute;
    }

    if (*count >= limit) {
        *remaining = 0;
        return -1;
    }

    (*count)++;
    *remaining = limit - *count;

    return 0;
}
