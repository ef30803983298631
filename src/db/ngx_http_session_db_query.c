/*
 * Queries: the API the rest of the module uses (create, parameters, run,
 * the result to the query's handler), the worker's pool of connections
 * (db_conn.c) and the queue of the queries that wait for one, their
 * timeouts, and pipelines of waiting reads (db_batch.c).
 *
 * Each worker owns session_db_connections connections.  The pool is the
 * owner of each: it sets the handlers through which a connection tells
 * that it is ready, answered, idle again after its check, or failed.
 *
 * Over 1,000 lines, and kept whole: the queue and the handlers of the
 * pool's connections are one loop (a connection that answers or fails
 * dispatches the queue, dispatching sends on a connection); cut in two,
 * each half would call the other.
 */

#include "ngx_http_session_db.h"
#include "ngx_http_session_db_batch.h"
#include "ngx_http_session_db_conn.h"
#include "ngx_http_session_db_prepare.h"
#include "ngx_http_session_db_stmt.h"
#include "ngx_http_session_backoff.h"
#include "ngx_http_session_stats.h"


/*
 * libpq grows a connection's input and output buffers to the largest
 * message it has read or written and never shrinks them: a connection
 * that has carried a message this large is closed and opened again once
 * the query is over, so that a worker does not keep megabytes per
 * connection after a few large uploads or downloads.
 */
#define NGX_HTTP_SESSION_DB_RECYCLE_SIZE    (4 * 1024 * 1024)

/* what a connection runs once its query's request went away, for the log */
#define NGX_HTTP_SESSION_DB_QUERY_ABANDONED                                   \
    "query of a request that went away"


typedef struct {
    /*
     * The statements ngx_session_<n>, prepared once per connection where
     * they can be (ngx_http_session_db_prepare())
     */
    ngx_http_session_db_prepare_t  *prepare;
    ngx_http_session_db_conn_t     *conns;
    ngx_uint_t                      nconns;
    /*
     * Queries that wait for a connection, each until session_db_timeout
     * at most.  Not capped: an entry is the query object its request (or
     * timer task) holds anyway, linked in place, so the queue is bounded
     * by the worker's connections (a request waits for one query at a
     * time) plus one read per long-polled session.
     */
    ngx_queue_t                  waiting;
    /*
     * Queries with q->first (a long poll's shared read): they and those
     * of "waiting" take turns for a free connection, so that a read that
     * many polls wait for is not held behind a burst of writes, and
     * writes are not held behind reads either.
     */
    ngx_queue_t                  first;
    ngx_uint_t                   turn;
    ngx_uint_t                   nwaiting;
    /* session_db_batch */
    ngx_uint_t                   batch;
    /* session_db_pooler */
    ngx_uint_t                   pooler;
    ngx_msec_t                   timeout;
    /* the last early try, see ngx_http_session_db_conn_early() */
    ngx_msec_t                   early;
    /*
     * Posted when a read finds a connection idle: the reads of one turn
     * of the event loop go out together when the turn is over
     */
    ngx_event_t                  post;

    /* whether a pooler keeps the statements, said once per worker */
    ngx_uint_t                   said_prepared;
    /* what ngx_http_session_db_pool_ready() warns of, once per worker */
    unsigned                     said_pooled:1;
    unsigned                     said_timeout:1;
} ngx_http_session_db_pool_t;


