/*
 * The body of POST /api/v1/sessions and integer query parameters.
 *
 * What jansson decides, with JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL and
 * no JSON_DECODE_ANY (jansson 2.14, checked by t/unit/check_body.c): a
 * top level that is not an array or object, duplicate keys at any depth,
 * a byte-order mark before the document (inside a string U+FEFF is just a
 * character), raw control bytes in strings, escapes of unpaired
 * surrogates, invalid UTF-8 anywhere (overlong forms, encoded surrogates
 * and code points past U+10FFFF included), trailing bytes other than
 * white space, and nesting deeper than jansson's 2048 levels all fail to
 * decode: "request body must be a JSON object".
 *
 * "\u0000" is valid JSON and valid UTF-8, so JSON_ALLOW_NUL lets it
 * through in string values, which the field checks then refuse by length
 * ("webhook\u0000" is not "webhook", a URL may not hold a control byte).
 * jansson refuses it in object keys whatever the flags; a body with one is
 * "request body must be a JSON object", which also keeps every name in
 * "unknown field: <name>" free of NUL bytes.
 *
 * jansson also refuses numbers it cannot hold (integers past int64,
 * reals past DBL_MAX), while docs/api.md wants such a number judged where it
 * stands: a huge "expires_in" is out of range, a huge unknown field is an
 * unknown field.  So when that is the only reason a body fails, the body
 * is decoded again with every real written as 0.0 and every huge integer
 * as 0: no field accepts a real, and 0 is out of range as a huge integer
 * is, so every message stays the same, and no other error can appear or
 * vanish, as a number is replaced with a number.
 *
 * Object members are iterated in document order: jansson keeps insertion
 * order since 2.8 (JSON_PRESERVE_ORDER is obsolete), and decoding inserts
 * in document order.
 */

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ngx_http_session_body.h"
#include "ngx_http_session_url.h"


#define NGX_HTTP_SESSION_BODY_FLAGS  (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)

#define NGX_HTTP_SESSION_MSG_NOT_OBJECT                                       \
    "request body must be a JSON object"
#define NGX_HTTP_SESSION_MSG_MODE_REQUIRED                                    \
    "delivery_mode is required"
#define NGX_HTTP_SESSION_MSG_MODE_TYPE                                        \
    "delivery_mode must be a string"
#define NGX_HTTP_SESSION_MSG_MODE_VALUE                                       \
    "delivery_mode must be one of: webhook, long_poll"
#define NGX_HTTP_SESSION_MSG_URL_REQUIRED                                     \
    "webhook_url is required when delivery_mode is webhook"
#define NGX_HTTP_SESSION_MSG_URL_FORBIDDEN                                    \
    "webhook_url is only allowed when delivery_mode is webhook"
#define NGX_HTTP_SESSION_MSG_URL_TYPE                                         \
    "webhook_url must be a string"
#define NGX_HTTP_SESSION_MSG_URL_INVALID                                      \
    "webhook_url must be an absolute http or https URL"
#define NGX_HTTP_SESSION_MSG_URL_PRIVATE                                      \
    "webhook_url must not point to a private address"
#define NGX_HTTP_SESSION_MSG_EXPIRES                                          \
    "expires_in must be an integer between 1 and %lld"
#define NGX_HTTP_SESSION_MSG_UNKNOWN                                          \
    "unknown field: "
#define NGX_HTTP_SESSION_MSG_INTERNAL                                         \
    "internal server error"


static json_t *ngx_http_session_body_load(const unsigned char *body,
    size_t len, int *rc);
static unsigned char *ngx_http_session_body_zero_numbers(
    const unsigned char *body, size_t len, size_t *n);
static size_t ngx_http_session_body_number(const unsigned char *p,
    const unsigned char *end, int *real);
static int ngx_http_session_body_int_overflow(const unsigned char *p,
    size_t len);
static int ngx_http_session_body_string_is(json_t *value, const char *s);
static int ngx_http_session_body_known(const char *name);
static int ngx_http_session_body_fail(char *msg, size_t size,
    const char *text);
static void ngx_http_session_body_unknown(char *msg, size_t size,
    const char *name, size_t len);


