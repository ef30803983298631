/*
 * session_status: the node's counters and the zone's figures, as JSON or
 * in Prometheus's text format.  No key, no rate limit: operators protect
 * the location with allow/deny.
 */

#include "ngx_http_session_status.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_handler.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_zone.h"
#include "ngx_http_session_zone_rate.h"


#define NGX_HTTP_SESSION_STATUS_JSON        0
#define NGX_HTTP_SESSION_STATUS_PROMETHEUS  1

/* room for one line of output: a name, a label, a 64-bit number */
#define NGX_HTTP_SESSION_STATUS_LINE        160


/*
 * what one answer reports: a copy of the counters, the gauges summed over
 * the processes alive, the zone's figures
 */
typedef struct {
    ngx_http_session_stats_t          s;
    ngx_http_session_gauges_t         g;
    ngx_str_t                         zone;
    ngx_http_session_zone_figures_t   fig;
    ngx_uint_t                        cluster;
} ngx_http_session_status_t;


static ngx_int_t ngx_http_session_status_format(ngx_http_request_t *r,
    ngx_uint_t *format);
static void ngx_http_session_status_take_gauges(ngx_shm_zone_t *zone);
static void ngx_http_session_status_sum_gauges(ngx_shm_zone_t *zone,
    ngx_http_session_gauges_t *sum);
static void ngx_http_session_status_read(ngx_http_request_t *r,
    ngx_http_session_status_t *st);
static u_char *ngx_http_session_status_json(u_char *p,
    ngx_http_session_status_t *st);
static u_char *ngx_http_session_status_prometheus(u_char *p,
    ngx_http_session_status_t *st);
static u_char *ngx_http_session_status_metric(u_char *p, const char *name,
    const char *type, const char *help, ngx_atomic_uint_t value);
static u_char *ngx_http_session_status_ms(u_char *p, ngx_atomic_uint_t ms);


ngx_http_session_stats_t   *ngx_http_session_stats;
ngx_http_session_gauges_t  *ngx_http_session_gauges;


static ngx_uint_t  ngx_http_session_status_codes[] = {
    NGX_HTTP_SESSION_STATUS_CODES
};

/* the counter of each status from 100 to 599, one lookup per answer */
static u_char      ngx_http_session_status_slot[500];

static ngx_str_t  ngx_http_session_status_allow = ngx_string("Allow");
static ngx_str_t  ngx_http_session_status_cache =
    ngx_string("Cache-Control");
static ngx_str_t  ngx_http_session_status_text =
    ngx_string("text/plain; version=0.0.4; charset=utf-8");


/* session_status; */

char *
ngx_http_session_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_session_loc_conf_t   *slcf;
    ngx_http_session_main_conf_t  *smcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    slcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_session_module);

    if (clcf->handler == ngx_http_session_status_handler) {
        return "is duplicate";
    }

    if (clcf->handler == ngx_http_session_handler) {
        return "cannot be used in a \"session_api\" location";
    }

    clcf->handler = ngx_http_session_status_handler;

    /* for the error filter: nginx's own errors here are JSON too */
    slcf->status_location = 1;

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_session_module);

    if (smcf->status_file.data == NULL) {
        smcf->status_file = cf->conf_file->file.name;
        smcf->status_line = cf->conf_file->line;
    }

    return NGX_CONF_OK;
}


ngx_int_t
ngx_http_session_status_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                     i;
    ngx_http_session_main_conf_t  *smcf;

    ngx_memset(ngx_http_session_status_slot, NGX_HTTP_SESSION_NSTATUS - 1,
               sizeof(ngx_http_session_status_slot));

    for (i = 0; i < NGX_HTTP_SESSION_NSTATUS - 1; i++) {
        ngx_http_session_status_slot[ngx_http_session_status_codes[i] - 100] =
            (u_char) i;
    }

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);

    if (smcf && smcf->shm_zone) {
        ngx_http_session_stats = ngx_http_session_zone_stats(smcf->shm_zone);
        ngx_http_session_status_take_gauges(smcf->shm_zone);
    }

    return NGX_OK;
}


