/*
 * The statements every pool connection prepares when it connects
 * (db_conn.c sends them, with the names given here), their texts, and
 * the send of a query: by name, with no parse and no plan, or as its
 * text on a connection where preparing failed.
 */

#include "ngx_http_session_db_stmt.h"
#include "ngx_http_session_sql.h"


/* by ngx_http_session_stmt_e */
static const char  *ngx_http_session_db_stmts[] = {
    NULL,
    NGX_HTTP_SESSION_SQL_AUTH,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE,
    NGX_HTTP_SESSION_SQL_SESSION_GET,
    NGX_HTTP_SESSION_SQL_SESSION_COMPLETE,
    NGX_HTTP_SESSION_SQL_SESSION_LIST,
    NGX_HTTP_SESSION_SQL_SESSION_LIST_AFTER,
    NGX_HTTP_SESSION_SQL_IMAGE_UPLOAD,
    NGX_HTTP_SESSION_SQL_IMAGE_LIST,
    NGX_HTTP_SESSION_SQL_IMAGE_GET,
    NGX_HTTP_SESSION_SQL_IMAGE_ACK,
    NGX_HTTP_SESSION_SQL_IMAGE_CONTENT,
    NGX_HTTP_SESSION_SQL_POLL,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_KEYED,
    NGX_HTTP_SESSION_SQL_SESSION_COMPLETE_KEYED,
    NGX_HTTP_SESSION_SQL_IMAGE_UPLOAD_KEYED,
    NGX_HTTP_SESSION_SQL_IMAGE_ACK_KEYED,
    NGX_HTTP_SESSION_SQL_WEBHOOK_CLAIM,
    NGX_HTTP_SESSION_SQL_WEBHOOK_RECORD,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE_KEYED,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED_KEYED,
    NGX_HTTP_SESSION_SQL_IDEM_STORE,
    NGX_HTTP_SESSION_SQL_IDEM_READ,
    NGX_HTTP_SESSION_SQL_IMAGE_SLICE
};

/* the statements and their names, "ngx_session_<n>" for stmt n */
static ngx_http_session_db_prepare_t  *ngx_http_session_db_named;


ngx_http_session_db_prepare_t *
ngx_http_session_db_stmt_init(ngx_cycle_t *cycle)
{
    ngx_http_session_db_named = ngx_http_session_db_prepare_create(cycle,
                                        "ngx_session_",
                                        &ngx_http_session_db_stmts[1],
                                        NGX_HTTP_SESSION_NSTMTS - 1);

    return ngx_http_session_db_named;
}


const char *
ngx_http_session_db_stmt_sql(ngx_http_session_stmt_e stmt)
{
    return ngx_http_session_db_stmts[stmt];
}


/* hands one query to libpq: by name where the statement is prepared */

ngx_int_t
ngx_http_session_db_stmt_send(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q)
{
    int  i;

    /* a connection that prepared them did so with these names */

    if (q->stmt != NGX_HTTP_SESSION_STMT_NONE && dc->prepared
        ? !PQsendQueryPrepared(dc->pg,
                               ngx_http_session_db_named->names[q->stmt - 1],
                               q->nparams, q->values, q->lengths, q->formats,
                               q->result_format)
        : !PQsendQueryParams(dc->pg, q->sql, q->nparams, NULL, q->values,
                             q->lengths, q->formats, q->result_format))
    {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        return NGX_ERROR;
    }

    for (i = 0; i < q->nparams; i++) {
        dc->sent += q->lengths[i];
    }

    return NGX_OK;
}