static const char  *ngx_http_session_body_fields[] = {
    "delivery_mode",
    "webhook_url",
    "expires_in",
    NULL
};


/*
 * Fields are checked in the order of the table of docs/api.md §5, each
 * to its end, and "anything else" is its last row: every error of a known
 * field, wherever it stands in the body, comes before "unknown field".
 * A JSON null in a known field is an absent field; an unknown field is
 * refused whatever its value, null included.
 */

int
ngx_http_session_create_parse(const unsigned char *body, size_t len,
    long long max_ttl, int allow_private, ngx_http_session_create_t *out,
    char *msg, size_t msg_size)
{
    int          rc;
    void        *it;
    size_t       n;
    json_t      *root, *mode, *url, *expires;
    json_int_t   ttl;
    const char  *name, *err;

    memset(out, 0, sizeof(ngx_http_session_create_t));

    if (msg_size > 0) {
        msg[0] = '\0';
    }

    root = ngx_http_session_body_load(body, len, &rc);

    if (root == NULL) {
        (void) ngx_http_session_body_fail(msg, msg_size,
                                          rc == NGX_HTTP_SESSION_CREATE_ERROR
                                          ? NGX_HTTP_SESSION_MSG_INTERNAL
                                          : NGX_HTTP_SESSION_MSG_NOT_OBJECT);
        return rc;
    }

    if (!json_is_object(root)) {
        err = NGX_HTTP_SESSION_MSG_NOT_OBJECT;
        goto invalid;
    }

    /* delivery_mode */

    mode = json_object_get(root, "delivery_mode");

    if (mode == NULL || json_is_null(mode)) {
        err = NGX_HTTP_SESSION_MSG_MODE_REQUIRED;
        goto invalid;
    }

    if (!json_is_string(mode)) {
        err = NGX_HTTP_SESSION_MSG_MODE_TYPE;
        goto invalid;
    }

    if (ngx_http_session_body_string_is(mode, "webhook")) {
        out->delivery_mode = NGX_HTTP_SESSION_MODE_WEBHOOK;

    } else if (ngx_http_session_body_string_is(mode, "long_poll")) {
        out->delivery_mode = NGX_HTTP_SESSION_MODE_LONG_POLL;

    } else {
        err = NGX_HTTP_SESSION_MSG_MODE_VALUE;
        goto invalid;
    }

    /* webhook_url */

    url = json_object_get(root, "webhook_url");

    if (url != NULL && json_is_null(url)) {
        url = NULL;
    }

    if (out->delivery_mode == NGX_HTTP_SESSION_MODE_LONG_POLL) {
        if (url != NULL) {
            err = NGX_HTTP_SESSION_MSG_URL_FORBIDDEN;
            goto invalid;
        }

    } else {
        if (url == NULL) {
            err = NGX_HTTP_SESSION_MSG_URL_REQUIRED;
            goto invalid;
        }

        if (!json_is_string(url)) {
            err = NGX_HTTP_SESSION_MSG_URL_TYPE;
            goto invalid;
        }

        n = json_string_length(url);

        switch (ngx_http_session_url_check(
                    (const unsigned char *) json_string_value(url), n,
                    allow_private))
        {
        case NGX_HTTP_SESSION_URL_OK:
            break;

        case NGX_HTTP_SESSION_URL_PRIVATE:
            err = NGX_HTTP_SESSION_MSG_URL_PRIVATE;
            goto invalid;

        default:
            err = NGX_HTTP_SESSION_MSG_URL_INVALID;
            goto invalid;
        }

        out->webhook_url = malloc(n + 1);
        if (out->webhook_url == NULL) {
            (void) ngx_http_session_body_fail(msg, msg_size,
                                              NGX_HTTP_SESSION_MSG_INTERNAL);
            rc = NGX_HTTP_SESSION_CREATE_ERROR;
            goto done;
        }

        memcpy(out->webhook_url, json_string_value(url), n);
        out->webhook_url[n] = '\0';
        out->webhook_url_len = n;
    }

    /* expires_in: a JSON integer, not 1.0, 1e3, "1" or true */

    expires = json_object_get(root, "expires_in");

    if (expires != NULL && !json_is_null(expires)) {
        ttl = json_is_integer(expires) ? json_integer_value(expires) : 0;

        if (ttl < 1 || ttl > max_ttl) {
            if (msg_size > 0) {
                snprintf(msg, msg_size, NGX_HTTP_SESSION_MSG_EXPIRES,
                         max_ttl);
            }

            rc = NGX_HTTP_SESSION_CREATE_INVALID;
            goto done;
        }

        out->expires_in = ttl;
        out->has_expires_in = 1;
    }

    /* anything else, the first in document order */

    for (it = json_object_iter(root);
         it != NULL;
         it = json_object_iter_next(root, it))
    {
        name = json_object_iter_key(it);

        if (!ngx_http_session_body_known(name)) {
            ngx_http_session_body_unknown(msg, msg_size, name, strlen(name));
            rc = NGX_HTTP_SESSION_CREATE_INVALID;
            goto done;
        }
    }

    rc = NGX_HTTP_SESSION_CREATE_OK;
    goto done;

invalid:

    rc = ngx_http_session_body_fail(msg, msg_size, err);

done:

    json_decref(root);

    if (rc != NGX_HTTP_SESSION_CREATE_OK) {
        ngx_http_session_create_free(out);
        memset(out, 0, sizeof(ngx_http_session_create_t));
    }

    return rc;
}