static void ngx_http_session_db_pool_ready(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_pool_probed(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_pool_answer(ngx_http_session_db_conn_t *dc,
    PGresult *res);
static void ngx_http_session_db_pool_checked(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_pool_failed(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_read_batch(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_batch_answer(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, PGresult *res);
static void ngx_http_session_db_deliver(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, PGresult *res);
static void ngx_http_session_db_recycle(ngx_http_session_db_conn_t *dc);
static ngx_uint_t ngx_http_session_db_large(ngx_http_session_db_query_t *q,
    PGresult *res);
static size_t ngx_http_session_db_row_size(PGresult *res);
static ngx_int_t ngx_http_session_db_send_query(
    ngx_http_session_db_conn_t *dc, ngx_http_session_db_query_t *q);
static ngx_uint_t ngx_http_session_db_gather(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_http_session_db_query_t **batch,
    ngx_uint_t n);
static void ngx_http_session_db_enqueue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_uint_t head);
static void ngx_http_session_db_dequeue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q);
static void ngx_http_session_db_detach_query(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, ngx_msec_t deadline);
static void ngx_http_session_db_rearm(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_dispatch(void);
static void ngx_http_session_db_posted(ngx_event_t *ev);
static ngx_queue_t *ngx_http_session_db_next(
    ngx_http_session_db_pool_t *pool);
static void ngx_http_session_db_query_timeout(ngx_event_t *ev);
static void ngx_http_session_db_query_cleanup(void *data);
static void ngx_http_session_db_complete(ngx_http_session_db_query_t *q,
    PGresult *res);


static ngx_http_session_db_pool_t  *ngx_http_session_db_pool;


ngx_int_t
ngx_http_session_db_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_uint_t                   i;
    ngx_http_session_db_pool_t  *pool;
    ngx_http_session_db_conn_t  *dc;

    pool = ngx_pcalloc(cycle->pool, sizeof(ngx_http_session_db_pool_t));
    if (pool == NULL) {
        return NGX_ERROR;
    }

    pool->nconns = smcf->db_connections;
    pool->conns = ngx_http_session_db_conn_create(cycle, smcf, pool->nconns,
                                            "nginx session pool",
                                            ngx_http_session_db_pool_ready,
                                            ngx_http_session_db_pool_answer,
                                            ngx_http_session_db_pool_checked,
                                            ngx_http_session_db_pool_failed);
    if (pool->conns == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_init(&pool->waiting);
    ngx_queue_init(&pool->first);
    pool->timeout = smcf->db_timeout;
    pool->batch = smcf->db_batch;
    pool->pooler = smcf->db_pooler;
    pool->early = ngx_current_msec - NGX_HTTP_SESSION_BACKOFF_EARLY;
    pool->post.handler = ngx_http_session_db_posted;
    pool->post.data = pool;
    pool->post.log = cycle->log;

    ngx_http_session_db_pool = pool;

    /*
     * Through a pooler in transaction mode nothing of a session lasts
     * beyond its transaction, unless the pooler keeps prepared statements
     * for its clients: a connection finds out when it prepares
     * (db_prepare.c, decisions.md (pg)), and where it does not, each
     * statement goes with its text, unnamed (Parse, Bind and Execute in
     * one round trip, planned every time)
     */

    pool->prepare = ngx_http_session_db_stmt_init(cycle);
    if (pool->prepare == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < pool->nconns; i++) {
        dc = &pool->conns[i];

        if (pool->batch > 1) {
            dc->batch = ngx_pcalloc(cycle->pool, pool->batch
                                    * sizeof(ngx_http_session_db_query_t *));
            if (dc->batch == NULL) {
                return NGX_ERROR;
            }

            dc->deadlines = ngx_pcalloc(cycle->pool,
                                        pool->batch * sizeof(ngx_msec_t));
            if (dc->deadlines == NULL) {
                return NGX_ERROR;
            }
        }

        ngx_http_session_db_conn_add(dc);
        ngx_http_session_db_conn_open(dc);
    }

    return NGX_OK;
}


void
ngx_http_session_db_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                   i;
    ngx_http_session_db_pool_t  *pool;

    pool = ngx_http_session_db_pool;
    if (pool == NULL) {
        return;
    }

    if (pool->post.posted) {
        ngx_delete_posted_event(&pool->post);
    }

    for (i = 0; i < pool->nconns; i++) {
        ngx_http_session_db_conn_close(&pool->conns[i]);
    }

    /* the queries still waiting leave with the worker */
    ngx_http_session_gauge(db_waiting, - (ngx_atomic_int_t) pool->nwaiting);

    ngx_http_session_db_pool = NULL;
}


static void
ngx_http_session_db_pool_ready(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_pool_t  *pool;

    pool = ngx_http_session_db_pool;

    if (pool) {
        ngx_http_session_db_pool_probed(pool, dc);
    }

    /* the statements first: queries wait for them like for a busy one */

    if (pool
        && ngx_http_session_db_prepare(dc, pool->prepare, pool->pooler))
    {
        return;
    }

    ngx_http_session_db_dispatch();
}


/*
 * What the probe found (db_conn.c) that the operator should know: once
 * per worker each.  A pooler that session_db_pooler does not name gets
 * no PREPARE (the statements would be on one server connection and the
 * queries on any); the pool still sends startup options to it and runs
 * LISTEN through session_db, which holds only if it pools sessions.
 * Behind a pooler that session_db_pooler names the module sends no
 * statement_timeout: the server's own is the one that ends a statement
 * the module gave up on.
 */

static void
ngx_http_session_db_pool_probed(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_conn_t *dc)
{
    if (dc->pooled && pool->pooler == NGX_HTTP_SESSION_POOLER_OFF
        && !pool->said_pooled)
    {
        pool->said_pooled = 1;

        ngx_log_error(NGX_LOG_WARN, dc->log, 0,
                      "session db: a connection pooler stands between "
                      "the module and PostgreSQL (the server process "
                      "differs from the connection's), the statements "
                      "are not prepared on its connections; if it pools "
                      "transactions, set \"session_db_pooler "
                      "transaction\" and \"session_db_listen\"");
    }

    if (pool->pooler != NGX_HTTP_SESSION_POOLER_OFF
        && !pool->said_timeout
        && (dc->server_timeout == 0
            || dc->server_timeout > (ngx_int_t) pool->timeout))
    {
        pool->said_timeout = 1;

        ngx_log_error(NGX_LOG_WARN, dc->log, 0,
                      "session db: statement_timeout is %i ms on the "
                      "server behind the pooler (0: none), a statement "
                      "given up on after session_db_timeout (%M ms) runs "
                      "on; set it for the role (ALTER ROLE ... SET "
                      "statement_timeout) or in the pooler",
                      dc->server_timeout, pool->timeout);
    }
}


/* the answer to what the pool sent alone: a query, or the PREPARE */

static void
ngx_http_session_db_pool_answer(ngx_http_session_db_conn_t *dc,
    PGresult *res)
{
    ngx_http_session_db_query_t  *q;

    q = dc->query;
    dc->query = NULL;

    /*
     * with or without q: a large answer that nobody reads any more grew
     * libpq's buffers all the same
     */

    if (res && PQstatus(dc->pg) != CONNECTION_BAD
        && !ngx_http_session_db_unavailable(res)
        && (dc->sent >= NGX_HTTP_SESSION_DB_RECYCLE_SIZE
            || ngx_http_session_db_large(q, res)))
    {
        /* res lives on without the connection */
        ngx_http_session_db_recycle(dc);
    }

    dc->sent = 0;

    if (q == NULL) {
        if (dc->preparing) {
            ngx_http_session_db_prepared(dc, res, "statements",
                        ngx_http_session_db_pool
                        ? &ngx_http_session_db_pool->said_prepared : NULL);
        }

        /* the PREPARE, or a query that went away meanwhile */
        ngx_http_session_db_conn_clear(dc, res);

        ngx_http_session_db_dispatch();

        return;
    }

    if (res && PQstatus(dc->pg) != CONNECTION_BAD
        && ngx_http_session_db_conn_lost(dc, res))
    {
        /* it did not run: it waits again, first in line, to go as text */
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                       "session db: a statement the server did not have "
                       "goes again, as text");
        PQclear(res);

        q->conn = NULL;
        ngx_http_session_db_enqueue(ngx_http_session_db_pool, q, 1);

        ngx_http_session_db_dispatch();

        return;
    }

    if ((res == NULL || ngx_http_session_db_unavailable(res))
        && PQstatus(dc->pg) == CONNECTION_BAD)
    {
        /* closed before the handler runs: it may ask for another query */
        ngx_http_session_db_conn_fail(dc);
        ngx_http_session_db_deliver(dc, q, res);
        return;
    }

    ngx_http_session_db_deliver(dc, q, res);

    ngx_http_session_db_dispatch();
}


static void
ngx_http_session_db_pool_checked(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_dispatch();
}


/*
 * dc failed and is closed: its query, and the reads of its pipeline that
 * were not answered yet, get no answer (503)
 */

static void
ngx_http_session_db_pool_failed(ngx_http_session_db_conn_t *dc)
{
    ngx_uint_t                    i, from, to;
    ngx_http_session_db_query_t  *q;

    q = dc->query;
    dc->query = NULL;

    from = dc->nread;
    to = dc->nbatch;

    dc->nbatch = 0;
    dc->nread = 0;
    dc->recycle = 0;

    if (q) {
        ngx_http_session_db_complete(q, NULL);
    }

    for (i = from; i < to; i++) {
        q = dc->batch[i];
        dc->batch[i] = NULL;

        if (q) {
            ngx_http_session_db_complete(q, NULL);
        }
    }

    /* waiting queries may have no connection left to wait for */
    ngx_http_session_db_dispatch();
}


/* dc's reader while a pipeline of the pool is under way */

static void
ngx_http_session_db_read_batch(ngx_http_session_db_conn_t *dc)
{
    PGresult                     *res;
    ngx_int_t                     rc;
    ngx_http_session_db_query_t  *q;

    for ( ;; ) {
        rc = ngx_http_session_db_batch_read(dc, &q, &res);

        if (rc == NGX_AGAIN || rc == NGX_ERROR) {
            return;
        }

        if (rc == NGX_DONE) {
            dc->reader = NULL;
            break;
        }

        if (q == NULL) {
            /* a read that went away is answered: its deadline is over */
            ngx_http_session_db_rearm(dc);
        }

        ngx_http_session_db_batch_answer(dc, q, res);

        if (dc->state != NGX_HTTP_SESSION_DB_BUSY || dc->nbatch == 0) {
            /* the connection failed meanwhile */
            return;
        }
    }

    if (dc->recycle || dc->sent >= NGX_HTTP_SESSION_DB_RECYCLE_SIZE) {
        ngx_http_session_db_recycle(dc);
    }

    dc->sent = 0;
    dc->recycle = 0;

    ngx_http_session_db_dispatch();
}


static void
ngx_http_session_db_batch_answer(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, PGresult *res)
{
    if (res && (PQresultStatus(res) == PGRES_PIPELINE_ABORTED
                || ngx_http_session_db_conn_lost(dc, res)))
    {
        /*
         * it did not run (skipped after an error, or sent by name to a
         * server that does not have the statement, which dc now sends as
         * text): it waits again, first in line
         */
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                       "session db: a read of a pipeline goes again: %s",
                       (PQresultStatus(res) == PGRES_PIPELINE_ABORTED)
                       ? "skipped after an error"
                       : "the server did not have its statement");
        PQclear(res);

        if (q) {
            q->conn = NULL;
            ngx_http_session_db_enqueue(ngx_http_session_db_pool, q, 1);
        }

        return;
    }

    if (res && ngx_http_session_db_large(q, res)) {
        dc->recycle = 1;
    }

    ngx_http_session_db_deliver(dc, q, res);
}


/*
 * res to q's handler: as it is, or NULL (503) when the database is not
 * there; res is freed unless the handler took it over.  With no q (its
 * request went away) res is only freed.
 */

static void
ngx_http_session_db_deliver(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_uint_t  keep;

    if (q == NULL) {
        if (res) {
            PQclear(res);
        }

        return;
    }

    if (res == NULL || ngx_http_session_db_unavailable(res)) {
        if (res) {
            ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: %s",
                          ngx_http_session_db_message(
                                                 PQresultErrorMessage(res)));
            PQclear(res);
        }

        ngx_http_session_db_complete(q, NULL);
        return;
    }

    keep = q->keep_result && !q->done;

    ngx_http_session_db_complete(q, res);

    if (!keep) {
        PQclear(res);
    }
}


