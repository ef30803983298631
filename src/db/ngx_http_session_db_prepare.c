/*
 * What a connection prepares before its owner's first query: the
 * owner's statements, each in a Parse of its own, in one pipeline with
 * one Sync (decisions.md (nj)).  Behind a pooler named "transaction"
 * the same pipeline asks the server under which names they arrived, so
 * that they count as prepared only where the pooler keeps them for its
 * clients, and takes back those a pooler passed on as they were
 * (decisions.md (pg)).  The connection itself (db_conn.c) knows nothing
 * of statements: this file reads the pipeline's answers in its place
 * (dc->reader) and hands the result on as any answer.
 */


#include "ngx_http_session_db_prepare.h"
#include "ngx_http_session_sql.h"


static void ngx_http_session_db_prepare_read(ngx_http_session_db_conn_t *dc);


ngx_http_session_db_prepare_t *
ngx_http_session_db_prepare_create(ngx_cycle_t *cycle, const char *prefix,
    const char **sqls, ngx_uint_t n)
{
    u_char                         *name;
    size_t                          len;
    ngx_uint_t                      i;
    ngx_http_session_db_prepare_t  *prep;

    prep = ngx_palloc(cycle->pool, sizeof(ngx_http_session_db_prepare_t));
    if (prep == NULL) {
        return NULL;
    }

    prep->n = n;
    prep->sqls = sqls;

    prep->names = ngx_palloc(cycle->pool, n * sizeof(const char *));
    if (prep->names == NULL) {
        return NULL;
    }

    len = ngx_strlen(prefix) + NGX_INT_T_LEN + 1;

    for (i = 0; i < n; i++) {
        name = ngx_pnalloc(cycle->pool, len);
        if (name == NULL) {
            return NULL;
        }

        ngx_sprintf(name, "%s%ui%Z", prefix, i + 1);
        prep->names[i] = (const char *) name;
    }

    return prep;
}


/*
 * A PREPARE waits for the locks of the tables it names (a migration's
 * ACCESS EXCLUSIVE among them) and the server's statement_timeout may be
 * off (the operator's options, a pooler): like the first statement, it
 * has session_db_timeout to be answered
 */

ngx_uint_t
ngx_http_session_db_prepare(ngx_http_session_db_conn_t *dc,
    const ngx_http_session_db_prepare_t *prep, ngx_uint_t pooler)
{
    ngx_uint_t  i;

    if (dc->prepared
        || (dc->pooled ? pooler == NGX_HTTP_SESSION_POOLER_OFF
                       : pooler == NGX_HTTP_SESSION_POOLER_TRANSACTION))
    {
        return 0;
    }

    /*
     * Through a pooler in transaction mode the pipeline is one
     * transaction, so one server connection: after the Parses it can
     * show under which names they arrived.  Its statements of the
     * module's names go first: those a client left there when its
     * pipeline failed halfway (PostgreSQL does not take back what the
     * Parses before the error made), which would make these Parses fail.
     */

    dc->asking = (pooler == NGX_HTTP_SESSION_POOLER_TRANSACTION);
    dc->renamed = 0;

    if (!PQenterPipelineMode(dc->pg)) {
        goto failed;
    }

    if (dc->asking
        && !PQsendQueryParams(dc->pg, NGX_HTTP_SESSION_SQL_PREPARED_DROP,
                              0, NULL, NULL, NULL, NULL, 0))
    {
        goto failed;
    }

    for (i = 0; i < prep->n; i++) {
        if (!PQsendPrepare(dc->pg, prep->names[i], prep->sqls[i], 0, NULL)) {
            goto failed;
        }
    }

    if (dc->asking
        && (!PQsendQueryParams(dc->pg, NGX_HTTP_SESSION_SQL_PREPARED_NAMES,
                               0, NULL, NULL, NULL, NULL, 0)
            || !PQsendQueryParams(dc->pg, NGX_HTTP_SESSION_SQL_PREPARED_DROP,
                                  0, NULL, NULL, NULL, NULL, 0)))
    {
        goto failed;
    }

    if (!PQpipelineSync(dc->pg)) {
        goto failed;
    }

    dc->reader = ngx_http_session_db_prepare_read;

    if (ngx_http_session_db_conn_busy(dc) != NGX_OK) {
        ngx_http_session_db_conn_fail(dc);
        return 1;
    }

    dc->preparing = 1;

    ngx_add_timer(&dc->timer, dc->timeout);

    return 1;

failed:

    ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                  ngx_http_session_db_message(PQerrorMessage(dc->pg)));

    ngx_http_session_db_conn_fail(dc);

    return 1;
}


/*
 * dc's reader while its statements are prepared: the first error among
 * the answers is kept (the PREPAREs after it are skipped), and at the
 * Sync it goes to the owner as a statement's answer would.  The one
 * answer with a row is the count of the names the server holds as the
 * module gave them (SQL_PREPARED_NAMES).
 */

static void
ngx_http_session_db_prepare_read(ngx_http_session_db_conn_t *dc)
{
    PGresult  *res;

    while (!PQisBusy(dc->pg)) {
        res = PQgetResult(dc->pg);

        if (res == NULL) {
            if (PQstatus(dc->pg) == CONNECTION_BAD) {
                /* libpq gave up on it: NULL from here on, never a Sync */
                break;
            }

            /* the end of one PREPARE's answer */
            continue;
        }

        if (PQresultStatus(res) == PGRES_TUPLES_OK) {
            dc->renamed = (PQntuples(res) == 1 && PQnfields(res) == 1
                           && ngx_strcmp(PQgetvalue(res, 0, 0), "0") == 0);
            PQclear(res);
            continue;
        }

        if (PQresultStatus(res) != PGRES_PIPELINE_SYNC) {
            ngx_http_session_db_conn_keep(dc, res);
            continue;
        }

        PQclear(res);

        if (!PQexitPipelineMode(dc->pg)) {
            ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                          "session db: leaving pipeline mode failed: %s",
                          ngx_http_session_db_message(
                              PQerrorMessage(dc->pg)));
            ngx_http_session_db_conn_fail(dc);
            return;
        }

        dc->reader = NULL;

        res = dc->result;
        dc->result = NULL;

        ngx_http_session_db_conn_answered(dc, res);
        return;
    }

    if (PQstatus(dc->pg) == CONNECTION_BAD) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: connection lost: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_conn_fail(dc);
    }
}


void
ngx_http_session_db_prepared(ngx_http_session_db_conn_t *dc,
    PGresult *res, const char *what, ngx_uint_t *said)
{
    dc->preparing = 0;

    if (res == NULL || PQresultStatus(res) != PGRES_COMMAND_OK) {
        dc->prepared = 0;

        ngx_log_error(NGX_LOG_WARN, dc->log, 0,
                      "session db: preparing the %s failed, they are sent "
                      "as text on this connection", what);
        return;
    }

    /* asked, and not renamed: they were on one server connection only */

    dc->prepared = (!dc->asking || dc->renamed);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: the %s are %s", what,
                   dc->prepared ? "prepared"
                                : "not kept by the pooler, sent as text");

    if (!dc->asking || said == NULL || *said) {
        return;
    }

    *said = 1;

    if (dc->prepared) {
        ngx_log_error(NGX_LOG_NOTICE, dc->log, 0,
                      "session db: the pooler keeps prepared statements "
                      "for its clients, the %s are prepared", what);
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, dc->log, 0,
                  "session db: the pooler passes prepared statements on "
                  "to one server connection and keeps none for its "
                  "clients (PgBouncer before 1.21, or "
                  "max_prepared_statements = 0), the %s are sent as text",
                  what);
}
