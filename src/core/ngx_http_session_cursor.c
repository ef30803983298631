/*
 * List cursors and UUID text.
 *
 * A cursor is URL-safe base64 without padding of
 *
 *     version (1 byte, 1) | kind (1 byte, 'S' or 'I') |
 *     position (8 bytes, big-endian two's complement) |
 *     [session id (16 bytes), sessions only] |
 *     CRC-32 of everything before it (4 bytes, big-endian)
 *
 * The CRC is tamper detection, not security: it holds no key, so cursors
 * survive restarts and work on every node, and it catches every change of
 * one character (a burst of at most 6 bits; CRC-32 catches all bursts up
 * to 32).  A client that forges a cursor only moves within its own list,
 * as every list query is bound to the key's project anyway.  The decoder
 * takes only what the encoder writes: the exact length, the URL-safe
 * alphabet, zero padding bits, the version and the kind; and only
 * positions the server can have issued (ngx_http_session_cursor.h), so
 * that a forged cursor is a 400 and never a value the database refuses.
 */

#include <stdint.h>
#include <string.h>

#include "ngx_http_session_cursor.h"
#include "ngx_http_session_json.h"


#define NGX_HTTP_SESSION_CURSOR_VERSION       1
#define NGX_HTTP_SESSION_CURSOR_KIND_SESSION  'S'
#define NGX_HTTP_SESSION_CURSOR_KIND_IMAGE    'I'

#define NGX_HTTP_SESSION_CURSOR_HEAD          10
#define NGX_HTTP_SESSION_CURSOR_CRC           4
/* binary payloads, CRC included */
#define NGX_HTTP_SESSION_CURSOR_SESSION_BIN                                   \
    (NGX_HTTP_SESSION_CURSOR_HEAD + NGX_HTTP_SESSION_UUID_BIN_LEN             \
     + NGX_HTTP_SESSION_CURSOR_CRC)
#define NGX_HTTP_SESSION_CURSOR_IMAGE_BIN                                     \
    (NGX_HTTP_SESSION_CURSOR_HEAD + NGX_HTTP_SESSION_CURSOR_CRC)

/* unpadded base64 of n bytes */
#define NGX_HTTP_SESSION_CURSOR_B64_LEN(n)  (((n) * 4 + 2) / 3)


static size_t ngx_http_session_cursor_encode(unsigned char *dst,
    unsigned char *bin, size_t len, int kind, long long position);
static int ngx_http_session_cursor_decode(const unsigned char *src,
    size_t len, unsigned char *bin, size_t size, int kind, long long max,
    long long *position);
static size_t ngx_http_session_cursor_b64_encode(unsigned char *dst,
    const unsigned char *src, size_t len);
static int ngx_http_session_cursor_b64_decode(unsigned char *dst,
    const unsigned char *src, size_t len);
static uint32_t ngx_http_session_cursor_crc32(const unsigned char *p,
    size_t len);


/* the value of a hex digit, either case; X (a bit above them) for others */
#define X  0x10

static const unsigned char  ngx_http_session_cursor_unhex[256] = {
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, X, X, X, X, X, X,
    X, 10, 11, 12, 13, 14, 15, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, 10, 11, 12, 13, 14, 15, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X
};

#undef X


/*
 * Where the 16 bytes of a UUID are in its text: 8-4-4-4-12 hex digits,
 * dashes at 8, 13, 18 and 23.
 */
static const unsigned char  ngx_http_session_uuid_at[16] = {
    0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34
};


#if (NGX_HTTP_SESSION_CURSOR_B64_LEN(NGX_HTTP_SESSION_CURSOR_SESSION_BIN)    \
     != NGX_HTTP_SESSION_CURSOR_SESSION_LEN)                                 \
    || (NGX_HTTP_SESSION_CURSOR_B64_LEN(NGX_HTTP_SESSION_CURSOR_IMAGE_BIN)   \
        != NGX_HTTP_SESSION_CURSOR_IMAGE_LEN)
#error "cursor lengths in ngx_http_session_cursor.h are out of date"
#endif


size_t
ngx_http_session_cursor_encode_session(unsigned char *dst,
    long long created_us, const unsigned char *uuid16)
{
    unsigned char  bin[NGX_HTTP_SESSION_CURSOR_SESSION_BIN];

    memcpy(bin + NGX_HTTP_SESSION_CURSOR_HEAD, uuid16,
           NGX_HTTP_SESSION_UUID_BIN_LEN);

    return ngx_http_session_cursor_encode(dst, bin, sizeof(bin),
                                          NGX_HTTP_SESSION_CURSOR_KIND_SESSION,
                                          created_us);
}


