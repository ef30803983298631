/*
 * src/core/ngx_http_session_route.{c,h}: the route table of docs/api.md
 * section 5, the Allow header values (section 10, "Routing") and the
 * rate-limit class of a request (section 1, stage 2).
 *
 * Paths are given with an explicit length and copied to a heap buffer of
 * exactly that many bytes, as nginx's r->uri is not NUL-terminated: under
 * valgrind or -fsanitize=address a read past the end is reported.
 */

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_route.h"


#define U(s)     ((const unsigned char *) (s))

#define GET      NGX_HTTP_SESSION_METHOD_GET
#define POST     NGX_HTTP_SESSION_METHOD_POST
#define OTHER    NGX_HTTP_SESSION_METHOD_OTHER

#define NONE     NGX_HTTP_SESSION_ROUTE_NONE
#define SESSIONS NGX_HTTP_SESSION_ROUTE_SESSIONS
#define SESSION  NGX_HTTP_SESSION_ROUTE_SESSION
#define COMPLETE NGX_HTTP_SESSION_ROUTE_COMPLETE
#define IMAGES   NGX_HTTP_SESSION_ROUTE_IMAGES
#define IMAGE    NGX_HTTP_SESSION_ROUTE_IMAGE
#define CONTENT  NGX_HTTP_SESSION_ROUTE_IMAGE_CONTENT
#define ACK      NGX_HTTP_SESSION_ROUTE_IMAGE_ACK
#define POLL     NGX_HTTP_SESSION_ROUTE_POLL

#define SID      "0b6f3c2e-8d1a-4f5e-9c7b-2a4d6e8f0a1c"
#define IID      "7e9d1b3f-5a2c-4e6d-8f0a-1c3e5a7b9d2f"


typedef struct {
    const char  *path;
    /* bytes given to the function; -1: the whole string */
    int          len;
    int          id;
    unsigned     methods;
    /* expected {sid}, {iid}; NULL when the route has none */
    const char  *sid;
    const char  *iid;
} ngx_http_session_route_vec_t;


