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
/* no format parameter: the Accept header decides */
#define NGX_HTTP_SESSION_STATUS_NONE        2

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

#define NGX_HTTP_SESSION_METRIC_GAUGE  0x01
/* milliseconds, shown as seconds with three decimals */
#define NGX_HTTP_SESSION_METRIC_MS     0x02
/* the webhook queue as last measured: nothing until it is */
#define NGX_HTTP_SESSION_METRIC_QUEUE  0x04


/*
 * Every figure but the answers by status, once: its JSON object and name,
 * its Prometheus name (after "session_api_") and help, and where the
 * answer's copy holds it.  JSON keeps the table's order and groups.
 */
typedef struct {
    const char                 *group;
    const char                 *json;
    const char                 *prom;
    const char                 *help;
    size_t                      offset;
    size_t                      size;
    ngx_uint_t                  flags;
} ngx_http_session_metric_t;


#define ngx_http_session_metric_at(field)                                     \
    offsetof(ngx_http_session_status_t, field),                               \
    sizeof(((ngx_http_session_status_t *) 0)->field)


static const ngx_http_session_metric_t  ngx_http_session_metrics[] = {

    { NULL, "rate_limited", "rate_limited_total",
      "Requests refused with 429 rate limit exceeded.",
      ngx_http_session_metric_at(s.rate_limited), 0 },

    { "auth_cache", "hits", "auth_cache_hits_total",
      "Keys the shared auth cache answered for.",
      ngx_http_session_metric_at(s.auth_hits), 0 },
    { "auth_cache", "misses", "auth_cache_misses_total",
      "Keys looked up in the database.",
      ngx_http_session_metric_at(s.auth_misses), 0 },
    { "auth_cache", "entries", "auth_cache_entries",
      "Keys in the shared auth cache.",
      ngx_http_session_metric_at(fig.auth_entries),
      NGX_HTTP_SESSION_METRIC_GAUGE },
    { "auth_cache", "seen_valid", "auth_seen_valid_keys",
      "Keys found valid within the last hour, served whatever their "
      "address's failures.",
      ngx_http_session_metric_at(fig.seen), NGX_HTTP_SESSION_METRIC_GAUGE },
    { "auth_cache", "seen_forgotten", "auth_seen_forgotten_total",
      "Keys found valid within the last hour that a full zone forgot.",
      ngx_http_session_metric_at(fig.seen_forgotten), 0 },

    { "database", "queries", "db_queries_total",
      "Statements PostgreSQL answered.",
      ngx_http_session_metric_at(s.db_queries), 0 },
    { "database", "failures", "db_failures_total",
      "Statements without an answer (no connection, timeout): 503.",
      ngx_http_session_metric_at(s.db_failures), 0 },
    { "database", "batches", "db_batches_total",
      "Pipelines of waiting reads sent under one Sync.",
      ngx_http_session_metric_at(s.db_batches), 0 },
    { "database", "batched", "db_batched_total",
      "Reads sent in those pipelines.",
      ngx_http_session_metric_at(s.db_batched), 0 },
    { "database", "waiting", "db_waiting",
      "Statements waiting for a connection now.",
      ngx_http_session_metric_at(g.db_waiting),
      NGX_HTTP_SESSION_METRIC_GAUGE },
    { "database", "uploads_waiting", "db_uploads_waiting",
      "Streamed uploads waiting for an upload connection now.",
      ngx_http_session_metric_at(g.uploads_waiting),
      NGX_HTTP_SESSION_METRIC_GAUGE },

    { "long_poll", "waiting", "polls_waiting",
      "Long polls waiting now.",
      ngx_http_session_metric_at(g.polls_waiting),
      NGX_HTTP_SESSION_METRIC_GAUGE },
    { "long_poll", "parked", "polls_parked",
      "Of the waiting long polls, those that hold only their connection.",
      ngx_http_session_metric_at(g.polls_parked),
      NGX_HTTP_SESSION_METRIC_GAUGE },
    { "long_poll", "reads", "poll_reads_total",
      "Reads of a session, each shared by the long polls that wait on it.",
      ngx_http_session_metric_at(s.poll_reads), 0 },

    { "expiry_sweep", "runs", "expiry_sweeps_total",
      "Expiry sweeps run by this node.",
      ngx_http_session_metric_at(s.sweeps), 0 },
    { "expiry_sweep", "sessions_expired", "sessions_expired_total",
      "Sessions this node's sweeps expired.",
      ngx_http_session_metric_at(s.expired), 0 },
    { "expiry_sweep", "sessions_purged", "sessions_purged_total",
      "Sessions this node's sweeps deleted after session_retention.",
      ngx_http_session_metric_at(s.purged), 0 },

    { "webhooks", "delivered", "webhooks_delivered_total",
      "Webhook events this node delivered (2xx).",
      ngx_http_session_metric_at(s.webhooks_delivered), 0 },
    { "webhooks", "retried", "webhooks_retried_total",
      "Webhook attempts that failed and were rescheduled.",
      ngx_http_session_metric_at(s.webhooks_retried), 0 },
    { "webhooks", "failed", "webhooks_failed_total",
      "Webhook events given up after session_webhook_max_attempts.",
      ngx_http_session_metric_at(s.webhooks_failed), 0 },
    { "webhooks", "depth", "webhook_queue_depth",
      "Webhook events not delivered nor failed (due, scheduled or in "
      "flight), as last measured.",
      ngx_http_session_metric_at(s.webhooks_queued),
      NGX_HTTP_SESSION_METRIC_GAUGE|NGX_HTTP_SESSION_METRIC_QUEUE },
    { "webhooks", "oldest_due_seconds", "webhook_oldest_due_seconds",
      "How long the oldest due webhook event had been due, as last "
      "measured.",
      ngx_http_session_metric_at(s.webhooks_oldest_due),
      NGX_HTTP_SESSION_METRIC_GAUGE|NGX_HTTP_SESSION_METRIC_MS
      |NGX_HTTP_SESSION_METRIC_QUEUE },
    { "webhooks", "measured_at",
      "webhook_queue_measured_timestamp_seconds",
      "When the webhook queue was last measured (Unix time).",
      ngx_http_session_metric_at(s.webhooks_measured),
      NGX_HTTP_SESSION_METRIC_GAUGE|NGX_HTTP_SESSION_METRIC_MS
      |NGX_HTTP_SESSION_METRIC_QUEUE },

    { "rate_limit", "leases", "rate_leases_total",
      "Lease statements sent (session_limit_scope cluster).",
      ngx_http_session_metric_at(s.leases), 0 },
    { "rate_limit", "leased", "rate_leased_total",
      "Requests' worth of key budgets leased to this node.",
      ngx_http_session_metric_at(s.lease_granted), 0 },
    { "rate_limit", "spent", "rate_lease_spent_total",
      "Lease answers after which the window's budget was leased out.",
      ngx_http_session_metric_at(s.lease_spent), 0 },
    { "rate_limit", "failures", "rate_lease_failures_total",
      "Lease statements without an answer (waiting requests got 503).",
      ngx_http_session_metric_at(s.lease_failures), 0 },
    { "rate_limit", "waits", "rate_lease_waits_total",
      "Requests that waited for a lease.",
      ngx_http_session_metric_at(s.lease_waits), 0 },
    { "rate_limit", "held", "rate_lease_held",
      "Leased budget this node holds and has not admitted yet.",
      ngx_http_session_metric_at(fig.lease_held),
      NGX_HTTP_SESSION_METRIC_GAUGE },
    { "rate_limit", "unused", "rate_lease_unused_total",
      "Leased budget whose window ended unused on this node "
      "(under-admission).",
      ngx_http_session_metric_at(s.lease_unused), 0 },

    { "zone", "size", "zone_size_bytes",
      "Size of session_limit_zone.",
      ngx_http_session_metric_at(fig.size), NGX_HTTP_SESSION_METRIC_GAUGE },
    { "zone", "free", "zone_free_bytes",
      "Bytes in free pages of session_limit_zone.",
      ngx_http_session_metric_at(fig.free), NGX_HTTP_SESSION_METRIC_GAUGE },
    { "zone", "keys", "zone_keys",
      "Keys with rate-limit counters.",
      ngx_http_session_metric_at(fig.keys), NGX_HTTP_SESSION_METRIC_GAUGE },
    { "zone", "evictions", "zone_evictions_total",
      "Counters evicted from a full zone.",
      ngx_http_session_metric_at(fig.evictions), 0 },

    { NULL, NULL, NULL, NULL, 0, 0, 0 }
};


