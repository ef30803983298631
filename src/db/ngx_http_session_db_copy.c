/*
 * Streamed uploads: a COPY ... FROM STDIN inside a transaction, on
 * connections of their own, session_image_upload_connections per worker,
 * opened when the first upload needs one.  libpq allows no COPY in
 * pipeline mode, and a transaction of several statements holds its
 * connection until COMMIT: the pool's connections, shared a statement at
 * a time by every request, stay with the other queries.
 *
 * A copy waits for a free connection (session_db_timeout from the last
 * move of the queue), then, in four round trips: BEGIN and before under
 * one Sync (pipeline mode), whose handler decides to go on or to roll
 * back; the COPY (its start, then its end), fed a piece at a time: the
 * next piece is read only once libpq has sent the previous one, so that
 * neither the worker nor libpq holds more than a piece; after and COMMIT
 * under one Sync.  The statements are prepared once per connection.
 * Each step is bounded by session_db_timeout.  A failure closes the
 * connection (the server rolls the transaction back) and the connection
 * is opened again.
 *
 * The queue of copies waiting for a connection takes keys in turn
 * (decision (yk)), one session's copies one at a time (decision (yl)),
 * and waits for a connection that is about to connect again (decision
 * (ke)).
 *
 * About 1,500 lines on purpose: a copy's steps, its connection's handlers
 * and the queue are one state machine (an answer moves the copy on, the
 * end of a copy hands the connection to the next one waiting, a failed
 * start puts the copy back in line); each part of a split would call the
 * others, and share the copies' state.
 */

#include "ngx_http_session_db.h"
#include "ngx_http_session_db_conn.h"
#include "ngx_http_session_db_prepare.h"
#include "ngx_http_session_backoff.h"
#include "ngx_http_session_stats.h"


/* pieces handed to libpq in one turn of the event loop, at most */
#define NGX_HTTP_SESSION_DB_COPY_TURN  16

/* what an upload connection runs once its request went away, for the log */
#define NGX_HTTP_SESSION_DB_COPY_ABANDONED                                    \
    "ROLLBACK of an upload whose request went away"

/* a copy that failed in go(): its handler runs from the posted event */
#define NGX_HTTP_SESSION_DB_COPY_FAILED  (NGX_HTTP_SESSION_DB_COPY_DONE + 1)


typedef struct {
    /*
     * The statements ngx_upload_<n>, prepared once per connection where
     * they can be (ngx_http_session_db_prepare())
     */
    ngx_http_session_db_prepare_t  *prepare;
    ngx_http_session_db_conn_t     *conns;
    ngx_uint_t                      nconns;
    /* the connections opened so far: they open as uploads need them */
    ngx_uint_t                   opened;
    /*
     * copies that wait for a connection, each until its timeout, in the
     * order of their turns; the turn of the copy that began last
     */
    ngx_queue_t                  waiting;
    uint64_t                     turn;
    ngx_msec_t                   timeout;
    /* session_db_pooler */
    ngx_uint_t                   pooler;
    /* the last early try, see ngx_http_session_db_copy_soon() */
    ngx_msec_t                   early;
    /* whether a pooler keeps the statements, said once per worker */
    ngx_uint_t                   said_prepared;
} ngx_http_session_db_copies_t;


static ngx_int_t ngx_http_session_db_copy_start(
    ngx_http_session_db_copy_t *cp, ngx_http_session_db_conn_t *dc);
static ngx_int_t ngx_http_session_db_copy_pair(ngx_http_session_db_copy_t *cp,
    ngx_http_session_db_query_t *q, ngx_uint_t begin);
static ngx_int_t ngx_http_session_db_copy_send(ngx_http_session_db_copy_t *cp,
    ngx_http_session_db_query_t *q);
