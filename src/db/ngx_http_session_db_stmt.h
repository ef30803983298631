/*
 * The statements every pool connection prepares (db_stmt.c), the
 * folder's own.
 */

#ifndef _NGX_HTTP_SESSION_DB_STMT_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_STMT_H_INCLUDED_


#include "ngx_http_session_common.h"

#include "ngx_http_session_db_prepare.h"


/* the statements, named ngx_session_<n>, that each connection prepares */
ngx_http_session_db_prepare_t *ngx_http_session_db_stmt_init(
    ngx_cycle_t *cycle);

/* a statement's text, sent where a connection could not prepare it */
const char *ngx_http_session_db_stmt_sql(ngx_http_session_stmt_e stmt);

/*
 * q to libpq on dc, by name where dc prepared the statements, counted in
 * dc->sent; NGX_ERROR (logged) when libpq refuses it
 */
ngx_int_t ngx_http_session_db_stmt_send(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q);


#endif /* _NGX_HTTP_SESSION_DB_STMT_H_INCLUDED_ */
