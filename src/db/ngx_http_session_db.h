/*
 * PostgreSQL from inside the event loop: a per-worker pool of nonblocking
 * libpq connections whose sockets are nginx connections, a bounded queue
 * of waiting queries, timeouts, and reconnection with backoff.  This is
 * what the rest of the module uses (db_query.c); the other headers of
 * src/db/ are the folder's own.
 */

#ifndef _NGX_HTTP_SESSION_DB_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_H_INCLUDED_


#include "ngx_http_session_common.h"

#include <libpq-fe.h>

#include "ngx_http_session_sql.h"


#define NGX_HTTP_SESSION_DB_MAX_PARAMS  16
/* the most reads one connection sends under one Sync (session_db_batch) */
#define NGX_HTTP_SESSION_DB_BATCH_MAX   64

/* session_db_pooler: what stands between the pool and PostgreSQL */
#define NGX_HTTP_SESSION_POOLER_OFF          0
/* a pooler that keeps one server connection for each client's */
#define NGX_HTTP_SESSION_POOLER_SESSION      1
/* a pooler that may run each transaction on another server connection */
#define NGX_HTTP_SESSION_POOLER_TRANSACTION  2


typedef struct ngx_http_session_db_conn_s  ngx_http_session_db_conn_t;


/*
 * Called once per query: res is the query's result (the caller reads it,
 * the pool frees it afterwards, unless the query has keep_result: then
 * the handler owns res and must PQclear() it), or NULL when the database
 * is unavailable: no connection, lost connection, or past
 * session_db_timeout.
 */
typedef void (*ngx_http_session_db_handler_pt)(
    ngx_http_session_db_query_t *q, PGresult *res);


struct ngx_http_session_db_query_s {
    ngx_queue_t                      queue;
    ngx_event_t                      timeout;
    /* NULL for a query that serves no request (timers, cleanups) */
    ngx_http_request_t              *request;
    ngx_log_t                       *log;
    /* the connection that runs it, see db_conn.h */
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
    /* takes turns with the other waiting queries, see db_query.c */
    unsigned                         first:1;
    unsigned                         queued:1;
    unsigned                         done:1;
};


/*
 * A COPY ... FROM STDIN between two statements, in one transaction, on a
 * connection of its own (db_copy.c): BEGIN and before, the COPY fed from
 * read, after and COMMIT.  The statements' text and parameters are given as
 * queries (before, after) that never run on the pool.
 */
typedef struct ngx_http_session_db_copy_s  ngx_http_session_db_copy_t;

/* the next bytes of the COPY's data into buf: their count, 0 at the end */
typedef ssize_t (*ngx_http_session_db_copy_read_pt)(
    ngx_http_session_db_copy_t *cp, u_char *buf, size_t size);

/*
 * Called twice at most: with before's result (cp->phase
 * NGX_HTTP_SESSION_DB_COPY_DECIDE), when the owner calls
 * ngx_http_session_db_copy_go() or _stop() before it returns; then with
 * after's result once it has committed (NGX_HTTP_SESSION_DB_COPY_DONE),
 * or, after _stop(), with NULL once the transaction is over (cp->stopped
 * set: rolled back, or its connection closed).  res NULL otherwise: the
 * database is unavailable (or was, or the copy took longer than
 * session_db_timeout a step), nothing was committed; res is an error
 * when a statement failed.  res is freed afterwards.
 */
typedef void (*ngx_http_session_db_copy_pt)(ngx_http_session_db_copy_t *cp,
    PGresult *res);


#define NGX_HTTP_SESSION_DB_COPY_WAITING   0
#define NGX_HTTP_SESSION_DB_COPY_BEFORE    1
#define NGX_HTTP_SESSION_DB_COPY_DECIDE    2
#define NGX_HTTP_SESSION_DB_COPY_START     3
#define NGX_HTTP_SESSION_DB_COPY_DATA      4
#define NGX_HTTP_SESSION_DB_COPY_END       5
#define NGX_HTTP_SESSION_DB_COPY_AFTER     6
#define NGX_HTTP_SESSION_DB_COPY_ROLLBACK  7
#define NGX_HTTP_SESSION_DB_COPY_DONE      8


