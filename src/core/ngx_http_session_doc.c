/*
 * Session and image documents from typed columns.
 */

#include <string.h>

#include "ngx_http_session_cursor.h"
#include "ngx_http_session_doc.h"
#include "ngx_http_session_json.h"


#define ngx_http_session_doc_lit(p, s)                                        \
    (memcpy(p, s, sizeof(s) - 1), (p) + sizeof(s) - 1)


static unsigned char *ngx_http_session_doc_digits(unsigned char *p,
    unsigned n, int width);
static unsigned char *ngx_http_session_doc_time_any(unsigned char *dst,
    int64_t us);
static unsigned char *ngx_http_session_doc_int(unsigned char *p, int64_t n);
static unsigned char *ngx_http_session_doc_string(unsigned char *p,
    const unsigned char *s, size_t len);
static unsigned char *ngx_http_session_doc_uuid(unsigned char *p,
    const unsigned char *uuid16);
static unsigned char *ngx_http_session_doc_stamp(unsigned char *p,
    int64_t us, int present, ngx_http_session_doc_day_t *day);


/*
 * The date of the last timestamp of each field (session created_at,
 * expires_at, completed_at, image created_at, acknowledged_at): the
 * consecutive documents of a list are mostly of one day.  Process-wide;
 * everything that writes documents (a worker, sessionctl) is one thread.
 */
static struct {
    ngx_http_session_doc_day_t  created;
    ngx_http_session_doc_day_t  expires;
    ngx_http_session_doc_day_t  completed;
    ngx_http_session_doc_day_t  image_created;
    ngx_http_session_doc_day_t  acknowledged;
} ngx_http_session_doc_days;


static unsigned char *
ngx_http_session_doc_digits(unsigned char *p, unsigned n, int width)
{
    int  i;

    for (i = width - 1; i >= 0; i--) {
        p[i] = (unsigned char) ('0' + n % 10);
        n /= 10;
    }

    return p + width;
}


#define ngx_http_session_doc_pair(p, n)                                       \
    memcpy(p, ngx_http_session_dec_pairs + 2 * (size_t) (n), 2)


unsigned char *
ngx_http_session_doc_time(unsigned char *dst, int64_t us)
{
    return ngx_http_session_doc_time_day(dst, us, NULL);
}


/*
 * The timestamps of 1970 to 9999 (every one the database returns) in
 * unsigned 32-bit steps whose divisions by constants the compiler turns
 * into multiplications; the rest by ngx_http_session_doc_time_any().
 *
 * The civil date of a day count, after Neri and Schneider ("Euclidean
 * affine functions and their application to calendar algorithms", 2022):
 * n counts days from 0000-03-01 of the proleptic Gregorian calendar,
 * whose years start on March 1st so that a leap day is the last day of
 * its year.  4n + 3 divided by 146097 (the days of 400 years, 4 times
 * 36524.25) is the century c, the rest over 4 the day of the century;
 * 4 times that plus 3 divided by 1461 (4 years) the year z of the
 * century, the rest over 4 the day of the year d (0 is March 1st).  Month
 * and day are one affine function of d: (2141 d + 197913) / 65536 is the
 * month (3 March .. 14 February), the remainder / 2141 the day - 1.
 * January and February (d >= 306) belong to the next calendar year.
 */

unsigned char *
ngx_http_session_doc_time_day(unsigned char *dst, int64_t us,
    ngx_http_session_doc_day_t *cache)
{
    uint32_t  days, rem, n, c, z, d, md, month, day, year, mins, hours;
    uint64_t  secs;

    if (us < 0 || us >= NGX_HTTP_SESSION_DOC_US_MAX) {
        return ngx_http_session_doc_time_any(dst, us);
    }

    secs = (uint64_t) us / 1000000;
    days = (uint32_t) (secs / 86400);
    rem = (uint32_t) (secs - (uint64_t) days * 86400);

    if (cache != NULL && cache->day == days + 1) {
        memcpy(dst, cache->text, sizeof(cache->text));
        goto time;
    }

    n = 4 * (days + 719468) + 3;
    c = n / 146097;
    n = (n % 146097) | 3;
    z = n / 1461;
    d = n % 1461 / 4;
    md = 2141 * d + 197913;
    month = md >> 16;
    day = (md & 0xffff) / 2141 + 1;
    year = 100 * c + z;

    if (d >= 306) {
        year++;
        month -= 12;
    }

    ngx_http_session_doc_pair(dst, year / 100);
    ngx_http_session_doc_pair(dst + 2, year % 100);
    dst[4] = '-';
    ngx_http_session_doc_pair(dst + 5, month);
    dst[7] = '-';
    ngx_http_session_doc_pair(dst + 8, day);
    dst[10] = 'T';

    if (cache != NULL) {
        memcpy(cache->text, dst, sizeof(cache->text));
        cache->day = days + 1;
    }

time:

    mins = rem / 60;
    hours = mins / 60;

    ngx_http_session_doc_pair(dst + 11, hours);
    dst[13] = ':';
    ngx_http_session_doc_pair(dst + 14, mins - 60 * hours);
    dst[16] = ':';
    ngx_http_session_doc_pair(dst + 17, rem - 60 * mins);
    dst[19] = 'Z';

    return dst + NGX_HTTP_SESSION_DOC_TIME_LEN;
}


