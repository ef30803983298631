/*
 * src/core/ngx_http_session_body.{c,h}: the body of POST /api/v1/sessions
 * (docs/api.md §5 and §10) and integer query parameters.
 *
 * Bodies are given with an explicit length and copied to a heap buffer of
 * exactly that many bytes, as nginx's request body is not NUL-terminated:
 * under valgrind or -fsanitize=address a read past the end is reported.
 */

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_url.h"


#define U(s)     ((const unsigned char *) (s))
/* a literal and its length without the terminating NUL */
#define S(s)     U(s), (sizeof(s) - 1)

#define TTL      86400

#define WEBHOOK  NGX_HTTP_SESSION_MODE_WEBHOOK
#define POLL     NGX_HTTP_SESSION_MODE_LONG_POLL

#define NOT_OBJECT     "request body must be a JSON object"
#define MODE_REQUIRED  "delivery_mode is required"
#define MODE_TYPE      "delivery_mode must be a string"
#define MODE_VALUE     "delivery_mode must be one of: webhook, long_poll"
#define URL_REQUIRED   "webhook_url is required when delivery_mode is webhook"
#define URL_FORBIDDEN                                                         \
    "webhook_url is only allowed when delivery_mode is webhook"
#define URL_TYPE       "webhook_url must be a string"
#define URL_INVALID    "webhook_url must be an absolute http or https URL"
#define URL_PRIVATE    "webhook_url must not point to a private address"
#define EXPIRES        "expires_in must be an integer between 1 and 86400"

/* the start of a body with a valid delivery_mode */
#define LP       "{\"delivery_mode\":\"long_poll\""
#define WH       "{\"delivery_mode\":\"webhook\""
#define HOOK     "\"https://example.com/hook\""
#define BIG      "99999999999999999999"


typedef struct {
    const unsigned char  *body;
    size_t                len;
    long long             max_ttl;
    int                   allow_private;
    /* the message, or NULL for success and then the fields */
    const char           *msg;
    int                   mode;
    const char           *url;
    /* -1 when absent */
    long long             expires;
} ngx_http_session_body_vec_t;


typedef struct {
    const unsigned char  *s;
    size_t                len;
    long long             min;
    long long             max;
    /* -1 when refused */
    long long             value;
} ngx_http_session_int_vec_t;


/* a refused body */
#define E(body, msg)                                                          \
    { S(body), TTL, 0, msg, 0, NULL, -1 }
/* an accepted body */
#define A(body, mode, url, expires)                                           \
    { S(body), TTL, 0, NULL, mode, url, expires }


