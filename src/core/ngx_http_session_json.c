/*
 * JSON string escaping, reason phrases and the digit tables.
 */

#include <string.h>

#include "ngx_http_session_json.h"


typedef struct {
    unsigned     status;
    const char  *phrase;
    /* "NNN Phrase", the status line */
    const char  *line;
} ngx_http_session_reason_t;


/* a status, its phrase and its status line, "NNN Phrase", written once */
#define ngx_http_session_reason_row(status, phrase)                           \
    { status, phrase, #status " " phrase }


static const ngx_http_session_reason_t  ngx_http_session_reasons[] = {
    ngx_http_session_reason_row(200, "OK"),
    ngx_http_session_reason_row(201, "Created"),
    ngx_http_session_reason_row(304, "Not Modified"),
    ngx_http_session_reason_row(400, "Bad Request"),
    ngx_http_session_reason_row(401, "Unauthorized"),
    ngx_http_session_reason_row(402, "Payment Required"),
    ngx_http_session_reason_row(403, "Forbidden"),
    ngx_http_session_reason_row(404, "Not Found"),
    ngx_http_session_reason_row(405, "Method Not Allowed"),
    ngx_http_session_reason_row(406, "Not Acceptable"),
    ngx_http_session_reason_row(407, "Proxy Authentication Required"),
    ngx_http_session_reason_row(408, "Request Timeout"),
    ngx_http_session_reason_row(409, "Conflict"),
    ngx_http_session_reason_row(410, "Gone"),
    ngx_http_session_reason_row(411, "Length Required"),
    ngx_http_session_reason_row(412, "Precondition Failed"),
    ngx_http_session_reason_row(413, "Payload Too Large"),
    ngx_http_session_reason_row(414, "URI Too Long"),
    ngx_http_session_reason_row(415, "Unsupported Media Type"),
    ngx_http_session_reason_row(416, "Range Not Satisfiable"),
    ngx_http_session_reason_row(417, "Expectation Failed"),
    ngx_http_session_reason_row(421, "Misdirected Request"),
    ngx_http_session_reason_row(422, "Unprocessable Entity"),
    ngx_http_session_reason_row(426, "Upgrade Required"),
    ngx_http_session_reason_row(428, "Precondition Required"),
    ngx_http_session_reason_row(429, "Too Many Requests"),
    ngx_http_session_reason_row(431, "Request Header Fields Too Large"),
    ngx_http_session_reason_row(451, "Unavailable For Legal Reasons"),
    ngx_http_session_reason_row(500, "Internal Server Error"),
    ngx_http_session_reason_row(501, "Not Implemented"),
    ngx_http_session_reason_row(502, "Bad Gateway"),
    ngx_http_session_reason_row(503, "Service Unavailable"),
    ngx_http_session_reason_row(504, "Gateway Timeout"),
    ngx_http_session_reason_row(505, "HTTP Version Not Supported"),
    ngx_http_session_reason_row(507, "Insufficient Storage"),
    { 0, NULL, NULL }
};

#undef ngx_http_session_reason_row


/* "00" .. "99": the two digits of n < 100 at 2 * n */
const char  ngx_http_session_dec_pairs[] =
    "0001020304050607080910111213141516171819"
    "2021222324252627282930313233343536373839"
    "4041424344454647484950515253545556575859"
    "6061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";


/* "00" .. "ff": the two lower-case hex digits of a byte b at 2 * b */
const char  ngx_http_session_hex_pairs[] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";


/*
 * What escaping does with a byte: 0 copies it, 1 puts a backslash
 * before it ('"', '\\'), 2 writes \u00XX (control bytes, DEL), 3 starts a
 * UTF-8 sequence (or is invalid UTF-8).
 */
#define NGX_HTTP_SESSION_JSON_PLAIN    0
#define NGX_HTTP_SESSION_JSON_BACKSL   1
#define NGX_HTTP_SESSION_JSON_CONTROL  2
#define NGX_HTTP_SESSION_JSON_UTF8     3

static const unsigned char  ngx_http_session_json_class[256] = {
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3
};


/* eight bytes at a time: a byte in every lane */
#define NGX_HTTP_SESSION_JSON_ONES   0x0101010101010101ULL
#define NGX_HTTP_SESSION_JSON_HIGHS  0x8080808080808080ULL


static size_t ngx_http_session_json_escaped_len(const unsigned char *src,
    size_t len);
static int ngx_http_session_json_special8(uint64_t v);
static const ngx_http_session_reason_t *ngx_http_session_reason_find(
    unsigned status);


size_t
ngx_http_session_json_escape(unsigned char *dst, const unsigned char *src,
    size_t len)
{
    size_t                n;
    uint64_t              v;
    unsigned char         c, *d;
    const unsigned char  *end;

    if (dst == NULL) {
        return ngx_http_session_json_escaped_len(src, len);
    }

    d = dst;
    end = src + len;

    while (src < end) {
        c = *src;

        switch (ngx_http_session_json_class[c]) {

        case NGX_HTTP_SESSION_JSON_PLAIN:

            /* a run of bytes that are themselves: 8 at a time, then 1 */

            while (end - src >= 8) {
                memcpy(&v, src, 8);

                if (ngx_http_session_json_special8(v)) {
                    break;
                }

                memcpy(d, &v, 8);
                d += 8;
                src += 8;
            }

            while (src < end
                   && ngx_http_session_json_class[*src]
                      == NGX_HTTP_SESSION_JSON_PLAIN)
            {
                *d++ = *src++;
            }

            break;

        case NGX_HTTP_SESSION_JSON_BACKSL:
            d[0] = '\\';
            d[1] = c;
            d += 2;
            src++;
            break;

        case NGX_HTTP_SESSION_JSON_CONTROL:
            memcpy(d, "\\u00", 4);
            memcpy(d + 4, &ngx_http_session_hex_pairs[2 * c], 2);
            d += 6;
            src++;
            break;

        default: /* NGX_HTTP_SESSION_JSON_UTF8 */
            n = ngx_http_session_utf8_len(src, end);

            if (n == 0) {
                memcpy(d, "\\ufffd", 6);
                d += 6;
                src++;
                break;
            }

            memcpy(d, src, n);
            d += n;
            src += n;
        }
    }

    return d - dst;
}


/* what ngx_http_session_json_escape() writes, counted */

static size_t
ngx_http_session_json_escaped_len(const unsigned char *src, size_t len)
{
    size_t                n, size;
    const unsigned char  *end;

    size = 0;
    end = src + len;

    while (src < end) {
        switch (ngx_http_session_json_class[*src]) {

        case NGX_HTTP_SESSION_JSON_PLAIN:
            size++;
            src++;
            break;

        case NGX_HTTP_SESSION_JSON_BACKSL:
            size += 2;
            src++;
            break;

        case NGX_HTTP_SESSION_JSON_CONTROL:
            size += 6;
            src++;
            break;

        default: /* NGX_HTTP_SESSION_JSON_UTF8 */
            n = ngx_http_session_utf8_len(src, end);

            if (n == 0) {
                size += 6;
                src++;
                break;
            }

            size += n;
            src += n;
        }
    }

    return size;
}


/*
 * Whether any of the 8 bytes of v is not a byte that stands for itself:
 * below 0x20, '"', '\\', 0x7f or from 0x80 on.  Each term sets the high
 * bit of some lane exactly when the word has such a byte (a borrow or a
 * carry only starts at a lane that has one):
 *
 *     (v - 0x20..) & ~v     a byte below 0x20
 *     (x - 0x01..) & ~x     a zero byte of x: v ^ '"'.., v ^ '\\'..
 *     (v + 0x01..) | v      a byte of 0x7f or more
 */

static int
ngx_http_session_json_special8(uint64_t v)
{
    uint64_t  q, b;

    q = v ^ (NGX_HTTP_SESSION_JSON_ONES * '"');
    b = v ^ (NGX_HTTP_SESSION_JSON_ONES * '\\');

    return (((v - NGX_HTTP_SESSION_JSON_ONES * 0x20) & ~v)
            | ((q - NGX_HTTP_SESSION_JSON_ONES) & ~q)
            | ((b - NGX_HTTP_SESSION_JSON_ONES) & ~b)
            | (v + NGX_HTTP_SESSION_JSON_ONES) | v)
           & NGX_HTTP_SESSION_JSON_HIGHS
           ? 1 : 0;
}


unsigned char *
ngx_http_session_decimal(unsigned char *dst, uint64_t n)
{
    size_t                len;
    unsigned char        *p;
    unsigned char         buf[NGX_HTTP_SESSION_DECIMAL_MAX];

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
        memcpy(p, &ngx_http_session_dec_pairs[(n % 100) * 2], 2);
        n /= 100;
    }

    if (n >= 10) {
        p -= 2;
        memcpy(p, &ngx_http_session_dec_pairs[n * 2], 2);

    } else {
        *--p = (unsigned char) ('0' + n);
    }

    len = buf + sizeof(buf) - p;
    memcpy(dst, p, len);

    return dst + len;
}


/* the row of a status; the table's end (status 0) if it has none */

static const ngx_http_session_reason_t *
ngx_http_session_reason_find(unsigned status)
{
    const ngx_http_session_reason_t  *r;

    for (r = ngx_http_session_reasons; r->status; r++) {
        if (r->status == status) {
            break;
        }
    }

    return r;
}


const char *
ngx_http_session_status_line(unsigned status)
{
    return ngx_http_session_reason_find(status)->line;
}


const char *
ngx_http_session_reason(unsigned status)
{
    const ngx_http_session_reason_t  *r;

    r = ngx_http_session_reason_find(status);

    return r->status ? r->phrase : "Unknown";
}


size_t
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
