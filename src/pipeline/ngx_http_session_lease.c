/*
 * Leases (session_limit_scope cluster, docs/decisions.md (qa)): the
 * statements that lease a block of a key's budget to the node, and the
 * requests that wait for one.
 *
 * A lease is asked for in two cases: ahead of need, by the request that
 * left the node's block half spent (nothing waits for it), or by a
 * request that found no budget held (it waits, as a request waits for
 * its key's lookup in stage 1).  Either way it is a flight of its own
 * pool: one per key and class per worker, which the requests of the
 * worker that find no budget join.  When the answer is in, each waiting
 * request takes from the node's budget again, under the zone mutex: it
 * is admitted, refused with 429 (the window's budget is spent), or, when
 * other workers took what came first, it waits for the next lease.
 *
 * The next window's first blocks, which every busy key asks for on every
 * node near the end of a window, are gathered instead, for up to
 * NGX_HTTP_SESSION_LEASE_BATCH_WAIT ms or NGX_HTTP_SESSION_LEASE_BATCH
 * keys, and sent together in one statement (decision (qh)): nothing
 * waits for them, and one statement and commit for many keys is what
 * the turn of a minute costs the database then.
 *
 * No answer (the database is down, slow or refuses): the waiting requests
 * get 503 "database unavailable", as any request that needs the database
 * then does, and the first failure is logged once for the node, until a
 * lease succeeds again.  A node never admits without budget: that would
 * multiply the limit by the nodes again.
 *
 * Over 1,000 lines, and kept whole: a single lease and the batch read
 * their answers with the same code (one row of figures each, checked the
 * same way) and hand them to the zone the same way, and a failure of
 * either clears the same marks; cut in two, both halves would export
 * those to each other.
 */

#include "ngx_http_session_lease.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"
#include "ngx_http_session_zone_lease.h"
#include "ngx_http_session_zone_rate.h"


/* buckets of the per-worker table of leases in flight */
#define NGX_HTTP_SESSION_LEASE_FLIGHTS  64     /* a power of two */

/* the text parameters of both statements: class, window, lease, limit, node */
#define NGX_HTTP_SESSION_LEASE_TEXTS    5

/* the next window's leases sent in one statement, at most */
#define NGX_HTTP_SESSION_LEASE_BATCH       128

/* how long the first of them waits for others, milliseconds */
#define NGX_HTTP_SESSION_LEASE_BATCH_WAIT  250


typedef struct {
    ngx_queue_t                   queue;
    ngx_queue_t                   waiters;
    ngx_pool_t                   *pool;
    ngx_uint_t                    cls;
    ngx_uint_t                    limit;
    uint32_t                      minute;
    /* the zone's mark of a lease ahead of need, 0: none */
    uint32_t                      asked;
    /* how many requests joined it */
    uint32_t                      nwaiters;
    u_char                        hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    u_char                        text[NGX_HTTP_SESSION_LEASE_TEXTS][
                                                        NGX_INT64_LEN + 1];
    /* what the node took in the window, "": the zone does not know (qk) */
    u_char                        took[NGX_INT64_LEN + 1];
    /* sent as a schema before 21 takes it (six arguments) */
    unsigned                      v19:1;
} ngx_http_session_lease_flight_t;


/* a lease of the next window's first block, in a batch */
typedef struct {
    ngx_uint_t                    cls;
    ngx_uint_t                    limit;
    uint32_t                      lease;
    /* the zone's mark of the lease, 0: none */
    uint32_t                      asked;
} ngx_http_session_lease_item_t;


/* the next window's leases gathered for one statement, in its own pool */
typedef struct {
    ngx_pool_t                     *pool;
    uint32_t                        minute;
    ngx_uint_t                      n;
    u_char                          hashes[NGX_HTTP_SESSION_LEASE_BATCH][
                                                NGX_HTTP_SESSION_KEY_HASH_LEN];
    ngx_http_session_lease_item_t   items[NGX_HTTP_SESSION_LEASE_BATCH];
} ngx_http_session_lease_batch_t;


static ngx_queue_t *ngx_http_session_lease_bucket(u_char *hash);
static ngx_http_session_lease_flight_t *ngx_http_session_lease_find(
    u_char *hash, ngx_uint_t cls);
static ngx_http_session_lease_flight_t *ngx_http_session_lease_start(
    u_char *hash, ngx_http_session_take_t *take, ngx_uint_t *err);
