/*
 * The long poll's shared reads: the worker's table of the sessions that
 * polls wait on.
 *
 * The polls of one session (and one project: the statement's images
 * depend on it) that wait in this worker share a node of the worker's
 * table.  The node reads the session and its unacknowledged images with
 * one prepared statement (NGX_HTTP_SESSION_STMT_POLL) for all of them,
 * renders the answer once and sends the same bytes to each: the database
 * work of a wake-up is one statement per session per worker, however
 * many polls wait on it, and polls that start together share their
 * first read.  The read belongs to the node, not to a request, so a
 * client that goes away does not cancel it.
 *
 * No wake-up is lost: a poll that arrives while a read is under way
 * joins it; the read may have missed a change committed after it was
 * sent, but that change's notification arrives after the commit, and a
 * notification that comes during a read makes the node read once more
 * before it concludes "nothing yet".  So once a read finds nothing, the
 * node is settled: a new poll joins it with no read of its own, because
 * any later change will wake it (and a LISTEN connection that comes back
 * from an outage wakes every node).  A poll that must answer now (its
 * timeout, timeout=0, shutdown) is answered only by a read sent after it
 * asked.
 *
 * A write notifies only when a poll may wait on its session (decision
 * (yf)): before a node lets its waiters wait, the session must be armed
 * (sessions.polled_until) past the latest of their deadlines.  A read
 * that finds nothing says how long the session's arm has left; when that
 * is too short, the node arms the session (NGX_HTTP_SESSION_SQL_POLL_ARM,
 * one statement for the nodes of the batch) and, once that has
 * committed, reads again: a change committed before the arm took the
 * row's lock is seen by that read, and a later one sees the arm and
 * notifies.  A waiter whose deadline is past the arm makes a settled
 * node read (and arm) again.
 *
 * The node has a timer for the session's expires_at, which answers every
 * waiter 410 "session has expired" on time instead of at the next expiry
 * sweep.  The reads of the nodes that must read after one event go in
 * one statement (up to NGX_HTTP_SESSION_POLL_BATCH sessions), sent from a
 * posted event.
 *
 * About 1,200 lines, on purpose: the table, its reads, its arms and
 * their answers are one state machine (a node's reading, queued, again,
 * armed, settled and busy), and each half of a split would call the
 * other.
 */

#include "ngx_http_session_poll_node.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"


/* the most images one answer carries (docs/api.md §5.10) */
#define NGX_HTTP_SESSION_POLL_IMAGES      "100"
/* session nodes allocated at once */
#define NGX_HTTP_SESSION_POLL_NODE_CHUNK  64
/* a read: the query object and its parameters' lengths */
#define NGX_HTTP_SESSION_POLL_READ_POOL   4096
/* the most sessions one statement reads */
#define NGX_HTTP_SESSION_POLL_BATCH       256
/* an arm lasts this many seconds at least, and past the deadlines by */
#define NGX_HTTP_SESSION_POLL_ARM         300
#define NGX_HTTP_SESSION_POLL_ARM_PAST    60
/* an arm known to end within this of a deadline does not cover it (ms) */
#define NGX_HTTP_SESSION_POLL_ARM_SLACK   1000
/* an answer's pool: its rendered body */
#define NGX_HTTP_SESSION_POLL_ANSWER_POOL 1024


/* one statement reading, or arming, the sessions of many nodes */
typedef struct {
    ngx_pool_t                        *pool;
    /* ngx_current_msec when it was sent */
    ngx_msec_t                         sent;
    ngx_uint_t                         n;
    ngx_http_session_poll_node_t      *nodes[1];
} ngx_http_session_poll_batch_t;


/* the worker's table */
typedef struct {
    ngx_rbtree_t                       tree;
    ngx_rbtree_node_t                  sentinel;
    /* every node in use */
    ngx_queue_t                        nodes;
    /* nodes not in use, in chunks that stay */
    ngx_queue_t                        free;
    /* the nodes whose reads go in the next statement, and its event */
    ngx_queue_t                        pending;
    ngx_event_t                        read_ev;
    /* the nodes whose sessions the next arm statement arms, its event */
    ngx_queue_t                        arms;
    ngx_event_t                        arm_ev;
    /* nginx's event traces print ev->data as a connection's fd */
    ngx_connection_t                   dummy;
    /* the waiters' owner's */
    ngx_http_session_poll_deliver_pt   deliver;
    ngx_http_session_poll_waiter_pt    waits;
    /* the table exists: this is a worker with session_api */
    ngx_uint_t                         ready;
} ngx_http_session_poll_table_t;


