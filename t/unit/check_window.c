/*
 * src/core/ngx_http_session_window.{c,h}: the fixed one-minute rate-limit
 * window aligned to the UTC minute (docs/api.md §1, stage 2), its end
 * (X-RateLimit-Reset) and Retry-After (docs/api.md §10: whole seconds
 * to the window's end, rounded up, at least 1).
 *
 * The epoch values were computed independently, e.g.
 *
 *     date -u -d @1795255200      # 2026-11-21T10:00:00Z, a minute start
 */

#include <stdint.h>
#include <time.h>

#include "check_suites.h"
#include "ngx_http_session_window.h"


/* 2026-11-21T10:00:00Z */
#define MINUTE0  ((time_t) 1795255200)


typedef struct {
    time_t    now;
    time_t    start;
} ngx_http_session_window_vec_t;


static const ngx_http_session_window_vec_t  window_vecs[] = {
    { 0, 0 },
    { 1, 0 },
    { 59, 0 },
    { 60, 60 },
    { 61, 60 },
    { 119, 60 },
    { 120, 120 },
    { MINUTE0, MINUTE0 },
    { MINUTE0 + 1, MINUTE0 },
    { MINUTE0 + 30, MINUTE0 },
    { MINUTE0 + 59, MINUTE0 },
    { MINUTE0 + 60, MINUTE0 + 60 },
    { MINUTE0 - 1, MINUTE0 - 60 },
    /* 2038-01-19T03:14:07Z, the last second of a signed 32-bit time_t */
    { (time_t) 2147483647, (time_t) 2147483640 },
    { (time_t) 2147483648LL, (time_t) 2147483640 },
    /* 2106-02-07T06:28:15Z, past the 32-bit unsigned epoch */
    { (time_t) 4294967295LL, (time_t) 4294967280LL },
    /* before 1970: the minute that holds the instant, not the next one */
    { -1, -60 },
    { -59, -60 },
    { -60, -60 },
    { -61, -120 },
};


typedef struct {
    time_t    sec;
    unsigned  msec;
    unsigned  retry;
} ngx_http_session_retry_vec_t;


static const ngx_http_session_retry_vec_t  retry_vecs[] = {
    /* exactly at the window start: the whole minute is left */
    { MINUTE0, 0, 60 },
    /* 59.999 s left, rounded up */
    { MINUTE0, 1, 60 },
    { MINUTE0, 999, 60 },
    { MINUTE0 + 1, 0, 59 },
    { MINUTE0 + 1, 500, 59 },
    { MINUTE0 + 30, 0, 30 },
    { MINUTE0 + 30, 1, 30 },
    { MINUTE0 + 58, 0, 2 },
    /* 1.001 s left: 2 */
    { MINUTE0 + 58, 999, 2 },
    /* exactly 1 s left */
    { MINUTE0 + 59, 0, 1 },
    /* less than a second left: still at least 1, never 0 */
    { MINUTE0 + 59, 1, 1 },
    { MINUTE0 + 59, 500, 1 },
    { MINUTE0 + 59, 999, 1 },
    { 0, 0, 60 },
    { 59, 999, 1 },
    { -1, 0, 1 },
    { -60, 0, 60 },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))


START_TEST(test_window_start)
{
    const ngx_http_session_window_vec_t  *v;

    v = &window_vecs[_i];

    ck_assert_msg(ngx_http_session_window_start(v->now) == v->start,
                  "start(%lld): got %lld, expected %lld", (long long) v->now,
                  (long long) ngx_http_session_window_start(v->now),
                  (long long) v->start);
}
END_TEST


START_TEST(test_window_reset)
{
    const ngx_http_session_window_vec_t  *v;

    v = &window_vecs[_i];

    ck_assert_msg(ngx_http_session_window_reset(v->now)
                  == v->start + NGX_HTTP_SESSION_WINDOW_SECONDS,
                  "reset(%lld): got %lld, expected %lld", (long long) v->now,
                  (long long) ngx_http_session_window_reset(v->now),
                  (long long) v->start + NGX_HTTP_SESSION_WINDOW_SECONDS);
}
END_TEST


START_TEST(test_window_minute)
{
    const ngx_http_session_window_vec_t  *v;

    v = &window_vecs[_i];

    ck_assert_msg(ngx_http_session_window_minute(v->now) * 60 == v->start,
                  "minute(%lld): got %lld, expected %lld",
                  (long long) v->now,
                  (long long) ngx_http_session_window_minute(v->now),
                  (long long) v->start / 60);
}
END_TEST


