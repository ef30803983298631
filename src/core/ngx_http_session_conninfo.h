/*
 * The values of a libpq connection string that libpq checks only when it
 * connects: "sslmode=bogus" or "port=abc" pass PQconninfoParse(), so
 * "nginx -t" would accept them and every connection fail.  session_db,
 * session_db_listen and sessionctl's -d are judged here instead.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_CONNINFO_H_INCLUDED_
#define _NGX_HTTP_SESSION_CONNINFO_H_INCLUDED_


/*
 * NULL when libpq would take value for keyword (or does not check it
 * before connecting), else what it expects, for a message: "one of
 * disable, allow, prefer, require, verify-ca, verify-full".  value is
 * NUL-terminated; an empty value is the default, always taken.
 */
const char *ngx_http_session_conninfo_check(const char *keyword,
    const char *value);


#endif /* _NGX_HTTP_SESSION_CONNINFO_H_INCLUDED_ */