static void ngx_http_session_poll_send_reads(ngx_event_t *ev);
static void ngx_http_session_poll_send_arms(ngx_event_t *ev);
static void ngx_http_session_poll_send(ngx_queue_t *pending, ngx_uint_t arm);
static void ngx_http_session_poll_result(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_poll_int8(PGresult *res, int row, int col,
    int64_t *n);
static void ngx_http_session_poll_armed(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_poll_queue(ngx_http_session_poll_node_t *node,
    ngx_uint_t arm);
static void ngx_http_session_poll_node_result(
    ngx_http_session_poll_node_t *node, ngx_log_t *log, PGresult *res,
    int first, int rows);
static ngx_http_session_err_e ngx_http_session_poll_check(
    ngx_http_session_poll_node_t *node, ngx_log_t *log, PGresult *res,
    int first, int rows, int *n, int64_t *expires_us);
static void ngx_http_session_poll_expires(ngx_http_session_poll_node_t *node,
    int64_t expires_us);
static void ngx_http_session_poll_answer(ngx_http_session_poll_node_t *node,
    ngx_uint_t final_only, ngx_http_session_err_e err,
    ngx_http_session_poll_answer_t *a);
static void ngx_http_session_poll_expired(ngx_event_t *ev);
static ngx_http_session_poll_node_t *ngx_http_session_poll_node_alloc(
    ngx_log_t *log);


static ngx_http_session_poll_table_t  ngx_http_session_poll_table;


/* the node of sid and project, made if there is none; NULL: no memory */

ngx_http_session_poll_node_t *
ngx_http_session_poll_node(u_char *sid, u_char *project, ngx_log_t *log)
{
    u_char                        *p, text[NGX_HTTP_SESSION_POLL_KEY_LEN];
    uint32_t                       hash;
    ngx_str_t                      key;
    ngx_http_session_poll_node_t  *node;

    /* the node's key: sid, a NUL and project, as the node holds them */

    p = ngx_cpymem(text, sid, NGX_HTTP_SESSION_UUID_LEN);
    *p++ = '\0';
    ngx_memcpy(p, project, NGX_HTTP_SESSION_UUID_LEN);

    key.len = NGX_HTTP_SESSION_POLL_KEY_LEN;
    key.data = text;

    hash = ngx_crc32_short(sid, NGX_HTTP_SESSION_UUID_LEN);

    node = (ngx_http_session_poll_node_t *)
               ngx_str_rbtree_lookup(&ngx_http_session_poll_table.tree,
                                     &key, hash);
    if (node) {
        return node;
    }

    node = ngx_http_session_poll_node_alloc(log);
    if (node == NULL) {
        return NULL;
    }

    ngx_memzero(node, sizeof(ngx_http_session_poll_node_t));

    node->key.node.key = hash;
    node->key.str.len = NGX_HTTP_SESSION_POLL_KEY_LEN;
    node->key.str.data = node->sid;
    ngx_memcpy(node->sid, sid, NGX_HTTP_SESSION_UUID_LEN);
    ngx_memcpy(node->project, project, NGX_HTTP_SESSION_UUID_LEN);
    ngx_queue_init(&node->waiters);

    node->expiry.handler = ngx_http_session_poll_expired;
    node->expiry.data = node;
    node->expiry.log = ngx_cycle->log;

    ngx_rbtree_insert(&ngx_http_session_poll_table.tree, &node->key.node);
    ngx_queue_insert_tail(&ngx_http_session_poll_table.nodes, &node->all);

    /* counted before its first read: the session's events come here */
    ngx_http_session_relay_nodes(1);

    return node;
}


/*
 * Something may have changed (final 0: a notification), or a waiter
 * must answer now (final 1): read, or read again after the running
 * read.  A read that cannot start answers the node's waiters 503.
 */

void
ngx_http_session_poll_want(ngx_http_session_poll_node_t *node,
    ngx_uint_t final)
{
    ngx_int_t  rc;

    node->settled = 0;

    if (node->reading) {
        /* a read still queued is sent after this: it sees the change */
        node->again |= !node->queued;
        return;
    }

    rc = ngx_http_session_poll_read(node);

    if (rc == NGX_OK) {
        return;
    }

    /* those that must answer now, or all, with no read to wait for */

    ngx_http_session_poll_answer(node, final,
                                 (rc == NGX_DECLINED)
                                 ? NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE
                                 : NGX_HTTP_SESSION_ERR_INTERNAL,
                                 NULL);
}


/*
 * A read of the node's session: queued for the statement that the
 * worker sends once the event under way is over, with every other
 * session to read by then (NGX_HTTP_SESSION_POLL_BATCH at most a
 * statement).  A read that cannot be sent answers the node's waiters
 * 503 from there.
 */

ngx_int_t
ngx_http_session_poll_read(ngx_http_session_poll_node_t *node)
{
    ngx_http_session_poll_queue(node, 0);

    return NGX_OK;
}


/*
 * The node goes in the worker's queue of reads (arm 0) or of arms (arm
 * 1), whose statement is sent once the event under way is over; it
 * counts as reading until its result
 */

static void
ngx_http_session_poll_queue(ngx_http_session_poll_node_t *node,
    ngx_uint_t arm)
{
    ngx_event_t                    *ev;
    ngx_http_session_poll_table_t  *t;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "session poll: %s %s", arm ? "arming" : "reading",
                   node->sid);

    t = &ngx_http_session_poll_table;
    ev = arm ? &t->arm_ev : &t->read_ev;

    node->reading = 1;
    node->queued = 1;
    node->again = 0;

    ngx_queue_insert_tail(arm ? &t->arms : &t->pending, &node->pending);

    if (!ev->posted) {
        ngx_post_event(ev, &ngx_posted_events);
    }
}


/* the queued reads, NGX_HTTP_SESSION_POLL_BATCH sessions a statement */

static void
ngx_http_session_poll_send_reads(ngx_event_t *ev)
{
    ngx_http_session_poll_send(&ngx_http_session_poll_table.pending, 0);
}


/* the queued arms, NGX_HTTP_SESSION_POLL_BATCH sessions a statement */

static void
ngx_http_session_poll_send_arms(ngx_event_t *ev)
{
    ngx_http_session_poll_send(&ngx_http_session_poll_table.arms, 1);
}


/*
 * The statements of a queue of nodes: reads (arm 0) or arms (arm 1),
 * each with the nodes' projects and session ids as $1 and $2, and $3 the
 * most images a session (a read) or the arm's seconds (an arm).  The
 * waiters of nodes whose statement cannot be sent answer from here.
 */

static void
ngx_http_session_poll_send(ngx_queue_t *pending, ngx_uint_t arm)
{
    u_char                         *pp, *ps, *pn;
    ngx_uint_t                      i, n;
    ngx_int_t                       rc;
    ngx_msec_int_t                  left, most;
    ngx_pool_t                     *pool;
    ngx_queue_t                    *q;
    ngx_http_session_err_e          err;
    ngx_http_session_db_query_t    *query;
    ngx_http_session_poll_node_t   *node;
    ngx_http_session_poll_batch_t  *batch;

    while (!ngx_queue_empty(pending)) {

        q = NULL;
        batch = NULL;
        query = NULL;
        pp = NULL;
        ps = NULL;
        pn = NULL;
        most = 0;
        err = NGX_HTTP_SESSION_ERR_INTERNAL;

        pool = ngx_create_pool(NGX_HTTP_SESSION_POLL_READ_POOL,
                               ngx_cycle->log);

        if (pool) {
            batch = ngx_palloc(pool, sizeof(ngx_http_session_poll_batch_t)
                                     + (NGX_HTTP_SESSION_POLL_BATCH - 1)
                                       * sizeof(void *));

            /* "{id,id,...}": an id and a comma or brace each */
            pp = ngx_pnalloc(pool, NGX_HTTP_SESSION_POLL_BATCH
                                   * (NGX_HTTP_SESSION_UUID_LEN + 1) + 2);
            ps = ngx_pnalloc(pool, NGX_HTTP_SESSION_POLL_BATCH
                                   * (NGX_HTTP_SESSION_UUID_LEN + 1) + 2);
            /* $3: the most images (a read), the arm's seconds (an arm) */
            pn = arm ? ngx_pnalloc(pool, NGX_INT_T_LEN + 1)
                     : (u_char *) NGX_HTTP_SESSION_POLL_IMAGES;

            query = ngx_http_session_db_query_create_pool(pool,
                                    ngx_cycle->log,
                                    arm ? NGX_HTTP_SESSION_SQL_POLL_ARM
                                        : NGX_HTTP_SESSION_SQL_POLL,
                                    arm ? ngx_http_session_poll_armed
                                        : ngx_http_session_poll_result);
        }

        n = 0;

        if (batch && pp && ps && pn && query) {
            batch->pool = pool;
            batch->sent = ngx_current_msec;

            /* the arm is rare: sent as text, not prepared */
            query->stmt = arm ? NGX_HTTP_SESSION_STMT_NONE
                              : NGX_HTTP_SESSION_STMT_POLL;
            query->result_format = 1;
            query->data = batch;

            /* one read answers many waiters: not held behind writes */
            query->first = 1;

            ngx_http_session_db_param(query, pp, 0, 0);
            ngx_http_session_db_param(query, ps, 0, 0);
            ngx_http_session_db_param(query, pn, 0, 0);

            *pp++ = '{';
            *ps++ = '{';
        }

        /* the nodes of this statement leave the queue */

        while (n < NGX_HTTP_SESSION_POLL_BATCH && !ngx_queue_empty(pending)) {
            q = ngx_queue_head(pending);
            ngx_queue_remove(q);

            node = ngx_queue_data(q, ngx_http_session_poll_node_t, pending);
            node->queued = 0;

            /* an arm outlasts the latest deadline of the node's waiters */

            if (arm) {
                left = (ngx_msec_int_t) (node->until - ngx_current_msec);
                most = ngx_max(most, left);
                node->arm_for = node->until;
            }

            if (batch) {
                batch->nodes[n] = node;
            }

            if (pp && ps) {
                if (n) {
                    *pp++ = ',';
                    *ps++ = ',';
                }

                pp = ngx_cpymem(pp, node->project, NGX_HTTP_SESSION_UUID_LEN);
                ps = ngx_cpymem(ps, node->sid, NGX_HTTP_SESSION_UUID_LEN);
            }

            n++;

            if (batch == NULL) {
                /* no memory: this node is answered 500 below */
                break;
            }
        }

        rc = NGX_ERROR;

        if (batch && pp && ps && pn && query) {
            batch->n = n;

            *pp++ = '}'; *pp = '\0';
            *ps++ = '}'; *ps = '\0';

            if (arm) {
                most = most / 1000 + 1 + NGX_HTTP_SESSION_POLL_ARM_PAST;
                *ngx_sprintf(pn, "%i", (ngx_int_t)
                             ngx_max(most, NGX_HTTP_SESSION_POLL_ARM))
                    = '\0';
            }

            rc = ngx_http_session_db_query_run(query);

            if (rc == NGX_OK) {
                if (!arm) {
                    ngx_http_session_stat(poll_reads, 1);
                }

                for (i = 0; i < n; i++) {
                    batch->nodes[i]->batch = batch;
                }

                ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                               "session poll: one %s of %ui sessions",
                               arm ? "arm" : "read", n);

                continue;
            }

            err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        }

        /* not sent: the waiters of those nodes answer now */

        if (batch == NULL && q) {
            n = 0;
            node = ngx_queue_data(q, ngx_http_session_poll_node_t, pending);
            node->reading = 0;
            ngx_http_session_poll_answer(node, 0, err, NULL);
            ngx_http_session_poll_release(node);
        }

        for (i = 0; i < n; i++) {
            node = batch->nodes[i];
            node->reading = 0;
            ngx_http_session_poll_answer(node, 0, err, NULL);
            ngx_http_session_poll_release(node);
        }

        if (pool) {
            ngx_destroy_pool(pool);
        }
    }
}