/* a connection whose buffers grew past RECYCLE_SIZE: a new one */

static void
ngx_http_session_db_recycle(ngx_http_session_db_conn_t *dc)
{
    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: recycling a connection that sent %uz bytes",
                   dc->sent);

    ngx_http_session_db_conn_close(dc);
    ngx_http_session_db_conn_open(dc);
}


/*
 * Did libpq read a message of RECYCLE_SIZE or more for res?  Only a
 * query whose handler takes its result over (an image's bytes) can get
 * such a row; every other statement returns bounded columns, so its
 * rows are not measured (a list of 100 would cost 1,000 calls).  A
 * result whose query went away is measured: nobody says what it was.
 */

static ngx_uint_t
ngx_http_session_db_large(ngx_http_session_db_query_t *q, PGresult *res)
{
    if (q != NULL && !q->keep_result) {
        return 0;
    }

    return ngx_http_session_db_row_size(res)
           >= NGX_HTTP_SESSION_DB_RECYCLE_SIZE;
}


/* the bytes of the largest row: about the largest message libpq read */

static size_t
ngx_http_session_db_row_size(PGresult *res)
{
    int     i, j, nrows, nfields;
    size_t  size, max;

    nrows = PQntuples(res);
    nfields = PQnfields(res);
    max = 0;

    for (i = 0; i < nrows; i++) {
        size = 0;

        for (j = 0; j < nfields; j++) {
            size += PQgetlength(res, i, j);
        }

        if (size > max) {
            max = size;
        }
    }

    return max;
}


