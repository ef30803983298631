/*
 * What a connection prepares (db_prepare.c), the folder's own: its
 * owner's statements, in one pipeline, and behind a transaction pooler
 * whether the pooler keeps them for its clients (decisions.md (nj),
 * (pg)).  The pool (db_query.c, the statements of db_stmt.c) and the
 * upload connections (db_copy.c) use it.
 */

#ifndef _NGX_HTTP_SESSION_DB_PREPARE_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_PREPARE_H_INCLUDED_


#include "ngx_http_session_common.h"

#include "ngx_http_session_db_conn.h"


/*
 * The statements an owner prepares on each of its connections: n names
 * and their texts.  Each goes to the server in a Parse of its own, not
 * as one "PREPARE a AS ...; PREPARE b AS ..." text: PostgreSQL keeps a
 * prepared statement's source text and shows it for each run of it (in
 * pg_stat_activity, and after every error in its log), so the one text
 * made every statement of a connection appear as the first one, with
 * all the others after it.
 */
typedef struct {
    ngx_uint_t                       n;
    const char                     **names;
    const char                     **sqls;
} ngx_http_session_db_prepare_t;

/* the n statements sqls, named <prefix>1 to <prefix>n; NULL without memory */
ngx_http_session_db_prepare_t *ngx_http_session_db_prepare_create(
    ngx_cycle_t *cycle, const char *prefix, const char **sqls, ngx_uint_t n);

/*
 * A connection just ready: its owner's statements first (prep), in one
 * pipeline, unless they are prepared, or a pooler that session_db_pooler
 * (pooler) does not name stands in between, or one is named
 * "transaction" and the probe found none (each statement goes with its
 * text then).  Behind a transaction pooler the pipeline also asks
 * whether the pooler keeps the statements for its clients, and takes
 * them back from the server connection where it does not (decisions.md
 * (pg)).  Returns whether they are sent: the answer (the first error, or
 * a result of them) comes to dc->answer with dc->preparing set, within
 * session_db_timeout, or the connection is made again (at once, when
 * they could not be sent); the owner's queries wait for it.
 */
ngx_uint_t ngx_http_session_db_prepare(ngx_http_session_db_conn_t *dc,
    const ngx_http_session_db_prepare_t *prep, ngx_uint_t pooler);

/*
 * the PREPARE's answer in: prepared, or they go as text (said as a
 * warning when the PREPARE failed).  Behind a transaction pooler, what
 * it found is said as a notice where *said (the owner's, per worker) is
 * still 0, and *said is set.
 */
void ngx_http_session_db_prepared(ngx_http_session_db_conn_t *dc,
    PGresult *res, const char *what, ngx_uint_t *said);


#endif /* _NGX_HTTP_SESSION_DB_PREPARE_H_INCLUDED_ */
