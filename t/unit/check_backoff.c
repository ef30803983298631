/*
 * src/core/ngx_http_session_backoff.{c,h}: the reconnection schedule of
 * the database connections.  The expected figures are written out by
 * hand from the rule: 100 ms, doubled per failure in a row, at most
 * 2000 ms; back to 100 ms after a connection that stayed up 10 s; the
 * delay waited is in [base / 2, base]; an early try for a request only
 * after a refusal, at most one per 250 ms.
 */

#include <stdint.h>

#include "check_suites.h"
#include "ngx_http_session_backoff.h"


/* failures in a row of a connection that never got up */
static const uint32_t  backoff_schedule[] = {
    100, 200, 400, 800, 1600, 2000, 2000, 2000
};


START_TEST(test_backoff_schedule)
{
    size_t    i;
    uint32_t  base;

    base = 0;

    for (i = 0; i < sizeof(backoff_schedule) / sizeof(uint32_t); i++) {
        base = ngx_http_session_backoff_next(base, 0);

        ck_assert_msg(base == backoff_schedule[i],
                      "failure %zu: base %u, expected %u",
                      i + 1, base, backoff_schedule[i]);
    }
}
END_TEST


/*
 * A query timeout soon after connecting, again and again (an overloaded
 * server): the delay grows as if the connection had never come up.
 */
START_TEST(test_backoff_short_lived)
{
    uint32_t  base;

    base = ngx_http_session_backoff_next(0, 0);
    base = ngx_http_session_backoff_next(base, 5000);
    ck_assert_uint_eq(base, 200);

    base = ngx_http_session_backoff_next(base, 9999);
    ck_assert_uint_eq(base, 400);

    base = ngx_http_session_backoff_next(2000, 9999);
    ck_assert_uint_eq(base, 2000);
}
END_TEST


/* a connection that served for a while and then broke starts afresh */
START_TEST(test_backoff_stable_resets)
{
    ck_assert_uint_eq(ngx_http_session_backoff_next(2000, 10000), 100);
    ck_assert_uint_eq(ngx_http_session_backoff_next(400, 3600000), 100);
    ck_assert_uint_eq(ngx_http_session_backoff_next(0, 10000), 100);
}
END_TEST


/* odd bases from outside the schedule still end at the ceiling */
START_TEST(test_backoff_odd_base)
{
    ck_assert_uint_eq(ngx_http_session_backoff_next(999, 0), 1998);
    ck_assert_uint_eq(ngx_http_session_backoff_next(1000, 0), 2000);
    ck_assert_uint_eq(ngx_http_session_backoff_next(1999, 0), 2000);
    ck_assert_uint_eq(ngx_http_session_backoff_next(UINT32_MAX, 0), 2000);
}
END_TEST


START_TEST(test_backoff_delay_bounds)
{
    uint32_t  base, rnd, d;

    base = backoff_schedule[_i];

    for (rnd = 0; rnd < 5000; rnd++) {
        d = ngx_http_session_backoff_delay(base, rnd);

        ck_assert_msg(d >= base / 2 && d <= base,
                      "base %u rnd %u: delay %u", base, rnd, d);
    }

    d = ngx_http_session_backoff_delay(base, UINT32_MAX);
    ck_assert(d >= base / 2 && d <= base);

    /* both ends are reachable */
    ck_assert_uint_eq(ngx_http_session_backoff_delay(base, 0),
                      base - base / 2);
    ck_assert_uint_eq(ngx_http_session_backoff_delay(base, base / 2), base);
}
END_TEST


/* the delays of different random numbers spread over the whole range */
START_TEST(test_backoff_delay_spread)
{
    uint32_t  rnd, d, seen[2001];
    unsigned  distinct;

    for (d = 0; d <= 2000; d++) {
        seen[d] = 0;
    }

    for (rnd = 0; rnd < 100000; rnd++) {
        seen[ngx_http_session_backoff_delay(2000, rnd * 2654435761u)]++;
    }

    distinct = 0;

    for (d = 1000; d <= 2000; d++) {
        distinct += (seen[d] != 0);
    }

    for (d = 0; d < 1000; d++) {
        ck_assert_uint_eq(seen[d], 0);
    }

    ck_assert_msg(distinct > 900, "only %u distinct delays", distinct);
}
END_TEST


/*
 * An early try: only for a connection that was refused, at most one per
 * worker per 250 ms, whatever the base (a refused connection at the
 * ceiling is the case it is for).
 */
START_TEST(test_backoff_early)
{
    ck_assert_int_eq(ngx_http_session_backoff_early(UINT64_MAX, 1), 1);
    ck_assert_int_eq(ngx_http_session_backoff_early(250, 1), 1);
    ck_assert_int_eq(ngx_http_session_backoff_early(249, 1), 0);
    ck_assert_int_eq(ngx_http_session_backoff_early(0, 1), 0);

    /* timed out, or broke once up: the schedule only */
    ck_assert_int_eq(ngx_http_session_backoff_early(UINT64_MAX, 0), 0);
    ck_assert_int_eq(ngx_http_session_backoff_early(250, 0), 0);
}
END_TEST


/*
 * Requests every 10 ms for 10 s against a server that keeps refusing:
 * at most one early try per 250 ms, so the worker makes at most 40 of
 * them besides the schedule's 5-10 at the ceiling (not one per request).
 */
START_TEST(test_backoff_early_rate)
{
    uint64_t  now, last;
    unsigned  tries;

    last = 0;
    tries = 0;

    for (now = 1000; now < 11000; now += 10) {
        if (ngx_http_session_backoff_early(now - last, 1)) {
            last = now;
            tries++;
        }
    }

    ck_assert_uint_eq(tries, 40);
}
END_TEST


Suite *
make_backoff_suite(void)
{
    TCase  *tc;
    Suite  *s;

    s = suite_create("backoff");

    tc = tcase_create("schedule");
    tcase_add_test(tc, test_backoff_schedule);
    tcase_add_test(tc, test_backoff_short_lived);
    tcase_add_test(tc, test_backoff_stable_resets);
    tcase_add_test(tc, test_backoff_odd_base);
    suite_add_tcase(s, tc);

    tc = tcase_create("delay");
    tcase_add_loop_test(tc, test_backoff_delay_bounds, 0,
                        sizeof(backoff_schedule) / sizeof(uint32_t));
    tcase_add_test(tc, test_backoff_delay_spread);
    suite_add_tcase(s, tc);

    tc = tcase_create("early");
    tcase_add_test(tc, test_backoff_early);
    tcase_add_test(tc, test_backoff_early_rate);
    suite_add_tcase(s, tc);

    return s;
}
