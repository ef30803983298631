/*
 * Pipelines of reads (see ngx_http_session_db_batchable()): this file
 * sends one on a pool connection and hands its answers, one at a time,
 * to the pool that reads them (db_query.c), which decides what becomes
 * of each query.
 */

#include "ngx_http_session_db_batch.h"
#include "ngx_http_session_db_stmt.h"
#include "ngx_http_session_stats.h"


static ngx_int_t ngx_http_session_db_batch_over(
    ngx_http_session_db_conn_t *dc);


/*
 * Reads that wait for a connection go to PostgreSQL together: pipeline
 * mode, one Bind/Execute per read and one Sync for all, so that a busy
 * server wakes once for many of them instead of once each, and answers
 * them in one stream.  Only the statements that change nothing
 * (NGX_HTTP_SESSION_STMT_READS): between two Syncs the statements share
 * one implicit transaction, and in READ COMMITTED each still reads its
 * own snapshot.  If one fails, PostgreSQL skips the rest up to the Sync
 * ("aborted"); those did not run and wait for a connection again, at
 * the head of the queue.
 */

ngx_uint_t
ngx_http_session_db_batchable(ngx_http_session_db_query_t *q)
{
    return q->stmt != NGX_HTTP_SESSION_STMT_NONE
           && (NGX_HTTP_SESSION_STMT_READS & (1U << q->stmt)) != 0;
}


ngx_int_t
ngx_http_session_db_batch_send(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t **batch, ngx_uint_t n)
{
    ngx_uint_t  i;

    /* from here on a failure of the connection fails them all */

    for (i = 0; i < n; i++) {
        dc->batch[i] = batch[i];
        batch[i]->conn = dc;
    }

    dc->nbatch = n;
    dc->nread = 0;

    if (!PQenterPipelineMode(dc->pg)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: no pipeline mode: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        goto failed;
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_session_db_stmt_send(dc, batch[i]) != NGX_OK) {
            goto failed;
        }
    }

    if (!PQpipelineSync(dc->pg)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        goto failed;
    }

    ngx_http_session_stat(db_batches, 1);
    ngx_http_session_stat(db_batched, n);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: %ui reads in one pipeline", n);

    /* the queries have timeouts of their own */

    if (ngx_http_session_db_conn_busy(dc) != NGX_OK) {
        goto failed;
    }

    return NGX_OK;

failed:

    ngx_http_session_db_conn_fail(dc);

    return NGX_ERROR;
}


/*
 * The results of a pipeline, in order: each read's result (or error,
 * or "aborted"), then NULL, then PGRES_PIPELINE_SYNC after the last.
 * NGX_OK: *q (NULL if it went away meanwhile) is answered with *res;
 * NGX_DONE: the pipeline is over and the connection idle; NGX_AGAIN: the
 * rest is not there yet; NGX_ERROR: the connection failed.
 */

ngx_int_t
ngx_http_session_db_batch_read(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t **q, PGresult **res)
{
    PGresult        *r;
    ExecStatusType   st;

    while (!PQisBusy(dc->pg)) {
        r = PQgetResult(dc->pg);

        if (r == NULL) {
            if (dc->nread == dc->nbatch) {
                /* nothing is owed: libpq and the pool disagree */
                break;
            }

            *res = dc->result;
            dc->result = NULL;

            *q = dc->batch[dc->nread];
            dc->batch[dc->nread] = NULL;
            dc->nread++;

            return NGX_OK;
        }

        st = PQresultStatus(r);

        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            return ngx_http_session_db_batch_over(dc);
        }

        ngx_http_session_db_conn_keep(dc, r);
    }

    if (PQstatus(dc->pg) == CONNECTION_BAD) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: connection lost: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_conn_fail(dc);
        return NGX_ERROR;
    }

    return NGX_AGAIN;
}


static ngx_int_t
ngx_http_session_db_batch_over(ngx_http_session_db_conn_t *dc)
{
    if (!PQexitPipelineMode(dc->pg)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: leaving pipeline mode failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_conn_fail(dc);
        return NGX_ERROR;
    }

    dc->nbatch = 0;
    dc->nread = 0;

    ngx_http_session_db_conn_idle(dc);

    return NGX_DONE;
}