static const ngx_http_session_body_vec_t  body_vecs[] = {

    /* accepted */
    A(LP "}", POLL, NULL, -1),
    A(" \n\t\r{ \"delivery_mode\" : \"long_poll\" } \r\n\t ", POLL, NULL,
      -1),
    A(LP ",\"webhook_url\":null}", POLL, NULL, -1),
    A(LP ",\"expires_in\":null}", POLL, NULL, -1),
    A(LP ",\"expires_in\":60}", POLL, NULL, 60),
    A(LP ",\"expires_in\":1}", POLL, NULL, 1),
    A(LP ",\"expires_in\":86400}", POLL, NULL, 86400),
    A("{\"delivery_mode\":\"\\u006cong_poll\"}", POLL, NULL, -1),
    A(WH ",\"webhook_url\":" HOOK "}", WEBHOOK,
      "https://example.com/hook", -1),
    A(WH ",\"webhook_url\":" HOOK ",\"expires_in\":3600}", WEBHOOK,
      "https://example.com/hook", 3600),
    A("{\"expires_in\":5,\"webhook_url\":\"HTTP://Example.com:8080/a?b=c\","
      "\"delivery_mode\":\"webhook\"}", WEBHOOK,
      "HTTP://Example.com:8080/a?b=c", 5),
    A(WH ",\"webhook_url\":\"http:\\/\\/example.com\\/hook\"}", WEBHOOK,
      "http://example.com/hook", -1),
    A(WH ",\"webhook_url\":\"http://\\u0065xample.com/\"}", WEBHOOK,
      "http://example.com/", -1),

    /* not a JSON object */
    E("", NOT_OBJECT),
    E(" ", NOT_OBJECT),
    E("\n", NOT_OBJECT),
    E("null", NOT_OBJECT),
    E("true", NOT_OBJECT),
    E("false", NOT_OBJECT),
    E("0", NOT_OBJECT),
    E("1", NOT_OBJECT),
    E("\"delivery_mode\"", NOT_OBJECT),
    E("[]", NOT_OBJECT),
    E("[{\"delivery_mode\":\"long_poll\"}]", NOT_OBJECT),
    E("[" LP "}]", NOT_OBJECT),
    E("{", NOT_OBJECT),
    E("}", NOT_OBJECT),
    E("{}}", NOT_OBJECT),
    E("{}{}", NOT_OBJECT),
    E(LP, NOT_OBJECT),
    E(LP ",", NOT_OBJECT),
    E(LP ",}", NOT_OBJECT),
    E(LP "}}", NOT_OBJECT),
    E(LP "},{}", NOT_OBJECT),
    E(LP "} x", NOT_OBJECT),
    E(LP "}\0", NOT_OBJECT),
    E("\0" LP "}", NOT_OBJECT),
    E(LP "}\x1a", NOT_OBJECT),
    E(LP "}\xc2\xa0", NOT_OBJECT),
    E("{'delivery_mode':'long_poll'}", NOT_OBJECT),
    E("{delivery_mode:\"long_poll\"}", NOT_OBJECT),
    E("{\"delivery_mode\"=\"long_poll\"}", NOT_OBJECT),
    E("{\"delivery_mode\" \"long_poll\"}", NOT_OBJECT),
    E("/* c */" LP "}", NOT_OBJECT),
    E(LP "} // c", NOT_OBJECT),
    E(LP ",\"expires_in\":NaN}", NOT_OBJECT),
    E(LP ",\"expires_in\":Infinity}", NOT_OBJECT),
    E(LP ",\"expires_in\":-Infinity}", NOT_OBJECT),
    E(LP ",\"expires_in\":+1}", NOT_OBJECT),
    E(LP ",\"expires_in\":01}", NOT_OBJECT),
    E(LP ",\"expires_in\":.5}", NOT_OBJECT),
    E(LP ",\"expires_in\":1.}", NOT_OBJECT),
    E(LP ",\"expires_in\":1e}", NOT_OBJECT),
    E(LP ",\"expires_in\":0x10}", NOT_OBJECT),
    E(LP ",\"expires_in\":1_000}", NOT_OBJECT),
    E(LP ",\"expires_in\":undefined}", NOT_OBJECT),
    E(LP ",\"expires_in\":True}", NOT_OBJECT),
    E(LP ",\"x\":\"unterminated}", NOT_OBJECT),
    E(LP ",\"x\":\"\\x41\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\u12\"}", NOT_OBJECT),

    /* a byte-order mark */
    E("\xef\xbb\xbf" LP "}", NOT_OBJECT),
    E("\xef\xbb\xbf{}", NOT_OBJECT),
    E(" \xef\xbb\xbf" LP "}", NOT_OBJECT),
    E("\xfe\xff" LP "}", NOT_OBJECT),
    E(LP "}\xef\xbb\xbf", NOT_OBJECT),

    /* duplicate keys, at any depth, known or not, null or not */
    E(LP ",\"delivery_mode\":\"long_poll\"}", NOT_OBJECT),
    E("{\"delivery_mode\":null,\"delivery_mode\":\"long_poll\"}", NOT_OBJECT),
    E(LP ",\"expires_in\":1,\"expires_in\":1}", NOT_OBJECT),
    E(WH ",\"webhook_url\":" HOOK ",\"webhook_url\":" HOOK "}", NOT_OBJECT),
    E(LP ",\"x\":1,\"x\":2}", NOT_OBJECT),
    E(LP ",\"x\":null,\"x\":null}", NOT_OBJECT),
    E(LP ",\"x\":{\"a\":1,\"a\":2}}", NOT_OBJECT),
    E(LP ",\"x\":[{\"a\":1,\"a\":1}]}", NOT_OBJECT),
    E("{\"a\":1,\"\\u0061\":1}", NOT_OBJECT),

    /* escapes of unpaired surrogates, in values and in keys */
    E(LP ",\"x\":\"\\ud800\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\uDBFF\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\udc00\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\uDFFF\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\ud800x\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\ud800\\u0041\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\ud800\\ud800\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\\udc00\\ud800\"}", NOT_OBJECT),
    E(LP ",\"x\":\"a\\ud83d\"}", NOT_OBJECT),
    E(LP ",\"\\ud800\":1}", NOT_OBJECT),
    E("{\"delivery_mode\":\"long_poll\\udc00\"}", NOT_OBJECT),
    E(WH ",\"webhook_url\":\"http://example.com/\\ud800\"}", NOT_OBJECT),

    /* invalid UTF-8, in values, in keys and outside strings */
    E(LP ",\"x\":\"\xff\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xfe\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\x80\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xbf\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xc0\xaf\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xc1\xbf\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xe0\x80\xaf\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xf0\x80\x80\xaf\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xed\xa0\x80\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xed\xbf\xbf\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xf4\x90\x80\x80\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xf5\x80\x80\x80\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xe2\x82\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xc3\"}", NOT_OBJECT),
    E(LP ",\"x\":\"\xc3(\"}", NOT_OBJECT),
    E(LP ",\"\xff\":1}", NOT_OBJECT),
    E(LP ",\"x\xc3\":1}", NOT_OBJECT),
    E("{\"delivery_mode\":\"long_poll\xff\"}", NOT_OBJECT),
    E(WH ",\"webhook_url\":\"http://example.com/\xc3\"}", NOT_OBJECT),
    E(LP ",\xff\"x\":1}", NOT_OBJECT),

    /* raw control bytes in strings; "\u0000" in a key */
    E(LP ",\"x\":\"a\tb\"}", NOT_OBJECT),
    E(LP ",\"x\":\"a\nb\"}", NOT_OBJECT),
    E(LP ",\"x\":\"a\0b\"}", NOT_OBJECT),
    E(LP ",\"x\x1f\":1}", NOT_OBJECT),
    E(WH ",\"webhook_url\":\"http://example.com/\r\n\"}", NOT_OBJECT),
    E(LP ",\"a\\u0000b\":1}", NOT_OBJECT),
    E(LP ",\"\\u0000\":1}", NOT_OBJECT),

    /* delivery_mode: required, checked before everything else */
    E("{}", MODE_REQUIRED),
    E(" { } ", MODE_REQUIRED),
    E("{\"delivery_mode\":null}", MODE_REQUIRED),
    E("{\"x\":1}", MODE_REQUIRED),
    E("{\"x\":1,\"y\":2}", MODE_REQUIRED),
    E("{\"webhook_url\":" HOOK "}", MODE_REQUIRED),
    E("{\"webhook_url\":1}", MODE_REQUIRED),
    E("{\"expires_in\":0}", MODE_REQUIRED),
    E("{\"expires_in\":\"x\",\"x\":1,\"delivery_mode\":null}", MODE_REQUIRED),
    E("{\"Delivery_mode\":\"long_poll\"}", MODE_REQUIRED),
    E("{\"delivery_mode \":\"long_poll\"}", MODE_REQUIRED),
    E("{\"deliveryMode\":\"long_poll\"}", MODE_REQUIRED),
    E("{\"x\":{\"delivery_mode\":\"long_poll\"}}", MODE_REQUIRED),
    E("{\"expires_in\":" BIG "}", MODE_REQUIRED),

    /* delivery_mode: a string */
    E("{\"delivery_mode\":1}", MODE_TYPE),
    E("{\"delivery_mode\":0}", MODE_TYPE),
    E("{\"delivery_mode\":1.5}", MODE_TYPE),
    E("{\"delivery_mode\":true}", MODE_TYPE),
    E("{\"delivery_mode\":false}", MODE_TYPE),
    E("{\"delivery_mode\":[]}", MODE_TYPE),
    E("{\"delivery_mode\":[\"long_poll\"]}", MODE_TYPE),
    E("{\"delivery_mode\":{}}", MODE_TYPE),
    E("{\"delivery_mode\":{\"long_poll\":1}}", MODE_TYPE),
    E("{\"delivery_mode\":" BIG "}", MODE_TYPE),
    E("{\"delivery_mode\":-" BIG "}", MODE_TYPE),
    E("{\"delivery_mode\":1e400}", MODE_TYPE),
    E("{\"x\":1,\"delivery_mode\":1,\"expires_in\":0}", MODE_TYPE),

    /* delivery_mode: one of two */
    E("{\"delivery_mode\":\"\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"LONG_POLL\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"Webhook\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"long-poll\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"longpoll\"}", MODE_VALUE),
    E("{\"delivery_mode\":\" long_poll\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"long_poll \"}", MODE_VALUE),
    E("{\"delivery_mode\":\"long_poll\\u0000\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"webhook\\u0000\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"\\u0000\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"webhooks\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"webhoo\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"poll\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"null\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"webhook, long_poll\"}", MODE_VALUE),
    E("{\"delivery_mode\":\"long_poll\\n\"}", MODE_VALUE),
    E("{\"x\":1,\"delivery_mode\":\"x\",\"webhook_url\":1}", MODE_VALUE),

    /* webhook_url: required with webhook */
    E(WH "}", URL_REQUIRED),
    E(WH ",\"webhook_url\":null}", URL_REQUIRED),
    E(WH ",\"x\":1}", URL_REQUIRED),
    E(WH ",\"expires_in\":0}", URL_REQUIRED),
    E(WH ",\"webhookurl\":" HOOK "}", URL_REQUIRED),
    E(WH ",\"Webhook_url\":" HOOK "}", URL_REQUIRED),

    /* webhook_url: forbidden with long_poll, whatever its type */
    E(LP ",\"webhook_url\":" HOOK "}", URL_FORBIDDEN),
    E(LP ",\"webhook_url\":\"\"}", URL_FORBIDDEN),
    E(LP ",\"webhook_url\":\"not a url\"}", URL_FORBIDDEN),
    E(LP ",\"webhook_url\":1}", URL_FORBIDDEN),
    E(LP ",\"webhook_url\":false}", URL_FORBIDDEN),
    E(LP ",\"webhook_url\":{}}", URL_FORBIDDEN),
    E(LP ",\"webhook_url\":[]}", URL_FORBIDDEN),
    E(LP ",\"webhook_url\":" BIG "}", URL_FORBIDDEN),
    E("{\"x\":1,\"webhook_url\":1,\"delivery_mode\":\"long_poll\","
      "\"expires_in\":0}", URL_FORBIDDEN),

    /* webhook_url: a string */
    E(WH ",\"webhook_url\":1}", URL_TYPE),
    E(WH ",\"webhook_url\":1.0}", URL_TYPE),
    E(WH ",\"webhook_url\":true}", URL_TYPE),
    E(WH ",\"webhook_url\":{}}", URL_TYPE),
    E(WH ",\"webhook_url\":[" HOOK "]}", URL_TYPE),
    E(WH ",\"webhook_url\":{\"url\":" HOOK "}}", URL_TYPE),
    E(WH ",\"webhook_url\":-" BIG "}", URL_TYPE),
    E(WH ",\"webhook_url\":1e999}", URL_TYPE),
    E(WH ",\"x\":1,\"webhook_url\":false,\"expires_in\":0}", URL_TYPE),

    /* webhook_url: the URL rules */
    E(WH ",\"webhook_url\":\"\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"example.com\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"ftp://example.com/\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"https://user@example.com/\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"https://example.com/#x\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"https://example.com/ x\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"https://example.com/\\u0000\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"https://example.com\\u0000.evil/\"}",
      URL_INVALID),
    E(WH ",\"webhook_url\":\"https://example.com/\\n\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"https://example.com/\\u007f\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"http://b\\u00fccher.example/\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"http://b\xc3\xbc" "cher.example/\"}",
      URL_INVALID),
    E(WH ",\"webhook_url\":\"http://2130706433/\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"http://0x7f.1/\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"http://127.0.0.1:0/\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"http://[::1%25lo]/\"}", URL_INVALID),
    E(WH ",\"webhook_url\":\"http://127.0.0.1/\",\"expires_in\":0,"
      "\"x\":1}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"http://localhost:8080/\"}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"https://x.LOCALHOST./\"}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"http://10.1.2.3/\"}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"http://169.254.169.254/\"}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"http://[::1]/\"}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"http://[::ffff:7f00:1]/\"}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"http://[fe80::1]/\"}", URL_PRIVATE),
    { S(WH ",\"webhook_url\":\"http://127.0.0.1:8080/hook\"}"), TTL, 1,
      NULL, WEBHOOK, "http://127.0.0.1:8080/hook", -1 },
    { S(WH ",\"webhook_url\":\"http://[::1]/\",\"expires_in\":7}"), TTL, 1,
      NULL, WEBHOOK, "http://[::1]/", 7 },
    { S(WH ",\"webhook_url\":\"http://localhost/\",\"x\":1}"), TTL, 1,
      "unknown field: x", 0, NULL, -1 },
    { S(WH ",\"webhook_url\":\"http://0x7f.1/\"}"), TTL, 1,
      URL_INVALID, 0, NULL, -1 },

    /* expires_in: a JSON integer in range */
    E(LP ",\"expires_in\":0}", EXPIRES),
    E(LP ",\"expires_in\":-0}", EXPIRES),
    E(LP ",\"expires_in\":-1}", EXPIRES),
    E(LP ",\"expires_in\":86401}", EXPIRES),
    E(LP ",\"expires_in\":1.0}", EXPIRES),
    E(LP ",\"expires_in\":60.0}", EXPIRES),
    E(LP ",\"expires_in\":1.5}", EXPIRES),
    E(LP ",\"expires_in\":1e3}", EXPIRES),
    E(LP ",\"expires_in\":1E3}", EXPIRES),
    E(LP ",\"expires_in\":1e+3}", EXPIRES),
    E(LP ",\"expires_in\":6e-0}", EXPIRES),
    E(LP ",\"expires_in\":1e-400}", EXPIRES),
    E(LP ",\"expires_in\":1e400}", EXPIRES),
    E(LP ",\"expires_in\":-1e400}", EXPIRES),
    E(LP ",\"expires_in\":0.0}", EXPIRES),
    E(LP ",\"expires_in\":\"60\"}", EXPIRES),
    E(LP ",\"expires_in\":\"\"}", EXPIRES),
    E(LP ",\"expires_in\":true}", EXPIRES),
    E(LP ",\"expires_in\":false}", EXPIRES),
    E(LP ",\"expires_in\":[]}", EXPIRES),
    E(LP ",\"expires_in\":[60]}", EXPIRES),
    E(LP ",\"expires_in\":{}}", EXPIRES),
    E(LP ",\"expires_in\":" BIG "}", EXPIRES),
    E(LP ",\"expires_in\":-" BIG "}", EXPIRES),
    E(LP ",\"expires_in\":" BIG BIG BIG BIG BIG "}", EXPIRES),
    E(LP ",\"expires_in\":9223372036854775807}", EXPIRES),
    E(LP ",\"expires_in\":9223372036854775808}", EXPIRES),
    E(LP ",\"expires_in\":18446744073709551616}", EXPIRES),
    E(LP ",\"expires_in\":18446744073709637999}", EXPIRES),
    E(LP ",\"expires_in\":-9223372036854775808}", EXPIRES),
    E(LP ",\"expires_in\":-9223372036854775809}", EXPIRES),
    E(LP ",\"expires_in\":-18446744073709465216}", EXPIRES),
    E("{\"x\":1,\"expires_in\":0,\"delivery_mode\":\"long_poll\"}", EXPIRES),
    E(WH ",\"webhook_url\":" HOOK ",\"expires_in\":1.0,\"y\":2}", EXPIRES),
    { S(LP ",\"expires_in\":3601}"), 3600, 0,
      "expires_in must be an integer between 1 and 3600", 0, NULL, -1 },
    { S(LP ",\"expires_in\":3600}"), 3600, 0, NULL, POLL, NULL, 3600 },
    { S(LP ",\"expires_in\":2}"), 1, 0,
      "expires_in must be an integer between 1 and 1", 0, NULL, -1 },
    { S(LP ",\"expires_in\":9223372036854775807}"), LLONG_MAX, 0,
      NULL, POLL, NULL, LLONG_MAX },
    { S(LP ",\"expires_in\":9223372036854775808}"), LLONG_MAX, 0,
      "expires_in must be an integer between 1 and 9223372036854775807", 0,
      NULL, -1 },

    /* huge numbers are judged where they stand, strings are left alone */
    E(LP ",\"big\":" BIG "}", "unknown field: big"),
    E(LP ",\"big\":-" BIG "}", "unknown field: big"),
    E(LP ",\"big\":1e400}", "unknown field: big"),
    E(LP ",\"big\":[1e400,{\"a\":-" BIG "}]}", "unknown field: big"),
    E("{\"big\":" BIG "," "\"delivery_mode\":\"long_poll\",\"small\":1}",
      "unknown field: big"),
    E(LP ",\"a\\\"" BIG "\":" BIG "}", "unknown field: a\"" BIG),
    E(LP ",\"a\\\\\":" BIG ",\"b\":1}", "unknown field: a\\"),
    E(LP ",\"" BIG "\":1}", "unknown field: " BIG),
    E(WH ",\"webhook_url\":\"http://127.0.0.1/" BIG "\",\"expires_in\":"
      BIG "}", URL_PRIVATE),
    E(WH ",\"webhook_url\":\"https://example.com/?n=1e400\",\"x\":" BIG
      "}", "unknown field: x"),
    E(LP ",\"expires_in\":" BIG ",\"expires_in\":1}", NOT_OBJECT),
    E(LP ",\"expires_in\":" BIG "", NOT_OBJECT),
    E(LP ",\"expires_in\":" BIG "x}", NOT_OBJECT),
    E(LP ",\"expires_in\":0" BIG "}", NOT_OBJECT),
    E(LP ",\"expires_in\":" BIG ".}", NOT_OBJECT),
    E(LP ",\"expires_in\":" BIG "e}", NOT_OBJECT),
    E(LP ",\"expires_in\":-" BIG "-}", NOT_OBJECT),
    E(LP ",\"expires_in\" " BIG "}", NOT_OBJECT),
    E(LP "," BIG ":1}", NOT_OBJECT),
    E(LP ",\"x\":\"\xff\",\"big\":" BIG "}", NOT_OBJECT),
    E(LP ",\"big\":" BIG ",\"x\":\"\xff\"}", NOT_OBJECT),
    E(LP ",\"big\":" BIG ",\"x\":\"\\ud800\"}", NOT_OBJECT),
    E("\xef\xbb\xbf" LP ",\"big\":" BIG "}", NOT_OBJECT),
    E(BIG, NOT_OBJECT),
    E("[" BIG "]", NOT_OBJECT),

    /* anything else: refused whatever its value, after every known field */
    E(LP ",\"x\":1}", "unknown field: x"),
    E(LP ",\"x\":null}", "unknown field: x"),
    E(LP ",\"x\":\"\"}", "unknown field: x"),
    E(LP ",\"x\":{}}", "unknown field: x"),
    E(LP ",\"x\":[]}", "unknown field: x"),
    E(LP ",\"x\":{\"y\":{\"z\":[1,2,{\"w\":null}]}}}", "unknown field: x"),
    E(LP ",\"x\":\"\\u0000\"}", "unknown field: x"),
    E("{\"x\":1," "\"delivery_mode\":\"long_poll\"}", "unknown field: x"),
    E("{\"zeta\":1,\"delivery_mode\":\"long_poll\",\"alpha\":2}",
      "unknown field: zeta"),
    E(LP ",\"b\":1,\"a\":2}", "unknown field: b"),
    E(LP ",\"a\":1,\"b\":2}", "unknown field: a"),
    E(WH ",\"webhook_url\":" HOOK ",\"expires_in\":60,\"id\":\"x\"}",
      "unknown field: id"),
    E(LP ",\"status\":\"open\",\"expires_in\":60}", "unknown field: status"),
    E(LP ",\"Expires_in\":60}", "unknown field: Expires_in"),
    E(LP ",\"expires_in \":60}", "unknown field: expires_in "),
    E(LP ",\"webhook_url\\u0020\":1}", "unknown field: webhook_url "),
    E(LP ",\"\":1}", "unknown field: "),
    E(LP ",\" \":1}", "unknown field:  "),
    E(LP ",\"a\\\"b\":1}", "unknown field: a\"b"),
    E(LP ",\"a\\nb\":1}", "unknown field: a\nb"),
    E(LP ",\"\\t\":1}", "unknown field: \t"),
    E(LP ",\"\\u001f\":1}", "unknown field: \x1f"),
    E(LP ",\"\\/\":1}", "unknown field: /"),
    E(LP ",\"caf\\u00e9\":1}", "unknown field: caf\xc3\xa9"),
    E(LP ",\"caf\xc3\xa9\":1}", "unknown field: caf\xc3\xa9"),
    E(LP ",\"\\ud83d\\ude00\":1}", "unknown field: \xf0\x9f\x98\x80"),
    E(LP ",\"\xef\xbb\xbf\":1}", "unknown field: \xef\xbb\xbf"),
    E(LP ",\"<script>\":1}", "unknown field: <script>"),
    E(LP ",\"%s%n\":1}", "unknown field: %s%n"),
    E(WH ",\"webhook_url\":" HOOK ",\"webhook_url_2\":1}",
      "unknown field: webhook_url_2"),
};


static const ngx_http_session_int_vec_t  int_vecs[] = {
    { S("1"), 1, 100, 1 },
    { S("20"), 1, 100, 20 },
    { S("100"), 1, 100, 100 },
    { S("007"), 1, 100, 7 },
    { S("0100"), 1, 100, 100 },
    { S("00000000000000000000000000000000000000000050"), 1, 100, 50 },
    { S("0"), 0, 60, 0 },
    { S("00"), 0, 60, 0 },
    { S("60"), 0, 60, 60 },
    { S("9223372036854775807"), 0, LLONG_MAX, LLONG_MAX },
    { S("09223372036854775807"), 0, LLONG_MAX, LLONG_MAX },
    { U("12"), 1, 1, 100, 1 },

    { S(""), 1, 100, -1 },
    { U("5"), 0, 1, 100, -1 },
    { S("0"), 1, 100, -1 },
    { S("000"), 1, 100, -1 },
    { S("101"), 1, 100, -1 },
    { S("1000"), 1, 100, -1 },
    { S("61"), 0, 60, -1 },
    { S("+1"), 1, 100, -1 },
    { S("-1"), 1, 100, -1 },
    { S("-0"), 0, 60, -1 },
    { S(" 1"), 1, 100, -1 },
    { S("1 "), 1, 100, -1 },
    { S("1\0"), 1, 100, -1 },
    { S("\0" "1"), 1, 100, -1 },
    { S("1a"), 1, 100, -1 },
    { S("a1"), 1, 100, -1 },
    { S("0x10"), 1, 100, -1 },
    { S("1.0"), 1, 100, -1 },
    { S("1e2"), 1, 100, -1 },
    { S("1,000"), 1, 10000, -1 },
    { S("\xd9\xa1"), 1, 100, -1 },
    { S("99999999999999999999"), 1, 100, -1 },
    { S("9223372036854775808"), 0, LLONG_MAX, -1 },
    { S("18446744073709551617"), 0, LLONG_MAX, -1 },
    { S("99999999999999999999999999999999999999"), 0, LLONG_MAX, -1 },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))


static int
run_parse(const unsigned char *body, size_t len, long long max_ttl,
    int allow_private, ngx_http_session_create_t *c, char *msg,
    size_t size)
{
    int             rc;
    unsigned char  *copy;

    copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, body, len);

    rc = ngx_http_session_create_parse(copy, len, max_ttl, allow_private, c,
                                       msg, size);

    free(copy);

    return rc;
}