ngx_http_session_db_query_t *
ngx_http_session_db_query_create(ngx_http_request_t *r, const char *sql,
    ngx_http_session_db_handler_pt handler)
{
    ngx_http_session_db_query_t  *q;

    q = ngx_http_session_db_query_create_pool(r->pool, r->connection->log,
                                              sql, handler);
    if (q == NULL) {
        return NULL;
    }

    q->request = r;

    return q;
}


ngx_http_session_db_query_t *
ngx_http_session_db_query_stmt(ngx_http_request_t *r,
    ngx_http_session_stmt_e stmt, ngx_http_session_db_handler_pt handler)
{
    ngx_http_session_db_query_t  *q;

    q = ngx_http_session_db_query_create(r, ngx_http_session_db_stmt_sql(stmt),
                                         handler);
    if (q == NULL) {
        return NULL;
    }

    q->stmt = stmt;
    q->result_format = 1;

    return q;
}


ngx_http_session_db_query_t *
ngx_http_session_db_query_create_pool(ngx_pool_t *pool, ngx_log_t *log,
    const char *sql, ngx_http_session_db_handler_pt handler)
{
    ngx_pool_cleanup_t           *cln;
    ngx_http_session_db_query_t  *q;

    cln = ngx_pool_cleanup_add(pool, sizeof(ngx_http_session_db_query_t));
    if (cln == NULL) {
        return NULL;
    }

    q = cln->data;
    ngx_memzero(q, sizeof(ngx_http_session_db_query_t));

    cln->handler = ngx_http_session_db_query_cleanup;

    q->sql = sql;
    q->handler = handler;
    q->result_format = 0;
    q->log = log;

    q->timeout.handler = ngx_http_session_db_query_timeout;
    q->timeout.data = q;
    q->timeout.log = log;

    return q;
}