/*
 * Any microsecond count, also before 1970 and past 9999 (years clamped
 * to 0 .. 9999): the general arithmetic in signed 64 bits.
 */

static unsigned char *
ngx_http_session_doc_time_any(unsigned char *dst, int64_t us)
{
    int64_t   secs, days, rem, era, doe, yoe, doy, mp, year;
    unsigned  month, day;

    /* whole seconds, rounded down also before the epoch */
    secs = us / 1000000;
    if (us % 1000000 < 0) {
        secs--;
    }

    days = secs / 86400;
    rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days--;
    }

    /*
     * The civil date of a day count: the proleptic Gregorian calendar is
     * counted in 400-year eras of 146097 days that start on March 1st,
     * so that the leap day is the last day of a year.
     */

    days += 719468;
    era = (days >= 0 ? days : days - 146096) / 146097;
    doe = days - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    day = (unsigned) (doy - (153 * mp + 2) / 5 + 1);
    month = (unsigned) (mp < 10 ? mp + 3 : mp - 9);
    year = yoe + era * 400 + (month <= 2);

    if (year < 0) {
        year = 0;

    } else if (year > 9999) {
        year = 9999;
    }

    dst = ngx_http_session_doc_digits(dst, (unsigned) year, 4);
    *dst++ = '-';
    dst = ngx_http_session_doc_digits(dst, month, 2);
    *dst++ = '-';
    dst = ngx_http_session_doc_digits(dst, day, 2);
    *dst++ = 'T';
    dst = ngx_http_session_doc_digits(dst, (unsigned) (rem / 3600), 2);
    *dst++ = ':';
    dst = ngx_http_session_doc_digits(dst, (unsigned) (rem / 60 % 60), 2);
    *dst++ = ':';
    dst = ngx_http_session_doc_digits(dst, (unsigned) (rem % 60), 2);
    *dst++ = 'Z';

    return dst;
}


static unsigned char *
ngx_http_session_doc_int(unsigned char *p, int64_t n)
{
    if (n < 0) {
        *p++ = '-';
        return ngx_http_session_decimal(p, (uint64_t) 0 - (uint64_t) n);
    }

    return ngx_http_session_decimal(p, (uint64_t) n);
}


static unsigned char *
ngx_http_session_doc_string(unsigned char *p, const unsigned char *s,
    size_t len)
{
    if (s == NULL) {
        return ngx_http_session_doc_lit(p, "null");
    }

    *p++ = '"';
    p += ngx_http_session_json_escape(p, s, len);
    *p++ = '"';

    return p;
}


static unsigned char *
ngx_http_session_doc_uuid(unsigned char *p, const unsigned char *uuid16)
{
    *p++ = '"';
    ngx_http_session_uuid_format(uuid16, p);
    p += NGX_HTTP_SESSION_UUID_LEN;
    *p++ = '"';

    return p;
}


static unsigned char *
ngx_http_session_doc_stamp(unsigned char *p, int64_t us, int present,
    ngx_http_session_doc_day_t *day)
{
    if (!present) {
        return ngx_http_session_doc_lit(p, "null");
    }

    *p++ = '"';
    p = ngx_http_session_doc_time_day(p, us, day);
    *p++ = '"';

    return p;
}


/* every byte but the strings' and the numbers' */
#define NGX_HTTP_SESSION_DOC_SESSION_FIXED                                    \
    (sizeof("{\"id\": \"\", \"project_id\": \"\", \"delivery_mode\": \"\", "  \
            "\"webhook_url\": \"\", \"status\": \"\", \"image_count\": , "    \
            "\"acknowledged_count\": , \"created_at\": \"\", "                \
            "\"expires_at\": \"\", \"completed_at\": \"\"}")                  \
     + 2 * NGX_HTTP_SESSION_UUID_LEN + 3 * NGX_HTTP_SESSION_DOC_TIME_LEN      \
     + 2 * (NGX_HTTP_SESSION_DECIMAL_MAX + 1))


size_t
ngx_http_session_doc_session_size(const ngx_http_session_doc_session_t *s)
{
    return NGX_HTTP_SESSION_DOC_SESSION_FIXED
           + NGX_HTTP_SESSION_JSON_ESCAPED_MAX(s->delivery_mode_len
                                               + s->webhook_url_len
                                               + s->status_len);
}


