/*
 * One LISTEN connection per node, not one per worker.
 *
 * PostgreSQL before version 19 signals every backend that listens in the
 * database at each NOTIFY, whatever channel it listens on.  With a LISTEN
 * connection in each worker, every upload and completion woke as many
 * backends as the node has workers (docs/decisions.md (ye)).  So worker 0
 * alone listens (db_listen.c) and passes on what the other workers need:
 *
 *   - a session's event, to the workers that hold a node of the long poll
 *     (a poll that reads or waits), counted in shared memory;
 *   - session_webhooks, to every worker: each runs a dispatcher;
 *   - "events lost" (LISTEN in effect again), to every worker, which
 *     also has its connections that wait out a backoff try at once
 *     (the server is reachable: see ngx_http_session_db_conn_reachable())
 *     before its polls read again.
 *
 * The auth cache is in session_limit_zone: worker 0 empties it for all.
 *
 * A worker's messages come over a datagram socket pair of its own, made
 * by the master for each configuration (init_module) and inherited at
 * fork; worker 0 writes, the worker reads.  Pairs the master cannot make
 * leave the configuration without a relay: each worker listens itself.
 * Events that arrive in one pass of worker 0's event loop leave
 * together, a datagram per worker (from a posted event).  A datagram
 * the socket does not take (the worker is behind by as many as its send
 * buffer holds, some hundreds) is made good as a lost LISTEN connection
 * is: the worker's "lost" flag is set before a last try, and a worker
 * that finds it set once it has read its socket wakes every poll to read
 * its session again.
 *
 * Why a count of poll nodes suffices: a node is made before its first
 * read is sent, and counted then.  A change that read did not see is
 * committed after the read's snapshot, so notified after the count went
 * up; worker 0 reads the count after the notification.
 */

#include "ngx_http_session_db_relay.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_db_conn.h"


/* session ids per datagram */
#define NGX_HTTP_SESSION_RELAY_IDS       100
#define NGX_HTTP_SESSION_RELAY_SIZE                                           \
    (1 + NGX_HTTP_SESSION_RELAY_IDS * NGX_HTTP_SESSION_UUID_LEN)

/* a datagram's first byte; the session ids follow */
#define NGX_HTTP_SESSION_RELAY_LOST      0x01
#define NGX_HTTP_SESSION_RELAY_WEBHOOKS  0x02
/* the LISTEN connection is in effect again: the server is reachable */
#define NGX_HTTP_SESSION_RELAY_BACK      0x04


/* a worker's, in memory shared by the configuration's workers */
typedef struct {
    /* its nodes of the long poll: it wants sessions' events */
    ngx_atomic_t                    nodes;
    /* a datagram to it was not taken: it reads every session again */
    ngx_atomic_t                    lost;
} ngx_http_session_relay_slot_t;


/* made by the master for one configuration's workers (smcf->relay) */
typedef struct {
    ngx_uint_t                      workers;
    ngx_shm_t                       shm;
    ngx_http_session_relay_slot_t  *slots;
    /* per worker: [0] it reads, [1] worker 0 writes */
    ngx_socket_t                  (*pairs)[2];
} ngx_http_session_relay_conf_t;


/* worker 0: what a worker is sent next */
typedef struct {
    size_t                          len;
    u_char                          data[NGX_HTTP_SESSION_RELAY_SIZE];
} ngx_http_session_relay_out_t;


/* the worker's own */
typedef struct {
    /* NULL: this process is the node's only one */
    ngx_http_session_relay_conf_t            *conf;
    const ngx_http_session_relay_handlers_t  *wake;
    ngx_uint_t                                worker;
    /* the other workers: their socket's end */
    ngx_connection_t                         *conn;
    /* worker 0 */
    ngx_http_session_relay_out_t             *out;
    ngx_event_t                               flush;
    ngx_connection_t                          dummy;
} ngx_http_session_relay_t;


static void ngx_http_session_relay_cleanup(void *data);
static void ngx_http_session_relay_all(u_char kind);
static void ngx_http_session_relay_add(ngx_uint_t w, u_char kind,
    u_char *sid);
static void ngx_http_session_relay_flush(ngx_event_t *ev);
static void ngx_http_session_relay_send(ngx_uint_t w);
static void ngx_http_session_relay_read(ngx_event_t *ev);


static ngx_http_session_relay_t  ngx_http_session_relay;