static ngx_int_t ngx_http_session_status_format(ngx_http_request_t *r,
    ngx_uint_t *format);
static void ngx_http_session_status_take_gauges(ngx_shm_zone_t *zone);
static void ngx_http_session_status_sum_gauges(ngx_shm_zone_t *zone,
    ngx_http_session_gauges_t *sum);
static ngx_int_t ngx_http_session_status_format_arg(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static void ngx_http_session_status_read(ngx_http_request_t *r,
    ngx_http_session_status_t *st);
static u_char *ngx_http_session_status_json(u_char *p,
    ngx_http_session_status_t *st);
static u_char *ngx_http_session_status_prometheus(u_char *p,
    ngx_http_session_status_t *st);
static u_char *ngx_http_session_status_value(u_char *p,
    ngx_http_session_status_t *st, const ngx_http_session_metric_t *m);


ngx_http_session_stats_t   *ngx_http_session_stats;
ngx_http_session_gauges_t  *ngx_http_session_gauges;


static const ngx_http_session_arg_t  ngx_http_session_status_args[] = {
    { ngx_string("format"), ngx_http_session_status_format_arg, 0, 0 },
    { ngx_null_string, NULL, 0, 0 }
};

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
    g->uploads_waiting = 0;
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
    ngx_int_t         rc;
    ngx_str_t        *accept;
    ngx_table_elt_t  *h;

    *format = NGX_HTTP_SESSION_STATUS_NONE;

    rc = ngx_http_session_args(r, ngx_http_session_status_args, format);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (*format != NGX_HTTP_SESSION_STATUS_NONE) {
        return NGX_DECLINED;
    }

    *format = NGX_HTTP_SESSION_STATUS_JSON;

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


/* "format": json or prometheus */

static ngx_int_t
ngx_http_session_status_format_arg(ngx_http_request_t *r, ngx_str_t *value,
    void *field, ngx_uint_t data)
{
    ngx_uint_t  *format = field;

    if (value->len == sizeof("json") - 1
        && ngx_strncmp(value->data, "json", value->len) == 0)
    {
        *format = NGX_HTTP_SESSION_STATUS_JSON;

    } else if (value->len == sizeof("prometheus") - 1
               && ngx_strncmp(value->data, "prometheus", value->len) == 0)
    {
        *format = NGX_HTTP_SESSION_STATUS_PROMETHEUS;

    } else {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_STATUS_FORMAT);
    }

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
            && g[i].db_waiting == 0 && g[i].uploads_waiting == 0)
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
        sum->uploads_waiting += g[i].uploads_waiting;
    }
}