/*
 * This worker's set of gauges: its slot's, zeroed (what a dead worker of
 * the slot left there goes), and marked with its pid; past the table, the
 * shared last set.  During a binary upgrade the old and the new master's
 * workers share the zone (handover.c) and their slot numbers overlap: a
 * slot whose worker is alive is left to it, and the next one is tried.
 */
static void
ngx_http_session_status_take_gauges(ngx_shm_zone_t *zone)
{
    ngx_pid_t                   pid;
    ngx_uint_t                  i, n;
    ngx_http_session_gauges_t  *g, *all;

    all = ngx_http_session_zone_gauges(zone);

    n = NGX_HTTP_SESSION_GAUGE_SLOTS - 1;
    g = NULL;

    if (ngx_process_slot >= 0 && ngx_process_slot < (ngx_int_t) n) {

        for (i = 0; i < n; i++) {
            g = &all[(ngx_process_slot + i) % n];
            pid = (ngx_pid_t) g->pid;

            /* taken with a compare-and-set: a worker of each binary */

            if ((pid == 0 || pid == ngx_pid
                 || (kill(pid, 0) == -1 && ngx_errno == NGX_ESRCH))
                && ngx_atomic_cmp_set(&g->pid, (ngx_atomic_uint_t) pid,
                                      (ngx_atomic_uint_t) ngx_pid))
            {
                break;
            }

            g = NULL;
        }
    }

    if (g == NULL) {
        ngx_http_session_gauges = &all[n];
        return;
    }

    g->polls_waiting = 0;
    g->polls_parked = 0;
    g->db_waiting = 0;
    ngx_memory_barrier();

    ngx_http_session_gauges = g;
}


/* the log phase: every answer of a session_api location, by status */

ngx_int_t
ngx_http_session_status_log(ngx_http_request_t *r)
{
    ngx_uint_t  i, status;

    if (r->content_handler != ngx_http_session_handler
        || ngx_http_session_stats == NULL)
    {
        return NGX_OK;
    }

    status = r->err_status ? r->err_status : r->headers_out.status;

    i = (status >= 100 && status < 600)
        ? ngx_http_session_status_slot[status - 100]
        : NGX_HTTP_SESSION_NSTATUS - 1;

    ngx_http_session_stat_add(&ngx_http_session_stats->status[i], 1);

    return NGX_OK;
}


ngx_int_t
ngx_http_session_status_handler(ngx_http_request_t *r)
{
    u_char                     *p;
    ngx_int_t                   rc;
    ngx_buf_t                  *b;
    ngx_uint_t                  format;
    ngx_http_session_status_t   st;

    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) {
        if (ngx_http_session_header_add(r, &ngx_http_session_status_allow,
                                        (u_char *) "GET, HEAD",
                                        sizeof("GET, HEAD") - 1)
            == NULL)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_session_error(r,
                                     NGX_HTTP_SESSION_ERR_METHOD_NOT_ALLOWED);
    }

    rc = ngx_http_session_status_format(r, &format);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    ngx_http_session_status_read(r, &st);

    /* a line per figure and per status, with room to spare */
    b = ngx_create_temp_buf(r->pool, (NGX_HTTP_SESSION_NSTATUS + 50)
                                     * NGX_HTTP_SESSION_STATUS_LINE * 2);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = (format == NGX_HTTP_SESSION_STATUS_JSON)
        ? ngx_http_session_status_json(b->pos, &st)
        : ngx_http_session_status_prometheus(b->pos, &st);

    b->last = p;

    if (ngx_http_session_header_add(r, &ngx_http_session_status_cache,
                                    (u_char *) "no-store",
                                    sizeof("no-store") - 1)
        == NULL)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return (format == NGX_HTTP_SESSION_STATUS_JSON)
           ? ngx_http_session_send_json(r, NGX_HTTP_OK, b)
           : ngx_http_session_send_typed(r, &ngx_http_session_status_text, b);
}