void
ngx_http_session_create_free(ngx_http_session_create_t *c)
{
    free(c->webhook_url);
    c->webhook_url = NULL;
    c->webhook_url_len = 0;
}


int
ngx_http_session_parse_int(const unsigned char *s, size_t len,
    long long min, long long max, long long *out)
{
    int        over;
    size_t     i;
    long long  value;

    if (len == 0) {
        return -1;
    }

    over = 0;
    value = 0;

    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }

        /* past LLONG_MAX is past max whatever follows: only digits count */

        if (over || value > (LLONG_MAX - (s[i] - '0')) / 10) {
            over = 1;
            continue;
        }

        value = value * 10 + (s[i] - '0');
    }

    if (over || value < min || value > max) {
        return -1;
    }

    *out = value;

    return 0;
}


/*
 * Decodes body; on failure sets *rc to NGX_HTTP_SESSION_CREATE_INVALID,
 * or NGX_HTTP_SESSION_CREATE_ERROR when memory ran out.
 */

static json_t *
ngx_http_session_body_load(const unsigned char *body, size_t len, int *rc)
{
    size_t          n;
    json_t         *root;
    json_error_t    err;
    unsigned char  *copy;

    *rc = NGX_HTTP_SESSION_CREATE_INVALID;

    root = json_loadb((const char *) body, len, NGX_HTTP_SESSION_BODY_FLAGS,
                      &err);
    if (root != NULL) {
        return root;
    }

    if (json_error_code(&err) == json_error_out_of_memory) {
        *rc = NGX_HTTP_SESSION_CREATE_ERROR;
        return NULL;
    }

    if (json_error_code(&err) != json_error_numeric_overflow) {
        return NULL;
    }

    copy = ngx_http_session_body_zero_numbers(body, len, &n);
    if (copy == NULL) {
        *rc = NGX_HTTP_SESSION_CREATE_ERROR;
        return NULL;
    }

    root = json_loadb((const char *) copy, n, NGX_HTTP_SESSION_BODY_FLAGS,
                      &err);

    free(copy);

    if (root == NULL && json_error_code(&err) == json_error_out_of_memory) {
        *rc = NGX_HTTP_SESSION_CREATE_ERROR;
    }

    return root;
}


/*
 * A copy of body with every number outside strings that is a real
 * written as "0.0" and every integer past int64 as "0".  Neither is
 * longer than what it replaces (a real takes at least three bytes, a huge
 * integer at least nineteen), so the copy is never longer than body.
 */

