/*
 * The table-driven writers of the render path against straightforward
 * references, over many inputs: UUID text (a hex-pair table), RFC 3339
 * timestamps (integer civil dates, a per-field day cache), JSON escaping
 * (runs of plain bytes eight at a time) and the cursor's CRC (a nibble
 * table).  The references are the obvious code: snprintf() and
 * gmtime_r(), byte-at-a-time loops, a bitwise CRC; for timestamps outside
 * 1970 .. 9999 the general signed arithmetic the module used before.  The
 * escaping reference validates UTF-8 with the module's own
 * ngx_http_session_utf8_len(), which check_json tests against vectors:
 * what is compared here is the eight-at-a-time loop around it.
 *
 * Inputs are exhaustive where that is cheap (every byte value at every
 * position, every day from 1970 to 2200) and otherwise from a fixed-seed
 * generator, so that a failure repeats.
 */

#define _POSIX_C_SOURCE  200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_suites.h"
#include "ngx_http_session_cursor.h"
#include "ngx_http_session_doc.h"
#include "ngx_http_session_json.h"


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))

/*
 * Check's ck_assert*() records a checkpoint, a write to its parent, on
 * every call: the loops below test with this and call Check only to fail.
 */
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            ck_abort_msg(__VA_ARGS__);                                        \
        }                                                                     \
    } while (0)

#define US_PER_DAY  86400000000LL
/* 2200-01-01T00:00:00Z in days since the epoch */
#define DAYS_2200   84006


/* xorshift64*: fixed seeds, so that every run sees the same inputs */

static uint64_t
rnd_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;

    return *s * 2685821657736338717ULL;
}


/* references */

static void
ref_uuid_format(const unsigned char *u, unsigned char *dst)
{
    int   i;
    char  buf[3];

    for (i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            *dst++ = '-';
        }

        snprintf(buf, sizeof(buf), "%02x", u[i]);
        *dst++ = (unsigned char) buf[0];
        *dst++ = (unsigned char) buf[1];
    }
}


static int
ref_hex(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }

    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }

    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }

    return -1;
}


static int
ref_uuid_parse(const unsigned char *s, size_t len, unsigned char *u)
{
    int            hi, lo;
    size_t         i, n;
    unsigned char  bin[16];

    if (len != 36) {
        return -1;
    }

    n = 0;

    for (i = 0; i < len; /* void */) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i++] != '-') {
                return -1;
            }

            continue;
        }

        hi = ref_hex(s[i]);
        lo = ref_hex(s[i + 1]);

        if (hi < 0 || lo < 0) {
            return -1;
        }

        bin[n++] = (unsigned char) (hi << 4 | lo);
        i += 2;
    }

    memcpy(u, bin, 16);

    return 0;
}


/* gmtime_r(): the C library's calendar, for 1970 .. 9999 */

static void
ref_time_libc(int64_t us, char *dst)
{
    char       buf[64];
    time_t     t;
    struct tm  tm;

    t = (time_t) (us / 1000000);

    EXPECT(gmtime_r(&t, &tm) != NULL, "gmtime_r(%lld)", (long long) t);

    snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02dZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec);

    EXPECT(strlen(buf) == NGX_HTTP_SESSION_DOC_TIME_LEN, "%s", buf);
    memcpy(dst, buf, NGX_HTTP_SESSION_DOC_TIME_LEN);
}


/*
 * Any int64_t, also negative and past 9999 (years clamped to 0 .. 9999):
 * a day count to a date one year at a time from 1970, in days of years
 * of 400-year cycles first, so that the loop stays short.
 */

static int
ref_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}


static void
ref_time_any(int64_t us, char *dst)
{
    int            month;
    int64_t        secs, days, rem, year, cycles, ylen;
    char           buf[64];
    static const int  mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31,
                                  30, 31 };

    /* floor division: whole seconds down, also before the epoch */
    secs = us / 1000000 - (us % 1000000 < 0);
    days = secs / 86400 - (secs % 86400 < 0);
    rem = secs - days * 86400;

    year = 1970;

    cycles = days / 146097;
    days -= cycles * 146097;
    year += cycles * 400;

    while (days < 0) {
        year -= 400;
        days += 146097;
    }

    for ( ;; ) {
        ylen = 365 + ref_leap(year);

        if (days < ylen) {
            break;
        }

        days -= ylen;
        year++;
    }

    for (month = 0; month < 12; month++) {
        ylen = mdays[month] + (month == 1 && ref_leap(year));

        if (days < ylen) {
            break;
        }

        days -= ylen;
    }

    if (year < 0) {
        year = 0;

    } else if (year > 9999) {
        year = 9999;
    }

    snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02dZ",
             (int) year, month + 1, (int) days + 1, (int) (rem / 3600),
             (int) (rem / 60 % 60), (int) (rem % 60));

    EXPECT(strlen(buf) == NGX_HTTP_SESSION_DOC_TIME_LEN, "%s", buf);
    memcpy(dst, buf, NGX_HTTP_SESSION_DOC_TIME_LEN);
}