static void ngx_http_session_db_copy_pipe(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_copy_paired(ngx_http_session_db_copy_t *cp);
static void ngx_http_session_db_copy_ready(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_copy_checked(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_copy_answer(ngx_http_session_db_conn_t *dc,
    PGresult *res);
static void ngx_http_session_db_copy_failed(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_copy_reader(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_copy_drained(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_copy_pump(ngx_http_session_db_copy_t *cp);
static void ngx_http_session_db_copy_resume(ngx_event_t *ev);
static void ngx_http_session_db_copy_fail(ngx_http_session_db_copy_t *cp,
    PGresult *res, ngx_uint_t abort);
static void ngx_http_session_db_copy_release(ngx_http_session_db_copy_t *cp);
static void ngx_http_session_db_copy_lost(ngx_http_session_db_copy_t *cp);
static void ngx_http_session_db_copy_again(ngx_http_session_db_copy_t *cp);
static void ngx_http_session_db_copy_turn(ngx_http_session_db_copies_t *copies,
    ngx_http_session_db_copy_t *cp);
static void ngx_http_session_db_copy_wait(ngx_http_session_db_copies_t *copies,
    ngx_http_session_db_copy_t *cp, ngx_uint_t first);
static ngx_uint_t ngx_http_session_db_copy_held(
    ngx_http_session_db_copies_t *copies, ngx_http_session_db_copy_t *cp);
static ngx_http_session_db_copy_t *ngx_http_session_db_copy_next(
    ngx_http_session_db_copies_t *copies);
static ngx_uint_t ngx_http_session_db_copy_open(
    ngx_http_session_db_copies_t *copies);
static ngx_uint_t ngx_http_session_db_copy_soon(
    ngx_http_session_db_copies_t *copies, ngx_uint_t early);
static void ngx_http_session_db_copy_dispatch(void);
static void ngx_http_session_db_copy_timeout(ngx_event_t *ev);
static void ngx_http_session_db_copy_cleanup(void *data);


static ngx_http_session_db_copies_t  *ngx_http_session_db_copies;

/* the statements of the copies' owners, prepared as ngx_upload_<n + 1> */
static const char  *ngx_http_session_db_copy_stmts[] = {
    NGX_HTTP_SESSION_SQL_IMAGE_STREAM_BEGIN,
    NGX_HTTP_SESSION_SQL_IMAGE_STREAM_BEGIN_KEYED,
    NGX_HTTP_SESSION_SQL_IMAGE_STREAM_END,
    NGX_HTTP_SESSION_SQL_IMAGE_STREAM_END_KEYED
};

#define NGX_HTTP_SESSION_DB_COPY_NSTMTS                                       \
    (sizeof(ngx_http_session_db_copy_stmts) / sizeof(const char *))


ngx_int_t
ngx_http_session_db_copy_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_session_db_copies_t  *copies;

    copies = ngx_pcalloc(cycle->pool, sizeof(ngx_http_session_db_copies_t));
    if (copies == NULL) {
        return NGX_ERROR;
    }

    copies->nconns = smcf->image_upload_connections;
    copies->conns = ngx_http_session_db_conn_create(cycle, smcf,
                                            copies->nconns,
                                            "nginx session upload",
                                            ngx_http_session_db_copy_ready,
                                            ngx_http_session_db_copy_answer,
                                            ngx_http_session_db_copy_checked,
                                            ngx_http_session_db_copy_failed);
    if (copies->conns == NULL) {
        return NGX_ERROR;
    }

    /*
     * As the pool's (decisions (pa), (pc), (pg)): through a pooler that
     * pools transactions the statements are prepared only where it keeps
     * them for its clients, else each goes with its text; a streamed
     * upload's transaction keeps its server connection from BEGIN to
     * COMMIT there too
     */

    copies->pooler = smcf->db_pooler;
    copies->prepare = ngx_http_session_db_prepare_create(cycle, "ngx_upload_",
                                        ngx_http_session_db_copy_stmts,
                                        NGX_HTTP_SESSION_DB_COPY_NSTMTS);
    if (copies->prepare == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_init(&copies->waiting);
    copies->timeout = smcf->db_timeout;
    copies->early = ngx_current_msec - NGX_HTTP_SESSION_BACKOFF_EARLY;

    ngx_http_session_db_copies = copies;

    return NGX_OK;
}


void
ngx_http_session_db_copy_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                     i;
    ngx_http_session_db_copies_t  *copies;

    copies = ngx_http_session_db_copies;
    if (copies == NULL) {
        return;
    }

    for (i = 0; i < copies->opened; i++) {
        ngx_http_session_db_conn_close(&copies->conns[i]);
    }

    ngx_http_session_db_copies = NULL;
}


ngx_http_session_db_copy_t *
ngx_http_session_db_copy_create(ngx_http_request_t *r, size_t size)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_session_db_copy_t  *cp;

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_http_session_db_copy_t));
    if (cln == NULL) {
        return NULL;
    }

    cp = cln->data;
    ngx_memzero(cp, sizeof(ngx_http_session_db_copy_t));

    cln->handler = ngx_http_session_db_copy_cleanup;

    cp->request = r;
    cp->log = r->connection->log;
    cp->size = size;

    cp->timeout.handler = ngx_http_session_db_copy_timeout;
    cp->timeout.data = cp;
    cp->timeout.log = cp->log;

    cp->resume.handler = ngx_http_session_db_copy_resume;
    cp->resume.data = cp;
    cp->resume.log = cp->log;

    return cp;
}


/* one more connection while there is room; whether it is alive */

static ngx_uint_t
ngx_http_session_db_copy_open(ngx_http_session_db_copies_t *copies)
{
    ngx_http_session_db_conn_t  *dc;

    if (copies->opened == copies->nconns) {
        return 0;
    }

    dc = &copies->conns[copies->opened++];

    ngx_http_session_db_conn_add(dc);
    ngx_http_session_db_conn_open(dc);

    return dc->state != NGX_HTTP_SESSION_DB_CLOSED;
}


ngx_int_t
ngx_http_session_db_copy_run(ngx_http_session_db_copy_t *cp)
{
    ngx_uint_t                     i, alive, held;
    ngx_http_session_db_conn_t    *dc;
    ngx_http_session_db_copies_t  *copies;

    copies = ngx_http_session_db_copies;
    if (copies == NULL) {
        return NGX_DECLINED;
    }

    ngx_http_session_db_copy_turn(copies, cp);

    held = ngx_http_session_db_copy_held(copies, cp);
    alive = 0;

    for (i = 0; i < copies->opened; i++) {
        dc = &copies->conns[i];

        if (!held
            && dc->state == NGX_HTTP_SESSION_DB_IDLE && dc->data == NULL
            && ngx_http_session_db_copy_start(cp, dc) == NGX_OK)
        {
            return NGX_OK;
        }

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED) {
            alive++;
        }
    }

    /* a copy whose serial holds a connection waits for that one's end */

    if (!held) {
        alive += ngx_http_session_db_copy_open(copies);
    }

    if (alive == 0 && !ngx_http_session_db_copy_soon(copies, 1)) {
        ngx_http_session_stat(db_failures, 1);
        return NGX_DECLINED;
    }

    /*
     * A connection will be free: the others' uploads end, or it connects
     * (now, or at the end of a short backoff); or the upload of cp's
     * serial that holds one ends
     */

    ngx_http_session_db_copy_wait(copies, cp, 0);

    ngx_add_timer(&cp->timeout, copies->timeout);

    return NGX_OK;
}


/*
 * No upload connection is alive (none open, none connecting): may the
 * uploads wait anyway rather than get 503 at once?  As the pool's queries
 * may (decision (ka)), and after a lost connection too (decision (ke)):
 *
 *   - one that lost a connection that was up (gone, or a statement that
 *     timed out) and tries again before session_db_timeout is over: its
 *     backoff is short (50 to 100 ms after a first failure), the database
 *     is likely there, and the uploads wait for that attempt, which is
 *     the schedule's own (an overloaded server gets no more of them);
 *   - early (an upload that arrives, not the queue after a failure): one
 *     whose last attempt was refused tries now, at most once per
 *     NGX_HTTP_SESSION_BACKOFF_EARLY for the worker's upload connections
 *     (ngx_http_session_backoff_early()), and the upload waits for it.
 *
 * Not after a connect timeout: a host that does not answer would hold
 * each upload for the whole timeout.  If the attempt fails, the uploads
 * waiting for it answer 503 then (ngx_http_session_db_copy_dispatch()).
 */

static ngx_uint_t
ngx_http_session_db_copy_soon(ngx_http_session_db_copies_t *copies,
    ngx_uint_t early)
{
    ngx_uint_t                   i;
    ngx_msec_int_t               left;
    ngx_http_session_db_conn_t  *dc;

    if (ngx_http_session_stopping()) {
        return 0;
    }

    for (i = 0; i < copies->opened; i++) {
        dc = &copies->conns[i];

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED || !dc->timer.timer_set
            || !dc->dropped)
        {
            continue;
        }

        left = (ngx_msec_int_t) (dc->timer.timer.key - ngx_current_msec);

        if (left < (ngx_msec_int_t) copies->timeout) {
            ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                           "session db: uploads wait for an upload "
                           "connection that connects again in %M ms",
                           (ngx_msec_t) ngx_max(left, 0));
            return 1;
        }
    }

    if (!early) {
        return 0;
    }

    return ngx_http_session_db_conn_early(copies->conns, copies->opened,
                                          &copies->early, "an upload");
}


