/*
 * Webhook delivery: the dispatcher.
 *
 * Every worker of every node runs one dispatcher.  It claims due outbox
 * rows (NGX_HTTP_SESSION_SQL_WEBHOOK_CLAIM: FOR UPDATE SKIP LOCKED plus a
 * lease, see src/sql/008_webhooks.sql), at most session_webhook_concurrency
 * in flight per worker, and claims again:
 *   - at once when a row is queued (NOTIFY session_webhooks, through the
 *     worker's LISTEN connection) or the LISTEN connection comes back;
 *   - when a claim came back full, or a wake-up arrived during a claim,
 *     as soon as a slot is free;
 *   - else from a timer set for the next due row (a retry, or the end of
 *     another sender's lease), at most NGX_HTTP_SESSION_WEBHOOK_RESCAN
 *     away.
 *
 * Each claimed row is delivered by webhook_client.c, which tells the outcome
 * through the delivery's done handler.  The slot is then free, and the
 * outcome joins a batch: one statement records every outcome that
 * gathered while the previous one ran, each with its claim's attempts as
 * the lease's token.
 *
 * About a thousand lines: the claim, the batch of outcomes and the
 * measure of the queue are the steps of one loop on the dispatcher's one
 * state (ngx_http_session_webhook_t); a file for each would reach into
 * the others' fields.
 */

#include "ngx_http_session_webhook.h"
#include "ngx_http_session_webhook_client.h"
#include "ngx_http_session_webhook_keepalive.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_delivery.h"
#include "ngx_http_session_escape.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"


/* the longest wait between two claims, milliseconds */
#define NGX_HTTP_SESSION_WEBHOOK_RESCAN     60000
/* a claim that could not run is tried again after, milliseconds */
#define NGX_HTTP_SESSION_WEBHOOK_RETRY      1000
/* the lease beyond session_webhook_timeout + session_db_timeout, ms */
#define NGX_HTTP_SESSION_WEBHOOK_LEASE_PAD  10000
/* the queue is measured for session_status this often per node, ms */
#define NGX_HTTP_SESSION_WEBHOOK_MEASURE    1000
#define NGX_HTTP_SESSION_WEBHOOK_POOL_SIZE  4096


/* an attempt's outcome, waiting to be recorded */
typedef struct {
    ngx_str_t                     id;
    ngx_str_t                     error;
    ngx_uint_t                    attempts;
    /* milliseconds to the next attempt; 0: none (delivered or failed) */
    uint64_t                      delay;
    ngx_uint_t                    delivered;
} ngx_http_session_webhook_outcome_t;


/* the worker's dispatcher */
typedef struct {
    ngx_event_t                   timer;
    ngx_log_t                    *log;

    ngx_msec_t                    lease;
    ngx_uint_t                    max_attempts;
    ngx_uint_t                    concurrency;

    /* the claim in flight, else NULL */
    ngx_pool_t                   *claim;
    ngx_uint_t                    claim_rows;

    ngx_queue_t                   active;
    ngx_uint_t                    nactive;

    /* outcomes gathered (the pool holds them), and the statement in flight */
    ngx_pool_t                   *batch;
    ngx_array_t                   outcomes;
    ngx_pool_t                   *flush;
    ngx_uint_t                    flush_rows;
    ngx_msec_t                    flush_due;
    u_char                       *params[5];
    ngx_uint_t                    nbatch_failed;

    /* the queue's measurement: its timer, the query in flight */
    ngx_event_t                   measure;
    ngx_pool_t                   *measuring;

    unsigned                      enabled:1;
    /* claim again as soon as possible */
    unsigned                      again:1;
    unsigned                      failing:1;
} ngx_http_session_webhook_t;


static void ngx_http_session_webhook_schedule(ngx_http_session_webhook_t *wh,
    ngx_msec_t delay);
static void ngx_http_session_webhook_due(ngx_http_session_webhook_t *wh,
    ngx_msec_t delay);