START_TEST(test_create)
{
    int                                 rc;
    char                                msg[NGX_HTTP_SESSION_BODY_MSG_MAX];
    ngx_http_session_create_t           c;
    const ngx_http_session_body_vec_t  *v;

    v = &body_vecs[_i];

    memset(msg, 'X', sizeof(msg));

    rc = run_parse(v->body, v->len, v->max_ttl, v->allow_private, &c, msg,
                   sizeof(msg));

    if (v->msg != NULL) {
        ck_assert_msg(rc == NGX_HTTP_SESSION_CREATE_INVALID,
                      "vector %d (%.*s): expected invalid, got %d", _i,
                      (int) v->len, (const char *) v->body, rc);
        ck_assert_msg(strcmp(msg, v->msg) == 0,
                      "vector %d (%.*s): expected \"%s\", got \"%s\"", _i,
                      (int) v->len, (const char *) v->body, v->msg, msg);
        ck_assert_ptr_null(c.webhook_url);
        ngx_http_session_create_free(&c);
        return;
    }

    ck_assert_msg(rc == NGX_HTTP_SESSION_CREATE_OK,
                  "vector %d (%.*s): expected ok, got %d \"%s\"", _i,
                  (int) v->len, (const char *) v->body, rc, msg);
    ck_assert_int_eq(c.delivery_mode, v->mode);

    if (v->url == NULL) {
        ck_assert_ptr_null(c.webhook_url);
        ck_assert_uint_eq(c.webhook_url_len, 0);

    } else {
        ck_assert_ptr_nonnull(c.webhook_url);
        ck_assert_str_eq(c.webhook_url, v->url);
        ck_assert_uint_eq(c.webhook_url_len, strlen(v->url));
    }

    if (v->expires == -1) {
        ck_assert_int_eq(c.has_expires_in, 0);
        ck_assert_int_eq(c.expires_in, 0);

    } else {
        ck_assert_int_eq(c.has_expires_in, 1);
        ck_assert_int_eq(c.expires_in, v->expires);
    }

    ngx_http_session_create_free(&c);
    ck_assert_ptr_null(c.webhook_url);

    /* free is idempotent */
    ngx_http_session_create_free(&c);
}
END_TEST