/* a statement's result: each node's rows, in the order they were sent */

static void
ngx_http_session_poll_result(ngx_http_session_db_query_t *q, PGresult *res)
{
    int64_t                         k, left;
    ngx_uint_t                      i;
    int                             row, first, rows, ntuples, col;
    ngx_pool_t                     *pool;
    ngx_http_session_poll_node_t   *node;
    ngx_http_session_poll_batch_t  *batch;

    batch = q->data;
    pool = batch->pool;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "session poll: the read of %ui sessions answered",
                   batch->n);

    for (i = 0; i < batch->n; i++) {
        batch->nodes[i]->batch = NULL;
        batch->nodes[i]->reading = 0;
    }

    ntuples = (res && PQresultStatus(res) == PGRES_TUPLES_OK)
              ? PQntuples(res) : 0;

    /* the arm's milliseconds left, then k */
    col = NGX_HTTP_SESSION_SESSION_NCOLS + NGX_HTTP_SESSION_IMAGE_NCOLS + 1;
    row = 0;

    for (i = 0; i < batch->n; i++) {
        node = batch->nodes[i];
        first = row;

        /* the rows of the (i + 1)-th session: k, a bigint, is i + 1 */

        while (row < ntuples
               && PQnfields(res) == col + 1
               && ngx_http_session_poll_int8(res, row, col, &k) == NGX_OK
               && k == (int64_t) i + 1)
        {
            row++;
        }

        rows = row - first;

        /* the arm lasts at least that long after the statement was sent */

        if (rows == 0
            || ngx_http_session_poll_int8(res, first, col - 1, &left)
               != NGX_OK)
        {
            left = 0;
        }

        node->armed_until = (left > 0)
            ? batch->sent + (ngx_msec_t) ngx_min(left, 86400000)
            : 0;

        ngx_http_session_poll_node_result(node, q->log, res, first, rows);
    }

    ngx_destroy_pool(pool);
}