static ngx_int_t ngx_http_session_lease_send(
    ngx_http_session_lease_flight_t *f);
static ngx_int_t ngx_http_session_lease_before_21(
    ngx_http_session_lease_flight_t *f, PGresult *res);
static void ngx_http_session_lease_failed(
    ngx_http_session_lease_answer_t *a);
static void ngx_http_session_lease_failed_take(u_char *hash,
    ngx_http_session_take_t *take);
static void ngx_http_session_lease_done(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_lease_read(PGresult *res,
    ngx_http_session_lease_answer_t *a);
static ngx_int_t ngx_http_session_lease_figures(PGresult *res,
    ngx_uint_t row, ngx_uint_t col, ngx_http_session_lease_answer_t *a);
static void ngx_http_session_lease_batch_add(u_char *hash,
    ngx_http_session_take_t *take);
static void ngx_http_session_lease_batch_timer(ngx_event_t *ev);
static void ngx_http_session_lease_batch_send(
    ngx_http_session_lease_batch_t *b);
static u_char *ngx_http_session_lease_batch_array(ngx_pool_t *pool,
    ngx_http_session_lease_batch_t *b, ngx_uint_t what);
static void ngx_http_session_lease_batch_done(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_lease_batch_read(PGresult *res,
    ngx_http_session_lease_batch_t *b, ngx_http_session_lease_answer_t *as);
static void ngx_http_session_lease_batch_failed(
    ngx_http_session_lease_batch_t *b);
static void ngx_http_session_lease_batch_item(
    ngx_http_session_lease_batch_t *b, ngx_uint_t i,
    ngx_http_session_lease_answer_t *a);


/* the worker's leases */
typedef struct {
    /* the flights, by the key's hash */
    ngx_queue_t                      flights[NGX_HTTP_SESSION_LEASE_FLIGHTS];
    /*
     * the next window's leases not sent yet, NULL: none; and their timer,
     * whose data is a connection of no descriptor, as nginx's debug log
     * of timers reads one from every event's data
     */
    ngx_http_session_lease_batch_t  *pending;
    ngx_event_t                      batch_ev;
    ngx_connection_t                 dummy;
    /*
     * The window (epoch minute) in which the database had no lease
     * statement of schema 21 (the node upgraded before "sessionctl
     * migrate" ran): the worker leases as schema 19 takes it until the
     * window ends, then tries again; 0: not found so
     */
    uint32_t                         v19;
} ngx_http_session_lease_worker_t;


static ngx_http_session_lease_worker_t  ngx_http_session_lease_worker;


void
ngx_http_session_lease_init_process(void)
{
    ngx_uint_t                        i;
    ngx_http_session_lease_worker_t  *lw;

    lw = &ngx_http_session_lease_worker;

    ngx_memzero(lw, sizeof(ngx_http_session_lease_worker_t));

    for (i = 0; i < NGX_HTTP_SESSION_LEASE_FLIGHTS; i++) {
        ngx_queue_init(&lw->flights[i]);
    }

    lw->dummy.fd = (ngx_socket_t) -1;
    lw->batch_ev.data = &lw->dummy;
    lw->batch_ev.handler = ngx_http_session_lease_batch_timer;
    lw->batch_ev.log = ngx_cycle->log;
    /* a worker that exits does not wait for it: the marks go stale */
    lw->batch_ev.cancelable = 1;
}


ngx_int_t
ngx_http_session_lease_wait(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_resume_pt resume)
{
    ngx_uint_t                        err;
    ngx_http_session_waiter_t        *w;
    ngx_http_session_lease_flight_t  *f;

    w = ngx_http_session_waiter_create(r);
    if (w == NULL) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    f = ngx_http_session_lease_find(ctx->principal.hash, ctx->take.cls);

    if (f == NULL) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "session limit: no budget held, leasing %uD",
                       ctx->take.lease);

        f = ngx_http_session_lease_start(ctx->principal.hash, &ctx->take,
                                         &err);
        if (f == NULL) {
            ctx->err = err;
            return NGX_DECLINED;
        }

    } else {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "session limit: no budget held, joining a lease");
    }

    ctx->resume = resume;

    ngx_http_session_waiter_join(w, &f->waiters, f);
    f->nwaiters++;

    ngx_http_session_stat(lease_waits, 1);

    return NGX_AGAIN;
}


