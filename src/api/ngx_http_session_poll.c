/*
 * The long poll: GET /api/v1/sessions/{sid}/poll, and its waiters.
 *
 * A poll joins the node of its session in the worker's table (see
 * ngx_http_session_poll_node.c), which reads the session once for every
 * poll that waits on it and hands each its answer back here.  Each
 * waiter has a timer for its timeout; a client that goes away leaves at
 * once.
 *
 * A plain HTTP/1.x poll known to wait (its node settled) is parked
 * (session_poll_park, ngx_http_session_park.h) once the event that
 * handled it is over: its nginx request is freed (the request pool and
 * the header buffer are most of a waiting poll's memory), the waiter
 * moves into the park's record, and the answer is sent on a request
 * made again from the record.
 */

#include "ngx_http_session_poll.h"
#include "ngx_http_session_poll_node.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_park.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_stats.h"


/* how soon a worker that shuts down answers its waiters, milliseconds */
#define NGX_HTTP_SESSION_POLL_EXIT_CHECK  1000


/* the worker's own */
typedef struct {
    /* the polls to park once the event that made them wait is over */
    ngx_queue_t                   parking;
    ngx_event_t                   park_ev;
    ngx_event_t                   exit_ev;
    /* nginx's event traces print ev->data as a connection's fd */
    ngx_connection_t              dummy;
} ngx_http_session_poll_worker_t;