/* a bigint column in binary: NGX_OK, or NGX_DECLINED (NULL, or not 8 bytes) */

static ngx_int_t
ngx_http_session_poll_int8(PGresult *res, int row, int col, int64_t *n)
{
    u_char      *v;
    ngx_uint_t   j;

    if (PQgetlength(res, row, col) != 8) {
        return NGX_DECLINED;
    }

    v = (u_char *) PQgetvalue(res, row, col);
    *n = 0;

    for (j = 0; j < 8; j++) {
        *n = (*n << 8) | v[j];
    }

    return NGX_OK;
}


/* a node's rows of the result: answers, or the node settles */

static void
ngx_http_session_poll_node_result(ngx_http_session_poll_node_t *node,
    ngx_log_t *log, PGresult *res, int first, int rows)
{
    int                              n;
    int64_t                          expires_us;
    ngx_uint_t                       armed;
    ngx_pool_t                      *pool;
    ngx_queue_t                     *wq;
    ngx_http_session_err_e           err;
    ngx_http_session_poll_answer_t  *a;

    err = ngx_http_session_poll_check(node, log, res, first, rows, &n,
                                      &expires_us);

    a = NULL;

    if (err == NGX_HTTP_SESSION_ERR_LAST && n == 0 && node->again) {

        /* something happened while this read ran: it may have missed it */

        (void) ngx_http_session_poll_read(node);

        goto done;
    }

    armed = node->armed;
    node->armed = 0;

    if (err == NGX_HTTP_SESSION_ERR_LAST) {
        /* one rendering for every waiter it answers */

        pool = ngx_create_pool(NGX_HTTP_SESSION_POLL_ANSWER_POOL, log);
        a = pool ? ngx_palloc(pool, sizeof(ngx_http_session_poll_answer_t))
                 : NULL;

        if (a == NULL) {
            if (pool) {
                ngx_destroy_pool(pool);
            }

            err = NGX_HTTP_SESSION_ERR_INTERNAL;
            goto answer;
        }

        a->pool = pool;
        a->refs = 1;
        a->body = ngx_http_session_render_poll(pool, log, res, first, n);

        if (a->body == NULL) {
            ngx_destroy_pool(pool);
            a = NULL;
            err = NGX_HTTP_SESSION_ERR_INTERNAL;
            goto answer;
        }

        if (n == 0) {
            /* nothing yet: those whose time is up answer, the rest wait */
            node->settled = 1;
            ngx_http_session_poll_expires(node, expires_us);

            ngx_http_session_poll_answer(node, 1, err, a);
            ngx_http_session_poll_answer_release(a);

            if (node->reading) {
                /* a poll that came meanwhile, past the arm, reads again */
                goto done;
            }

            /*
             * The read after an arm settles, whatever it says of it,
             * unless a poll joined while the arm was under way with a
             * deadline past the one it was sent for: it arms once more
             * (for that deadline, so this ends)
             */

            if ((!armed
                 || (ngx_msec_int_t) (node->until - node->arm_for) > 0)
                && !ngx_queue_empty(&node->waiters)
                && !ngx_http_session_poll_covers(node, 0))
            {
                /* they wait after the arm, and a read that follows it */
                node->settled = 0;
                ngx_http_session_poll_queue(node, 1);
                goto done;
            }

            /* those left wait: their requests can go */

            for (wq = ngx_queue_head(&node->waiters);
                 wq != ngx_queue_sentinel(&node->waiters);
                 wq = ngx_queue_next(wq))
            {
                ngx_http_session_poll_table.waits(
                          ngx_queue_data(wq, ngx_http_session_poll_t, queue));
            }

            goto done;
        }
    }

answer:

    ngx_http_session_poll_answer(node, 0, err, a);

    if (a) {
        ngx_http_session_poll_answer_release(a);
    }

done:

    ngx_http_session_poll_release(node);
}