/* the first unknown field in document order, whatever jansson hashes */

START_TEST(test_create_unknown_order)
{
    int                        i, n, rc;
    char                       msg[NGX_HTTP_SESSION_BODY_MSG_MAX];
    char                       body[4096], expected[64];
    ngx_http_session_create_t  c;

    /* 64 keys, rotated so that each takes a turn at the front */

    n = sprintf(body, "{\"delivery_mode\":\"long_poll\"");

    for (i = 0; i < 64; i++) {
        n += sprintf(body + n, ",\"k%02d_%c\":%d", (i + _i) % 64,
                     'a' + (i * 7 + _i) % 26, i);
    }

    n += sprintf(body + n, "}");

    (void) sprintf(expected, "unknown field: k%02d_%c", _i % 64,
                   'a' + _i % 26);

    rc = run_parse(U(body), n, TTL, 0, &c, msg, sizeof(msg));

    ck_assert_int_eq(rc, NGX_HTTP_SESSION_CREATE_INVALID);
    ck_assert_str_eq(msg, expected);

    ngx_http_session_create_free(&c);
}
END_TEST


/* webhook_url of 2048 bytes is taken, 2049 are not */

START_TEST(test_create_url_length)
{
    int                        rc;
    char                       msg[NGX_HTTP_SESSION_BODY_MSG_MAX];
    char                      *body;
    size_t                     n, url_len;
    ngx_http_session_create_t  c;

    url_len = NGX_HTTP_SESSION_URL_MAX_LEN + _i;

    body = malloc(url_len + 128);
    ck_assert_ptr_nonnull(body);

    n = sprintf(body, WH ",\"webhook_url\":\"https://example.com/");
    memset(body + n, 'a', url_len - (sizeof("https://example.com/") - 1));
    n += url_len - (sizeof("https://example.com/") - 1);
    n += sprintf(body + n, "\"}");

    rc = run_parse(U(body), n, TTL, 0, &c, msg, sizeof(msg));

    if (_i == 0) {
        ck_assert_int_eq(rc, NGX_HTTP_SESSION_CREATE_OK);
        ck_assert_uint_eq(c.webhook_url_len, url_len);
        ck_assert_uint_eq(strlen(c.webhook_url), url_len);

    } else {
        ck_assert_int_eq(rc, NGX_HTTP_SESSION_CREATE_INVALID);
        ck_assert_str_eq(msg, URL_INVALID);
    }

    ngx_http_session_create_free(&c);
    free(body);
}
END_TEST