/* cp takes the free connection dc: BEGIN and before */

static ngx_int_t
ngx_http_session_db_copy_start(ngx_http_session_db_copy_t *cp,
    ngx_http_session_db_conn_t *dc)
{
    dc->data = cp;
    cp->conn = dc;

    if (ngx_http_session_db_copy_pair(cp, cp->before, 1) != NGX_OK) {
        /* nobody's yet: the connection connects again */
        dc->data = NULL;
        cp->conn = NULL;
        ngx_http_session_db_conn_fail(dc);
        return NGX_ERROR;
    }

    cp->phase = NGX_HTTP_SESSION_DB_COPY_BEFORE;

    if (ngx_http_session_db_copies->turn < cp->turn) {
        ngx_http_session_db_copies->turn = cp->turn;
    }

    /* a second try keeps the first one's deadline (see _again()) */

    if (cp->again) {
        return NGX_OK;
    }

    if (cp->timeout.timer_set) {
        ngx_del_timer(&cp->timeout);
    }

    cp->deadline = ngx_current_msec + dc->timeout;
    ngx_add_timer(&cp->timeout, dc->timeout);

    return NGX_OK;
}


/*
 * BEGIN and q, or q and COMMIT, under one Sync: one round trip; the
 * connection leaves pipeline mode once the Sync is answered
 */

static ngx_int_t
ngx_http_session_db_copy_pair(ngx_http_session_db_copy_t *cp,
    ngx_http_session_db_query_t *q, ngx_uint_t begin)
{
    ngx_http_session_db_conn_t  *dc;

    dc = cp->conn;

    cp->npipe = 0;

    if (!PQenterPipelineMode(dc->pg)
        || (begin
            && !PQsendQueryParams(dc->pg, "BEGIN", 0, NULL, NULL, NULL, NULL,
                                  0))
        || ngx_http_session_db_copy_send(cp, q) != NGX_OK
        || (!begin
            && !PQsendQueryParams(dc->pg, "COMMIT", 0, NULL, NULL, NULL,
                                  NULL, 0))
        || !PQpipelineSync(dc->pg))
    {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        return NGX_ERROR;
    }

    dc->reader = ngx_http_session_db_copy_pipe;

    return ngx_http_session_db_conn_busy(dc);
}


/*
 * q to libpq: by name where the connection prepared it, unless this is
 * the copy's second try (a text statement cannot meet a server without
 * it); binary results.  q's text is known by its bytes, not its address:
 * the caller's literal is another object than the one in the table above
 * unless the linker merged the two (not under -fsanitize=address, nor
 * without -fmerge-constants), and an upload would go as text each time
 */

static ngx_int_t
ngx_http_session_db_copy_send(ngx_http_session_db_copy_t *cp,
    ngx_http_session_db_query_t *q)
{
    ngx_uint_t                      i;
    ngx_http_session_db_conn_t     *dc;
    ngx_http_session_db_prepare_t  *prep;

    dc = cp->conn;

    /* a connection that prepared them is one of the copies' */

    prep = (dc->prepared && !cp->again) ? ngx_http_session_db_copies->prepare
                                        : NULL;

    for (i = 0; prep && i < prep->n; i++) {
        if (ngx_strcmp(q->sql, prep->sqls[i]) == 0) {
            return PQsendQueryPrepared(dc->pg, prep->names[i], q->nparams,
                                       q->values, q->lengths, q->formats, 1)
                   ? NGX_OK : NGX_ERROR;
        }
    }

    return PQsendQueryParams(dc->pg, q->sql, q->nparams, NULL, q->values,
                             q->lengths, q->formats, 1)
           ? NGX_OK : NGX_ERROR;
}


/*
 * dc's reader while a pair runs: each statement's first result (or its
 * error) is kept, then at the Sync the pair is over
 */

