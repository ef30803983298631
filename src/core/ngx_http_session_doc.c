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
static unsigned char *ngx_http_session_doc_int(unsigned char *p, int64_t n);
static unsigned char *ngx_http_session_doc_string(unsigned char *p,
    const unsigned char *s, size_t len);
static unsigned char *ngx_http_session_doc_uuid(unsigned char *p,
    const unsigned char *uuid16);
static unsigned char *ngx_http_session_doc_stamp(unsigned char *p,
    int64_t us, int present);


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


unsigned char *
ngx_http_session_doc_time(unsigned char *dst, int64_t us)
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
ngx_http_session_doc_stamp(unsigned char *p, int64_t us, int present)
{
    if (!present) {
        return ngx_http_session_doc_lit(p, "null");
    }

    *p++ = '"';
    p = ngx_http_session_doc_time(p, us);
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
    p = ngx_http_session_doc_stamp(p, s->created_us, 1);
    p = ngx_http_session_doc_lit(p, ", \"expires_at\": ");
    p = ngx_http_session_doc_stamp(p, s->expires_us, 1);
    p = ngx_http_session_doc_lit(p, ", \"completed_at\": ");
    p = ngx_http_session_doc_stamp(p, s->completed_us, s->completed);
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
    int                         i;
    static const unsigned char  hex[] = "0123456789abcdef";

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
        *p++ = hex[im->sha256[i] >> 4];
        *p++ = hex[im->sha256[i] & 0xf];
    }

    p = ngx_http_session_doc_lit(p, "\", \"created_at\": ");
    p = ngx_http_session_doc_stamp(p, im->created_us, 1);

    if (im->acknowledged) {
        p = ngx_http_session_doc_lit(p, ", \"acknowledged\": true");

    } else {
        p = ngx_http_session_doc_lit(p, ", \"acknowledged\": false");
    }

    p = ngx_http_session_doc_lit(p, ", \"acknowledged_at\": ");
    p = ngx_http_session_doc_stamp(p, im->acknowledged_us, im->acknowledged);
    *p++ = '}';

    return p;
}
