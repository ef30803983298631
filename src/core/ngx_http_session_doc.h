/*
 * The documents of docs/api.md §4, written in C from typed columns:
 * the session and image objects and their RFC 3339 timestamps.  The
 * database returns rows; every byte of a resource's JSON is written here,
 * in one place.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_DOC_H_INCLUDED_
#define _NGX_HTTP_SESSION_DOC_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>


/* "2026-11-21T10:00:00Z" for years 0 to 9999 */
#define NGX_HTTP_SESSION_DOC_TIME_LEN  20

/* microseconds between the Unix epoch and PostgreSQL's (2000-01-01) */
#define NGX_HTTP_SESSION_DOC_PG_EPOCH_US  946684800000000LL

/*
 * The timestamps PostgreSQL can hold and a cursor may carry, in
 * microseconds since the Unix epoch: 1970-01-01 up to, not including,
 * 10000-01-01.
 */
#define NGX_HTTP_SESSION_DOC_US_MAX  253402300800000000LL


typedef struct {
    /* NGX_HTTP_SESSION_UUID_BIN_LEN bytes each */
    const unsigned char  *id;
    const unsigned char  *project_id;
    const unsigned char  *delivery_mode;
    size_t                delivery_mode_len;
    /* NULL: null */
    const unsigned char  *webhook_url;
    size_t                webhook_url_len;
    /* as clients see it: "expired" once now >= expires_at */
    const unsigned char  *status;
    size_t                status_len;
    int64_t               image_count;
    int64_t               acknowledged_count;
    /* microseconds since the Unix epoch */
    int64_t               created_us;
    int64_t               expires_us;
    int64_t               completed_us;
    int                   completed;
} ngx_http_session_doc_session_t;


typedef struct {
    const unsigned char  *id;
    const unsigned char  *session_id;
    int64_t               sequence;
    const unsigned char  *content_type;
    size_t                content_type_len;
    int64_t               size;
    /* 32 bytes */
    const unsigned char  *sha256;
    int64_t               created_us;
    int64_t               acknowledged_us;
    int                   acknowledged;
} ngx_http_session_doc_image_t;


/*
 * Writes the timestamp of us (microseconds since the Unix epoch, whole
 * seconds kept, the rest dropped as to_char() did) in RFC 3339 UTC;
 * returns the end.  dst holds NGX_HTTP_SESSION_DOC_TIME_LEN bytes.
 */
unsigned char *ngx_http_session_doc_time(unsigned char *dst, int64_t us);

/*
 * The date part ("2026-11-21T") of the last timestamp written with it,
 * for one field of a list, whose rows mostly share their day; all zero is
 * empty.
 */
typedef struct {
    /* days since 1970-01-01 plus 1; 0: none */
    uint32_t       day;
    unsigned char  text[11];
} ngx_http_session_doc_day_t;

/* the same bytes as ngx_http_session_doc_time(), the date from *day */
unsigned char *ngx_http_session_doc_time_day(unsigned char *dst, int64_t us,
    ngx_http_session_doc_day_t *day);

/* the most bytes the document of s can take */
size_t ngx_http_session_doc_session_size(
    const ngx_http_session_doc_session_t *s);
unsigned char *ngx_http_session_doc_session(unsigned char *dst,
    const ngx_http_session_doc_session_t *s);

size_t ngx_http_session_doc_image_size(const ngx_http_session_doc_image_t *im);
unsigned char *ngx_http_session_doc_image(unsigned char *dst,
    const ngx_http_session_doc_image_t *im);


#endif /* _NGX_HTTP_SESSION_DOC_H_INCLUDED_ */
