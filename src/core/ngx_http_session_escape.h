/*
 * Bytes written as hex escapes, for text that must read back as exactly
 * the bytes it came from.
 */

#ifndef _NGX_HTTP_SESSION_ESCAPE_H_INCLUDED_
#define _NGX_HTTP_SESSION_ESCAPE_H_INCLUDED_


#include <stddef.h>


typedef enum {
    /*
     * The Idempotency-Key fingerprint's path: every byte outside
     * 0x21..0x7e and every '%' becomes "%XX", so that two different
     * byte strings never give the same text (at most 3 * len)
     */
    NGX_HTTP_SESSION_ESCAPE_PATH = 0,

    /*
     * A quoted string of the error log, as nginx's access log writes a
     * variable: '"', '\', control bytes, DEL and non-ASCII become "\xXX",
     * so the closing quote is where the string ends and one line stays
     * one line (at most 4 * len)
     */
    NGX_HTTP_SESSION_ESCAPE_LOG
} ngx_http_session_escape_e;


/*
 * Writes src escaped as how says, the hex in upper case; dst == NULL only
 * counts.  Returns the length.
 */
size_t ngx_http_session_escape(unsigned char *dst, const unsigned char *src,
    size_t len, ngx_http_session_escape_e how);


#endif /* _NGX_HTTP_SESSION_ESCAPE_H_INCLUDED_ */