/* one byte at a time */

static size_t
ref_escape(unsigned char *dst, const unsigned char *src, size_t len)
{
    size_t                n, size;
    unsigned char         c;
    const unsigned char  *end;
    char                  buf[8];

    size = 0;
    end = src + len;

    while (src < end) {
        c = *src;

        if (c >= 0x80) {
            n = ngx_http_session_utf8_len(src, end);

            if (n == 0) {
                memcpy(dst + size, "\\ufffd", 6);
                size += 6;
                src++;
                continue;
            }

            memcpy(dst + size, src, n);
            size += n;
            src += n;
            continue;
        }

        if (c == '"' || c == '\\') {
            dst[size++] = '\\';
            dst[size++] = c;

        } else if (c < 0x20 || c == 0x7f) {
            snprintf(buf, sizeof(buf), "\\u%04x", c);
            memcpy(dst + size, buf, 6);
            size += 6;

        } else {
            dst[size++] = c;
        }

        src++;
    }

    return size;
}


static uint32_t
ref_crc32(const unsigned char *p, size_t len)
{
    int       k;
    uint32_t  crc;

    crc = 0xffffffff;

    while (len--) {
        crc ^= *p++;

        for (k = 0; k < 8; k++) {
            crc = (crc & 1) ? (crc >> 1) ^ 0xedb88320 : crc >> 1;
        }
    }

    return ~crc;
}


/* unpadded URL-safe base64, one bit at a time */

static size_t
ref_b64(unsigned char *dst, const unsigned char *src, size_t len)
{
    size_t             bit, nbits, i, n;
    unsigned           v;
    static const char  b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "abcdefghijklmnopqrstuvwxyz0123456789-_";

    nbits = len * 8;
    n = 0;

    for (bit = 0; bit < nbits; bit += 6) {
        v = 0;

        for (i = bit; i < bit + 6; i++) {
            v <<= 1;

            if (i < nbits) {
                v |= (src[i / 8] >> (7 - i % 8)) & 1;
            }
        }

        dst[n++] = (unsigned char) b64[v];
    }

    return n;
}


/* the writers under test, with a canary after their output */

#define CANARY  0xa5
#define SLACK   16


static void
check_time(int64_t us, const char *expect)
{
    unsigned char  buf[NGX_HTTP_SESSION_DOC_TIME_LEN + SLACK], *end;

    memset(buf, CANARY, sizeof(buf));

    end = ngx_http_session_doc_time(buf, us);

    EXPECT(end - buf == NGX_HTTP_SESSION_DOC_TIME_LEN
           && buf[NGX_HTTP_SESSION_DOC_TIME_LEN] == CANARY
           && memcmp(buf, expect, NGX_HTTP_SESSION_DOC_TIME_LEN) == 0,
           "%lld: \"%.20s\", expected \"%.20s\"", (long long) us,
                  (const char *) buf, expect);
}


static void
check_time_libc(int64_t us)
{
    char  expect[NGX_HTTP_SESSION_DOC_TIME_LEN];

    ref_time_libc(us, expect);
    check_time(us, expect);
}


static void
check_time_any(int64_t us)
{
    char  expect[NGX_HTTP_SESSION_DOC_TIME_LEN];

    ref_time_any(us, expect);
    check_time(us, expect);
}


/* UUID text */

START_TEST(test_uuid_format_every_byte)
{
    int            i, b;
    unsigned char  u[16], got[36 + SLACK], expect[36];

    /* byte b at position _i, the others a pattern */

    for (b = 0; b < 256; b++) {
        for (i = 0; i < 16; i++) {
            u[i] = (unsigned char) (i * 17 + 3);
        }

        u[_i] = (unsigned char) b;

        memset(got, CANARY, sizeof(got));
        ngx_http_session_uuid_format(u, got);
        ref_uuid_format(u, expect);

        EXPECT(memcmp(got, expect, 36) == 0 && got[36] == CANARY,
               "byte 0x%02x at %d: \"%.36s\"", b, _i, (const char *) got);
    }
}
END_TEST


