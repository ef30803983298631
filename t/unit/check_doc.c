/*
 * src/core/ngx_http_session_doc.{c,h}: session and image documents.
 *
 * The timestamps below were computed independently, with Python:
 *
 *     (datetime(1970, 1, 1) + timedelta(microseconds=us))
 *         .replace(microsecond=0).strftime('%Y-%m-%dT%H:%M:%SZ')
 *
 * The documents are parsed back with jansson, so that what is checked is
 * the JSON a client reads, not a spelling of it.
 */

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_doc.h"


#define U(s)  ((const unsigned char *) (s))

#define ID                                                                    \
    "\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef"
#define PROJECT                                                               \
    "\xff\xee\xdd\xcc\xbb\xaa\x99\x88\x77\x66\x55\x44\x33\x22\x11\x00"
#define SHA                                                                   \
    "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"         \
    "\xf0\xf1\xf2\xf3\xf4\xf5\xf6\xf7\xf8\xf9\xfa\xfb\xfc\xfd\xfe\xff"


typedef struct {
    int64_t      us;
    const char  *text;
} ngx_http_session_time_vec_t;


static const ngx_http_session_time_vec_t  times[] = {
    { 0, "1970-01-01T00:00:00Z" },
    { 951782400000000LL, "2000-02-29T00:00:00Z" },
    { 1763712000123456LL, "2025-11-21T08:00:00Z" },
    { -1, "1969-12-31T23:59:59Z" },
    { 253402300799999999LL, "9999-12-31T23:59:59Z" },
    { 1709210096999999LL, "2024-02-29T12:34:56Z" },
    { 4107542399000000LL, "2100-02-28T23:59:59Z" },
};


START_TEST(test_time)
{
    unsigned char  buf[64], *end;

    memset(buf, 'x', sizeof(buf));

    end = ngx_http_session_doc_time(buf, times[_i].us);

    ck_assert_int_eq(end - buf, NGX_HTTP_SESSION_DOC_TIME_LEN);
    ck_assert_int_eq(buf[NGX_HTTP_SESSION_DOC_TIME_LEN], 'x');
    ck_assert_mem_eq(buf, times[_i].text, NGX_HTTP_SESSION_DOC_TIME_LEN);
}
END_TEST


static json_t *
parse(const unsigned char *p, size_t len)
{
    json_t        *j;
    json_error_t   e;

    j = json_loadb((const char *) p, len, JSON_REJECT_DUPLICATES, &e);
    ck_assert_msg(j != NULL, "not JSON: %.*s (%s)", (int) len, p, e.text);

    return j;
}


static void
session_base(ngx_http_session_doc_session_t *s)
{
    memset(s, 0, sizeof(*s));

    s->id = U(ID);
    s->project_id = U(PROJECT);
    s->delivery_mode = U("webhook");
    s->delivery_mode_len = 7;
    s->webhook_url = U("https://example.com/hook?a=\"b\"\\c");
    s->webhook_url_len = strlen((const char *) s->webhook_url);
    s->status = U("open");
    s->status_len = 4;
    s->image_count = 2147483647;
    s->acknowledged_count = 0;
    s->created_us = 1763712000123456LL;
    s->expires_us = 1763715600123456LL;
}


START_TEST(test_session)
{
    size_t                           size;
    json_t                          *j;
    unsigned char                   *buf, *end;
    ngx_http_session_doc_session_t   s;

    session_base(&s);

    size = ngx_http_session_doc_session_size(&s);
    buf = malloc(size);
    end = ngx_http_session_doc_session(buf, &s);

    ck_assert_uint_le((size_t) (end - buf), size);

    j = parse(buf, end - buf);

    ck_assert_int_eq(json_object_size(j), 10);
    ck_assert_str_eq(json_string_value(json_object_get(j, "id")),
                     "01234567-89ab-cdef-0123-456789abcdef");
    ck_assert_str_eq(json_string_value(json_object_get(j, "project_id")),
                     "ffeeddcc-bbaa-9988-7766-554433221100");
    ck_assert_str_eq(json_string_value(json_object_get(j, "delivery_mode")),
                     "webhook");
    ck_assert_str_eq(json_string_value(json_object_get(j, "webhook_url")),
                     "https://example.com/hook?a=\"b\"\\c");
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "open");
    ck_assert(json_integer_value(json_object_get(j, "image_count"))
              == 2147483647);
    ck_assert(json_is_integer(json_object_get(j, "acknowledged_count")));
    ck_assert(json_integer_value(json_object_get(j, "acknowledged_count"))
              == 0);
    ck_assert_str_eq(json_string_value(json_object_get(j, "created_at")),
                     "2025-11-21T08:00:00Z");
    ck_assert_str_eq(json_string_value(json_object_get(j, "expires_at")),
                     "2025-11-21T09:00:00Z");
    ck_assert(json_is_null(json_object_get(j, "completed_at")));

    json_decref(j);
    free(buf);

    /* a long_poll session, completed */

    s.delivery_mode = U("long_poll");
    s.delivery_mode_len = 9;
    s.webhook_url = NULL;
    s.webhook_url_len = 0;
    s.status = U("completed");
    s.status_len = 9;
    s.completed = 1;
    s.completed_us = 1763712001999999LL;

    size = ngx_http_session_doc_session_size(&s);
    buf = malloc(size);
    end = ngx_http_session_doc_session(buf, &s);

    ck_assert_uint_le((size_t) (end - buf), size);

    j = parse(buf, end - buf);

    ck_assert(json_is_null(json_object_get(j, "webhook_url")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")),
                     "completed");
    ck_assert_str_eq(json_string_value(json_object_get(j, "completed_at")),
                     "2025-11-21T08:00:01Z");

    json_decref(j);
    free(buf);
}
END_TEST


