/*
 * The expiry sweep.
 *
 * Every worker of every node arms one timer.  When it fires, the worker
 * sends session_sweep($1) through its query pool and re-arms once the
 * answer is in, so a worker never has two sweeps in flight.  The
 * function only tries its lock, so all but one of the sweeps that meet
 * return at once without work; which one runs does not matter.
 *
 * The delay is session_expiry_sweep_interval with +-25% jitter, so that
 * workers and nodes started together drift apart.  A full batch means
 * more may be due: the next run follows at once, up to
 * NGX_HTTP_SESSION_SWEEP_ROUNDS runs in a row.
 *
 * Each run also purges sessions whose expires_at is older than
 * session_retention (src/sql/009_retention.sql), at most
 * NGX_HTTP_SESSION_PURGE_BATCH per run, with their images, webhook
 * events and Idempotency-Key rows.
 *
 * The timer is cancelable and is not re-armed on a worker that is
 * exiting: the sweep never holds a graceful shutdown or a reload.
 */

#include "ngx_http_session_sweep.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"


/* sessions marked per statement, and statements in a row */
#define NGX_HTTP_SESSION_SWEEP_BATCH   "500"
#define NGX_HTTP_SESSION_SWEEP_ROUNDS  10

/*
 * sessions purged per statement: each takes its images along, so a run
 * deletes at most this many sessions' bytes in one short transaction
 */
#define NGX_HTTP_SESSION_PURGE_BATCH   "50"

#define NGX_HTTP_SESSION_SWEEP_POOL_SIZE  1024


typedef struct {
    ngx_event_t                  timer;
    ngx_log_t                   *log;
    ngx_msec_t                   interval;
    /* session_retention as the statement's text parameter; len 0: off */
    ngx_str_t                    retention;
    /* the pool of the statement in flight, else NULL */
    ngx_pool_t                  *pool;
    /* runs in a row after full batches */
    ngx_uint_t                   rounds;

    /* the last run failed: further failures are logged at info */
    unsigned                     failing:1;
} ngx_http_session_sweep_t;


static void ngx_http_session_sweep_schedule(ngx_http_session_sweep_t *sw,
    ngx_msec_t delay);
static void ngx_http_session_sweep_later(ngx_http_session_sweep_t *sw);
static void ngx_http_session_sweep_handler(ngx_event_t *ev);
static void ngx_http_session_sweep_done(ngx_http_session_db_query_t *q,
    PGresult *res);
static void ngx_http_session_sweep_failed(ngx_http_session_sweep_t *sw,
    const char *what, const char *detail);


static ngx_http_session_sweep_t  ngx_http_session_sweep;


/* session_retention <time>|off; */

char *
ngx_http_session_retention(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_main_conf_t  *smcf = conf;

    ngx_int_t   sec;
    ngx_str_t  *value;

    if (smcf->retention != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == sizeof("off") - 1
        && ngx_strncmp(value[1].data, "off", sizeof("off") - 1) == 0)
    {
        smcf->retention = NGX_HTTP_SESSION_RETENTION_OFF;
        return NGX_CONF_OK;
    }

    sec = ngx_parse_time(&value[1], 1);

    if (sec == NGX_ERROR) {
        return "invalid value";
    }

    /* PostgreSQL's timestamps end 4713 BC: now() minus it must be one */

    if (sec < 1 || sec > NGX_MAX_INT32_VALUE) {
        return "must be between 1s and 2147483647s (68y), or off";
    }

    smcf->retention = sec;

    return NGX_CONF_OK;
}


ngx_int_t
ngx_http_session_sweep_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_session_sweep_t  *sw;

    sw = &ngx_http_session_sweep;

    ngx_memzero(sw, sizeof(ngx_http_session_sweep_t));

    sw->log = cycle->log;
    sw->interval = smcf->sweep_interval;

    if (smcf->retention != NGX_HTTP_SESSION_RETENTION_OFF) {
        sw->retention.data = ngx_pnalloc(cycle->pool, NGX_INT_T_LEN + 1);
        if (sw->retention.data == NULL) {
            return NGX_ERROR;
        }

        sw->retention.len = ngx_sprintf(sw->retention.data, "%i%Z",
                                        smcf->retention)
                            - sw->retention.data - 1;
    }

    sw->timer.handler = ngx_http_session_sweep_handler;
    sw->timer.data = sw;
    sw->timer.log = cycle->log;
    sw->timer.cancelable = 1;

    /* the first run anywhere within one interval: workers start apart */
    ngx_http_session_sweep_schedule(sw,
                                    1 + (ngx_msec_t) ngx_random()
                                        % sw->interval);

    return NGX_OK;
}


void
ngx_http_session_sweep_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_session_sweep_t  *sw;

    sw = &ngx_http_session_sweep;

    if (sw->timer.timer_set) {
        ngx_del_timer(&sw->timer);
    }

    /* before the query pool goes: the cleanup takes the query off it */

    ngx_http_session_destroy_pool(&sw->pool);
}


static void
ngx_http_session_sweep_schedule(ngx_http_session_sweep_t *sw,
    ngx_msec_t delay)
{
    if (ngx_http_session_stopping()) {
        return;
    }

    ngx_add_timer(&sw->timer, delay);
}


/* the next round, in interval * 0.75 ... interval * 1.25 */