/* the arm has committed: each node reads, or answers when it failed */

static void
ngx_http_session_poll_armed(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_uint_t                      i;
    ngx_pool_t                     *pool;
    ngx_http_session_err_e          err;
    ngx_http_session_poll_node_t   *node;
    ngx_http_session_poll_batch_t  *batch;

    batch = q->data;
    pool = batch->pool;

    err = NGX_HTTP_SESSION_ERR_LAST;

    if (res == NULL) {
        err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;

    } else if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        ngx_log_error(NGX_LOG_ERR, q->log, 0, "session db: query failed: %s",
                      PQresultErrorMessage(res));
        err = NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    for (i = 0; i < batch->n; i++) {
        node = batch->nodes[i];
        node->batch = NULL;
        node->reading = 0;

        if (err == NGX_HTTP_SESSION_ERR_LAST) {
            node->armed = 1;
            (void) ngx_http_session_poll_read(node);
            continue;
        }

        ngx_http_session_poll_answer(node, 0, err, NULL);
        ngx_http_session_poll_release(node);
    }

    ngx_destroy_pool(pool);
}


/* a waiter joins with timeout: whether the node's arm outlasts its wait */

ngx_uint_t
ngx_http_session_poll_covers(ngx_http_session_poll_node_t *node,
    ngx_msec_t timeout)
{
    ngx_msec_t  until;

    until = ngx_current_msec + timeout;

    if (timeout
        && (node->until == 0 || (ngx_msec_int_t) (until - node->until) > 0))
    {
        node->until = until;
    }

    return node->armed_until
           && (ngx_msec_int_t) (node->armed_until - node->until)
              >= NGX_HTTP_SESSION_POLL_ARM_SLACK;
}


