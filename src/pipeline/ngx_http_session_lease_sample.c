/*
 * The nodes that lease, sampled (session_limit_scope cluster, decision
 * (qo)).  A key new to the node takes its first block as a part of the
 * limit among the most nodes that the worker's lease answers listed in
 * the window and the one before (qn).  A worker that has just started
 * (on a node's start, and every worker after a reload or a binary
 * upgrade) has no such answer: it reads the number from the database
 * instead, the most nodes that the first rows of the window and of the
 * one before list.  One statement of its own pool, which nothing waits
 * for: a lease sent before its answer goes out as before, without a
 * guess, and so does every lease when the database cannot be reached
 * then, until lease answers give the guess.
 */

#include "ngx_http_session_lease_sample.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_window.h"
#include "ngx_http_session_zone_lease.h"


static void ngx_http_session_lease_sampled(ngx_http_session_db_query_t *q,
    PGresult *res);


/* the statement's pool until it is answered, NULL: none out */
static ngx_pool_t  *ngx_http_session_lease_sample_pool;


void
ngx_http_session_lease_sample_init_process(
    ngx_http_session_main_conf_t *smcf)
{
    u_char                       *p;
    uint32_t                      minute;
    ngx_pool_t                   *pool;
    ngx_http_session_db_query_t  *q;

    if (smcf->limit_scope != NGX_HTTP_SESSION_SCOPE_CLUSTER
        || smcf->shm_zone == NULL)
    {
        return;
    }

    minute = (uint32_t) ngx_http_session_window_minute(ngx_time());

    pool = ngx_create_pool(1024, ngx_cycle->log);
    if (pool == NULL) {
        return;
    }

    p = ngx_pnalloc(pool, NGX_INT32_LEN + 1);

    q = ngx_http_session_db_query_create_pool(pool, ngx_cycle->log,
                                        NGX_HTTP_SESSION_SQL_LEASE_NODES,
                                        ngx_http_session_lease_sampled);
    if (p == NULL || q == NULL) {
        goto failed;
    }

    ngx_sprintf(p, "%uD%Z", minute);
    ngx_http_session_db_param(q, p, ngx_strlen(p), 0);

    q->data = smcf->shm_zone;

    if (ngx_http_session_db_query_run(q) == NGX_OK) {
        ngx_http_session_lease_sample_pool = pool;
        return;
    }

failed:

    ngx_destroy_pool(pool);
}


void
ngx_http_session_lease_sample_exit_process(void)
{
    ngx_http_session_destroy_pool(&ngx_http_session_lease_sample_pool);
}


/* (window, nodes) for the window before and this one */

static void
ngx_http_session_lease_sampled(ngx_http_session_db_query_t *q,
    PGresult *res)
{
    int              row;
    ngx_int_t        minute, nodes[2];
    ngx_shm_zone_t  *zone;

    zone = q->data;

    if (res == NULL || ngx_http_session_db_result_ok(q, res) != NGX_OK) {
        goto done;
    }

    if (PQntuples(res) != 2 || PQnfields(res) != 2) {
        goto invalid;
    }

    for (row = 0; row < 2; row++) {
        minute = ngx_atoi((u_char *) PQgetvalue(res, row, 0),
                          PQgetlength(res, row, 0));

        nodes[row] = PQgetisnull(res, row, 1)
                     ? 0
                     : ngx_atoi((u_char *) PQgetvalue(res, row, 1),
                                PQgetlength(res, row, 1));

        if (minute == NGX_ERROR || minute > NGX_MAX_INT32_VALUE
            || nodes[row] == NGX_ERROR || nodes[row] > NGX_MAX_INT32_VALUE)
        {
            goto invalid;
        }

        ngx_http_session_lease_guess_add(zone, (uint32_t) minute,
                                         (uint32_t) nodes[row]);
    }

    ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                  "session limit: the lease rows list up to %i nodes in "
                  "this window, %i in the one before", nodes[1], nodes[0]);

    goto done;

invalid:

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "session limit: the lease rows' sample is not "
                  "(window, nodes) for two windows");

done:

    /* the query is in the pool; the database's layer frees the result */

    ngx_http_session_destroy_pool(&ngx_http_session_lease_sample_pool);
}