static void
ngx_http_session_sweep_later(ngx_http_session_sweep_t *sw)
{
    ngx_msec_t  delay;

    sw->rounds = 0;

    delay = sw->interval - sw->interval / 4
            + (ngx_msec_t) ngx_random() % (sw->interval / 2 + 1);

    ngx_http_session_sweep_schedule(sw, delay);
}


static void
ngx_http_session_sweep_handler(ngx_event_t *ev)
{
    ngx_int_t                     rc;
    ngx_pool_t                   *pool;
    ngx_http_session_sweep_t     *sw;
    ngx_http_session_db_query_t  *q;

    sw = ev->data;

    if (ngx_http_session_stopping() || sw->pool) {
        return;
    }

    pool = ngx_create_pool(NGX_HTTP_SESSION_SWEEP_POOL_SIZE, sw->log);
    if (pool == NULL) {
        ngx_http_session_sweep_later(sw);
        return;
    }

    q = ngx_http_session_db_query_create_pool(pool, sw->log,
                                              NGX_HTTP_SESSION_SQL_SWEEP,
                                              ngx_http_session_sweep_done);
    if (q == NULL) {
        ngx_destroy_pool(pool);
        ngx_http_session_sweep_later(sw);
        return;
    }

    q->data = sw;

    ngx_http_session_db_param(q, NGX_HTTP_SESSION_SWEEP_BATCH,
                              sizeof(NGX_HTTP_SESSION_SWEEP_BATCH) - 1, 0);
    ngx_http_session_db_param(q, NGX_HTTP_SESSION_PURGE_BATCH,
                              sizeof(NGX_HTTP_SESSION_PURGE_BATCH) - 1, 0);

    /* NULL, SQL's "off", when session_retention is off */
    ngx_http_session_db_param(q, sw->retention.len ? sw->retention.data
                                                   : NULL,
                              sw->retention.len, 0);

    sw->pool = pool;

    rc = ngx_http_session_db_query_run(q);

    if (rc == NGX_OK) {
        /* ngx_http_session_sweep_done() follows from the event loop */
        return;
    }

    sw->pool = NULL;
    ngx_destroy_pool(pool);

    ngx_http_session_sweep_failed(sw, "database unavailable", NULL);

    ngx_http_session_sweep_later(sw);
}


static void
ngx_http_session_sweep_done(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_int_t                  swept, purged;
    ngx_uint_t                 more;
    ngx_http_session_sweep_t  *sw;

    sw = q->data;

    more = 0;

    if (res == NULL) {
        ngx_http_session_sweep_failed(sw, "database unavailable", NULL);

    } else if (PQresultStatus(res) != PGRES_TUPLES_OK
               || PQntuples(res) != 1 || PQnfields(res) != 4)
    {
        ngx_http_session_sweep_failed(sw, "query failed",
                        PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));

    } else {
        swept = ngx_atoi((u_char *) PQgetvalue(res, 0, 0),
                         PQgetlength(res, 0, 0));
        purged = ngx_atoi((u_char *) PQgetvalue(res, 0, 1),
                          PQgetlength(res, 0, 1));
        more = PQgetvalue(res, 0, 2)[0] == 't';

        if (PQgetvalue(res, 0, 3)[0] == 't') {
            ngx_http_session_stat(sweeps, 1);
        }

        if (swept > 0) {
            ngx_http_session_stat(expired, swept);
        }

        if (purged > 0) {
            ngx_http_session_stat(purged, purged);
        }

        if (sw->failing) {
            ngx_log_error(NGX_LOG_NOTICE, sw->log, 0,
                          "session sweep: running again");
            sw->failing = 0;
        }

        ngx_log_debug4(NGX_LOG_DEBUG_HTTP, sw->log, 0,
                       "session sweep: ran:%s expired:%i purged:%i more:%ui",
                       PQgetvalue(res, 0, 3), swept, purged, more);

        if (swept > 0) {
            ngx_log_error(NGX_LOG_INFO, sw->log, 0,
                          "session sweep: %i sessions expired", swept);
        }

        if (purged > 0) {
            ngx_log_error(NGX_LOG_INFO, sw->log, 0,
                          "session sweep: %i sessions purged after "
                          "session_retention", purged);
        }
    }

    /* the result is read: the query and its pool may go */

    ngx_http_session_destroy_pool(&sw->pool);

    if (more && ++sw->rounds < NGX_HTTP_SESSION_SWEEP_ROUNDS) {
        /* from the timer, not from inside the query pool's callback */
        ngx_http_session_sweep_schedule(sw, 1);
        return;
    }

    ngx_http_session_sweep_later(sw);
}


/* an outage is logged once as an error, the failures that follow at info */

static void
ngx_http_session_sweep_failed(ngx_http_session_sweep_t *sw, const char *what,
    const char *detail)
{
    ngx_uint_t  level;

    if (ngx_http_session_stopping()) {
        return;
    }

    level = sw->failing ? NGX_LOG_INFO : NGX_LOG_ERR;
    sw->failing = 1;

    if (detail) {
        ngx_log_error(level, sw->log, 0, "session sweep: %s: %s, "
                      "will retry", what, detail);
        return;
    }

    ngx_log_error(level, sw->log, 0, "session sweep: %s, will retry", what);
}