/*
 * What the read says for the node's waiters: an error, or
 * NGX_HTTP_SESSION_ERR_LAST with n images to deliver (n may be 0).
 */

static ngx_http_session_err_e
ngx_http_session_poll_check(ngx_http_session_poll_node_t *node,
    ngx_log_t *log, PGresult *res, int first, int rows, int *n,
    int64_t *expires_us)
{
    u_char  project[NGX_HTTP_SESSION_UUID_LEN];

    *n = 0;
    *expires_us = 0;

    if (res == NULL) {
        return NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
    }

    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        ngx_log_error(NGX_LOG_ERR, log, 0, "session db: query failed: %s",
                      PQresultErrorMessage(res));
        return NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    if (PQnfields(res) != NGX_HTTP_SESSION_SESSION_NCOLS
                          + NGX_HTTP_SESSION_IMAGE_NCOLS + 2
        || rows == 0)
    {
        return NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    if (PQgetisnull(res, first, NGX_HTTP_SESSION_COL_S_PROJECT)) {
        return NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND;
    }

    /* the statement joins images only for $1; the row says whose it is */

    if (PQgetlength(res, first, NGX_HTTP_SESSION_COL_S_PROJECT)
        != NGX_HTTP_SESSION_UUID_BIN_LEN)
    {
        return NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    ngx_http_session_uuid_format(
              (u_char *) PQgetvalue(res, first, NGX_HTTP_SESSION_COL_S_PROJECT),
              project);

    if (ngx_memcmp(project, node->project, NGX_HTTP_SESSION_UUID_LEN) != 0) {
        return NGX_HTTP_SESSION_ERR_SESSION_FORBIDDEN;
    }

    if (ngx_http_session_render_is(res, first, NGX_HTTP_SESSION_COL_S_STATUS,
                                   "expired"))
    {
        return NGX_HTTP_SESSION_ERR_SESSION_EXPIRED;
    }

    if (!PQgetisnull(res, first, NGX_HTTP_SESSION_SESSION_NCOLS)) {
        *n = rows;
        return NGX_HTTP_SESSION_ERR_LAST;
    }

    if (ngx_http_session_render_is(res, first, NGX_HTTP_SESSION_COL_S_STATUS,
                                   "completed"))
    {
        /* completed, and no image waits for an acknowledgement */
        return NGX_HTTP_SESSION_ERR_ALL_ACKNOWLEDGED;
    }

    if (ngx_http_session_render_time(res, first, NGX_HTTP_SESSION_COL_S_EXPIRES,
                                     expires_us)
        != NGX_OK)
    {
        return NGX_HTTP_SESSION_ERR_INTERNAL;
    }

    return NGX_HTTP_SESSION_ERR_LAST;
}


/* the node's timer for expires_at (by this host's clock) */

static void
ngx_http_session_poll_expires(ngx_http_session_poll_node_t *node,
    int64_t expires_us)
{
    int64_t      left;
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    /* milliseconds, rounded up: never before expires_at */
    left = (expires_us + 999) / 1000
           - ((int64_t) tp->sec * 1000 + (int64_t) tp->msec);

    if (left < 1) {
        left = 1;
    }

    /* a session lives at most session_max_ttl: far below NGX_MAX_INT32 */
    if (left > NGX_MAX_INT32_VALUE) {
        left = NGX_MAX_INT32_VALUE;
    }

    ngx_add_timer(&node->expiry, (ngx_msec_t) left);
}


/*
 * Answers the node's waiters (only those whose time is up, with
 * final_only): err, or a's body when err is NGX_HTTP_SESSION_ERR_LAST.
 */

static void
ngx_http_session_poll_answer(ngx_http_session_poll_node_t *node,
    ngx_uint_t final_only, ngx_http_session_err_e err,
    ngx_http_session_poll_answer_t *a)
{
    ngx_queue_t               list, *q, *next;
    ngx_http_session_poll_t  *p;

    /* out of the node first: an answer may bring a new poll into it */

    ngx_queue_init(&list);

    for (q = ngx_queue_head(&node->waiters);
         q != ngx_queue_sentinel(&node->waiters);
         q = next)
    {
        next = ngx_queue_next(q);
        p = ngx_queue_data(q, ngx_http_session_poll_t, queue);

        if (final_only && !p->final) {
            continue;
        }

        ngx_queue_remove(q);
        ngx_queue_insert_tail(&list, q);
    }

    node->busy = 1;

    while (!ngx_queue_empty(&list)) {
        q = ngx_queue_head(&list);
        ngx_queue_remove(q);

        p = ngx_queue_data(q, ngx_http_session_poll_t, queue);
        p->node = NULL;
        ngx_http_session_gauge(polls_waiting, -1);

        ngx_http_session_poll_table.deliver(p, err, a);
    }

    node->busy = 0;
}


void
ngx_http_session_poll_answer_release(void *data)
{
    ngx_http_session_poll_answer_t  *a = data;

    if (--a->refs == 0) {
        ngx_destroy_pool(a->pool);
    }
}


/* a node with no waiter, no read and no answer under way goes */

void
ngx_http_session_poll_release(ngx_http_session_poll_node_t *node)
{
    if (!ngx_queue_empty(&node->waiters) || node->reading || node->busy) {
        return;
    }

    if (node->expiry.timer_set) {
        ngx_del_timer(&node->expiry);
    }

    ngx_rbtree_delete(&ngx_http_session_poll_table.tree, &node->key.node);
    ngx_queue_remove(&node->all);

    ngx_http_session_relay_nodes(-1);

    /* to the worker's free nodes (see ngx_http_session_poll_node_alloc) */
    ngx_queue_insert_head(&ngx_http_session_poll_table.free, &node->all);
}


/*
 * Nodes come in chunks of NGX_HTTP_SESSION_POLL_NODE_CHUNK and go back to
 * a free list, never to malloc: a burst of sessions polled at once does
 * not leave a long-lived node in each page of the burst's memory, which
 * would keep those pages from being given back.  The chunks stay for the
 * worker's life (its peak of polled sessions).
 */

static ngx_http_session_poll_node_t *
ngx_http_session_poll_node_alloc(ngx_log_t *log)
{
    ngx_uint_t                     i;
    ngx_queue_t                   *q;
    ngx_http_session_poll_node_t  *chunk;

    if (ngx_queue_empty(&ngx_http_session_poll_table.free)) {
        chunk = ngx_alloc(NGX_HTTP_SESSION_POLL_NODE_CHUNK
                          * sizeof(ngx_http_session_poll_node_t), log);
        if (chunk == NULL) {
            return NULL;
        }

        for (i = 0; i < NGX_HTTP_SESSION_POLL_NODE_CHUNK; i++) {
            ngx_queue_insert_tail(&ngx_http_session_poll_table.free,
                                  &chunk[i].all);
        }
    }

    q = ngx_queue_head(&ngx_http_session_poll_table.free);
    ngx_queue_remove(q);

    return ngx_queue_data(q, ngx_http_session_poll_node_t, all);
}


/* the session's expires_at has come: every waiter answers 410 */

static void
ngx_http_session_poll_expired(ngx_event_t *ev)
{
    ngx_http_session_poll_node_t  *node = ev->data;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "session poll: %s expires", node->sid);

    ngx_http_session_poll_answer(node, 0, NGX_HTTP_SESSION_ERR_SESSION_EXPIRED,
                                 NULL);

    ngx_http_session_poll_release(node);
}


void
ngx_http_session_poll_node_wake(u_char *sid, size_t len)
{
    u_char                         uuid[16], text[NGX_HTTP_SESSION_UUID_LEN];
    uint32_t                       hash;
    ngx_queue_t                    list, *q;
    ngx_rbtree_node_t             *n, *sentinel, *first;
    ngx_http_session_poll_node_t  *node;

    if (!ngx_http_session_poll_table.ready
        || ngx_http_session_uuid_parse(sid, len, uuid) != 0)
    {
        return;
    }

    /* the table holds ids as the worker writes them: lower case */
    ngx_http_session_uuid_format(uuid, text);

    hash = ngx_crc32_short(text, NGX_HTTP_SESSION_UUID_LEN);

    /* the leftmost node of the session: its projects follow it in order */

    n = ngx_http_session_poll_table.tree.root;
    sentinel = ngx_http_session_poll_table.tree.sentinel;
    first = NULL;

    while (n != sentinel) {
        node = (ngx_http_session_poll_node_t *) n;

        if (hash != n->key) {
            n = (hash < n->key) ? n->left : n->right;
            continue;
        }

        if (ngx_memcmp(text, node->sid, NGX_HTTP_SESSION_UUID_LEN) <= 0) {
            if (ngx_memcmp(text, node->sid, NGX_HTTP_SESSION_UUID_LEN) == 0) {
                first = n;
            }

            n = n->left;

        } else {
            n = n->right;
        }
    }

    /* collected first: waking may free a node and change the tree */

    ngx_queue_init(&list);

    for (n = first;
         n != NULL
         && n->key == hash
         && ngx_memcmp(text, ((ngx_http_session_poll_node_t *) n)->sid,
                       NGX_HTTP_SESSION_UUID_LEN) == 0;
         n = ngx_rbtree_next(&ngx_http_session_poll_table.tree, n))
    {
        node = (ngx_http_session_poll_node_t *) n;

        ngx_queue_remove(&node->all);
        ngx_queue_insert_tail(&list, &node->all);
    }

    while (!ngx_queue_empty(&list)) {
        q = ngx_queue_head(&list);
        node = ngx_queue_data(q, ngx_http_session_poll_node_t, all);

        ngx_queue_remove(q);
        ngx_queue_insert_tail(&ngx_http_session_poll_table.nodes, q);

        ngx_http_session_poll_want(node, 0);
        ngx_http_session_poll_release(node);
    }
}


/*
 * Every node reads again (final 0: notifications may have been lost), or
 * every waiter answers after one more read (final 1: shutting down).
 */

void
ngx_http_session_poll_want_all(ngx_uint_t final)
{
    ngx_queue_t                   *q, *qq, list;
    ngx_http_session_poll_t       *p;
    ngx_http_session_poll_node_t  *node;

    /* a node answered (and freed) by a failed read is out of the list */

    ngx_queue_init(&list);

    if (!ngx_queue_empty(&ngx_http_session_poll_table.nodes)) {
        ngx_queue_add(&list, &ngx_http_session_poll_table.nodes);
        ngx_queue_init(&ngx_http_session_poll_table.nodes);
    }

    while (!ngx_queue_empty(&list)) {
        q = ngx_queue_head(&list);
        node = ngx_queue_data(q, ngx_http_session_poll_node_t, all);

        ngx_queue_remove(q);
        ngx_queue_insert_tail(&ngx_http_session_poll_table.nodes, q);

        if (final) {
            for (qq = ngx_queue_head(&node->waiters);
                 qq != ngx_queue_sentinel(&node->waiters);
                 qq = ngx_queue_next(qq))
            {
                p = ngx_queue_data(qq, ngx_http_session_poll_t, queue);
                p->final = 1;
            }
        }

        ngx_http_session_poll_want(node, final);
        ngx_http_session_poll_release(node);
    }
}


ngx_int_t
ngx_http_session_poll_table_init(ngx_cycle_t *cycle,
    ngx_http_session_poll_deliver_pt deliver,
    ngx_http_session_poll_waiter_pt waits)
{
    ngx_http_session_poll_table_t  *t;

    t = &ngx_http_session_poll_table;

    ngx_rbtree_init(&t->tree, &t->sentinel, ngx_str_rbtree_insert_value);

    ngx_queue_init(&t->nodes);
    ngx_queue_init(&t->free);
    ngx_queue_init(&t->pending);
    ngx_queue_init(&t->arms);

    t->dummy.fd = (ngx_socket_t) -1;

    t->read_ev.handler = ngx_http_session_poll_send_reads;
    t->read_ev.data = &t->dummy;
    t->read_ev.log = cycle->log;

    t->arm_ev.handler = ngx_http_session_poll_send_arms;
    t->arm_ev.data = &t->dummy;
    t->arm_ev.log = cycle->log;

    t->deliver = deliver;
    t->waits = waits;
    t->ready = 1;

    return NGX_OK;
}


/* the requests are gone with the process; the nodes are ours */

void
ngx_http_session_poll_table_exit(ngx_http_session_poll_waiter_pt drop)
{
    ngx_uint_t                      i;
    ngx_queue_t                    *q, *qq;
    ngx_http_session_poll_t        *p;
    ngx_http_session_poll_node_t   *node;
    ngx_http_session_poll_batch_t  *batch;
    ngx_http_session_poll_table_t  *t;

    t = &ngx_http_session_poll_table;

    if (!t->ready) {
        return;
    }

    while (!ngx_queue_empty(&t->nodes)) {
        q = ngx_queue_head(&t->nodes);
        node = ngx_queue_data(q, ngx_http_session_poll_node_t, all);

        while (!ngx_queue_empty(&node->waiters)) {
            qq = ngx_queue_head(&node->waiters);
            p = ngx_queue_data(qq, ngx_http_session_poll_t, queue);

            ngx_queue_remove(qq);
            p->node = NULL;
            ngx_http_session_gauge(polls_waiting, -1);

            drop(p);
        }

        if (node->batch) {
            /* the pool's cleanup detaches the query from its connection */
            batch = node->batch;

            for (i = 0; i < batch->n; i++) {
                batch->nodes[i]->batch = NULL;
                batch->nodes[i]->reading = 0;
            }

            ngx_destroy_pool(batch->pool);
        }

        if (node->queued) {
            ngx_queue_remove(&node->pending);
            node->queued = 0;
        }

        node->reading = 0;
        node->busy = 0;

        ngx_http_session_poll_release(node);
    }

    if (t->read_ev.posted) {
        ngx_delete_posted_event(&t->read_ev);
    }

    if (t->arm_ev.posted) {
        ngx_delete_posted_event(&t->arm_ev);
    }

    t->ready = 0;
}


ngx_uint_t
ngx_http_session_poll_table_ready(void)
{
    return ngx_http_session_poll_table.ready;
}