static const ngx_http_session_route_vec_t  route_vecs[] = {
    /* every route of docs/api.md §5 */
    { "/api/v1/sessions", -1, SESSIONS, GET | POST, NULL, NULL },
    { "/api/v1/sessions/" SID, -1, SESSION, GET, SID, NULL },
    { "/api/v1/sessions/" SID "/complete", -1, COMPLETE, POST, SID, NULL },
    { "/api/v1/sessions/" SID "/images", -1, IMAGES, GET | POST, SID, NULL },
    { "/api/v1/sessions/" SID "/images/" IID, -1, IMAGE, GET, SID, IID },
    { "/api/v1/sessions/" SID "/images/" IID "/content", -1, CONTENT, GET,
      SID, IID },
    { "/api/v1/sessions/" SID "/images/" IID "/ack", -1, ACK, POST, SID,
      IID },
    { "/api/v1/sessions/" SID "/poll", -1, POLL, GET, SID, NULL },

    /* ids are not checked here: any non-empty segment is an id */
    { "/api/v1/sessions/x", -1, SESSION, GET, "x", NULL },
    { "/api/v1/sessions/not-a-uuid/images/1/ack", -1, ACK, POST,
      "not-a-uuid", "1" },
    { "/api/v1/sessions/complete", -1, SESSION, GET, "complete", NULL },
    { "/api/v1/sessions/images/images", -1, IMAGES, GET | POST, "images",
      NULL },
    { "/api/v1/sessions/a/images/content", -1, IMAGE, GET, "a",
      "content" },

    /* a trailing slash is another, unknown route */
    { "/api/v1/sessions/", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/complete/", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/images/", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/ack/", -1, NONE, 0, NULL,
      NULL },
    { "/api/v1/sessions/" SID "/poll/", -1, NONE, 0, NULL, NULL },

    /* empty segments (nginx merges slashes, but the table must not rely
     * on it) */
    { "/api/v1/sessions//complete", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "//images", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/images//ack", -1, NONE, 0, NULL, NULL },

    /* unknown names, extra segments */
    { "/api/v1/sessions/" SID "/delete", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/Complete", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/completed", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/complet", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/complete/x", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/poll/x", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/complete", -1, NONE, 0,
      NULL, NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/poll", -1, NONE, 0, NULL,
      NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/ack/x", -1, NONE, 0, NULL,
      NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/content/x", -1, NONE, 0,
      NULL, NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/acknowledge", -1, NONE, 0,
      NULL, NULL },

    /* other paths */
    { "", -1, NONE, 0, NULL, NULL },
    { "/", -1, NONE, 0, NULL, NULL },
    { "/api/v1/nope", -1, NONE, 0, NULL, NULL },
    { "/api/v1/session", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessionsx", -1, NONE, 0, NULL, NULL },
    { "/api/v1/sessions.json", -1, NONE, 0, NULL, NULL },
    { "/api/v1/Sessions", -1, NONE, 0, NULL, NULL },
    { "/API/V1/SESSIONS", -1, NONE, 0, NULL, NULL },
    { "/api/v2/sessions", -1, NONE, 0, NULL, NULL },
    { "api/v1/sessions", -1, NONE, 0, NULL, NULL },
    { "//api/v1/sessions", -1, NONE, 0, NULL, NULL },
    { "/x/api/v1/sessions", -1, NONE, 0, NULL, NULL },

    /* only len bytes are the path */
    { "/api/v1/sessions/" SID, 16, SESSIONS, GET | POST, NULL, NULL },
    { "/api/v1/sessions", 15, NONE, 0, NULL, NULL },
    { "/api/v1/sessions", 0, NONE, 0, NULL, NULL },
    { "/api/v1/sessions/" SID "/complete", 17 + 36, SESSION, GET, SID,
      NULL },
    { "/api/v1/sessions/" SID "/complete", 17 + 36 + 5, NONE, 0, NULL,
      NULL },
    { "/api/v1/sessions/" SID "/images/" IID "/ack", 17 + 36 + 8 + 36,
      IMAGE, GET, SID, IID },
    { "/api/v1/sessions/abc/poll?timeout=1", 25, POLL, GET, "abc", NULL },
};


typedef struct {
    int       route;
    unsigned  method;
    int       cls;
} ngx_http_session_class_vec_t;


static const ngx_http_session_class_vec_t  class_vecs[] = {
    /* POST /api/v1/sessions is create; GET (and HEAD, given as GET) list */
    { SESSIONS, POST, NGX_HTTP_SESSION_CLASS_CREATE },
    { SESSIONS, GET, NGX_HTTP_SESSION_CLASS_LIST },
    /* every other request is other, wrong methods and unknown routes too */
    { SESSIONS, OTHER, NGX_HTTP_SESSION_CLASS_OTHER },
    { SESSION, GET, NGX_HTTP_SESSION_CLASS_OTHER },
    { SESSION, POST, NGX_HTTP_SESSION_CLASS_OTHER },
    { SESSION, OTHER, NGX_HTTP_SESSION_CLASS_OTHER },
    { COMPLETE, POST, NGX_HTTP_SESSION_CLASS_OTHER },
    { IMAGES, GET, NGX_HTTP_SESSION_CLASS_OTHER },
    { IMAGES, POST, NGX_HTTP_SESSION_CLASS_OTHER },
    { IMAGE, GET, NGX_HTTP_SESSION_CLASS_OTHER },
    { CONTENT, GET, NGX_HTTP_SESSION_CLASS_OTHER },
    { ACK, POST, NGX_HTTP_SESSION_CLASS_OTHER },
    { POLL, GET, NGX_HTTP_SESSION_CLASS_OTHER },
    { NONE, GET, NGX_HTTP_SESSION_CLASS_OTHER },
    { NONE, POST, NGX_HTTP_SESSION_CLASS_OTHER },
    { NONE, OTHER, NGX_HTTP_SESSION_CLASS_OTHER },
};


typedef struct {
    unsigned     methods;
    const char  *allow;
} ngx_http_session_allow_vec_t;


static const ngx_http_session_allow_vec_t  allow_vecs[] = {
    { GET, "GET, HEAD" },
    { POST, "POST" },
    { GET | POST, "GET, HEAD, POST" },
    /* OTHER is never in a route's set; it must not change the answer */
    { GET | OTHER, "GET, HEAD" },
    { POST | OTHER, "POST" },
    { GET | POST | OTHER, "GET, HEAD, POST" },
    { 0, "" },
    { OTHER, "" },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))


static void
check_segment(const char *what, int vec, const unsigned char *buf,
    size_t len, const unsigned char *got, size_t got_len, const char *expect)
{
    size_t  off, n;

    n = strlen(expect);

    ck_assert_msg(got != NULL, "vector %d: %s is NULL", vec, what);
    ck_assert_msg(got >= buf && got + got_len <= buf + len,
                  "vector %d: %s does not point into the path", vec, what);
    ck_assert_msg(got_len == n && memcmp(got, expect, n) == 0,
                  "vector %d: %s is \"%.*s\", expected \"%s\"", vec, what,
                  (int) got_len, (const char *) got, expect);

    /* it is the segment of the path, not a copy */
    off = (size_t) (got - buf);
    ck_assert_msg(off > 0 && buf[off - 1] == '/'
                  && (off + n == len || buf[off + n] == '/'),
                  "vector %d: %s is not a whole segment", vec, what);
}


START_TEST(test_route_match)
{
    int                                  id;
    size_t                               len;
    unsigned char                       *buf;
    ngx_http_session_route_t             rt;
    const ngx_http_session_route_vec_t  *v;

    v = &route_vecs[_i];
    len = v->len < 0 ? strlen(v->path) : (size_t) v->len;

    buf = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, v->path, len);

    /* garbage in, to see that the function clears it */
    memset(&rt, 0xa5, sizeof(rt));

    id = ngx_http_session_route_match(buf, len, &rt);

    ck_assert_msg(id == v->id, "vector %d (\"%.*s\"): route %d, expected %d",
                  _i, (int) len, v->path, id, v->id);
    ck_assert_int_eq(rt.id, id);

    if (v->id != NONE) {
        ck_assert_msg(rt.methods == v->methods,
                      "vector %d (\"%.*s\"): methods 0x%x, expected 0x%x",
                      _i, (int) len, v->path, rt.methods, v->methods);
    }

    if (v->sid) {
        check_segment("sid", _i, buf, len, rt.sid, rt.sid_len, v->sid);

    } else if (v->id != NONE) {
        ck_assert_ptr_null(rt.sid);
        ck_assert_uint_eq(rt.sid_len, 0);
    }

    if (v->iid) {
        check_segment("iid", _i, buf, len, rt.iid, rt.iid_len, v->iid);

    } else if (v->id != NONE) {
        ck_assert_ptr_null(rt.iid);
        ck_assert_uint_eq(rt.iid_len, 0);
    }

    free(buf);
}
END_TEST


