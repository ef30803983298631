/*
 * Webhook delivery.
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
 * A delivery is an HTTP/1.1 POST built from nginx's own parts: the
 * http block's "resolver" for host names, every address checked against
 * the private ranges before any connection, ngx_event_connect_peer(),
 * nginx's SSL layer (verification against the system trust store or
 * session_webhook_trusted_certificate, SNI, host name check), and
 * ngx_http_parse_status_line() for the answer.  One timer bounds it all
 * (session_webhook_timeout).  The status line decides; the rest of the
 * answer is not read.  The slot is then free, and the outcome joins a
 * batch: one statement records every outcome that gathered while the
 * previous one ran, each with its claim's attempts as the lease's token.
 */

#include "ngx_http_session_webhook.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_delivery.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"
#include "ngx_http_session_url.h"


/* the longest wait between two claims, milliseconds */
#define NGX_HTTP_SESSION_WEBHOOK_RESCAN     60000
/* a claim that could not run is tried again after, milliseconds */
#define NGX_HTTP_SESSION_WEBHOOK_RETRY      1000
/* the lease beyond session_webhook_timeout + session_db_timeout, ms */
#define NGX_HTTP_SESSION_WEBHOOK_LEASE_PAD  10000
/* "resolver_timeout" when the http block sets none, as nginx's default */
#define NGX_HTTP_SESSION_WEBHOOK_RESOLVER_TIMEOUT  30000
/* the queue is measured for session_status this often per node, ms */
#define NGX_HTTP_SESSION_WEBHOOK_MEASURE    1000
/* an idle connection to a receiver is kept this long, milliseconds */
#define NGX_HTTP_SESSION_WEBHOOK_IDLE       4000
/* the status line must fit in this many bytes */
#define NGX_HTTP_SESSION_WEBHOOK_ANSWER     1024
#define NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX  256
#define NGX_HTTP_SESSION_WEBHOOK_POOL_SIZE  4096

#define NGX_HTTP_SESSION_WEBHOOK_USER_AGENT  "ngx_http_session_module"


typedef enum {
    ngx_http_session_webhook_resolving = 0,
    ngx_http_session_webhook_connecting,
    ngx_http_session_webhook_handshaking,
    ngx_http_session_webhook_sending,
    ngx_http_session_webhook_reading
} ngx_http_session_webhook_state_e;


/* an attempt's outcome, waiting to be recorded */
typedef struct {
    ngx_str_t                     id;
    ngx_str_t                     error;
    ngx_uint_t                    attempts;
    /* milliseconds to the next attempt; 0: none (delivered or failed) */
    uint64_t                      delay;
    ngx_uint_t                    delivered;
} ngx_http_session_webhook_outcome_t;


typedef struct ngx_http_session_webhook_s  ngx_http_session_webhook_t;


/*
 * A connection to a receiver, in its own pool: what it was opened for
 * (the address, and for https the name its certificate was checked
 * against), so that a later delivery to the same place may reuse it.
 */
typedef struct {
    ngx_queue_t                   queue;
    ngx_connection_t             *connection;
    ngx_http_session_webhook_t   *wh;
    struct sockaddr              *sockaddr;
    socklen_t                     socklen;
    ngx_uint_t                    https;
    ngx_str_t                     host;
} ngx_http_session_webhook_conn_t;


struct ngx_http_session_webhook_s {
    ngx_event_t                   timer;
    ngx_log_t                    *log;
    /* connections log here: their errors become last_error instead */
    ngx_log_t                     quiet;

    ngx_resolver_t               *resolver;
    ngx_msec_t                    resolver_timeout;
#if (NGX_SSL)
    ngx_ssl_t                    *ssl;
#endif

    ngx_msec_t                    timeout;
    ngx_msec_t                    lease;
    ngx_uint_t                    max_attempts;
    ngx_uint_t                    concurrency;
    ngx_flag_t                    allow_private;

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

    /* idle connections to receivers, the most recently used first */
    ngx_queue_t                   idle;
    ngx_uint_t                    nidle;

    unsigned                      enabled:1;
    /* claim again as soon as possible */
    unsigned                      again:1;
    unsigned                      failing:1;
};


