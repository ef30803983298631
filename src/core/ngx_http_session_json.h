/*
 * The small pieces of JSON the hot paths write by hand: string escaping
 * and the standard reason phrases that error bodies carry.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_JSON_H_INCLUDED_
#define _NGX_HTTP_SESSION_JSON_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>


/*
 * The most bytes escaping len input bytes can produce: a control byte
 * becomes "\u00XX" and a byte of invalid UTF-8 becomes "\ufffd".
 */
#define NGX_HTTP_SESSION_JSON_ESCAPED_MAX(len)  ((len) * 6)


/*
 * Writes src as the inside of a JSON string (no quotes) to dst, which must
 * hold NGX_HTTP_SESSION_JSON_ESCAPED_MAX(len) bytes, or, when dst is NULL,
 * only counts.  Invalid UTF-8 is replaced with U+FFFD.  Returns the length.
 */
size_t ngx_http_session_json_escape(unsigned char *dst,
    const unsigned char *src, size_t len);

/*
 * The length of the well-formed UTF-8 sequence at p (p < end, *p >= 0x80):
 * 2 to 4, or 0 when it is not one (overlong, a surrogate, past U+10FFFF,
 * cut short by end).
 */
size_t ngx_http_session_utf8_len(const unsigned char *p,
    const unsigned char *end);

/*
 * Two characters per value, for the writers of numbers: the decimal
 * digits of n < 100 at 2 * n ("00" .. "99") and the lower-case hex
 * digits of a byte b at 2 * b ("00" .. "ff").
 */
extern const char  ngx_http_session_dec_pairs[];
extern const char  ngx_http_session_hex_pairs[];

/* the most digits ngx_http_session_decimal() writes */
#define NGX_HTTP_SESSION_DECIMAL_MAX  20


/*
 * Writes n in decimal, without a sign or leading zeros, at dst, which
 * must hold NGX_HTTP_SESSION_DECIMAL_MAX bytes; returns the end.  The hot
 * paths' header values, without a printf.
 */
unsigned char *ngx_http_session_decimal(unsigned char *dst, uint64_t n);

/* the standard reason phrase of an HTTP status, "Unknown" if none */
const char *ngx_http_session_reason(unsigned status);

/* "NNN Reason Phrase" for a status of the table, else NULL */
const char *ngx_http_session_status_line(unsigned status);


#endif /* _NGX_HTTP_SESSION_JSON_H_INCLUDED_ */