void
ngx_http_session_lease_ahead(u_char *hash, ngx_http_session_take_t *take)
{
    ngx_uint_t                        err;
    ngx_http_session_lease_flight_t  *f;

    if (take->next) {
        ngx_http_session_lease_batch_add(hash, take);
        return;
    }

    f = ngx_http_session_lease_find(hash, take->cls);

    if (f) {
        /* one is in flight in this worker: its answer clears the mark */

        if (f->asked == 0) {
            f->asked = take->asked;
        }

        return;
    }

    (void) ngx_http_session_lease_start(hash, take, &err);
}


/* the flights of the keys whose hash has the same fifth byte */

static ngx_queue_t *
ngx_http_session_lease_bucket(u_char *hash)
{
    return &ngx_http_session_lease_worker.flights[
                                hash[4] & (NGX_HTTP_SESSION_LEASE_FLIGHTS - 1)];
}


static ngx_http_session_lease_flight_t *
ngx_http_session_lease_find(u_char *hash, ngx_uint_t cls)
{
    ngx_queue_t                      *b, *q;
    ngx_http_session_lease_flight_t  *f;

    b = ngx_http_session_lease_bucket(hash);

    for (q = ngx_queue_head(b);
         q != ngx_queue_sentinel(b);
         q = ngx_queue_next(q))
    {
        f = ngx_queue_data(q, ngx_http_session_lease_flight_t, queue);

        if (f->cls == cls
            && ngx_memcmp(f->hash, hash, NGX_HTTP_SESSION_KEY_HASH_LEN) == 0)
        {
            return f;
        }
    }

    return NULL;
}


/*
 * Sends the lease take->lease of the window take->minute; NULL, with
 * *err, when it cannot (the zone's mark is cleared then, and a database
 * that cannot be reached is logged as a failed lease).
 */

static ngx_http_session_lease_flight_t *
ngx_http_session_lease_start(u_char *hash, ngx_http_session_take_t *take,
    ngx_uint_t *err)
{
    ngx_int_t                         rc;
    ngx_pool_t                       *pool;
    ngx_http_session_main_conf_t     *smcf;
    ngx_http_session_lease_flight_t  *f;

    smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_session_module);

    *err = NGX_HTTP_SESSION_ERR_INTERNAL;

    f = NULL;

    pool = ngx_create_pool(1024, ngx_cycle->log);

    if (pool) {
        f = ngx_pcalloc(pool, sizeof(ngx_http_session_lease_flight_t));
    }

    if (f) {
        f->pool = pool;
        f->cls = take->cls;
        f->limit = take->limit;
        f->minute = take->minute;
        f->asked = take->asked;
        f->v19 = (take->minute == ngx_http_session_lease_worker.v19);
        ngx_memcpy(f->hash, hash, NGX_HTTP_SESSION_KEY_HASH_LEN);
        ngx_queue_init(&f->waiters);

        ngx_sprintf(f->text[0], "%ui%Z", take->cls);
        ngx_sprintf(f->text[1], "%uD%Z", take->minute);
        ngx_sprintf(f->text[2], "%uD%Z", take->lease);
        ngx_sprintf(f->text[3], "%ui%Z", take->limit);
        ngx_sprintf(f->text[4], "%uL%Z",
                    ngx_http_session_lease_node(smcf->shm_zone));

        if (take->known) {
            ngx_sprintf(f->took, "%uD%Z", take->took);
        }

        rc = ngx_http_session_lease_send(f);

        if (rc == NGX_OK) {
            ngx_queue_insert_tail(ngx_http_session_lease_bucket(hash),
                                  &f->queue);

            ngx_http_session_stat(leases, 1);

            return f;
        }

        if (rc == NGX_DECLINED) {
            *err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        }
    }

    if (pool) {
        ngx_destroy_pool(pool);
    }

    ngx_http_session_lease_failed_take(hash, take);

    return NULL;
}


/*
 * The flight's statement, sent: NGX_OK; NGX_DECLINED when the database
 * cannot be reached, NGX_ERROR when it cannot be made
 */