typedef struct {
    ngx_queue_t                   queue;
    ngx_pool_t                   *pool;
    ngx_log_t                    *log;
    ngx_http_session_webhook_t   *wh;

    ngx_str_t                     id;
    ngx_str_t                     url;
    ngx_str_t                     payload;
    ngx_str_t                     secret;
    ngx_uint_t                    attempts;

    ngx_http_session_url_t        u;
    /* the host name, without a trailing dot, NUL-terminated */
    ngx_str_t                     host;

    ngx_resolver_ctx_t           *resolve;
    ngx_addr_t                   *addrs;
    ngx_uint_t                    naddrs;
    ngx_uint_t                    next_addr;

    ngx_peer_connection_t         peer;
    ngx_event_t                   timer;

    ngx_buf_t                    *request;
    ngx_buf_t                    *answer;
    /* ngx_http_parse_status_line() keeps its state in a request */
    ngx_http_request_t           *parser;
    ngx_http_status_t             status;

    ngx_http_session_webhook_state_e  state;
    ngx_str_t                     error;

    /* the connection's own record */
    ngx_http_session_webhook_conn_t  *conn;

    unsigned                      finished:1;
    /* the connection was idle before this request */
    unsigned                      reused:1;
    /* an idle connection failed: this attempt opens a new one */
    unsigned                      fresh:1;
} ngx_http_session_webhook_delivery_t;


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
static void ngx_http_session_webhook_begin(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_resolved(ngx_resolver_ctx_t *ctx);
static ngx_int_t ngx_http_session_webhook_refused(
    ngx_http_session_webhook_delivery_t *d, struct sockaddr *sa,
    socklen_t socklen);
static void ngx_http_session_webhook_connect(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_connected(
    ngx_http_session_webhook_delivery_t *d);
#if (NGX_SSL)
static void ngx_http_session_webhook_ssl_handshaked(ngx_connection_t *c);
#endif
static ngx_int_t ngx_http_session_webhook_build(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_event(ngx_event_t *ev);
static void ngx_http_session_webhook_send(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_read(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_timeout(ngx_event_t *ev);
static void ngx_http_session_webhook_fail(
    ngx_http_session_webhook_delivery_t *d, const char *fmt, ...);
static void ngx_http_session_webhook_close(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_finish(
    ngx_http_session_webhook_delivery_t *d, ngx_uint_t delivered);
static ngx_http_session_webhook_outcome_t *ngx_http_session_webhook_outcome(
    ngx_http_session_webhook_t *wh);
static void ngx_http_session_webhook_flush(ngx_http_session_webhook_t *wh);
static u_char *ngx_http_session_webhook_quote(u_char *p, ngx_str_t *text);
static void ngx_http_session_webhook_recorded(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_webhook_free(
    ngx_http_session_webhook_delivery_t *d);
static ngx_uint_t ngx_http_session_webhook_stopping(void);
static ngx_int_t ngx_http_session_webhook_reuse(
    ngx_http_session_webhook_delivery_t *d, ngx_addr_t *addr);
static ngx_int_t ngx_http_session_webhook_stale(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_keep(
    ngx_http_session_webhook_delivery_t *d);
static ngx_uint_t ngx_http_session_webhook_reusable(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_idle_handler(ngx_event_t *ev);
static void ngx_http_session_webhook_idle_write(ngx_event_t *ev);
static void ngx_http_session_webhook_conn_close(ngx_connection_t *c);
static void ngx_http_session_webhook_pass_on(ngx_http_session_webhook_t *wh);
static void ngx_http_session_webhook_passed_on(
    ngx_http_session_db_query_t *q, PGresult *res);
static ngx_pool_t *ngx_http_session_webhook_run(
    ngx_http_session_webhook_t *wh, const char *sql,
    ngx_http_session_db_handler_pt handler, void *data);
static void ngx_http_session_webhook_measure(ngx_event_t *ev);
static void ngx_http_session_webhook_measured(ngx_http_session_db_query_t *q,
    PGresult *res);


static const char  *ngx_http_session_webhook_stages[] = {
    "resolving the host name",
    "connecting",
    "in the TLS handshake",
    "sending the request",
    "waiting for the answer"
};


static ngx_http_session_webhook_t  ngx_http_session_webhook;


ngx_int_t
ngx_http_session_webhook_init_conf(ngx_conf_t *cf,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_conf_ctx_t       *ctx;
    ngx_http_core_loc_conf_t  *clcf;
#if (NGX_SSL)
    ngx_ssl_t                 *ssl;
    ngx_pool_cleanup_t        *cln;
#endif

    ctx = (ngx_http_conf_ctx_t *) cf->ctx;
    clcf = ctx->loc_conf[ngx_http_core_module.ctx_index];

    if (clcf->resolver == NULL || clcf->resolver->connections.nelts == 0) {
        ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                      "no \"resolver\" in the http block: webhooks to host "
                      "names will fail, only IP addresses can be reached");
    }

#if (NGX_SSL)

    ssl = ngx_pcalloc(cf->pool, sizeof(ngx_ssl_t));
    if (ssl == NULL) {
        return NGX_ERROR;
    }

    ssl->log = cf->log;

    if (ngx_ssl_create(ssl, NGX_SSL_TLSv1_2|NGX_SSL_TLSv1_3, NULL)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        ngx_ssl_cleanup_ctx(ssl);
        return NGX_ERROR;
    }

    cln->handler = ngx_ssl_cleanup_ctx;
    cln->data = ssl;

    if (smcf->webhook_trusted_certificate.len) {
        if (ngx_conf_full_name(cf->cycle, &smcf->webhook_trusted_certificate,
                               1)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (SSL_CTX_load_verify_locations(ssl->ctx,
                           (char *) smcf->webhook_trusted_certificate.data,
                           NULL)
            == 0)
        {
            ngx_ssl_error(NGX_LOG_EMERG, cf->log, 0,
                          "cannot load \"session_webhook_trusted_certificate\""
                          " \"%V\"", &smcf->webhook_trusted_certificate);
            return NGX_ERROR;
        }

    } else if (SSL_CTX_set_default_verify_paths(ssl->ctx) == 0) {
        ngx_ssl_error(NGX_LOG_EMERG, cf->log, 0,
                      "cannot load the system's trusted certificates");
        return NGX_ERROR;
    }

    smcf->webhook_ssl = ssl;

#endif

    return NGX_OK;
}


ngx_int_t
ngx_http_session_webhook_init_process(ngx_cycle_t *cycle)
{
    ngx_http_conf_ctx_t           *ctx;
    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_session_webhook_t    *wh;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);
    if (smcf == NULL || !smcf->enabled) {
        return NGX_OK;
    }

    wh = &ngx_http_session_webhook;

    ngx_memzero(wh, sizeof(ngx_http_session_webhook_t));

    wh->log = cycle->log;

    /*
     * nginx logs a refused connect() at "error"; here that is the
     * receiver's state, recorded in last_error and logged at "info".
     */

    wh->quiet = *cycle->log;
    wh->quiet.log_level = NGX_LOG_CRIT;
    wh->quiet.next = NULL;

    ctx = (ngx_http_conf_ctx_t *) cycle->conf_ctx[ngx_http_module.index];
    clcf = ctx->loc_conf[ngx_http_core_module.ctx_index];

    /*
     * The http block's own: merging fills in the servers' values, not
     * those of the http level, so an unset timeout keeps nginx's default.
     */

    wh->resolver = clcf->resolver;
    wh->resolver_timeout = (clcf->resolver_timeout == NGX_CONF_UNSET_MSEC)
                           ? NGX_HTTP_SESSION_WEBHOOK_RESOLVER_TIMEOUT
                           : clcf->resolver_timeout;

#if (NGX_SSL)
    wh->ssl = smcf->webhook_ssl;
#endif

    wh->timeout = smcf->webhook_timeout;
    wh->lease = smcf->webhook_timeout + smcf->db_timeout
                + NGX_HTTP_SESSION_WEBHOOK_LEASE_PAD;
    wh->max_attempts = smcf->webhook_max_attempts;
    wh->concurrency = smcf->webhook_concurrency;
    wh->allow_private = smcf->webhook_allow_private;

    ngx_queue_init(&wh->active);
    ngx_queue_init(&wh->idle);

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
    ngx_http_session_webhook_conn_t      *conn;
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

    if (wh->claim) {
        ngx_destroy_pool(wh->claim);
        wh->claim = NULL;
    }

    if (wh->measuring) {
        ngx_destroy_pool(wh->measuring);
        wh->measuring = NULL;
    }

    /* outcomes not recorded: their leases run out */

    if (wh->flush) {
        ngx_destroy_pool(wh->flush);
        wh->flush = NULL;
    }

    if (wh->batch) {
        ngx_destroy_pool(wh->batch);
        wh->batch = NULL;
    }

    while (!ngx_queue_empty(&wh->idle)) {
        q = ngx_queue_head(&wh->idle);
        ngx_queue_remove(q);
        conn = ngx_queue_data(q, ngx_http_session_webhook_conn_t, queue);
        ngx_http_session_webhook_conn_close(conn->connection);
    }

    wh->nidle = 0;

    /* what is still in flight: its lease runs out, another sends it */

    while (!ngx_queue_empty(&wh->active)) {
        q = ngx_queue_head(&wh->active);
        d = ngx_queue_data(q, ngx_http_session_webhook_delivery_t, queue);

        d->finished = 1;
        ngx_http_session_webhook_close(d);
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
    if (ngx_http_session_webhook_stopping()) {
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

    if (ngx_http_session_webhook_stopping()) {
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
        ngx_destroy_pool(wh->claim);
        wh->claim = NULL;
        ngx_http_session_webhook_claim_failed(wh, "database unavailable");
        return;
    }

    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQnfields(res) != 6) {
        ngx_http_session_webhook_claim_failed(wh,
                        PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
        ngx_destroy_pool(wh->claim);
        wh->claim = NULL;
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

    ngx_destroy_pool(wh->claim);
    wh->claim = NULL;

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

    if (ngx_http_session_webhook_stopping()) {
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
    d->wh = wh;

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

    d->timer.handler = ngx_http_session_webhook_timeout;
    d->timer.data = d;
    d->timer.log = wh->log;

    ngx_queue_insert_tail(&wh->active, &d->queue);
    wh->nactive++;

    ngx_add_timer(&d->timer, wh->timeout);

    ngx_http_session_webhook_begin(d);

    return NGX_OK;
}


static void
ngx_http_session_webhook_begin(ngx_http_session_webhook_delivery_t *d)
{
    size_t                       len;
    ngx_resolver_ctx_t          *ctx;
    struct sockaddr_in          *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6         *sin6;
#endif
    ngx_http_session_webhook_t  *wh;

    wh = d->wh;

    if (ngx_http_session_url_parse(d->url.data, d->url.len, &d->u)
        != NGX_HTTP_SESSION_URL_OK)
    {
        ngx_http_session_webhook_fail(d, "webhook_url is not a valid URL");
        return;
    }

#if (NGX_SSL)
    if (d->u.https && wh->ssl == NULL) {
#else
    if (d->u.https) {
#endif
        ngx_http_session_webhook_fail(d, "https is not available: nginx "
                                      "was built without SSL");
        return;
    }

    if (ngx_http_session_webhook_build(d) != NGX_OK) {
        return;
    }

    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME) {
        len = d->u.host_len;

        if (d->u.host[len - 1] == '.') {
            len--;
        }

        d->host.len = len;
        d->host.data = ngx_pnalloc(d->pool, len + 1);
        if (d->host.data == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        ngx_memcpy(d->host.data, d->u.host, len);
        d->host.data[len] = '\0';

        if (!wh->allow_private
            && ngx_http_session_host_private(d->host.data, d->host.len))
        {
            ngx_http_session_webhook_fail(d, "refused: \"%V\" is a private "
                                          "host name", &d->host);
            return;
        }

        ctx = ngx_resolve_start(wh->resolver, NULL);

        if (ctx == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        if (ctx == NGX_NO_RESOLVER) {
            ngx_http_session_webhook_fail(d, "cannot resolve \"%V\": no "
                                          "\"resolver\" is configured in "
                                          "the http block", &d->host);
            return;
        }

        ctx->name = d->host;
        ctx->handler = ngx_http_session_webhook_resolved;
        ctx->data = d;
        ctx->timeout = wh->resolver_timeout;

        d->state = ngx_http_session_webhook_resolving;
        d->resolve = ctx;

        if (ngx_resolve_name(ctx) != NGX_OK) {
            d->resolve = NULL;
            ngx_http_session_webhook_fail(d, "cannot resolve \"%V\"",
                                          &d->host);
        }

        /* the handler may have run already, from the resolver's cache */

        return;
    }

    /* an IP literal: one address */

    d->addrs = ngx_pcalloc(d->pool, sizeof(ngx_addr_t));
    if (d->addrs == NULL) {
        ngx_http_session_webhook_fail(d, "out of memory");
        return;
    }

    d->naddrs = 1;

#if (NGX_HAVE_INET6)
    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV6) {
        sin6 = ngx_pcalloc(d->pool, sizeof(struct sockaddr_in6));
        if (sin6 == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((in_port_t) d->u.port);
        ngx_memcpy(sin6->sin6_addr.s6_addr, d->u.addr, 16);

        d->addrs->sockaddr = (struct sockaddr *) sin6;
        d->addrs->socklen = sizeof(struct sockaddr_in6);

    } else
#endif
    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV4) {
        sin = ngx_pcalloc(d->pool, sizeof(struct sockaddr_in));
        if (sin == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        sin->sin_family = AF_INET;
        sin->sin_port = htons((in_port_t) d->u.port);
        ngx_memcpy(&sin->sin_addr.s_addr, d->u.addr, 4);

        d->addrs->sockaddr = (struct sockaddr *) sin;
        d->addrs->socklen = sizeof(struct sockaddr_in);

    } else {
        ngx_http_session_webhook_fail(d, "IPv6 is not available");
        return;
    }

    if (ngx_http_session_webhook_refused(d, d->addrs->sockaddr,
                                         d->addrs->socklen))
    {
        return;
    }

    ngx_http_session_webhook_connect(d);
}


static void
ngx_http_session_webhook_resolved(ngx_resolver_ctx_t *ctx)
{
    ngx_uint_t                            i;
    struct sockaddr                      *sa;
    ngx_http_session_webhook_delivery_t  *d;

    d = ctx->data;

    if (ctx->state) {
        d->resolve = NULL;
        ngx_http_session_webhook_fail(d, "cannot resolve \"%V\": %s",
                                      &d->host,
                                      ngx_resolver_strerror(ctx->state));
        ngx_resolve_name_done(ctx);
        return;
    }

    d->addrs = ngx_pcalloc(d->pool, ctx->naddrs * sizeof(ngx_addr_t));
    if (d->addrs == NULL) {
        d->resolve = NULL;
        ngx_resolve_name_done(ctx);
        ngx_http_session_webhook_fail(d, "out of memory");
        return;
    }

    /* every address, before any connection */

    for (i = 0; i < ctx->naddrs; i++) {
        sa = ngx_pnalloc(d->pool, ctx->addrs[i].socklen);
        if (sa == NULL) {
            d->resolve = NULL;
            ngx_resolve_name_done(ctx);
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        ngx_memcpy(sa, ctx->addrs[i].sockaddr, ctx->addrs[i].socklen);
        ngx_inet_set_port(sa, (in_port_t) d->u.port);

        d->addrs[i].sockaddr = sa;
        d->addrs[i].socklen = ctx->addrs[i].socklen;
        d->naddrs++;
    }

    d->resolve = NULL;
    ngx_resolve_name_done(ctx);

    for (i = 0; i < d->naddrs; i++) {
        if (ngx_http_session_webhook_refused(d, d->addrs[i].sockaddr,
                                             d->addrs[i].socklen))
        {
            return;
        }
    }

    ngx_http_session_webhook_connect(d);
}


/* fails the attempt if the address is private and that is not allowed */

static ngx_int_t
ngx_http_session_webhook_refused(ngx_http_session_webhook_delivery_t *d,
    struct sockaddr *sa, socklen_t socklen)
{
    int                   private;
    u_char                text[NGX_SOCKADDR_STRLEN];
    size_t                len;
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6  *sin6;
#endif

    if (d->wh->allow_private) {
        return 0;
    }

    switch (sa->sa_family) {

    case AF_INET:
        sin = (struct sockaddr_in *) sa;
        private = ngx_http_session_addr_private(AF_INET,
                                     (const unsigned char *) &sin->sin_addr);
        break;

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) sa;
        private = ngx_http_session_addr_private(AF_INET6,
                                            sin6->sin6_addr.s6_addr);
        break;
#endif

    default:
        private = 1;
    }

    if (!private) {
        return 0;
    }

    len = ngx_sock_ntop(sa, socklen, text, NGX_SOCKADDR_STRLEN, 0);

    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME) {
        ngx_http_session_webhook_fail(d, "refused: \"%V\" resolves to the "
                                      "private address %*s", &d->host,
                                      len, text);
    } else {
        ngx_http_session_webhook_fail(d, "refused: %*s is a private "
                                      "address", len, text);
    }

    return 1;
}


static void
ngx_http_session_webhook_connect(ngx_http_session_webhook_delivery_t *d)
{
    u_char            *text;
    size_t             len;
    ngx_err_t          err;
    ngx_int_t          rc;
    ngx_addr_t        *addr;
    ngx_connection_t  *c;

    for ( ;; ) {
        if (d->next_addr >= d->naddrs) {
            if (d->error.len == 0) {
                ngx_http_session_webhook_fail(d, "no address to connect to");
            } else {
                ngx_http_session_webhook_fail(d, "%V", &d->error);
            }
            return;
        }

        addr = &d->addrs[d->next_addr++];

        text = ngx_pnalloc(d->pool, NGX_SOCKADDR_STRLEN);
        if (text == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        len = ngx_sock_ntop(addr->sockaddr, addr->socklen, text,
                            NGX_SOCKADDR_STRLEN, 1);

        ngx_memzero(&d->peer, sizeof(ngx_peer_connection_t));

        d->peer.name = ngx_palloc(d->pool, sizeof(ngx_str_t));
        if (d->peer.name == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        d->peer.name->data = text;
        d->peer.name->len = len;

        if (!d->fresh && ngx_http_session_webhook_reuse(d, addr) == NGX_OK) {
            d->state = ngx_http_session_webhook_sending;
            ngx_http_session_webhook_send(d);
            return;
        }

        d->peer.sockaddr = addr->sockaddr;
        d->peer.socklen = addr->socklen;
        d->peer.get = ngx_event_get_peer;
        d->peer.log = &d->wh->quiet;
        d->peer.log_error = NGX_ERROR_INFO;

        d->state = ngx_http_session_webhook_connecting;

        ngx_set_socket_errno(0);

        rc = ngx_event_connect_peer(&d->peer);
        err = ngx_socket_errno;

        if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
            /* remembered in case no other address answers */
            d->error.data = ngx_pnalloc(d->pool,
                                        NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX);
            if (d->error.data) {
                d->error.len = ngx_snprintf(d->error.data,
                                    NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX,
                                    "cannot connect to %V: %s", d->peer.name,
                                    err ? strerror(err) : "failed")
                               - d->error.data;
            }

            d->peer.connection = NULL;
            continue;
        }

        c = d->peer.connection;

        c->data = d;
        c->read->handler = ngx_http_session_webhook_event;
        c->write->handler = ngx_http_session_webhook_event;

        /* the connection's own pool: it may outlive this delivery */

        c->pool = ngx_create_pool(512, d->log);
        d->conn = (c->pool == NULL) ? NULL
                  : ngx_pcalloc(c->pool,
                                sizeof(ngx_http_session_webhook_conn_t));

        if (d->conn == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        d->conn->connection = c;
        d->conn->wh = d->wh;
        d->conn->https = d->u.https;
        d->conn->socklen = addr->socklen;
        d->conn->sockaddr = ngx_pnalloc(c->pool, addr->socklen);

        if (d->conn->sockaddr == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        ngx_memcpy(d->conn->sockaddr, addr->sockaddr, addr->socklen);

        if (d->u.https && d->host.len) {
            d->conn->host.data = ngx_pstrdup(c->pool, &d->host);
            if (d->conn->host.data == NULL) {
                ngx_http_session_webhook_fail(d, "out of memory");
                return;
            }

            d->conn->host.len = d->host.len;
        }

        if (rc == NGX_AGAIN) {
            /* the write event tells when connect() is done */
            return;
        }

        ngx_http_session_webhook_connected(d);
        return;
    }
}


static void
ngx_http_session_webhook_connected(ngx_http_session_webhook_delivery_t *d)
{
    int                err;
    socklen_t          len;
    ngx_connection_t  *c;
#if (NGX_SSL)
    ngx_int_t          rc;
#endif

    c = d->peer.connection;

    err = 0;
    len = sizeof(int);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len) == -1) {
        err = ngx_socket_errno;
    }

    if (err) {
        ngx_http_session_webhook_conn_close(c);
        d->peer.connection = NULL;
        d->conn = NULL;

        d->error.data = ngx_pnalloc(d->pool,
                                    NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX);
        if (d->error.data) {
            d->error.len = ngx_snprintf(d->error.data,
                                   NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX,
                                   "cannot connect to %V: %s",
                                   d->peer.name, strerror(err))
                           - d->error.data;
        }

        ngx_http_session_webhook_connect(d);
        return;
    }

#if (NGX_SSL)

    if (d->u.https) {
        if (ngx_ssl_create_connection(d->wh->ssl, c,
                                      NGX_SSL_BUFFER|NGX_SSL_CLIENT)
            != NGX_OK)
        {
            ngx_http_session_webhook_fail(d, "TLS setup failed");
            return;
        }

        if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME
            && SSL_set_tlsext_host_name(c->ssl->connection,
                                        (char *) d->host.data)
               == 0)
        {
            ngx_http_session_webhook_fail(d, "TLS setup failed (SNI)");
            return;
        }

        d->state = ngx_http_session_webhook_handshaking;

        rc = ngx_ssl_handshake(c);

        if (rc == NGX_AGAIN) {
            c->ssl->handler = ngx_http_session_webhook_ssl_handshaked;
            return;
        }

        ngx_http_session_webhook_ssl_handshaked(c);
        return;
    }

#endif

    d->state = ngx_http_session_webhook_sending;
    ngx_http_session_webhook_send(d);
}


#if (NGX_SSL)

static void
ngx_http_session_webhook_ssl_handshaked(ngx_connection_t *c)
{
    int                                   ok;
    long                                  rc;
    X509                                 *cert;
    ngx_http_session_webhook_delivery_t  *d;

    d = c->data;

    if (!c->ssl->handshaked) {
        ngx_http_session_webhook_fail(d, "TLS handshake with %V failed",
                                      d->peer.name);
        return;
    }

    rc = SSL_get_verify_result(c->ssl->connection);

    if (rc != X509_V_OK) {
        ngx_http_session_webhook_fail(d, "TLS certificate of %V not "
                                      "trusted: %s", d->peer.name,
                                      X509_verify_cert_error_string(rc));
        return;
    }

    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME) {
        ok = ngx_ssl_check_host(c, &d->host) == NGX_OK;

    } else {
        /* an IP literal must be an IP address of the certificate */

        cert = SSL_get_peer_certificate(c->ssl->connection);
        ok = cert != NULL
             && X509_check_ip(cert, d->u.addr,
                              d->u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV4
                              ? 4 : 16, 0) == 1;
        if (cert) {
            X509_free(cert);
        }
    }

    if (!ok) {
        ngx_http_session_webhook_fail(d, "TLS certificate of %V does not "
                                      "match \"%*s\"", d->peer.name,
                                      d->u.host_len, d->u.host);
        return;
    }

    c->read->handler = ngx_http_session_webhook_event;
    c->write->handler = ngx_http_session_webhook_event;

    d->state = ngx_http_session_webhook_sending;
    ngx_http_session_webhook_send(d);
}

#endif


/* the request: headers of Standard Webhooks, the payload as stored */

static ngx_int_t
ngx_http_session_webhook_build(ngx_http_session_webhook_delivery_t *d)
{
    int         key_len;
    size_t      len;
    time_t      now;
    ngx_buf_t  *b;
    u_char      key[NGX_HTTP_SESSION_WEBHOOK_KEY_MAX];
    u_char      sig[NGX_HTTP_SESSION_WEBHOOK_SIG_LEN];

    key_len = ngx_http_session_webhook_key(d->secret.data, d->secret.len,
                                           key);
    if (key_len < 0) {
        ngx_http_session_webhook_fail(d, "the project's webhook_secret is "
                                      "malformed");
        return NGX_ERROR;
    }

    now = ngx_time();

    if (ngx_http_session_webhook_sign(key, key_len, d->id.data, d->id.len,
                                      now, d->payload.data, d->payload.len,
                                      sig)
        != 0)
    {
        ngx_explicit_memzero(key, sizeof(key));
        ngx_http_session_webhook_fail(d, "cannot sign the event");
        return NGX_ERROR;
    }

    ngx_explicit_memzero(key, sizeof(key));

    len = sizeof("POST / HTTP/1.1" CRLF) - 1 + d->u.path_len
          + sizeof("Host: " CRLF) - 1 + d->u.authority_len
          + sizeof("User-Agent: " NGX_HTTP_SESSION_WEBHOOK_USER_AGENT CRLF)
          - 1
          + sizeof("Content-Type: application/json" CRLF) - 1
          + sizeof("Content-Length: " CRLF) - 1 + NGX_SIZE_T_LEN
          + sizeof("webhook-id: " CRLF) - 1 + d->id.len
          + sizeof("webhook-timestamp: " CRLF) - 1 + NGX_TIME_T_LEN
          + sizeof("webhook-signature: " CRLF) - 1
          + NGX_HTTP_SESSION_WEBHOOK_SIG_LEN
          + sizeof(CRLF) - 1
          + d->payload.len;

    b = ngx_create_temp_buf(d->pool, len);
    if (b == NULL) {
        ngx_http_session_webhook_fail(d, "out of memory");
        return NGX_ERROR;
    }

    b->last = ngx_cpymem(b->last, "POST ", sizeof("POST ") - 1);

    if (d->u.path_len == 0 || d->u.path[0] != '/') {
        *b->last++ = '/';
    }

    b->last = ngx_sprintf(b->last, "%*s HTTP/1.1" CRLF "Host: %*s" CRLF
                          "User-Agent: " NGX_HTTP_SESSION_WEBHOOK_USER_AGENT
                          CRLF "Content-Type: application/json" CRLF
                          "Content-Length: %uz" CRLF
                          "webhook-id: %V" CRLF
                          "webhook-timestamp: %T" CRLF
                          "webhook-signature: %*s" CRLF CRLF,
                          d->u.path_len, d->u.path,
                          d->u.authority_len, d->u.authority,
                          d->payload.len, &d->id, now,
                          (size_t) NGX_HTTP_SESSION_WEBHOOK_SIG_LEN, sig);

    b->last = ngx_cpymem(b->last, d->payload.data, d->payload.len);

    d->request = b;

    return NGX_OK;
}


static void
ngx_http_session_webhook_event(ngx_event_t *ev)
{
    ngx_connection_t                     *c;
    ngx_http_session_webhook_delivery_t  *d;

    c = ev->data;
    d = c->data;

    switch (d->state) {

    case ngx_http_session_webhook_connecting:
        if (ev->write) {
            ngx_http_session_webhook_connected(d);
        }
        return;

    case ngx_http_session_webhook_sending:
        if (ev->write) {
            ngx_http_session_webhook_send(d);
        }
        return;

    case ngx_http_session_webhook_reading:
        if (!ev->write) {
            ngx_http_session_webhook_read(d);
        }
        return;

    default:
        return;
    }
}


static void
ngx_http_session_webhook_send(ngx_http_session_webhook_delivery_t *d)
{
    ssize_t            n;
    ngx_buf_t         *b;
    ngx_connection_t  *c;

    c = d->peer.connection;
    b = d->request;

    while (b->pos < b->last) {
        n = c->send(c, b->pos, b->last - b->pos);

        if (n > 0) {
            b->pos += n;
            continue;
        }

        if (n == NGX_AGAIN) {
            if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
                ngx_http_session_webhook_fail(d, "cannot send to %V",
                                              d->peer.name);
            }
            return;
        }

        if (ngx_http_session_webhook_stale(d) == NGX_OK) {
            return;
        }

        ngx_http_session_webhook_fail(d, "cannot send to %V: the "
                                      "connection was closed", d->peer.name);
        return;
    }

    if (d->answer == NULL) {
        d->answer = ngx_create_temp_buf(d->pool,
                                        NGX_HTTP_SESSION_WEBHOOK_ANSWER);
        d->parser = ngx_pcalloc(d->pool, sizeof(ngx_http_request_t));
    }

    if (d->answer == NULL || d->parser == NULL) {
        ngx_http_session_webhook_fail(d, "out of memory");
        return;
    }

    d->state = ngx_http_session_webhook_reading;

    ngx_http_session_webhook_read(d);
}


static void
ngx_http_session_webhook_read(ngx_http_session_webhook_delivery_t *d)
{
    ssize_t            n;
    ngx_int_t          rc;
    ngx_uint_t         code;
    ngx_buf_t         *b;
    ngx_connection_t  *c;

    c = d->peer.connection;
    b = d->answer;

    for ( ;; ) {
        if (b->last == b->end) {
            ngx_http_session_webhook_fail(d, "the answer of %V has no "
                                          "HTTP status line in its first "
                                          "%uz bytes", d->peer.name,
                                          (size_t) (b->end - b->start));
            return;
        }

        n = c->recv(c, b->last, b->end - b->last);

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
                ngx_http_session_webhook_fail(d, "cannot read from %V",
                                              d->peer.name);
            }
            return;
        }

        if (n == 0 || n == NGX_ERROR) {
            if (b->last == b->start
                && ngx_http_session_webhook_stale(d) == NGX_OK)
            {
                return;
            }

            ngx_http_session_webhook_fail(d, "%V closed the connection "
                                          "without an answer",
                                          d->peer.name);
            return;
        }

        b->last += n;

        rc = ngx_http_parse_status_line(d->parser, b, &d->status);

        if (rc == NGX_AGAIN) {
            continue;
        }

        if (rc != NGX_OK) {
            ngx_http_session_webhook_fail(d, "the answer of %V is not HTTP",
                                          d->peer.name);
            return;
        }

        break;
    }

    code = d->status.code;

    if (ngx_http_session_webhook_delivered(code)) {
        if (ngx_http_session_webhook_reusable(d)) {
            ngx_http_session_webhook_keep(d);
        }

        ngx_http_session_webhook_finish(d, 1);
        return;
    }

    if (code >= 300 && code < 400) {
        ngx_http_session_webhook_fail(d, "answered %ui: redirects are not "
                                      "followed", code);
        return;
    }

    ngx_http_session_webhook_fail(d, "answered %ui", code);
}


static void
ngx_http_session_webhook_timeout(ngx_event_t *ev)
{
    ngx_http_session_webhook_delivery_t  *d;

    d = ev->data;

    ngx_http_session_webhook_fail(d, "timed out after %M ms %s", d->wh->timeout,
                                  ngx_http_session_webhook_stages[d->state]);
}


static void
ngx_http_session_webhook_fail(ngx_http_session_webhook_delivery_t *d,
    const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    if (d->finished) {
        return;
    }

    /* NUL-terminated: it is a query parameter */

    p = ngx_pnalloc(d->pool, NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX + 1);

    if (p == NULL) {
        ngx_str_set(&d->error, "out of memory");

    } else {
        va_start(args, fmt);
        d->error.len = ngx_vslprintf(p, p + NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX,
                                     fmt, args)
                       - p;
        va_end(args);
        p[d->error.len] = '\0';
        d->error.data = p;
    }

    ngx_http_session_webhook_finish(d, 0);
}


static void
ngx_http_session_webhook_close(ngx_http_session_webhook_delivery_t *d)
{
    ngx_connection_t  *c;

    if (d->timer.timer_set) {
        ngx_del_timer(&d->timer);
    }

    if (d->resolve) {
        ngx_resolve_name_done(d->resolve);
        d->resolve = NULL;
    }

    c = d->peer.connection;

    if (c == NULL) {
        return;
    }

    d->peer.connection = NULL;

    ngx_http_session_webhook_conn_close(c);
}


/*
 * The outcome: the connection and the slot go at once, the outcome joins
 * the batch that the next statement records.
 */

static void
ngx_http_session_webhook_finish(ngx_http_session_webhook_delivery_t *d,
    ngx_uint_t delivered)
{
    uint64_t                             delay;
    ngx_http_session_webhook_t          *wh;
    ngx_http_session_webhook_outcome_t  *o;

    if (d->finished) {
        return;
    }

    d->finished = 1;
    wh = d->wh;

    ngx_http_session_webhook_close(d);

    delay = 0;

    if (delivered) {
        ngx_http_session_stat(webhooks_delivered, 1);

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, d->log, 0,
                       "session webhook: event %V delivered to \"%V\", "
                       "attempt %ui", &d->id, &d->url, d->attempts);

    } else if (d->attempts >= wh->max_attempts) {
        ngx_http_session_stat(webhooks_failed, 1);

        ngx_log_error(NGX_LOG_WARN, d->log, 0,
                      "session webhook: event %V to \"%V\" failed after "
                      "%ui attempts: %V", &d->id, &d->url, d->attempts,
                      &d->error);

    } else {
        delay = ngx_http_session_webhook_backoff(d->attempts,
                                     (uint32_t) ngx_random()
                                     ^ ((uint32_t) ngx_random() << 16));
        ngx_http_session_stat(webhooks_retried, 1);

        ngx_log_error(NGX_LOG_INFO, d->log, 0,
                      "session webhook: event %V to \"%V\", attempt %ui "
                      "of %ui: %V; next in %uL ms", &d->id, &d->url,
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
            ngx_destroy_pool(wh->batch);
            wh->batch = NULL;
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
            if (ngx_http_session_webhook_stopping()) {
                /* the workers that stay retry them */
                ngx_http_session_webhook_pass_on(wh);

            } else {
                /* this worker retries them unless another does sooner */
                ngx_http_session_webhook_due(wh, wh->flush_due);
            }
        }
    }

    ngx_destroy_pool(wh->flush);
    wh->flush = NULL;

    /* what gathered meanwhile */
    ngx_http_session_webhook_flush(wh);
}


/* the slot is free: the queue may hold more */

static void
ngx_http_session_webhook_free(ngx_http_session_webhook_delivery_t *d)
{
    ngx_http_session_webhook_t  *wh;

    wh = d->wh;

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


static ngx_uint_t
ngx_http_session_webhook_stopping(void)
{
    return ngx_exiting || ngx_quit || ngx_terminate;
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

    if (ngx_http_session_webhook_stopping() || ngx_http_session_stats == NULL)
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

    ngx_destroy_pool(wh->measuring);
    wh->measuring = NULL;
}


/*
 * Connections are reused (HTTP/1.1 keep-alive): a delivery whose answer
 * came whole in the bytes that held its status line leaves its
 * connection idle, and the next delivery to the same address (and, for
 * https, the same name, checked with the same certificate) sends on it.
 * Nothing else is waited for: an answer that is not whole at once, or
 * says "Connection: close", or has a body of unknown length, closes
 * the connection as before.
 */

static ngx_int_t
ngx_http_session_webhook_reuse(ngx_http_session_webhook_delivery_t *d,
    ngx_addr_t *addr)
{
    ngx_queue_t                      *q;
    ngx_connection_t                 *c;
    ngx_http_session_webhook_t       *wh;
    ngx_http_session_webhook_conn_t  *conn;

    wh = d->wh;

    for (q = ngx_queue_head(&wh->idle);
         q != ngx_queue_sentinel(&wh->idle);
         q = ngx_queue_next(q))
    {
        conn = ngx_queue_data(q, ngx_http_session_webhook_conn_t, queue);

        if (conn->https != (ngx_uint_t) d->u.https
            || ngx_cmp_sockaddr(conn->sockaddr, conn->socklen,
                                addr->sockaddr, addr->socklen, 1)
               != NGX_OK)
        {
            continue;
        }

        if (d->u.https
            && (conn->host.len != d->host.len
                || ngx_strncasecmp(conn->host.data, d->host.data,
                                   d->host.len)
                   != 0))
        {
            continue;
        }

        ngx_queue_remove(q);
        wh->nidle--;

        c = conn->connection;

        if (c->read->timer_set) {
            ngx_del_timer(c->read);
        }

        c->idle = 0;
        c->data = d;
        c->read->handler = ngx_http_session_webhook_event;
        c->write->handler = ngx_http_session_webhook_event;

        d->peer.connection = c;
        d->peer.sockaddr = conn->sockaddr;
        d->peer.socklen = conn->socklen;
        d->conn = conn;
        d->reused = 1;

        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * A reused connection that the receiver had closed (it fails before a
 * byte of the answer): the same address again on a new connection,
 * within the same attempt.  NGX_DECLINED: not such a case.
 */

static ngx_int_t
ngx_http_session_webhook_stale(ngx_http_session_webhook_delivery_t *d)
{
    if (!d->reused) {
        return NGX_DECLINED;
    }

    ngx_http_session_webhook_conn_close(d->peer.connection);
    d->peer.connection = NULL;
    d->conn = NULL;
    d->reused = 0;
    d->fresh = 1;

    d->request->pos = d->request->start;

    if (d->answer) {
        d->answer->pos = d->answer->start;
        d->answer->last = d->answer->start;
        ngx_memzero(d->parser, sizeof(ngx_http_request_t));
    }

    d->next_addr--;

    ngx_http_session_webhook_connect(d);

    return NGX_OK;
}


/* is the answer whole in the buffer, and may the connection be kept? */

static ngx_uint_t
ngx_http_session_webhook_reusable(ngx_http_session_webhook_delivery_t *d)
{
    off_t                length;
    ngx_buf_t           *b;
    ngx_int_t            rc;
    ngx_str_t            name, value;
    ngx_http_request_t  *r;

    if (d->conn == NULL || ngx_http_session_webhook_stopping()
        || d->status.http_version < NGX_HTTP_VERSION_11)
    {
        return 0;
    }

    b = d->answer;
    r = d->parser;
    length = -1;

    for ( ;; ) {
        rc = ngx_http_parse_header_line(r, b, 1);

        if (rc == NGX_HTTP_PARSE_HEADER_DONE) {
            break;
        }

        if (rc != NGX_OK) {
            /* not whole yet, or not HTTP */
            return 0;
        }

        name.data = r->header_name_start;
        name.len = r->header_name_end - r->header_name_start;
        value.data = r->header_start;
        value.len = r->header_end - r->header_start;

        if (name.len == sizeof("Content-Length") - 1
            && ngx_strncasecmp(name.data, (u_char *) "Content-Length",
                               name.len)
               == 0)
        {
            length = ngx_atoof(value.data, value.len);
            if (length == NGX_ERROR) {
                return 0;
            }

        } else if ((name.len == sizeof("Transfer-Encoding") - 1
                    && ngx_strncasecmp(name.data,
                                       (u_char *) "Transfer-Encoding",
                                       name.len)
                       == 0)
                   || (name.len == sizeof("Connection") - 1
                       && ngx_strncasecmp(name.data,
                                          (u_char *) "Connection",
                                          name.len)
                          == 0
                       && ngx_strlcasestrn(value.data,
                                           value.data + value.len,
                                           (u_char *) "close",
                                           sizeof("close") - 2)
                          != NULL))
        {
            return 0;
        }
    }

    if (d->status.code == NGX_HTTP_NO_CONTENT
        || d->status.code == NGX_HTTP_NOT_MODIFIED)
    {
        length = 0;
    }

    /* the body, exactly, and nothing after it */

    return length >= 0 && b->last - b->pos == length;
}


static void
ngx_http_session_webhook_keep(ngx_http_session_webhook_delivery_t *d)
{
    ngx_queue_t                      *q;
    ngx_connection_t                 *c;
    ngx_http_session_webhook_t       *wh;
    ngx_http_session_webhook_conn_t  *conn;

    wh = d->wh;
    c = d->peer.connection;
    conn = d->conn;

    c->data = conn;
    c->idle = 1;
    c->read->handler = ngx_http_session_webhook_idle_handler;
    c->write->handler = ngx_http_session_webhook_idle_write;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        /* ngx_http_session_webhook_close() closes it */
        return;
    }

    d->peer.connection = NULL;
    d->conn = NULL;

    ngx_add_timer(c->read, NGX_HTTP_SESSION_WEBHOOK_IDLE);

    ngx_queue_insert_head(&wh->idle, &conn->queue);

    /* no more idle connections than deliveries may be in flight */

    if (++wh->nidle > wh->concurrency) {
        q = ngx_queue_last(&wh->idle);
        ngx_queue_remove(q);
        wh->nidle--;

        conn = ngx_queue_data(q, ngx_http_session_webhook_conn_t, queue);
        ngx_http_session_webhook_conn_close(conn->connection);
    }
}


/* anything on an idle connection (its end, a timeout, exiting) closes it */

static void
ngx_http_session_webhook_idle_handler(ngx_event_t *ev)
{
    ngx_connection_t                 *c;
    ngx_http_session_webhook_conn_t  *conn;

    c = ev->data;
    conn = c->data;

    ngx_queue_remove(&conn->queue);
    conn->wh->nidle--;

    ngx_http_session_webhook_conn_close(c);
}


static void
ngx_http_session_webhook_idle_write(ngx_event_t *ev)
{
}


static void
ngx_http_session_webhook_conn_close(ngx_connection_t *c)
{
    ngx_pool_t  *pool;

    pool = c->pool;

#if (NGX_SSL)
    if (c->ssl) {
        c->ssl->no_wait_shutdown = 1;
        c->ssl->no_send_shutdown = 1;
        (void) ngx_ssl_shutdown(c);
    }
#endif

    ngx_close_connection(c);

    if (pool) {
        ngx_destroy_pool(pool);
    }
}
