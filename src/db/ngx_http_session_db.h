/*
 * PostgreSQL from inside the event loop: a per-worker pool of nonblocking
 * libpq connections whose sockets are nginx connections, a bounded queue
 * of waiting queries, timeouts, and reconnection with backoff.
 */

#ifndef _NGX_HTTP_SESSION_DB_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_H_INCLUDED_


#include "ngx_http_session_common.h"

#include <libpq-fe.h>

#include "ngx_http_session_db_hosts.h"
#include "ngx_http_session_sql.h"


#define NGX_HTTP_SESSION_DB_MAX_PARAMS  16
/* the most reads one connection sends under one Sync (session_db_batch) */
#define NGX_HTTP_SESSION_DB_BATCH_MAX   64


typedef struct ngx_http_session_db_conn_s  ngx_http_session_db_conn_t;

typedef void (*ngx_http_session_db_conn_pt)(ngx_http_session_db_conn_t *dc);
typedef void (*ngx_http_session_db_notify_pt)(ngx_http_session_db_conn_t *dc,
    PGnotify *n);

/*
 * Called once per query: res is the query's result (the caller reads it,
 * the pool frees it afterwards, unless the query has keep_result: then
 * the handler owns res and must PQclear() it), or NULL when the database
 * is unavailable: no connection, lost connection, or past
 * session_db_timeout.
 */
typedef void (*ngx_http_session_db_handler_pt)(
    ngx_http_session_db_query_t *q, PGresult *res);


struct ngx_http_session_db_conn_s {
    PGconn                          *pg;
    ngx_connection_t                *connection;
    /* the inode of the socket that connection watches */
    ino_t                            socket_ino;
    ngx_log_t                       *log;
    const char                      *conninfo;
    /*
     * fallback_application_name: what the connection is for, as
     * pg_stat_activity shows it unless the conninfo names one
     */
    const char                      *role;
    /* host names to resolve before each attempt, or NULL */
    ngx_http_session_dbhosts_t      *hosts;
    ngx_http_session_dbhost_ctx_t    resolve;
    /* server options: the conninfo's own and statement_timeout */
    const char                      *options;
    ngx_msec_t                       timeout;

    /*
     * connect timeout while connecting, backoff while closed, the idle
     * check while idle, the check's timeout while it runs
     */
    ngx_event_t                      timer;
    /* the base delay of the next reconnect, see core/..._backoff.h */
    ngx_msec_t                       backoff;
    /* when the connection got usable, 0 while it is not */
    ngx_msec_t                       connected;
    /* when the current (or last) connection attempt began */
    ngx_msec_t                       started;
    /* session_db_idle_check: an idle connection is checked this often */
    ngx_msec_t                       check;

    ngx_uint_t                       state;
    ngx_http_session_db_query_t     *query;
    /*
     * Reads sent together in pipeline mode under one Sync (see db.c),
     * in the order of their results; a slot is NULL once its query went
     * away.  nbatch is 0 outside a pipeline, nread counts the answered.
     */
    ngx_http_session_db_query_t    **batch;
    ngx_uint_t                       nbatch;
    ngx_uint_t                       nread;
    /* parameter bytes of the running query, see RECYCLE_SIZE */
    size_t                           sent;
    PGresult                        *result;

    /* connected and idle for the first time since (re)connecting */
    ngx_http_session_db_conn_pt      ready;
    /* results of a query sent without a query object were read */
    ngx_http_session_db_conn_pt      drained;
    ngx_http_session_db_notify_pt    notify;
    void                            *data;

    unsigned                         failed_before:1;
    /* the last attempt failed to connect before its timeout */
    unsigned                         refused:1;
    unsigned                         timed_out:1;
    /* the idle check (an empty query) waits for its answer */
    unsigned                         checking:1;
    /* the pool's statements are being prepared, or are */
    unsigned                         preparing:1;
    unsigned                         prepared:1;
    /* a result of the pipeline was large: reconnect once it is over */
    unsigned                         recycle:1;
};