static ngx_int_t
ngx_http_session_lease_send(ngx_http_session_lease_flight_t *f)
{
    u_char                       *p;
    ngx_uint_t                    i;
    ngx_http_session_db_query_t  *q;

    q = ngx_http_session_db_query_create_pool(f->pool, ngx_cycle->log,
                                              f->v19
                                              ? NGX_HTTP_SESSION_SQL_LEASE_V19
                                              : NGX_HTTP_SESSION_SQL_LEASE,
                                              ngx_http_session_lease_done);
    if (q == NULL) {
        return NGX_ERROR;
    }

    ngx_http_session_db_param(q, f->hash, NGX_HTTP_SESSION_KEY_HASH_LEN, 1);

    for (i = 0; i < NGX_HTTP_SESSION_LEASE_TEXTS; i++) {
        p = f->text[i];
        ngx_http_session_db_param(q, p, ngx_strlen(p), 0);
    }

    /* what the node took, NULL when the zone does not know it */

    if (!f->v19) {
        p = f->took[0] ? f->took : NULL;
        ngx_http_session_db_param(q, p, p ? ngx_strlen(p) : 0, 0);
    }

    /* waiting requests depend on it: it takes turns with the others */
    q->first = 1;
    q->data = f;

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * A schema before 21 (no session_rate_lease() of seven arguments): the
 * flight is sent again as schema 19 takes it, and so are the worker's
 * leases until the window ends (logged once a window).  NGX_OK: sent.
 */

static ngx_int_t
ngx_http_session_lease_before_21(ngx_http_session_lease_flight_t *f,
    PGresult *res)
{
    char  *state;

    if (f->v19 || res == NULL || PQresultStatus(res) != PGRES_FATAL_ERROR) {
        return NGX_DECLINED;
    }

    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    /* undefined_function */

    if (state == NULL || ngx_strcmp(state, "42883") != 0) {
        return NGX_DECLINED;
    }

    if (ngx_http_session_lease_worker.v19 != f->minute) {
        ngx_http_session_lease_worker.v19 = f->minute;

        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "session limit: the database has no lease statement "
                      "of schema 21 (run \"sessionctl migrate\"): leasing "
                      "as schema 19 does until the minute ends");
    }

    f->v19 = 1;

    if (ngx_http_session_lease_send(f) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_http_session_stat(leases, 1);

    return NGX_OK;
}


/* no lease: the zone's mark goes, the first failure is logged */

static void
ngx_http_session_lease_failed(ngx_http_session_lease_answer_t *a)
{
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_session_module);

    a->failed = 1;

    ngx_http_session_stat(lease_failures, 1);

    ngx_http_session_lease_answer(smcf->shm_zone, a);
}


/* no lease for what take asked of key hash, the database not asked */

static void
ngx_http_session_lease_failed_take(u_char *hash,
    ngx_http_session_take_t *take)
{
    ngx_http_session_lease_answer_t  a;

    ngx_memzero(&a, sizeof(ngx_http_session_lease_answer_t));

    a.hash = hash;
    a.cls = take->cls;
    a.limit = take->limit;
    a.minute = take->minute;
    a.asked = take->asked;

    ngx_http_session_lease_failed(&a);
}