static void ngx_http_session_webhook_timer_handler(ngx_event_t *ev);
static void ngx_http_session_webhook_claim(ngx_http_session_webhook_t *wh);
static void ngx_http_session_webhook_claimed(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_webhook_claim_failed(
    ngx_http_session_webhook_t *wh, const char *detail);
static ngx_int_t ngx_http_session_webhook_start(
    ngx_http_session_webhook_t *wh, PGresult *res, int row);
static void ngx_http_session_webhook_done(
    ngx_http_session_webhook_delivery_t *d, ngx_uint_t delivered);
static void ngx_http_session_webhook_log_url(
    ngx_http_session_webhook_delivery_t *d, ngx_str_t *url);
static ngx_http_session_webhook_outcome_t *ngx_http_session_webhook_outcome(
    ngx_http_session_webhook_t *wh);
static void ngx_http_session_webhook_flush(ngx_http_session_webhook_t *wh);
static u_char *ngx_http_session_webhook_quote(u_char *p, ngx_str_t *text);
static void ngx_http_session_webhook_recorded(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_webhook_free(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_pass_on(ngx_http_session_webhook_t *wh);
static void ngx_http_session_webhook_passed_on(
    ngx_http_session_db_query_t *q, PGresult *res);
static ngx_pool_t *ngx_http_session_webhook_run(
    ngx_http_session_webhook_t *wh, const char *sql,
    ngx_http_session_db_handler_pt handler, void *data);
static void ngx_http_session_webhook_measure(ngx_event_t *ev);
static void ngx_http_session_webhook_measured(ngx_http_session_db_query_t *q,
    PGresult *res);


static ngx_http_session_webhook_t  ngx_http_session_webhook;


ngx_int_t
ngx_http_session_webhook_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_session_webhook_t  *wh;

    wh = &ngx_http_session_webhook;

    ngx_memzero(wh, sizeof(ngx_http_session_webhook_t));

    wh->log = cycle->log;

    ngx_http_session_webhook_client_init(cycle, smcf);
    ngx_http_session_webhook_keepalive_init(smcf->webhook_concurrency);

    wh->lease = smcf->webhook_timeout + smcf->db_timeout
                + NGX_HTTP_SESSION_WEBHOOK_LEASE_PAD;
    wh->max_attempts = smcf->webhook_max_attempts;
    wh->concurrency = smcf->webhook_concurrency;

    ngx_queue_init(&wh->active);

    wh->timer.handler = ngx_http_session_webhook_timer_handler;
    wh->timer.data = wh;
    wh->timer.log = cycle->log;
    wh->timer.cancelable = 1;

    wh->measure.handler = ngx_http_session_webhook_measure;
    wh->measure.data = wh;
    wh->measure.log = cycle->log;
    wh->measure.cancelable = 1;

    wh->enabled = 1;

    /* the first claim once the query pool may be connected */
    ngx_http_session_webhook_schedule(wh, 100 + ngx_random() % 400);

    if (ngx_http_session_stats) {
        ngx_add_timer(&wh->measure, 100 + ngx_random() % 400);
    }

    return NGX_OK;
}


void
ngx_http_session_webhook_exit_process(ngx_cycle_t *cycle)
{
    ngx_queue_t                          *q;
    ngx_http_session_webhook_t           *wh;
    ngx_http_session_webhook_delivery_t  *d;

    wh = &ngx_http_session_webhook;

    if (!wh->enabled) {
        return;
    }

    wh->enabled = 0;

    if (wh->timer.timer_set) {
        ngx_del_timer(&wh->timer);
    }

    if (wh->measure.timer_set) {
        ngx_del_timer(&wh->measure);
    }

    ngx_http_session_destroy_pool(&wh->claim);
    ngx_http_session_destroy_pool(&wh->measuring);

    /* outcomes not recorded: their leases run out */

    ngx_http_session_destroy_pool(&wh->flush);
    ngx_http_session_destroy_pool(&wh->batch);

    ngx_http_session_webhook_keepalive_exit();

    /* what is still in flight: its lease runs out, another sends it */

    while (!ngx_queue_empty(&wh->active)) {
        q = ngx_queue_head(&wh->active);
        d = ngx_queue_data(q, ngx_http_session_webhook_delivery_t, queue);

        ngx_http_session_webhook_cancel(d);
        ngx_http_session_webhook_free(d);
    }
}


void
ngx_http_session_webhook_wake(void)
{
    ngx_http_session_webhook_t  *wh;

    wh = &ngx_http_session_webhook;

    if (!wh->enabled) {
        return;
    }

    if (wh->claim || wh->nactive >= wh->concurrency) {
        wh->again = 1;
        return;
    }

    ngx_http_session_webhook_claim(wh);
}


static void
ngx_http_session_webhook_schedule(ngx_http_session_webhook_t *wh,
    ngx_msec_t delay)
{
    if (ngx_http_session_stopping()) {
        return;
    }

    if (wh->timer.timer_set) {
        ngx_del_timer(&wh->timer);
    }

    ngx_add_timer(&wh->timer, delay);
}


/* an event is due in delay ms: the timer fires by then */

static void
ngx_http_session_webhook_due(ngx_http_session_webhook_t *wh,
    ngx_msec_t delay)
{
    if (wh->timer.timer_set
        && (ngx_msec_int_t) (wh->timer.timer.key - ngx_current_msec - delay)
           <= 0)
    {
        return;
    }

    ngx_http_session_webhook_schedule(wh, delay);
}


static void
ngx_http_session_webhook_timer_handler(ngx_event_t *ev)
{
    ngx_http_session_webhook_wake();
}


static void
ngx_http_session_webhook_claim(ngx_http_session_webhook_t *wh)
{
    u_char                       *p;
    ngx_pool_t                   *pool;
    ngx_http_session_db_query_t  *q;

    if (ngx_http_session_stopping()) {
        return;
    }

    if (wh->timer.timer_set) {
        ngx_del_timer(&wh->timer);
    }

    wh->again = 0;
    wh->claim_rows = wh->concurrency - wh->nactive;

    pool = ngx_create_pool(NGX_HTTP_SESSION_WEBHOOK_POOL_SIZE, wh->log);
    if (pool == NULL) {
        ngx_http_session_webhook_schedule(wh, NGX_HTTP_SESSION_WEBHOOK_RETRY);
        return;
    }

    q = ngx_http_session_db_query_create_pool(pool, wh->log,
                                        NGX_HTTP_SESSION_SQL_WEBHOOK_CLAIM,
                                        ngx_http_session_webhook_claimed);
    p = ngx_pnalloc(pool, 2 * (NGX_INT_T_LEN + 1));

    if (q == NULL || p == NULL) {
        ngx_destroy_pool(pool);
        ngx_http_session_webhook_schedule(wh, NGX_HTTP_SESSION_WEBHOOK_RETRY);
        return;
    }

    /* prepared once per connection; the answer is read as text */
    q->stmt = NGX_HTTP_SESSION_STMT_WEBHOOK_CLAIM;
    q->data = wh;

    /* parameters in text format are C strings */

    (void) ngx_sprintf(p, "%ui%Z", wh->claim_rows);
    ngx_http_session_db_param(q, p, 0, 0);
    p += NGX_INT_T_LEN + 1;
    (void) ngx_sprintf(p, "%M%Z", wh->lease);
    ngx_http_session_db_param(q, p, 0, 0);

    wh->claim = pool;

    if (ngx_http_session_db_query_run(q) == NGX_OK) {
        /* ngx_http_session_webhook_claimed() follows */
        return;
    }

    wh->claim = NULL;
    ngx_destroy_pool(pool);

    ngx_http_session_webhook_claim_failed(wh, "database unavailable");
}


static void
ngx_http_session_webhook_claimed(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    int                          i, n;
    ngx_int_t                    next;
    ngx_uint_t                   started;
    ngx_http_session_webhook_t  *wh;

    wh = q->data;

    if (res == NULL) {
        ngx_http_session_destroy_pool(&wh->claim);
        ngx_http_session_webhook_claim_failed(wh, "database unavailable");
        return;
    }

    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQnfields(res) != 6) {
        ngx_http_session_webhook_claim_failed(wh,
                        PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
        ngx_http_session_destroy_pool(&wh->claim);
        return;
    }

    if (wh->failing) {
        ngx_log_error(NGX_LOG_NOTICE, wh->log, 0,
                      "session webhook: claiming events again");
        wh->failing = 0;
    }

    n = PQntuples(res);
    next = NGX_HTTP_SESSION_WEBHOOK_RESCAN;
    started = 0;

    for (i = 0; i < n; i++) {

        if (PQgetisnull(res, i, 0)) {
            /* the last row: when the next pending event is due */

            if (!PQgetisnull(res, i, 5)) {
                next = ngx_atoi((u_char *) PQgetvalue(res, i, 5),
                                PQgetlength(res, i, 5));

                if (next == NGX_ERROR || next < 1) {
                    /* negative: due already (the clock moved) */
                    next = 1;
                }
            }

            continue;
        }

        if (ngx_http_session_webhook_start(wh, res, i) == NGX_OK) {
            started++;
        }
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, wh->log, 0,
                   "session webhook: claimed %ui of %ui, next in %i ms",
                   started, wh->claim_rows, next);

    if ((ngx_uint_t) n > wh->claim_rows) {
        /* a full claim: more may be due */
        wh->again = 1;
    }

    ngx_http_session_destroy_pool(&wh->claim);

    if (wh->again) {
        if (wh->nactive < wh->concurrency) {
            /* from the timer, not from inside the query pool's callback */
            ngx_http_session_webhook_schedule(wh, 1);
        }

        /* else the next delivery to finish claims */
        return;
    }

    if (next > NGX_HTTP_SESSION_WEBHOOK_RESCAN) {
        next = NGX_HTTP_SESSION_WEBHOOK_RESCAN;
    }

    /* a retry recorded meanwhile may want the timer sooner */
    ngx_http_session_webhook_due(wh, (ngx_msec_t) next);
}


/* an outage is logged once as an error, the failures that follow at info */

static void
ngx_http_session_webhook_claim_failed(ngx_http_session_webhook_t *wh,
    const char *detail)
{
    ngx_uint_t  level;

    if (ngx_http_session_stopping()) {
        return;
    }

    level = wh->failing ? NGX_LOG_INFO : NGX_LOG_ERR;
    wh->failing = 1;

    ngx_log_error(level, wh->log, 0,
                  "session webhook: cannot claim events: %s, will retry",
                  detail ? detail : "unknown error");

    ngx_http_session_webhook_schedule(wh, NGX_HTTP_SESSION_WEBHOOK_RETRY);
}


/* a claimed row: its own pool, copied out of the result */

static ngx_int_t
ngx_http_session_webhook_start(ngx_http_session_webhook_t *wh, PGresult *res,
    int row)
{
    ngx_int_t                             attempts;
    ngx_uint_t                            i;
    ngx_str_t                            *s[4];
    ngx_pool_t                           *pool;
    ngx_http_session_webhook_delivery_t  *d;

    pool = ngx_create_pool(NGX_HTTP_SESSION_WEBHOOK_POOL_SIZE, wh->log);
    if (pool == NULL) {
        return NGX_ERROR;
    }

    d = ngx_pcalloc(pool, sizeof(ngx_http_session_webhook_delivery_t));
    if (d == NULL) {
        ngx_destroy_pool(pool);
        return NGX_ERROR;
    }

    d->pool = pool;
    d->log = wh->log;
    d->done = ngx_http_session_webhook_done;
    d->data = wh;

    s[0] = &d->id;
    s[1] = &d->url;
    s[2] = &d->payload;
    s[3] = &d->secret;

    for (i = 0; i < 4; i++) {
        s[i]->len = PQgetlength(res, row, i);
        s[i]->data = ngx_pnalloc(pool, s[i]->len + 1);
        if (s[i]->data == NULL) {
            ngx_destroy_pool(pool);
            return NGX_ERROR;
        }

        ngx_memcpy(s[i]->data, PQgetvalue(res, row, i), s[i]->len + 1);
    }

    attempts = ngx_atoi((u_char *) PQgetvalue(res, row, 4),
                        PQgetlength(res, row, 4));
    d->attempts = attempts > 0 ? (ngx_uint_t) attempts : 1;

    ngx_queue_insert_tail(&wh->active, &d->queue);
    wh->nactive++;

    ngx_http_session_webhook_deliver(d);

    return NGX_OK;
}


/*
 * A delivery's outcome (its connection is gone): the slot goes at once,
 * the outcome joins the batch that the next statement records.
 */

static void
ngx_http_session_webhook_done(ngx_http_session_webhook_delivery_t *d,
    ngx_uint_t delivered)
{
    uint64_t                             delay;
    ngx_str_t                            url;
    ngx_http_session_webhook_t          *wh;
    ngx_http_session_webhook_outcome_t  *o;

    wh = d->data;

    delay = 0;

    ngx_http_session_webhook_log_url(d, &url);

    if (delivered) {
        ngx_http_session_stat(webhooks_delivered, 1);

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, d->log, 0,
                       "session webhook: event %V delivered to \"%V\", "
                       "attempt %ui", &d->id, &url, d->attempts);

    } else if (d->attempts >= wh->max_attempts) {
        ngx_http_session_stat(webhooks_failed, 1);

        ngx_log_error(NGX_LOG_WARN, d->log, 0,
                      "session webhook: event %V to \"%V\" failed after "
                      "%ui attempts: %V", &d->id, &url, d->attempts,
                      &d->error);

    } else {
        delay = ngx_http_session_webhook_backoff(d->attempts,
                                     (uint32_t) ngx_random()
                                     ^ ((uint32_t) ngx_random() << 16));
        ngx_http_session_stat(webhooks_retried, 1);

        ngx_log_error(NGX_LOG_INFO, d->log, 0,
                      "session webhook: event %V to \"%V\", attempt %ui "
                      "of %ui: %V; next in %uL ms", &d->id, &url,
                      d->attempts, wh->max_attempts, &d->error, delay);
    }

    o = ngx_http_session_webhook_outcome(wh);

    if (o == NULL) {
        ngx_log_error(NGX_LOG_WARN, d->log, 0,
                      "session webhook: event %V: cannot record the "
                      "outcome (out of memory), it is sent again once its "
                      "lease ends", &d->id);

    } else {
        o->delivered = delivered;
        o->attempts = d->attempts;
        o->delay = delay;

        o->id.data = ngx_pstrdup(wh->batch, &d->id);
        o->id.len = d->id.len;

        if (!delivered) {
            o->error.data = ngx_pstrdup(wh->batch, &d->error);
            o->error.len = d->error.len;
        }

        if (o->id.data == NULL || (!delivered && o->error.data == NULL)) {
            /* the batch is not recorded: every lease in it ends */
            wh->nbatch_failed = 1;
        }
    }

    ngx_http_session_webhook_free(d);

    if (wh->flush == NULL) {
        ngx_http_session_webhook_flush(wh);
    }
}


/*
 * The URL for the log, in quotes: stored URLs passed the syntax check at
 * creation, which lets '"' and '\' through, and a row put into the
 * outbox by hand may hold anything.  Escaped as the access log escapes
 * a variable, so that a URL cannot end its quotes early or forge a line.
 */

static void
ngx_http_session_webhook_log_url(ngx_http_session_webhook_delivery_t *d,
    ngx_str_t *url)
{
    size_t  len;

    len = ngx_http_session_escape(NULL, d->url.data, d->url.len,
                                  NGX_HTTP_SESSION_ESCAPE_LOG);

    if (len == d->url.len) {
        *url = d->url;
        return;
    }

    url->data = ngx_pnalloc(d->pool, len);
    if (url->data == NULL) {
        ngx_str_set(url, "(out of memory)");
        return;
    }

    url->len = ngx_http_session_escape(url->data, d->url.data, d->url.len,
                                       NGX_HTTP_SESSION_ESCAPE_LOG);
}


/* a place in the batch being gathered, NULL when out of memory */

static ngx_http_session_webhook_outcome_t *
ngx_http_session_webhook_outcome(ngx_http_session_webhook_t *wh)
{
    if (wh->batch == NULL) {
        wh->batch = ngx_create_pool(NGX_HTTP_SESSION_WEBHOOK_POOL_SIZE,
                                    wh->log);
        if (wh->batch == NULL) {
            return NULL;
        }

        if (ngx_array_init(&wh->outcomes, wh->batch, 16,
                           sizeof(ngx_http_session_webhook_outcome_t))
            != NGX_OK)
        {
            ngx_http_session_destroy_pool(&wh->batch);
            return NULL;
        }

        wh->nbatch_failed = 0;
    }

    return ngx_array_push(&wh->outcomes);
}


/*
 * One statement records the whole batch gathered while the previous one
 * ran: under load, one transaction (one WAL flush) for many attempts.
 */

static void
ngx_http_session_webhook_flush(ngx_http_session_webhook_t *wh)
{
    u_char                              *p[5];
    size_t                               len[5];
    ngx_uint_t                           i, n, k;
    ngx_msec_t                           due;
    ngx_pool_t                          *pool;
    ngx_http_session_db_query_t         *q;
    ngx_http_session_webhook_outcome_t  *o;

    pool = wh->batch;

    if (pool == NULL) {
        return;
    }

    wh->batch = NULL;

    o = wh->outcomes.elts;
    n = wh->outcomes.nelts;

    if (wh->nbatch_failed || n == 0) {
        goto failed;
    }

    /* array literals: {uuid,...} {int,...} {"text" or NULL,...} ... */

    ngx_memzero(len, sizeof(len));
    due = 0;

    for (i = 0; i < n; i++) {
        len[0] += o[i].id.len + 1;
        len[1] += NGX_INT_T_LEN + 1;
        len[2] += o[i].delivered ? sizeof("NULL") : 2 * o[i].error.len + 3;
        len[3] += NGX_INT64_LEN + 1;
        len[4] += 2;

        if (o[i].delay && (due == 0 || o[i].delay < due)) {
            due = (ngx_msec_t) o[i].delay;
        }
    }

    for (k = 0; k < 5; k++) {
        p[k] = ngx_pnalloc(pool, len[k] + 3);
        if (p[k] == NULL) {
            goto failed;
        }

        wh->params[k] = p[k];
        *p[k]++ = '{';
    }

    for (i = 0; i < n; i++) {
        if (i) {
            for (k = 0; k < 5; k++) {
                *p[k]++ = ',';
            }
        }

        p[0] = ngx_cpymem(p[0], o[i].id.data, o[i].id.len);
        p[1] = ngx_sprintf(p[1], "%ui", o[i].attempts);

        if (o[i].delivered) {
            p[2] = ngx_cpymem(p[2], "NULL", 4);

        } else {
            p[2] = ngx_http_session_webhook_quote(p[2], &o[i].error);
        }

        if (o[i].delivered || o[i].delay == 0) {
            p[3] = ngx_cpymem(p[3], "NULL", 4);

        } else {
            p[3] = ngx_sprintf(p[3], "%uL", o[i].delay);
        }

        *p[4]++ = o[i].delivered ? 't' : 'f';
    }

    for (k = 0; k < 5; k++) {
        *p[k]++ = '}';
        *p[k] = '\0';
    }

    q = ngx_http_session_db_query_create_pool(pool, wh->log,
                                        NGX_HTTP_SESSION_SQL_WEBHOOK_RECORD,
                                        ngx_http_session_webhook_recorded);
    if (q == NULL) {
        goto failed;
    }

    /* prepared once per connection, as the claim */
    q->stmt = NGX_HTTP_SESSION_STMT_WEBHOOK_RECORD;
    q->data = wh;

    /* parameters in text format are C strings */

    for (k = 0; k < 5; k++) {
        ngx_http_session_db_param(q, wh->params[k], 0, 0);
    }

    wh->flush = pool;
    wh->flush_rows = n;
    wh->flush_due = due;

    if (ngx_http_session_db_query_run(q) == NGX_OK) {
        /* ngx_http_session_webhook_recorded() follows */
        return;
    }

    wh->flush = NULL;

failed:

    ngx_log_error(NGX_LOG_WARN, wh->log, 0,
                  "session webhook: cannot record the outcome of %ui "
                  "attempts (database unavailable), their events are sent "
                  "again once their leases end", n);

    ngx_destroy_pool(pool);
}


/* "text" as an element of an array literal */

static u_char *
ngx_http_session_webhook_quote(u_char *p, ngx_str_t *text)
{
    size_t  i;

    *p++ = '"';

    for (i = 0; i < text->len; i++) {
        if (text->data[i] == '"' || text->data[i] == '\\') {
            *p++ = '\\';
        }

        *p++ = text->data[i];
    }

    *p++ = '"';

    return p;
}


static void
ngx_http_session_webhook_recorded(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    ngx_uint_t                   recorded;
    ngx_http_session_webhook_t  *wh;

    wh = q->data;

    if (res == NULL || PQresultStatus(res) != PGRES_COMMAND_OK) {
        ngx_log_error(NGX_LOG_WARN, wh->log, 0,
                      "session webhook: cannot record the outcome of %ui "
                      "attempts (%s), their events are sent again once "
                      "their leases end", wh->flush_rows,
                      res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY)
                          : "database unavailable");

    } else {
        recorded = ngx_atoi((u_char *) PQcmdTuples(res),
                            ngx_strlen(PQcmdTuples(res)));

        if (recorded != wh->flush_rows) {
            /* leases that ran out: other senders have those events */
            ngx_log_error(NGX_LOG_INFO, wh->log, 0,
                          "session webhook: %ui of %ui outcomes not "
                          "recorded, their leases had ended",
                          wh->flush_rows - recorded, wh->flush_rows);
        }

        if (wh->flush_due) {
            if (ngx_http_session_stopping()) {
                /* the workers that stay retry them */
                ngx_http_session_webhook_pass_on(wh);

            } else {
                /* this worker retries them unless another does sooner */
                ngx_http_session_webhook_due(wh, wh->flush_due);
            }
        }
    }

    ngx_http_session_destroy_pool(&wh->flush);

    /* what gathered meanwhile */
    ngx_http_session_webhook_flush(wh);
}