/*
 * A long unknown name is cut to the buffer at a character boundary; a
 * buffer of the body's length plus the minimum holds it whole.
 */

START_TEST(test_create_unknown_long)
{
    int                        rc;
    char                      *body, *msg, *name;
    size_t                     n, name_len, size, prefix;
    ngx_http_session_create_t  c;

    name_len = 2000;
    prefix = sizeof("unknown field: ") - 1;

    name = malloc(name_len + 1);
    body = malloc(name_len + 128);
    msg = malloc(name_len + 128 + NGX_HTTP_SESSION_BODY_MSG_MAX);
    ck_assert_ptr_nonnull(name);
    ck_assert_ptr_nonnull(body);
    ck_assert_ptr_nonnull(msg);

    /* "é" (two bytes) straddles the cut of a 512-byte buffer when _i is 1 */

    memset(name, 'n', name_len);
    memcpy(name + 511 - prefix - _i, "\xc3\xa9", 2);
    name[name_len] = '\0';

    n = sprintf(body, LP ",\"%s\":1}", name);

    size = NGX_HTTP_SESSION_BODY_MSG_MAX;
    rc = run_parse(U(body), n, TTL, 0, &c, msg, size);

    ck_assert_int_eq(rc, NGX_HTTP_SESSION_CREATE_INVALID);
    ck_assert_uint_eq(strlen(msg), _i == 0 ? size - 1 : size - 2);
    ck_assert(memcmp(msg, "unknown field: ", prefix) == 0);
    ck_assert(memcmp(msg + prefix, name, strlen(msg) - prefix) == 0);

    size = n + NGX_HTTP_SESSION_BODY_MSG_MAX;
    rc = run_parse(U(body), n, TTL, 0, &c, msg, size);

    ck_assert_int_eq(rc, NGX_HTTP_SESSION_CREATE_INVALID);
    ck_assert_uint_eq(strlen(msg), prefix + name_len);
    ck_assert_str_eq(msg + prefix, name);

    ngx_http_session_create_free(&c);
    free(name);
    free(body);
    free(msg);
}
END_TEST