ngx_int_t
ngx_http_session_relay_init_module(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_uint_t                      i, n;
    ngx_core_conf_t                *ccf;
    ngx_pool_cleanup_t             *cln;
    ngx_http_session_relay_conf_t  *rc;

    smcf->relay = NULL;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    if (!smcf->enabled || !ccf->master || ccf->worker_processes < 2) {
        return NGX_OK;
    }

    n = ccf->worker_processes;

    rc = ngx_pcalloc(cycle->pool, sizeof(ngx_http_session_relay_conf_t));
    if (rc == NULL) {
        return NGX_ERROR;
    }

    rc->pairs = ngx_palloc(cycle->pool, n * sizeof(ngx_socket_t[2]));
    if (rc->pairs == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        rc->pairs[i][0] = (ngx_socket_t) -1;
        rc->pairs[i][1] = (ngx_socket_t) -1;
    }

    /* the cleanup closes every pair made, however far this gets */
    rc->workers = n;

    cln = ngx_pool_cleanup_add(cycle->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_session_relay_cleanup;
    cln->data = rc;

    /*
     * What fails from here on (the master out of descriptors or shared
     * memory) must not fail the module's init: nginx exits on that, on a
     * reload too.  The node goes on without the relay, each worker with a
     * LISTEN connection of its own, as a single worker has.
     */

    rc->shm.size = n * sizeof(ngx_http_session_relay_slot_t);
    rc->shm.name.len = sizeof("session_relay") - 1;
    rc->shm.name.data = (u_char *) "session_relay";
    rc->shm.log = cycle->log;

    if (ngx_shm_alloc(&rc->shm) != NGX_OK) {
        goto failed;
    }

    rc->slots = (ngx_http_session_relay_slot_t *) rc->shm.addr;
    ngx_memzero(rc->slots, rc->shm.size);

    for (i = 0; i < n; i++) {
        if (socketpair(AF_UNIX, SOCK_DGRAM, 0, rc->pairs[i]) == -1) {
            ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_socket_errno,
                          "session relay: socketpair() failed");
            goto failed;
        }

        if (ngx_nonblocking(rc->pairs[i][0]) == -1
            || ngx_nonblocking(rc->pairs[i][1]) == -1
            || fcntl(rc->pairs[i][0], F_SETFD, FD_CLOEXEC) == -1
            || fcntl(rc->pairs[i][1], F_SETFD, FD_CLOEXEC) == -1)
        {
            ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_socket_errno,
                          "session relay: setting the sockets failed");
            goto failed;
        }
    }

    smcf->relay = rc;

    return NGX_OK;

failed:

    ngx_http_session_relay_cleanup(rc);
    rc->workers = 0;

    ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                  "session relay: not made, every worker has a LISTEN "
                  "connection of its own until the next reload");

    return NGX_OK;
}


/* the configuration is done with (the master), or the process exits */

static void
ngx_http_session_relay_cleanup(void *data)
{
    ngx_http_session_relay_conf_t  *rc = data;

    ngx_uint_t  i;

    for (i = 0; rc->pairs && i < rc->workers; i++) {
        if (rc->pairs[i][0] != (ngx_socket_t) -1) {
            (void) ngx_close_socket(rc->pairs[i][0]);
        }

        if (rc->pairs[i][1] != (ngx_socket_t) -1) {
            (void) ngx_close_socket(rc->pairs[i][1]);
        }
    }

    if (rc->slots) {
        ngx_shm_free(&rc->shm);
        rc->slots = NULL;
    }
}