/*
 * The known routes never take a method outside GET and POST, and every
 * route answers at least one method: a 405 always has a non-empty Allow.
 */
START_TEST(test_route_methods)
{
    int                                  id;
    size_t                               len;
    ngx_http_session_route_t             rt;
    const ngx_http_session_route_vec_t  *v;

    v = &route_vecs[_i];

    if (v->id == NONE) {
        return;
    }

    len = v->len < 0 ? strlen(v->path) : (size_t) v->len;
    id = ngx_http_session_route_match(U(v->path), len, &rt);

    ck_assert_int_eq(id, v->id);
    ck_assert_uint_eq(rt.methods & OTHER, 0);
    ck_assert_uint_ne(rt.methods & (GET | POST), 0);
    ck_assert_str_ne(ngx_http_session_route_allow(rt.methods), "");
}
END_TEST


START_TEST(test_route_class)
{
    int                                  cls;
    ngx_http_session_route_t             rt;
    const ngx_http_session_class_vec_t  *v;

    v = &class_vecs[_i];

    memset(&rt, 0, sizeof(rt));
    rt.id = v->route;

    cls = ngx_http_session_route_class(&rt, v->method);

    ck_assert_msg(cls == v->cls, "vector %d (route %d, method 0x%x):"
                  " class %d, expected %d", _i, v->route, v->method, cls,
                  v->cls);
    ck_assert(cls >= 0 && cls < NGX_HTTP_SESSION_NCLASSES);
}
END_TEST


/* from the path as the handler does it: match, then classify */
START_TEST(test_route_class_from_path)
{
    ngx_http_session_route_t  rt;

    (void) ngx_http_session_route_match(U("/api/v1/sessions"), 16, &rt);
    ck_assert_int_eq(ngx_http_session_route_class(&rt, POST),
                     NGX_HTTP_SESSION_CLASS_CREATE);
    ck_assert_int_eq(ngx_http_session_route_class(&rt, GET),
                     NGX_HTTP_SESSION_CLASS_LIST);
    ck_assert_int_eq(ngx_http_session_route_class(&rt, OTHER),
                     NGX_HTTP_SESSION_CLASS_OTHER);

    /* a trailing slash is an unknown route: class other, whatever method */
    (void) ngx_http_session_route_match(U("/api/v1/sessions/"), 17, &rt);
    ck_assert_int_eq(ngx_http_session_route_class(&rt, POST),
                     NGX_HTTP_SESSION_CLASS_OTHER);
    ck_assert_int_eq(ngx_http_session_route_class(&rt, GET),
                     NGX_HTTP_SESSION_CLASS_OTHER);

    (void) ngx_http_session_route_match(U("/api/v1/sessions/s/images"), 25,
                                        &rt);
    ck_assert_int_eq(ngx_http_session_route_class(&rt, POST),
                     NGX_HTTP_SESSION_CLASS_OTHER);
    ck_assert_int_eq(ngx_http_session_route_class(&rt, GET),
                     NGX_HTTP_SESSION_CLASS_OTHER);
}
END_TEST


START_TEST(test_route_allow)
{
    const ngx_http_session_allow_vec_t  *v;

    v = &allow_vecs[_i];

    ck_assert_str_eq(ngx_http_session_route_allow(v->methods), v->allow);
}
END_TEST


Suite *
make_route_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("route");

    tc = tcase_create("match");
    tcase_add_loop_test(tc, test_route_match, 0, NELTS(route_vecs));
    tcase_add_loop_test(tc, test_route_methods, 0, NELTS(route_vecs));
    suite_add_tcase(s, tc);

    tc = tcase_create("class");
    tcase_add_loop_test(tc, test_route_class, 0, NELTS(class_vecs));
    tcase_add_test(tc, test_route_class_from_path);
    suite_add_tcase(s, tc);

    tc = tcase_create("allow");
    tcase_add_loop_test(tc, test_route_allow, 0, NELTS(allow_vecs));
    suite_add_tcase(s, tc);

    return s;
}