static unsigned char *
ngx_http_session_body_zero_numbers(const unsigned char *body, size_t len,
    size_t *n)
{
    int                   real, in_string;
    size_t                size;
    unsigned char        *copy, *d;
    const unsigned char  *p, *end;

    copy = malloc(len ? len : 1);
    if (copy == NULL) {
        return NULL;
    }

    d = copy;
    p = body;
    end = body + len;
    in_string = 0;

    while (p < end) {

        if (in_string) {
            if (*p == '\\' && p + 1 < end) {
                *d++ = *p++;

            } else if (*p == '"') {
                in_string = 0;
            }

            *d++ = *p++;
            continue;
        }

        if (*p == '"') {
            in_string = 1;
            *d++ = *p++;
            continue;
        }

        size = ngx_http_session_body_number(p, end, &real);

        if (size == 0) {
            *d++ = *p++;
            continue;
        }

        if (real) {
            memcpy(d, "0.0", 3);
            d += 3;

        } else if (ngx_http_session_body_int_overflow(p, size)) {
            *d++ = '0';

        } else {
            memcpy(d, p, size);
            d += size;
        }

        p += size;
    }

    *n = d - copy;

    return copy;
}


/*
 * The length of the JSON number at p, as jansson's lexer reads it:
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, or 0 if there is none.
 */

static size_t
ngx_http_session_body_number(const unsigned char *p, const unsigned char *end,
    int *real)
{
    const unsigned char  *q, *e;

    q = p;
    *real = 0;

    if (q < end && *q == '-') {
        q++;
    }

    if (q == end || *q < '0' || *q > '9') {
        return 0;
    }

    if (*q == '0') {
        q++;

    } else {
        while (q < end && *q >= '0' && *q <= '9') {
            q++;
        }
    }

    if (q + 1 < end && *q == '.' && q[1] >= '0' && q[1] <= '9') {
        q += 2;
        *real = 1;

        while (q < end && *q >= '0' && *q <= '9') {
            q++;
        }
    }

    if (q < end && (*q == 'e' || *q == 'E')) {
        e = q + 1;

        if (e < end && (*e == '+' || *e == '-')) {
            e++;
        }

        if (e < end && *e >= '0' && *e <= '9') {
            q = e;
            *real = 1;

            while (q < end && *q >= '0' && *q <= '9') {
                q++;
            }
        }
    }

    return q - p;
}


/* an integer without leading zeros past int64, as strtoll() sees it */

static int
ngx_http_session_body_int_overflow(const unsigned char *p, size_t len)
{
    int  negative;

    negative = (*p == '-');

    if (negative) {
        p++;
        len--;
    }

    if (len != 19) {
        return len > 19;
    }

    return memcmp(p, negative ? "9223372036854775808"
                              : "9223372036854775807", 19) > 0;
}


static int
ngx_http_session_body_string_is(json_t *value, const char *s)
{
    size_t  len;

    len = strlen(s);

    return json_string_length(value) == len
           && memcmp(json_string_value(value), s, len) == 0;
}


static int
ngx_http_session_body_known(const char *name)
{
    const char  **f;

    for (f = ngx_http_session_body_fields; *f != NULL; f++) {
        if (strcmp(name, *f) == 0) {
            return 1;
        }
    }

    return 0;
}


/* writes a fixed message; returns NGX_HTTP_SESSION_CREATE_INVALID */

static int
ngx_http_session_body_fail(char *msg, size_t size, const char *text)
{
    if (size > 0) {
        snprintf(msg, size, "%s", text);
    }

    return NGX_HTTP_SESSION_CREATE_INVALID;
}


/* "unknown field: <name>", the name cut at a character boundary if need be */

static void
ngx_http_session_body_unknown(char *msg, size_t size, const char *name,
    size_t len)
{
    size_t  prefix, room;

    prefix = sizeof(NGX_HTTP_SESSION_MSG_UNKNOWN) - 1;

    if (size <= prefix) {
        (void) ngx_http_session_body_fail(msg, size, "");
        return;
    }

    room = size - prefix - 1;

    if (len > room) {
        len = room;

        /* back off continuation bytes: the name is valid UTF-8 */

        while (len > 0 && ((unsigned char) name[len] & 0xc0) == 0x80) {
            len--;
        }
    }

    memcpy(msg, NGX_HTTP_SESSION_MSG_UNKNOWN, prefix);
    memcpy(msg + prefix, name, len);
    msg[prefix + len] = '\0';
}