static void
ngx_http_session_db_copy_pipe(ngx_http_session_db_conn_t *dc)
{
    PGresult                    *res;
    ngx_http_session_db_copy_t  *cp;

    cp = dc->data;

    if (cp == NULL) {
        /* not left this way: a copy that goes away closes it */
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    while (!PQisBusy(dc->pg)) {
        res = PQgetResult(dc->pg);

        if (res == NULL) {
            if (PQstatus(dc->pg) == CONNECTION_BAD) {
                /* libpq gave up on it: NULL from here on, never a Sync */
                break;
            }

            /* the end of a statement's results */
            cp->npipe++;
            continue;
        }

        if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
            PQclear(res);

            if (!PQexitPipelineMode(dc->pg)) {
                ngx_http_session_db_copy_fail(cp, NULL, 1);
                return;
            }

            dc->reader = NULL;
            ngx_http_session_db_conn_idle(dc);

            ngx_http_session_db_copy_paired(cp);
            return;
        }

        ngx_http_session_db_conn_check(dc, res);

        if (cp->npipe < 2 && cp->pipe[cp->npipe] == NULL) {
            cp->pipe[cp->npipe] = res;

        } else {
            PQclear(res);
        }
    }

    if (PQstatus(dc->pg) == CONNECTION_BAD) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: connection lost: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_conn_fail(dc);
    }
}


/* a pair is answered: before's result to the owner, or after's */

static void
ngx_http_session_db_copy_paired(ngx_http_session_db_copy_t *cp)
{
    PGresult          *first, *second, *res, *other;
    ngx_uint_t         before;
    ExecStatusType     want;
    ngx_connection_t  *c;

    first = cp->pipe[0];
    second = cp->pipe[1];
    cp->pipe[0] = NULL;
    cp->pipe[1] = NULL;

    if (cp->timeout.timer_set) {
        ngx_del_timer(&cp->timeout);
    }

    before = (cp->phase == NGX_HTTP_SESSION_DB_COPY_BEFORE);

    /* the owner's statement, and BEGIN or COMMIT */

    res = before ? second : first;
    other = before ? first : second;
    want = PGRES_COMMAND_OK;

    if (other == NULL || PQresultStatus(other) != want
        || (!before && ngx_strcmp(PQcmdStatus(other), "COMMIT") != 0))
    {
        /* the error is the first statement's: the second did not run */

        if (before) {
            if (res) {
                PQclear(res);
            }

            ngx_http_session_db_copy_fail(cp, other, 1);
            return;
        }

        if (res && PQresultStatus(res) == PGRES_TUPLES_OK) {
            ngx_log_error(NGX_LOG_ERR, cp->log, 0,
                          "session db: the upload was not committed");
            PQclear(res);
            res = NULL;

            if (other && PQresultStatus(other) == PGRES_FATAL_ERROR) {
                res = other;
                other = NULL;
            }
        }

        if (other) {
            PQclear(other);
        }

        ngx_http_session_db_copy_fail(cp, res, 1);
        return;
    }

    PQclear(other);

    /* once: the second try goes as text, see _again() */

    if (before && res && ngx_http_session_db_conn_lost(cp->conn, res)
        && !cp->again)
    {
        PQclear(res);
        ngx_http_session_db_copy_again(cp);
        return;
    }

    if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK) {
        ngx_http_session_db_copy_fail(cp, res, 1);
        return;
    }

    if (before) {

        /*
         * The owner goes on or stops before the handler returns; it may
         * also finalize its request, which frees cp
         */

        c = cp->request->connection;

        cp->phase = NGX_HTTP_SESSION_DB_COPY_DECIDE;
        cp->handler(cp, res);
        PQclear(res);

        ngx_http_run_posted_requests(c);
        return;
    }

    ngx_http_session_db_copy_release(cp);
    cp->phase = NGX_HTTP_SESSION_DB_COPY_DONE;

    ngx_http_session_stat(db_queries, 1);

    /*
     * The handler answers and finalizes the request from a database
     * event: a request that nginx posted meanwhile (a client gone, whose
     * termination is posted) runs now, as after every other answer
     */

    c = cp->request->connection;

    cp->handler(cp, res);
    PQclear(res);

    ngx_http_run_posted_requests(c);

    ngx_http_session_db_copy_dispatch();
}


/*
 * before was sent by name to a server that does not have it (26000, see
 * ngx_http_session_db_conn_check()): nothing ran and no byte of the body
 * was read, so cp waits again, first in line.  Its connection, in a
 * transaction that failed, connects again, and its statements go as text
 * unless the pooler keeps them again.
 *
 * Once, and by the first try's deadline: the second try sends its
 * statements as text on whichever connection takes it, since another
 * connection that counts its statements as prepared may have lost them
 * too, and the connection that met this prepares them again when it
 * connects, which a pooler that keeps losing them makes in vain.  So a
 * server that keeps answering 26000 costs one reconnect per upload, not
 * one a lap, and the client has its answer within session_db_timeout of
 * the first statement's sending, as without the second try.
 */

static void
ngx_http_session_db_copy_again(ngx_http_session_db_copy_t *cp)
{
    ngx_msec_int_t                 left;
    ngx_http_session_db_conn_t    *dc;
    ngx_http_session_db_copies_t  *copies;

    copies = ngx_http_session_db_copies;
    dc = cp->conn;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, cp->log, 0,
                   "session db: an upload whose first statement the server "
                   "did not have waits again, its statements as text");

    ngx_http_session_db_copy_release(cp);

    ngx_http_session_db_conn_close(dc);
    ngx_http_session_db_conn_open(dc);

    cp->phase = NGX_HTTP_SESSION_DB_COPY_WAITING;
    cp->again = 1;

    ngx_http_session_db_copy_wait(copies, cp, 1);

    /* past the deadline already: the timer's handler answers at once */

    left = (ngx_msec_int_t) (cp->deadline - ngx_current_msec);

    ngx_add_timer(&cp->timeout, left > 0 ? (ngx_msec_t) left : 0);

    ngx_http_session_db_copy_dispatch();
}