static void
ngx_http_session_lease_done(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_int_t                          rc;
    ngx_uint_t                         err;
    ngx_connection_t                  *c;
    ngx_http_request_t                *r;
    ngx_http_session_ctx_t            *ctx;
    ngx_http_session_take_t           *take;
    ngx_http_session_waiter_t         *w;
    ngx_http_session_main_conf_t      *smcf;
    ngx_http_session_lease_answer_t    a;
    ngx_http_session_lease_flight_t   *f, *nf;

    f = q->data;

    if (ngx_http_session_lease_before_21(f, res) == NGX_OK) {
        /* the same flight, its waiters with it, sent again */
        return;
    }

    ngx_queue_remove(&f->queue);

    smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_session_module);

    ngx_memzero(&a, sizeof(ngx_http_session_lease_answer_t));

    a.hash = f->hash;
    a.cls = f->cls;
    a.limit = f->limit;
    a.minute = f->minute;
    a.asked = f->asked;
    a.waiters = f->nwaiters;

    /* a statement that failed is a 500, no answer at all a 503 */

    if (res == NULL) {
        rc = NGX_ABORT;

    } else if (ngx_http_session_db_result_ok(q, res) != NGX_OK
               || ngx_http_session_lease_read(res, &a) != NGX_OK)
    {
        rc = NGX_ERROR;

    } else {
        rc = NGX_OK;
    }

    if (rc == NGX_OK) {
        ngx_log_debug5(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "session limit: leased %uD, %uD of %ui in the window, "
                       "the node's %uD%s",
                       a.given, a.granted, f->limit, a.took,
                       a.known ? "" : " (not listed)");

        ngx_http_session_stat(lease_granted, a.given);

        if (a.granted >= f->limit) {
            ngx_http_session_stat(lease_spent, 1);
        }

        ngx_http_session_lease_answer(smcf->shm_zone, &a);

    } else {
        ngx_http_session_lease_failed(&a);
    }

    while (!ngx_queue_empty(&f->waiters)) {
        w = ngx_http_session_waiter_next(&f->waiters);

        r = w->request;
        c = r->connection;
        ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
        take = &ctx->take;

        /* counted now, in the window of now */

        take->rc = NGX_DECLINED;
        take->now = ngx_time();

        (void) ngx_http_session_rate_take(smcf->shm_zone, ctx->principal.hash,
                                          take);

        if (take->rc == NGX_AGAIN) {

            /* other workers took what came: the next lease */

            nf = NULL;

            if (rc == NGX_OK) {
                nf = ngx_http_session_lease_find(ctx->principal.hash,
                                                 take->cls);
                if (nf == NULL) {
                    nf = ngx_http_session_lease_start(ctx->principal.hash,
                                                      take, &err);
                }
            }

            if (nf) {
                ngx_http_session_waiter_join(w, &nf->waiters, nf);
                nf->nwaiters++;
                continue;
            }

            take->rc = (rc == NGX_ERROR) ? NGX_ERROR : NGX_ABORT;
        }

        ctx->resume(r, take->rc);
        ngx_http_run_posted_requests(c);
    }

    /* the flight's query and result are in its pool */

    ngx_destroy_pool(f->pool);
}


/*
 * (leased, total, nodes, took), took NULL when the row does not list the
 * node, or schema 19's (leased, total, nodes); no row: the window's
 * budget is leased out (schema 19) or its row is gone, taken so too
 */

static ngx_int_t
ngx_http_session_lease_read(PGresult *res,
    ngx_http_session_lease_answer_t *a)
{
    ngx_int_t  took;

    if (PQntuples(res) == 0) {
        a->given = 0;
        a->granted = (uint32_t) a->limit;
        return NGX_OK;
    }

    if (PQntuples(res) == 1 && PQnfields(res) >= 3 && PQnfields(res) <= 4
        && ngx_http_session_lease_figures(res, 0, 0, a) == NGX_OK)
    {
        /* schema 19's answer, or the row does not list the node */

        if (PQnfields(res) == 3 || PQgetisnull(res, 0, 3)) {
            return NGX_OK;
        }

        took = ngx_atoi((u_char *) PQgetvalue(res, 0, 3),
                        PQgetlength(res, 0, 3));

        if (took != NGX_ERROR && took >= (ngx_int_t) a->given
            && took <= (ngx_int_t) a->granted)
        {
            a->took = (uint32_t) took;
            a->known = 1;
            return NGX_OK;
        }
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "session limit: the lease statement's answer is not "
                  "(leased, total, nodes, took)");

    return NGX_ERROR;
}


/* (leased, total, nodes) from the columns from col on of a row */

static ngx_int_t
ngx_http_session_lease_figures(PGresult *res, ngx_uint_t row, ngx_uint_t col,
    ngx_http_session_lease_answer_t *a)
{
    ngx_int_t  given, granted, nodes;

    given = ngx_atoi((u_char *) PQgetvalue(res, row, col),
                     PQgetlength(res, row, col));
    granted = ngx_atoi((u_char *) PQgetvalue(res, row, col + 1),
                       PQgetlength(res, row, col + 1));
    nodes = ngx_atoi((u_char *) PQgetvalue(res, row, col + 2),
                     PQgetlength(res, row, col + 2));

    if (given == NGX_ERROR || granted == NGX_ERROR || nodes == NGX_ERROR
        || given > granted || granted > NGX_MAX_INT32_VALUE
        || nodes > NGX_MAX_INT32_VALUE)
    {
        return NGX_ERROR;
    }

    a->given = (uint32_t) given;
    a->granted = (uint32_t) granted;
    a->nodes = (uint32_t) nodes;

    return NGX_OK;
}


/*
 * The next window's first block of a key: into the batch, which is sent
 * when it is full, when its first lease has waited
 * NGX_HTTP_SESSION_LEASE_BATCH_WAIT ms, or before a lease of another
 * window joins it
 */