static ngx_int_t ngx_http_session_poll_timeout_arg(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static ngx_int_t ngx_http_session_poll_join(ngx_http_session_poll_t *p,
    ngx_msec_t timeout);
static void ngx_http_session_poll_deliver(ngx_http_session_poll_t *p,
    ngx_http_session_err_e err, ngx_http_session_poll_answer_t *a);
static ngx_int_t ngx_http_session_poll_send(ngx_http_request_t *r,
    ngx_http_session_poll_answer_t *a);
static void ngx_http_session_poll_stop(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_leave(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_cleanup(void *data);
static void ngx_http_session_poll_timeout(ngx_event_t *ev);
static void ngx_http_session_poll_exit_check(ngx_event_t *ev);
static void ngx_http_session_poll_drop(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_park_later(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_park_posted(ngx_event_t *ev);
static void ngx_http_session_poll_park(ngx_http_session_poll_t *p);
static void ngx_http_session_poll_parked_gone(ngx_http_session_park_t *pk);


static ngx_http_session_poll_worker_t  ngx_http_session_poll_worker;

static const ngx_http_session_arg_t  ngx_http_session_poll_args[] = {
    { ngx_string("timeout"), ngx_http_session_poll_timeout_arg, 0, 0 },
    { ngx_null_string, NULL, 0, 0 }
};


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

    if (!ngx_http_session_poll_table_ready()) {
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

    p->final = (timeout == 0 || ngx_http_session_stopping());

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

    ngx_queue_insert_tail(&ngx_http_session_poll_worker.parking, &p->parking);

    if (!ngx_http_session_poll_worker.park_ev.posted) {
        ngx_post_event(&ngx_http_session_poll_worker.park_ev,
                       &ngx_posted_events);
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
    ngx_uint_t                     covered;
    ngx_http_session_poll_node_t  *node;

    node = p->node;

    ngx_queue_insert_tail(&node->waiters, &p->queue);
    ngx_http_session_gauge(polls_waiting, 1);

    covered = 0;

    if (!p->final) {
        p->timer.handler = ngx_http_session_poll_timeout;
        p->timer.data = p;
        p->timer.log = p->request->connection->log;

        ngx_add_timer(&p->timer, timeout);

        covered = ngx_http_session_poll_covers(node, timeout);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, p->request->connection->log, 0,
                   "session poll: waiting on %s for %M ms%s", node->sid,
                   timeout, node->reading ? ", joins a read" : "");

    if (node->reading) {
        /* a read under way was sent before this poll asked; not a queued one */
        node->again |= (p->final && !node->queued);
        return NGX_OK;
    }

    /* the node's arm must outlast this wait, or a write may not wake it */

    if (node->settled && covered) {
        return NGX_OK;
    }

    return ngx_http_session_poll_read(node);
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


/* the table answers a waiter: err, or the shared answer a */

static void
ngx_http_session_poll_deliver(ngx_http_session_poll_t *p,
    ngx_http_session_err_e err, ngx_http_session_poll_answer_t *a)
{
    ngx_int_t            rc;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    ngx_http_session_poll_stop(p);

    r = p->request;

    if (r == NULL) {
        r = ngx_http_session_unpark(p->park);
        if (r == NULL) {
            return;
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


/* the timer off, and off the list of waiters to park; safe to call again */

static void
ngx_http_session_poll_stop(ngx_http_session_poll_t *p)
{
    if (p->timer.timer_set) {
        ngx_del_timer(&p->timer);
    }

    if (p->parking.next) {
        ngx_queue_remove(&p->parking);
        p->parking.next = NULL;
    }
}


/* out of the node, timer off; safe to call again */

static void
ngx_http_session_poll_leave(ngx_http_session_poll_t *p)
{
    ngx_http_session_poll_node_t  *node;

    ngx_http_session_poll_stop(p);

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


void
ngx_http_session_poll_wake(u_char *sid, size_t len)
{
    ngx_http_session_poll_node_wake(sid, len);
}


void
ngx_http_session_poll_wake_all(void)
{
    if (ngx_http_session_poll_table_ready()) {
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
    if (!ngx_http_session_stopping()) {
        ngx_add_timer(ev, NGX_HTTP_SESSION_POLL_EXIT_CHECK);
        return;
    }

    ngx_http_session_poll_want_all(1);
}


ngx_int_t
ngx_http_session_poll_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_session_poll_worker_t  *w;

    w = &ngx_http_session_poll_worker;

    w->dummy.fd = (ngx_socket_t) -1;

    w->exit_ev.handler = ngx_http_session_poll_exit_check;
    w->exit_ev.data = &w->dummy;
    w->exit_ev.log = cycle->log;
    w->exit_ev.cancelable = 1;

    ngx_add_timer(&w->exit_ev, NGX_HTTP_SESSION_POLL_EXIT_CHECK);

    ngx_queue_init(&w->parking);

    w->park_ev.handler = ngx_http_session_poll_park_posted;
    w->park_ev.data = &w->dummy;
    w->park_ev.log = cycle->log;

    if (ngx_http_session_park_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_session_poll_table_init(cycle,
                                            ngx_http_session_poll_deliver,
                                            ngx_http_session_poll_park_later);
}


void
ngx_http_session_poll_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_session_poll_worker_t  *w;

    if (!ngx_http_session_poll_table_ready()) {
        return;
    }

    w = &ngx_http_session_poll_worker;

    if (w->exit_ev.timer_set) {
        ngx_del_timer(&w->exit_ev);
    }

    ngx_http_session_poll_table_exit(ngx_http_session_poll_drop);

    if (w->park_ev.posted) {
        ngx_delete_posted_event(&w->park_ev);
    }

    ngx_http_session_park_exit_process(cycle);
}


/* the process ends: a waiter's timer goes, a parked one's connection too */

static void
ngx_http_session_poll_drop(ngx_http_session_poll_t *p)
{
    if (p->timer.timer_set) {
        ngx_del_timer(&p->timer);
    }

    if (p->request == NULL) {
        ngx_http_session_park_free(p->park);
    }
}


/* the polls that began to wait during the event just handled */

static void
ngx_http_session_poll_park_posted(ngx_event_t *ev)
{
    ngx_queue_t              *q;
    ngx_http_session_poll_t  *p;

    while (!ngx_queue_empty(&ngx_http_session_poll_worker.parking)) {
        q = ngx_queue_head(&ngx_http_session_poll_worker.parking);
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