ngx_int_t
ngx_http_session_relay_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf,
    const ngx_http_session_relay_handlers_t *handlers)
{
    ngx_event_t                    *rev;
    ngx_connection_t               *c;
    ngx_http_session_relay_t       *rl;
    ngx_http_session_relay_conf_t  *rc;

    rl = &ngx_http_session_relay;

    ngx_memzero(rl, sizeof(ngx_http_session_relay_t));
    rl->wake = handlers;

    rc = smcf->relay;

    if (rc == NULL || ngx_process != NGX_PROCESS_WORKER
        || (ngx_uint_t) ngx_worker >= rc->workers)
    {
        return NGX_OK;
    }

    rl->conf = rc;
    rl->worker = ngx_worker;

    /* a worker that takes a dead one's place starts with nothing */
    rc->slots[rl->worker].nodes = 0;
    rc->slots[rl->worker].lost = 0;

    if (rl->worker == 0) {
        rl->out = ngx_pcalloc(cycle->pool,
                              rc->workers
                              * sizeof(ngx_http_session_relay_out_t));
        if (rl->out == NULL) {
            return NGX_ERROR;
        }

        rl->dummy.fd = (ngx_socket_t) -1;
        rl->flush.handler = ngx_http_session_relay_flush;
        rl->flush.data = &rl->dummy;
        rl->flush.log = cycle->log;

        return NGX_OK;
    }

    c = ngx_get_connection(rc->pairs[rl->worker][0], cycle->log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = rl;

    rev = c->read;
    rev->handler = ngx_http_session_relay_read;
    rev->log = cycle->log;

    if (ngx_add_event(rev, NGX_READ_EVENT, 0) != NGX_OK) {
        ngx_free_connection(c);
        return NGX_ERROR;
    }

    rl->conn = c;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, cycle->log, 0,
                   "session relay: worker %ui reads worker 0's", rl->worker);

    return NGX_OK;
}


void
ngx_http_session_relay_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_session_relay_t  *rl = &ngx_http_session_relay;

    if (rl->flush.posted) {
        ngx_delete_posted_event(&rl->flush);
    }

    if (rl->conn) {
        /* this process's copy of the socket (the master keeps its own) */
        rl->conf->pairs[rl->worker][0] = (ngx_socket_t) -1;
        ngx_close_connection(rl->conn);
        rl->conn = NULL;
    }

    rl->conf = NULL;
}


ngx_uint_t
ngx_http_session_relay_listens(void)
{
    return ngx_http_session_relay.conf == NULL
           || ngx_http_session_relay.worker == 0;
}


/* a poll node made (1) or freed (-1) in this worker */

void
ngx_http_session_relay_nodes(ngx_int_t n)
{
    ngx_http_session_relay_conf_t  *rc = ngx_http_session_relay.conf;

    if (rc) {
        (void) ngx_atomic_fetch_add(
                   &rc->slots[ngx_http_session_relay.worker].nodes, n);
    }
}


void
ngx_http_session_relay_event(u_char *sid, size_t len)
{
    ngx_uint_t                      w;
    ngx_http_session_relay_conf_t  *rc;

    ngx_http_session_relay.wake->event(sid, len);

    rc = ngx_http_session_relay.conf;

    /* an id that is not one is no poll's: worker 0 has said so */

    if (rc == NULL || len != NGX_HTTP_SESSION_UUID_LEN) {
        return;
    }

    for (w = 1; w < rc->workers; w++) {
        if (rc->slots[w].nodes) {
            ngx_http_session_relay_add(w, 0, sid);
        }
    }
}


void
ngx_http_session_relay_events_lost(void)
{
    ngx_http_session_relay.wake->events_lost();

    ngx_http_session_relay_all(NGX_HTTP_SESSION_RELAY_LOST
                               |NGX_HTTP_SESSION_RELAY_BACK);
}


void
ngx_http_session_relay_webhooks(void)
{
    ngx_http_session_relay.wake->webhooks();

    ngx_http_session_relay_all(NGX_HTTP_SESSION_RELAY_WEBHOOKS);
}


/* to every other worker */

static void
ngx_http_session_relay_all(u_char kind)
{
    ngx_uint_t                      w;
    ngx_http_session_relay_conf_t  *rc;

    rc = ngx_http_session_relay.conf;

    for (w = 1; rc && w < rc->workers; w++) {
        ngx_http_session_relay_add(w, kind, NULL);
    }
}


/* into worker w's next datagram, sent at the end of this pass */

static void
ngx_http_session_relay_add(ngx_uint_t w, u_char kind, u_char *sid)
{
    ngx_http_session_relay_out_t  *out;

    out = &ngx_http_session_relay.out[w];

    if (sid && out->len + NGX_HTTP_SESSION_UUID_LEN
               > NGX_HTTP_SESSION_RELAY_SIZE)
    {
        ngx_http_session_relay_send(w);
    }

    if (out->len == 0) {
        out->data[0] = 0;
        out->len = 1;
    }

    out->data[0] |= kind;

    if (sid) {
        ngx_memcpy(out->data + out->len, sid, NGX_HTTP_SESSION_UUID_LEN);
        out->len += NGX_HTTP_SESSION_UUID_LEN;
    }

    if (!ngx_http_session_relay.flush.posted) {
        ngx_post_event(&ngx_http_session_relay.flush, &ngx_posted_events);
    }
}