/*
 * The connection failed as a step was sent: closed, and the owner's
 * handler runs when posted (never before the caller returns)
 */

static void
ngx_http_session_db_copy_lost(ngx_http_session_db_copy_t *cp)
{
    ngx_http_session_db_conn_t  *dc;

    dc = cp->conn;

    ngx_http_session_db_copy_release(cp);
    ngx_http_session_db_conn_fail(dc);

    cp->phase = NGX_HTTP_SESSION_DB_COPY_FAILED;
    ngx_post_event(&cp->resume, &ngx_posted_events);
}


void
ngx_http_session_db_copy_go(ngx_http_session_db_copy_t *cp)
{
    ngx_http_session_db_conn_t  *dc;

    dc = cp->conn;

    if (dc == NULL || cp->phase != NGX_HTTP_SESSION_DB_COPY_DECIDE) {
        return;
    }

    cp->buf = ngx_palloc(cp->request->pool, cp->size);

    if (cp->buf == NULL
        || ngx_http_session_db_conn_send(dc, cp->copy) != NGX_OK)
    {
        /* the handler is not called again before go() returns */
        ngx_http_session_db_copy_lost(cp);
        return;
    }

    cp->phase = NGX_HTTP_SESSION_DB_COPY_START;
    cp->pos = 0;
    cp->len = 0;

    /* while the COPY runs, its owner reads, and feeds libpq as it drains */
    dc->reader = ngx_http_session_db_copy_reader;
    dc->drained = ngx_http_session_db_copy_drained;

    ngx_add_timer(&cp->timeout, dc->timeout);
}


/*
 * The owner answers once the ROLLBACK is: the locks of before (the
 * session's row, an Idempotency-Key's advisory lock) are free by then,
 * and an answer kept for the key meanwhile does not find its own lock
 * taken
 */

void
ngx_http_session_db_copy_stop(ngx_http_session_db_copy_t *cp)
{
    ngx_http_session_db_conn_t  *dc;

    dc = cp->conn;

    if (dc == NULL || cp->phase != NGX_HTTP_SESSION_DB_COPY_DECIDE) {
        return;
    }

    cp->stopped = 1;
    cp->phase = NGX_HTTP_SESSION_DB_COPY_ROLLBACK;

    if (ngx_http_session_db_conn_send(dc, "ROLLBACK") != NGX_OK) {
        /* closed: the server rolls back; the handler runs when posted */
        ngx_http_session_db_copy_lost(cp);
        return;
    }

    ngx_add_timer(&cp->timeout, dc->timeout);
}


/* connected: the statements first, as the pool does */

static void
ngx_http_session_db_copy_ready(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_copies_t  *copies;

    copies = ngx_http_session_db_copies;

    if (copies
        && ngx_http_session_db_prepare(dc, copies->prepare,
                                            copies->pooler))
    {
        return;
    }

    ngx_http_session_db_copy_dispatch();
}


static void
ngx_http_session_db_copy_checked(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_copy_dispatch();
}


/*
 * The answer to what was sent alone: the PREPARE, the end of the COPY,
 * or a ROLLBACK (whose copy may be over)
 */

static void
ngx_http_session_db_copy_answer(ngx_http_session_db_conn_t *dc,
    PGresult *res)
{
    ngx_connection_t            *c;
    ngx_http_session_db_copy_t  *cp;

    if (dc->preparing) {
        ngx_http_session_db_prepared(dc, res, "upload statements",
                        ngx_http_session_db_copies
                        ? &ngx_http_session_db_copies->said_prepared : NULL);
        ngx_http_session_db_conn_clear(dc, res);
        ngx_http_session_db_copy_dispatch();
        return;
    }

    cp = dc->data;

    if (cp == NULL) {
        /*
         * The connection is free: the ROLLBACK of a copy whose request
         * went away is answered; if it failed, the transaction's state is
         * not known, and the connection begins anew
         */

        if (res == NULL || PQresultStatus(res) == PGRES_FATAL_ERROR) {
            ngx_http_session_db_conn_clear(dc, res);
            ngx_http_session_db_conn_close(dc);
            ngx_http_session_db_conn_open(dc);

        } else {
            ngx_http_session_db_conn_clear(dc, res);
        }

        ngx_http_session_db_copy_dispatch();
        return;
    }

    if (cp->phase == NGX_HTTP_SESSION_DB_COPY_ROLLBACK) {
        ngx_http_session_db_copy_release(cp);
        cp->phase = NGX_HTTP_SESSION_DB_COPY_DONE;

        if (res == NULL || PQresultStatus(res) != PGRES_COMMAND_OK) {
            /* the transaction's state is not known: a new connection */
            ngx_http_session_db_conn_clear(dc, res);
            ngx_http_session_db_conn_close(dc);
            ngx_http_session_db_conn_open(dc);

        } else {
            PQclear(res);
        }

        c = cp->request->connection;

        cp->handler(cp, NULL);
        ngx_http_run_posted_requests(c);

        ngx_http_session_db_copy_dispatch();
        return;
    }

    if (cp->phase != NGX_HTTP_SESSION_DB_COPY_END
        || res == NULL || PQresultStatus(res) != PGRES_COMMAND_OK)
    {
        ngx_http_session_db_copy_fail(cp, res, 1);
        return;
    }

    PQclear(res);

    if (cp->timeout.timer_set) {
        ngx_del_timer(&cp->timeout);
    }

    if (ngx_http_session_db_copy_pair(cp, cp->after, 0) != NGX_OK) {
        ngx_http_session_db_copy_fail(cp, NULL, 1);
        return;
    }

    cp->phase = NGX_HTTP_SESSION_DB_COPY_AFTER;

    ngx_add_timer(&cp->timeout, dc->timeout);
}


