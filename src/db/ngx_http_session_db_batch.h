/*
 * Pipelines of reads on a pool connection (db_batch.c), the folder's own.
 */

#ifndef _NGX_HTTP_SESSION_DB_BATCH_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_BATCH_H_INCLUDED_


#include "ngx_http_session_common.h"

#include "ngx_http_session_db_conn.h"


/* may q go in a pipeline? */
ngx_uint_t ngx_http_session_db_batchable(ngx_http_session_db_query_t *q);

/*
 * The n queries of batch on dc, idle, under one Sync; NGX_ERROR: dc has
 * failed (and they with it)
 */
ngx_int_t ngx_http_session_db_batch_send(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t **batch, ngx_uint_t n);

/* the next answer of dc's pipeline, see db_batch.c */
ngx_int_t ngx_http_session_db_batch_read(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t **q, PGresult **res);


#endif /* _NGX_HTTP_SESSION_DB_BATCH_H_INCLUDED_ */