void
ngx_http_session_db_param(ngx_http_session_db_query_t *q, const void *value,
    size_t len, int binary)
{
    if (q->nparams == NGX_HTTP_SESSION_DB_MAX_PARAMS) {
        return;
    }

    q->values[q->nparams] = value;
    q->lengths[q->nparams] = (int) len;
    q->formats[q->nparams] = binary;
    q->nparams++;
}


ngx_int_t
ngx_http_session_db_query_run(ngx_http_session_db_query_t *q)
{
    ngx_uint_t                   i, alive;
    ngx_http_session_db_conn_t  *dc;
    ngx_http_session_db_pool_t  *pool;

    pool = ngx_http_session_db_pool;
    if (pool == NULL) {
        return NGX_DECLINED;
    }

    alive = 0;

    for (i = 0; i < pool->nconns; i++) {
        dc = &pool->conns[i];

        if (dc->state == NGX_HTTP_SESSION_DB_IDLE) {
            ngx_add_timer(&q->timeout, pool->timeout);

            /*
             * A read waits for the end of this turn of the event loop,
             * which may bring more to send along with it
             */

            if (pool->batch > 1 && ngx_http_session_db_batchable(q)) {
                ngx_http_session_db_enqueue(pool, q, 0);

                if (!pool->post.posted) {
                    ngx_post_event(&pool->post, &ngx_posted_events);
                }

                return NGX_OK;
            }

            if (ngx_http_session_db_send_query(dc, q) == NGX_OK) {
                return NGX_OK;
            }

            ngx_del_timer(&q->timeout);
            continue;
        }

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED) {
            alive++;
        }
    }

    /*
     * No connection that could answer soon: do not make the client wait,
     * unless one may try to connect now.  Otherwise wait, however many
     * wait: a burst is served in turn.
     */

    /* every connection waits out its backoff: one may try now, (ka) */

    if (alive == 0
        && !ngx_http_session_db_conn_early(pool->conns, pool->nconns,
                                           &pool->early, "a query"))
    {
        ngx_http_session_stat(db_failures, 1);
        return NGX_DECLINED;
    }

    ngx_http_session_db_enqueue(pool, q, 0);

    ngx_add_timer(&q->timeout, pool->timeout);

    return NGX_OK;
}


