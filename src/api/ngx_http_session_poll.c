/*
 * The long poll.
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
 * Each waiter has a timer for its timeout; the node has one for the
 * session's expires_at, which answers every waiter 410 "session has
 * expired" on time instead of at the next expiry sweep.
 *
 * A plain HTTP/1.x poll known to wait (its node settled) is parked
 * (session_poll_park, ngx_http_session_park.h) once the event that
 * handled it is over: its nginx request is freed (the request pool and
 * the header buffer are most of a waiting poll's memory), the waiter
 * moves into the park's record, and the answer is sent on a request
 * made again from the record.
 *
 * The reads of the nodes that must read after one event go in one
 * statement (up to NGX_HTTP_SESSION_POLL_BATCH sessions), sent from a
 * posted event.
 */

#include "ngx_http_session_poll.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_park.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"


/* the most images one answer carries (API.md section 5) */
#define NGX_HTTP_SESSION_POLL_IMAGES      "100"
/* how soon a worker that shuts down answers its waiters, milliseconds */
#define NGX_HTTP_SESSION_POLL_EXIT_CHECK  1000
/* session nodes allocated at once */
#define NGX_HTTP_SESSION_POLL_NODE_CHUNK  64
/* a read: the query object and its parameters' lengths */
#define NGX_HTTP_SESSION_POLL_READ_POOL   4096
/* the most sessions one statement reads */
#define NGX_HTTP_SESSION_POLL_BATCH       256
/* an answer's pool: its rendered body */
#define NGX_HTTP_SESSION_POLL_ANSWER_POOL 1024


/* the waiters of one session and project */
typedef struct {
    /* key: CRC32 of the session id's text; then sid, then project */
    ngx_rbtree_node_t              node;
    /* in the worker's list of every node */
    ngx_queue_t                    all;
    ngx_queue_t                    waiters;
    /* the session's expires_at: answers every waiter 410 */
    ngx_event_t                    expiry;
    /* the statement reading it now (shared by its batch), or NULL */
    void                          *batch;
    /* in the worker's list of nodes whose read waits to be sent */
    ngx_queue_t                    pending;
    /* NUL-terminated: they are the statement's parameters */
    u_char                         sid[NGX_HTTP_SESSION_UUID_LEN + 1];
    u_char                         project[NGX_HTTP_SESSION_UUID_LEN + 1];

    /* a read is under way (or about to be sent: pending) */
    unsigned                       reading:1;
    unsigned                       queued:1;
    /* something happened after that read was sent: read again */
    unsigned                       again:1;
    /* the last read found nothing to answer and nothing happened since */
    unsigned                       settled:1;
    /* its waiters are being answered: the node stays until that is over */
    unsigned                       busy:1;
} ngx_http_session_poll_node_t;


struct ngx_http_session_poll_s {
    /* in node->waiters */
    ngx_queue_t                    queue;
    /* NULL once the poll no longer waits */
    ngx_http_session_poll_node_t  *node;
    /* NULL while parked: the poll is then the data of park */
    ngx_http_request_t            *request;
    ngx_http_session_park_t       *park;
    ngx_event_t                    timer;
    /* in the worker's list of polls to park after this event */
    ngx_queue_t                    parking;

    /* timed out (or timeout 0, or shutting down): the next read answers */
    unsigned                       final:1;
    /* session_poll_park and a request that can go while it waits */
    unsigned                       parkable:1;
};


/* one statement reading the sessions of many nodes */
typedef struct {
    ngx_pool_t                    *pool;
    ngx_uint_t                     n;
    ngx_http_session_poll_node_t  *nodes[1];
} ngx_http_session_poll_batch_t;


/* one rendered answer, sent as it is by every waiter it answers */
typedef struct {
    ngx_pool_t                    *pool;
    ngx_buf_t                     *body;
    /* the waiters still sending it, and the node while it answers */
    ngx_uint_t                     refs;
} ngx_http_session_poll_answer_t;


static ngx_int_t ngx_http_session_poll_join(ngx_http_session_poll_t *p,
    ngx_msec_t timeout);
static ngx_http_session_poll_node_t *ngx_http_session_poll_node(
    u_char *sid, u_char *project, ngx_log_t *log);
static void ngx_http_session_poll_want(ngx_http_session_poll_node_t *node,
    ngx_uint_t final);
