/*
 * src/core/ngx_http_session_json.{c,h}: escaping of JSON string contents
 * (error messages carry user input such as "unknown field: <name>") and
 * the reason phrases of error bodies (docs/api.md §2).
 *
 * Inputs are literals with an explicit length, copied to a heap buffer of
 * exactly that length, so embedded NULs count and a read past the end is
 * reported under valgrind or -fsanitize=address.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_json.h"


/* a literal and its length without the terminating NUL */
#define S(s)     (s), (sizeof(s) - 1)

#define FFFD     "\\ufffd"


typedef struct {
    const char  *in;
    size_t       len;
    const char  *out;
} ngx_http_session_escape_vec_t;


#define E(in, out)  { S(in), out }

static const ngx_http_session_escape_vec_t  escape_vecs[] = {
    E("", ""),
    E("a", "a"),
    E("unknown field: name", "unknown field: name"),
    E("/ and ' stay", "/ and ' stay"),
    E("~", "~"),

    /* the two characters JSON requires escaped */
    E("\"", "\\\""),
    E("\\", "\\\\"),
    E("a\"b\\c", "a\\\"b\\\\c"),
    E("\\\"", "\\\\\\\""),

    /* control characters as \u00XX, lower-case hex, DEL too */
    E("\0", "\\u0000"),
    E("\x01", "\\u0001"),
    E("\b", "\\u0008"),
    E("\t", "\\u0009"),
    E("\n", "\\u000a"),
    E("\r", "\\u000d"),
    E("\x1b", "\\u001b"),
    E("\x1f", "\\u001f"),
    E("\x7f", "\\u007f"),
    E("a\0b", "a\\u0000b"),
    E("line1\r\nline2", "line1\\u000d\\u000aline2"),

    /* well-formed UTF-8 passes through unchanged */
    E("\xc2\x80", "\xc2\x80"),
    E("\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9"),
    E("\xdf\xbf", "\xdf\xbf"),
    E("\xe0\xa0\x80", "\xe0\xa0\x80"),
    E("\xe2\x82\xac", "\xe2\x82\xac"),
    E("\xed\x9f\xbf", "\xed\x9f\xbf"),
    E("\xee\x80\x80", "\xee\x80\x80"),
    E("\xef\xbb\xbf", "\xef\xbb\xbf"),
    E("\xef\xbf\xbd", "\xef\xbf\xbd"),
    E("\xef\xbf\xbf", "\xef\xbf\xbf"),
    E("\xf0\x90\x80\x80", "\xf0\x90\x80\x80"),
    E("\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"),
    E("\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"),
    E("\xe2\x80\xa8\xe2\x80\xa9", "\xe2\x80\xa8\xe2\x80\xa9"),

    /* invalid UTF-8: each byte that starts no valid sequence is U+FFFD */
    E("\x80", FFFD),
    E("\xbf", FFFD),
    E("\xff", FFFD),
    E("\xfe", FFFD),
    E("a\x80z", "a" FFFD "z"),
    /* overlong forms */
    E("\xc0\x80", FFFD FFFD),
    E("\xc1\xbf", FFFD FFFD),
    E("\xe0\x80\x80", FFFD FFFD FFFD),
    E("\xe0\x9f\xbf", FFFD FFFD FFFD),
    E("\xf0\x80\x80\x80", FFFD FFFD FFFD FFFD),
    E("\xf0\x8f\xbf\xbf", FFFD FFFD FFFD FFFD),
    /* UTF-16 surrogates */
    E("\xed\xa0\x80", FFFD FFFD FFFD),
    E("\xed\xbf\xbf", FFFD FFFD FFFD),
    E("\xed\xa0\xbd\xed\xb8\x80", FFFD FFFD FFFD FFFD FFFD FFFD),
    /* past U+10FFFF, and lead bytes that never start a sequence */
    E("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD),
    E("\xf5\x80\x80\x80", FFFD FFFD FFFD FFFD),
    E("\xf8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD),
    /* truncated sequences, at the end and in the middle */
    E("\xc3", FFFD),
    E("\xe2\x82", FFFD FFFD),
    E("\xf0\x9f\x98", FFFD FFFD FFFD),
    E("\xc3" "a", FFFD "a"),
    E("\xe2\x82" "a", FFFD FFFD "a"),
    E("\xe2" "a\xac", FFFD "a" FFFD),
    E("\xf0\x9f\x98" "\"", FFFD FFFD FFFD "\\\""),
    /* a valid sequence right after an invalid byte is kept */
    E("\x80\xc3\xa9", FFFD "\xc3\xa9"),
    E("\xc3\xc3\xa9", FFFD "\xc3\xa9"),
    /* a control byte as a continuation: both escaped on their own */
    E("\xc3\n", FFFD "\\u000a"),
};


typedef struct {
    unsigned     status;
    const char  *phrase;
} ngx_http_session_reason_vec_t;


static const ngx_http_session_reason_vec_t  reason_vecs[] = {
    { 200, "OK" },
    { 201, "Created" },
    { 304, "Not Modified" },
    { 400, "Bad Request" },
    { 401, "Unauthorized" },
    { 403, "Forbidden" },
    { 404, "Not Found" },
    { 405, "Method Not Allowed" },
    { 409, "Conflict" },
    { 410, "Gone" },
    /* docs/api.md §2 names these two */
    { 413, "Payload Too Large" },
    { 422, "Unprocessable Entity" },
    { 414, "URI Too Long" },
    { 415, "Unsupported Media Type" },
    { 429, "Too Many Requests" },
    { 500, "Internal Server Error" },
    { 501, "Not Implemented" },
    { 503, "Service Unavailable" },
    /* nginx's own 494 is sent as 400: it has no phrase of its own */
    { 494, "Unknown" },
    { 0, "Unknown" },
    { 100, "Unknown" },
    { 418, "Unknown" },
    { 599, "Unknown" },
    { 4290, "Unknown" },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))

/* bytes past the output that must stay untouched */
#define CANARY    0x5a
#define SLACK     16


static unsigned char *
escape(const char *in, size_t len, size_t *out_len, size_t *count)
{
    size_t          i, cap;
    unsigned char  *src, *dst;

    src = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(src);
    memcpy(src, in, len);

    cap = NGX_HTTP_SESSION_JSON_ESCAPED_MAX(len);

    dst = malloc(cap + SLACK);
    ck_assert_ptr_nonnull(dst);
    memset(dst, CANARY, cap + SLACK);

    *count = ngx_http_session_json_escape(NULL, src, len);
    *out_len = ngx_http_session_json_escape(dst, src, len);

    ck_assert_uint_le(*out_len, cap);

    /* nothing past the returned length, within the bound or beyond */
    for (i = *out_len; i < cap + SLACK; i++) {
        ck_assert_msg(dst[i] == CANARY, "byte %zu past the output of %zu"
                      " bytes was written", i, *out_len);
    }

    /* the input is left as it was */
    ck_assert_int_eq(memcmp(src, in, len), 0);

    free(src);

    return dst;
}


START_TEST(test_escape)
{
    size_t                                n, count;
    unsigned char                        *out;
    const ngx_http_session_escape_vec_t  *v;

    v = &escape_vecs[_i];

    out = escape(v->in, v->len, &n, &count);

    ck_assert_msg(n == strlen(v->out) && memcmp(out, v->out, n) == 0,
                  "vector %d: got \"%.*s\" (%zu bytes), expected \"%s\"",
                  _i, (int) n, (const char *) out, n, v->out);
    ck_assert_uint_eq(count, n);

    free(out);
}
END_TEST


/*
 * Every single byte on its own: printable ASCII other than " and \ is
 * itself, the rest takes at most the bound, and the output is always
 * printable ASCII (no raw control byte, no lone high byte).
 */
START_TEST(test_escape_every_byte)
{
    size_t          n, count, i;
    char            in[1];
    unsigned char  *out;

    in[0] = (char) _i;

    out = escape(in, 1, &n, &count);

    ck_assert_uint_eq(count, n);

    if (_i >= 0x20 && _i < 0x7f && _i != '"' && _i != '\\') {
        ck_assert_uint_eq(n, 1);
        ck_assert_int_eq(out[0], _i);

    } else if (_i == '"' || _i == '\\') {
        ck_assert_uint_eq(n, 2);
        ck_assert_int_eq(out[0], '\\');
        ck_assert_int_eq(out[1], _i);

    } else {
        /* \u00XX for control bytes, \ufffd for any byte >= 0x80 alone */
        ck_assert_uint_eq(n, 6);
        ck_assert_int_eq(out[0], '\\');
        ck_assert_int_eq(out[1], 'u');
    }

    for (i = 0; i < n; i++) {
        ck_assert_msg(out[i] >= 0x20 && out[i] < 0x7f,
                      "byte 0x%02x: output byte %zu is 0x%02x", _i, i,
                      out[i]);
    }

    free(out);
}
END_TEST


/*
 * Every two-byte input: the output never holds a raw control byte, a raw
 * '"' or '\' that is not escaped, and is valid UTF-8 (checked by escaping
 * it again: valid UTF-8 without specials comes back unchanged).
 */
START_TEST(test_escape_every_pair)
{
    int             c;
    size_t          n, n2, count, i;
    char            in[2];
    unsigned char  *out, *again;

    for (c = 0; c < 256; c++) {
        in[0] = (char) _i;
        in[1] = (char) c;

        out = escape(in, 2, &n, &count);
        ck_assert_uint_eq(count, n);

        for (i = 0; i < n; i++) {
            ck_assert_msg(out[i] >= 0x20 && out[i] != 0x7f,
                          "0x%02x 0x%02x: raw control byte in output",
                          _i, c);

            if (out[i] == '\\') {
                ck_assert_msg(i + 1 < n, "0x%02x 0x%02x: trailing \\", _i,
                              c);
                i++;
            } else {
                ck_assert_msg(out[i] != '"', "0x%02x 0x%02x: raw quote",
                              _i, c);
            }
        }

        /* take the escapes away: what is left must be valid UTF-8 */
        {
            size_t          j;
            unsigned char  *plain;

            plain = malloc(n + 1);
            ck_assert_ptr_nonnull(plain);

            for (i = 0, j = 0; i < n; i++) {
                if (out[i] == '\\') {
                    i += out[i + 1] == 'u' ? 5 : 1;
                    continue;
                }

                plain[j++] = out[i];
            }

            again = escape((const char *) plain, j, &n2, &count);
            ck_assert_msg(n2 == j && memcmp(again, plain, j) == 0,
                          "0x%02x 0x%02x: output is not valid UTF-8", _i,
                          c);

            free(again);
            free(plain);
        }

        free(out);
    }
}
END_TEST


START_TEST(test_escape_bound)
{
    size_t          n, count;
    unsigned char  *out;
    static const char  worst[] = "\0\x01\x1f\x7f\x80\xff\xc0\xed\xa0\x80";

    /* every byte takes 6: the bound is reached exactly */
    out = escape(worst, sizeof(worst) - 1, &n, &count);
    ck_assert_uint_eq(n, NGX_HTTP_SESSION_JSON_ESCAPED_MAX(sizeof(worst) - 1));
    free(out);

    ck_assert_uint_eq(NGX_HTTP_SESSION_JSON_ESCAPED_MAX(0), 0);
    ck_assert_uint_eq(NGX_HTTP_SESSION_JSON_ESCAPED_MAX(1), 6);
    ck_assert_uint_eq(NGX_HTTP_SESSION_JSON_ESCAPED_MAX(10 + 1), 66);
}
END_TEST


START_TEST(test_reason)
{
    const ngx_http_session_reason_vec_t  *v;

    v = &reason_vecs[_i];

    ck_assert_str_eq(ngx_http_session_reason(v->status), v->phrase);
}
END_TEST


/* a phrase is never empty and never needs escaping */
START_TEST(test_reason_every_status)
{
    size_t       len, count;
    const char  *p;

    p = ngx_http_session_reason((unsigned) _i);

    ck_assert_ptr_nonnull(p);

    len = strlen(p);
    ck_assert_uint_gt(len, 0);

    count = ngx_http_session_json_escape(NULL, (const unsigned char *) p,
                                         len);
    ck_assert_uint_eq(count, len);
}
END_TEST


/* the status line is "NNN Phrase" for a known status, NULL for others */
START_TEST(test_status_line_every_status)
{
    char         want[64];
    const char  *line, *phrase;

    line = ngx_http_session_status_line((unsigned) _i);
    phrase = ngx_http_session_reason((unsigned) _i);

    if (strcmp(phrase, "Unknown") == 0) {
        ck_assert_ptr_null(line);
        return;
    }

    ck_assert_ptr_nonnull(line);

    snprintf(want, sizeof(want), "%d %s", _i, phrase);
    ck_assert_str_eq(line, want);
}
END_TEST


typedef struct {
    uint64_t     n;
    const char  *text;
} ngx_http_session_decimal_vec_t;


static const ngx_http_session_decimal_vec_t  decimal_vecs[] = {
    { 0, "0" },
    { 1, "1" },
    { 9, "9" },
    { 10, "10" },
    { 60, "60" },
    { 99, "99" },
    { 100, "100" },
    { 1000000000, "1000000000" },
    { 1795000000, "1795000000" },
    { 4294967295u, "4294967295" },
    { 4294967296u, "4294967296" },
    { 18446744073709551615u, "18446744073709551615" }
};


START_TEST(test_decimal)
{
    size_t                                 len;
    unsigned char                         *end;
    unsigned char                          buf[NGX_HTTP_SESSION_DECIMAL_MAX
                                               + 1];
    const ngx_http_session_decimal_vec_t  *v;

    v = &decimal_vecs[_i];

    memset(buf, 'x', sizeof(buf));
    end = ngx_http_session_decimal(buf, v->n);
    len = end - buf;

    ck_assert_uint_eq(len, strlen(v->text));
    ck_assert(memcmp(buf, v->text, len) == 0);
    /* nothing written past the digits */
    ck_assert_int_eq(buf[len], 'x');
}
END_TEST


/* every value below 100000 against snprintf */
START_TEST(test_decimal_against_printf)
{
    uint64_t        n;
    unsigned char  *end;
    unsigned char   buf[NGX_HTTP_SESSION_DECIMAL_MAX];
    char            want[32];

    for (n = 0; n < 100000; n++) {
        end = ngx_http_session_decimal(buf, n);
        snprintf(want, sizeof(want), "%llu", (unsigned long long) n);
        ck_assert_uint_eq((size_t) (end - buf), strlen(want));
        ck_assert(memcmp(buf, want, end - buf) == 0);
    }
}
END_TEST


Suite *
make_json_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("json");

    tc = tcase_create("escape");
    tcase_add_loop_test(tc, test_escape, 0, NELTS(escape_vecs));
    tcase_add_loop_test(tc, test_escape_every_byte, 0, 256);
    tcase_add_loop_test(tc, test_escape_every_pair, 0, 256);
    tcase_add_test(tc, test_escape_bound);
    suite_add_tcase(s, tc);

    tc = tcase_create("reason");
    tcase_add_loop_test(tc, test_reason, 0, NELTS(reason_vecs));
    tcase_add_loop_test(tc, test_reason_every_status, 100, 600);
    tcase_add_loop_test(tc, test_status_line_every_status, 0, 1000);
    suite_add_tcase(s, tc);

    tc = tcase_create("decimal");
    tcase_add_loop_test(tc, test_decimal, 0, NELTS(decimal_vecs));
    tcase_add_test(tc, test_decimal_against_printf);
    suite_add_tcase(s, tc);

    return s;
}