void
ngx_http_session_db_query_again(ngx_http_session_db_query_t *q)
{
    /* complete() has stopped its timer and unlinked it */
    q->done = 0;
    q->conn = NULL;
}


static ngx_int_t
ngx_http_session_db_send_query(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q)
{
    if (ngx_http_session_db_stmt_send(dc, q) != NGX_OK) {
        ngx_http_session_db_conn_fail(dc);
        return NGX_ERROR;
    }

    dc->query = q;
    q->conn = dc;

    if (ngx_http_session_db_conn_busy(dc) != NGX_OK) {
        dc->query = NULL;
        q->conn = NULL;
        ngx_http_session_db_conn_fail(dc);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * Reads that wait for a connection go to PostgreSQL together (see
 * db_batch.c): q (a read, out of the queues already) and up to n - 1
 * more waiting reads, oldest first, into batch; writes keep their places
 */

static ngx_uint_t
ngx_http_session_db_gather(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_http_session_db_query_t **batch,
    ngx_uint_t n)
{
    ngx_uint_t                    k, i;
    ngx_queue_t                  *queues[2], *x, *next;
    ngx_http_session_db_query_t  *w;

    batch[0] = q;
    k = 1;

    queues[0] = &pool->waiting;
    queues[1] = &pool->first;

    for (i = 0; i < 2 && k < n; i++) {

        for (x = ngx_queue_head(queues[i]);
             x != ngx_queue_sentinel(queues[i]) && k < n;
             x = next)
        {
            next = ngx_queue_next(x);
            w = ngx_queue_data(x, ngx_http_session_db_query_t, queue);

            if (!ngx_http_session_db_batchable(w)) {
                continue;
            }

            ngx_http_session_db_dequeue(pool, w);
            batch[k++] = w;
        }
    }

    return k;
}


static void
ngx_http_session_db_enqueue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_uint_t head)
{
    ngx_queue_t  *queue;

    queue = q->first ? &pool->first : &pool->waiting;

    if (head) {
        ngx_queue_insert_head(queue, &q->queue);

    } else {
        ngx_queue_insert_tail(queue, &q->queue);
    }

    pool->nwaiting++;
    q->queued = 1;

    ngx_http_session_gauge(db_waiting, 1);
}


/*
 * The connection forgets q, whose answer nobody will read; a read of a
 * pipeline leaves q's deadline in its slot
 */

static void
ngx_http_session_db_detach_query(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, ngx_msec_t deadline)
{
    ngx_uint_t  i;

    if (dc->query == q) {
        dc->query = NULL;
    }

    for (i = dc->nread; i < dc->nbatch; i++) {
        if (dc->batch[i] == q) {
            dc->batch[i] = NULL;
            dc->deadlines[i] = deadline;
        }
    }

    q->conn = NULL;
}


/*
 * A read of dc's pipeline that went away was answered: dc's timer goes to
 * the earliest deadline of those that went away and are not answered
 * yet, and stops when none is left, as their own timers would have
 * (decision (kd)); the reads that stayed have timers of their own
 */

static void
ngx_http_session_db_rearm(ngx_http_session_db_conn_t *dc)
{
    ngx_uint_t  i, found;
    ngx_msec_t  deadline;

    found = 0;
    deadline = 0;

    for (i = dc->nread; i < dc->nbatch; i++) {
        if (dc->batch[i] != NULL) {
            continue;
        }

        if (!found || (ngx_msec_int_t) (dc->deadlines[i] - deadline) < 0) {
            deadline = dc->deadlines[i];
            found = 1;
        }
    }

    if (found) {
        ngx_http_session_db_conn_abandon(dc,
                                         NGX_HTTP_SESSION_DB_QUERY_ABANDONED,
                                         deadline);
        return;
    }

    if (dc->timer.timer_set) {
        ngx_del_timer(&dc->timer);
    }

    dc->abandoned = NULL;
}


static void
ngx_http_session_db_dequeue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q)
{
    ngx_queue_remove(&q->queue);
    pool->nwaiting--;
    q->queued = 0;

    ngx_http_session_gauge(db_waiting, -1);
}