START_TEST(test_uuid_format_random)
{
    int            n, i;
    uint64_t       seed, v;
    unsigned char  u[16], got[36], expect[36], back[16];

    seed = 0x9e3779b97f4a7c15ULL;

    for (n = 0; n < 100000; n++) {
        for (i = 0; i < 16; i += 8) {
            v = rnd_next(&seed);
            memcpy(u + i, &v, 8);
        }

        ngx_http_session_uuid_format(u, got);
        ref_uuid_format(u, expect);
        EXPECT(memcmp(got, expect, 36) == 0, "\"%.36s\", expected \"%.36s\"",
               (const char *) got, (const char *) expect);

        /* and back */
        EXPECT(ngx_http_session_uuid_parse(got, 36, back) == 0
               && memcmp(back, u, 16) == 0, "\"%.36s\" does not parse back",
               (const char *) got);
    }
}
END_TEST


/*
 * Every byte value at every position of a valid text (lower and upper
 * case bases), and every length around 36: the same verdict and bytes as
 * the reference, and nothing written on a refusal.
 */
START_TEST(test_uuid_parse_every_byte)
{
    int            rc, ref, b, pos;
    unsigned char  text[40], got[16], expect[16];
    static const char  *bases[] = {
        "01234567-89ab-cdef-0123-456789abcdef",
        "FEDCBA98-7654-3210-FEDC-BA9876543210",
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-FFFF-ffff-FFFF-ffffffffffff"
    };

    for (pos = 0; pos < 36; pos++) {
        for (b = 0; b < 256; b++) {
            memcpy(text, bases[_i], 36);
            text[pos] = (unsigned char) b;

            memset(got, CANARY, sizeof(got));
            memset(expect, CANARY, sizeof(expect));

            rc = ngx_http_session_uuid_parse(text, 36, got);
            ref = ref_uuid_parse(text, 36, expect);

            EXPECT(rc == ref && memcmp(got, expect, 16) == 0,
                   "%.36s: %d, expected %d", (const char *) text, rc, ref);
        }
    }

    for (pos = 0; pos < 40; pos++) {
        memset(text, '0', sizeof(text));
        memcpy(text, bases[_i], 36);

        rc = ngx_http_session_uuid_parse(text, pos, got);
        ck_assert_int_eq(rc, pos == 36 ? 0 : -1);
    }
}
END_TEST


/* timestamps */

/* every day from 1970 to 2200, at the edges of the day and in between */
START_TEST(test_time_every_day)
{
    int64_t  day, base;

    for (day = 0; day < DAYS_2200; day++) {
        base = day * US_PER_DAY;

        check_time_libc(base);
        check_time_libc(base + 1);
        check_time_libc(base + US_PER_DAY - 1);
        check_time_libc(base + (day * 7919 % 86400) * 1000000
                        + day % 1000000);
    }
}
END_TEST


/* every day from 2200 on to 9999-12-31, against the reference */
START_TEST(test_time_every_later_day)
{
    int64_t  day, last;

    last = NGX_HTTP_SESSION_DOC_US_MAX / US_PER_DAY;

    for (day = DAYS_2200 + _i; day < last; day += 8) {
        check_time_libc(day * US_PER_DAY + (day % 86400) * 1000000 + 999999);
    }
}
END_TEST


/* days from 1970-01-01 to y-m-d, a year and a month at a time */

static int64_t
ref_days(int y, int m, int d)
{
    int               i;
    int64_t           days;
    static const int  mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31,
                                  30, 31 };

    days = 0;

    for (i = 1970; i < y; i++) {
        days += 365 + ref_leap(i);
    }

    for (i = 1; i < m; i++) {
        days += mdays[i - 1] + (i == 2 && ref_leap(y));
    }

    return days + d - 1;
}


/*
 * The days that ended with an inserted leap second (June 30th or
 * December 31st): UTC microseconds since the epoch count no leap
 * second, as PostgreSQL's do, so 23:59:59 is followed by 00:00:00 and a
 * second 60 is never written.
 */