static void
ngx_http_session_lease_batch_add(u_char *hash, ngx_http_session_take_t *take)
{
    ngx_pool_t                       *pool;
    ngx_http_session_lease_item_t    *it;
    ngx_http_session_lease_batch_t   *b;
    ngx_http_session_lease_worker_t  *lw;

    lw = &ngx_http_session_lease_worker;
    b = lw->pending;

    if (b && b->minute != take->minute) {
        ngx_http_session_lease_batch_send(b);
        b = NULL;
    }

    if (b == NULL) {
        pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, ngx_cycle->log);

        if (pool) {
            b = ngx_palloc(pool, sizeof(ngx_http_session_lease_batch_t));

            if (b == NULL) {
                ngx_destroy_pool(pool);
            }
        }

        if (b == NULL) {
            ngx_http_session_lease_failed_take(hash, take);
            return;
        }

        b->pool = pool;
        b->minute = take->minute;
        b->n = 0;

        lw->pending = b;

        if (!lw->batch_ev.timer_set) {
            ngx_add_timer(&lw->batch_ev, NGX_HTTP_SESSION_LEASE_BATCH_WAIT);
        }
    }

    ngx_memcpy(b->hashes[b->n], hash, NGX_HTTP_SESSION_KEY_HASH_LEN);

    it = &b->items[b->n++];
    it->cls = take->cls;
    it->limit = take->limit;
    it->lease = take->lease;
    it->asked = take->asked;

    if (b->n == NGX_HTTP_SESSION_LEASE_BATCH) {
        ngx_http_session_lease_batch_send(b);
    }
}


static void
ngx_http_session_lease_batch_timer(ngx_event_t *ev)
{
    ngx_http_session_lease_batch_t  *b;

    b = ngx_http_session_lease_worker.pending;

    if (b) {
        ngx_http_session_lease_batch_send(b);
    }
}


static void
ngx_http_session_lease_batch_send(ngx_http_session_lease_batch_t *b)
{
    u_char                       *p;
    ngx_uint_t                    i;
    ngx_http_session_db_query_t  *q;

    ngx_http_session_lease_worker.pending = NULL;

    if (ngx_http_session_lease_worker.batch_ev.timer_set) {
        ngx_del_timer(&ngx_http_session_lease_worker.batch_ev);
    }

    q = ngx_http_session_db_query_create_pool(b->pool, ngx_cycle->log,
                                             NGX_HTTP_SESSION_SQL_LEASE_MANY,
                                             ngx_http_session_lease_batch_done);
    if (q == NULL) {
        goto failed;
    }

    ngx_http_session_db_param(q, b->hashes,
                              b->n * NGX_HTTP_SESSION_KEY_HASH_LEN, 1);

    /* classes, window, leases, limits, node */

    for (i = 0; i < NGX_HTTP_SESSION_LEASE_TEXTS; i++) {
        p = ngx_http_session_lease_batch_array(b->pool, b, i);
        if (p == NULL) {
            goto failed;
        }

        ngx_http_session_db_param(q, p, ngx_strlen(p), 0);
    }

    /* as a lease one by one: it takes turns with the others */
    q->first = 1;
    q->data = b;

    if (ngx_http_session_db_query_run(q) == NGX_OK) {
        ngx_http_session_stat(leases, 1);
        return;
    }

failed:

    ngx_http_session_lease_batch_failed(b);
}


/* the text of a parameter: an array of the items' figures, or a figure */

static u_char *
ngx_http_session_lease_batch_array(ngx_pool_t *pool,
    ngx_http_session_lease_batch_t *b, ngx_uint_t what)
{
    u_char                        *text, *p;
    ngx_uint_t                     i;
    ngx_http_session_lease_item_t  *it;
    ngx_http_session_main_conf_t   *smcf;

    text = ngx_pnalloc(pool, b->n * (NGX_INT_T_LEN + 1) + NGX_INT64_LEN + 3);
    if (text == NULL) {
        return NULL;
    }

    if (what == 1) {
        ngx_sprintf(text, "%uD%Z", b->minute);
        return text;
    }

    if (what == 4) {
        smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                                   ngx_http_session_module);

        ngx_sprintf(text, "%uL%Z",
                    ngx_http_session_lease_node(smcf->shm_zone));
        return text;
    }

    p = text;
    *p++ = '{';

    for (i = 0; i < b->n; i++) {
        it = &b->items[i];

        if (i) {
            *p++ = ',';
        }

        switch (what) {

        case 0:
            p = ngx_sprintf(p, "%ui", it->cls);
            break;

        case 2:
            p = ngx_sprintf(p, "%uD", it->lease);
            break;

        default: /* 3 */
            p = ngx_sprintf(p, "%ui", it->limit);
            break;
        }
    }

    *p++ = '}';
    *p = '\0';

    return text;
}