/* dc failed and is closed (it connects again after its backoff) */

static void
ngx_http_session_db_copy_failed(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_copy_t  *cp;

    cp = dc->data;
    dc->data = NULL;

    if (cp) {
        cp->conn = NULL;
        ngx_http_session_db_copy_fail(cp, NULL, 0);
    }

    ngx_http_session_db_copy_dispatch();
}


/*
 * dc's reader while the COPY runs: its start, then anything the server
 * says while the data flows (it only speaks to refuse it)
 */

static void
ngx_http_session_db_copy_reader(ngx_http_session_db_conn_t *dc)
{
    PGresult                    *res;
    ngx_http_session_db_copy_t  *cp;

    cp = dc->data;

    if (cp == NULL || PQisBusy(dc->pg)) {
        return;
    }

    res = PQgetResult(dc->pg);

    if (res && PQresultStatus(res) == PGRES_COPY_IN) {
        PQclear(res);

        if (cp->phase == NGX_HTTP_SESSION_DB_COPY_START) {
            cp->phase = NGX_HTTP_SESSION_DB_COPY_DATA;
        }

        /* the read may have flushed what libpq held: no write event */

        if (!dc->unsent) {
            ngx_http_session_db_copy_pump(cp);
        }

        return;
    }

    ngx_http_session_db_copy_fail(cp, res, 1);
}


/* libpq has sent the last piece */

static void
ngx_http_session_db_copy_drained(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_copy_t  *cp;

    cp = dc->data;

    if (cp && cp->phase == NGX_HTTP_SESSION_DB_COPY_DATA) {
        ngx_http_session_db_copy_pump(cp);
    }
}


/*
 * Feeds the COPY: a piece is read and handed to libpq once the previous
 * one is out, up to a turn's worth; then the other events have a turn
 */

