/*
 * The Check suites of the pure-C core, one per area: each
 * t/unit/check_<area>.c exports make_<area>_suite() and check_main.c
 * runs them all.
 */

#ifndef _NGX_HTTP_SESSION_CHECK_SUITES_H_INCLUDED_
#define _NGX_HTTP_SESSION_CHECK_SUITES_H_INCLUDED_


#include <check.h>


Suite *make_key_suite(void);
Suite *make_redact_suite(void);
Suite *make_window_suite(void);
Suite *make_route_suite(void);
Suite *make_json_suite(void);
Suite *make_url_suite(void);
Suite *make_body_suite(void);
Suite *make_cursor_suite(void);
Suite *make_idem_suite(void);
Suite *make_image_suite(void);
Suite *make_doc_suite(void);
Suite *make_delivery_suite(void);
Suite *make_backoff_suite(void);
Suite *make_conninfo_suite(void);
Suite *make_fast_suite(void);


#endif /* _NGX_HTTP_SESSION_CHECK_SUITES_H_INCLUDED_ */