/* the slot is free: the queue may hold more */

static void
ngx_http_session_webhook_free(ngx_http_session_webhook_delivery_t *d)
{
    ngx_http_session_webhook_t  *wh;

    wh = d->data;

    ngx_queue_remove(&d->queue);
    wh->nactive--;

    ngx_destroy_pool(d->pool);

    if (wh->enabled && wh->again && wh->claim == NULL) {
        /* from the timer, not from inside the query pool's callback */
        ngx_http_session_webhook_schedule(wh, 1);
    }
}


/*
 * An exiting worker's retries: a NOTIFY makes the other workers (the new
 * ones after a reload, other nodes) claim, and so set their timers for
 * them, rather than find them at their next rescan.
 */

static void
ngx_http_session_webhook_pass_on(ngx_http_session_webhook_t *wh)
{
    (void) ngx_http_session_webhook_run(wh, NGX_HTTP_SESSION_SQL_WEBHOOK_WAKE,
                                        ngx_http_session_webhook_passed_on,
                                        NULL);
}


static void
ngx_http_session_webhook_passed_on(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    ngx_destroy_pool(q->data);
}


/*
 * A statement without parameters in a pool of its own; its handler gets
 * data, or the pool when data is NULL, and frees the pool.  The pool,
 * or NULL when the statement could not be started.
 */

