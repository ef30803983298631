/*
 * JSON string escaping and reason phrases.
 */

#include <string.h>

#include "ngx_http_session_json.h"


typedef struct {
    unsigned     status;
    const char  *phrase;
    /* "NNN Phrase", the status line */
    const char  *line;
} ngx_http_session_reason_t;


static const ngx_http_session_reason_t  ngx_http_session_reasons[] = {
    { 200, "OK", "200 OK" },
    { 201, "Created", "201 Created" },
    { 304, "Not Modified", "304 Not Modified" },
    { 400, "Bad Request", "400 Bad Request" },
    { 401, "Unauthorized", "401 Unauthorized" },
    { 402, "Payment Required", "402 Payment Required" },
    { 403, "Forbidden", "403 Forbidden" },
    { 404, "Not Found", "404 Not Found" },
    { 405, "Method Not Allowed", "405 Method Not Allowed" },
    { 406, "Not Acceptable", "406 Not Acceptable" },
    { 407, "Proxy Authentication Required",
      "407 Proxy Authentication Required" },
    { 408, "Request Timeout", "408 Request Timeout" },
    { 409, "Conflict", "409 Conflict" },
    { 410, "Gone", "410 Gone" },
    { 411, "Length Required", "411 Length Required" },
    { 412, "Precondition Failed", "412 Precondition Failed" },
    { 413, "Payload Too Large", "413 Payload Too Large" },
    { 414, "URI Too Long", "414 URI Too Long" },
    { 415, "Unsupported Media Type", "415 Unsupported Media Type" },
    { 416, "Range Not Satisfiable", "416 Range Not Satisfiable" },
    { 417, "Expectation Failed", "417 Expectation Failed" },
    { 421, "Misdirected Request", "421 Misdirected Request" },
    { 422, "Unprocessable Entity", "422 Unprocessable Entity" },
    { 426, "Upgrade Required", "426 Upgrade Required" },
    { 428, "Precondition Required", "428 Precondition Required" },
    { 429, "Too Many Requests", "429 Too Many Requests" },
    { 431, "Request Header Fields Too Large",
      "431 Request Header Fields Too Large" },
    { 451, "Unavailable For Legal Reasons",
      "451 Unavailable For Legal Reasons" },
    { 500, "Internal Server Error", "500 Internal Server Error" },
    { 501, "Not Implemented", "501 Not Implemented" },
    { 502, "Bad Gateway", "502 Bad Gateway" },
    { 503, "Service Unavailable", "503 Service Unavailable" },
    { 504, "Gateway Timeout", "504 Gateway Timeout" },
    { 505, "HTTP Version Not Supported", "505 HTTP Version Not Supported" },
    { 507, "Insufficient Storage", "507 Insufficient Storage" },
    { 0, NULL, NULL }
};


static size_t ngx_http_session_utf8_len(const unsigned char *p,
    const unsigned char *end);


size_t
ngx_http_session_json_escape(unsigned char *dst, const unsigned char *src,
    size_t len)
{
    size_t                n, size;
    unsigned char         c;
    const unsigned char  *end;
    static const char     hex[] = "0123456789abcdef";

    size = 0;
    end = src + len;

    while (src < end) {
        c = *src;

        if (c >= 0x80) {
            n = ngx_http_session_utf8_len(src, end);

            if (n == 0) {
                if (dst) {
                    memcpy(dst + size, "\\ufffd", 6);
                }

                size += 6;
                src++;
                continue;
            }

            if (dst) {
                memcpy(dst + size, src, n);
            }

            size += n;
            src += n;
            continue;
        }

        if (c == '"' || c == '\\') {
            if (dst) {
                dst[size] = '\\';
                dst[size + 1] = c;
            }

            size += 2;

        } else if (c < 0x20 || c == 0x7f) {
            if (dst) {
                memcpy(dst + size, "\\u00", 4);
                dst[size + 4] = (unsigned char) hex[c >> 4];
                dst[size + 5] = (unsigned char) hex[c & 0xf];
            }

            size += 6;

        } else {
            if (dst) {
                dst[size] = c;
            }

            size++;
        }

        src++;
    }

    return size;
}


unsigned char *
ngx_http_session_decimal(unsigned char *dst, uint64_t n)
{
    size_t                len;
    unsigned char        *p;
    unsigned char         buf[NGX_HTTP_SESSION_DECIMAL_MAX];
    static const char     pairs[] =
        "0001020304050607080910111213141516171819"
        "2021222324252627282930313233343536373839"
        "4041424344454647484950515253545556575859"
        "6061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";

    /* most numbers sent are small: a remaining count, a Retry-After */

    if (n < 10) {
        *dst = (unsigned char) ('0' + n);
        return dst + 1;
    }

    /*
     * Two digits per division, from the last pair back, into buf; then
     * the digits to dst (a limit of 1000000000 leaves ten of them).
     */

    p = buf + sizeof(buf);

    while (n >= 100) {
        p -= 2;
        memcpy(p, &pairs[(n % 100) * 2], 2);
        n /= 100;
    }

    if (n >= 10) {
        p -= 2;
        memcpy(p, &pairs[n * 2], 2);

    } else {
        *--p = (unsigned char) ('0' + n);
    }

    len = buf + sizeof(buf) - p;
    memcpy(dst, p, len);

    return dst + len;
}


const char *
ngx_http_session_status_line(unsigned status)
{
    const ngx_http_session_reason_t  *r;

    for (r = ngx_http_session_reasons; r->status; r++) {
        if (r->status == status) {
            return r->line;
        }
    }

    return NULL;
}


const char *
ngx_http_session_reason(unsigned status)
{
    const ngx_http_session_reason_t  *r;

    for (r = ngx_http_session_reasons; r->status; r++) {
        if (r->status == status) {
            return r->phrase;
        }
    }

    return "Unknown";
}


/* the length of the well-formed UTF-8 sequence at p, or 0 */

static size_t
ngx_http_session_utf8_len(const unsigned char *p, const unsigned char *end)
{
    size_t         n, i;
    unsigned int   cp, min;

    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2; cp = p[0] & 0x1f; min = 0x80;

    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3; cp = p[0] & 0x0f; min = 0x800;

    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4; cp = p[0] & 0x07; min = 0x10000;

    } else {
        return 0;
    }

    if ((size_t) (end - p) < n) {
        return 0;
    }

    for (i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }

        cp = (cp << 6) | (p[i] & 0x3f);
    }

    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return 0;
    }

    return n;
}