START_TEST(test_session_escapes)
{
    size_t                           size;
    json_t                          *j;
    unsigned char                   *buf, *end;
    ngx_http_session_doc_session_t   s;
    static const char                url[] = "https://e.com/\x01\x1f\xff";

    /* control bytes and invalid UTF-8 still make valid JSON */

    session_base(&s);
    s.webhook_url = U(url);
    s.webhook_url_len = sizeof(url) - 1;

    size = ngx_http_session_doc_session_size(&s);
    buf = malloc(size);
    end = ngx_http_session_doc_session(buf, &s);

    ck_assert_uint_le((size_t) (end - buf), size);

    j = parse(buf, end - buf);
    ck_assert_str_eq(json_string_value(json_object_get(j, "webhook_url")),
                     "https://e.com/\x01\x1f\xef\xbf\xbd");

    json_decref(j);
    free(buf);
}
END_TEST


START_TEST(test_image)
{
    size_t                         size;
    json_t                        *j;
    unsigned char                 *buf, *end;
    ngx_http_session_doc_image_t   im;

    memset(&im, 0, sizeof(im));

    im.id = U(PROJECT);
    im.session_id = U(ID);
    im.sequence = 7;
    im.content_type = U("image/png");
    im.content_type_len = 9;
    im.size = 5120;
    im.sha256 = U(SHA);
    im.created_us = 951782400000000LL;

    size = ngx_http_session_doc_image_size(&im);
    buf = malloc(size);
    end = ngx_http_session_doc_image(buf, &im);

    ck_assert_uint_le((size_t) (end - buf), size);

    j = parse(buf, end - buf);

    ck_assert_int_eq(json_object_size(j), 9);
    ck_assert_str_eq(json_string_value(json_object_get(j, "id")),
                     "ffeeddcc-bbaa-9988-7766-554433221100");
    ck_assert_str_eq(json_string_value(json_object_get(j, "session_id")),
                     "01234567-89ab-cdef-0123-456789abcdef");
    ck_assert(json_integer_value(json_object_get(j, "sequence")) == 7);
    ck_assert_str_eq(json_string_value(json_object_get(j, "content_type")),
                     "image/png");
    ck_assert(json_integer_value(json_object_get(j, "size")) == 5120);
    ck_assert_str_eq(json_string_value(json_object_get(j, "sha256")),
                     "000102030405060708090a0b0c0d0e0f"
                     "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
    ck_assert_str_eq(json_string_value(json_object_get(j, "created_at")),
                     "2000-02-29T00:00:00Z");
    ck_assert(json_is_false(json_object_get(j, "acknowledged")));
    ck_assert(json_is_null(json_object_get(j, "acknowledged_at")));

    json_decref(j);
    free(buf);

    im.acknowledged = 1;
    im.acknowledged_us = 1709210096999999LL;

    size = ngx_http_session_doc_image_size(&im);
    buf = malloc(size);
    end = ngx_http_session_doc_image(buf, &im);

    j = parse(buf, end - buf);

    ck_assert(json_is_true(json_object_get(j, "acknowledged")));
    ck_assert_str_eq(json_string_value(json_object_get(j,
                                                       "acknowledged_at")),
                     "2024-02-29T12:34:56Z");

    json_decref(j);
    free(buf);
}
END_TEST


Suite *
make_doc_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("doc");

    tc = tcase_create("time");
    tcase_add_loop_test(tc, test_time, 0,
                        (int) (sizeof(times) / sizeof(times[0])));
    suite_add_tcase(s, tc);

    tc = tcase_create("documents");
    tcase_add_test(tc, test_session);
    tcase_add_test(tc, test_session_escapes);
    tcase_add_test(tc, test_image);
    suite_add_tcase(s, tc);

    return s;
}