static u_char *
ngx_http_session_status_json(u_char *p, ngx_http_session_status_t *st)
{
    ngx_uint_t                        i;
    const char                       *group, *sep, *qsep;
    ngx_atomic_uint_t                 total;
    const ngx_http_session_metric_t  *m;

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

    p = ngx_sprintf(p, "\"other\": %uA}}", st->s.status[i]);

    /* the table, its groups as objects; the queue is null until measured */

    group = NULL;
    sep = ", ";
    qsep = "";

    for (m = ngx_http_session_metrics; m->prom; m++) {

        if (m->group != group) {
            if (group) {
                *p++ = '}';
            }

            group = m->group;

            if (group == NULL) {
                sep = ", ";

            } else {
                p = ngx_sprintf(p, ", \"%s\": {", group);
                sep = "";
            }

            if (group && ngx_strcmp(group, "zone") == 0) {
                p = ngx_sprintf(p, "\"name\": \"%V\"", &st->zone);
                sep = ", ";
            }

            if (group && ngx_strcmp(group, "rate_limit") == 0) {
                p = ngx_sprintf(p, "\"scope\": \"%s\"",
                                st->cluster ? "cluster" : "node");
                sep = ", ";
            }
        }

        if (!(m->flags & NGX_HTTP_SESSION_METRIC_QUEUE)) {
            p = ngx_sprintf(p, "%s\"%s\": ", sep, m->json);
            p = ngx_http_session_status_value(p, st, m);
            sep = ", ";
            continue;
        }

        /* the rows of the queue: one object, or null */

        if (m == ngx_http_session_metrics
            || !(m[-1].flags & NGX_HTTP_SESSION_METRIC_QUEUE))
        {
            p = ngx_sprintf(p, "%s\"queue\": ", sep);
            sep = ", ";

            if (st->s.webhooks_measured == 0) {
                p = ngx_cpymem(p, "null", 4);

                while (m[1].prom
                       && (m[1].flags & NGX_HTTP_SESSION_METRIC_QUEUE))
                {
                    m++;
                }

                continue;
            }

            *p++ = '{';
            qsep = "";
        }

        p = ngx_sprintf(p, "%s\"%s\": ", qsep, m->json);
        p = ngx_http_session_status_value(p, st, m);
        qsep = ", ";

        if (!(m[1].prom && (m[1].flags & NGX_HTTP_SESSION_METRIC_QUEUE))) {
            *p++ = '}';
        }
    }

    if (group) {
        *p++ = '}';
    }

    return ngx_cpymem(p, "}\n", 2);
}