static void
ngx_http_session_db_dispatch(void)
{
    ngx_uint_t                    i, n, alive;
    ngx_queue_t                  *head;
    ngx_http_session_db_query_t  *batch[NGX_HTTP_SESSION_DB_BATCH_MAX];
    ngx_http_session_db_conn_t   *dc;
    ngx_http_session_db_pool_t   *pool;
    ngx_http_session_db_query_t  *q;

    pool = ngx_http_session_db_pool;
    if (pool == NULL) {
        return;
    }

    alive = 0;

    for (i = 0; i < pool->nconns && pool->nwaiting; i++) {
        dc = &pool->conns[i];

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED) {
            alive++;
        }

        if (dc->state != NGX_HTTP_SESSION_DB_IDLE) {
            continue;
        }

        head = ngx_http_session_db_next(pool);
        q = ngx_queue_data(head, ngx_http_session_db_query_t, queue);

        ngx_http_session_db_dequeue(pool, q);

        /*
         * A read takes the other waiting reads along, up to
         * session_db_batch: a pipeline of n wakes the server and the
         * worker once instead of n times, which is what a loaded machine
         * runs short of (decision (nb)); the next idle connection takes
         * what is left
         */

        n = 1;

        if (pool->batch > 1 && pool->nwaiting
            && ngx_http_session_db_batchable(q))
        {
            n = ngx_min(pool->nwaiting + 1, pool->batch);
        }

        if (n > 1) {
            n = ngx_http_session_db_gather(pool, q, batch, n);
        }

        if (n > 1) {
            if (ngx_http_session_db_batch_send(dc, batch, n) == NGX_OK) {
                dc->reader = ngx_http_session_db_read_batch;
            }

            continue;
        }

        if (ngx_http_session_db_send_query(dc, q) != NGX_OK) {
            ngx_http_session_db_complete(q, NULL);
        }
    }

    if (alive || pool->nwaiting == 0) {
        return;
    }

    /* every connection is down: fail the waiting queries now */

    while (pool->nwaiting) {
        head = ngx_http_session_db_next(pool);
        q = ngx_queue_data(head, ngx_http_session_db_query_t, queue);

        ngx_http_session_db_dequeue(pool, q);

        ngx_http_session_db_complete(q, NULL);
    }
}


