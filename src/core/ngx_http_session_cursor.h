/*
 * Opaque list cursors (docs/api.md §4, "next_cursor") and UUID text.
 *
 * Pure C with no nginx types, shared by the module and sessionctl, and
 * unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_CURSOR_H_INCLUDED_
#define _NGX_HTTP_SESSION_CURSOR_H_INCLUDED_


#include <stddef.h>


/* the text form of a UUID (8-4-4-4-12 hex digits) and its 16 bytes */
#define NGX_HTTP_SESSION_UUID_LEN            36
#define NGX_HTTP_SESSION_UUID_BIN_LEN        16

/* the text of a session cursor and of an image cursor */
#define NGX_HTTP_SESSION_CURSOR_SESSION_LEN  40
#define NGX_HTTP_SESSION_CURSOR_IMAGE_LEN    19
/* the most bytes an encoder writes (no terminating NUL is written) */
#define NGX_HTTP_SESSION_CURSOR_MAX                                           \
    NGX_HTTP_SESSION_CURSOR_SESSION_LEN


/*
 * The positions a decoder takes: what the server can have issued.  A
 * session's created_at in microseconds since the epoch lies in the years
 * 1970 to 9999 (PostgreSQL's timestamps hold far more, so the list query
 * never sees a value it cannot turn into a timestamp); an image's
 * sequence is a PostgreSQL integer, 0 being the position before the
 * first image.
 */
#define NGX_HTTP_SESSION_CURSOR_US_MIN       0LL
/* 9999-12-31T23:59:59.999999Z */
#define NGX_HTTP_SESSION_CURSOR_US_MAX       253402300799999999LL
#define NGX_HTTP_SESSION_CURSOR_SEQ_MIN      0LL
#define NGX_HTTP_SESSION_CURSOR_SEQ_MAX      2147483647LL


/*
 * The position after the last session of a page of the list ordered
 * newest first by (created_at, id): created_at in microseconds since the
 * epoch, as PostgreSQL stores it, and the id.  Writes
 * NGX_HTTP_SESSION_CURSOR_SESSION_LEN bytes of URL-safe base64 and
 * returns that length.
 */
size_t ngx_http_session_cursor_encode_session(unsigned char *dst,
    long long created_us, const unsigned char *uuid16);

/*
 * 0 and the position, or -1 for anything an encoder did not write or a
 * position out of the range above
 */
int ngx_http_session_cursor_decode_session(const unsigned char *src,
    size_t len, long long *created_us, unsigned char *uuid16);

/* the last sequence of a page of images; decoded as sessions are */
size_t ngx_http_session_cursor_encode_image(unsigned char *dst,
    long long sequence);

int ngx_http_session_cursor_decode_image(const unsigned char *src,
    size_t len, long long *sequence);

/*
 * The canonical NGX_HTTP_SESSION_UUID_LEN-character form (8-4-4-4-12 hex
 * digits, either case, no braces, no "urn:uuid:"), so that a malformed id
 * is refused before the database sees it.  Returns 0 and the
 * NGX_HTTP_SESSION_UUID_BIN_LEN bytes, or -1 and writes nothing.
 */
int ngx_http_session_uuid_parse(const unsigned char *s, size_t len,
    unsigned char *uuid16);

/*
 * Writes the NGX_HTTP_SESSION_UUID_LEN characters of the lower-case form,
 * no terminating NUL.
 */
void ngx_http_session_uuid_format(const unsigned char *uuid16,
    unsigned char *dst36);


#endif /* _NGX_HTTP_SESSION_CURSOR_H_INCLUDED_ */