struct ngx_http_session_db_copy_s {
    ngx_queue_t                         queue;
    /* session_db_timeout for each step, the wait for a connection too */
    ngx_event_t                         timeout;
    /* posted: the next pieces of data, after other events had a turn */
    ngx_event_t                         resume;
    ngx_http_request_t                 *request;
    ngx_log_t                          *log;
    ngx_http_session_db_conn_t         *conn;

    ngx_http_session_db_query_t        *before;
    const char                         *copy;
    ngx_http_session_db_query_t        *after;

    ngx_http_session_db_copy_read_pt    read;
    ngx_http_session_db_copy_pt         handler;
    void                               *data;
    /*
     * Whose copy it is (the caller's choice; the image upload's key):
     * the waiting copies of one owner take turns with other owners'
     */
    ngx_uint_t                          owner;
    /* its place in those turns (ngx_http_session_db_copy_turn()) */
    uint64_t                            turn;
    /*
     * Not 0: copies with the same value hold a connection one at a time
     * (the image upload's session, whose row each one locks until its
     * COMMIT); the others wait in the queue, not for a lock
     */
    ngx_uint_t                          serial;

    /* a piece of the data: buf[pos..len) not handed to libpq yet */
    u_char                             *buf;
    size_t                              size;
    size_t                              pos;
    size_t                              len;
    /* bytes handed to libpq */
    off_t                               copied;

    /* the first result of each statement of a pair (see db_copy.c) */
    PGresult                           *pipe[2];
    ngx_uint_t                          npipe;

    ngx_uint_t                          phase;
    /* when before's step ends, a second try of it too (see db_copy.c) */
    ngx_msec_t                          deadline;

    unsigned                            queued:1;
    unsigned                            done:1;
    /* the owner stopped it after before's result */
    unsigned                            stopped:1;
    /*
     * before met a server without its prepared statement (26000) and
     * goes again, once, its statements as text
     */
    unsigned                            again:1;
};


ngx_int_t ngx_http_session_db_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);
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

/*
 * An answered query made ready to run again, with the same statement,
 * handler and parameters (whose values may have changed in place): a
 * request that runs one statement many times (an image's slices) does
 * not allocate a query each time.
 */
void ngx_http_session_db_query_again(ngx_http_session_db_query_t *q);

/*
 * A copy owned by r (freed with it; a copy under way when r goes away is
 * rolled back), with a buffer of size bytes for its data
 */
ngx_http_session_db_copy_t *ngx_http_session_db_copy_create(
    ngx_http_request_t *r, size_t size);

/*
 * NGX_OK: the handler will be called from the event loop; NGX_DECLINED:
 * the database is unavailable now (answer 503)
 */
ngx_int_t ngx_http_session_db_copy_run(ngx_http_session_db_copy_t *cp);

/*
 * From the handler of before's result: copy and commit, or roll back
 * (the handler is called once more when the transaction is over, so
 * that what before locked is free when the owner answers)
 */
void ngx_http_session_db_copy_go(ngx_http_session_db_copy_t *cp);
void ngx_http_session_db_copy_stop(ngx_http_session_db_copy_t *cp);

ngx_int_t ngx_http_session_db_copy_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf);
void ngx_http_session_db_copy_exit_process(ngx_cycle_t *cycle);

/*
 * A node of the long poll made (1) or freed (-1) in this worker: the
 * node's listener passes sessions' events to workers that have nodes
 * (ngx_http_session_db_relay.c)
 */
void ngx_http_session_relay_nodes(ngx_int_t n);

/* is res a successful result? logs the error when not */
ngx_int_t ngx_http_session_db_result_ok(ngx_http_session_db_query_t *q,
    PGresult *res);


/* a result held until later: freed when held, and forgotten */

static ngx_inline void
ngx_http_session_pq_clear(PGresult **res)
{
    if (*res) {
        PQclear(*res);
        *res = NULL;
    }
}


#endif /* _NGX_HTTP_SESSION_DB_H_INCLUDED_ */
