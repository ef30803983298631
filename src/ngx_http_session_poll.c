/*
 * The long poll.
 *
 * A poll reads the session and its unacknowledged images with one
 * prepared statement (NGX_HTTP_SESSION_SQL_POLL).
 * When there is nothing to answer yet, the request waits in this
 * worker's table, keyed by session id, holding no database connection,
 * with a timer for its timeout.  The LISTEN connection hands every
 * "uploaded:", "completed:" and "expired:<sid>" of session_events to
 * ngx_http_session_poll_wake(): a hint, after which each waiter of that
 * session reads again and either answers or goes on waiting.
 *
 * A waiter is in the table from before its first read until it answers,
 * so that a notification that arrives while a read is under way is not
 * lost: the read that is running may have missed the change, and the
 * waiter reads once more when it comes back empty.
 */

#include "ngx_http_session_poll.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"


/* the most images one answer carries (API.md section 5) */
#define NGX_HTTP_SESSION_POLL_IMAGES      "100"
/* how soon a worker that shuts down answers its waiters, milliseconds */
#define NGX_HTTP_SESSION_POLL_EXIT_CHECK  1000


/* the waiters of one session */
typedef struct {
    /* key: CRC32 of the session id's text */
    ngx_rbtree_node_t              node;
    ngx_queue_t                    waiters;
    u_char                         sid[NGX_HTTP_SESSION_UUID_LEN];
    /* its waiters are being woken: the node stays until that is over */
    unsigned                       busy:1;
} ngx_http_session_poll_node_t;


struct ngx_http_session_poll_s {
    /* in node->waiters, and in the worker's list of every waiter */
    ngx_queue_t                    queue;
    ngx_queue_t                    all;
    /* NULL once the poll no longer waits */
    ngx_http_session_poll_node_t  *node;
    ngx_http_request_t            *request;
    ngx_event_t                    timer;
    u_char                         sid[NGX_HTTP_SESSION_UUID_LEN + 1];

    /* a read of session_poll() is under way */
    unsigned                       reading:1;
    /* a wake-up came during that read: read again if it finds nothing */
    unsigned                       again:1;
    /* timed out (or timeout 0, or shutting down): the next read answers */
    unsigned                       final:1;
};


static ngx_int_t ngx_http_session_poll_wait(ngx_http_session_poll_t *p,
    ngx_msec_t timeout);