static ngx_pool_t *
ngx_http_session_webhook_run(ngx_http_session_webhook_t *wh,
    const char *sql, ngx_http_session_db_handler_pt handler, void *data)
{
    ngx_pool_t                   *pool;
    ngx_http_session_db_query_t  *q;

    pool = ngx_create_pool(NGX_HTTP_SESSION_WEBHOOK_POOL_SIZE, wh->log);
    if (pool == NULL) {
        return NULL;
    }

    q = ngx_http_session_db_query_create_pool(pool, wh->log, sql, handler);
    if (q == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }

    q->data = data ? data : pool;

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        ngx_destroy_pool(pool);
        return NULL;
    }

    /* the handler follows, from the event loop */
    return pool;
}


/*
 * The queue's depth and the age of its oldest due event, for
 * session_status: every worker's timer fires about once a second, and
 * the first of a node's workers to find the node's measurement due (an
 * atomic step in the zone) runs one query and stores the figures in the
 * zone.  A status request only reads them.
 */

static void
ngx_http_session_webhook_measure(ngx_event_t *ev)
{
    ngx_msec_t                   now;
    ngx_atomic_uint_t            next;
    ngx_http_session_webhook_t  *wh;

    wh = ev->data;

    if (ngx_http_session_stopping() || ngx_http_session_stats == NULL)
    {
        return;
    }

    ngx_add_timer(&wh->measure, NGX_HTTP_SESSION_WEBHOOK_MEASURE
                                + ngx_random() % 50);

    if (wh->measuring) {
        return;
    }

    now = ngx_current_msec;
    next = ngx_http_session_stats->webhooks_measure_next;

    if ((ngx_msec_int_t) (now - (ngx_msec_t) next) < 0
        || !ngx_atomic_cmp_set(&ngx_http_session_stats->webhooks_measure_next,
                               next,
                               now + NGX_HTTP_SESSION_WEBHOOK_MEASURE - 50))
    {
        /* not yet, or another worker took this turn */
        return;
    }

    /* if it cannot run, the figures age; their time says so */
    wh->measuring = ngx_http_session_webhook_run(wh,
                                        NGX_HTTP_SESSION_SQL_WEBHOOK_QUEUE,
                                        ngx_http_session_webhook_measured,
                                        wh);
}


static void
ngx_http_session_webhook_measured(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    ngx_int_t                    queued, oldest;
    ngx_time_t                  *tp;
    ngx_http_session_webhook_t  *wh;

    wh = q->data;

    if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK
        && PQntuples(res) == 1 && PQnfields(res) == 2
        && ngx_http_session_stats != NULL)
    {
        queued = ngx_atoi((u_char *) PQgetvalue(res, 0, 0),
                          PQgetlength(res, 0, 0));
        oldest = ngx_atoi((u_char *) PQgetvalue(res, 0, 1),
                          PQgetlength(res, 0, 1));

        if (queued != NGX_ERROR) {
            tp = ngx_timeofday();

            ngx_http_session_stats->webhooks_queued = queued;
            ngx_http_session_stats->webhooks_oldest_due =
                                           (oldest == NGX_ERROR) ? 0 : oldest;
            ngx_http_session_stats->webhooks_measured =
                                  (ngx_atomic_uint_t) tp->sec * 1000 + tp->msec;
        }
    }

    ngx_http_session_destroy_pool(&wh->measuring);
}