unsigned char *
ngx_http_session_doc_session(unsigned char *p,
    const ngx_http_session_doc_session_t *s)
{
    p = ngx_http_session_doc_lit(p, "{\"id\": ");
    p = ngx_http_session_doc_uuid(p, s->id);
    p = ngx_http_session_doc_lit(p, ", \"project_id\": ");
    p = ngx_http_session_doc_uuid(p, s->project_id);
    p = ngx_http_session_doc_lit(p, ", \"delivery_mode\": ");
    p = ngx_http_session_doc_string(p, s->delivery_mode,
                                    s->delivery_mode_len);
    p = ngx_http_session_doc_lit(p, ", \"webhook_url\": ");
    p = ngx_http_session_doc_string(p, s->webhook_url, s->webhook_url_len);
    p = ngx_http_session_doc_lit(p, ", \"status\": ");
    p = ngx_http_session_doc_string(p, s->status, s->status_len);
    p = ngx_http_session_doc_lit(p, ", \"image_count\": ");
    p = ngx_http_session_doc_int(p, s->image_count);
    p = ngx_http_session_doc_lit(p, ", \"acknowledged_count\": ");
    p = ngx_http_session_doc_int(p, s->acknowledged_count);
    p = ngx_http_session_doc_lit(p, ", \"created_at\": ");
    p = ngx_http_session_doc_stamp(p, s->created_us, 1,
                                   &ngx_http_session_doc_days.created);
    p = ngx_http_session_doc_lit(p, ", \"expires_at\": ");
    p = ngx_http_session_doc_stamp(p, s->expires_us, 1,
                                   &ngx_http_session_doc_days.expires);
    p = ngx_http_session_doc_lit(p, ", \"completed_at\": ");
    p = ngx_http_session_doc_stamp(p, s->completed_us, s->completed,
                                   &ngx_http_session_doc_days.completed);
    *p++ = '}';

    return p;
}


#define NGX_HTTP_SESSION_DOC_IMAGE_FIXED                                      \
    (sizeof("{\"id\": \"\", \"session_id\": \"\", \"sequence\": , "           \
            "\"content_type\": \"\", \"size\": , \"sha256\": \"\", "          \
            "\"created_at\": \"\", \"acknowledged\": false, "                 \
            "\"acknowledged_at\": \"\"}")                                     \
     + 2 * NGX_HTTP_SESSION_UUID_LEN + 64                                     \
     + 2 * NGX_HTTP_SESSION_DOC_TIME_LEN                                      \
     + 2 * (NGX_HTTP_SESSION_DECIMAL_MAX + 1))


size_t
ngx_http_session_doc_image_size(const ngx_http_session_doc_image_t *im)
{
    return NGX_HTTP_SESSION_DOC_IMAGE_FIXED
           + NGX_HTTP_SESSION_JSON_ESCAPED_MAX(im->content_type_len);
}


unsigned char *
ngx_http_session_doc_image(unsigned char *p,
    const ngx_http_session_doc_image_t *im)
{
    int  i;

    p = ngx_http_session_doc_lit(p, "{\"id\": ");
    p = ngx_http_session_doc_uuid(p, im->id);
    p = ngx_http_session_doc_lit(p, ", \"session_id\": ");
    p = ngx_http_session_doc_uuid(p, im->session_id);
    p = ngx_http_session_doc_lit(p, ", \"sequence\": ");
    p = ngx_http_session_doc_int(p, im->sequence);
    p = ngx_http_session_doc_lit(p, ", \"content_type\": ");
    p = ngx_http_session_doc_string(p, im->content_type,
                                    im->content_type_len);
    p = ngx_http_session_doc_lit(p, ", \"size\": ");
    p = ngx_http_session_doc_int(p, im->size);
    p = ngx_http_session_doc_lit(p, ", \"sha256\": \"");

    for (i = 0; i < 32; i++) {
        memcpy(p, ngx_http_session_hex_pairs + 2 * (size_t) im->sha256[i], 2);
        p += 2;
    }

    p = ngx_http_session_doc_lit(p, "\", \"created_at\": ");
    p = ngx_http_session_doc_stamp(p, im->created_us, 1,
                                   &ngx_http_session_doc_days.image_created);

    if (im->acknowledged) {
        p = ngx_http_session_doc_lit(p, ", \"acknowledged\": true");

    } else {
        p = ngx_http_session_doc_lit(p, ", \"acknowledged\": false");
    }

    p = ngx_http_session_doc_lit(p, ", \"acknowledged_at\": ");
    p = ngx_http_session_doc_stamp(p, im->acknowledged_us, im->acknowledged,
                                   &ngx_http_session_doc_days.acknowledged);
    *p++ = '}';

    return p;
}