/*
 * NGX_DECLINED with *format set, or what sending a 400 returned.
 * "format=json" or "format=prometheus" decides; without it, an Accept
 * that names text/plain or OpenMetrics (what Prometheus sends) and not
 * JSON gets the text format, anything else JSON.
 */

static ngx_int_t
ngx_http_session_status_format(ngx_http_request_t *r, ngx_uint_t *format)
{
    u_char           *pos;
    ngx_int_t         rc;
    ngx_str_t         name, value, *accept;
    ngx_uint_t        given;
    ngx_table_elt_t  *h;

    *format = NGX_HTTP_SESSION_STATUS_JSON;
    given = 0;
    pos = r->args.data;

    for ( ;; ) {
        rc = ngx_http_session_arg_next(r, &pos, &name, &value);

        if (rc == NGX_DONE) {
            break;
        }

        if (rc == NGX_ERROR) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        if (name.len != sizeof("format") - 1
            || ngx_strncmp(name.data, "format", name.len) != 0)
        {
            return ngx_http_session_unknown_arg(r, &name);
        }

        if (value.len == sizeof("json") - 1
            && ngx_strncmp(value.data, "json", value.len) == 0)
        {
            *format = NGX_HTTP_SESSION_STATUS_JSON;

        } else if (value.len == sizeof("prometheus") - 1
                   && ngx_strncmp(value.data, "prometheus", value.len) == 0)
        {
            *format = NGX_HTTP_SESSION_STATUS_PROMETHEUS;

        } else {
            return ngx_http_session_error(r,
                                          NGX_HTTP_SESSION_ERR_STATUS_FORMAT);
        }

        given = 1;
    }

    if (given) {
        return NGX_DECLINED;
    }

#if (NGX_HTTP_HEADERS)

    h = r->headers_in.accept;
    if (h == NULL) {
        return NGX_DECLINED;
    }

    accept = &h->value;

    if ((ngx_strlcasestrn(accept->data, accept->data + accept->len,
                          (u_char *) "text/plain", sizeof("text/plain") - 2)
         || ngx_strlcasestrn(accept->data, accept->data + accept->len,
                             (u_char *) "application/openmetrics-text",
                             sizeof("application/openmetrics-text") - 2))
        && ngx_strlcasestrn(accept->data, accept->data + accept->len,
                            (u_char *) "application/json",
                            sizeof("application/json") - 2)
           == NULL)
    {
        *format = NGX_HTTP_SESSION_STATUS_PROMETHEUS;
    }

#endif

    return NGX_DECLINED;
}


static void
ngx_http_session_status_read(ngx_http_request_t *r,
    ngx_http_session_status_t *st)
{
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    /* each counter read once, though others may move meanwhile */
    st->s = *ngx_http_session_zone_stats(smcf->shm_zone);
    st->zone = smcf->shm_zone->shm.name;
    st->cluster = (smcf->limit_scope == NGX_HTTP_SESSION_SCOPE_CLUSTER);

    ngx_http_session_status_sum_gauges(smcf->shm_zone, &st->g);

    ngx_http_session_zone_figures(smcf->shm_zone, &st->fig);
}


/*
 * The gauges of the processes alive: a set whose pid is gone (its worker
 * died and no process has taken the slot since) counts no more
 */
static void
ngx_http_session_status_sum_gauges(ngx_shm_zone_t *zone,
    ngx_http_session_gauges_t *sum)
{
    ngx_uint_t                  i;
    ngx_pid_t                   pid;
    ngx_http_session_gauges_t  *g;

    ngx_memzero(sum, sizeof(ngx_http_session_gauges_t));

    g = ngx_http_session_zone_gauges(zone);

    for (i = 0; i < NGX_HTTP_SESSION_GAUGE_SLOTS; i++) {

        if (g[i].polls_waiting == 0 && g[i].polls_parked == 0
            && g[i].db_waiting == 0)
        {
            continue;
        }

        pid = (ngx_pid_t) g[i].pid;

        if (i < NGX_HTTP_SESSION_GAUGE_SLOTS - 1
            && (pid == 0 || (kill(pid, 0) == -1 && ngx_errno == NGX_ESRCH)))
        {
            continue;
        }

        sum->polls_waiting += g[i].polls_waiting;
        sum->polls_parked += g[i].polls_parked;
        sum->db_waiting += g[i].db_waiting;
    }
}