struct ngx_http_session_db_query_s {
    ngx_queue_t                      queue;
    ngx_event_t                      timeout;
    /* NULL for a query that serves no request (timers, cleanups) */
    ngx_http_request_t              *request;
    ngx_log_t                       *log;
    ngx_http_session_db_conn_t      *conn;

    const char                      *sql;
    /* a statement every pool connection prepares, or NONE */
    ngx_http_session_stmt_e          stmt;
    int                              nparams;
    const char                      *values[NGX_HTTP_SESSION_DB_MAX_PARAMS];
    int                              lengths[NGX_HTTP_SESSION_DB_MAX_PARAMS];
    int                              formats[NGX_HTTP_SESSION_DB_MAX_PARAMS];
    int                              result_format;

    ngx_http_session_db_handler_pt   handler;
    void                            *data;

    /* the handler takes res over (e.g. to send its bytes as they are) */
    unsigned                         keep_result:1;
    /* takes turns with the other waiting queries, see db.c */
    unsigned                         first:1;
    unsigned                         queued:1;
    unsigned                         done:1;
};


ngx_int_t ngx_http_session_db_init_process(ngx_cycle_t *cycle);

/*
 * The server options every connection starts with: those of the conninfo,
 * then statement_timeout = session_db_timeout unless they set one, so
 * that a statement the module gave up on is also given up by the server
 * (its transaction rolls back) instead of finishing unseen, and
 * plan_cache_mode = force_generic_plan unless they set one, so that a
 * prepared statement is planned once per connection, not per request
 * (decision (nb)).
 */
const char *ngx_http_session_db_options(ngx_cycle_t *cycle);
void ngx_http_session_db_exit_process(ngx_cycle_t *cycle);

/* a query owned by r: freed with it, detached if r goes away first */
ngx_http_session_db_query_t *ngx_http_session_db_query_create(
    ngx_http_request_t *r, const char *sql,
    ngx_http_session_db_handler_pt handler);

/*
 * A query that serves no request: it lives in pool (the handler may
 * destroy the pool once it has read the result) and logs to log.
 */
ngx_http_session_db_query_t *ngx_http_session_db_query_create_pool(
    ngx_pool_t *pool, ngx_log_t *log, const char *sql,
    ngx_http_session_db_handler_pt handler);

/*
 * A query of one of the statements that pool connections prepare when
 * they connect: it is sent by name, with no parse and no plan, and as
 * its text where preparing failed.  Results come in binary format.
 */
ngx_http_session_db_query_t *ngx_http_session_db_query_stmt(
    ngx_http_request_t *r, ngx_http_session_stmt_e stmt,
    ngx_http_session_db_handler_pt handler);

void ngx_http_session_db_param(ngx_http_session_db_query_t *q,
    const void *value, size_t len, int binary);

/*
 * NGX_OK: the handler will be called from the event loop;
 * NGX_DECLINED: the database is unavailable now (answer 503).
 */
ngx_int_t ngx_http_session_db_query_run(ngx_http_session_db_query_t *q);

/* is res a successful result? logs the error when not */
ngx_int_t ngx_http_session_db_result_ok(ngx_http_session_db_query_t *q,
    PGresult *res);

/* the building blocks, also used by the LISTEN connection */
void ngx_http_session_db_conn_open(ngx_http_session_db_conn_t *dc);
ngx_int_t ngx_http_session_db_conn_send(ngx_http_session_db_conn_t *dc,
    const char *sql);
void ngx_http_session_db_conn_fail(ngx_http_session_db_conn_t *dc);
void ngx_http_session_db_conn_close(ngx_http_session_db_conn_t *dc);

/*
 * The worker's connection outside the pool (LISTEN): it is kicked, like
 * the pool's, when another connection of the worker gets through.
 */
void ngx_http_session_db_conn_add(ngx_http_session_db_conn_t *dc);


#endif /* _NGX_HTTP_SESSION_DB_H_INCLUDED_ */