static void
ngx_http_session_db_copy_pump(ngx_http_session_db_copy_t *cp)
{
    int                          rc;
    ssize_t                      n;
    ngx_uint_t                   i;
    ngx_http_session_db_conn_t  *dc;

    dc = cp->conn;

    for (i = 0; i < NGX_HTTP_SESSION_DB_COPY_TURN; i++) {

        if (cp->pos == cp->len) {
            /*
             * a piece and the 5 bytes of its message fill libpq's
             * output buffer, which then grows to the piece's size, no more
             */
            n = cp->read(cp, cp->buf, cp->size - 5);

            if (n < 0) {
                ngx_log_error(NGX_LOG_ERR, cp->log, 0,
                              "session db: the upload's data could not be "
                              "read");
                ngx_http_session_db_copy_fail(cp, NULL, 1);
                return;
            }

            if (n == 0) {
                break;
            }

            cp->pos = 0;
            cp->len = n;
        }

        rc = PQputCopyData(dc->pg, (const char *) cp->buf + cp->pos,
                           (int) (cp->len - cp->pos));

        if (rc != 1) {
            /* 0: libpq could not make room, it has sent what it held */
            ngx_log_error(NGX_LOG_ERR, cp->log, 0,
                          "session db: copy failed: %s",
                          ngx_http_session_db_message(
                                                  PQerrorMessage(dc->pg)));
            ngx_http_session_db_copy_fail(cp, NULL, 1);
            return;
        }

        cp->copied += cp->len - cp->pos;
        cp->pos = cp->len;

        if (ngx_http_session_db_conn_busy(dc) != NGX_OK) {
            ngx_http_session_db_copy_fail(cp, NULL, 1);
            return;
        }

        /* progress: the step's timeout starts again */

        if (cp->timeout.timer_set) {
            ngx_del_timer(&cp->timeout);
        }

        ngx_add_timer(&cp->timeout, dc->timeout);

        if (dc->unsent) {
            /* the socket is full: drained() calls again */
            return;
        }
    }

    if (i == NGX_HTTP_SESSION_DB_COPY_TURN) {
        ngx_post_event(&cp->resume, &ngx_posted_events);
        return;
    }

    /* the data is over: COPY's answer, then after */

    if (PQputCopyEnd(dc->pg, NULL) != 1) {
        ngx_log_error(NGX_LOG_ERR, cp->log, 0, "session db: copy failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_copy_fail(cp, NULL, 1);
        return;
    }

    cp->phase = NGX_HTTP_SESSION_DB_COPY_END;

    dc->reader = NULL;
    dc->drained = NULL;

    if (ngx_http_session_db_conn_busy(dc) != NGX_OK) {
        ngx_http_session_db_copy_fail(cp, NULL, 1);
    }
}


static void
ngx_http_session_db_copy_resume(ngx_event_t *ev)
{
    ngx_connection_t            *c;
    ngx_http_session_db_copy_t  *cp;

    cp = ev->data;

    if (cp->phase == NGX_HTTP_SESSION_DB_COPY_FAILED) {
        cp->phase = NGX_HTTP_SESSION_DB_COPY_DONE;

        c = cp->request->connection;
        cp->handler(cp, NULL);
        ngx_http_run_posted_requests(c);
        return;
    }

    if (cp->phase == NGX_HTTP_SESSION_DB_COPY_DATA && cp->conn
        && !cp->conn->unsent)
    {
        ngx_http_session_db_copy_pump(cp);
    }
}


/*
 * cp is over with res (an error, or NULL): the owner is told; abort:
 * the connection, in a transaction that must not commit, is closed and
 * opened again
 */

static void
ngx_http_session_db_copy_fail(ngx_http_session_db_copy_t *cp, PGresult *res,
    ngx_uint_t abort)
{
    ngx_uint_t                   reopened;
    ngx_connection_t            *c;
    ngx_http_session_db_conn_t  *dc;

    dc = cp->conn;

    ngx_http_session_db_copy_release(cp);
    cp->phase = NGX_HTTP_SESSION_DB_COPY_DONE;

    if (res && ngx_http_session_db_unavailable(res)) {
        ngx_log_error(NGX_LOG_ERR, cp->log, 0, "session db: %s",
                      ngx_http_session_db_message(PQresultErrorMessage(res)));
        PQclear(res);
        res = NULL;
    }

    reopened = (dc && abort);

    if (reopened) {
        ngx_http_session_db_conn_close(dc);
        ngx_http_session_db_conn_open(dc);
    }

    ngx_http_session_stat(db_failures, 1);

    c = cp->request->connection;

    cp->handler(cp, res);

    if (res) {
        PQclear(res);
    }

    ngx_http_run_posted_requests(c);

    /* the copy of its session waiting may take another free connection */

    if (reopened) {
        ngx_http_session_db_copy_dispatch();
    }
}


/*
 * cp lets its connection, or its place in the queue, go; no handler of it
 * runs after this but one
 */

static void
ngx_http_session_db_copy_release(ngx_http_session_db_copy_t *cp)
{
    ngx_http_session_db_conn_t  *dc;

    if (cp->queued) {
        ngx_queue_remove(&cp->queue);
        cp->queued = 0;
        ngx_http_session_gauge(uploads_waiting, -1);
    }

    dc = cp->conn;

    if (dc) {
        dc->data = NULL;
        dc->reader = NULL;
        dc->drained = NULL;
        cp->conn = NULL;
    }

    if (cp->timeout.timer_set) {
        ngx_del_timer(&cp->timeout);
    }

    if (cp->resume.posted) {
        ngx_delete_posted_event(&cp->resume);
    }

    if (cp->buf) {
        ngx_pfree(cp->request->pool, cp->buf);
        cp->buf = NULL;
    }

    ngx_http_session_pq_clear(&cp->pipe[0]);
    ngx_http_session_pq_clear(&cp->pipe[1]);

    cp->done = 1;
}


/*
 * A copy's turn: one after the later of its owner's last copy, waiting or
 * under way, and the copy that began last.  The queue goes by turns (in
 * the order of arrival among equal ones), so that an owner's burst of
 * uploads waits behind itself: another owner's upload that comes after
 * it begins after one of the burst's at most, not after all of them
 * (decision (yk)).
 */

static void
ngx_http_session_db_copy_turn(ngx_http_session_db_copies_t *copies,
    ngx_http_session_db_copy_t *cp)
{
    uint64_t                     turn;
    ngx_uint_t                   i;
    ngx_queue_t                 *q;
    ngx_http_session_db_copy_t  *other;

    turn = copies->turn;

    for (i = 0; i < copies->opened; i++) {
        other = copies->conns[i].data;

        if (other && other->owner == cp->owner && other->turn > turn) {
            turn = other->turn;
        }
    }

    /* in the order of turns: the owner's last one waiting is its latest */

    for (q = ngx_queue_last(&copies->waiting);
         q != ngx_queue_sentinel(&copies->waiting);
         q = ngx_queue_prev(q))
    {
        other = ngx_queue_data(q, ngx_http_session_db_copy_t, queue);

        if (other->owner == cp->owner) {
            if (other->turn > turn) {
                turn = other->turn;
            }

            break;
        }
    }

    cp->turn = turn + 1;
}


/*
 * cp waits: behind the copies whose turns are not later than its own, or
 * first in line (a copy that had its turn and must wait again)
 */

static void
ngx_http_session_db_copy_wait(ngx_http_session_db_copies_t *copies,
    ngx_http_session_db_copy_t *cp, ngx_uint_t first)
{
    ngx_queue_t                 *q;
    ngx_http_session_db_copy_t  *other;

    q = ngx_queue_sentinel(&copies->waiting);

    if (!first) {
        for (q = ngx_queue_last(&copies->waiting);
             q != ngx_queue_sentinel(&copies->waiting);
             q = ngx_queue_prev(q))
        {
            other = ngx_queue_data(q, ngx_http_session_db_copy_t, queue);

            if (other->turn <= cp->turn) {
                break;
            }
        }
    }

    ngx_queue_insert_after(q, &cp->queue);
    cp->queued = 1;

    ngx_http_session_gauge(uploads_waiting, 1);
}


/* whether a copy of cp's serial holds a connection */

static ngx_uint_t
ngx_http_session_db_copy_held(ngx_http_session_db_copies_t *copies,
    ngx_http_session_db_copy_t *cp)
{
    ngx_uint_t                   i;
    ngx_http_session_db_copy_t  *other;

    if (cp->serial == 0) {
        return 0;
    }

    for (i = 0; i < copies->opened; i++) {
        other = copies->conns[i].data;

        if (other && other->serial == cp->serial) {
            return 1;
        }
    }

    return 0;
}


/*
 * The first waiting copy whose serial holds no connection: the uploads
 * into one session go one at a time in each worker, and those behind
 * them let uploads into other sessions pass (decision (yl))
 */

static ngx_http_session_db_copy_t *
ngx_http_session_db_copy_next(ngx_http_session_db_copies_t *copies)
{
    ngx_queue_t                 *q;
    ngx_http_session_db_copy_t  *cp;

    for (q = ngx_queue_head(&copies->waiting);
         q != ngx_queue_sentinel(&copies->waiting);
         q = ngx_queue_next(q))
    {
        cp = ngx_queue_data(q, ngx_http_session_db_copy_t, queue);

        if (!ngx_http_session_db_copy_held(copies, cp)) {
            return cp;
        }
    }

    return NULL;
}


/* free connections to the waiting copies, in turn */

static void
ngx_http_session_db_copy_dispatch(void)
{
    ngx_uint_t                     i, alive, moved;
    ngx_queue_t                   *head, *q;
    ngx_http_session_db_conn_t    *dc;
    ngx_http_session_db_copy_t    *cp;
    ngx_http_session_db_copies_t  *copies;

    copies = ngx_http_session_db_copies;
    if (copies == NULL) {
        return;
    }

    alive = 0;
    moved = 0;

    for (i = 0; i < copies->opened; i++) {
        dc = &copies->conns[i];

        if (dc->state == NGX_HTTP_SESSION_DB_IDLE && dc->data == NULL
            && (cp = ngx_http_session_db_copy_next(copies)) != NULL)
        {
            ngx_queue_remove(&cp->queue);
            cp->queued = 0;
            ngx_http_session_gauge(uploads_waiting, -1);

            if (ngx_http_session_db_copy_start(cp, dc) == NGX_OK) {
                moved = 1;

            } else {
                ngx_http_session_db_copy_wait(copies, cp, 1);
            }
        }

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED) {
            alive++;
        }
    }

    if (ngx_queue_empty(&copies->waiting)) {
        return;
    }

    /*
     * The queue moves: those behind wait session_db_timeout from now.  A
     * burst of large uploads is served in turn however long it takes; a
     * database that stops taking them fails them within the timeout.
     */

    if (moved) {
        for (q = ngx_queue_head(&copies->waiting);
             q != ngx_queue_sentinel(&copies->waiting);
             q = ngx_queue_next(q))
        {
            cp = ngx_queue_data(q, ngx_http_session_db_copy_t, queue);

            if (cp->again) {
                /* a second try keeps the first one's deadline */
                continue;
            }

            if (cp->timeout.timer_set) {
                ngx_del_timer(&cp->timeout);
            }

            ngx_add_timer(&cp->timeout, copies->timeout);
        }
    }

    /* one more connection, unless each copy waits for its serial's end */

    if (ngx_http_session_db_copy_next(copies) != NULL) {
        alive += ngx_http_session_db_copy_open(copies);
    }

    if (alive || ngx_http_session_db_copy_soon(copies, 0)) {
        return;
    }

    /* every connection is down, and stays so: the waiting answer now */

    while (!ngx_queue_empty(&copies->waiting)) {
        head = ngx_queue_head(&copies->waiting);
        cp = ngx_queue_data(head, ngx_http_session_db_copy_t, queue);

        ngx_http_session_db_copy_fail(cp, NULL, 0);
    }
}