static u_char *
ngx_http_session_status_json(u_char *p, ngx_http_session_status_t *st)
{
    ngx_uint_t         i;
    ngx_atomic_uint_t  total;

    total = 0;

    for (i = 0; i < NGX_HTTP_SESSION_NSTATUS; i++) {
        total += st->s.status[i];
    }

    p = ngx_sprintf(p, "{\"counters_since\": %T, \"requests\": "
                    "{\"total\": %uA, \"by_status\": {", st->s.started, total);

    for (i = 0; i < NGX_HTTP_SESSION_NSTATUS - 1; i++) {
        p = ngx_sprintf(p, "\"%ui\": %uA, ",
                        ngx_http_session_status_codes[i], st->s.status[i]);
    }

    p = ngx_sprintf(p, "\"other\": %uA}}, ", st->s.status[i]);

    p = ngx_sprintf(p,
                   "\"rate_limited\": %uA, "
                   "\"auth_cache\": {\"hits\": %uA, \"misses\": %uA, "
                   "\"entries\": %ui, \"seen_valid\": %ui, "
                   "\"seen_forgotten\": %ui}, "
                   "\"database\": {\"queries\": %uA, \"failures\": %uA, "
                   "\"batches\": %uA, \"batched\": %uA, \"waiting\": %uA}, "
                   "\"long_poll\": {\"waiting\": %uA, \"parked\": %uA, "
                   "\"reads\": %uA}, "
                   "\"expiry_sweep\": {\"runs\": %uA, "
                   "\"sessions_expired\": %uA, \"sessions_purged\": %uA}, "
                   "\"webhooks\": {\"delivered\": %uA, \"retried\": %uA, "
                   "\"failed\": %uA, \"queue\": ",
                   st->s.rate_limited, st->s.auth_hits, st->s.auth_misses,
                   st->fig.auth_entries, st->fig.seen, st->fig.seen_forgotten,
                   st->s.db_queries, st->s.db_failures,
                   st->s.db_batches, st->s.db_batched, st->g.db_waiting,
                   st->g.polls_waiting, st->g.polls_parked, st->s.poll_reads,
                   st->s.sweeps,
                   st->s.expired, st->s.purged, st->s.webhooks_delivered,
                   st->s.webhooks_retried, st->s.webhooks_failed);

    /* the outbox as one worker measured it last (null: not yet) */

    if (st->s.webhooks_measured == 0) {
        p = ngx_cpymem(p, "null", 4);

    } else {
        p = ngx_sprintf(p, "{\"depth\": %uA, \"oldest_due_seconds\": ",
                        st->s.webhooks_queued);
        p = ngx_http_session_status_ms(p, st->s.webhooks_oldest_due);
        p = ngx_cpymem(p, ", \"measured_at\": ",
                       sizeof(", \"measured_at\": ") - 1);
        p = ngx_http_session_status_ms(p, st->s.webhooks_measured);
        *p++ = '}';
    }

    /* session_limit_scope, and the leases of its cluster scope */

    p = ngx_sprintf(p, "}, "
                   "\"rate_limit\": {\"scope\": \"%s\", \"leases\": %uA, "
                   "\"leased\": %uA, \"spent\": %uA, \"failures\": %uA, "
                   "\"waits\": %uA, \"held\": %ui, \"unused\": %uA",
                   st->cluster ? "cluster" : "node", st->s.leases,
                   st->s.lease_granted, st->s.lease_spent,
                   st->s.lease_failures, st->s.lease_waits,
                   st->fig.lease_held, st->s.lease_unused);

    return ngx_sprintf(p, "}, "
                   "\"zone\": {\"name\": \"%V\", \"size\": %uz, "
                   "\"free\": %uz, \"keys\": %ui, \"evictions\": %ui}}\n",
                   &st->zone, st->fig.size, st->fig.free, st->fig.keys,
                   st->fig.evictions);
}


