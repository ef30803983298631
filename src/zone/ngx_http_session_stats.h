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
    /* the long poll's shared reads of sessions */
    ngx_atomic_t        poll_reads;
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
     * second, see ngx_http_session_webhook_outbox.c): pending events, the
     * age of the oldest due one in ms, when (Unix time in ms, 0: never),
     * and the ngx_current_msec from which the next measurement may start.
     */
    ngx_atomic_t        webhooks_queued;
    ngx_atomic_t        webhooks_oldest_due;
    ngx_atomic_t        webhooks_measured;
    ngx_atomic_t        webhooks_measure_next;
    /* pipelines of waiting reads sent under one Sync, the reads in them */
    ngx_atomic_t        db_batches;
    ngx_atomic_t        db_batched;
    /*
     * session_limit_scope cluster: lease statements sent, the requests'
     * worth they were granted, the answers that found the window's budget
     * spent, the statements that got no answer, the requests that waited
     * for a lease, and the budget a window ended with unused (what this
     * node held and did not admit: the under-admission)
     */
    ngx_atomic_t        leases;
    ngx_atomic_t        lease_granted;
    ngx_atomic_t        lease_spent;
    ngx_atomic_t        lease_failures;
    ngx_atomic_t        lease_waits;
    ngx_atomic_t        lease_unused;
    /* when the zone, and so the counters, began */
    time_t              started;
} ngx_http_session_stats_t;


/*
 * The gauges (how many now), one set per worker process, so that a worker
 * that dies (a crash, SIGKILL) takes its share with it: each set belongs
 * to a slot of the master's process table (ngx_process_slot, unique among
 * the processes alive, and the slot a dead worker's replacement gets),
 * is zeroed by the process that takes the slot, and carries its pid;
 * session_status sums the sets of the processes alive.  Processes whose
 * slot is past the table share its last set, which has no pid and is
 * always counted.
 */
#define NGX_HTTP_SESSION_GAUGE_SLOTS  128

typedef struct {
    /* polls waiting now, and of those the ones whose request is freed */
    ngx_atomic_t        polls_waiting;
    ngx_atomic_t        polls_parked;
    /* queries waiting for a connection now; streamed uploads apart */
    ngx_atomic_t        db_waiting;
    ngx_atomic_t        uploads_waiting;
    /* the process the set belongs to, 0: shared */
    ngx_atomic_t        pid;
} ngx_http_session_gauges_t;


/* this worker's view of the zone's counters, NULL outside workers */
extern ngx_http_session_stats_t  *ngx_http_session_stats;

/* this worker's set of gauges, NULL outside workers */
extern ngx_http_session_gauges_t  *ngx_http_session_gauges;


static ngx_inline void
ngx_http_session_stat_add(ngx_atomic_t *counter, ngx_atomic_int_t n)
{
    (void) ngx_atomic_fetch_add(counter, n);
}


#define ngx_http_session_stat(field, n)                                       \
    if (ngx_http_session_stats) {                                             \
        ngx_http_session_stat_add(&ngx_http_session_stats->field, n);         \
    }

#define ngx_http_session_gauge(field, n)                                      \
    if (ngx_http_session_gauges) {                                            \
        ngx_http_session_stat_add(&ngx_http_session_gauges->field, n);        \
    }


#endif /* _NGX_HTTP_SESSION_STATS_H_INCLUDED_ */