static u_char *
ngx_http_session_status_prometheus(u_char *p, ngx_http_session_status_t *st)
{
    ngx_uint_t                        i;
    const ngx_http_session_metric_t  *m;

    p = ngx_sprintf(p, "# HELP session_api_requests_total Answers of "
                    "session_api locations, by status.\n"
                    "# TYPE session_api_requests_total counter\n");

    for (i = 0; i < NGX_HTTP_SESSION_NSTATUS - 1; i++) {
        p = ngx_sprintf(p, "session_api_requests_total{status=\"%ui\"} %uA\n",
                        ngx_http_session_status_codes[i], st->s.status[i]);
    }

    p = ngx_sprintf(p, "session_api_requests_total{status=\"other\"} %uA\n",
                    st->s.status[i]);

    for (m = ngx_http_session_metrics; m->prom; m++) {

        if ((m->flags & NGX_HTTP_SESSION_METRIC_QUEUE)
            && st->s.webhooks_measured == 0)
        {
            continue;
        }

        p = ngx_sprintf(p, "# HELP session_api_%s %s\n"
                        "# TYPE session_api_%s %s\n"
                        "session_api_%s ",
                        m->prom, m->help, m->prom,
                        (m->flags & NGX_HTTP_SESSION_METRIC_GAUGE)
                        ? "gauge" : "counter", m->prom);
        p = ngx_http_session_status_value(p, st, m);
        *p++ = LF;
    }

    return ngx_sprintf(p, "# HELP session_api_counters_start_time_seconds "
                       "When these counters began (Unix time).\n"
                       "# TYPE session_api_counters_start_time_seconds "
                       "gauge\n"
                       "session_api_counters_start_time_seconds %T\n",
                       st->s.started);
}


/* one figure of the table, read from the answer's copy */

static u_char *
ngx_http_session_status_value(u_char *p, ngx_http_session_status_t *st,
    const ngx_http_session_metric_t *m)
{
    u_char             *f;
    ngx_atomic_uint_t   v;

    f = (u_char *) st + m->offset;

    switch (m->size) {

    case sizeof(uint32_t):
        v = *(uint32_t *) f;
        break;

    default: /* sizeof(uint64_t) */
        v = (ngx_atomic_uint_t) *(uint64_t *) f;
        break;
    }

    if (m->flags & NGX_HTTP_SESSION_METRIC_MS) {
        return ngx_sprintf(p, "%uA.%03uA", v / 1000, v % 1000);
    }

    return ngx_sprintf(p, "%uA", v);
}