/* milliseconds as seconds with three decimals */

static u_char *
ngx_http_session_status_ms(u_char *p, ngx_atomic_uint_t ms)
{
    return ngx_sprintf(p, "%uA.%03uA", ms / 1000, ms % 1000);
}


static u_char *
ngx_http_session_status_prometheus(u_char *p, ngx_http_session_status_t *st)
{
    ngx_uint_t  i;

    p = ngx_sprintf(p, "# HELP session_api_requests_total Answers of "
                    "session_api locations, by status.\n"
                    "# TYPE session_api_requests_total counter\n");

    for (i = 0; i < NGX_HTTP_SESSION_NSTATUS - 1; i++) {
        p = ngx_sprintf(p, "session_api_requests_total{status=\"%ui\"} %uA\n",
                        ngx_http_session_status_codes[i], st->s.status[i]);
    }

    p = ngx_sprintf(p, "session_api_requests_total{status=\"other\"} %uA\n",
                    st->s.status[i]);

    p = ngx_http_session_status_metric(p, "rate_limited_total", "counter",
                            "Requests refused with 429 rate limit exceeded.",
                            st->s.rate_limited);
    p = ngx_http_session_status_metric(p, "auth_cache_hits_total", "counter",
                            "Keys the shared auth cache answered for.",
                            st->s.auth_hits);
    p = ngx_http_session_status_metric(p, "auth_cache_misses_total",
                            "counter", "Keys looked up in the database.",
                            st->s.auth_misses);
    p = ngx_http_session_status_metric(p, "auth_cache_entries", "gauge",
                            "Keys in the shared auth cache.",
                            st->fig.auth_entries);
    p = ngx_http_session_status_metric(p, "auth_seen_valid_keys", "gauge",
                            "Keys found valid within the last hour, served "
                            "whatever their address's failures.",
                            st->fig.seen);
    p = ngx_http_session_status_metric(p, "auth_seen_forgotten_total",
                            "counter", "Keys found valid within the last "
                            "hour that a full zone forgot.",
                            st->fig.seen_forgotten);
    p = ngx_http_session_status_metric(p, "db_queries_total", "counter",
                            "Statements PostgreSQL answered.",
                            st->s.db_queries);
    p = ngx_http_session_status_metric(p, "db_failures_total", "counter",
                            "Statements without an answer (no connection, "
                            "timeout): 503.", st->s.db_failures);
    p = ngx_http_session_status_metric(p, "db_batches_total", "counter",
                            "Pipelines of waiting reads sent under one "
                            "Sync.", st->s.db_batches);
    p = ngx_http_session_status_metric(p, "db_batched_total", "counter",
                            "Reads sent in those pipelines.",
                            st->s.db_batched);
    p = ngx_http_session_status_metric(p, "db_waiting", "gauge",
                            "Statements waiting for a connection now.",
                            st->g.db_waiting);
    p = ngx_http_session_status_metric(p, "polls_waiting", "gauge",
                            "Long polls waiting now.", st->g.polls_waiting);
    p = ngx_http_session_status_metric(p, "polls_parked", "gauge",
                            "Of the waiting long polls, those that hold only "
                            "their connection.", st->g.polls_parked);
    p = ngx_http_session_status_metric(p, "poll_reads_total", "counter",
                            "Reads of a session, each shared by the long "
                            "polls that wait on it.", st->s.poll_reads);
    p = ngx_http_session_status_metric(p, "expiry_sweeps_total", "counter",
                            "Expiry sweeps run by this node.", st->s.sweeps);
    p = ngx_http_session_status_metric(p, "sessions_expired_total",
                            "counter", "Sessions this node's sweeps expired.",
                            st->s.expired);
    p = ngx_http_session_status_metric(p, "sessions_purged_total",
                            "counter", "Sessions this node's sweeps deleted "
                            "after session_retention.", st->s.purged);
    p = ngx_http_session_status_metric(p, "webhooks_delivered_total",
                            "counter", "Webhook events this node delivered "
                            "(2xx).", st->s.webhooks_delivered);
    p = ngx_http_session_status_metric(p, "webhooks_retried_total",
                            "counter", "Webhook attempts that failed and "
                            "were rescheduled.", st->s.webhooks_retried);
    p = ngx_http_session_status_metric(p, "webhooks_failed_total",
                            "counter", "Webhook events given up after "
                            "session_webhook_max_attempts.",
                            st->s.webhooks_failed);

    if (st->s.webhooks_measured) {
        p = ngx_http_session_status_metric(p, "webhook_queue_depth", "gauge",
                            "Webhook events not delivered nor failed (due, "
                            "scheduled or in flight), as last measured.",
                            st->s.webhooks_queued);
        p = ngx_sprintf(p, "# HELP session_api_webhook_oldest_due_seconds "
                        "How long the oldest due webhook event had been "
                        "due, as last measured.\n"
                        "# TYPE session_api_webhook_oldest_due_seconds "
                        "gauge\nsession_api_webhook_oldest_due_seconds ");
        p = ngx_http_session_status_ms(p, st->s.webhooks_oldest_due);
        p = ngx_sprintf(p, "\n# HELP session_api_webhook_queue_measured_"
                        "timestamp_seconds When the webhook queue was last "
                        "measured (Unix time).\n"
                        "# TYPE session_api_webhook_queue_measured_"
                        "timestamp_seconds gauge\n"
                        "session_api_webhook_queue_measured_timestamp_"
                        "seconds ");
        p = ngx_http_session_status_ms(p, st->s.webhooks_measured);
        *p++ = LF;
    }

    p = ngx_http_session_status_metric(p, "rate_leases_total", "counter",
                            "Lease statements sent (session_limit_scope "
                            "cluster).", st->s.leases);
    p = ngx_http_session_status_metric(p, "rate_leased_total", "counter",
                            "Requests' worth of key budgets leased to this "
                            "node.", st->s.lease_granted);
    p = ngx_http_session_status_metric(p, "rate_lease_spent_total",
                            "counter", "Lease answers after which the "
                            "window's budget was leased out.",
                            st->s.lease_spent);
    p = ngx_http_session_status_metric(p, "rate_lease_failures_total",
                            "counter", "Lease statements without an answer "
                            "(waiting requests got 503).",
                            st->s.lease_failures);
    p = ngx_http_session_status_metric(p, "rate_lease_waits_total",
                            "counter", "Requests that waited for a lease.",
                            st->s.lease_waits);
    p = ngx_http_session_status_metric(p, "rate_lease_held", "gauge",
                            "Leased budget this node holds and has not "
                            "admitted yet.", st->fig.lease_held);
    p = ngx_http_session_status_metric(p, "rate_lease_unused_total",
                            "counter", "Leased budget whose window ended "
                            "unused on this node (under-admission).",
                            st->s.lease_unused);
    p = ngx_http_session_status_metric(p, "zone_size_bytes", "gauge",
                            "Size of session_limit_zone.", st->fig.size);
    p = ngx_http_session_status_metric(p, "zone_free_bytes", "gauge",
                            "Bytes in free pages of session_limit_zone.",
                            st->fig.free);
    p = ngx_http_session_status_metric(p, "zone_keys", "gauge",
                            "Keys with rate-limit counters.", st->fig.keys);
    p = ngx_http_session_status_metric(p, "zone_evictions_total", "counter",
                            "Counters evicted from a full zone.",
                            st->fig.evictions);

    return ngx_http_session_status_metric(p, "counters_start_time_seconds",
                            "gauge", "When these counters began (Unix time).",
                            (ngx_atomic_uint_t) st->s.started);
}


static u_char *
ngx_http_session_status_metric(u_char *p, const char *name, const char *type,
    const char *help, ngx_atomic_uint_t value)
{
    return ngx_sprintf(p, "# HELP session_api_%s %s\n"
                       "# TYPE session_api_%s %s\n"
                       "session_api_%s %uA\n",
                       name, help, name, type, name, value);
}