int
ngx_http_session_cursor_decode_session(const unsigned char *src, size_t len,
    long long *created_us, unsigned char *uuid16)
{
    unsigned char  bin[NGX_HTTP_SESSION_CURSOR_SESSION_BIN];

    if (ngx_http_session_cursor_decode(src, len, bin, sizeof(bin),
                                       NGX_HTTP_SESSION_CURSOR_KIND_SESSION,
                                       NGX_HTTP_SESSION_CURSOR_US_MAX,
                                       created_us)
        != 0)
    {
        return -1;
    }

    memcpy(uuid16, bin + NGX_HTTP_SESSION_CURSOR_HEAD,
           NGX_HTTP_SESSION_UUID_BIN_LEN);

    return 0;
}


size_t
ngx_http_session_cursor_encode_image(unsigned char *dst, long long sequence)
{
    unsigned char  bin[NGX_HTTP_SESSION_CURSOR_IMAGE_BIN];

    return ngx_http_session_cursor_encode(dst, bin, sizeof(bin),
                                          NGX_HTTP_SESSION_CURSOR_KIND_IMAGE,
                                          sequence);
}


int
ngx_http_session_cursor_decode_image(const unsigned char *src, size_t len,
    long long *sequence)
{
    unsigned char  bin[NGX_HTTP_SESSION_CURSOR_IMAGE_BIN];

    return ngx_http_session_cursor_decode(src, len, bin, sizeof(bin),
                                          NGX_HTTP_SESSION_CURSOR_KIND_IMAGE,
                                          NGX_HTTP_SESSION_CURSOR_SEQ_MAX,
                                          sequence);
}