START_TEST(test_time_leap_seconds)
{
    int      i, y, m, d;
    int64_t  us;
    char     expect[32];
    static const char  *dates[] = {
        "1972-06-30", "1972-12-31", "1973-12-31", "1974-12-31",
        "1975-12-31", "1976-12-31", "1977-12-31", "1978-12-31",
        "1979-12-31", "1981-06-30", "1982-06-30", "1983-06-30",
        "1985-06-30", "1987-12-31", "1989-12-31", "1990-12-31",
        "1992-06-30", "1993-06-30", "1994-06-30", "1995-12-31",
        "1997-06-30", "1998-12-31", "2005-12-31", "2008-12-31",
        "2012-06-30", "2015-06-30", "2016-12-31"
    };

    for (i = 0; i < NELTS(dates); i++) {
        ck_assert_int_eq(sscanf(dates[i], "%d-%d-%d", &y, &m, &d), 3);

        /* the midnight after the leap second */
        us = (ref_days(y, m, d) + 1) * US_PER_DAY;

        snprintf(expect, sizeof(expect), "%sT23:59:59Z", dates[i]);
        check_time(us - 1, expect);
        check_time(us - 1000000, expect);

        snprintf(expect, sizeof(expect), "%04d-%02d-01T00:00:00Z",
                 m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1);
        check_time(us, expect);
        check_time(us + 999999, expect);

        check_time_libc(us - 1000001);
        check_time_libc(us + 1000000);
    }
}
END_TEST


/* random microseconds: the range PostgreSQL returns, then any int64_t */
START_TEST(test_time_random)
{
    int       n;
    int64_t   us;
    uint64_t  seed;

    seed = 0x243f6a8885a308d3ULL + (uint64_t) _i;

    for (n = 0; n < 100000; n++) {
        us = (int64_t) (rnd_next(&seed)
                        % (uint64_t) NGX_HTTP_SESSION_DOC_US_MAX);
        check_time_libc(us);
        check_time_any(us);
    }

    for (n = 0; n < 100000; n++) {
        check_time_any((int64_t) rnd_next(&seed));
    }
}
END_TEST


/* the edges of the fast range and everything the general path takes */
START_TEST(test_time_edges)
{
    int      i;
    int64_t  us;
    static const int64_t  vecs[] = {
        0, 1, 999999, 1000000, -1, -999999, -1000000, -1000001,
        -US_PER_DAY, -US_PER_DAY - 1, -US_PER_DAY + 1,
        NGX_HTTP_SESSION_DOC_US_MAX - 1, NGX_HTTP_SESSION_DOC_US_MAX,
        NGX_HTTP_SESSION_DOC_US_MAX + 1,
        NGX_HTTP_SESSION_DOC_US_MAX + US_PER_DAY,
        /* 0000-01-01 and the day before: the clamp at year 0 */
        -62167219200000000LL, -62167219200000001LL,
        /* 4713 BC, PostgreSQL's first day */
        -210866803200000000LL,
        /* PostgreSQL's end of time, counted from its own epoch */
        9223371331199999999LL,
        INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1
    };

    for (i = 0; i < NELTS(vecs); i++) {
        check_time_any(vecs[i]);
    }

    /* around the fast range's ends, microsecond by microsecond */

    for (us = -2000; us < 2000; us++) {
        check_time_any(us);
        check_time_any(NGX_HTTP_SESSION_DOC_US_MAX + us);
    }

    check_time(NGX_HTTP_SESSION_DOC_US_MAX - 1,
               "9999-12-31T23:59:59Z");
    check_time(NGX_HTTP_SESSION_DOC_US_MAX, "9999-01-01T00:00:00Z");
    check_time(-1, "1969-12-31T23:59:59Z");
    check_time(-US_PER_DAY - 1, "1969-12-30T23:59:59Z");
}
END_TEST


/*
 * The day cache: any order of timestamps, same days in a row, days that
 * alternate, out-of-range values between them, gives what
 * ngx_http_session_doc_time() gives.
 */