static void
ngx_http_session_db_copy_timeout(ngx_event_t *ev)
{
    ngx_http_session_db_conn_t  *dc;
    ngx_http_session_db_copy_t  *cp;

    cp = ev->data;

    ngx_log_error(NGX_LOG_ERR, ev->log, 0,
                  "session db: upload timed out %s",
                  cp->queued ? "waiting for a connection"
                             : "waiting for the database");

    dc = cp->conn;

    if (dc) {
        /* as a query that timed out: connect again after the backoff */
        ngx_http_session_db_copy_release(cp);
        ngx_http_session_db_conn_fail(dc);
    }

    ngx_http_session_db_copy_fail(cp, NULL, 0);
}


/* the request goes away: a transaction under way must not commit */

static void
ngx_http_session_db_copy_cleanup(void *data)
{
    ngx_http_session_db_copy_t  *cp = data;

    ngx_msec_t                   deadline;
    ngx_http_session_db_conn_t  *dc;

    dc = cp->conn;

    if (dc == NULL) {
        ngx_http_session_db_copy_release(cp);
        return;
    }

    /*
     * A ROLLBACK's answer frees the connection.  cp's timer, which bounds
     * one under way, goes with cp: the connection's own bounds it from
     * now on, by the same deadline, and closes it if no answer comes (a
     * server that hangs), or the upload connections would shrink for
     * good.  Nothing of cp is read once it has returned.
     */

    deadline = ngx_current_msec + dc->timeout;

    if (cp->phase == NGX_HTTP_SESSION_DB_COPY_ROLLBACK
        && cp->timeout.timer_set)
    {
        deadline = cp->timeout.timer.key;
    }

    ngx_http_session_db_copy_release(cp);

    if (cp->phase == NGX_HTTP_SESSION_DB_COPY_ROLLBACK) {
        ngx_http_session_db_conn_abandon(dc,
                                   NGX_HTTP_SESSION_DB_COPY_ABANDONED,
                                   deadline);
        return;
    }

    if (cp->phase == NGX_HTTP_SESSION_DB_COPY_DECIDE) {
        /* between two statements: ROLLBACK */

        if (ngx_http_session_db_conn_send(dc, "ROLLBACK") != NGX_OK) {
            ngx_http_session_db_conn_fail(dc);
            return;
        }

        ngx_http_session_db_conn_abandon(dc,
                                   NGX_HTTP_SESSION_DB_COPY_ABANDONED,
                                   deadline);
        return;
    }

    ngx_log_error(NGX_LOG_INFO, cp->log, 0,
                  "session db: an upload under way is given up");

    ngx_http_session_db_conn_close(dc);
    ngx_http_session_db_conn_open(dc);

    ngx_http_session_db_copy_dispatch();
}