/* the window number against the window's start, either side of 1970 */
START_TEST(test_window_minute_every_second)
{
    time_t  now;

    now = (time_t) _i - 3 * NGX_HTTP_SESSION_WINDOW_SECONDS;

    ck_assert_int_eq(ngx_http_session_window_minute(now)
                     * NGX_HTTP_SESSION_WINDOW_SECONDS,
                     ngx_http_session_window_start(now));

    now += MINUTE0;

    ck_assert_int_eq(ngx_http_session_window_minute(now)
                     * NGX_HTTP_SESSION_WINDOW_SECONDS,
                     ngx_http_session_window_start(now));
}
END_TEST


/*
 * Every second of three consecutive minutes: the start is a multiple of
 * 60 at most 59 s back, the reset is the next multiple strictly ahead,
 * and every second of one minute shares its start and reset.
 */
START_TEST(test_window_every_second)
{
    time_t  now, start, reset;

    now = MINUTE0 - NGX_HTTP_SESSION_WINDOW_SECONDS + (time_t) _i;

    start = ngx_http_session_window_start(now);
    reset = ngx_http_session_window_reset(now);

    ck_assert_int_eq(start % NGX_HTTP_SESSION_WINDOW_SECONDS, 0);
    ck_assert(start <= now);
    ck_assert(now - start < NGX_HTTP_SESSION_WINDOW_SECONDS);
    ck_assert(reset > now);
    ck_assert(reset - now <= NGX_HTTP_SESSION_WINDOW_SECONDS);
    ck_assert_int_eq(reset - start, NGX_HTTP_SESSION_WINDOW_SECONDS);
    ck_assert_int_eq(start,
                     MINUTE0 + (time_t) (_i / NGX_HTTP_SESSION_WINDOW_SECONDS
                                         - 1)
                               * NGX_HTTP_SESSION_WINDOW_SECONDS);
}
END_TEST


START_TEST(test_retry_after)
{
    unsigned                             got;
    const ngx_http_session_retry_vec_t  *v;

    v = &retry_vecs[_i];

    got = ngx_http_session_window_retry_after(v->sec, v->msec);

    ck_assert_msg(got == v->retry,
                  "retry_after(%lld, %u): got %u, expected %u",
                  (long long) v->sec, v->msec, got, v->retry);
}
END_TEST


/*
 * Every millisecond of a minute (_i is the second in the window, the
 * milliseconds are looped here rather than forked one by one): 1 ... 60,
 * the seconds to X-RateLimit-Reset rounded up, never 0, and so a client
 * that sleeps Retry-After seconds lands in the next window.
 */
START_TEST(test_retry_after_every_msec)
{
    time_t    sec, reset;
    int64_t   now_ms, left_ms, expect;
    unsigned  msec, got;

    sec = MINUTE0 + _i;
    reset = ngx_http_session_window_reset(sec);

    for (msec = 0; msec < 1000; msec++) {

        got = ngx_http_session_window_retry_after(sec, msec);

        now_ms = (int64_t) sec * 1000 + msec;
        left_ms = (int64_t) reset * 1000 - now_ms;
        expect = (left_ms + 999) / 1000;

        if (expect < 1) {
            expect = 1;
        }

        ck_assert_msg(got >= 1 && got <= NGX_HTTP_SESSION_WINDOW_SECONDS,
                      "retry_after(+%d s %u ms) = %u out of 1..60", _i, msec,
                      got);
        ck_assert_msg((int64_t) got == expect,
                      "retry_after(+%d s %u ms) = %u, expected %lld", _i,
                      msec, got, (long long) expect);

        /* whole seconds: the same figure as Reset minus the second */
        ck_assert_int_eq((time_t) got, reset - sec);

        /* waiting that long reaches the next window, at most 1 s late */
        ck_assert((int64_t) got * 1000 >= left_ms);
        ck_assert((int64_t) got * 1000 - left_ms < 1000);
    }
}
END_TEST


/* the counter moves forward only (ngx_http_session_window_take) */

typedef struct {
    uint32_t  minute;         /* stored */
    uint32_t  count;
    uint32_t  now;            /* the worker's minute */
    uint32_t  limit;
    int       rc;             /* expected */
    uint32_t  minute_after;
    uint32_t  count_after;
    uint32_t  now_after;
    uint32_t  remaining;
} ngx_http_session_take_vec_t;