static ngx_int_t ngx_http_session_poll_read(
    ngx_http_session_poll_node_t *node);
static void ngx_http_session_poll_send_reads(ngx_event_t *ev);
static void ngx_http_session_poll_result(ngx_http_session_db_query_t *q,
    PGresult *res);
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
static ngx_int_t ngx_http_session_poll_send(ngx_http_request_t *r,
    ngx_http_session_poll_answer_t *a);
static void ngx_http_session_poll_answer_release(void *data);
static void ngx_http_session_poll_leave(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_release(
    ngx_http_session_poll_node_t *node);
static void ngx_http_session_poll_cleanup(void *data);
static void ngx_http_session_poll_timeout(ngx_event_t *ev);
static void ngx_http_session_poll_expired(ngx_event_t *ev);
static void ngx_http_session_poll_want_all(ngx_uint_t final);
static void ngx_http_session_poll_exit_check(ngx_event_t *ev);
static ngx_http_session_poll_node_t *ngx_http_session_poll_node_alloc(
    ngx_log_t *log);
static void ngx_http_session_poll_park_later(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_park_posted(ngx_event_t *ev);
static void ngx_http_session_poll_park(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_parked_gone(ngx_http_session_park_t *pk);
static ngx_int_t ngx_http_session_poll_cmp(ngx_http_session_poll_node_t *a,
    uint32_t hash, u_char *sid, u_char *project);
static void ngx_http_session_poll_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_int_t ngx_http_session_poll_timeout_arg(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);


static const ngx_http_session_arg_t  ngx_http_session_poll_args[] = {
    { ngx_string("timeout"), ngx_http_session_poll_timeout_arg, 0, 0 },
    { ngx_null_string, NULL, 0, 0 }
};


static ngx_rbtree_t        ngx_http_session_poll_tree;
static ngx_rbtree_node_t   ngx_http_session_poll_sentinel;
static ngx_queue_t         ngx_http_session_poll_nodes;
/* nodes not in use, in chunks that stay */
static ngx_queue_t         ngx_http_session_poll_free;
static ngx_event_t         ngx_http_session_poll_exit_ev;
/* nginx's timer traces print ev->data as a connection's fd */
static ngx_connection_t    ngx_http_session_poll_exit_conn;
/* the table exists: this is a worker with session_api */
static ngx_uint_t          ngx_http_session_poll_ready;
/* the nodes whose reads go in the next statement, and its event */
static ngx_queue_t         ngx_http_session_poll_pending;
static ngx_event_t         ngx_http_session_poll_read_ev;
/* the polls to park once the event that made them wait is over */
static ngx_queue_t         ngx_http_session_poll_parking;
static ngx_event_t         ngx_http_session_poll_park_ev;


/* "timeout": seconds, from 0 to session_poll_max_timeout */

static ngx_int_t
ngx_http_session_poll_timeout_arg(ngx_http_request_t *r, ngx_str_t *value,
    void *field, ngx_uint_t data)
{
    u_char                        max[NGX_TIME_T_LEN];
    ngx_str_t                     text;
    long long                     n;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    if (ngx_http_session_parse_int(value->data, value->len, 0,
                                   (long long) slcf->poll_max_timeout, &n)
        != 0)
    {
        text.data = max;
        text.len = ngx_sprintf(max, "%T", slcf->poll_max_timeout) - max;

        return ngx_http_session_error_value(r, NGX_HTTP_SESSION_ERR_TIMEOUT,
                                            &text);
    }

    *(time_t *) field = (time_t) n;

    return NGX_DECLINED;
}


/* GET /api/v1/sessions/{sid}/poll */

ngx_int_t
ngx_http_session_poll(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    u_char                        uuid[16];
    u_char                        sid[NGX_HTTP_SESSION_UUID_LEN];
    time_t                        timeout;
    ngx_int_t                     rc;
    ngx_http_cleanup_t           *cln;
    ngx_http_session_poll_t      *p;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    /* stage 4: the query string */

    timeout = slcf->poll_timeout;

    rc = ngx_http_session_args(r, ngx_http_session_poll_args, &timeout);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    /* stage 5 starts here: a malformed id is a session that does not exist */

    if (ngx_http_session_uuid_parse(ctx->route.sid, ctx->route.sid_len, uuid)
        != 0)
    {
        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND);
    }

    if (!ngx_http_session_poll_ready) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    p = ngx_pcalloc(r->pool, sizeof(ngx_http_session_poll_t));
    if (p == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    cln = ngx_http_cleanup_add(r, 0);
    if (cln == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    cln->handler = ngx_http_session_poll_cleanup;
    cln->data = p;

    p->request = r;
    ctx->poll = p;

    ngx_http_session_uuid_format(uuid, sid);

    p->node = ngx_http_session_poll_node(sid, ctx->principal.project_id,
                                         r->connection->log);
    if (p->node == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    p->final = (timeout == 0 || ngx_exiting);

    rc = ngx_http_session_poll_join(p, (ngx_msec_t) timeout * 1000);

    if (rc != NGX_OK) {
        ngx_http_session_poll_leave(p);

        return ngx_http_session_error(r, (rc == NGX_DECLINED)
                                         ? NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE
                                         : NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    /* a client that goes away ends the wait at once */
    r->read_event_handler = ngx_http_test_reading;

    /* the request lives until the poll answers, however many reads */
    r->main->count++;

    p->parkable = (slcf->poll_park && ngx_http_session_parkable(r));

    /* a poll that joined a settled node waits: parked now, others later */

    if (p->node && p->node->settled && !p->node->reading) {
        ngx_http_session_poll_park_later(p);
    }

    return NGX_DONE;
}


/*
 * A poll that is known to wait (its node is settled) is parked once the
 * event that handles it is over; a poll answered at once (timeout=0,
 * images pending) is never parked.
 */

static void
ngx_http_session_poll_park_later(ngx_http_session_poll_t *p)
{
    if (!p->parkable || p->final || p->request == NULL || p->parking.next) {
        return;
    }

    ngx_queue_insert_tail(&ngx_http_session_poll_parking, &p->parking);

    if (!ngx_http_session_poll_park_ev.posted) {
        ngx_post_event(&ngx_http_session_poll_park_ev, &ngx_posted_events);
    }
}


/*
 * Enters the node (found or made by the caller), arms the timeout, and
 * reads or joins the read under way: NGX_OK, NGX_DECLINED (no database
 * now: 503) or NGX_ERROR.
 */

static ngx_int_t
ngx_http_session_poll_join(ngx_http_session_poll_t *p, ngx_msec_t timeout)
{
    ngx_http_session_poll_node_t  *node;

    node = p->node;

    ngx_queue_insert_tail(&node->waiters, &p->queue);
    ngx_http_session_gauge(polls_waiting, 1);

    if (!p->final) {
        p->timer.handler = ngx_http_session_poll_timeout;
        p->timer.data = p;
        p->timer.log = p->request->connection->log;

        ngx_add_timer(&p->timer, timeout);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, p->request->connection->log, 0,
                   "session poll: waiting on %s for %M ms%s", node->sid,
                   timeout, node->reading ? ", joins a read" : "");

    if (node->reading) {
        /* a read under way was sent before this poll asked; not a queued one */
        node->again |= (p->final && !node->queued);
        return NGX_OK;
    }

    if (node->settled && !p->final) {
        return NGX_OK;
    }

    return ngx_http_session_poll_read(node);
}


/* the node of sid and project, made if there is none; NULL: no memory */

static ngx_http_session_poll_node_t *
ngx_http_session_poll_node(u_char *sid, u_char *project, ngx_log_t *log)
{
    uint32_t                       hash;
    ngx_int_t                      rc;
    ngx_rbtree_node_t             *n, *sentinel;
    ngx_http_session_poll_node_t  *node;

    hash = ngx_crc32_short(sid, NGX_HTTP_SESSION_UUID_LEN);

    n = ngx_http_session_poll_tree.root;
    sentinel = ngx_http_session_poll_tree.sentinel;

    while (n != sentinel) {
        node = (ngx_http_session_poll_node_t *) n;

        rc = ngx_http_session_poll_cmp(node, hash, sid, project);

        if (rc == 0) {
            return node;
        }

        n = (rc < 0) ? n->left : n->right;
    }

    node = ngx_http_session_poll_node_alloc(log);
    if (node == NULL) {
        return NULL;
    }

    ngx_memzero(node, sizeof(ngx_http_session_poll_node_t));

    node->node.key = hash;
    ngx_memcpy(node->sid, sid, NGX_HTTP_SESSION_UUID_LEN);
    ngx_memcpy(node->project, project, NGX_HTTP_SESSION_UUID_LEN);
    ngx_queue_init(&node->waiters);

    node->expiry.handler = ngx_http_session_poll_expired;
    node->expiry.data = node;
    node->expiry.log = ngx_cycle->log;

    ngx_rbtree_insert(&ngx_http_session_poll_tree, &node->node);
    ngx_queue_insert_tail(&ngx_http_session_poll_nodes, &node->all);

    return node;
}


/*
 * Something may have changed (final 0: a notification), or a waiter
 * must answer now (final 1): read, or read again after the running
 * read.  A read that cannot start answers the node's waiters 503.
 */

static void
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

static ngx_int_t
ngx_http_session_poll_read(ngx_http_session_poll_node_t *node)
{
    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "session poll: reading %s", node->sid);

    node->reading = 1;
    node->queued = 1;
    node->again = 0;

    ngx_queue_insert_tail(&ngx_http_session_poll_pending, &node->pending);

    if (!ngx_http_session_poll_read_ev.posted) {
        ngx_post_event(&ngx_http_session_poll_read_ev, &ngx_posted_events);
    }

    return NGX_OK;
}


/* the queued reads, NGX_HTTP_SESSION_POLL_BATCH sessions a statement */

static void
ngx_http_session_poll_send_reads(ngx_event_t *ev)
{
    u_char                         *pp, *ps;
    ngx_uint_t                      i, n;
    ngx_int_t                       rc;
    ngx_pool_t                     *pool;
    ngx_queue_t                    *q;
    ngx_http_session_err_e          err;
    ngx_http_session_db_query_t    *query;
    ngx_http_session_poll_node_t   *node;
    ngx_http_session_poll_batch_t  *batch;

    while (!ngx_queue_empty(&ngx_http_session_poll_pending)) {

        q = NULL;
        batch = NULL;
        query = NULL;
        pp = NULL;
        ps = NULL;
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

            query = ngx_http_session_db_query_create_pool(pool,
                                              ngx_cycle->log,
                                              NGX_HTTP_SESSION_SQL_POLL,
                                              ngx_http_session_poll_result);
        }

        n = 0;

        if (batch && pp && ps && query) {
            batch->pool = pool;

            query->stmt = NGX_HTTP_SESSION_STMT_POLL;
            query->result_format = 1;
            query->data = batch;

            /* one read answers many waiters: not held behind writes */
            query->first = 1;

            ngx_http_session_db_param(query, pp, 0, 0);
            ngx_http_session_db_param(query, ps, 0, 0);
            ngx_http_session_db_param(query, NGX_HTTP_SESSION_POLL_IMAGES,
                                      0, 0);

            *pp++ = '{';
            *ps++ = '{';
        }

        /* the nodes of this statement leave the queue */

        while (n < NGX_HTTP_SESSION_POLL_BATCH
               && !ngx_queue_empty(&ngx_http_session_poll_pending))
        {
            q = ngx_queue_head(&ngx_http_session_poll_pending);
            ngx_queue_remove(q);

            node = ngx_queue_data(q, ngx_http_session_poll_node_t, pending);
            node->queued = 0;

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

        if (batch && pp && ps && query) {
            batch->n = n;

            *pp++ = '}'; *pp = '\0';
            *ps++ = '}'; *ps = '\0';

            rc = ngx_http_session_db_query_run(query);

            if (rc == NGX_OK) {
                ngx_http_session_stat(poll_reads, 1);

                for (i = 0; i < n; i++) {
                    batch->nodes[i]->batch = batch;
                }

                ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                               "session poll: one read of %ui sessions", n);

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
    u_char                         *v;
    int64_t                         k;
    ngx_uint_t                      i, j;
    int                             row, first, rows, ntuples, col;
    ngx_pool_t                     *pool;
    ngx_http_session_poll_node_t   *node;
    ngx_http_session_poll_batch_t  *batch;

    batch = q->data;
    pool = batch->pool;

    for (i = 0; i < batch->n; i++) {
        batch->nodes[i]->batch = NULL;
        batch->nodes[i]->reading = 0;
    }

    ntuples = (res && PQresultStatus(res) == PGRES_TUPLES_OK)
              ? PQntuples(res) : 0;

    col = NGX_HTTP_SESSION_SESSION_NCOLS + NGX_HTTP_SESSION_IMAGE_NCOLS;
    row = 0;

    for (i = 0; i < batch->n; i++) {
        node = batch->nodes[i];
        first = row;

        /* the rows of the (i + 1)-th session: k, a bigint, is i + 1 */

        while (row < ntuples
               && PQnfields(res) == col + 1
               && PQgetlength(res, row, col) == 8)
        {
            v = (u_char *) PQgetvalue(res, row, col);
            k = 0;

            for (j = 0; j < 8; j++) {
                k = (k << 8) | v[j];
            }

            if (k != (int64_t) i + 1) {
                break;
            }

            row++;
        }

        rows = row - first;

        ngx_http_session_poll_node_result(node, q->log, res, first, rows);
    }

    ngx_destroy_pool(pool);
}


/* a node's rows of the result: answers, or the node settles */

static void
ngx_http_session_poll_node_result(ngx_http_session_poll_node_t *node,
    ngx_log_t *log, PGresult *res, int first, int rows)
{
    int                              n;
    int64_t                          expires_us;
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

            /* those left wait: their requests can go */

            for (wq = ngx_queue_head(&node->waiters);
                 wq != ngx_queue_sentinel(&node->waiters);
                 wq = ngx_queue_next(wq))
            {
                ngx_http_session_poll_park_later(
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
                          + NGX_HTTP_SESSION_IMAGE_NCOLS + 1
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

    if (PQgetlength(res, first, NGX_HTTP_SESSION_COL_S_STATUS)
        == sizeof("expired") - 1
        && ngx_strncmp(PQgetvalue(res, first, NGX_HTTP_SESSION_COL_S_STATUS),
                       "expired", sizeof("expired") - 1)
           == 0)
    {
        return NGX_HTTP_SESSION_ERR_SESSION_EXPIRED;
    }

    if (!PQgetisnull(res, first, NGX_HTTP_SESSION_SESSION_NCOLS)) {
        *n = rows;
        return NGX_HTTP_SESSION_ERR_LAST;
    }

    if (PQgetlength(res, first, NGX_HTTP_SESSION_COL_S_STATUS)
        == sizeof("completed") - 1
        && ngx_strncmp(PQgetvalue(res, first, NGX_HTTP_SESSION_COL_S_STATUS),
                       "completed", sizeof("completed") - 1)
           == 0)
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
    ngx_int_t                 rc;
    ngx_queue_t               list, *q, *next;
    ngx_connection_t         *c;
    ngx_http_request_t       *r;
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

        if (p->timer.timer_set) {
            ngx_del_timer(&p->timer);
        }

        if (p->parking.next) {
            ngx_queue_remove(&p->parking);
            p->parking.next = NULL;
        }

        r = p->request;

        if (r == NULL) {
            r = ngx_http_session_unpark(p->park);
            if (r == NULL) {
                continue;
            }
        }

        c = r->connection;

        if (err != NGX_HTTP_SESSION_ERR_LAST) {
            rc = ngx_http_session_error(r, err);

        } else {
            rc = ngx_http_session_poll_send(r, a);
        }

        ngx_http_finalize_request(r, rc);
        ngx_http_run_posted_requests(c);
    }

    node->busy = 0;
}


/* the shared answer's bytes, held until this request is over */

static ngx_int_t
ngx_http_session_poll_send(ngx_http_request_t *r,
    ngx_http_session_poll_answer_t *a)
{
    ngx_buf_t           *b;
    ngx_pool_cleanup_t  *cln;

    if (a == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    b = ngx_calloc_buf(r->pool);
    cln = ngx_pool_cleanup_add(r->pool, 0);

    if (b == NULL || cln == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    cln->handler = ngx_http_session_poll_answer_release;
    cln->data = a;
    a->refs++;

    b->pos = a->body->pos;
    b->last = a->body->last;
    b->memory = 1;

    return ngx_http_session_send_json(r, NGX_HTTP_OK, b);
}


static void
ngx_http_session_poll_answer_release(void *data)
{
    ngx_http_session_poll_answer_t  *a = data;

    if (--a->refs == 0) {
        ngx_destroy_pool(a->pool);
    }
}


/* out of the node, timer off; safe to call again */

static void
ngx_http_session_poll_leave(ngx_http_session_poll_t *p)
{
    ngx_http_session_poll_node_t  *node;

    if (p->timer.timer_set) {
        ngx_del_timer(&p->timer);
    }

    if (p->parking.next) {
        ngx_queue_remove(&p->parking);
        p->parking.next = NULL;
    }

    node = p->node;

    if (node == NULL) {
        return;
    }

    if (p->queue.next) {
        ngx_queue_remove(&p->queue);
        ngx_http_session_gauge(polls_waiting, -1);
    }

    p->node = NULL;

    ngx_http_session_poll_release(node);
}


/* a node with no waiter, no read and no answer under way goes */

static void
ngx_http_session_poll_release(ngx_http_session_poll_node_t *node)
{
    if (!ngx_queue_empty(&node->waiters) || node->reading || node->busy) {
        return;
    }

    if (node->expiry.timer_set) {
        ngx_del_timer(&node->expiry);
    }

    ngx_rbtree_delete(&ngx_http_session_poll_tree, &node->node);
    ngx_queue_remove(&node->all);

    /* to the worker's free nodes (see ngx_http_session_poll_node_alloc) */
    ngx_queue_insert_head(&ngx_http_session_poll_free, &node->all);
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

    if (ngx_queue_empty(&ngx_http_session_poll_free)) {
        chunk = ngx_alloc(NGX_HTTP_SESSION_POLL_NODE_CHUNK
                          * sizeof(ngx_http_session_poll_node_t), log);
        if (chunk == NULL) {
            return NULL;
        }

        for (i = 0; i < NGX_HTTP_SESSION_POLL_NODE_CHUNK; i++) {
            ngx_queue_insert_tail(&ngx_http_session_poll_free, &chunk[i].all);
        }
    }

    q = ngx_queue_head(&ngx_http_session_poll_free);
    ngx_queue_remove(q);

    return ngx_queue_data(q, ngx_http_session_poll_node_t, all);
}


/* the request goes away, answered or not (client closed, shutdown) */

static void
ngx_http_session_poll_cleanup(void *data)
{
    ngx_http_session_poll_t  *p = data;

    ngx_http_session_poll_leave(p);
}


static void
ngx_http_session_poll_timeout(ngx_event_t *ev)
{
    ngx_http_session_poll_t       *p = ev->data;
    ngx_http_session_poll_node_t  *node;

    node = p->node;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "session poll: timeout on %s", node->sid);

    p->final = 1;

    /* a read that cannot start answers the poll and may empty the node */
    ngx_http_session_poll_want(node, 1);
    ngx_http_session_poll_release(node);
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
ngx_http_session_poll_wake(u_char *sid, size_t len)
{
    u_char                         uuid[16], text[NGX_HTTP_SESSION_UUID_LEN];
    uint32_t                       hash;
    ngx_queue_t                    list, *q;
    ngx_rbtree_node_t             *n, *sentinel, *first;
    ngx_http_session_poll_node_t  *node;

    if (!ngx_http_session_poll_ready
        || ngx_http_session_uuid_parse(sid, len, uuid) != 0)
    {
        return;
    }

    /* the table holds ids as the worker writes them: lower case */
    ngx_http_session_uuid_format(uuid, text);

    hash = ngx_crc32_short(text, NGX_HTTP_SESSION_UUID_LEN);

    /* the leftmost node of the session: its projects follow it in order */

    n = ngx_http_session_poll_tree.root;
    sentinel = ngx_http_session_poll_tree.sentinel;
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
         n = ngx_rbtree_next(&ngx_http_session_poll_tree, n))
    {
        node = (ngx_http_session_poll_node_t *) n;

        ngx_queue_remove(&node->all);
        ngx_queue_insert_tail(&list, &node->all);
    }

    while (!ngx_queue_empty(&list)) {
        q = ngx_queue_head(&list);
        node = ngx_queue_data(q, ngx_http_session_poll_node_t, all);

        ngx_queue_remove(q);
        ngx_queue_insert_tail(&ngx_http_session_poll_nodes, q);

        ngx_http_session_poll_want(node, 0);
        ngx_http_session_poll_release(node);
    }
}


/*
 * Every node reads again (final 0: notifications may have been lost), or
 * every waiter answers after one more read (final 1: shutting down).
 */

static void
ngx_http_session_poll_want_all(ngx_uint_t final)
{
    ngx_queue_t                   *q, *qq, list;
    ngx_http_session_poll_t       *p;
    ngx_http_session_poll_node_t  *node;

    /* a node answered (and freed) by a failed read is out of the list */

    ngx_queue_init(&list);

    if (!ngx_queue_empty(&ngx_http_session_poll_nodes)) {
        ngx_queue_add(&list, &ngx_http_session_poll_nodes);
        ngx_queue_init(&ngx_http_session_poll_nodes);
    }

    while (!ngx_queue_empty(&list)) {
        q = ngx_queue_head(&list);
        node = ngx_queue_data(q, ngx_http_session_poll_node_t, all);

        ngx_queue_remove(q);
        ngx_queue_insert_tail(&ngx_http_session_poll_nodes, q);

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


void
ngx_http_session_poll_wake_all(void)
{
    if (ngx_http_session_poll_ready) {
        ngx_http_session_poll_want_all(0);
    }
}


/*
 * A worker that shuts down gracefully waits for its requests: waiters
 * answer (as at their timeout) instead of holding it for up to
 * session_poll_max_timeout.  The timer is cancelable, so that it does
 * not keep an exiting worker alive by itself.
 */

static void
ngx_http_session_poll_exit_check(ngx_event_t *ev)
{
    if (!ngx_exiting && !ngx_quit && !ngx_terminate) {
        ngx_add_timer(ev, NGX_HTTP_SESSION_POLL_EXIT_CHECK);
        return;
    }

    ngx_http_session_poll_want_all(1);
}


ngx_int_t
ngx_http_session_poll_init_process(ngx_cycle_t *cycle)
{
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);
    if (smcf == NULL || !smcf->enabled) {
        return NGX_OK;
    }

    ngx_rbtree_init(&ngx_http_session_poll_tree,
                    &ngx_http_session_poll_sentinel,
                    ngx_http_session_poll_insert_value);

    ngx_queue_init(&ngx_http_session_poll_nodes);
    ngx_queue_init(&ngx_http_session_poll_free);

    ngx_http_session_poll_exit_ev.handler = ngx_http_session_poll_exit_check;
    ngx_http_session_poll_exit_conn.fd = (ngx_socket_t) -1;
    ngx_http_session_poll_exit_ev.data = &ngx_http_session_poll_exit_conn;
    ngx_http_session_poll_exit_ev.log = cycle->log;
    ngx_http_session_poll_exit_ev.cancelable = 1;

    ngx_add_timer(&ngx_http_session_poll_exit_ev,
                  NGX_HTTP_SESSION_POLL_EXIT_CHECK);

    ngx_queue_init(&ngx_http_session_poll_parking);
    ngx_queue_init(&ngx_http_session_poll_pending);

    ngx_http_session_poll_read_ev.handler = ngx_http_session_poll_send_reads;
    ngx_http_session_poll_read_ev.data = &ngx_http_session_poll_exit_conn;
    ngx_http_session_poll_read_ev.log = cycle->log;

    ngx_http_session_poll_park_ev.handler = ngx_http_session_poll_park_posted;
    ngx_http_session_poll_park_ev.data = &ngx_http_session_poll_exit_conn;
    ngx_http_session_poll_park_ev.log = cycle->log;

    if (ngx_http_session_park_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_session_poll_ready = 1;

    return NGX_OK;
}


/* the requests are gone with the process; the nodes are ours */

void
ngx_http_session_poll_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                      i;
    ngx_queue_t                    *q, *qq;
    ngx_http_session_poll_t        *p;
    ngx_http_session_poll_node_t   *node;
    ngx_http_session_poll_batch_t  *batch;

    if (!ngx_http_session_poll_ready) {
        return;
    }

    if (ngx_http_session_poll_exit_ev.timer_set) {
        ngx_del_timer(&ngx_http_session_poll_exit_ev);
    }

    while (!ngx_queue_empty(&ngx_http_session_poll_nodes)) {
        q = ngx_queue_head(&ngx_http_session_poll_nodes);
        node = ngx_queue_data(q, ngx_http_session_poll_node_t, all);

        while (!ngx_queue_empty(&node->waiters)) {
            qq = ngx_queue_head(&node->waiters);
            p = ngx_queue_data(qq, ngx_http_session_poll_t, queue);

            ngx_queue_remove(qq);
            p->node = NULL;
            ngx_http_session_gauge(polls_waiting, -1);

            if (p->timer.timer_set) {
                ngx_del_timer(&p->timer);
            }

            if (p->request == NULL) {
                /* parked: its connection goes with the process */
                ngx_http_session_park_free(p->park);
            }
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

    if (ngx_http_session_poll_park_ev.posted) {
        ngx_delete_posted_event(&ngx_http_session_poll_park_ev);
    }

    if (ngx_http_session_poll_read_ev.posted) {
        ngx_delete_posted_event(&ngx_http_session_poll_read_ev);
    }

    ngx_http_session_park_exit_process(cycle);

    ngx_http_session_poll_ready = 0;
}

/* the polls that began to wait during the event just handled */

static void
ngx_http_session_poll_park_posted(ngx_event_t *ev)
{
    ngx_queue_t              *q;
    ngx_http_session_poll_t  *p;

    while (!ngx_queue_empty(&ngx_http_session_poll_parking)) {
        q = ngx_queue_head(&ngx_http_session_poll_parking);
        ngx_queue_remove(q);

        p = ngx_queue_data(q, ngx_http_session_poll_t, parking);
        p->parking.next = NULL;

        ngx_http_session_poll_park(p);
    }

}


/*
 * The poll's request goes (see ngx_http_session_park.h): the waiter
 * moves into the park's data, with its place in the node and its timer.
 */

static void
ngx_http_session_poll_park(ngx_http_session_poll_t *p)
{
    ngx_msec_t                left;
    ngx_http_request_t       *r;
    ngx_http_session_park_t  *pk;
    ngx_http_session_poll_t  *np;

    r = p->request;

    if (p->node == NULL) {
        return;
    }

    pk = ngx_http_session_park_prepare(r, sizeof(ngx_http_session_poll_t),
                                       ngx_http_session_poll_parked_gone);
    if (pk == NULL) {
        return;
    }

    np = ngx_http_session_park_data(pk);

    np->node = p->node;
    np->park = pk;
    np->final = p->final;

    ngx_queue_insert_after(&p->queue, &np->queue);
    ngx_queue_remove(&p->queue);
    p->node = NULL;

    if (p->timer.timer_set) {
        left = ((ngx_msec_int_t) (p->timer.timer.key - ngx_current_msec) > 0)
               ? p->timer.timer.key - ngx_current_msec : 0;

        ngx_del_timer(&p->timer);

        np->timer.handler = ngx_http_session_poll_timeout;
        np->timer.data = np;
        np->timer.log = r->connection->log;

        ngx_add_timer(&np->timer, left);
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "session poll: parking on %s", np->node->sid);

    /* the request's cleanup finds p out of the node: it does nothing */

    ngx_http_session_park_request(pk, r);
}


/* the client of a parked poll went away: the waiter leaves */

static void
ngx_http_session_poll_parked_gone(ngx_http_session_park_t *pk)
{
    ngx_http_session_poll_leave(ngx_http_session_park_data(pk));
}




/* by hash, then session id, then project */

static ngx_int_t
ngx_http_session_poll_cmp(ngx_http_session_poll_node_t *a, uint32_t hash,
    u_char *sid, u_char *project)
{
    ngx_int_t  rc;

    if (hash != a->node.key) {
        return (hash < a->node.key) ? -1 : 1;
    }

    rc = ngx_memcmp(sid, a->sid, NGX_HTTP_SESSION_UUID_LEN);

    if (rc == 0) {
        rc = ngx_memcmp(project, a->project, NGX_HTTP_SESSION_UUID_LEN);
    }

    return rc;
}


static void
ngx_http_session_poll_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t             **p;
    ngx_http_session_poll_node_t   *n;

    n = (ngx_http_session_poll_node_t *) node;

    for ( ;; ) {

        p = (ngx_http_session_poll_cmp((ngx_http_session_poll_node_t *) temp,
                                       n->node.key, n->sid, n->project)
             < 0)
            ? &temp->left : &temp->right;

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}