START_TEST(test_time_day_cache)
{
    int                         n, k;
    int64_t                     us, prev;
    uint64_t                    seed;
    unsigned char               got[NGX_HTTP_SESSION_DOC_TIME_LEN + SLACK];
    unsigned char               expect[NGX_HTTP_SESSION_DOC_TIME_LEN];
    unsigned char              *end;
    ngx_http_session_doc_day_t  day;

    memset(&day, 0, sizeof(day));
    seed = 0x13198a2e03707344ULL;
    prev = 1763712000123456LL;

    for (n = 0; n < 200000; n++) {
        k = (int) (rnd_next(&seed) % 8);

        switch (k) {
        case 0:
            /* another day anywhere */
            us = (int64_t) (rnd_next(&seed)
                            % (uint64_t) NGX_HTTP_SESSION_DOC_US_MAX);
            break;
        case 1:
            /* the next or the previous day */
            us = prev + ((rnd_next(&seed) & 1) ? US_PER_DAY : -US_PER_DAY);
            break;
        case 2:
            /* out of the fast range */
            us = (int64_t) rnd_next(&seed);
            break;
        case 3:
            /* a second before midnight or at it */
            us = prev - prev % US_PER_DAY
                 + ((rnd_next(&seed) & 1) ? US_PER_DAY - 1 : US_PER_DAY);
            break;
        default:
            /* the same day */
            us = prev - prev % US_PER_DAY
                 + (int64_t) (rnd_next(&seed) % (uint64_t) US_PER_DAY);
        }

        memset(got, CANARY, sizeof(got));
        end = ngx_http_session_doc_time_day(got, us, &day);
        ngx_http_session_doc_time(expect, us);

        EXPECT(end - got == NGX_HTTP_SESSION_DOC_TIME_LEN
               && got[NGX_HTTP_SESSION_DOC_TIME_LEN] == CANARY
               && memcmp(got, expect, NGX_HTTP_SESSION_DOC_TIME_LEN) == 0,
               "%lld after %lld: \"%.20s\", expected \"%.20s\"",
               (long long) us, (long long) prev, (const char *) got,
               (const char *) expect);

        if (us >= 0 && us < NGX_HTTP_SESSION_DOC_US_MAX) {
            prev = us;
        }
    }
}
END_TEST


/* JSON escaping */

static void
check_escape(const unsigned char *src, size_t len)
{
    size_t          n, m, i;
    unsigned char  *got, *expect, *in;

    /* a copy of exactly len bytes, so that a read past it is caught */
    in = malloc(len ? len : 1);
    got = malloc(NGX_HTTP_SESSION_JSON_ESCAPED_MAX(len) + SLACK);
    expect = malloc(NGX_HTTP_SESSION_JSON_ESCAPED_MAX(len) + 1);
    EXPECT(in != NULL && got != NULL && expect != NULL, "malloc()");

    memcpy(in, src, len);
    memset(got, CANARY, NGX_HTTP_SESSION_JSON_ESCAPED_MAX(len) + SLACK);

    n = ngx_http_session_json_escape(got, in, len);
    m = ref_escape(expect, src, len);

    EXPECT(n == m && memcmp(got, expect, m) == 0,
           "escape of %zu bytes: %zu bytes \"%.*s\", expected %zu \"%.*s\"",
           len, n, (int) n, (const char *) got, m, (int) m,
           (const char *) expect);
    EXPECT(ngx_http_session_json_escape(NULL, in, len) == m,
           "escape of %zu bytes: the count differs", len);

    for (i = n; i < NGX_HTTP_SESSION_JSON_ESCAPED_MAX(len) + SLACK; i++) {
        EXPECT(got[i] == CANARY, "byte %zu past %zu written", i, n);
    }

    free(in);
    free(got);
    free(expect);
}


/*
 * Byte value _i at every position of plain runs of 1 .. 24 bytes: every
 * lane of the eight-byte test, and the bytes after a run.
 */
START_TEST(test_escape_every_lane)
{
    size_t         len, pos;
    unsigned char  buf[24];

    for (len = 1; len <= sizeof(buf); len++) {
        for (pos = 0; pos < len; pos++) {
            memset(buf, 'a' + (int) (len % 26), sizeof(buf));
            buf[pos] = (unsigned char) _i;
            check_escape(buf, len);

            /* and beside a byte that is itself in the word */
            if (pos + 1 < len) {
                buf[pos + 1] = (unsigned char) (0x7e - (_i & 0x3f));
                check_escape(buf, len);
            }
        }
    }
}
END_TEST


/* two special bytes in one word, at any two positions */
START_TEST(test_escape_pairs_in_word)
{
    int            b;
    size_t         p, q;
    unsigned char  buf[16];
    static const unsigned char  specials[] = {
        0x00, 0x01, 0x1f, 0x20, 0x21, '"', '\\', 0x5b, 0x5d, 0x7e, 0x7f,
        0x80, 0xbf, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff
    };

    for (b = 0; b < NELTS(specials); b++) {
        for (p = 0; p < sizeof(buf); p++) {
            for (q = 0; q < sizeof(buf); q++) {
                memset(buf, 'x', sizeof(buf));
                buf[p] = specials[_i];
                buf[q] = specials[b];
                check_escape(buf, sizeof(buf));
            }
        }
    }
}
END_TEST


