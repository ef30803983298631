/*
 * Counters for session_status, in session_limit_zone: one set per node,
 * bumped with atomic adds by every worker (as nginx's stub_status does),
 * never reset while the zone lives (a reload keeps them).
 */

#ifndef _NGX_HTTP_SESSION_STATS_H_INCLUDED_
#define _NGX_HTTP_SESSION_STATS_H_INCLUDED_


#include "ngx_http_session_common.h"


/* the statuses counted one by one; any other counts as "other" */
#define NGX_HTTP_SESSION_STATUS_CODES                                         \
    200, 201, 304, 400, 401, 403, 404, 405, 409, 410, 413, 414, 415, 422,     \
    429, 499, 500, 501, 503

#define NGX_HTTP_SESSION_NSTATUS  20    /* the codes above and "other" */


typedef struct {
    /* answers of session_api locations, by status */
    ngx_atomic_t        status[NGX_HTTP_SESSION_NSTATUS];
    /* 429 "rate limit exceeded" */
    ngx_atomic_t        rate_limited;
    /* keys the auth cache knew, keys looked up in the database */
    ngx_atomic_t        auth_hits;
    ngx_atomic_t        auth_misses;
    /* statements answered, and those that got no answer (503) */
    ngx_atomic_t        db_queries;
    ngx_atomic_t        db_failures;
    /* polls waiting now; the long poll's shared reads of sessions */
    ngx_atomic_t        polls_waiting;
    ngx_atomic_t        poll_reads;
    /* of the polls waiting, those whose nginx request is freed */
    ngx_atomic_t        polls_parked;
    /* expiry sweeps that ran, sessions they expired */
    ngx_atomic_t        sweeps;
    ngx_atomic_t        expired;
    /* sessions their runs deleted after session_retention */
    ngx_atomic_t        purged;
    /* webhook attempts: delivered, failed and retried, failed for good */
    ngx_atomic_t        webhooks_delivered;
    ngx_atomic_t        webhooks_retried;
    ngx_atomic_t        webhooks_failed;
    /*
     * The outbox as last measured (one worker per node, about every
     * second, see ngx_http_session_webhook.c): pending events, the age
     * of the oldest due one in ms, when (Unix time in ms, 0: never), and
     * the ngx_current_msec from which the next measurement may start.
     */
    ngx_atomic_t        webhooks_queued;
    ngx_atomic_t        webhooks_oldest_due;
    ngx_atomic_t        webhooks_measured;
    ngx_atomic_t        webhooks_measure_next;
    /*
     * Pipelines of waiting reads sent under one Sync, the reads sent in
     * them, and the queries waiting for a connection now (all workers)
     */
    ngx_atomic_t        db_batches;
    ngx_atomic_t        db_batched;
    ngx_atomic_t        db_waiting;
    /* when the zone, and so the counters, began */
    time_t              started;
} ngx_http_session_stats_t;


/* this worker's view of the zone's counters, NULL outside workers */
extern ngx_http_session_stats_t  *ngx_http_session_stats;


static ngx_inline void
ngx_http_session_stat_add(ngx_atomic_t *counter, ngx_atomic_int_t n)
{
    (void) ngx_atomic_fetch_add(counter, n);
}


#define ngx_http_session_stat(field, n)                                       \
    if (ngx_http_session_stats) {                                             \
        ngx_http_session_stat_add(&ngx_http_session_stats->field, n);         \
    }


#endif /* _NGX_HTTP_SESSION_STATS_H_INCLUDED_ */