/* nesting: deep is fine, past jansson's 2048 levels is not JSON to us */

START_TEST(test_create_nesting)
{
    int                        rc, depth;
    char                       msg[NGX_HTTP_SESSION_BODY_MSG_MAX];
    char                      *body;
    size_t                     n;
    ngx_http_session_create_t  c;

    depth = _i == 0 ? 1000 : 3000;

    body = malloc(2 * depth + 64);
    ck_assert_ptr_nonnull(body);

    n = sprintf(body, LP ",\"x\":");
    memset(body + n, '[', depth);
    n += depth;
    memset(body + n, ']', depth);
    n += depth;
    body[n++] = '}';

    rc = run_parse(U(body), n, TTL, 0, &c, msg, sizeof(msg));

    ck_assert_int_eq(rc, NGX_HTTP_SESSION_CREATE_INVALID);
    ck_assert_str_eq(msg, _i == 0 ? "unknown field: x" : NOT_OBJECT);

    ngx_http_session_create_free(&c);
    free(body);
}
END_TEST


/* many huge numbers: the second decoding is linear, not one per number */

START_TEST(test_create_many_big)
{
    int                        rc;
    char                       msg[NGX_HTTP_SESSION_BODY_MSG_MAX];
    char                      *body;
    size_t                     n;
    ngx_http_session_create_t  c;

    body = malloc(70000);
    ck_assert_ptr_nonnull(body);

    n = sprintf(body, LP ",\"expires_in\":" BIG ",\"x\":[" BIG);

    while (n < 65000) {
        n += sprintf(body + n, ",1e400,-" BIG ",1.5");
    }

    n += sprintf(body + n, "]}");

    rc = run_parse(U(body), n, TTL, 0, &c, msg, sizeof(msg));

    ck_assert_int_eq(rc, NGX_HTTP_SESSION_CREATE_INVALID);
    ck_assert_str_eq(msg, EXPIRES);

    ngx_http_session_create_free(&c);
    free(body);
}
END_TEST