/* random strings from alphabets that weigh the byte classes differently */
START_TEST(test_escape_random)
{
    int            n;
    size_t         len, i;
    uint64_t       seed, r;
    unsigned char  buf[200];
    static const char  *utf8[] = {
        "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xed\x9f\xbf",
        "\xef\xbf\xbd", "\xf4\x8f\xbf\xbf"
    };

    seed = 0xa4093822299f31d0ULL + (uint64_t) _i;

    for (n = 0; n < 20000; n++) {
        len = rnd_next(&seed) % sizeof(buf);

        for (i = 0; i < len; /* void */) {
            r = rnd_next(&seed);

            switch (_i) {
            case 0:
                /* mostly printable ASCII */
                buf[i++] = (r % 64 == 0) ? (unsigned char) (r >> 8)
                                         : (unsigned char) (0x20 + r % 95);
                break;
            case 1:
                /* any byte */
                buf[i++] = (unsigned char) r;
                break;
            default:
                /* ASCII with valid and broken UTF-8 */
                if (r % 4 == 0 && i + 4 <= len) {
                    const char  *s = utf8[(r >> 8) % NELTS(utf8)];
                    size_t       l = strlen(s);

                    /* sometimes cut short */
                    if ((r >> 16) % 8 == 0) {
                        l--;
                    }

                    memcpy(buf + i, s, l);
                    i += l;

                } else {
                    buf[i++] = (unsigned char) (0x20 + r % 95);
                }
            }
        }

        check_escape(buf, len);
    }
}
END_TEST


/* the cursor's CRC, through the cursors it seals */
START_TEST(test_cursor_crc)
{
    int            n, i;
    size_t         len, rlen;
    uint32_t       crc;
    uint64_t       seed, v;
    long long      us, back_us;
    unsigned char  bin[30], uuid[16], back[16];
    unsigned char  got[NGX_HTTP_SESSION_CURSOR_MAX], expect[64];

    seed = 0x082efa98ec4e6c89ULL;

    for (n = 0; n < 20000; n++) {
        us = (long long) (rnd_next(&seed)
                          % (uint64_t) NGX_HTTP_SESSION_CURSOR_US_MAX);

        for (i = 0; i < 16; i += 8) {
            v = rnd_next(&seed);
            memcpy(uuid + i, &v, 8);
        }

        bin[0] = 1;
        bin[1] = 'S';

        for (i = 0; i < 8; i++) {
            bin[2 + i] = (unsigned char) ((uint64_t) us >> (56 - 8 * i));
        }

        memcpy(bin + 10, uuid, 16);

        crc = ref_crc32(bin, 26);
        bin[26] = (unsigned char) (crc >> 24);
        bin[27] = (unsigned char) (crc >> 16);
        bin[28] = (unsigned char) (crc >> 8);
        bin[29] = (unsigned char) crc;

        rlen = ref_b64(expect, bin, 30);
        len = ngx_http_session_cursor_encode_session(got, us, uuid);

        EXPECT(len == rlen && memcmp(got, expect, len) == 0,
               "cursor \"%.*s\", expected \"%.*s\"", (int) len,
               (const char *) got, (int) rlen, (const char *) expect);

        EXPECT(ngx_http_session_cursor_decode_session(got, len, &back_us,
                                                      back) == 0
               && back_us == us && memcmp(back, uuid, 16) == 0,
               "cursor \"%.*s\" does not decode back", (int) len,
               (const char *) got);
    }
}
END_TEST


Suite *
make_fast_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("fast");

    tc = tcase_create("uuid");
    tcase_add_loop_test(tc, test_uuid_format_every_byte, 0, 16);
    tcase_add_test(tc, test_uuid_format_random);
    tcase_add_loop_test(tc, test_uuid_parse_every_byte, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("time");
    tcase_add_test(tc, test_time_every_day);
    tcase_add_loop_test(tc, test_time_every_later_day, 0, 8);
    tcase_add_test(tc, test_time_leap_seconds);
    tcase_add_loop_test(tc, test_time_random, 0, 4);
    tcase_add_test(tc, test_time_edges);
    tcase_add_test(tc, test_time_day_cache);
    suite_add_tcase(s, tc);

    tc = tcase_create("escape");
    tcase_add_loop_test(tc, test_escape_every_lane, 0, 256);
    tcase_add_loop_test(tc, test_escape_pairs_in_word, 0, 22);
    tcase_add_loop_test(tc, test_escape_random, 0, 3);
    suite_add_tcase(s, tc);

    tc = tcase_create("crc");
    tcase_add_test(tc, test_cursor_crc);
    suite_add_tcase(s, tc);

    return s;
}