static ngx_int_t ngx_http_session_poll_read(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_result(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_poll_kick(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_fail(ngx_http_session_poll_t *p,
    ngx_int_t rc);
static void ngx_http_session_poll_leave(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_cleanup(void *data);
static void ngx_http_session_poll_timeout(ngx_event_t *ev);
static void ngx_http_session_poll_exit_check(ngx_event_t *ev);
static ngx_http_session_poll_node_t *ngx_http_session_poll_lookup(
    u_char *sid, uint32_t hash);
static void ngx_http_session_poll_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);


static ngx_rbtree_t        ngx_http_session_poll_tree;
static ngx_rbtree_node_t   ngx_http_session_poll_sentinel;
static ngx_queue_t         ngx_http_session_poll_all;
static ngx_event_t         ngx_http_session_poll_exit_ev;
/* nginx's timer traces print ev->data as a connection's fd */
static ngx_connection_t    ngx_http_session_poll_exit_conn;
/* the table exists: this is a worker with session_api */
static ngx_uint_t          ngx_http_session_poll_ready;


/* GET /api/v1/sessions/{sid}/poll */

ngx_int_t
ngx_http_session_poll(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    u_char                       *pos, uuid[16];
    u_char                        max[NGX_TIME_T_LEN];
    time_t                        timeout;
    ngx_int_t                     rc;
    ngx_str_t                     name, value, text;
    long long                     n;
    ngx_http_cleanup_t           *cln;
    ngx_http_session_poll_t      *p;
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);

    /* stage 4: the query string */

    timeout = slcf->poll_timeout;
    pos = r->args.data;

    for ( ;; ) {
        rc = ngx_http_session_arg_next(r, &pos, &name, &value);

        if (rc == NGX_DONE) {
            break;
        }

        if (rc == NGX_ERROR) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        if (name.len == 7 && ngx_strncmp(name.data, "timeout", 7) == 0) {
            if (ngx_http_session_parse_int(value.data, value.len, 0,
                                           (long long) slcf->poll_max_timeout,
                                           &n)
                != 0)
            {
                text.data = max;
                text.len = ngx_sprintf(max, "%T", slcf->poll_max_timeout)
                           - max;

                return ngx_http_session_error_value(r,
                                                NGX_HTTP_SESSION_ERR_TIMEOUT,
                                                &text);
            }

            timeout = (time_t) n;
            continue;
        }

        return ngx_http_session_unknown_arg(r, &name);
    }

    /* stage 5 starts here: a malformed id is a session that does not exist */

    if (ngx_http_session_uuid_parse(ctx->route.sid, ctx->route.sid_len, uuid)
        != 0)
    {
        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_SESSION_NOT_FOUND);
    }

    p = ngx_pcalloc(r->pool, sizeof(ngx_http_session_poll_t));
    if (p == NULL || ngx_http_session_project(r, ctx) == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    cln = ngx_http_cleanup_add(r, 0);
    if (cln == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    cln->handler = ngx_http_session_poll_cleanup;
    cln->data = p;

    p->request = r;
    ngx_http_session_uuid_format(uuid, p->sid);
    p->sid[NGX_HTTP_SESSION_UUID_LEN] = '\0';

    ctx->poll = p;

    if (timeout == 0 || ngx_exiting || !ngx_http_session_poll_ready) {
        p->final = 1;

    } else {
        if (ngx_http_session_poll_wait(p, (ngx_msec_t) timeout * 1000)
            != NGX_OK)
        {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        /* a client that goes away ends the wait at once */
        r->read_event_handler = ngx_http_test_reading;
    }

    rc = ngx_http_session_poll_read(p);

    if (rc != NGX_OK) {
        ngx_http_session_poll_leave(p);

        return ngx_http_session_error(r, (rc == NGX_DECLINED)
                                         ? NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE
                                         : NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    /* the request lives until the poll answers, however many reads */
    r->main->count++;

    return NGX_DONE;
}


/* enters the table and arms the timeout */

static ngx_int_t
ngx_http_session_poll_wait(ngx_http_session_poll_t *p, ngx_msec_t timeout)
{
    uint32_t                       hash;
    ngx_http_session_poll_node_t  *node;

    hash = ngx_crc32_short(p->sid, NGX_HTTP_SESSION_UUID_LEN);

    node = ngx_http_session_poll_lookup(p->sid, hash);

    if (node == NULL) {
        node = ngx_alloc(sizeof(ngx_http_session_poll_node_t),
                         p->request->connection->log);
        if (node == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(node, sizeof(ngx_http_session_poll_node_t));

        node->node.key = hash;
        ngx_memcpy(node->sid, p->sid, NGX_HTTP_SESSION_UUID_LEN);
        ngx_queue_init(&node->waiters);

        ngx_rbtree_insert(&ngx_http_session_poll_tree, &node->node);
    }

    ngx_queue_insert_tail(&node->waiters, &p->queue);
    ngx_queue_insert_tail(&ngx_http_session_poll_all, &p->all);
    p->node = node;

    p->timer.handler = ngx_http_session_poll_timeout;
    p->timer.data = p;
    p->timer.log = p->request->connection->log;

    ngx_add_timer(&p->timer, timeout);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, p->request->connection->log, 0,
                   "session poll: waiting on %s for %M ms", p->sid, timeout);

    return NGX_OK;
}


/*
 * One call of session_poll(): NGX_OK (the result comes from the event
 * loop), NGX_DECLINED (no database now: 503) or NGX_ERROR (500).
 */

static ngx_int_t
ngx_http_session_poll_read(ngx_http_session_poll_t *p)
{
    ngx_http_request_t           *r;
    ngx_http_session_ctx_t       *ctx;
    ngx_http_session_db_query_t  *q;

    r = p->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_POLL,
                                       ngx_http_session_poll_result);
    if (q == NULL) {
        return NGX_ERROR;
    }

    q->data = p;

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(q, p->sid, 0, 0);
    ngx_http_session_db_param(q, NGX_HTTP_SESSION_POLL_IMAGES, 0, 0);

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        return NGX_DECLINED;
    }

    p->reading = 1;
    p->again = 0;

    return NGX_OK;
}


/* the session's columns and an unacknowledged image per row, or none */

static void
ngx_http_session_poll_result(ngx_http_session_db_query_t *q, PGresult *res)
{
    int                       n;
    ngx_int_t                 rc;
    ngx_buf_t                *b;
    ngx_http_request_t       *r;
    ngx_http_session_err_e    err;
    ngx_http_session_poll_t  *p;

    p = q->data;
    r = p->request;

    p->reading = 0;

    err = ngx_http_session_check(q, res, NGX_HTTP_SESSION_COL_S_PROJECT,
                                 NGX_HTTP_SESSION_COL_S_STATUS);

    n = 0;

    if (err == NGX_HTTP_SESSION_ERR_LAST) {
        if (PQnfields(res) != NGX_HTTP_SESSION_SESSION_NCOLS
                              + NGX_HTTP_SESSION_IMAGE_NCOLS)
        {
            err = NGX_HTTP_SESSION_ERR_INTERNAL;

        } else if (!PQgetisnull(res, 0, NGX_HTTP_SESSION_SESSION_NCOLS)) {
            n = PQntuples(res);

        } else if (PQgetlength(res, 0, NGX_HTTP_SESSION_COL_S_STATUS)
                   == sizeof("completed") - 1
                   && ngx_strncmp(PQgetvalue(res, 0,
                                             NGX_HTTP_SESSION_COL_S_STATUS),
                                  "completed", sizeof("completed") - 1)
                      == 0)
        {
            /* completed, and no image waits for an acknowledgement */
            err = NGX_HTTP_SESSION_ERR_ALL_ACKNOWLEDGED;
        }
    }

    /* nothing to deliver yet, and time is left: wait on */

    if (err == NGX_HTTP_SESSION_ERR_LAST && n == 0 && !p->final) {
        if (!p->again) {
            ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                           "session poll: nothing yet on %s", p->sid);
            return;
        }

        rc = ngx_http_session_poll_read(p);

        if (rc != NGX_OK) {
            ngx_http_session_poll_fail(p, rc);
        }

        return;
    }

    ngx_http_session_poll_leave(p);

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_finalize_request(r, ngx_http_session_error(r, err));
        return;
    }

    b = ngx_http_session_render_poll(r, res, n);
    if (b == NULL) {
        ngx_http_finalize_request(r, ngx_http_session_error(r,
                                             NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_session_send_json(r, NGX_HTTP_OK, b));
}


/* a hint for one waiter: read again, or again after the running read */

static void
ngx_http_session_poll_kick(ngx_http_session_poll_t *p)
{
    ngx_int_t          rc;
    ngx_connection_t  *c;

    if (p->reading) {
        p->again = 1;
        return;
    }

    c = p->request->connection;

    rc = ngx_http_session_poll_read(p);

    if (rc != NGX_OK) {
        ngx_http_session_poll_fail(p, rc);
        ngx_http_run_posted_requests(c);
    }
}


/* a read could not start: the poll answers 503 (or 500) now */

static void
ngx_http_session_poll_fail(ngx_http_session_poll_t *p, ngx_int_t rc)
{
    ngx_http_request_t  *r;

    r = p->request;

    ngx_http_session_poll_leave(p);

    ngx_http_finalize_request(r, ngx_http_session_error(r,
                                    (rc == NGX_DECLINED)
                                    ? NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE
                                    : NGX_HTTP_SESSION_ERR_INTERNAL));
}


/* out of the table, timer off; safe to call again */

static void
ngx_http_session_poll_leave(ngx_http_session_poll_t *p)
{
    ngx_http_session_poll_node_t  *node;

    if (p->timer.timer_set) {
        ngx_del_timer(&p->timer);
    }

    node = p->node;

    if (node == NULL) {
        return;
    }

    ngx_queue_remove(&p->queue);
    ngx_queue_remove(&p->all);
    p->node = NULL;

    if (ngx_queue_empty(&node->waiters) && !node->busy) {
        ngx_rbtree_delete(&ngx_http_session_poll_tree, &node->node);
        ngx_free(node);
    }
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
    ngx_http_session_poll_t  *p = ev->data;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "session poll: timeout on %s", p->sid);

    p->final = 1;

    ngx_http_session_poll_kick(p);
}


void
ngx_http_session_poll_wake(u_char *sid, size_t len)
{
    u_char                         uuid[16], text[NGX_HTTP_SESSION_UUID_LEN];
    uint32_t                       hash;
    ngx_queue_t                   *q, *next;
    ngx_http_session_poll_t       *p;
    ngx_http_session_poll_node_t  *node;

    if (!ngx_http_session_poll_ready
        || ngx_http_session_uuid_parse(sid, len, uuid) != 0)
    {
        return;
    }

    /* the table holds ids as the worker writes them: lower case */
    ngx_http_session_uuid_format(uuid, text);

    hash = ngx_crc32_short(text, NGX_HTTP_SESSION_UUID_LEN);

    node = ngx_http_session_poll_lookup(text, hash);
    if (node == NULL) {
        return;
    }

    node->busy = 1;

    for (q = ngx_queue_head(&node->waiters);
         q != ngx_queue_sentinel(&node->waiters);
         q = next)
    {
        next = ngx_queue_next(q);
        p = ngx_queue_data(q, ngx_http_session_poll_t, queue);

        ngx_http_session_poll_kick(p);
    }

    node->busy = 0;

    if (ngx_queue_empty(&node->waiters)) {
        ngx_rbtree_delete(&ngx_http_session_poll_tree, &node->node);
        ngx_free(node);
    }
}


void
ngx_http_session_poll_wake_all(void)
{
    ngx_queue_t              *q, *next;
    ngx_http_session_poll_t  *p;

    if (!ngx_http_session_poll_ready) {
        return;
    }

    for (q = ngx_queue_head(&ngx_http_session_poll_all);
         q != ngx_queue_sentinel(&ngx_http_session_poll_all);
         q = next)
    {
        next = ngx_queue_next(q);
        p = ngx_queue_data(q, ngx_http_session_poll_t, all);

        ngx_http_session_poll_kick(p);
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
    ngx_queue_t              *q, *next;
    ngx_http_session_poll_t  *p;

    if (!ngx_exiting && !ngx_quit && !ngx_terminate) {
        ngx_add_timer(ev, NGX_HTTP_SESSION_POLL_EXIT_CHECK);
        return;
    }

    for (q = ngx_queue_head(&ngx_http_session_poll_all);
         q != ngx_queue_sentinel(&ngx_http_session_poll_all);
         q = next)
    {
        next = ngx_queue_next(q);
        p = ngx_queue_data(q, ngx_http_session_poll_t, all);

        p->final = 1;
        ngx_http_session_poll_kick(p);
    }
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

    ngx_queue_init(&ngx_http_session_poll_all);

    ngx_http_session_poll_exit_ev.handler = ngx_http_session_poll_exit_check;
    ngx_http_session_poll_exit_conn.fd = (ngx_socket_t) -1;
    ngx_http_session_poll_exit_ev.data = &ngx_http_session_poll_exit_conn;
    ngx_http_session_poll_exit_ev.log = cycle->log;
    ngx_http_session_poll_exit_ev.cancelable = 1;

    ngx_add_timer(&ngx_http_session_poll_exit_ev,
                  NGX_HTTP_SESSION_POLL_EXIT_CHECK);

    ngx_http_session_poll_ready = 1;

    return NGX_OK;
}


/* the requests are gone with the process; their nodes are ours */

void
ngx_http_session_poll_exit_process(ngx_cycle_t *cycle)
{
    ngx_queue_t              *q;
    ngx_http_session_poll_t  *p;

    if (!ngx_http_session_poll_ready) {
        return;
    }

    if (ngx_http_session_poll_exit_ev.timer_set) {
        ngx_del_timer(&ngx_http_session_poll_exit_ev);
    }

    while (!ngx_queue_empty(&ngx_http_session_poll_all)) {
        q = ngx_queue_head(&ngx_http_session_poll_all);
        p = ngx_queue_data(q, ngx_http_session_poll_t, all);

        ngx_http_session_poll_leave(p);
    }

    ngx_http_session_poll_ready = 0;
}


static ngx_http_session_poll_node_t *
ngx_http_session_poll_lookup(u_char *sid, uint32_t hash)
{
    ngx_int_t                      rc;
    ngx_rbtree_node_t             *node, *sentinel;
    ngx_http_session_poll_node_t  *pn;

    node = ngx_http_session_poll_tree.root;
    sentinel = ngx_http_session_poll_tree.sentinel;

    while (node != sentinel) {

        if (hash != node->key) {
            node = (hash < node->key) ? node->left : node->right;
            continue;
        }

        pn = (ngx_http_session_poll_node_t *) node;

        rc = ngx_memcmp(sid, pn->sid, NGX_HTTP_SESSION_UUID_LEN);

        if (rc == 0) {
            return pn;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    return NULL;
}


static void
ngx_http_session_poll_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t             **p;
    ngx_http_session_poll_node_t   *n, *t;

    for ( ;; ) {

        n = (ngx_http_session_poll_node_t *) node;
        t = (ngx_http_session_poll_node_t *) temp;

        if (node->key != temp->key) {
            p = (node->key < temp->key) ? &temp->left : &temp->right;

        } else {
            p = (ngx_memcmp(n->sid, t->sid, NGX_HTTP_SESSION_UUID_LEN) < 0)
                ? &temp->left : &temp->right;
        }

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
