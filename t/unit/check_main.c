/*
 * Runs every Check suite of t/unit/ and exits non-zero when a test
 * fails.  CK_VERBOSITY=verbose lists each test; CK_RUN_SUITE and
 * CK_RUN_CASE select a part (Check's own environment variables).
 */

#include <stdio.h>
#include <stdlib.h>

#include "check_suites.h"


typedef Suite *(*ngx_http_session_suite_pt)(void);


static const ngx_http_session_suite_pt  ngx_http_session_suites[] = {
    make_key_suite,
    make_redact_suite,
    make_window_suite,
    make_route_suite,
    make_json_suite,
    make_url_suite,
    make_body_suite,
    make_cursor_suite,
    make_idem_suite,
    make_image_suite,
    make_doc_suite,
    make_delivery_suite,
    make_backoff_suite,
    make_conninfo_suite,
    make_fast_suite,
    NULL
};


int
main(void)
{
    int                               failed;
    SRunner                          *sr;
    const ngx_http_session_suite_pt  *make;

    sr = srunner_create(NULL);

    for (make = ngx_http_session_suites; *make != NULL; make++) {
        srunner_add_suite(sr, (*make)());
    }

    srunner_run_all(sr, CK_ENV);

    failed = srunner_ntests_failed(sr);

    srunner_free(sr);

    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