static void
ngx_http_session_db_posted(ngx_event_t *ev)
{
    ngx_http_session_db_dispatch();
}


/* the next waiting query: the two queues take turns while both wait */

static ngx_queue_t *
ngx_http_session_db_next(ngx_http_session_db_pool_t *pool)
{
    if (ngx_queue_empty(&pool->first)) {
        return ngx_queue_head(&pool->waiting);
    }

    if (ngx_queue_empty(&pool->waiting)) {
        return ngx_queue_head(&pool->first);
    }

    pool->turn ^= 1;

    return ngx_queue_head(pool->turn ? &pool->first : &pool->waiting);
}


static void
ngx_http_session_db_query_timeout(ngx_event_t *ev)
{
    ngx_http_session_db_conn_t   *dc;
    ngx_http_session_db_query_t  *q;

    q = ev->data;

    ngx_log_error(NGX_LOG_ERR, ev->log, 0, "session db: query timed out");

    if (q->queued) {
        ngx_http_session_db_dequeue(ngx_http_session_db_pool, q);
    }

    dc = q->conn;

    if (dc) {
        /*
         * The connection is stuck in this query: drop it and connect again
         * after the backoff, as after any failure, so that an overloaded
         * server does not get a storm of new connections.  The other reads
         * of its pipeline, if any, fail with it.
         */
        ngx_http_session_db_detach_query(dc, q, ngx_current_msec);
        ngx_http_session_db_conn_fail(dc);
    }

    ngx_http_session_db_complete(q, NULL);
}


static void
ngx_http_session_db_query_cleanup(void *data)
{
    ngx_http_session_db_query_t  *q = data;

    ngx_msec_t                   deadline;
    ngx_http_session_db_conn_t  *dc;

    deadline = q->timeout.timer_set ? q->timeout.timer.key
                                    : ngx_current_msec;

    if (q->timeout.timer_set) {
        ngx_del_timer(&q->timeout);
    }

    if (q->queued) {
        ngx_http_session_db_dequeue(ngx_http_session_db_pool, q);
    }

    q->done = 1;

    dc = q->conn;

    if (dc == NULL) {
        return;
    }

    /*
     * A running query finishes on its own and its result is dropped, but
     * its deadline stays: nobody else may bound the connection (its own
     * timer is off while it is busy, and the other reads of a pipeline
     * may have gone too), and a server that never answers would keep it
     * busy until TCP gives up, minutes or for good.  Past the deadline
     * the connection is closed and opened again, as when the query times
     * out (decision (kd)).  An earlier deadline of another such query of
     * the pipeline stands; once that one is answered, the timer moves on
     * to the next (ngx_http_session_db_rearm()).
     */

    ngx_http_session_db_detach_query(dc, q, deadline);

    if (dc->state != NGX_HTTP_SESSION_DB_BUSY
        || (dc->timer.timer_set
            && (ngx_msec_int_t) (dc->timer.timer.key - deadline) <= 0))
    {
        return;
    }

    ngx_http_session_db_conn_abandon(dc, NGX_HTTP_SESSION_DB_QUERY_ABANDONED,
                                     deadline);
}


static void
ngx_http_session_db_complete(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_connection_t  *c;

    if (q->done) {
        return;
    }

    q->done = 1;
    q->conn = NULL;

    if (res) {
        ngx_http_session_stat(db_queries, 1);

    } else {
        ngx_http_session_stat(db_failures, 1);
    }

    if (q->timeout.timer_set) {
        ngx_del_timer(&q->timeout);
    }

    if (q->request == NULL) {
        q->handler(q, res);
        return;
    }

    c = q->request->connection;

    q->handler(q, res);

    ngx_http_run_posted_requests(c);
}


ngx_int_t
ngx_http_session_db_result_ok(ngx_http_session_db_query_t *q, PGresult *res)
{
    ExecStatusType  st;

    st = PQresultStatus(res);

    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_ERR, q->log, 0,
                  "session db: query failed: %s",
                  ngx_http_session_db_message(PQresultErrorMessage(res)));

    return NGX_ERROR;
}