START_TEST(test_parse_int)
{
    int                                rc;
    long long                          value;
    unsigned char                     *s;
    const ngx_http_session_int_vec_t  *v;

    v = &int_vecs[_i];

    s = malloc(v->len ? v->len : 1);
    ck_assert_ptr_nonnull(s);
    memcpy(s, v->s, v->len);

    value = -12345;
    rc = ngx_http_session_parse_int(s, v->len, v->min, v->max, &value);

    free(s);

    if (v->value == -1) {
        ck_assert_msg(rc == -1, "vector %d (\"%.*s\"): expected -1, got %d",
                      _i, (int) v->len, (const char *) v->s, rc);
        ck_assert_int_eq(value, -12345);
        return;
    }

    ck_assert_msg(rc == 0, "vector %d (\"%.*s\"): expected 0, got %d", _i,
                  (int) v->len, (const char *) v->s, rc);
    ck_assert_int_eq(value, v->value);
}
END_TEST


Suite *
make_body_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("body");

    tc = tcase_create("create");
    tcase_add_loop_test(tc, test_create, 0, NELTS(body_vecs));
    tcase_add_loop_test(tc, test_create_unknown_order, 0, 64);
    tcase_add_loop_test(tc, test_create_url_length, 0, 2);
    tcase_add_loop_test(tc, test_create_unknown_long, 0, 2);
    tcase_add_loop_test(tc, test_create_nesting, 0, 2);
    tcase_add_test(tc, test_create_many_big);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse_int");
    tcase_add_loop_test(tc, test_parse_int, 0, NELTS(int_vecs));
    suite_add_tcase(s, tc);

    return s;
}