static void
ngx_http_session_lease_batch_done(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    ngx_uint_t                         i;
    ngx_http_session_main_conf_t      *smcf;
    ngx_http_session_lease_batch_t    *b;
    ngx_http_session_lease_answer_t   *as;

    b = q->data;

    smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_session_module);

    as = ngx_pcalloc(b->pool,
                     b->n * sizeof(ngx_http_session_lease_answer_t));

    if (res == NULL || as == NULL
        || ngx_http_session_db_result_ok(q, res) != NGX_OK
        || ngx_http_session_lease_batch_read(res, b, as) != NGX_OK)
    {
        ngx_http_session_lease_batch_failed(b);
        return;
    }

    for (i = 0; i < b->n; i++) {
        ngx_http_session_stat(lease_granted, as[i].given);

        if (as[i].granted >= as[i].limit) {
            ngx_http_session_stat(lease_spent, 1);
        }

        ngx_http_session_lease_answer(smcf->shm_zone, &as[i]);
    }

    ngx_destroy_pool(b->pool);
}


/* (i, leased, total, nodes) for each lease, total NULL: leased out */

static ngx_int_t
ngx_http_session_lease_batch_read(PGresult *res,
    ngx_http_session_lease_batch_t *b, ngx_http_session_lease_answer_t *as)
{
    ngx_int_t                         i;
    ngx_uint_t                        row;
    ngx_http_session_lease_answer_t  *a;

    if ((ngx_uint_t) PQntuples(res) != b->n || PQnfields(res) != 4) {
        goto invalid;
    }

    for (row = 0; row < b->n; row++) {
        i = ngx_atoi((u_char *) PQgetvalue(res, row, 0),
                     PQgetlength(res, row, 0));

        if (i == NGX_ERROR || i < 1 || (ngx_uint_t) i > b->n
            || as[i - 1].hash != NULL)
        {
            goto invalid;
        }

        a = &as[i - 1];

        ngx_http_session_lease_batch_item(b, i - 1, a);

        if (PQgetisnull(res, row, 2)) {
            /* the window's budget of the key is leased out */
            if (ngx_atoi((u_char *) PQgetvalue(res, row, 1),
                         PQgetlength(res, row, 1))
                != 0)
            {
                goto invalid;
            }

            a->given = 0;
            a->granted = (uint32_t) a->limit;
            continue;
        }

        if (ngx_http_session_lease_figures(res, row, 1, a) != NGX_OK) {
            goto invalid;
        }
    }

    return NGX_OK;

invalid:

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "session limit: the batched lease statement's answer is "
                  "not (i, leased, total, nodes) for each lease");

    return NGX_ERROR;
}


/* no answer: the marks go, one failure counted, logged once for the node */

static void
ngx_http_session_lease_batch_failed(ngx_http_session_lease_batch_t *b)
{
    ngx_uint_t                        i;
    ngx_http_session_main_conf_t     *smcf;
    ngx_http_session_lease_answer_t   a;

    smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_session_module);

    ngx_http_session_stat(lease_failures, 1);

    for (i = 0; i < b->n; i++) {
        ngx_memzero(&a, sizeof(ngx_http_session_lease_answer_t));

        ngx_http_session_lease_batch_item(b, i, &a);
        a.failed = 1;

        ngx_http_session_lease_answer(smcf->shm_zone, &a);
    }

    ngx_destroy_pool(b->pool);
}


/* what an answer says of the lease it answers: item i of the batch */

static void
ngx_http_session_lease_batch_item(ngx_http_session_lease_batch_t *b,
    ngx_uint_t i, ngx_http_session_lease_answer_t *a)
{
    a->hash = b->hashes[i];
    a->cls = b->items[i].cls;
    a->limit = b->items[i].limit;
    a->minute = b->minute;
    a->asked = b->items[i].asked;
}
