/*
 * The Check suites of the pure-C core, one per area: each
 * t/unit/check_<area>.c exports make_<area>_suite() and check_main.c
 * runs them all.
 */

#ifndef _NGX_HTTP_SESSION_CHECK_SUITES_H_INCLUDED_
#define _NGX_HTTP_SESSION_CHECK_SUITES_H_INCLUDED_


#include <check.h>


Suite *make_key_suite(void);


#endif /* _NGX_HTTP_SESSION_CHECK_SUITES_H_INCLUDED_ */