static const ngx_http_session_take_vec_t  take_vecs[] = {
    /* a fresh counter */
    { 0, 0, 100, 3, 0, 100, 1, 100, 2 },
    /* the same minute */
    { 100, 1, 100, 3, 0, 100, 2, 100, 1 },
    { 100, 2, 100, 3, 0, 100, 3, 100, 0 },
    /* full: refused, not counted */
    { 100, 3, 100, 3, -1, 100, 3, 100, 0 },
    /* an older minute starts again */
    { 99, 3, 100, 3, 0, 100, 1, 100, 2 },
    { 1, 1000, 100, 3, 0, 100, 1, 100, 2 },
    /* a newer minute (a worker ahead) is kept and counted against */
    { 101, 1, 100, 3, 0, 101, 2, 101, 1 },
    { 101, 3, 100, 3, -1, 101, 3, 101, 0 },
    { 200, 0, 100, 1, 0, 200, 1, 200, 0 },
    /* a limit of one */
    { 100, 0, 100, 1, 0, 100, 1, 100, 0 },
    { 100, 1, 100, 1, -1, 100, 1, 100, 0 },
    /* the largest limit the directive takes */
    { 100, 999999999, 100, 1000000000, 0, 100, 1000000000, 100, 0 },
    /* minutes past 2038 (32-bit signed seconds) and near 2^32 */
    { 35791394, 5, 35791395, 10, 0, 35791395, 1, 35791395, 9 },
    { 4294967295u, 5, 4294967294u, 10, 0, 4294967295u, 6, 4294967295u, 4 },
};


START_TEST(test_window_take)
{
    int                                 rc;
    uint32_t                            minute, count, now, remaining;
    const ngx_http_session_take_vec_t  *v;

    v = &take_vecs[_i];

    minute = v->minute;
    count = v->count;
    now = v->now;
    remaining = 12345;

    rc = ngx_http_session_window_take(&minute, &count, &now, v->limit,
                                      &remaining);

    ck_assert_msg(rc == v->rc, "vec %d: rc %d, expected %d", _i, rc, v->rc);
    ck_assert_msg(minute == v->minute_after, "vec %d: minute %u, "
                  "expected %u", _i, minute, v->minute_after);
    ck_assert_msg(count == v->count_after, "vec %d: count %u, expected %u",
                  _i, count, v->count_after);
    ck_assert_msg(now == v->now_after, "vec %d: now %u, expected %u", _i,
                  now, v->now_after);
    ck_assert_msg(remaining == v->remaining, "vec %d: remaining %u, "
                  "expected %u", _i, remaining, v->remaining);
}
END_TEST


/*
 * Near a minute boundary one worker's cached clock has moved on to the
 * new minute and another's lags a second behind, and their requests
 * interleave: the new minute never admits more than the limit, however
 * the lagging worker's requests fall among the others.
 */

START_TEST(test_window_take_lagging_worker)
{
    int       rc;
    uint32_t  minute, count, now, remaining, admitted_new, i, limit;

    limit = 10;

    /* the old minute 100 used up */
    minute = 100;
    count = limit;
    admitted_new = 0;

    for (i = 0; i < 4 * limit; i++) {
        /* _i picks the pattern: which of the two workers goes next */
        now = ((i * 7 + (uint32_t) _i) % 3 == 0) ? 100 : 101;

        rc = ngx_http_session_window_take(&minute, &count, &now, limit,
                                          &remaining);

        ck_assert_uint_ge(minute, 100);

        if (minute == 101 && rc == 0) {
            ck_assert_uint_eq(now, 101);
            admitted_new++;
        }

        if (minute == 100) {
            /* the new minute has not begun: the old one is full */
            ck_assert_int_eq(rc, -1);
        }
    }

    ck_assert_uint_eq(minute, 101);
    ck_assert_uint_eq(admitted_new, limit);
    ck_assert_uint_eq(count, limit);
}
END_TEST


Suite *
make_window_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("window");

    tc = tcase_create("start_reset");
    tcase_add_loop_test(tc, test_window_start, 0, NELTS(window_vecs));
    tcase_add_loop_test(tc, test_window_reset, 0, NELTS(window_vecs));
    tcase_add_loop_test(tc, test_window_every_second, 0,
                        3 * NGX_HTTP_SESSION_WINDOW_SECONDS);
    tcase_add_loop_test(tc, test_window_minute, 0, NELTS(window_vecs));
    tcase_add_loop_test(tc, test_window_minute_every_second, 0,
                        6 * NGX_HTTP_SESSION_WINDOW_SECONDS);
    suite_add_tcase(s, tc);

    tc = tcase_create("retry_after");
    tcase_add_loop_test(tc, test_retry_after, 0, NELTS(retry_vecs));
    tcase_add_loop_test(tc, test_retry_after_every_msec, 0,
                        NGX_HTTP_SESSION_WINDOW_SECONDS);
    suite_add_tcase(s, tc);

    tc = tcase_create("take");
    tcase_add_loop_test(tc, test_window_take, 0, NELTS(take_vecs));
    tcase_add_loop_test(tc, test_window_take_lagging_worker, 0, 3);
    suite_add_tcase(s, tc);

    return s;
}