static void
ngx_http_session_relay_flush(ngx_event_t *ev)
{
    ngx_uint_t                      w;
    ngx_http_session_relay_conf_t  *rc;

    rc = ngx_http_session_relay.conf;

    for (w = 1; rc && w < rc->workers; w++) {
        if (ngx_http_session_relay.out[w].len) {
            ngx_http_session_relay_send(w);
        }
    }
}


static void
ngx_http_session_relay_send(ngx_uint_t w)
{
    u_char                          lost;
    ssize_t                         n;
    ngx_err_t                       err;
    ngx_http_session_relay_out_t   *out;
    ngx_http_session_relay_conf_t  *rc;

    rc = ngx_http_session_relay.conf;
    out = &ngx_http_session_relay.out[w];

    n = send(rc->pairs[w][1], out->data, out->len, 0);

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "session relay: %z of %uz bytes to worker %ui",
                   n, out->len, w);

    out->len = 0;

    if (n != -1) {
        return;
    }

    err = ngx_socket_errno;

    if (err != NGX_EAGAIN && err != ENOBUFS) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, err,
                      "session relay: send() to worker %ui failed", w);
    }

    /*
     * Not taken: the worker is behind.  Its flag first, then a datagram
     * that says so: taken, the worker reads the flag after it; not taken,
     * the socket holds datagrams still, and the worker reads the flag
     * after those.
     */

    rc->slots[w].lost = 1;

    lost = NGX_HTTP_SESSION_RELAY_LOST;
    (void) send(rc->pairs[w][1], &lost, 1, 0);
}


/* the other workers: what worker 0 passes on */

static void
ngx_http_session_relay_read(ngx_event_t *ev)
{
    u_char                                    buf[NGX_HTTP_SESSION_RELAY_SIZE];
    u_char                                   *p;
    ssize_t                                   n;
    ngx_err_t                                 err;
    ngx_uint_t                                lost, webhooks, behind, back;
    ngx_connection_t                         *c;
    ngx_http_session_relay_t                 *rl;
    const ngx_http_session_relay_handlers_t  *wake;

    c = ev->data;
    rl = c->data;
    wake = rl->wake;

    lost = 0;
    webhooks = 0;
    behind = 0;
    back = 0;

    for ( ;; ) {
        n = recv(c->fd, buf, sizeof(buf), 0);

        if (n == -1) {
            err = ngx_socket_errno;

            if (err == NGX_EINTR) {
                continue;
            }

            if (err != NGX_EAGAIN) {
                ngx_log_error(NGX_LOG_ALERT, ev->log, err,
                              "session relay: recv() failed");
                behind = 1;
            }

            break;
        }

        if (n == 0) {
            continue;
        }

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                       "session relay: %z bytes, kind %ui",
                       n, (ngx_uint_t) buf[0]);

        if (buf[0] & NGX_HTTP_SESSION_RELAY_LOST) {
            lost = 1;
        }

        if (buf[0] & NGX_HTTP_SESSION_RELAY_BACK) {
            back = 1;
        }

        if (buf[0] & NGX_HTTP_SESSION_RELAY_WEBHOOKS) {
            webhooks = 1;
        }

        for (p = buf + 1;
             p + NGX_HTTP_SESSION_UUID_LEN <= buf + n;
             p += NGX_HTTP_SESSION_UUID_LEN)
        {
            wake->event(p, NGX_HTTP_SESSION_UUID_LEN);
        }
    }

    if (rl->conf->slots[rl->worker].lost
        && ngx_atomic_cmp_set(&rl->conf->slots[rl->worker].lost, 1, 0))
    {
        behind = 1;
    }

    if (behind) {
        ngx_log_error(NGX_LOG_INFO, ev->log, 0,
                      "session relay: worker 0's wake-ups were not all "
                      "taken, every waiting long poll reads its session "
                      "again");
        lost = 1;
    }

    /*
     * Worker 0 has reached the server: this worker's connections that
     * wait out a backoff try now, before the polls read again (their
     * reads wait for a connection that is on its way)
     */

    if (back) {
        ngx_http_session_db_conn_reachable();
    }

    if (lost) {
        wake->events_lost();
        webhooks = 1;
    }

    if (webhooks) {
        wake->webhooks();
    }
}