int
ngx_http_session_uuid_parse(const unsigned char *s, size_t len,
    unsigned char *uuid16)
{
    size_t                i;
    unsigned              hi, lo, bad;
    const unsigned char  *p;
    unsigned char         bin[NGX_HTTP_SESSION_UUID_BIN_LEN];

    if (len != NGX_HTTP_SESSION_UUID_LEN
        || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-')
    {
        return -1;
    }

    /* every digit is looked up; one that is not sets a bit above them */

    bad = 0;

    for (i = 0; i < NGX_HTTP_SESSION_UUID_BIN_LEN; i++) {
        p = s + ngx_http_session_uuid_at[i];

        hi = ngx_http_session_cursor_unhex[p[0]];
        lo = ngx_http_session_cursor_unhex[p[1]];

        bad |= hi | lo;
        bin[i] = (unsigned char) (hi << 4 | lo);
    }

    if (bad & ~0xfu) {
        return -1;
    }

    memcpy(uuid16, bin, sizeof(bin));

    return 0;
}


/* a byte's two digits from the table, one load and one store */

#define ngx_http_session_uuid_hex(d, b)                                      \
    memcpy(d, ngx_http_session_hex_pairs + 2 * (size_t) (b), 2)


void
ngx_http_session_uuid_format(const unsigned char *uuid16,
    unsigned char *dst36)
{
    ngx_http_session_uuid_hex(dst36, uuid16[0]);
    ngx_http_session_uuid_hex(dst36 + 2, uuid16[1]);
    ngx_http_session_uuid_hex(dst36 + 4, uuid16[2]);
    ngx_http_session_uuid_hex(dst36 + 6, uuid16[3]);
    dst36[8] = '-';
    ngx_http_session_uuid_hex(dst36 + 9, uuid16[4]);
    ngx_http_session_uuid_hex(dst36 + 11, uuid16[5]);
    dst36[13] = '-';
    ngx_http_session_uuid_hex(dst36 + 14, uuid16[6]);
    ngx_http_session_uuid_hex(dst36 + 16, uuid16[7]);
    dst36[18] = '-';
    ngx_http_session_uuid_hex(dst36 + 19, uuid16[8]);
    ngx_http_session_uuid_hex(dst36 + 21, uuid16[9]);
    dst36[23] = '-';
    ngx_http_session_uuid_hex(dst36 + 24, uuid16[10]);
    ngx_http_session_uuid_hex(dst36 + 26, uuid16[11]);
    ngx_http_session_uuid_hex(dst36 + 28, uuid16[12]);
    ngx_http_session_uuid_hex(dst36 + 30, uuid16[13]);
    ngx_http_session_uuid_hex(dst36 + 32, uuid16[14]);
    ngx_http_session_uuid_hex(dst36 + 34, uuid16[15]);
}


/*
 * Writes the head (the kind and the position) of bin (len bytes, the
 * last four for the CRC; what lies between is the caller's), seals it
 * and encodes it
 */

static size_t
ngx_http_session_cursor_encode(unsigned char *dst, unsigned char *bin,
    size_t len, int kind, long long position)
{
    int       i;
    uint64_t  v;
    uint32_t  crc;

    bin[0] = NGX_HTTP_SESSION_CURSOR_VERSION;
    bin[1] = (unsigned char) kind;

    v = (uint64_t) position;

    for (i = 0; i < 8; i++) {
        bin[2 + i] = (unsigned char) (v >> (56 - 8 * i));
    }

    crc = ngx_http_session_cursor_crc32(bin,
                                        len - NGX_HTTP_SESSION_CURSOR_CRC);

    bin[len - 4] = (unsigned char) (crc >> 24);
    bin[len - 3] = (unsigned char) (crc >> 16);
    bin[len - 2] = (unsigned char) (crc >> 8);
    bin[len - 1] = (unsigned char) crc;

    return ngx_http_session_cursor_b64_encode(dst, bin, len);
}


/*
 * Decodes a cursor of kind into bin (size bytes) and gives its position,
 * which is at most max
 */

static int
ngx_http_session_cursor_decode(const unsigned char *src, size_t len,
    unsigned char *bin, size_t size, int kind, long long max,
    long long *position)
{
    int       i;
    uint64_t  v;
    uint32_t  crc;

    if (len != NGX_HTTP_SESSION_CURSOR_B64_LEN(size)
        || ngx_http_session_cursor_b64_decode(bin, src, len) != 0)
    {
        return -1;
    }

    if (bin[0] != NGX_HTTP_SESSION_CURSOR_VERSION || bin[1] != kind) {
        return -1;
    }

    crc = ngx_http_session_cursor_crc32(bin,
                                        size - NGX_HTTP_SESSION_CURSOR_CRC);

    if (bin[size - 4] != (unsigned char) (crc >> 24)
        || bin[size - 3] != (unsigned char) (crc >> 16)
        || bin[size - 2] != (unsigned char) (crc >> 8)
        || bin[size - 1] != (unsigned char) crc)
    {
        return -1;
    }

    v = 0;

    for (i = 0; i < 8; i++) {
        v = (v << 8) | bin[2 + i];
    }

    /* two's complement: anything from 2^63 on is negative */

    if (v > (uint64_t) max) {
        return -1;
    }

    *position = (long long) v;

    return 0;
}


static size_t
ngx_http_session_cursor_b64_encode(unsigned char *dst,
    const unsigned char *src, size_t len)
{
    uint32_t             v;
    unsigned char       *d;
    static const char    b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "abcdefghijklmnopqrstuvwxyz0123456789-_";

    d = dst;

    while (len >= 3) {
        v = (uint32_t) src[0] << 16 | (uint32_t) src[1] << 8 | src[2];

        *d++ = (unsigned char) b64[v >> 18];
        *d++ = (unsigned char) b64[(v >> 12) & 0x3f];
        *d++ = (unsigned char) b64[(v >> 6) & 0x3f];
        *d++ = (unsigned char) b64[v & 0x3f];

        src += 3;
        len -= 3;
    }

    if (len > 0) {
        v = (uint32_t) src[0] << 16;

        if (len == 2) {
            v |= (uint32_t) src[1] << 8;
        }

        *d++ = (unsigned char) b64[v >> 18];
        *d++ = (unsigned char) b64[(v >> 12) & 0x3f];

        if (len == 2) {
            *d++ = (unsigned char) b64[(v >> 6) & 0x3f];
        }
    }

    return d - dst;
}


/*
 * Unpadded URL-safe base64 whose length the caller has checked; the bits
 * past the last whole byte must be zero, so that every cursor has one
 * spelling only.
 */

static int
ngx_http_session_cursor_b64_decode(unsigned char *dst,
    const unsigned char *src, size_t len)
{
    int            bits;
    size_t         i;
    uint32_t       acc;
    unsigned char  c, v;

    acc = 0;
    bits = 0;

    if (len % 4 == 1) {
        return -1;
    }

    for (i = 0; i < len; i++) {
        c = src[i];

        if (c >= 'A' && c <= 'Z') {
            v = c - 'A';

        } else if (c >= 'a' && c <= 'z') {
            v = c - 'a' + 26;

        } else if (c >= '0' && c <= '9') {
            v = c - '0' + 52;

        } else if (c == '-') {
            v = 62;

        } else if (c == '_') {
            v = 63;

        } else {
            return -1;
        }

        acc = (acc << 6) | v;
        bits += 6;

        if (bits >= 8) {
            bits -= 8;
            *dst++ = (unsigned char) (acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }

    return acc == 0 ? 0 : -1;
}


/*
 * CRC-32 of ISO-HDLC (zlib's crc32()), four bits at a time: the table
 * holds the CRC of each nibble shifted through the reflected polynomial
 * 0xedb88320 (cursors are short; 64 bytes of table are enough).
 */

static const uint32_t  ngx_http_session_cursor_crc_nibble[16] = {
    0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac,
    0x76dc4190, 0x6b6b51f4, 0x4db26158, 0x5005713c,
    0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c,
    0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c
};


static uint32_t
ngx_http_session_cursor_crc32(const unsigned char *p, size_t len)
{
    uint32_t  crc;

    crc = 0xffffffff;

    while (len--) {
        crc ^= *p++;
        crc = (crc >> 4) ^ ngx_http_session_cursor_crc_nibble[crc & 0xf];
        crc = (crc >> 4) ^ ngx_http_session_cursor_crc_nibble[crc & 0xf];
    }

    return ~crc;
}
